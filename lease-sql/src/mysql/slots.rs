//! MySQL's slot writes and `unfinished`: the term (or the finish's outcome) comes back through
//! `LAST_INSERT_ID(expr)`; every write is retried at once after a deadlock, as the claim is.
//! The rest of [`SlotStore`](lease_core::backend::slots::SlotStore) is shared, see `slots.rs`.

use std::future::Future;

use lease_core::Result;
use lease_core::backend::slots::SlotFinish;
use sqlx::MySql;
use sqlx::mysql::{MySqlArguments, MySqlQueryResult};
use sqlx::query::Query;

use super::leases::inserted;
use lease_core::layer::Operation;

use super::MySqlStore;
use crate::slots::{Claim, ClaimRead, Finish, Previous, SlotDriver, SlotRow};
use crate::store::{SqlStore, raw_conn, with_conn};
use crate::wire::NAMES_MARKER;

/// The most names one `unfinished` statement carries (MySQL allows 65,535 placeholders a
/// statement); more take one round trip per this many.
const NAMES_PER_STATEMENT: usize = 4096;

impl SlotDriver for MySql {
    /// The claim's write after its read. `LAST_INSERT_ID` is the new term, or 0 when the write
    /// did not match (a duplicate key, or a term that moved on since the read).
    async fn claim_slot_row(
        store: &MySqlStore,
        w: Claim<'_>,
        previous: Option<Previous>,
    ) -> Result<Option<u64>> {
        let s = &store.inner.stmts.slots;
        let done = match previous {
            None => {
                store
                    .write(lease_core::layer::Operation::ClaimSlot, || {
                        sqlx::query(&s.insert)
                            .bind(w.name)
                            .bind(w.hex)
                            .bind(w.instance)
                            .bind(w.ttl_ms)
                            .bind(w.instant_ms)
                            .bind(w.instant_ms)
                    })
                    .await?
            }
            Some(p) => {
                store
                    .write(lease_core::layer::Operation::ClaimSlot, || {
                        sqlx::query(&s.update)
                            .bind(w.hex)
                            .bind(w.instance)
                            .bind(w.ttl_ms)
                            .bind(w.instant_ms)
                            .bind(w.instant_ms)
                            .bind(w.name)
                            .bind(p.term)
                    })
                    .await?
            }
        };
        Ok(inserted(done.last_insert_id()))
    }

    /// The finish: one `UPDATE`, its outcome in the bits of `LAST_INSERT_ID`.
    async fn finish_in(store: &MySqlStore, f: Finish<'_>) -> Result<SlotFinish> {
        let (h, i, p) = (f.hex, f.instant_ms, f.passed_ms);
        // The placeholders in statement order (see `slots` in statements.rs):
        // LAST_INSERT_ID(rec, took, held), IF(rec AND fin), IF(took, passed), IF(held),
        // WHERE name AND (rec OR held).
        let done = store
            .write(lease_core::layer::Operation::FinishSlot, || {
                sqlx::query(&store.inner.stmts.slots.finish)
                    // 1 + 2 * rec + 4 * took + 8 * held
                    .bind(i)
                    .bind(h)
                    .bind(i)
                    .bind(p)
                    .bind(p)
                    .bind(i)
                    .bind(h)
                    // unfinished_slot_ms: rec AND fin
                    .bind(i)
                    .bind(i)
                    // slot_ms: took, passed
                    .bind(h)
                    .bind(i)
                    .bind(p)
                    .bind(p)
                    .bind(i)
                    .bind(p)
                    // expires_at_ms: held
                    .bind(h)
                    // WHERE
                    .bind(f.name)
                    .bind(i)
                    .bind(h)
            })
            .await?;
        let flags = done.last_insert_id();
        Ok(SlotFinish {
            recorded: flags & 2 != 0,
            passed_taken: flags & 4 != 0,
            released: flags & 8 != 0,
        })
    }

    /// One statement per [`NAMES_PER_STATEMENT`] names, one `?` each.
    async fn unfinished_rows(store: &MySqlStore, names: &[String]) -> Result<Vec<(Vec<u8>, i64)>> {
        let mut rows = Vec::new();
        for chunk in names.chunks(NAMES_PER_STATEMENT) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql = store
                .inner
                .stmts
                .slots
                .unfinished
                .replace(NAMES_MARKER, &marks);
            let found: Vec<(Vec<u8>, i64)> =
                with_conn!(store, lease_core::layer::Operation::Unfinished, |c| {
                    chunk
                        .iter()
                        .fold(sqlx::query_as(&sql), |q, n| q.bind(n))
                        .fetch_all(c)
                })?;
            rows.extend(found);
        }
        Ok(rows)
    }

    /// `LAST_INSERT_ID()` is the new term, 0 when not eligible.
    async fn rerun_row(store: &MySqlStore, w: Claim<'_>) -> Result<Option<u64>> {
        let done = store
            .write(lease_core::layer::Operation::ClaimRerun, || {
                sqlx::query(&store.inner.stmts.slots.rerun)
                    .bind(w.hex)
                    .bind(w.instance)
                    .bind(w.ttl_ms)
                    .bind(w.instant_ms)
                    .bind(w.name)
                    .bind(w.instant_ms)
                    .bind(w.instant_ms)
                    .bind(w.instant_ms)
            })
            .await?;
        Ok(inserted(done.last_insert_id()))
    }

    fn claim_read(
        store: &MySqlStore,
        name: &str,
    ) -> impl Future<Output = Result<ClaimRead>> + Send {
        store.shared_claim_read(name)
    }

    fn last_slot_row(
        store: &MySqlStore,
        name: &str,
    ) -> impl Future<Output = Result<Option<SlotRow>>> + Send {
        store.shared_last_slot_row(name)
    }
}

impl SqlStore<MySql> {
    /// Runs a write, retried at once (up to `DEADLOCK_RETRIES` times) when InnoDB picked it as
    /// a deadlock victim: the statement was rolled back whole.
    async fn write<'q>(
        &self,
        op: Operation,
        q: impl Fn() -> Query<'q, MySql, MySqlArguments>,
    ) -> Result<MySqlQueryResult> {
        let mut attempt = 0;
        loop {
            let r = raw_conn!(self, op, |c| q().execute(c));
            match r {
                Err(e)
                    if crate::error::is_deadlock(&e)
                        && attempt < crate::error::DEADLOCK_RETRIES =>
                {
                    attempt += 1;
                }
                r => return r.map_err(|e| self.err(e, op)),
            }
        }
    }
}
