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
    /// For one operation of the store ([`pin`](Self::pin)): the primary connection it was
    /// checked on and must go out on, with its generation. Requests then never open another
    /// connection: a failure drops this one (when still current) and is answered as it came.
    pinned: Option<(u64, MultiplexedConnection)>,
}

/// Where the primary's address comes from.
enum Resolver {
    /// The Sentinels.
    Sentinels(Box<SentinelClient>),
    /// Tests: the servers named in turn (the last one for every later resolution), standing
    /// for the primaries a series of failovers would promote.
    #[cfg(test)]
    Fixed(std::collections::VecDeque<redis::Client>),
}

struct Shared {
    /// Asks the Sentinels (one resolution at a time).
    client: tokio::sync::Mutex<Resolver>,
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
            .field(
                "pinned",
                &self.pinned.as_ref().map(|(generation, _)| generation),
            )
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
        Ok(SentinelConnection::on(
            Resolver::Sentinels(Box::new(client)),
            master,
            config,
        ))
    }

    fn on(resolver: Resolver, master: &str, config: &RedisConfig) -> SentinelConnection {
        let timeouts = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(config.get_connect_timeout()))
            .set_response_timeout(config.get_operation_timeout());
        SentinelConnection {
            shared: Arc::new(Shared {
                client: tokio::sync::Mutex::new(resolver),
                current: Mutex::new((0, None)),
                config: timeouts,
                master: master.to_owned(),
            }),
            pinned: None,
        }
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

    /// Tests: a connection whose primaries are `servers` (URLs) in turn, one per resolution,
    /// the last one for every later resolution; no Sentinel.
    #[cfg(test)]
    pub(crate) fn fixed(servers: &[&str], config: &RedisConfig) -> SentinelConnection {
        let servers = servers
            .iter()
            .filter_map(|url| redis::Client::open(*url).ok())
            .collect();
        SentinelConnection::on(Resolver::Fixed(servers), "fixed", config)
    }

    /// Tests: a failover as a request sees it — `conn` (to the newly promoted primary) becomes
    /// the current primary connection, under the next generation.
    #[cfg(test)]
    pub(crate) fn fail_over_to(&self, conn: MultiplexedConnection) {
        let mut current = lock(&self.shared.current);
        current.0 += 1;
        current.1 = Some(conn);
    }

    /// The master name.
    pub fn master(&self) -> &str {
        &self.shared.master
    }

    /// This connection, pinned to the current primary connection (opened first when there is
    /// none): every request on the answer goes out on that one connection, to that one server,
    /// or fails — it never opens another. The store gets one per operation that must run on a
    /// checked server, checks the server over it when its [generation](Self::pinned_generation)
    /// has not been checked, and sends the operation on it: the check and the operation reach
    /// the same server. On a pinned connection, answers the same pin.
    pub(crate) async fn pin(&self) -> std::result::Result<SentinelConnection, RedisError> {
        let pinned = match &self.pinned {
            Some(pinned) => pinned.clone(),
            None => self.connection().await?,
        };
        Ok(SentinelConnection {
            shared: self.shared.clone(),
            pinned: Some(pinned),
        })
    }

    /// The generation of the primary connection this one is [pinned](Self::pin) to (each
    /// connection opened to a primary gets the next, from 1; a new one may reach another
    /// server); `None` when it is not pinned.
    pub(crate) fn pinned_generation(&self) -> Option<u64> {
        self.pinned.as_ref().map(|(generation, _)| *generation)
    }

    /// The connection a request goes out on: the pinned one, or the current primary's.
    async fn request_connection(
        &self,
    ) -> std::result::Result<(u64, MultiplexedConnection), RedisError> {
        match &self.pinned {
            Some(pinned) => Ok(pinned.clone()),
            None => self.connection().await,
        }
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
        let conn = match &mut *client {
            Resolver::Sentinels(client) => {
                client
                    .get_async_connection_with_config(&self.shared.config)
                    .await?
            }
            #[cfg(test)]
            Resolver::Fixed(servers) => {
                let server = match servers.len() {
                    0 | 1 => servers.front().cloned(),
                    _ => servers.pop_front(),
                };
                let server = server.ok_or_else(|| {
                    RedisError::from((redis::ErrorKind::Io, "no server to resolve to"))
                })?;
                server
                    .get_multiplexed_async_connection_with_config(&self.shared.config)
                    .await?
            }
        };
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
            let (generation, mut conn) = self.request_connection().await?;
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
            let (generation, mut conn) = self.request_connection().await?;
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

/// The durability check and the operation it guards go over one connection, to one server:
/// stores on a [`SentinelConnection::fixed`] whose primary is a durable `redis-server` of the
/// test (AOF synced on every write), and a failover to a volatile one (AOF off: a restart would
/// start `Counter` terms at 1 again) that lands right after the check passed, before the
/// operation goes out ([`Inner::after_check`](crate::store::Inner)). Needs `redis-server` on
/// the machine; without it the cases skip loudly (`SKIPPED redis-server: …`).
#[cfg(test)]
#[path = "../tests/common/redis_server.rs"]
mod redis_server;

#[cfg(test)]
mod pinned {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::time::Duration;

    use lease_core::backend::HolderToken;
    use lease_core::{ErrorKind, LeaseStore};

    use super::*;
    use crate::RedisStore;

    const TTL: Duration = Duration::from_secs(30);

    use super::redis_server::{self, Node};

    /// Whether `key` exists on `node`.
    async fn holds(node: &Node, key: &str) -> bool {
        let mut conn = node.conn().await;
        redis::cmd("EXISTS")
            .arg(key)
            .query_async::<i64>(&mut conn)
            .await
            .unwrap()
            == 1
    }

    /// Starts `redis-server` on a free port with AOF `appendonly` (synced on every write);
    /// `None` (after the skip line) when the binary is missing.
    async fn spawn(tag: &str, appendonly: bool) -> Option<Node> {
        let aof = if appendonly { "yes" } else { "no" };
        redis_server::spawn("redis-server", tag, &["--appendonly".into(), aof.into()]).await
    }

    /// A durable and a volatile server, and a store whose Sentinel names the durable one, with
    /// a failover to the volatile one set to land right after its next check passed.
    async fn failover_after_the_check() -> Option<(Node, Node, RedisStore<SentinelConnection>)> {
        let durable = spawn("durable", true).await?;
        let volatile = spawn("volatile", false).await?;
        let config = RedisConfig::new().key_prefix("pinned:");
        let conn = SentinelConnection::fixed(&[&durable.url()], &config);
        let store = RedisStore::with_client(conn.clone(), config).unwrap();
        let promoted = volatile.conn().await;
        *store.inner.after_check.lock().unwrap() =
            Some(Box::new(move || conn.fail_over_to(promoted)));
        Some((durable, volatile, store))
    }

    /// The claim whose check passed goes out on the server that was checked (the durable one),
    /// not on the connection a failover opened meanwhile; the next claim checks the new
    /// primary and is refused: neither this claim nor the next is granted on the volatile
    /// server.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_goes_out_on_the_server_its_check_passed_on() {
        let Some((durable, volatile, store)) = failover_after_the_check().await else {
            return;
        };
        let first = store
            .claim("first", &HolderToken::mint(), "a", TTL)
            .await
            .unwrap();
        assert!(first.is_some(), "a fresh name is free");
        let key = store.record_key("first").unwrap();
        assert!(
            !holds(&volatile, &key).await,
            "the claim went out on the volatile server, which was never checked"
        );
        assert!(
            holds(&durable, &key).await,
            "the claim is on the checked server"
        );
        let next = store.claim("next", &HolderToken::mint(), "a", TTL).await;
        let e = next.expect_err("a claim on the unchecked volatile primary");
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
        assert!(e.message().contains("appendonly"), "{e}");
    }

    /// An explicit `available()` records the connection it checked, not the one a failover
    /// opened while it checked: the next claim checks the new primary and is refused, so
    /// nothing is granted on the volatile server.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn available_records_the_connection_it_checked() {
        let Some((_durable, volatile, store)) = failover_after_the_check().await else {
            return;
        };
        store.available().await.unwrap();
        let claim = store.claim("after", &HolderToken::mint(), "a", TTL).await;
        let key = store.record_key("after").unwrap();
        let on_volatile = holds(&volatile, &key).await;
        let e = claim.expect_err("a claim on the unchecked volatile primary");
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
        assert!(
            !on_volatile,
            "a claim reached the unchecked volatile server"
        );
    }
}
