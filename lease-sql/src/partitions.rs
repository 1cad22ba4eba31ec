//! Partitioned leases ([`lease_core::backend::partitions::PartitionStore`]) on a table of their
//! own, named after the lease table: `<table>_partitions`, one row per `(group_name,
//! partition_no)`; and what the partition and member tables share (their start-up checks, errors,
//! the deadlock retry). Their DDL is [`partitions_schema_sql`](crate::partitions_schema_sql) and
//! [`members_schema_sql`](crate::members_schema_sql); the statements are in each dialect's
//! `statements.rs` and written out in the docs of [`PostgresStore`](crate::PostgresStore),
//! [`MySqlStore`](crate::MySqlStore) and [`SqliteStore`](crate::SqliteStore).
//!
//! One impl for every database: argument checks before any I/O (lease-core's `backend::check`,
//! one per operation), an empty batch answered without I/O, the batch deduplicated; each
//! database's [`PartitionDriver`] runs the statements (PostgreSQL's and SQLite's in
//! `shared.rs`, MySQL's in `mysql/partitions.rs`).
//!
//! Every operation is one statement (MySQL's batch renewal: one `SET`, `UPDATE`, `SELECT`
//! text-protocol request), one round trip on a warm connection of the store's own, expiry
//! judged by the same server clock as the leases. A statement InnoDB or PostgreSQL picked as a
//! deadlock victim was rolled back whole and is retried at once (up to three times).

use std::future::Future;

use lease_core::{Error, ErrorKind, Result, backend::partitions::PartitionLease};
use sqlx::Database;

use crate::leases::LeaseDriver;
use crate::store::{SqlStore, Table, Wanted, remaining};

impl<DB: Database> SqlStore<DB> {
    /// The table's name and its `CREATE TABLE` statement.
    pub(crate) fn table_of(&self, table: Table) -> (&str, &str) {
        let g = &self.inner.stmts.groups;
        match table {
            Table::Partitions => (&g.partitions_table, &g.create_partitions),
            Table::Members => (&g.members_table, &g.create_members),
            Table::Permits => {
                let p = &self.inner.stmts.permits;
                (&p.table, &p.create)
            }
        }
    }

    /// Maps a sqlx error of `op` on `table`, naming the table and its DDL when it is missing.
    pub(crate) fn group_err<'a>(
        &self,
        e: sqlx::Error,
        doing: impl Into<crate::error::Doing<'a>>,
        table: Table,
    ) -> Error {
        if crate::error::is_missing_table(&e) {
            return self.missing_group_table(table).with_source(e);
        }
        crate::error::map(e, doing.into(), &self.inner.server)
    }

    pub(crate) fn missing_group_table(&self, table: Table) -> Error {
        let (name, create) = self.table_of(table);
        let ddl = match self.inner.config.ddl {
            crate::Ddl::None => " and DDL is off",
            crate::Ddl::Auto => "",
        };
        Error::schema(format!(
            "the {} `{name}` does not exist{ddl}; create it with:\n{create}",
            table.what(),
        ))
        .at_server(&self.inner.server)
    }

    pub(crate) fn corrupt_row(&self, table: Table, what: &str) -> Error {
        Error::new(
            ErrorKind::Backend,
            format!(
                "the {} `{}` holds a corrupt row: {what}",
                table.what(),
                self.table_of(table).0,
            ),
        )
        .at_server(&self.inner.server)
    }

    fn partition_from(&self, v: i64) -> Result<u32> {
        u32::try_from(v).map_err(|_| self.corrupt_row(Table::Partitions, &format!("partition {v}")))
    }

    pub(crate) fn epoch_from(&self, v: i64) -> Result<u64> {
        u64::try_from(v)
            .ok()
            .filter(|e| *e > 0)
            .ok_or_else(|| self.corrupt_row(Table::Partitions, &format!("epoch {v}")))
    }

    /// A text column read as bytes (MySQL's binary columns).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) fn text_from(&self, table: Table, column: &str, v: Vec<u8>) -> Result<String> {
        String::from_utf8(v)
            .map_err(|_| self.corrupt_row(table, &format!("`{column}` is not UTF-8")))
    }

    pub(crate) fn lease(
        &self,
        partition: i64,
        owner: String,
        epoch: i64,
        left: i64,
    ) -> Result<PartitionLease> {
        Ok(PartitionLease {
            partition: self.partition_from(partition)?,
            owner,
            epoch: self.epoch_from(epoch)?,
            expires_in: remaining(left),
        })
    }

    /// What the store needs of the two tables' columns, for the start-up check.
    fn wanted_columns(&self, table: Table) -> Vec<Wanted> {
        let name = self.inner.config.max_name_bytes;
        let plain = |column, bytes| Wanted {
            column,
            bytes,
            exact: false,
            hint: "",
        };
        let compared = |column, bytes, hint| Wanted {
            column,
            bytes,
            exact: true,
            hint,
        };
        let names = " or lower max_name_bytes";
        match table {
            Table::Partitions => vec![
                compared("group_name", name, names),
                plain("partition_no", 0),
                compared("owner", lease_core::backend::MAX_INSTANCE_BYTES, ""),
                plain("epoch", 0),
                plain("expires_at_ms", 0),
            ],
            Table::Members => vec![
                compared("service", name, names),
                compared("node", lease_core::backend::MAX_INSTANCE_BYTES, ""),
                plain(
                    "address",
                    lease_core::backend::membership::MAX_ADDRESS_BYTES,
                ),
                // Every group at its longest, one line feed between two.
                plain(
                    "group_list",
                    lease_core::backend::membership::MAX_GROUPS_PER_MEMBER * (name + 1) - 1,
                ),
                plain("expires_at_ms", 0),
            ],
            Table::Permits => vec![
                compared("name", name, names),
                plain("permit_no", 0),
                plain("holder", 32),
                plain("instance", lease_core::backend::MAX_INSTANCE_BYTES),
                plain("term", 0),
                plain("expires_at_ms", 0),
            ],
        }
    }

    pub(crate) fn check_columns(
        &self,
        table: Table,
        have: &[crate::store::ColumnInfo],
    ) -> Result<()> {
        let (name, create) = self.table_of(table);
        crate::store::table_columns(
            table.what(),
            name,
            create,
            have,
            &self.wanted_columns(table),
        )
    }
}

/// The partitions of a batch, sorted, each once.
pub(crate) fn distinct(partitions: &[u32]) -> Vec<u32> {
    let mut p = partitions.to_vec();
    p.sort_unstable();
    p.dedup();
    p
}

/// Runs `$body` (a sqlx future on the connection `$c`) on one of the store's own connections,
/// retried at once after a deadlock (the statement was rolled back whole), the error mapped to
/// a lease error of `$op` on `$table`; `group_conn!(write self, …)` for a write (see
/// [`raw_conn`](crate::store::raw_conn)).
macro_rules! group_conn {
    (write $self:expr, $op:expr, $table:expr, |$c:ident| $body:expr) => {{
        let mut attempt = 0;
        loop {
            let r = $crate::store::raw_conn!(write $self, $op, |$c| $body);
            match r {
                Err(e)
                    if $crate::error::is_deadlock(&e)
                        && attempt < $crate::error::DEADLOCK_RETRIES =>
                {
                    attempt += 1;
                }
                r => break r.map_err(|e| $self.group_err(e, $op, $table)),
            }
        }
    }};
    ($self:expr, $op:expr, $table:expr, |$c:ident| $body:expr) => {{
        let mut attempt = 0;
        loop {
            let r = $crate::store::raw_conn!($self, $op, |$c| $body);
            match r {
                Err(e)
                    if $crate::error::is_deadlock(&e)
                        && attempt < $crate::error::DEADLOCK_RETRIES =>
                {
                    attempt += 1;
                }
                r => break r.map_err(|e| $self.group_err(e, $op, $table)),
            }
        }
    }};
}

pub(crate) use group_conn;

// `LeaseDriver` is crate-private; so is the method (the lint looks at the impl's type).
#[allow(private_bounds)]
impl<DB: LeaseDriver> SqlStore<DB> {
    /// Checks the partition, member or permit table `table` (creating it when missing and DDL
    /// is on) before the first operation on it, once per store: a store that serves only
    /// leases never touches them. Two processes creating it at once both succeed. A failed
    /// check is not remembered: the next operation checks again.
    pub(crate) async fn group_table_ready(&self, table: Table) -> Result<()> {
        self.inner.group_tables[table.index()]
            .get_or_try_init(|| DB::check_group_table(self, table))
            .await
            .map(drop)
            .map_err(|e| self.at_server(e))
    }
}

/// The partition table's part of the `Driver` (`driver.rs`): what a database runs for the
/// partition operations (see [`LeaseDriver`] for what each returns).
pub(crate) trait PartitionDriver: LeaseDriver {
    /// The acquire: the epoch when acquired or kept, `None` when another owner holds it.
    fn acquire_row(
        store: &SqlStore<Self>,
        group: &str,
        partition: u32,
        owner: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<u64>>> + Send;

    /// The renewal of a batch (sorted, each partition once): partition, epoch and time left of
    /// each lease renewed.
    fn renew_rows(
        store: &SqlStore<Self>,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Vec<(i64, i64, i64)>>> + Send;

    /// The release of a batch (sorted, each partition once): how many leases ended.
    fn release_rows(
        store: &SqlStore<Self>,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Partition, owner, epoch and time left of each live lease of `group`, by partition.
    fn owner_rows(
        store: &SqlStore<Self>,
        group: &str,
    ) -> impl Future<Output = Result<Vec<(i64, String, i64, i64)>>> + Send;
}

#[lease_core::backend::async_trait]
impl<DB: PartitionDriver> lease_core::backend::partitions::PartitionStore for SqlStore<DB>
where
    Self: lease_core::LeaseStore,
{
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: std::time::Duration,
    ) -> lease_core::Result<Option<lease_core::backend::partitions::PartitionLease>> {
        lease_core::backend::check::acquire_partition(self, group, owner, ttl)?;
        let ms = crate::store::ttl_ms(ttl);
        let during =
            |e: lease_core::Error| e.during(lease_core::layer::Operation::AcquirePartition, group);
        self.group_table_ready(Table::Partitions)
            .await
            .map_err(during)?;
        let epoch = DB::acquire_row(self, group, partition, owner, ms)
            .await
            .map_err(during)?;
        if epoch.is_some() {
            self.inner
                .hints
                .wrote(&lease_core::backend::notify::Topic::group(group));
        }
        Ok(
            epoch.map(|epoch| lease_core::backend::partitions::PartitionLease {
                partition,
                owner: owner.to_owned(),
                epoch,
                expires_in: crate::store::remaining(ms),
            }),
        )
    }

    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: std::time::Duration,
    ) -> lease_core::Result<Vec<lease_core::backend::partitions::PartitionLease>> {
        let batch =
            lease_core::backend::check::renew_partitions(self, group, partitions, owner, ttl)?;
        if batch == lease_core::backend::check::Batch::Empty {
            return Ok(Vec::new());
        }
        let ms = crate::store::ttl_ms(ttl);
        let during =
            |e: lease_core::Error| e.during(lease_core::layer::Operation::RenewPartitions, group);
        self.group_table_ready(Table::Partitions)
            .await
            .map_err(during)?;
        let rows = DB::renew_rows(self, group, &distinct(partitions), owner, ms)
            .await
            .map_err(during)?;
        rows.into_iter()
            .map(|(p, epoch, left)| self.lease(p, owner.to_owned(), epoch, left))
            .collect::<lease_core::Result<_>>()
            .map_err(during)
    }

    async fn release_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> lease_core::Result<usize> {
        let batch = lease_core::backend::check::release_partitions(self, group, partitions, owner)?;
        if batch == lease_core::backend::check::Batch::Empty {
            return Ok(0);
        }
        let during =
            |e: lease_core::Error| e.during(lease_core::layer::Operation::ReleasePartitions, group);
        self.group_table_ready(Table::Partitions)
            .await
            .map_err(during)?;
        let ended = DB::release_rows(self, group, &distinct(partitions), owner)
            .await
            .map_err(during)?;
        if ended > 0 {
            self.inner
                .hints
                .wrote(&lease_core::backend::notify::Topic::group(group));
        }
        Ok(usize::try_from(ended).unwrap_or(usize::MAX))
    }

    async fn owners(
        &self,
        group: &str,
    ) -> lease_core::Result<Vec<lease_core::backend::partitions::PartitionLease>> {
        lease_core::backend::check::owners(self, group)?;
        let during = |e: lease_core::Error| e.during(lease_core::layer::Operation::Owners, group);
        self.group_table_ready(Table::Partitions)
            .await
            .map_err(during)?;
        let rows = DB::owner_rows(self, group).await.map_err(during)?;
        rows.into_iter()
            .map(|(p, owner, epoch, left)| self.lease(p, owner, epoch, left))
            .collect::<lease_core::Result<_>>()
            .map_err(during)
    }
}
