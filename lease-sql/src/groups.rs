//! Partitioned leases ([`lease_core::PartitionStore`]) and membership
//! ([`lease_core::MembershipStore`]) on two tables of their own, named after the lease table:
//! `<table>_partitions` (one row per `(group_name, partition_no)`) and `<table>_members` (one
//! row per `(service, node)`). Their DDL is [`partitions_schema_sql`](crate::partitions_schema_sql)
//! and [`members_schema_sql`](crate::members_schema_sql); the statements are in `schema.rs`
//! and written out in the docs of [`PostgresStore`](crate::PostgresStore),
//! [`MySqlStore`](crate::MySqlStore) and [`SqliteStore`](crate::SqliteStore).
//!
//! Every operation is one statement (MySQL's batch renewal: one `SET`, `UPDATE`, `SELECT`
//! text-protocol request), one round trip on a warm connection of the store's own, expiry
//! judged by the same server clock as the leases. Arguments are checked before any I/O with
//! lease-core's `check_partition_args`, `check_partition_batch` and `check_member_args`.
//! A statement InnoDB or PostgreSQL picked as a deadlock victim was rolled back whole and is
//! retried at once (up to three times).

use std::time::Duration;

use lease_core::{Error, ErrorKind, Member, PartitionLease, Result};
use sqlx::Database;

use crate::common_checks::Wanted;
use crate::store::{SqlStore, remaining};

/// How often a statement is retried at once after it was picked as a deadlock victim.
const DEADLOCK_RETRIES: usize = 3;

/// Which of the two tables an operation works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Table {
    Partitions,
    Members,
}

impl Table {
    fn what(self) -> &'static str {
        match self {
            Table::Partitions => "partition table",
            Table::Members => "member table",
        }
    }
}

impl<DB: Database> SqlStore<DB> {
    /// The table's name and its `CREATE TABLE` statement.
    fn table_of(&self, table: Table) -> (&str, &str) {
        let g = &self.inner.stmts.groups;
        match table {
            Table::Partitions => (&g.partitions_table, &g.create_partitions),
            Table::Members => (&g.members_table, &g.create_members),
        }
    }

    /// Maps a sqlx error of `op` on `table`, naming the table and its DDL when it is missing.
    pub(crate) fn group_err(&self, e: sqlx::Error, op: &str, table: Table) -> Error {
        if crate::error::is_missing_table(&e) {
            return self.missing_group_table(table).with_source(e);
        }
        crate::error::map(e, op, &self.inner.server)
    }

    fn missing_group_table(&self, table: Table) -> Error {
        let (name, create) = self.table_of(table);
        let ddl = match self.inner.config.ddl {
            crate::Ddl::None => " and DDL is off",
            crate::Ddl::Auto => "",
        };
        Error::new(
            ErrorKind::Unavailable,
            format!(
                "the {} `{name}` does not exist on {}{ddl}; create it with:\n{create}",
                table.what(),
                self.inner.server
            ),
        )
        .with_temporary(false)
    }

    fn corrupt_row(&self, table: Table, what: &str) -> Error {
        Error::new(
            ErrorKind::Backend,
            format!(
                "the {} `{}` on {} holds a corrupt row: {what}",
                table.what(),
                self.table_of(table).0,
                self.inner.server
            ),
        )
    }

    fn partition_from(&self, v: i64) -> Result<u32> {
        u32::try_from(v).map_err(|_| self.corrupt_row(Table::Partitions, &format!("partition {v}")))
    }

    fn epoch_from(&self, v: i64) -> Result<u64> {
        u64::try_from(v)
            .ok()
            .filter(|e| *e > 0)
            .ok_or_else(|| self.corrupt_row(Table::Partitions, &format!("epoch {v}")))
    }

    /// A text column read as bytes (MySQL's binary columns).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    fn text_from(&self, table: Table, column: &str, v: Vec<u8>) -> Result<String> {
        String::from_utf8(v)
            .map_err(|_| self.corrupt_row(table, &format!("`{column}` is not UTF-8")))
    }

    fn lease(
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
                plain("address", lease_core::backend::MAX_ADDRESS_BYTES),
                // Every group at its longest, one line feed between two.
                plain(
                    "group_list",
                    lease_core::backend::MAX_GROUPS_PER_MEMBER * (name + 1) - 1,
                ),
                plain("expires_at_ms", 0),
            ],
        }
    }

    fn check_columns(&self, table: Table, have: &[crate::common_checks::ColumnInfo]) -> Result<()> {
        let (name, create) = self.table_of(table);
        crate::common_checks::table_columns(
            &self.inner.server,
            table.what(),
            name,
            create,
            have,
            &self.wanted_columns(table),
        )
    }
}

/// A member record as read back.
fn member(node: String, address: String, groups: &str, left: i64) -> Member {
    Member {
        node,
        address,
        groups: lease_core::backend::decode_groups(groups),
        expires_in: remaining(left),
    }
}

/// A member record as just written: the expiry is `ttl` from the statement's own clock reading.
fn written(node: &str, address: &str, groups: &[String], ttl_ms: i64) -> Member {
    Member {
        node: node.to_owned(),
        address: address.to_owned(),
        groups: groups.to_vec(),
        expires_in: remaining(ttl_ms),
    }
}

/// The partitions of a batch, sorted, each once.
fn distinct(partitions: &[u32]) -> Vec<u32> {
    let mut p = partitions.to_vec();
    p.sort_unstable();
    p.dedup();
    p
}

/// Runs `$body` (a sqlx future on the connection `$c`) on one of the store's own connections,
/// retried at once after a deadlock (the statement was rolled back whole), the error mapped to
/// a lease error of `$op` on `$table`.
macro_rules! group_conn {
    ($self:expr, $op:expr, $table:expr, |$c:ident| $body:expr) => {{
        let mut attempt = 0;
        loop {
            let r = $crate::common::raw_conn!($self, $op, |$c| $body);
            match r {
                Err(e) if $crate::error::is_deadlock(&e) && attempt < DEADLOCK_RETRIES => {
                    attempt += 1;
                }
                r => break r.map_err(|e| $self.group_err(e, $op, $table)),
            }
        }
    }};
}

/// Start-up: creates the two tables when DDL is on, then probes that each exists and can be
/// written.
macro_rules! check_group_tables {
    ($self:expr, $db:ty) => {{
        for table in [Table::Partitions, Table::Members] {
            let (name, create) = $self.table_of(table);
            let op = format!("create the {}", table.what());
            if $self.inner.config.ddl == $crate::Ddl::Auto {
                let created = $crate::common::raw_conn!($self, &op, |c| {
                    sqlx::query::<$db>(create).execute(c)
                });
                match created {
                    Ok(_) => {}
                    Err(e) if $crate::error::is_create_race(&e) => {}
                    Err(e) => return Err($self.group_err(e, &op, table)),
                }
            }
            let probe = format!("UPDATE {name} SET expires_at_ms = expires_at_ms WHERE 1 = 0");
            let probed = $crate::common::raw_conn!($self, "start-up check", |c| {
                sqlx::query::<$db>(&probe).execute(c)
            });
            match probed {
                Ok(_) => {}
                Err(e) if $crate::error::is_missing_table(&e) => {
                    return Err($self.missing_group_table(table).with_source(e));
                }
                Err(e @ sqlx::Error::Database(_)) => {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        format!(
                            "cannot write the {} `{name}` on {}: does the user lack the \
                             privilege, or is the connection read-only?",
                            table.what(),
                            $self.inner.server
                        ),
                    )
                    .with_temporary(false)
                    .with_source(e));
                }
                Err(e) => return Err($self.group_err(e, "start-up check", table)),
            }
        }
    }};
}

/// The `PartitionStore` and `MembershipStore` impls of the dialects with `RETURNING`
/// (PostgreSQL, SQLite). `$parts` turns a batch of partitions into the bound parameter.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! returning_groups {
    ($db:ty, $parts:path) => {
        #[lease_core::backend::async_trait]
        impl lease_core::PartitionStore for $crate::SqlStore<$db> {
            async fn acquire_partition(
                &self,
                group: &str,
                partition: u32,
                owner: &str,
                ttl: Duration,
            ) -> Result<Option<PartitionLease>> {
                lease_core::backend::check_partition_args(self, group, owner, Some(ttl))?;
                let ms = $crate::store::ttl_ms(ttl);
                let g = &self.inner.stmts.groups;
                let row: Option<(i64,)> =
                    group_conn!(self, "acquire partition", Table::Partitions, |c| {
                        sqlx::query_as(&g.acquire)
                            .bind(group)
                            .bind(i64::from(partition))
                            .bind(owner)
                            .bind(ms)
                            .fetch_optional(c)
                    })?;
                row.map(|(epoch,)| {
                    Ok(PartitionLease {
                        partition,
                        owner: owner.to_owned(),
                        epoch: self.epoch_from(epoch)?,
                        expires_in: remaining(ms),
                    })
                })
                .transpose()
            }

            async fn renew_partitions(
                &self,
                group: &str,
                partitions: &[u32],
                owner: &str,
                ttl: Duration,
            ) -> Result<Vec<PartitionLease>> {
                lease_core::backend::check_partition_args(self, group, owner, Some(ttl))?;
                lease_core::backend::check_partition_batch(partitions)?;
                if partitions.is_empty() {
                    return Ok(Vec::new());
                }
                let ms = $crate::store::ttl_ms(ttl);
                let parts = $parts(&distinct(partitions));
                let g = &self.inner.stmts.groups;
                let rows: Vec<(i64, i64)> =
                    group_conn!(self, "renew partitions", Table::Partitions, |c| {
                        sqlx::query_as(&g.renew)
                            .bind(group)
                            .bind(&parts)
                            .bind(owner)
                            .bind(ms)
                            .fetch_all(c)
                    })?;
                rows.into_iter()
                    .map(|(p, epoch)| self.lease(p, owner.to_owned(), epoch, ms))
                    .collect()
            }

            async fn release_partitions(
                &self,
                group: &str,
                partitions: &[u32],
                owner: &str,
            ) -> Result<usize> {
                lease_core::backend::check_partition_args(self, group, owner, None)?;
                lease_core::backend::check_partition_batch(partitions)?;
                if partitions.is_empty() {
                    return Ok(0);
                }
                let parts = $parts(&distinct(partitions));
                let g = &self.inner.stmts.groups;
                let done = group_conn!(self, "release partitions", Table::Partitions, |c| {
                    sqlx::query(&g.release)
                        .bind(group)
                        .bind(&parts)
                        .bind(owner)
                        .execute(c)
                })?;
                Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
            }

            async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
                lease_core::LeaseStoreExt::validate_name(self, group)?;
                let g = &self.inner.stmts.groups;
                let rows: Vec<(i64, String, i64, i64)> =
                    group_conn!(self, "owners", Table::Partitions, |c| {
                        sqlx::query_as(&g.owners).bind(group).fetch_all(c)
                    })?;
                rows.into_iter()
                    .map(|(p, owner, epoch, left)| self.lease(p, owner, epoch, left))
                    .collect()
            }
        }

        #[lease_core::backend::async_trait]
        impl lease_core::MembershipStore for $crate::SqlStore<$db> {
            async fn heartbeat(
                &self,
                service: &str,
                node: &str,
                address: &str,
                ttl: Duration,
                groups: &[String],
            ) -> Result<Member> {
                lease_core::backend::check_member_args(
                    self,
                    service,
                    node,
                    Some(address),
                    Some(ttl),
                    groups,
                )?;
                let ms = $crate::store::ttl_ms(ttl);
                let list = lease_core::backend::encode_groups(groups);
                let g = &self.inner.stmts.groups;
                group_conn!(self, "heartbeat", Table::Members, |c| {
                    sqlx::query(&g.heartbeat)
                        .bind(service)
                        .bind(node)
                        .bind(address)
                        .bind(&list)
                        .bind(ms)
                        .execute(c)
                })?;
                Ok(written(node, address, groups, ms))
            }

            async fn members(&self, service: &str) -> Result<Vec<Member>> {
                lease_core::backend::check_member_args(self, service, "-", None, None, &[])?;
                let g = &self.inner.stmts.groups;
                let rows: Vec<(String, String, String, i64)> =
                    group_conn!(self, "members", Table::Members, |c| {
                        sqlx::query_as(&g.members).bind(service).fetch_all(c)
                    })?;
                Ok(rows
                    .into_iter()
                    .map(|(node, address, groups, left)| member(node, address, &groups, left))
                    .collect())
            }

            async fn leave(&self, service: &str, node: &str) -> Result<bool> {
                lease_core::backend::check_member_args(self, service, node, None, None, &[])?;
                let g = &self.inner.stmts.groups;
                let done = group_conn!(self, "leave", Table::Members, |c| {
                    sqlx::query(&g.leave).bind(service).bind(node).execute(c)
                })?;
                Ok(done.rows_affected() > 0)
            }
        }
    };
}

#[cfg(feature = "postgres")]
mod postgres {
    use sqlx::Postgres;

    use super::*;
    use crate::common_checks::ColumnInfo;

    /// A batch as PostgreSQL's `bigint[]`, for `partition_no = ANY($2)`.
    fn parts(partitions: &[u32]) -> Vec<i64> {
        partitions.iter().map(|p| i64::from(*p)).collect()
    }

    impl SqlStore<Postgres> {
        /// Start-up checks of the partition and member tables.
        pub(crate) async fn check_group_tables(&self) -> Result<()> {
            check_group_tables!(self, Postgres);
            for table in [Table::Partitions, Table::Members] {
                let name = self.table_of(table).0.to_lowercase();
                let (schema, name) = match name.split_once('.') {
                    Some((s, n)) => (Some(s.to_owned()), n.to_owned()),
                    None => (None, name.clone()),
                };
                let rows: Vec<(String, String, Option<i32>)> =
                    group_conn!(self, "start-up check", table, |c| sqlx::query_as(
                        "SELECT column_name::text, data_type::text, \
                         character_maximum_length::int FROM information_schema.columns \
                         WHERE table_name = $1 AND table_schema = COALESCE($2, current_schema())"
                    )
                    .bind(&name)
                    .bind(&schema)
                    .fetch_all(c))?;
                let have: Vec<ColumnInfo> = rows
                    .into_iter()
                    .map(|(name, data_type, width)| ColumnInfo {
                        name,
                        data_type,
                        width: width.map(i64::from),
                        inexact: None,
                    })
                    .collect();
                self.check_columns(table, &have)?;
            }
            Ok(())
        }
    }

    returning_groups!(Postgres, parts);
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use sqlx::Sqlite;

    use super::*;
    use crate::common_checks::ColumnInfo;

    /// A batch as one JSON array of integers, for `partition_no IN (SELECT value FROM
    /// json_each(?2))`: one bound parameter however many partitions.
    fn parts(partitions: &[u32]) -> String {
        let list: Vec<String> = partitions.iter().map(u32::to_string).collect();
        format!("[{}]", list.join(","))
    }

    impl SqlStore<Sqlite> {
        /// Start-up checks of the partition and member tables (SQLite does not enforce widths:
        /// only the columns' presence is checked).
        pub(crate) async fn check_group_tables(&self) -> Result<()> {
            check_group_tables!(self, Sqlite);
            for table in [Table::Partitions, Table::Members] {
                let full = self.table_of(table).0.to_owned();
                let (schema, name) = match full.split_once('.') {
                    Some((s, n)) => (s.to_owned(), n.to_owned()),
                    None => ("main".to_owned(), full.clone()),
                };
                let rows: Vec<(String, String)> =
                    group_conn!(self, "start-up check", table, |c| sqlx::query_as(
                        "SELECT name, type FROM pragma_table_info(?1, ?2)"
                    )
                    .bind(&name)
                    .bind(&schema)
                    .fetch_all(c))?;
                let have: Vec<ColumnInfo> = rows
                    .into_iter()
                    .map(|(name, data_type)| ColumnInfo {
                        name,
                        data_type,
                        width: None,
                        inexact: None,
                    })
                    .collect();
                self.check_columns(table, &have)?;
            }
            Ok(())
        }
    }

    returning_groups!(Sqlite, parts);
}

#[cfg(feature = "mysql")]
mod mysql {
    use std::fmt::Write as _;

    use lease_core::{
        MembershipStore, PartitionStore,
        backend::{
            async_trait, check_member_args, check_partition_args, check_partition_batch,
            encode_groups,
        },
    };
    use sqlx::{MySql, Row};

    use super::*;
    use crate::common_checks::ColumnInfo;
    use crate::schema::{GROUP_MARKER, OWNER_MARKER, PARTITIONS_MARKER, TTL_MARKER};
    use crate::store::ttl_ms;

    /// A column as MySQL's information_schema describes it: name, data type, full column
    /// type, width in characters, width in bytes, collation.
    type MySqlColumn = (
        String,
        String,
        String,
        Option<i64>,
        Option<i64>,
        Option<String>,
    );

    /// A string as a MySQL hex literal (`X'6a6f62'`): a binary string whatever the session's
    /// character set or SQL mode, so nothing in it can end the literal.
    fn hex_literal(s: &str) -> String {
        let mut out = String::with_capacity(3 + 2 * s.len());
        out.push_str("X'");
        for b in s.bytes() {
            let _ = write!(out, "{b:02x}");
        }
        out.push('\'');
        out
    }

    /// A text-protocol template of `schema.rs` with its markers filled in: the group and the
    /// owner as hex literals, the partitions and the TTL as decimal integers. No value is
    /// interpolated any other way.
    fn fill(template: &str, group: &str, owner: &str, partitions: &[u32], ttl_ms: i64) -> String {
        let list: Vec<String> = partitions.iter().map(u32::to_string).collect();
        template
            .replace(PARTITIONS_MARKER, &list.join(","))
            .replace(TTL_MARKER, &ttl_ms.to_string())
            .replace(GROUP_MARKER, &hex_literal(group))
            .replace(OWNER_MARKER, &hex_literal(owner))
    }

    type Boxed<'a, T> = std::pin::Pin<
        Box<dyn std::future::Future<Output = std::result::Result<T, sqlx::Error>> + Send + 'a>,
    >;

    /// A text-protocol request's rows. (Through `Executor`, whose boxed future the compiler
    /// can prove `Send` inside an `async_trait` method; `RawSql::fetch_all`'s it cannot.)
    fn raw_rows<'a>(
        c: &'a mut sqlx::mysql::MySqlConnection,
        sql: &'a str,
    ) -> Boxed<'a, Vec<sqlx::mysql::MySqlRow>> {
        sqlx::Executor::fetch_all(c, sqlx::raw_sql(sql))
    }

    /// A text-protocol request's outcome (boxed as [`raw_rows`]).
    fn raw_execute<'a>(
        c: &'a mut sqlx::mysql::MySqlConnection,
        sql: &'a str,
    ) -> Boxed<'a, sqlx::mysql::MySqlQueryResult> {
        sqlx::Executor::execute(c, sqlx::raw_sql(sql))
    }

    impl SqlStore<MySql> {
        /// Start-up checks of the partition and member tables: widths (VARBINARY and TEXT in
        /// bytes, VARCHAR in characters), byte-wise comparison of every compared column, and
        /// `partition_no` able to hold every `u32`.
        pub(crate) async fn check_group_tables(&self) -> Result<()> {
            check_group_tables!(self, MySql);
            for table in [Table::Partitions, Table::Members] {
                let full = self.table_of(table).0.to_owned();
                let (schema, name) = match full.split_once('.') {
                    Some((s, n)) => (Some(s.to_owned()), n.to_owned()),
                    None => (None, full.clone()),
                };
                let rows: Vec<MySqlColumn> =
                    group_conn!(self, "start-up check", table, |c| sqlx::query_as(
                        "SELECT CAST(COLUMN_NAME AS CHAR), CAST(DATA_TYPE AS CHAR), \
                         CAST(COLUMN_TYPE AS CHAR), CAST(CHARACTER_MAXIMUM_LENGTH AS SIGNED), \
                         CAST(CHARACTER_OCTET_LENGTH AS SIGNED), CAST(COLLATION_NAME AS CHAR) \
                         FROM information_schema.COLUMNS \
                         WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?"
                    )
                    .bind(&schema)
                    .bind(&name)
                    .fetch_all(c))?;
                let mut have = Vec::new();
                for (name, data_type, column_type, chars, octets, collation) in rows {
                    let t = data_type.to_ascii_lowercase();
                    let exact_collation = collation
                        .as_deref()
                        .is_some_and(|c| c.ends_with("_nopad_bin") || c.ends_with("_0900_bin"));
                    let inexact =
                        match t.as_str() {
                            "varbinary" | "blob" | "tinyblob" | "mediumblob" | "longblob" => None,
                            "varchar" | "text" | "tinytext" | "mediumtext" | "longtext"
                                if exact_collation =>
                            {
                                None
                            }
                            "int" | "bigint" | "smallint" | "mediumint" | "tinyint" => None,
                            _ => Some(collation.clone().unwrap_or_else(|| {
                                format!("{data_type} (pads values to its width)")
                            })),
                        };
                    if name.eq_ignore_ascii_case("partition_no")
                        && !(t == "bigint"
                            || (t == "int"
                                && column_type.to_ascii_lowercase().contains("unsigned")))
                    {
                        return Err(Error::new(
                            ErrorKind::Unavailable,
                            format!(
                                "the `partition_no` column of `{full}` on {} is {column_type}, \
                                 which cannot hold every partition number (0 to 4294967295); \
                                 make it INT UNSIGNED as in:\n{}",
                                self.inner.server,
                                self.table_of(table).1
                            ),
                        )
                        .with_temporary(false));
                    }
                    let width = if matches!(t.as_str(), "varchar" | "char") {
                        chars
                    } else {
                        octets
                    };
                    have.push(ColumnInfo {
                        name,
                        data_type,
                        width,
                        inexact,
                    });
                }
                self.check_columns(table, &have)?;
            }
            Ok(())
        }
    }

    #[async_trait]
    impl PartitionStore for SqlStore<MySql> {
        async fn acquire_partition(
            &self,
            group: &str,
            partition: u32,
            owner: &str,
            ttl: Duration,
        ) -> Result<Option<PartitionLease>> {
            check_partition_args(self, group, owner, Some(ttl))?;
            let ms = ttl_ms(ttl);
            let g = &self.inner.stmts.groups;
            // LAST_INSERT_ID: the epoch when acquired or kept, 0 when another owner holds it.
            let done = group_conn!(self, "acquire partition", Table::Partitions, |c| {
                sqlx::query(&g.acquire)
                    .bind(group)
                    .bind(partition)
                    .bind(owner)
                    .bind(ms)
                    // epoch: kept when still the owner's
                    .bind(owner)
                    // owner
                    .bind(owner)
                    // expires_at_ms
                    .bind(owner)
                    .bind(ms)
                    .execute(c)
            })?;
            Ok(match done.last_insert_id() {
                0 => None,
                epoch => Some(PartitionLease {
                    partition,
                    owner: owner.to_owned(),
                    epoch,
                    expires_in: remaining(ms),
                }),
            })
        }

        /// One request of three statements over the text protocol (one round trip): the
        /// batch is interpolated as integers and the group and owner as hex literals, so the
        /// request need not be prepared whatever the batch's size.
        async fn renew_partitions(
            &self,
            group: &str,
            partitions: &[u32],
            owner: &str,
            ttl: Duration,
        ) -> Result<Vec<PartitionLease>> {
            check_partition_args(self, group, owner, Some(ttl))?;
            check_partition_batch(partitions)?;
            if partitions.is_empty() {
                return Ok(Vec::new());
            }
            let ms = ttl_ms(ttl);
            let sql = fill(
                &self.inner.stmts.groups.renew,
                group,
                owner,
                &distinct(partitions),
                ms,
            );
            let op = "renew partitions";
            let rows = group_conn!(self, op, Table::Partitions, |c| { raw_rows(c, &sql) })?;
            rows.iter()
                .map(|row| {
                    let read = || -> std::result::Result<(u32, i64, i64), sqlx::Error> {
                        Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
                    };
                    let (p, epoch, left) =
                        read().map_err(|e| self.group_err(e, op, Table::Partitions))?;
                    self.lease(i64::from(p), owner.to_owned(), epoch, left)
                })
                .collect()
        }

        /// One `UPDATE` over the text protocol, as the renewal. Its affected rows are the
        /// leases it ended whatever the client's found-rows flag: it matches live leases only
        /// and moves each one's expiry back to now, so every row it matches, it changes.
        async fn release_partitions(
            &self,
            group: &str,
            partitions: &[u32],
            owner: &str,
        ) -> Result<usize> {
            check_partition_args(self, group, owner, None)?;
            check_partition_batch(partitions)?;
            if partitions.is_empty() {
                return Ok(0);
            }
            let sql = fill(
                &self.inner.stmts.groups.release,
                group,
                owner,
                &distinct(partitions),
                0,
            );
            let done = group_conn!(self, "release partitions", Table::Partitions, |c| {
                raw_execute(c, &sql)
            })?;
            Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
        }

        async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
            lease_core::LeaseStoreExt::validate_name(self, group)?;
            let g = &self.inner.stmts.groups;
            let rows: Vec<(u32, Vec<u8>, i64, i64)> =
                group_conn!(self, "owners", Table::Partitions, |c| {
                    sqlx::query_as(&g.owners).bind(group).fetch_all(c)
                })?;
            rows.into_iter()
                .map(|(p, owner, epoch, left)| {
                    let owner = self.text_from(Table::Partitions, "owner", owner)?;
                    self.lease(i64::from(p), owner, epoch, left)
                })
                .collect()
        }

        // batch_renew: the default, one round trip.
    }

    #[async_trait]
    impl MembershipStore for SqlStore<MySql> {
        /// One upsert, one round trip. MySQL has no `RETURNING`, but the answer is what was
        /// written: the expiry is `ttl` from the statement's own reading of the server's
        /// clock, so `expires_in` is `ttl` (reading the clock back would cost a second round
        /// trip and tell nothing more).
        async fn heartbeat(
            &self,
            service: &str,
            node: &str,
            address: &str,
            ttl: Duration,
            groups: &[String],
        ) -> Result<Member> {
            check_member_args(self, service, node, Some(address), Some(ttl), groups)?;
            let ms = ttl_ms(ttl);
            let list = encode_groups(groups);
            let g = &self.inner.stmts.groups;
            group_conn!(self, "heartbeat", Table::Members, |c| {
                sqlx::query(&g.heartbeat)
                    .bind(service)
                    .bind(node)
                    .bind(address)
                    .bind(&list)
                    .bind(ms)
                    .bind(address)
                    .bind(&list)
                    .bind(ms)
                    .execute(c)
            })?;
            Ok(written(node, address, groups, ms))
        }

        async fn members(&self, service: &str) -> Result<Vec<Member>> {
            check_member_args(self, service, "-", None, None, &[])?;
            let g = &self.inner.stmts.groups;
            let rows: Vec<(Vec<u8>, Vec<u8>, Vec<u8>, i64)> =
                group_conn!(self, "members", Table::Members, |c| {
                    sqlx::query_as(&g.members).bind(service).fetch_all(c)
                })?;
            rows.into_iter()
                .map(|(node, address, groups, left)| {
                    let node = self.text_from(Table::Members, "node", node)?;
                    let address = self.text_from(Table::Members, "address", address)?;
                    let groups = self.text_from(Table::Members, "group_list", groups)?;
                    Ok(member(node, address, &groups, left))
                })
                .collect()
        }

        /// One `UPDATE`; its affected rows are 1 exactly when the member was live, whatever
        /// the found-rows flag (it matches a live record only, and always changes it).
        async fn leave(&self, service: &str, node: &str) -> Result<bool> {
            check_member_args(self, service, node, None, None, &[])?;
            let g = &self.inner.stmts.groups;
            let done = group_conn!(self, "leave", Table::Members, |c| {
                sqlx::query(&g.leave).bind(service).bind(node).execute(c)
            })?;
            Ok(done.rows_affected() > 0)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn templates_take_only_hex_and_integers() {
            assert_eq!(hex_literal("a'b"), "X'612762'");
            let sql = fill(
                "g=/*group*/ o=/*owner*/ p IN (/*partitions*/) t=/*ttl*/",
                "x'; DROP TABLE t; --",
                "/*partitions*/",
                &[0, 7, u32::MAX],
                1500,
            );
            assert_eq!(
                sql,
                "g=X'78273b2044524f50205441424c4520743b202d2d' o=X'2f2a706172746974696f6e732a2f' \
                 p IN (0,7,4294967295) t=1500"
            );
        }
    }
}
