//! [`SentinelConnection`]: a connection that follows the primary Redis Sentinel names (feature
//! `sentinel`).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use lease_core::{Error, Result};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisFuture, ServerErrorKind, Value,
};

use crate::config::RedisConfig;

/// A connection to whichever server the Sentinels name as the primary of one master name, for
/// [`RedisStore::with_client`](crate::RedisStore::with_client).
///
/// The first request asks the Sentinels for the primary's address (the first Sentinel that
/// answers; the `redis` crate's [`SentinelClient`] also checks with `ROLE` that the server it
/// names is a primary) and opens a multiplexed connection there. A request that fails on the
/// connection itself (refused, dropped, timed out) or is answered `READONLY` or `MASTERDOWN`
/// (the server was demoted) drops that connection, and the next request asks the Sentinels
/// again. The failed request is **not** retried: its outcome is unknown, and the store reports
/// it as such (the coordinator reads a claim back, and counts a renewal as failed).
///
/// What this does not do: it cannot make replication synchronous. A primary that dies before
/// its last writes reached a replica loses them in the failover; see
/// [`RedisConfig::replica_acks`] for the store's remedy. A primary cut off from the Sentinels but
/// not from this client keeps answering until the Sentinels' new primary is known here, and the
/// writes it takes meanwhile are lost when it is demoted — with `replica_acks` they fail
/// instead, as the replicas follow the new primary.
///
/// Cloning is cheap and shares the connection.
#[derive(Clone)]
pub struct SentinelConnection {
    shared: Arc<Shared>,
}

struct Shared {
    /// Asks the Sentinels (one resolution at a time).
    client: tokio::sync::Mutex<SentinelClient>,
    /// The connection to the primary last named, and its generation (so that a failure on an
    /// older connection does not drop a newer one).
    current: Mutex<(u64, Option<MultiplexedConnection>)>,
    config: AsyncConnectionConfig,
    master: String,
}

impl fmt::Debug for SentinelConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelConnection")
            .field("master", &self.shared.master)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SentinelConnection {
    /// A connection to the primary of `master` as the Sentinels at `sentinels` (`host:port`
    /// each) name it. Connections to the primary time out after `config`'s connect timeout and
    /// requests after its operation timeout (so a primary that stops answering is given up and
    /// asked for again). No I/O until the first request.
    pub fn new(sentinels: &[&str], master: &str, config: &RedisConfig) -> Result<Self> {
        if sentinels.is_empty() || master.is_empty() {
            return Err(Error::invalid_argument(
                "a Sentinel connection needs at least one Sentinel address (host:port) and the \
                 master name the Sentinels monitor",
            ));
        }
        let urls: Vec<String> = sentinels.iter().map(|s| format!("redis://{s}")).collect();
        // `redis` takes the master name as a `String`, or as `impl AsRef<str>` when its
        // `tls-rustls` feature is on (another crate of the build may turn it on): a `String`
        // fits both.
        #[allow(clippy::unnecessary_to_owned)]
        let client = SentinelClient::build(
            urls,
            master.to_owned(),
            None,
            SentinelServerType::Master,
        )
        .map_err(|e| {
            Error::invalid_argument(format!(
                "the Sentinel addresses {sentinels:?} are not valid (give host:port each): {e}"
            ))
        })?;
        let timeouts = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(config.get_connect_timeout()))
            .set_response_timeout(config.get_operation_timeout());
        Ok(SentinelConnection {
            shared: Arc::new(Shared {
                client: tokio::sync::Mutex::new(client),
                current: Mutex::new((0, None)),
                config: timeouts,
                master: master.to_owned(),
            }),
        })
    }

    /// A connection from a URL `redis+sentinel://host:port[,host:port…]/<master>` (the
    /// Sentinels' addresses and the master name), as [`new`](Self::new).
    pub fn from_url(url: &str, config: &RedisConfig) -> Result<Self> {
        let bad = || {
            Error::invalid_argument(format!(
                "the Sentinel URL {url:?} is not valid; write \
                 redis+sentinel://host:26379[,host:26379…]/<master name>"
            ))
        };
        let rest = url.strip_prefix("redis+sentinel://").ok_or_else(bad)?;
        let (hosts, master) = rest.split_once('/').ok_or_else(bad)?;
        let sentinels: Vec<&str> = hosts.split(',').filter(|h| !h.is_empty()).collect();
        if sentinels.is_empty() || master.is_empty() || master.contains(['/', '?', '#']) {
            return Err(bad());
        }
        SentinelConnection::new(&sentinels, master, config)
    }

    /// The master name.
    pub fn master(&self) -> &str {
        &self.shared.master
    }

    /// Whether a connection to a primary is open, and how many have been opened: a new one
    /// means the primary may be another server (the store checks it again).
    pub(crate) fn primary_generation(&self) -> (bool, u64) {
        let current = lock(&self.shared.current);
        (current.1.is_some(), current.0)
    }

    /// The connection to the current primary, asking the Sentinels when there is none.
    async fn connection(&self) -> std::result::Result<(u64, MultiplexedConnection), RedisError> {
        if let (generation, Some(conn)) = &*lock(&self.shared.current) {
            return Ok((*generation, conn.clone()));
        }
        let mut client = self.shared.client.lock().await;
        // Another request may have connected while this one waited.
        if let (generation, Some(conn)) = &*lock(&self.shared.current) {
            return Ok((*generation, conn.clone()));
        }
        let conn = client
            .get_async_connection_with_config(&self.shared.config)
            .await?;
        let mut current = lock(&self.shared.current);
        current.0 += 1;
        current.1 = Some(conn.clone());
        Ok((current.0, conn))
    }

    /// Drops connection `generation` after `e` when `e` says it no longer reaches the primary.
    fn failed(&self, generation: u64, e: &RedisError) {
        let gone = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
            || matches!(
                e.kind(),
                redis::ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
            );
        if gone {
            let mut current = lock(&self.shared.current);
            if current.0 == generation {
                current.1 = None;
            }
        }
    }
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut conn) = self.connection().await?;
            let answer = conn.req_packed_command(cmd).await;
            if let Err(e) = &answer {
                self.failed(generation, e);
            }
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut conn) = self.connection().await?;
            let answer = conn.req_packed_commands(pipeline, offset, count).await;
            match &answer {
                Err(e) => self.failed(generation, e),
                // A pipeline's server errors come back as values.
                Ok(values) => {
                    for v in values {
                        if let Value::ServerError(err) = v {
                            let e = RedisError::from(err.clone());
                            self.failed(generation, &e);
                        }
                    }
                }
            }
            answer
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn urls_name_sentinels_and_a_master() {
        let config = RedisConfig::new();
        let c = SentinelConnection::from_url("redis+sentinel://a:1,b:2/lease-ci", &config).unwrap();
        assert_eq!(c.master(), "lease-ci");
        for bad in [
            "redis://a:1/m",
            "redis+sentinel://a:1",
            "redis+sentinel:///m",
            "redis+sentinel://a:1/",
        ] {
            let e = SentinelConnection::from_url(bad, &config).unwrap_err();
            assert!(e.message().contains("redis+sentinel://"), "{bad}: {e}");
        }
    }
}
