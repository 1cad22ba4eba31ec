//! PostgreSQL's hints: the `NOTIFY` channel of a lease table and the store's listener task.
//!
//! The statements that change hands send `pg_notify(channel, payload)` inside the statement
//! (see `statements.rs`), so a hint goes out when, and only when, the change commits. The
//! listener is one connection of the store's own (opened with the application pool's connect
//! options, or those given to
//! [`with_listener_options`](crate::PostgresStore::with_listener_options), `application_name`
//! set to `lease-sql hints <channel>`), started on the first wait and run by
//! [`lease_core::backend::listen`]: while it is down the hints say so, it reconnects with
//! back-off, and once it listens again every topic is woken (what happened meanwhile is
//! unknown). It ends when the store is dropped, which closes its connection.
//!
//! A connection can die without a reset (a network that drops packets silently, a server host
//! that froze): its socket stays open and no notification comes, which looks like a quiet
//! table. So the listener proves its connection alive: every [`PING_EVERY`] it sends `SELECT 1`
//! on it and waits at most [`PING_TIMEOUT`] for the answer; no answer ends the session (the
//! hints say they are disconnected, and the listener reconnects). A dead link is thus found
//! within `PING_EVERY + PING_TIMEOUT` (10 s).

use std::time::Duration;

use lease_core::backend::listen::{Backoff, Link, Listener};
use lease_core::backend::notify::Hub;
use lease_core::backend::notify::Topic;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Executor, PgPool};

use crate::hints::topic_of;

/// How often the listener checks its connection with a round trip.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(5);

/// How long the listener waits for the answer to its check (and for its `LISTEN`) before it
/// takes the connection for dead.
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// PostgreSQL's longest identifier, in bytes (a longer channel name is refused by `pg_notify`).
const MAX_IDENT_BYTES: usize = 63;

/// The channel of the lease table `table` in `schema`: `lease_sql.<schema>.<table>`, lowercased
/// (PostgreSQL folds the unquoted names the store sends). A name that is longer than 63 bytes,
/// or has characters other than ASCII letters, digits and underscores, is cut and given a hash
/// of the whole, so every process derives the same channel and it is safe in a SQL literal.
pub(crate) fn channel(schema: &str, table: &str) -> String {
    let full = format!(
        "lease_sql.{}.{}",
        schema.to_lowercase(),
        table.to_lowercase()
    );
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    if full.len() <= MAX_IDENT_BYTES && full.chars().all(plain) {
        return full;
    }
    let head: String = full
        .chars()
        .filter(|c| plain(*c))
        .take(MAX_IDENT_BYTES - 17)
        .collect();
    format!("{head}~{:016x}", fnv1a(full.as_bytes()))
}

/// FNV-1a, 64 bits: stable across processes, builds and Rust versions (std's hasher is not).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The listener's `application_name`, at most 63 bytes: how an operator (or a test) finds it in
/// `pg_stat_activity`.
pub(crate) fn application_name(channel: &str) -> String {
    let mut name = format!("lease-sql hints {channel}");
    while name.len() > MAX_IDENT_BYTES {
        name.pop();
    }
    name
}

/// Starts the listener feeding `hub` from `channel`, on the current tokio runtime, through
/// [`lease_core::backend::listen`] (reconnect with back-off, `hub` disconnected in between).
/// `server` names the database in logs (never a password).
pub(crate) fn start(
    options: PgConnectOptions,
    channel: String,
    server: &str,
    hub: &Hub,
) -> lease_core::Result<Listener> {
    // A pool of one connection of its own: the listener never takes one of the application's.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .max_lifetime(None)
        .idle_timeout(None)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy_with(options.application_name(&application_name(&channel)));
    let what = format!("postgres LISTEN {channel} at {server}");
    let server = server.to_owned();
    Listener::spawn(what, hub, Backoff::default(), move |link| {
        session(pool.clone(), channel.clone(), server.clone(), link)
    })
}

/// One session: connect, `LISTEN`, then turn every notification into a hint until the
/// connection is lost or does not answer a check within [`PING_TIMEOUT`].
async fn session(
    pool: PgPool,
    channel: String,
    server: String,
    link: Link,
) -> lease_core::Result<()> {
    let failed = |e: sqlx::Error| crate::error::map(e, "the hint listener".into(), &server);
    let silent = || {
        lease_core::Error::unavailable(format!(
            "the hint listener's connection to {server} did not answer within {PING_TIMEOUT:?}"
        ))
    };
    let mut listener = PgListener::connect_with(&pool).await.map_err(failed)?;
    listener.eager_reconnect(false);
    listener.ignore_pool_close_event(true);
    tokio::time::timeout(PING_TIMEOUT, listener.listen(&channel))
        .await
        .map_err(|_| silent())?
        .map_err(failed)?;
    link.up();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    loop {
        // `try_recv` is cancel safe: a notification half read when the check's turn comes
        // stays buffered, and one that arrives during the check is kept for the next call.
        let received = tokio::select! {
            received = listener.try_recv() => received.map_err(failed)?,
            _ = ping.tick() => {
                tokio::time::timeout(PING_TIMEOUT, listener.execute("SELECT 1"))
                    .await
                    .map_err(|_| silent())?
                    .map_err(failed)?;
                continue;
            }
        };
        match received {
            Some(n) => match topic_of(n.payload()) {
                Some(topic) => {
                    link.hub().notify(&topic);
                    // A slot record lives on its lease's row.
                    if let Topic::Slots(job) = &topic {
                        link.hub().notify(&Topic::lease(job.clone()));
                    }
                }
                None => link.hub().notify_all(),
            },
            None => {
                return Err(lease_core::Error::unavailable(format!(
                    "the hint listener's connection to {server} was lost"
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_identifiers_of_at_most_63_bytes() {
        assert_eq!(channel("public", "Leases"), "lease_sql.public.leases");
        let long = channel(&"s".repeat(63), &"t".repeat(52));
        assert!(long.len() <= 63, "{long}");
        assert_ne!(long, channel(&"s".repeat(63), &"t".repeat(51)));
        let odd = channel("Schema\"'x", "t");
        assert!(odd.len() <= 63 && !odd.contains(['"', '\'']), "{odd}");
        assert!(application_name(&long).len() <= 63);
    }
}
