//! MySQL's partition statements: the acquire reads its epoch back through `LAST_INSERT_ID`, the
//! batch renewal and release go over the text protocol (one round trip, no prepare whatever the
//! batch's size). The rest of [`PartitionStore`](lease_core::backend::partitions::PartitionStore)
//! is shared, see `partitions.rs`.

use std::fmt::Write as _;

use lease_core::Result;
use sqlx::{MySql, Row};

use super::MySqlStore;
use super::leases::inserted;
use crate::partitions::{PartitionDriver, group_conn};
use crate::store::Table;
use crate::wire::{GROUP_MARKER, OWNER_MARKER, PARTITIONS_MARKER, TTL_MARKER};

/// A string as a MySQL hex literal (`X'6a6f62'`): a binary string whatever the session's
/// character set or SQL mode, so nothing in it can end the literal.
pub(super) fn hex_literal(s: &str) -> String {
    let mut out = String::with_capacity(3 + 2 * s.len());
    out.push_str("X'");
    for b in s.bytes() {
        let _ = write!(out, "{b:02x}");
    }
    out.push('\'');
    out
}

/// A text-protocol template of `statements.rs` with its markers filled in: the group and the
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
pub(super) fn raw_rows<'a>(
    c: &'a mut sqlx::mysql::MySqlConnection,
    sql: &'a str,
) -> Boxed<'a, Vec<sqlx::mysql::MySqlRow>> {
    sqlx::Executor::fetch_all(c, sqlx::raw_sql(sql))
}

/// A text-protocol request's outcome (boxed as [`raw_rows`]).
pub(super) fn raw_execute<'a>(
    c: &'a mut sqlx::mysql::MySqlConnection,
    sql: &'a str,
) -> Boxed<'a, sqlx::mysql::MySqlQueryResult> {
    sqlx::Executor::execute(c, sqlx::raw_sql(sql))
}

impl PartitionDriver for MySql {
    /// `LAST_INSERT_ID`: the epoch when acquired or kept, 0 when another owner holds it.
    async fn acquire_row(
        store: &MySqlStore,
        group: &str,
        partition: u32,
        owner: &str,
        ms: i64,
    ) -> Result<Option<u64>> {
        let g = &store.inner.stmts.groups;
        let done = group_conn!(
            store,
            lease_core::layer::Operation::AcquirePartition,
            Table::Partitions,
            |c| {
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
            }
        )?;
        Ok(inserted(done.last_insert_id()))
    }

    /// One request of three statements over the text protocol (one round trip): the batch is
    /// interpolated as integers and the group and owner as hex literals, so the request need
    /// not be prepared whatever the batch's size.
    async fn renew_rows(
        store: &MySqlStore,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ms: i64,
    ) -> Result<Vec<(i64, i64, i64)>> {
        let sql = fill(
            &store.inner.stmts.groups.renew,
            group,
            owner,
            partitions,
            ms,
        );
        let op = lease_core::layer::Operation::RenewPartitions;
        let rows = group_conn!(store, op, Table::Partitions, |c| { raw_rows(c, &sql) })?;
        rows.iter()
            .map(|row| {
                let read = || -> std::result::Result<(u32, i64, i64), sqlx::Error> {
                    Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
                };
                let (p, epoch, left) =
                    read().map_err(|e| store.group_err(e, op, Table::Partitions))?;
                Ok((i64::from(p), epoch, left))
            })
            .collect()
    }

    /// One `UPDATE` over the text protocol, as the renewal. Its affected rows are the leases it
    /// ended whatever the client's found-rows flag: it matches live leases only and moves each
    /// one's expiry back to now, so every row it matches, it changes.
    async fn release_rows(
        store: &MySqlStore,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> Result<u64> {
        let sql = fill(
            &store.inner.stmts.groups.release,
            group,
            owner,
            partitions,
            0,
        );
        let done = group_conn!(
            store,
            lease_core::layer::Operation::ReleasePartitions,
            Table::Partitions,
            |c| { raw_execute(c, &sql) }
        )?;
        Ok(done.rows_affected())
    }

    /// The owners, read as bytes (binary columns) and checked to be UTF-8.
    async fn owner_rows(store: &MySqlStore, group: &str) -> Result<Vec<(i64, String, i64, i64)>> {
        let g = &store.inner.stmts.groups;
        let rows: Vec<(u32, Vec<u8>, i64, i64)> = group_conn!(
            store,
            lease_core::layer::Operation::Owners,
            Table::Partitions,
            |c| { sqlx::query_as(&g.owners).bind(group).fetch_all(c) }
        )?;
        rows.into_iter()
            .map(|(p, owner, epoch, left)| {
                let owner = store.text_from(Table::Partitions, "owner", owner)?;
                Ok((i64::from(p), owner, epoch, left))
            })
            .collect()
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
