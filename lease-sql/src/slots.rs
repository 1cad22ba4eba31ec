//! Scheduler slots ([`lease_core::SlotStore`]) on the lease table's `slot_ms`,
//! `unfinished_slot_ms` and `rerun_slot_ms` columns.
//!
//! Every statement runs on the store's own connections, one round trip each on a warm
//! connection; the statements themselves are in `schema.rs` and written out in the docs of
//! [`PostgresStore`](crate::PostgresStore), [`MySqlStore`](crate::MySqlStore) and
//! [`SqliteStore`](crate::SqliteStore).
//!
//! - `claim_slot`: one read (the server's clock and the record), the decision in Rust (held,
//!   taken, early), then one write with the term read compared — an `INSERT` that does nothing
//!   on a duplicate key for a new record, an `UPDATE … WHERE term = <read>` otherwise — so among
//!   replicas that read the same record only one write matches; the others get `Held`. Two
//!   round trips. The write also asks for the lease to be expired still (a server clock stepped
//!   back could otherwise revive it under the term read). `superseded_ms` is the unfinished
//!   instant as read: when a late finish by the holder that lost the lease lands between the
//!   read and the write, the finish reports that instant's end recorded and the claim reports
//!   it superseded (the record itself ends the same either way).
//! - `finish_slot`, `claim_rerun`, `last_slot`: one statement each (SQLite's finish: one
//!   `BEGIN IMMEDIATE` transaction of a read and a write, on the embedded database).
//! - `unfinished`: one `SELECT` for all the names.

use std::collections::HashMap;

use lease_core::backend::{SlotClaim, SlotRecord};

use crate::store::remaining;

/// The claim's read: the server's clock, then the record's term, the time left on its lease,
/// `slot_ms` and `unfinished_slot_ms` (all `None` when there is no record).
type ClaimRead = (i64, Option<i64>, Option<i64>, Option<i64>, Option<i64>);

/// The record a claim writes over.
#[derive(Debug, Clone, Copy)]
struct Previous {
    term: i64,
    unfinished_ms: Option<i64>,
}

/// What a claim does after its read.
enum Next {
    /// Answer without writing.
    Answer(SlotClaim),
    /// Write: a new record (`None`) or over the one read, with its term compared.
    Write(Option<Previous>),
}

/// The claim's rules, on the record as read: held, then taken, then early.
fn decide(read: ClaimRead, instant_ms: i64) -> Next {
    let (now_ms, term, left, last, unfinished_ms) = read;
    let previous = match term {
        Some(_) if left.unwrap_or(0) > 0 => return Next::Answer(SlotClaim::Held),
        Some(term) => Some(Previous {
            term,
            unfinished_ms,
        }),
        None => None,
    };
    if let Some(last_ms) = last.filter(|last| instant_ms <= *last) {
        return Next::Answer(SlotClaim::Taken { last_ms });
    }
    if instant_ms > now_ms {
        return Next::Answer(SlotClaim::Early { now_ms });
    }
    Next::Write(previous)
}

fn claimed(term: u64, ttl_ms: i64, previous: Option<Previous>) -> SlotClaim {
    SlotClaim::Claimed {
        grant: lease_core::backend::Grant {
            term,
            expires_in: remaining(ttl_ms),
        },
        superseded_ms: previous.and_then(|p| p.unfinished_ms),
    }
}

fn record(row: (Option<i64>, Option<i64>, Option<i64>)) -> SlotRecord {
    SlotRecord {
        last_ms: row.0,
        unfinished_ms: row.1,
        rerun_ms: row.2,
    }
}

/// The rows of `unfinished`, in the order of the names asked for (as the memory store answers).
fn in_order(
    names: &[String],
    rows: impl IntoIterator<Item = (Vec<u8>, i64)>,
) -> Vec<(String, i64)> {
    let found: HashMap<Vec<u8>, i64> = rows.into_iter().collect();
    names
        .iter()
        .filter_map(|n| found.get(n.as_bytes()).map(|at| (n.clone(), *at)))
        .collect()
}

/// The names as one JSON array of strings, for SQLite's `json_each`.
#[cfg(feature = "sqlite")]
fn json_array(names: &[String]) -> String {
    use std::fmt::Write;
    let mut out = String::from("[");
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for ch in name.chars() {
            match ch {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", u32::from(c));
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push(']');
    out
}

/// The `SlotStore` impl of the dialects with `RETURNING` (PostgreSQL, SQLite). Each dialect
/// brings `finish_in` and `unfinished_rows`.
macro_rules! returning_slots {
    ($db:ty) => {
        #[lease_core::backend::async_trait]
        impl lease_core::SlotStore for $crate::SqlStore<$db> {
            async fn claim_slot(
                &self,
                name: &str,
                holder: &lease_core::backend::HolderToken,
                instance: &str,
                ttl: std::time::Duration,
                instant_ms: i64,
            ) -> lease_core::Result<lease_core::backend::SlotClaim> {
                lease_core::LeaseStoreExt::validate_name(self, name)?;
                lease_core::LeaseStoreExt::validate_ttl(self, ttl)?;
                lease_core::backend::validate_instance(instance)?;
                let ms = $crate::store::ttl_ms(ttl);
                let s = &self.inner.stmts.slots;
                let read: ClaimRead = crate::common::with_conn!(self, "claim slot", |c| {
                    sqlx::query_as(&s.read).bind(name).fetch_one(c)
                })?;
                let previous = match decide(read, instant_ms) {
                    Next::Answer(answer) => return Ok(answer),
                    Next::Write(previous) => previous,
                };
                let hex = holder.to_hex();
                let row: Option<(i64,)> = match previous {
                    None => crate::common::with_conn!(self, "claim slot", |c| {
                        sqlx::query_as(&s.insert)
                            .bind(name)
                            .bind(&hex)
                            .bind(instance)
                            .bind(ms)
                            .bind(instant_ms)
                            .fetch_optional(c)
                    })?,
                    Some(p) => crate::common::with_conn!(self, "claim slot", |c| {
                        sqlx::query_as(&s.update)
                            .bind(name)
                            .bind(&hex)
                            .bind(instance)
                            .bind(ms)
                            .bind(instant_ms)
                            .bind(p.term)
                            .fetch_optional(c)
                    })?,
                };
                match row {
                    // Another replica's write matched first.
                    None => Ok(lease_core::backend::SlotClaim::Held),
                    Some((t,)) => Ok(claimed(self.term_from(t)?, ms, previous)),
                }
            }

            async fn finish_slot(
                &self,
                name: &str,
                holder: &lease_core::backend::HolderToken,
                instant_ms: i64,
                passed_ms: Option<i64>,
            ) -> lease_core::Result<lease_core::backend::SlotFinish> {
                lease_core::LeaseStoreExt::validate_name(self, name)?;
                self.finish_in(name, &holder.to_hex(), instant_ms, passed_ms)
                    .await
            }

            async fn unfinished(&self, names: &[String]) -> lease_core::Result<Vec<(String, i64)>> {
                for name in names {
                    lease_core::LeaseStoreExt::validate_name(self, name)?;
                }
                if names.is_empty() {
                    return Ok(Vec::new());
                }
                let rows = self.unfinished_rows(names).await?;
                Ok(in_order(
                    names,
                    rows.into_iter().map(|(n, at)| (n.into_bytes(), at)),
                ))
            }

            async fn claim_rerun(
                &self,
                name: &str,
                holder: &lease_core::backend::HolderToken,
                instance: &str,
                ttl: std::time::Duration,
                instant_ms: i64,
            ) -> lease_core::Result<Option<lease_core::backend::Grant>> {
                lease_core::LeaseStoreExt::validate_name(self, name)?;
                lease_core::LeaseStoreExt::validate_ttl(self, ttl)?;
                lease_core::backend::validate_instance(instance)?;
                let ms = $crate::store::ttl_ms(ttl);
                let row: Option<(i64,)> =
                    crate::common::with_conn!(self, "claim rerun", |c| sqlx::query_as(
                        &self.inner.stmts.slots.rerun
                    )
                    .bind(name)
                    .bind(holder.to_hex())
                    .bind(instance)
                    .bind(ms)
                    .bind(instant_ms)
                    .fetch_optional(c))?;
                row.map(|(t,)| {
                    Ok(lease_core::backend::Grant {
                        term: self.term_from(t)?,
                        expires_in: remaining(ms),
                    })
                })
                .transpose()
            }

            async fn last_slot(
                &self,
                name: &str,
            ) -> lease_core::Result<Option<lease_core::backend::SlotRecord>> {
                lease_core::LeaseStoreExt::validate_name(self, name)?;
                let row: Option<(Option<i64>, Option<i64>, Option<i64>)> =
                    crate::common::with_conn!(self, "last slot", |c| sqlx::query_as(
                        &self.inner.stmts.slots.last
                    )
                    .bind(name)
                    .fetch_optional(c))?;
                Ok(row.map(record))
            }
        }
    };
}

#[cfg(feature = "postgres")]
mod postgres {
    use lease_core::{Result, backend::SlotFinish};
    use sqlx::Postgres;

    use super::*;
    use crate::store::SqlStore;

    impl SqlStore<Postgres> {
        /// The finish: one statement that locks the row, computes the outcome from it and
        /// applies it (a data-modifying CTE).
        async fn finish_in(
            &self,
            name: &str,
            hex: &str,
            instant_ms: i64,
            passed_ms: Option<i64>,
        ) -> Result<SlotFinish> {
            let row: Option<(bool, bool, bool)> =
                crate::common::with_conn!(self, "finish slot", |c| sqlx::query_as(
                    &self.inner.stmts.slots.finish
                )
                .bind(name)
                .bind(hex)
                .bind(instant_ms)
                .bind(passed_ms)
                .fetch_optional(c))?;
            Ok(row
                .map(|(recorded, passed_taken, released)| SlotFinish {
                    recorded,
                    passed_taken,
                    released,
                })
                .unwrap_or_default())
        }

        async fn unfinished_rows(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
            crate::common::with_conn!(self, "unfinished slots", |c| sqlx::query_as(
                &self.inner.stmts.slots.unfinished
            )
            .bind(names)
            .fetch_all(c))
        }
    }

    returning_slots!(Postgres);
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use lease_core::{Result, backend::SlotFinish};
    use sqlx::{Connection, Sqlite};

    use super::*;
    use crate::store::SqlStore;

    impl SqlStore<Sqlite> {
        /// The finish: SQLite's `RETURNING` sees only the new row, so the outcome is read and
        /// applied in one `BEGIN IMMEDIATE` transaction (the write lock from its first
        /// statement), on the embedded database. A future dropped mid-way closes the
        /// connection, which rolls the transaction back.
        async fn finish_in(
            &self,
            name: &str,
            hex: &str,
            instant_ms: i64,
            passed_ms: Option<i64>,
        ) -> Result<SlotFinish> {
            let s = &self.inner.stmts.slots;
            crate::common::with_conn!(self, "finish slot", |c| async move {
                let mut tx = c.begin_with("BEGIN IMMEDIATE").await?;
                let row: Option<(i64, i64, i64, i64)> = sqlx::query_as(&s.finish)
                    .bind(name)
                    .bind(hex)
                    .bind(instant_ms)
                    .bind(passed_ms)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some((held, rec, fin, due)) = row else {
                    tx.commit().await?;
                    return Ok(SlotFinish::default());
                };
                let (released, recorded) = (held != 0, rec != 0);
                let clear = recorded && fin != 0;
                let passed_taken = released && recorded && due != 0;
                if released || clear {
                    sqlx::query(&s.finish_write)
                        .bind(name)
                        .bind(passed_taken)
                        .bind(passed_ms)
                        .bind(clear)
                        .bind(released)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok::<_, sqlx::Error>(SlotFinish {
                    recorded,
                    passed_taken,
                    released,
                })
            })
        }

        async fn unfinished_rows(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
            crate::common::with_conn!(self, "unfinished slots", |c| sqlx::query_as(
                &self.inner.stmts.slots.unfinished
            )
            .bind(json_array(names))
            .fetch_all(c))
        }
    }

    returning_slots!(Sqlite);
}

#[cfg(feature = "mysql")]
mod mysql {
    use std::time::Duration;

    use lease_core::{
        Result, SlotStore,
        backend::{
            Grant, HolderToken, SlotClaim, SlotFinish, SlotRecord, async_trait, validate_instance,
        },
    };
    use sqlx::MySql;
    use sqlx::mysql::{MySqlArguments, MySqlQueryResult};
    use sqlx::query::Query;

    use super::*;
    use crate::schema::NAMES_MARKER;
    use crate::store::{SqlStore, ttl_ms};

    /// The most names one `unfinished` statement carries (MySQL allows 65,535 placeholders a
    /// statement); more take one round trip per this many.
    const NAMES_PER_STATEMENT: usize = 4096;

    impl SqlStore<MySql> {
        /// Runs a write, retried at once (up to `DEADLOCK_RETRIES` times) when InnoDB picked it
        /// as a deadlock victim: the statement was rolled back whole.
        async fn write<'q>(
            &self,
            op: &str,
            q: impl Fn() -> Query<'q, MySql, MySqlArguments>,
        ) -> Result<MySqlQueryResult> {
            let mut attempt = 0;
            loop {
                let r = crate::common::raw_conn!(self, op, |c| q().execute(c));
                match r {
                    Err(e)
                        if crate::error::is_deadlock(&e)
                            && attempt < crate::mysql::DEADLOCK_RETRIES =>
                    {
                        attempt += 1;
                    }
                    r => return r.map_err(|e| self.err(e, op)),
                }
            }
        }
    }

    #[async_trait]
    impl SlotStore for SqlStore<MySql> {
        async fn claim_slot(
            &self,
            name: &str,
            holder: &HolderToken,
            instance: &str,
            ttl: Duration,
            instant_ms: i64,
        ) -> Result<SlotClaim> {
            lease_core::LeaseStoreExt::validate_name(self, name)?;
            lease_core::LeaseStoreExt::validate_ttl(self, ttl)?;
            validate_instance(instance)?;
            let ms = ttl_ms(ttl);
            let s = &self.inner.stmts.slots;
            let read: ClaimRead = crate::common::with_conn!(self, "claim slot", |c| {
                sqlx::query_as(&s.read).bind(name).fetch_one(c)
            })?;
            let previous = match decide(read, instant_ms) {
                Next::Answer(answer) => return Ok(answer),
                Next::Write(previous) => previous,
            };
            let hex = holder.to_hex();
            // LAST_INSERT_ID is the new term, or 0 when the write did not match (a duplicate
            // key, or a term that moved on since the read).
            let done = match previous {
                None => {
                    self.write("claim slot", || {
                        sqlx::query(&s.insert)
                            .bind(name)
                            .bind(&hex)
                            .bind(instance)
                            .bind(ms)
                            .bind(instant_ms)
                            .bind(instant_ms)
                    })
                    .await?
                }
                Some(p) => {
                    self.write("claim slot", || {
                        sqlx::query(&s.update)
                            .bind(&hex)
                            .bind(instance)
                            .bind(ms)
                            .bind(instant_ms)
                            .bind(instant_ms)
                            .bind(name)
                            .bind(p.term)
                    })
                    .await?
                }
            };
            Ok(match done.last_insert_id() {
                0 => SlotClaim::Held,
                t => claimed(t, ms, previous),
            })
        }

        async fn finish_slot(
            &self,
            name: &str,
            holder: &HolderToken,
            instant_ms: i64,
            passed_ms: Option<i64>,
        ) -> Result<SlotFinish> {
            lease_core::LeaseStoreExt::validate_name(self, name)?;
            let (h, i, p) = (holder.to_hex(), instant_ms, passed_ms);
            // The placeholders in statement order (see `mysql_slots` in schema.rs):
            // LAST_INSERT_ID(rec, took, held), IF(rec AND fin), IF(took, passed), IF(held),
            // WHERE name AND (rec OR held).
            let done = self
                .write("finish slot", || {
                    sqlx::query(&self.inner.stmts.slots.finish)
                        // 1 + 2 * rec + 4 * took + 8 * held
                        .bind(i)
                        .bind(&h)
                        .bind(i)
                        .bind(p)
                        .bind(p)
                        .bind(i)
                        .bind(&h)
                        // unfinished_slot_ms: rec AND fin
                        .bind(i)
                        .bind(i)
                        // slot_ms: took, passed
                        .bind(&h)
                        .bind(i)
                        .bind(p)
                        .bind(p)
                        .bind(i)
                        .bind(p)
                        // expires_at_ms: held
                        .bind(&h)
                        // WHERE
                        .bind(name)
                        .bind(i)
                        .bind(&h)
                })
                .await?;
            let flags = done.last_insert_id();
            Ok(SlotFinish {
                recorded: flags & 2 != 0,
                passed_taken: flags & 4 != 0,
                released: flags & 8 != 0,
            })
        }

        async fn unfinished(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
            for name in names {
                lease_core::LeaseStoreExt::validate_name(self, name)?;
            }
            let mut rows = Vec::new();
            for chunk in names.chunks(NAMES_PER_STATEMENT) {
                let marks = vec!["?"; chunk.len()].join(", ");
                let sql = self
                    .inner
                    .stmts
                    .slots
                    .unfinished
                    .replace(NAMES_MARKER, &marks);
                let found: Vec<(Vec<u8>, i64)> =
                    crate::common::with_conn!(self, "unfinished slots", |c| {
                        chunk
                            .iter()
                            .fold(sqlx::query_as(&sql), |q, n| q.bind(n))
                            .fetch_all(c)
                    })?;
                rows.extend(found);
            }
            Ok(in_order(names, rows))
        }

        async fn claim_rerun(
            &self,
            name: &str,
            holder: &HolderToken,
            instance: &str,
            ttl: Duration,
            instant_ms: i64,
        ) -> Result<Option<Grant>> {
            lease_core::LeaseStoreExt::validate_name(self, name)?;
            lease_core::LeaseStoreExt::validate_ttl(self, ttl)?;
            validate_instance(instance)?;
            let ms = ttl_ms(ttl);
            let hex = holder.to_hex();
            let done = self
                .write("claim rerun", || {
                    sqlx::query(&self.inner.stmts.slots.rerun)
                        .bind(&hex)
                        .bind(instance)
                        .bind(ms)
                        .bind(instant_ms)
                        .bind(name)
                        .bind(instant_ms)
                        .bind(instant_ms)
                        .bind(instant_ms)
                })
                .await?;
            Ok(match done.last_insert_id() {
                0 => None,
                term => Some(Grant {
                    term,
                    expires_in: remaining(ms),
                }),
            })
        }

        async fn last_slot(&self, name: &str) -> Result<Option<SlotRecord>> {
            lease_core::LeaseStoreExt::validate_name(self, name)?;
            let row: Option<(Option<i64>, Option<i64>, Option<i64>)> =
                crate::common::with_conn!(self, "last slot", |c| sqlx::query_as(
                    &self.inner.stmts.slots.last
                )
                .bind(name)
                .fetch_optional(c))?;
            Ok(row.map(record))
        }
    }
}
