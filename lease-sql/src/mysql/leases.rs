//! MySQL's lease writes: no `RETURNING` on `UPDATE`, so the term comes back in the OK packet
//! through `LAST_INSERT_ID(expr)`, 0 when no row matched (see `statements.rs`). The rest of
//! [`LeaseStore`](lease_core::LeaseStore) is shared, see `leases.rs`.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::Ordering;

use lease_core::Result;
use lease_core::backend::notify::{Topic, Wakeups};
use sqlx::mysql::{MySqlArguments, MySqlQueryResult};
use sqlx::query::Query;
use sqlx::{MySql, Row};

use super::MySqlStore;
use super::partitions::{hex_literal, raw_rows};
use crate::leases::LeaseDriver;
use crate::store::Table;
use crate::store::{SqlStore, Token, raw_conn, with_conn};
use crate::wire::{BATCH_MARKER, TTL_MARKER, WIDTH_MARKER};

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
    ) -> Result<Option<u64>> {
        let stmt = if store.inner.nowait_claims.load(Ordering::Relaxed) {
            &store.inner.stmts.claim_nowait
        } else {
            &store.inner.stmts.claim
        };
        let mut attempt = 0;
        let done = loop {
            let r = raw_conn!(store, lease_core::layer::Operation::Claim, |c| {
                sqlx::query(stmt)
                    .bind(name)
                    .bind(hex)
                    .bind(instance)
                    .bind(ms)
                    .bind(hex)
                    .bind(instance)
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

    /// MariaDB 10.6 or later (found at start-up); MySQL and older MariaDB renew many leases one
    /// by one.
    fn renews_many(store: &MySqlStore) -> bool {
        store.inner.batch_renewals.load(Ordering::Relaxed)
    }

    /// One text-protocol request per [`BATCH_REQUEST_BYTES`] of batch (one for 10,000 names
    /// of up to about 50 bytes; see `Statements::renew_many`): `(name, term, 0)` per lease
    /// renewed, `(name, NULL, 1)` per lease found live but passed by (its row locked by another
    /// transaction), nothing for a lease not live under its holder.
    async fn renew_many_rows(
        store: &MySqlStore,
        names: &[&str],
        hexes: &[&str],
        ms: i64,
    ) -> Result<Vec<(String, Option<i64>, i64)>> {
        let op = lease_core::layer::Operation::RenewMany;
        let width = store.inner.config.max_name_bytes.max(1).to_string();
        let mut found = Vec::with_capacity(names.len());
        let mut start = 0;
        while start < names.len() {
            let (json, end) = batch_json(names, hexes, start);
            let sql = store
                .inner
                .stmts
                .renew_many
                .replace(TTL_MARKER, &ms.to_string())
                .replace(WIDTH_MARKER, &width)
                .replace(BATCH_MARKER, &hex_literal(&json));
            let rows = with_conn!(store, op, |c| raw_rows(c, &sql))?;
            for row in &rows {
                let read = || -> std::result::Result<(i64, i64, i64), sqlx::Error> {
                    Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
                };
                let (item, term, renewed) = read().map_err(|e| store.err(e, op))?;
                let name = usize::try_from(item)
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .and_then(|i| names.get(start + i).filter(|_| start + i < end))
                    .ok_or_else(|| {
                        lease_core::Error::new(
                            lease_core::ErrorKind::Backend,
                            format!(
                                "the server answered item {item} of a batch of {} leases to \
                                 renew; is the lease table the one this store created?",
                                end - start
                            ),
                        )
                    })?;
                let answer = if renewed != 0 {
                    (Some(term), 0)
                } else {
                    (None, 1)
                };
                found.push(((*name).to_owned(), answer.0, answer.1));
            }
            start = end;
        }
        Ok(found)
    }

    async fn release_row(store: &MySqlStore, name: &str, hex: &str) -> Result<bool> {
        let q = sqlx::query(&store.inner.stmts.release).bind(name).bind(hex);
        Ok(store
            .exec(lease_core::layer::Operation::Release, q)
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

/// The most bytes of JSON one request of [`renew_many_rows`](LeaseDriver::renew_many_rows)
/// carries (twice as many as a hex literal): far below every server's `max_allowed_packet`
/// (4 MiB at least on the servers supported), and enough for 10,000 names of about 50 bytes.
const BATCH_REQUEST_BYTES: usize = 1 << 20;

/// The JSON array of `[name, holder]` pairs from `start`, as many as fit in
/// [`BATCH_REQUEST_BYTES`] (one at least), and the index after the last one taken.
fn batch_json(names: &[&str], hexes: &[&str], start: usize) -> (String, usize) {
    let mut json = String::from("[");
    let mut end = start;
    for (name, hex) in names.iter().zip(hexes).skip(start) {
        let mut pair = String::with_capacity(name.len() + hex.len() + 8);
        pair.push('[');
        json_string(&mut pair, name);
        pair.push(',');
        json_string(&mut pair, hex);
        pair.push(']');
        if end > start && json.len() + pair.len() + 2 > BATCH_REQUEST_BYTES {
            break;
        }
        if end > start {
            json.push(',');
        }
        json.push_str(&pair);
        end += 1;
    }
    json.push(']');
    (json, end)
}

/// `s` as a JSON string: `"` and `\` escaped, every control character as `\u00XX`.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
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
