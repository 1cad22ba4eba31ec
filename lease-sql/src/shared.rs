//! What more than one database runs the same way, written once over sqlx's generic types: the
//! start-up checks of the tables, the reads every database shares (the same statement shape on
//! each: `verify`, `get`, the verify inside a transaction, the permit reads, the slot claim's
//! read and `last_slot`, and `leave`), and the writes PostgreSQL and SQLite share (both have
//! `RETURNING`: the term or epoch comes back as a row; MySQL writes its own way, in `mysql/`).
//!
//! Only the drivers (see [`Driver`](crate::store::Driver)) call these methods: MySQL's on its
//! concrete type, and PostgreSQL's and SQLite's through the driver impls at the end of this
//! file, written once over [`Returning`]. The store impls that serve every database call the
//! drivers, whose futures are `Send` by their signatures.

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use std::future::Future;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use lease_core::backend::notify::{Topic, Wakeups};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use lease_core::backend::slots::SlotFinish;
use lease_core::layer::Operation;
use lease_core::{Error, ErrorKind, Result};
use sqlx::{ColumnIndex, Decode, Encode, Executor, IntoArguments, Type};

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use crate::leases::LeaseDriver;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use crate::membership::MemberDriver;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use crate::partitions::PartitionDriver;
use crate::partitions::group_conn;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use crate::permits::PermitDriver;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use crate::slots::{Claim, Finish, Previous, SlotDriver};
use crate::slots::{ClaimRead, SlotRow};
use crate::store::Table;
use crate::store::{SqlStore, Token, lease_table_columns, raw_conn, split_table, with_conn};
use crate::wire::conns::LeaseDb;

/// How many rows a statement changed, as each database's sqlx driver reports it.
pub(crate) trait RowsAffected {
    fn rows_affected(&self) -> u64;
}

#[cfg(feature = "postgres")]
impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::postgres::PgQueryResult::rows_affected(self)
    }
}

#[cfg(feature = "mysql")]
impl RowsAffected for sqlx::mysql::MySqlQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::mysql::MySqlQueryResult::rows_affected(self)
    }
}

#[cfg(feature = "sqlite")]
impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::sqlite::SqliteQueryResult::rows_affected(self)
    }
}

// The methods are crate-private; the lint looks at the impl, whose type is public.
#[allow(private_bounds)]
impl<DB> SqlStore<DB>
where
    DB: LeaseDb,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
    DB::QueryResult: RowsAffected,
{
    /// Start-up checks every dialect runs first on its lease connections: the clock, the DDL,
    /// the lease table, a write probe.
    pub(crate) async fn check_lease_table(&self) -> Result<()> {
        let inner = &self.inner;
        let now: std::result::Result<i64, sqlx::Error> = raw_conn!(self, "start-up check", |c| {
            sqlx::query_scalar::<DB, i64>(&inner.stmts.now).fetch_one(c)
        });
        match now {
            Ok(_) => {}
            Err(e @ sqlx::Error::Database(_)) => {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the database cannot tell its clock with `{}`; it cannot carry \
                         leases (SQLite needs 3.42 or later for unixepoch('subsec'))",
                        inner.stmts.now
                    ),
                )
                .with_temporary(false)
                .with_source(e));
            }
            Err(e) => return Err(self.err(e, "start-up check")),
        }
        // The catalog first: an existing table is never sent a `CREATE TABLE IF NOT EXISTS`
        // (PostgreSQL would answer it with a NOTICE, logged at info by sqlx, on every start),
        // and one of the name that is not a lease table is refused for what it is.
        let (schema, bare) = split_table(&inner.config.table);
        let have: Vec<String> = with_conn!(self, "start-up check", |c| {
            sqlx::query_scalar::<DB, String>(inner.dialect.columns_sql())
                .bind(bare)
                .bind(schema)
                .fetch_all(c)
        })?;
        if !have.is_empty() {
            lease_table_columns(self, &have)?;
        } else if inner.config.ddl == crate::Ddl::None {
            return Err(crate::error::missing_table(
                &inner.config.table,
                &inner.stmts.create,
                &inner.server,
            ));
        } else {
            let created = raw_conn!(self, "create the lease table", |c| {
                sqlx::query::<DB>(&inner.stmts.create).execute(c)
            });
            match created {
                Ok(_) => {}
                // Another process created it at the same moment (PostgreSQL reports the race on
                // its catalog as a unique violation).
                Err(e) if crate::error::is_create_race(&e) => {}
                Err(e) => return Err(self.err(e, "create the lease table")),
            }
        }
        let probe = format!("UPDATE {} SET term = term WHERE 1 = 0", inner.config.table);
        let probed = raw_conn!(self, "start-up check", |c| {
            sqlx::query::<DB>(&probe).execute(c)
        });
        if let Err(e) = probed {
            if crate::error::is_missing_table(&e) {
                return Err(self.err(e, "start-up check"));
            }
            if matches!(e, sqlx::Error::Database(_)) {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "cannot write the lease table `{}`: is the connection read-only?",
                        inner.config.table
                    ),
                )
                .with_temporary(false)
                .with_source(e));
            }
            return Err(self.err(e, "start-up check"));
        }
        Ok(())
    }

    /// The check of the partition, member or permit table `table` on its first use, once its
    /// columns `have` were read from the catalog (none: the table does not exist). An absent
    /// table is created when DDL is on (and only then: an existing one is never sent a `CREATE
    /// TABLE`, which PostgreSQL would answer with a NOTICE), reported with its DDL when it is
    /// off; an existing one must have the columns the store needs. Then a write probe.
    pub(crate) async fn check_group_columns(
        &self,
        table: Table,
        have: &[crate::store::ColumnInfo],
    ) -> Result<()> {
        let (name, create) = self.table_of(table);
        if !have.is_empty() {
            self.check_columns(table, have)?;
        } else if self.inner.config.ddl == crate::Ddl::None {
            return Err(self.missing_group_table(table));
        } else {
            let op = format!("create the {}", table.what());
            let created = raw_conn!(self, &op, |c| sqlx::query::<DB>(create).execute(c));
            match created {
                Ok(_) => {}
                // Another process created it at the same moment.
                Err(e) if crate::error::is_create_race(&e) => {}
                Err(e) => return Err(self.group_err(e, op.as_str(), table)),
            }
        }
        let probe = format!("UPDATE {name} SET expires_at_ms = expires_at_ms WHERE 1 = 0");
        let probed = raw_conn!(self, "start-up check", |c| {
            sqlx::query::<DB>(&probe).execute(c)
        });
        match probed {
            Ok(_) => Ok(()),
            Err(e) if crate::error::is_missing_table(&e) => {
                Err(self.missing_group_table(table).with_source(e))
            }
            Err(e @ sqlx::Error::Database(_)) => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "cannot write the {} `{name}`: does the user lack the \
                     privilege, or is the connection read-only?",
                    table.what(),
                ),
            )
            .with_temporary(false)
            .with_source(e)),
            Err(e) => Err(self.group_err(e, "start-up check", table)),
        }
    }

    /// The verify of every database: the term and the time left, when the lease is the
    /// holder's live.
    pub(crate) async fn shared_verify_row(
        &self,
        name: &str,
        hex: &str,
    ) -> Result<Option<(i64, i64)>> {
        with_conn!(self, Operation::Verify, |c| {
            sqlx::query_as(&self.inner.stmts.verify)
                .bind(name)
                .bind(hex)
                .fetch_optional(c)
        })
    }

    /// The record of `name` on every database: its instance, term and time left.
    pub(crate) async fn shared_get_row(&self, name: &str) -> Result<Option<(String, i64, i64)>> {
        with_conn!(self, Operation::Get, |c| {
            sqlx::query_as(&self.inner.stmts.get)
                .bind(name)
                .fetch_optional(c)
        })
    }

    /// The listing of names on every database (see `wire::names_statement`); MySQL's positional
    /// parameters take the bounds `times` = 2 times, the others once.
    pub(crate) async fn shared_name_rows(
        &self,
        b: crate::leases::NameBounds<'_>,
        times: usize,
    ) -> Result<Vec<(String, i64)>> {
        with_conn!(self, Operation::Names, |c| {
            let mut q = sqlx::query_as(&self.inner.stmts.names);
            for _ in 0..times {
                q = q.bind(b.lower).bind(b.after).bind(b.end).bind(b.limit);
            }
            q.fetch_all(c)
        })
    }

    /// The verify inside the caller's transaction on every database: whether the lease is
    /// still held under `token`. The database's clock for it, when it has no server's, is bound
    /// after the other parameters.
    pub(crate) async fn shared_verify_locked(
        &self,
        conn: &mut DB::Connection,
        name: &str,
        hex: &str,
        token: Token,
    ) -> std::result::Result<bool, sqlx::Error> {
        let q = sqlx::query_as(&self.inner.stmts.verify_locking)
            .bind(name)
            .bind(hex)
            .bind(token);
        let q = match DB::verify_now() {
            Some(now) => q.bind(now),
            None => q,
        };
        let row: Option<(i64,)> = q.fetch_optional(&mut *conn).await?;
        Ok(row.is_some())
    }

    /// The holder's live permit of `name` on every database: permit, term and time left.
    pub(crate) async fn shared_verify_permit_row(
        &self,
        name: &str,
        hex: &str,
    ) -> Result<Option<(i64, i64, i64)>> {
        let p = &self.inner.stmts.permits;
        group_conn!(self, Operation::VerifyPermit, Table::Permits, |c| {
            sqlx::query_as(&p.verify)
                .bind(name)
                .bind(hex)
                .fetch_optional(c)
        })
    }

    /// Every permit of `name` on every database: permit, instance, term and time left.
    pub(crate) async fn shared_permit_rows(
        &self,
        name: &str,
    ) -> Result<Vec<(i64, String, i64, i64)>> {
        let p = &self.inner.stmts.permits;
        group_conn!(self, Operation::Permits, Table::Permits, |c| {
            sqlx::query_as(&p.list).bind(name).fetch_all(c)
        })
    }

    /// PostgreSQL's and SQLite's claim: the new term, `None` when held.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_claim_row(
        &self,
        name: &str,
        hex: &str,
        instance: &str,
        ms: i64,
    ) -> Result<Option<u64>> {
        let row: Option<(i64,)> = match raw_conn!(write self, Operation::Claim, |c| {
            sqlx::query_as(&self.inner.stmts.claim)
                .bind(name)
                .bind(hex)
                .bind(instance)
                .bind(ms)
                .fetch_optional(c)
        }) {
            Ok(row) => row,
            // The row is locked by a transaction (a verified one of the holder's): live, so
            // held — answered at once, never waited out.
            Err(e) if crate::error::is_lock_busy(&e) => None,
            Err(e) => return Err(self.err(e, Operation::Claim)),
        };
        row.map(|(t,)| self.term_from(t)).transpose()
    }

    /// PostgreSQL's and SQLite's renewal: the term, `None` when the lease is not the holder's
    /// live.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_renew_row(
        &self,
        name: &str,
        hex: &str,
        ms: i64,
    ) -> Result<Option<u64>> {
        let row: Option<(i64,)> = with_conn!(write self, Operation::Renew, |c| {
            sqlx::query_as(&self.inner.stmts.renew)
                .bind(name)
                .bind(hex)
                .bind(ms)
                .fetch_optional(c)
        })?;
        row.map(|(t,)| self.term_from(t)).transpose()
    }

    /// PostgreSQL's and SQLite's release: whether the holder's live lease ended.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_release_row(&self, name: &str, hex: &str) -> Result<bool> {
        let done = with_conn!(write self, Operation::Release, |c| {
            sqlx::query(&self.inner.stmts.release)
                .bind(name)
                .bind(hex)
                .execute(c)
        })?;
        Ok(done.rows_affected() > 0)
    }

    /// PostgreSQL's and SQLite's forced release: whether a live lease ended.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_force_release_row(&self, name: &str) -> Result<bool> {
        let done = with_conn!(write self, Operation::ForceRelease, |c| {
            sqlx::query(&self.inner.stmts.force_release)
                .bind(name)
                .execute(c)
        })?;
        Ok(done.rows_affected() > 0)
    }

    /// PostgreSQL's and SQLite's permit renewal: the term, `None` when the permit is not the
    /// holder's live.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_renew_permit_row(
        &self,
        name: &str,
        permit: u32,
        hex: &str,
        ms: i64,
    ) -> Result<Option<i64>> {
        let p = &self.inner.stmts.permits;
        let row: Option<(i64,)> = group_conn!(write self, Operation::RenewPermit, Table::Permits, |c| {
            sqlx::query_as(&p.renew)
                .bind(name)
                .bind(i64::from(permit))
                .bind(hex)
                .bind(ms)
                .fetch_optional(c)
        })?;
        Ok(row.map(|(t,)| t))
    }

    /// PostgreSQL's and SQLite's permit release: whether the holder's live permit ended
    /// (PostgreSQL with hints: the rows of the `pg_notify` sent, one per permit ended).
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_release_permit_row(
        &self,
        name: &str,
        permit: u32,
        hex: &str,
    ) -> Result<bool> {
        let p = &self.inner.stmts.permits;
        let done = group_conn!(write self, Operation::ReleasePermit, Table::Permits, |c| {
            sqlx::query(&p.release)
                .bind(name)
                .bind(i64::from(permit))
                .bind(hex)
                .execute(c)
        })?;
        Ok(done.rows_affected() > 0)
    }

    /// PostgreSQL's and SQLite's acquire: the epoch when acquired or kept, `None` when another
    /// owner holds it.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_acquire_row(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ms: i64,
    ) -> Result<Option<u64>> {
        let g = &self.inner.stmts.groups;
        let row: Option<(i64,)> = group_conn!(
            write self,
            Operation::AcquirePartition,
            Table::Partitions,
            |c| {
                sqlx::query_as(&g.acquire)
                    .bind(group)
                    .bind(i64::from(partition))
                    .bind(owner)
                    .bind(ms)
                    .fetch_optional(c)
            }
        )?;
        row.map(|(epoch,)| self.epoch_from(epoch)).transpose()
    }

    /// PostgreSQL's and SQLite's renewal of many leases in one statement, `names` and `hexes`
    /// as the database binds a list of text: `(name, term, skipped)` rows (see
    /// `Statements::renew_many`).
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_renew_many<T>(
        &self,
        names: T,
        hexes: T,
        ms: i64,
    ) -> Result<Vec<(String, Option<i64>, i64)>>
    where
        T: for<'q> Encode<'q, DB> + Type<DB>,
    {
        with_conn!(write self, Operation::RenewMany, |c| {
            sqlx::query_as(&self.inner.stmts.renew_many)
                .bind(&names)
                .bind(&hexes)
                .bind(ms)
                .fetch_all(c)
        })
    }

    /// PostgreSQL's and SQLite's renewal of a batch, `parts` its partitions as the database
    /// binds them: every lease renewed gets the statement's one expiry, `ms` left.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_renew_rows<P>(
        &self,
        group: &str,
        parts: P,
        owner: &str,
        ms: i64,
    ) -> Result<Vec<(i64, i64, i64)>>
    where
        P: for<'q> Encode<'q, DB> + Type<DB>,
    {
        let g = &self.inner.stmts.groups;
        let rows: Vec<(i64, i64)> = group_conn!(
            write self,
            Operation::RenewPartitions,
            Table::Partitions,
            |c| {
                sqlx::query_as(&g.renew)
                    .bind(group)
                    .bind(&parts)
                    .bind(owner)
                    .bind(ms)
                    .fetch_all(c)
            }
        )?;
        Ok(rows.into_iter().map(|(p, epoch)| (p, epoch, ms)).collect())
    }

    /// PostgreSQL's and SQLite's release of a batch (`parts` as for the renewal): how many
    /// leases ended.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_release_rows<P>(
        &self,
        group: &str,
        parts: P,
        owner: &str,
    ) -> Result<u64>
    where
        P: for<'q> Encode<'q, DB> + Type<DB>,
    {
        let g = &self.inner.stmts.groups;
        let done = group_conn!(
            write self,
            Operation::ReleasePartitions,
            Table::Partitions,
            |c| {
                sqlx::query(&g.release)
                    .bind(group)
                    .bind(&parts)
                    .bind(owner)
                    .execute(c)
            }
        )?;
        Ok(done.rows_affected())
    }

    /// PostgreSQL's and SQLite's owners: partition, owner, epoch and time left of each live
    /// lease of `group`, by partition.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_owner_rows(
        &self,
        group: &str,
    ) -> Result<Vec<(i64, String, i64, i64)>> {
        let g = &self.inner.stmts.groups;
        group_conn!(self, Operation::Owners, Table::Partitions, |c| {
            sqlx::query_as(&g.owners).bind(group).fetch_all(c)
        })
    }

    /// The leave on every database: whether the member was live.
    pub(crate) async fn shared_leave_row(&self, service: &str, node: &str) -> Result<bool> {
        let g = &self.inner.stmts.groups;
        let done = group_conn!(write self, Operation::Leave, Table::Members, |c| {
            sqlx::query(&g.leave).bind(service).bind(node).execute(c)
        })?;
        Ok(done.rows_affected() > 0)
    }

    /// PostgreSQL's and SQLite's heartbeat, `list` the groups one per line.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_heartbeat_row(
        &self,
        service: &str,
        node: &str,
        address: &str,
        list: &str,
        ms: i64,
    ) -> Result<()> {
        let g = &self.inner.stmts.groups;
        group_conn!(write self, Operation::Heartbeat, Table::Members, |c| {
            sqlx::query(&g.heartbeat)
                .bind(service)
                .bind(node)
                .bind(address)
                .bind(list)
                .bind(ms)
                .execute(c)
        })?;
        Ok(())
    }

    /// PostgreSQL's and SQLite's members: node, address, group list and time left of each
    /// live member of `service`, by node.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_member_rows(
        &self,
        service: &str,
    ) -> Result<Vec<(String, String, String, i64)>> {
        let g = &self.inner.stmts.groups;
        group_conn!(self, Operation::Members, Table::Members, |c| {
            sqlx::query_as(&g.members).bind(service).fetch_all(c)
        })
    }

    /// The slot claim's read on every database: the server's clock, then the record.
    pub(crate) async fn shared_claim_read(&self, name: &str) -> Result<ClaimRead> {
        with_conn!(self, Operation::ClaimSlot, |c| {
            sqlx::query_as(&self.inner.stmts.slots.read)
                .bind(name)
                .fetch_one(c)
        })
    }

    /// The slot record of `name` on every database.
    pub(crate) async fn shared_last_slot_row(&self, name: &str) -> Result<Option<SlotRow>> {
        with_conn!(self, Operation::LastSlot, |c| {
            sqlx::query_as(&self.inner.stmts.slots.last)
                .bind(name)
                .fetch_optional(c)
        })
    }

    /// PostgreSQL's and SQLite's slot claim write: an insert for a new record, an update with
    /// the term read compared otherwise.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_claim_slot_row(
        &self,
        w: Claim<'_>,
        previous: Option<Previous>,
    ) -> Result<Option<u64>> {
        let s = &self.inner.stmts.slots;
        let row: Option<(i64,)> = match previous {
            None => with_conn!(write self, Operation::ClaimSlot, |c| {
                sqlx::query_as(&s.insert)
                    .bind(w.name)
                    .bind(w.hex)
                    .bind(w.instance)
                    .bind(w.ttl_ms)
                    .bind(w.instant_ms)
                    .fetch_optional(c)
            })?,
            Some(p) => with_conn!(write self, Operation::ClaimSlot, |c| {
                sqlx::query_as(&s.update)
                    .bind(w.name)
                    .bind(w.hex)
                    .bind(w.instance)
                    .bind(w.ttl_ms)
                    .bind(w.instant_ms)
                    .bind(p.term)
                    .fetch_optional(c)
            })?,
        };
        row.map(|(t,)| self.term_from(t)).transpose()
    }

    /// PostgreSQL's and SQLite's rerun claim: the new term, `None` when not eligible.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn shared_rerun_row(&self, w: Claim<'_>) -> Result<Option<u64>> {
        let row: Option<(i64,)> = with_conn!(write self, Operation::ClaimRerun, |c| {
            sqlx::query_as(&self.inner.stmts.slots.rerun)
                .bind(w.name)
                .bind(w.hex)
                .bind(w.instance)
                .bind(w.ttl_ms)
                .bind(w.instant_ms)
                .fetch_optional(c)
        })?;
        row.map(|(t,)| self.term_from(t)).transpose()
    }
}

/// A database that writes with `RETURNING` (PostgreSQL, SQLite): its driver parts are the
/// impls below, which run the shared statements above, and it brings only what it does its
/// own way: the statement that opens a verified transaction, how a batch of partitions is
/// bound, the start-up checks, the hints, the counted claim and the slot finish. MySQL writes
/// without `RETURNING`, so it does not implement this trait and implements the parts itself.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) trait Returning: LeaseDb + Sized {
    /// The statement that opens a verified transaction, when not sqlx's `BEGIN`.
    const BEGIN: Option<&'static str> = None;

    /// A batch of partitions as the database binds it, in one parameter.
    type Parts: for<'q> Encode<'q, Self> + Type<Self> + Send + Sync;

    /// The batch `partitions` as one parameter.
    fn parts(partitions: &[u32]) -> Self::Parts;

    /// A list of text as the database binds it, in one parameter (PostgreSQL: an array,
    /// SQLite: a JSON array).
    type Texts: for<'q> Encode<'q, Self> + Type<Self> + Send + Sync;

    /// `items` as one parameter.
    fn texts(items: &[&str]) -> Self::Texts;

    /// The start-up checks of [`available`](lease_core::LeaseStore::available).
    fn check_available(store: &SqlStore<Self>) -> impl Future<Output = Result<()>> + Send;

    /// The check of the partition, member or permit table `table` on its first use.
    fn check_group_table(
        store: &SqlStore<Self>,
        table: Table,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The hints of `topic`.
    fn watch(store: &SqlStore<Self>, topic: &Topic) -> Wakeups;

    /// The counted claim: the permit and term granted, `None` when full.
    fn claim_permit_row(
        store: &SqlStore<Self>,
        name: &str,
        count: u32,
        hex: &str,
        instance: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<(i64, i64)>>> + Send;

    /// The slot finish.
    fn finish_in(
        store: &SqlStore<Self>,
        f: Finish<'_>,
    ) -> impl Future<Output = Result<SlotFinish>> + Send;

    /// The names (as bytes) and unfinished instants of those of `names` whose instant may be
    /// rerun.
    fn unfinished_rows(
        store: &SqlStore<Self>,
        names: &[String],
    ) -> impl Future<Output = Result<Vec<(Vec<u8>, i64)>>> + Send;
}

// The driver parts of every `Returning` database. Each impl repeats the bounds of the shared
// methods' impl: Rust does not carry a trait's where-clauses to the code that uses the trait,
// so they cannot be stated once on `Returning`.

#[cfg(any(feature = "postgres", feature = "sqlite"))]
impl<DB> LeaseDriver for DB
where
    DB: Returning,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
    DB::QueryResult: RowsAffected,
{
    const BEGIN: Option<&'static str> = <DB as Returning>::BEGIN;

    fn check_available(store: &SqlStore<DB>) -> impl Future<Output = Result<()>> + Send {
        <DB as Returning>::check_available(store)
    }

    fn check_group_table(
        store: &SqlStore<DB>,
        table: Table,
    ) -> impl Future<Output = Result<()>> + Send {
        <DB as Returning>::check_group_table(store, table)
    }

    fn watch(store: &SqlStore<DB>, topic: &Topic) -> Wakeups {
        <DB as Returning>::watch(store, topic)
    }

    fn claim_row(
        store: &SqlStore<DB>,
        name: &str,
        hex: &str,
        instance: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<u64>>> + Send {
        store.shared_claim_row(name, hex, instance, ms)
    }

    fn renew_row(
        store: &SqlStore<DB>,
        name: &str,
        hex: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<u64>>> + Send {
        store.shared_renew_row(name, hex, ms)
    }

    const RENEW_MANY: bool = true;

    fn renew_many_rows(
        store: &SqlStore<DB>,
        names: &[&str],
        hexes: &[&str],
        ms: i64,
    ) -> impl Future<Output = Result<Vec<(String, Option<i64>, i64)>>> + Send {
        store.shared_renew_many(DB::texts(names), DB::texts(hexes), ms)
    }

    fn release_row(
        store: &SqlStore<DB>,
        name: &str,
        hex: &str,
    ) -> impl Future<Output = Result<bool>> + Send {
        store.shared_release_row(name, hex)
    }

    fn force_release_row(
        store: &SqlStore<DB>,
        name: &str,
    ) -> impl Future<Output = Result<bool>> + Send {
        store.shared_force_release_row(name)
    }

    fn verify_row(
        store: &SqlStore<DB>,
        name: &str,
        hex: &str,
    ) -> impl Future<Output = Result<Option<(i64, i64)>>> + Send {
        store.shared_verify_row(name, hex)
    }

    fn get_row(
        store: &SqlStore<DB>,
        name: &str,
    ) -> impl Future<Output = Result<Option<(String, i64, i64)>>> + Send {
        store.shared_get_row(name)
    }

    fn name_rows(
        store: &SqlStore<DB>,
        bounds: crate::leases::NameBounds<'_>,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send {
        store.shared_name_rows(bounds, 1)
    }

    fn verify_locked(
        store: &SqlStore<DB>,
        conn: &mut DB::Connection,
        name: &str,
        hex: &str,
        token: Token,
    ) -> impl Future<Output = std::result::Result<bool, sqlx::Error>> + Send {
        store.shared_verify_locked(conn, name, hex, token)
    }
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
impl<DB> PartitionDriver for DB
where
    DB: Returning,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
    DB::QueryResult: RowsAffected,
{
    fn acquire_row(
        store: &SqlStore<DB>,
        group: &str,
        partition: u32,
        owner: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<u64>>> + Send {
        store.shared_acquire_row(group, partition, owner, ms)
    }

    fn renew_rows(
        store: &SqlStore<DB>,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Vec<(i64, i64, i64)>>> + Send {
        store.shared_renew_rows(group, DB::parts(partitions), owner, ms)
    }

    fn release_rows(
        store: &SqlStore<DB>,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> impl Future<Output = Result<u64>> + Send {
        store.shared_release_rows(group, DB::parts(partitions), owner)
    }

    fn owner_rows(
        store: &SqlStore<DB>,
        group: &str,
    ) -> impl Future<Output = Result<Vec<(i64, String, i64, i64)>>> + Send {
        store.shared_owner_rows(group)
    }
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
impl<DB> MemberDriver for DB
where
    DB: Returning,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
    DB::QueryResult: RowsAffected,
{
    fn heartbeat_row(
        store: &SqlStore<DB>,
        service: &str,
        node: &str,
        address: &str,
        list: &str,
        ms: i64,
    ) -> impl Future<Output = Result<()>> + Send {
        store.shared_heartbeat_row(service, node, address, list, ms)
    }

    fn member_rows(
        store: &SqlStore<DB>,
        service: &str,
    ) -> impl Future<Output = Result<Vec<(String, String, String, i64)>>> + Send {
        store.shared_member_rows(service)
    }

    fn leave_row(
        store: &SqlStore<DB>,
        service: &str,
        node: &str,
    ) -> impl Future<Output = Result<bool>> + Send {
        store.shared_leave_row(service, node)
    }
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
impl<DB> PermitDriver for DB
where
    DB: Returning,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
    DB::QueryResult: RowsAffected,
{
    fn claim_permit_row(
        store: &SqlStore<DB>,
        name: &str,
        count: u32,
        hex: &str,
        instance: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<(i64, i64)>>> + Send {
        <DB as Returning>::claim_permit_row(store, name, count, hex, instance, ms)
    }

    fn renew_permit_row(
        store: &SqlStore<DB>,
        name: &str,
        permit: u32,
        hex: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<i64>>> + Send {
        store.shared_renew_permit_row(name, permit, hex, ms)
    }

    fn release_permit_row(
        store: &SqlStore<DB>,
        name: &str,
        permit: u32,
        hex: &str,
    ) -> impl Future<Output = Result<bool>> + Send {
        store.shared_release_permit_row(name, permit, hex)
    }

    fn verify_permit_row(
        store: &SqlStore<DB>,
        name: &str,
        hex: &str,
    ) -> impl Future<Output = Result<Option<(i64, i64, i64)>>> + Send {
        store.shared_verify_permit_row(name, hex)
    }

    fn permit_rows(
        store: &SqlStore<DB>,
        name: &str,
    ) -> impl Future<Output = Result<Vec<(i64, String, i64, i64)>>> + Send {
        store.shared_permit_rows(name)
    }
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
impl<DB> SlotDriver for DB
where
    DB: Returning,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
    DB::QueryResult: RowsAffected,
{
    fn claim_read(
        store: &SqlStore<DB>,
        name: &str,
    ) -> impl Future<Output = Result<ClaimRead>> + Send {
        store.shared_claim_read(name)
    }

    fn claim_slot_row(
        store: &SqlStore<DB>,
        w: Claim<'_>,
        previous: Option<Previous>,
    ) -> impl Future<Output = Result<Option<u64>>> + Send {
        store.shared_claim_slot_row(w, previous)
    }

    fn finish_in(
        store: &SqlStore<DB>,
        f: Finish<'_>,
    ) -> impl Future<Output = Result<SlotFinish>> + Send {
        <DB as Returning>::finish_in(store, f)
    }

    fn unfinished_rows(
        store: &SqlStore<DB>,
        names: &[String],
    ) -> impl Future<Output = Result<Vec<(Vec<u8>, i64)>>> + Send {
        <DB as Returning>::unfinished_rows(store, names)
    }

    fn rerun_row(
        store: &SqlStore<DB>,
        w: Claim<'_>,
    ) -> impl Future<Output = Result<Option<u64>>> + Send {
        store.shared_rerun_row(w)
    }

    fn last_slot_row(
        store: &SqlStore<DB>,
        name: &str,
    ) -> impl Future<Output = Result<Option<SlotRow>>> + Send {
        store.shared_last_slot_row(name)
    }
}
