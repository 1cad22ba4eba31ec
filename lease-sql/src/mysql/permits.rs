//! MySQL's counted claim (one transaction in one text-protocol request), and its permit
//! renewal and release: no `RETURNING` on `UPDATE`, so the term comes back through
//! `LAST_INSERT_ID(term)`, 0 when no row matched (see `statements.rs`). The rest of the permit
//! operations is shared, see `permits.rs`.

use std::future::Future;

use lease_core::Result;
use sqlx::{MySql, Row};

use super::MySqlStore;
use super::leases::inserted;
use super::partitions::{hex_literal, raw_execute, raw_rows};
use crate::partitions::group_conn;
use crate::permits::PermitDriver;
use crate::store::Table;
use crate::wire::{COUNT_MARKER, HOLDER_MARKER, INSTANCE_MARKER, NAME_MARKER, TTL_MARKER};

/// The claim's template filled in: the name, holder and instance as hex literals, the count and
/// the TTL as decimal integers. No value is interpolated any other way.
fn fill(template: &str, name: &str, hex: &str, instance: &str, count: u32, ms: i64) -> String {
    template
        .replace(COUNT_MARKER, &count.to_string())
        .replace(TTL_MARKER, &ms.to_string())
        .replace(NAME_MARKER, &hex_literal(name))
        .replace(HOLDER_MARKER, &hex_literal(hex))
        .replace(INSTANCE_MARKER, &hex_literal(instance))
}

/// After the claim's request failed with `e` part-way, its transaction may be open: rolled
/// back before the connection is used again (the next `START TRANSACTION` would commit it).
/// `e` when the rollback went through, or when the connection is closed for `e` anyway (not
/// the server's error); else an error that is not the server's, so the connection is closed.
async fn rolled_back(c: &mut sqlx::mysql::MySqlConnection, e: sqlx::Error) -> sqlx::Error {
    match raw_execute(c, "ROLLBACK").await {
        Ok(_) => e,
        Err(_) if !matches!(e, sqlx::Error::Database(_)) => e,
        Err(r) => sqlx::Error::Protocol(format!("{e}; and the rollback after it failed: {r}")),
    }
}

impl PermitDriver for MySql {
    /// The permit and term granted, `None` when full: one transaction sent as one request (see
    /// `statements.rs`), so no lock is held across a round trip. Claims of a name queue on the
    /// counter row's lock, and the locking read sees the latest rows. A deadlock (InnoDB rolled
    /// the transaction back) is retried at once.
    async fn claim_permit_row(
        store: &MySqlStore,
        name: &str,
        count: u32,
        hex: &str,
        instance: &str,
        ms: i64,
    ) -> Result<Option<(i64, i64)>> {
        let sql = fill(
            &store.inner.stmts.permits.claim,
            name,
            hex,
            instance,
            count,
            ms,
        );
        let sql = &sql;
        let op = lease_core::layer::Operation::ClaimPermit;
        let rows = group_conn!(store, op, Table::Permits, |c| async move {
            match raw_rows(&mut *c, sql).await {
                Ok(rows) => Ok(rows),
                Err(e) => Err(rolled_back(c, e).await),
            }
        })?;
        let read = |row: &sqlx::mysql::MySqlRow| -> std::result::Result<_, sqlx::Error> {
            Ok((
                row.try_get::<Option<i64>, _>(0)?,
                row.try_get::<Option<i64>, _>(1)?,
            ))
        };
        match rows.last().map(read).transpose() {
            Ok(Some((Some(permit), Some(term)))) => Ok(Some((permit, term))),
            Ok(_) => Ok(None),
            Err(e) => Err(store.group_err(e, op, Table::Permits)),
        }
    }

    /// The term, `None` when the permit is not the holder's live.
    async fn renew_permit_row(
        store: &MySqlStore,
        name: &str,
        permit: u32,
        hex: &str,
        ms: i64,
    ) -> Result<Option<i64>> {
        let p = &store.inner.stmts.permits;
        let done = group_conn!(
            store,
            lease_core::layer::Operation::RenewPermit,
            Table::Permits,
            |c| {
                sqlx::query(&p.renew)
                    .bind(ms)
                    .bind(name)
                    .bind(i64::from(permit))
                    .bind(hex)
                    .execute(c)
            }
        )?;
        Ok(inserted(done.last_insert_id()).map(|t| i64::try_from(t).unwrap_or(i64::MAX)))
    }

    /// Whether the holder's live permit ended.
    async fn release_permit_row(
        store: &MySqlStore,
        name: &str,
        permit: u32,
        hex: &str,
    ) -> Result<bool> {
        let p = &store.inner.stmts.permits;
        let done = group_conn!(
            store,
            lease_core::layer::Operation::ReleasePermit,
            Table::Permits,
            |c| {
                sqlx::query(&p.release)
                    .bind(name)
                    .bind(i64::from(permit))
                    .bind(hex)
                    .execute(c)
            }
        )?;
        Ok(inserted(done.last_insert_id()).is_some())
    }

    fn verify_permit_row(
        store: &MySqlStore,
        name: &str,
        hex: &str,
    ) -> impl Future<Output = Result<Option<(i64, i64, i64)>>> + Send {
        store.shared_verify_permit_row(name, hex)
    }

    fn permit_rows(
        store: &MySqlStore,
        name: &str,
    ) -> impl Future<Output = Result<Vec<(i64, String, i64, i64)>>> + Send {
        store.shared_permit_rows(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_template_takes_only_hex_and_integers() {
        let sql = fill(
            "n=/*name*/ h=/*holder*/ i=/*instance*/ c=/*count*/ ttl=/*ttl*/",
            "x'; DROP TABLE t; --",
            "/*name*/",
            "é",
            3,
            1500,
        );
        assert_eq!(
            sql,
            "n=X'78273b2044524f50205441424c4520743b202d2d' h=X'2f2a6e616d652a2f' i=X'c3a9' \
             c=3 ttl=1500"
        );
    }
}
