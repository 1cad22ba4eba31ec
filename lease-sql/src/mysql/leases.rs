//! MySQL's lease writes: no `RETURNING` on `UPDATE`, so the term comes back in the OK packet
//! through `LAST_INSERT_ID(expr)`, 0 when no row matched (see `statements.rs`). The rest of
//! [`LeaseStore`](lease_core::LeaseStore) is shared, see `leases.rs`.

use std::future::Future;
use std::sync::atomic::Ordering;

use lease_core::Result;
use lease_core::backend::notify::{Topic, Wakeups};
use sqlx::MySql;
use sqlx::mysql::{MySqlArguments, MySqlQueryResult};
use sqlx::query::Query;

use super::MySqlStore;
use crate::leases::LeaseDriver;
use crate::store::Table;
use crate::store::{SqlStore, Token, raw_conn, with_conn};

/// `LAST_INSERT_ID()` as a term or epoch: 0 means no row matched (or the lease was held).
pub(super) fn inserted(last_insert_id: u64) -> Option<u64> {
    (last_insert_id != 0).then_some(last_insert_id)
}

impl LeaseDriver for MySql {
    /// The claim: the new term, `None` when held. Retried at once after a deadlock (the
    /// statement was rolled back whole); on MariaDB a row locked by a verified transaction
    /// fails it at once (see [`Statements::claim_nowait`](crate::wire::Statements)), answered
    /// as held.
    async fn claim_row(
        store: &MySqlStore,
        name: &str,
        hex: &str,
        instance: &str,
        ms: i64,
        gate_ms: i64,
    ) -> Result<Option<u64>> {
        let stmt = if store.inner.nowait_claims.load(Ordering::Relaxed) {
            &store.inner.stmts.claim_nowait
        } else {
            &store.inner.stmts.claim
        };
        let mut attempt = 0;
        let done = loop {
            let r = raw_conn!(store, lease_core::layer::Operation::Claim, |c| {
                // In the order of the statement's `?` (see `statements.rs`): the new row, the
                // gate's test, then each assignment's holder test and value.
                sqlx::query(stmt)
                    .bind(name)
                    .bind(hex)
                    .bind(instance)
                    .bind(ms)
                    .bind(gate_ms)
                    .bind(instance)
                    .bind(hex)
                    .bind(hex)
                    .bind(hex)
                    .bind(instance)
                    .bind(hex)
                    .bind(hex)
                    .bind(gate_ms)
                    .bind(hex)
                    .bind(hex)
                    .bind(ms)
                    .execute(c)
            });
            match r {
                Err(e)
                    if crate::error::is_deadlock(&e)
                        && attempt < crate::error::DEADLOCK_RETRIES =>
                {
                    attempt += 1;
                }
                // The row is locked by a transaction (a verified one of the holder's): live, so
                // held. The statement was rolled back whole.
                Err(e) if crate::error::is_lock_busy(&e) => return Ok(None),
                r => break r.map_err(|e| store.err(e, lease_core::layer::Operation::Claim))?,
            }
        };
        Ok(inserted(done.last_insert_id()))
    }

    async fn renew_row(store: &MySqlStore, name: &str, hex: &str, ms: i64) -> Result<Option<u64>> {
        let q = sqlx::query(&store.inner.stmts.renew)
            .bind(ms)
            .bind(name)
            .bind(hex);
        Ok(inserted(
            store
                .exec(lease_core::layer::Operation::Renew, q)
                .await?
                .last_insert_id(),
        ))
    }

    /// Not called: MySQL renews many leases one by one (`RENEW_MANY` is `false`).
    async fn renew_many_rows(
        _store: &MySqlStore,
        _names: &[&str],
        _hexes: &[&str],
        _ms: i64,
    ) -> Result<Vec<(String, Option<i64>, i64)>> {
        Ok(Vec::new())
    }

    async fn release_row(store: &MySqlStore, name: &str, hex: &str) -> Result<bool> {
        let q = sqlx::query(&store.inner.stmts.release).bind(name).bind(hex);
        Ok(store
            .exec(lease_core::layer::Operation::Release, q)
            .await?
            .last_insert_id()
            > 0)
    }

    async fn hand_over_row(
        store: &MySqlStore,
        name: &str,
        hex: &str,
        to: &str,
        window_ms: i64,
    ) -> Result<bool> {
        let q = sqlx::query(&store.inner.stmts.hand_over)
            .bind(window_ms)
            .bind(to)
            .bind(name)
            .bind(hex);
        Ok(store
            .exec(lease_core::layer::Operation::HandOver, q)
            .await?
            .last_insert_id()
            > 0)
    }

    async fn force_release_row(store: &MySqlStore, name: &str) -> Result<bool> {
        let q = sqlx::query(&store.inner.stmts.force_release).bind(name);
        Ok(store
            .exec(lease_core::layer::Operation::ForceRelease, q)
            .await?
            .last_insert_id()
            > 0)
    }

    fn check_available(store: &MySqlStore) -> impl Future<Output = Result<()>> + Send {
        store.check_available()
    }

    fn check_group_table(
        store: &MySqlStore,
        table: Table,
    ) -> impl Future<Output = Result<()>> + Send {
        store.check_group_table(table)
    }

    fn watch(store: &MySqlStore, topic: &Topic) -> Wakeups {
        store.watch(topic)
    }

    fn verify_row(
        store: &MySqlStore,
        name: &str,
        hex: &str,
    ) -> impl Future<Output = Result<Option<(i64, i64)>>> + Send {
        store.shared_verify_row(name, hex)
    }

    fn get_row(
        store: &MySqlStore,
        name: &str,
    ) -> impl Future<Output = Result<Option<(String, i64, i64)>>> + Send {
        store.shared_get_row(name)
    }

    fn name_rows(
        store: &MySqlStore,
        bounds: crate::leases::NameBounds<'_>,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send {
        store.shared_name_rows(bounds, 2)
    }

    fn verify_locked(
        store: &MySqlStore,
        conn: &mut Self::Connection,
        name: &str,
        hex: &str,
        token: Token,
    ) -> impl Future<Output = std::result::Result<bool, sqlx::Error>> + Send {
        store.shared_verify_locked(conn, name, hex, token)
    }
}

impl SqlStore<MySql> {
    /// Runs one statement of `op` on a lease connection.
    async fn exec(
        &self,
        op: lease_core::layer::Operation,
        q: Query<'_, MySql, MySqlArguments>,
    ) -> Result<MySqlQueryResult> {
        with_conn!(self, op, |c| q.execute(c))
    }
}
