//! [`RedisStore`]: the struct, its constructors ([`RedisStore::connect`],
//! [`RedisStore::with_client`]) and the start-up check behind
//! [`available`](lease_core::LeaseStore::available).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lease_core::{Error, Result, backend::LeaseStoreExt};
use redis::aio::{ConnectionLike, ConnectionManager};
use tokio::sync::OnceCell;

use crate::config::{RedisConfig, TermScheme};
use crate::error::{self, During};
use crate::hint_state::Hints;
use crate::wire::keys::{changes_channel, record_key, replica_sync_channel};
use crate::wire::scripts::SCRIPTS;

/// What the start-up check publishes on the hint channel to learn whether it may: no kind and
/// key (`<kind> <key>`), so no listener takes it for a hint.
const PUBLISH_CHECK: &str = "publish-check";

/// The longest lease name, in bytes, the store accepts.
pub const MAX_NAME_BYTES: usize = 1024;

/// Leases on Redis, over any async connection of the `redis` crate.
///
/// `C` is the connection: a [`ConnectionManager`] (the default, reconnecting on its own), a
/// `MultiplexedConnection`, or a cluster connection (`redis::cluster_async::ClusterConnection`)
/// — anything that is [`redis::aio::ConnectionLike`] `+ Clone + Send + Sync`. Each operation
/// clones the connection handle (cheap for all of these) and runs one script on it.
///
/// Each operation is one `EVALSHA` (one round trip); only the first use of a script on a server
/// that has not cached it costs a second (`NOSCRIPT`, then `EVAL`). It also implements
/// [`lease_core::backend::slots::SlotStore`]: `unfinished` pipelines one `EVALSHA` per name (one
/// round trip on one server); and [`lease_core::backend::partitions::PartitionStore`] and
/// [`lease_core::backend::membership::MembershipStore`], one `EVALSHA` per operation however many
/// partitions a renewal names. See the crate documentation for the data layout, the scheduler
/// slots, partitions and membership, the durability of terms and epochs, and the clean-up policy.
#[derive(Clone)]
pub struct RedisStore<C = ConnectionManager> {
    pub(crate) conn: C,
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: RedisConfig,
    /// "redis server host:port", or "the Redis server", for messages.
    pub(crate) server: String,
    /// Set once the start-up check ([`LeaseStore::available`](lease_core::LeaseStore::available))
    /// has passed.
    pub(crate) started: OnceCell<()>,
    /// On a `SentinelConnection`: the generation of the primary connection the check last
    /// passed on (a later connection may reach a promoted replica, which is checked again);
    /// 0 before any (generations count from 1).
    pub(crate) checked_primary: AtomicU64,
    /// Whether the server is a Redis Cluster node (`INFO cluster`), once asked: listing names
    /// is refused there.
    pub(crate) cluster: OnceCell<bool>,
    /// The hints of [`LeaseStore::changes`](lease_core::LeaseStore::changes) and their listener.
    pub(crate) hints: Hints,
    /// Tests: run once right after the next start-up check passed, before its result is
    /// recorded and before the operation it guards goes out.
    #[cfg(test)]
    pub(crate) after_check: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl<C> fmt::Debug for RedisStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("server", &self.inner.server)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl RedisStore<ConnectionManager> {
    /// Connects to the Redis server at `url` (`redis://[user:password@]host:port[/db]`,
    /// `rediss://…`, `redis+unix:///path`) with `config`.
    ///
    /// The store runs on a [`ConnectionManager`] set up by [`RedisConfig::manager_config`]. A
    /// malformed URL or an unreachable server gives `Unavailable`, naming the host and port (never
    /// the credentials), after [`CONNECT_RETRIES`](crate::CONNECT_RETRIES) + 1 attempts of at most
    /// [`RedisConfig::connect_timeout`] each. Unless the config names the server already
    /// ([`RedisConfig::server_label`]), the store's messages name it by the URL's host and port. An
    /// invalid config is refused before any I/O. The store also opens its subscriber connection for
    /// hints from every process ([`RedisStore::with_listener`]), in the background. Call
    /// [`available`](lease_core::LeaseStore::available) next, at start-up; the store runs that
    /// check itself before its first claim anyway (see [`with_client`](Self::with_client)).
    pub async fn connect(url: &str, config: RedisConfig) -> Result<RedisStore> {
        config.validate()?;
        let client = redis::Client::open(url).map_err(|e| error::bad_url(url, e))?;
        let addr = client.get_connection_info().addr().to_string();
        let config = match config.get_server_label() {
            Some(_) => config,
            None => config.server_label(addr.clone()),
        };
        let manager = ConnectionManager::new_with_config(client.clone(), config.manager_config())
            .await
            .map_err(|e| error::unreachable(e, &addr))?;
        RedisStore::with_client(manager, config)?.with_listener(client)
    }
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A store on your own connection `conn` with `config`, refused when the configuration is
    /// invalid ([`RedisConfig::validate`]). No I/O. Build a `ConnectionManager` with
    /// [`RedisConfig::manager_config`] to have it reconnect and connect as
    /// [`connect`](RedisStore::connect) does.
    ///
    /// **The start-up check is never skipped.** The store runs
    /// [`available`](lease_core::LeaseStore::available) itself, once, before its first operation
    /// that hands out a term or joins a group (`claim`, `claim_slot`, `claim_rerun`,
    /// `acquire_partition`, `heartbeat`), so a coordinator, group worker or scheduler built over it
    /// refuses to work on a server that could repeat fencing tokens, whether or not anyone called
    /// `available`. While the check fails, each of those operations fails with the check's error
    /// (for a volatile server `Unsupported`, saying what to change) and tries the check again next
    /// time; once it has passed (or an explicit `available()` call passed), it is not run again.
    /// Call `available()` at start-up anyway, to fail there rather than at the first claim. Through
    /// a `SentinelConnection` (feature `sentinel`) the check runs again on each new connection to a
    /// primary, so a replica the Sentinels promote is checked too: each of those operations takes
    /// the current primary connection once, runs the check over it when that connection has not
    /// passed it, and goes out on that same connection — never on one a failover opened after the
    /// check (it fails instead, when the checked one is gone).
    ///
    /// **Hints** ([`LeaseStore::changes`](lease_core::LeaseStore::changes)) from such a store
    /// cover only the changes made through the store itself (they say so: disconnected), since
    /// `conn` gives no way to open a subscriber connection; add
    /// [`with_listener`](RedisStore::with_listener) with a `redis::Client` for the same server
    /// to have them cover every process.
    pub fn with_client(conn: C, config: RedisConfig) -> Result<RedisStore<C>> {
        config.validate()?;
        let server = match config.get_server_label() {
            Some(label) => format!("redis server {label}"),
            None => "the Redis server".to_owned(),
        };
        Ok(RedisStore {
            conn,
            inner: Arc::new(Inner {
                config,
                server,
                started: OnceCell::new(),
                checked_primary: AtomicU64::new(0),
                cluster: OnceCell::new(),
                hints: Hints::local(),
                #[cfg(test)]
                after_check: std::sync::Mutex::new(None),
            }),
        })
    }

    /// The options.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// The connection the store uses.
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// The Redis key of `name`'s record, e.g. `lease:{orders}` (see the crate documentation,
    /// *Keys*). Refuses a name the store cannot hold; no I/O.
    pub fn record_key(&self, name: &str) -> Result<String> {
        self.validate_name(name)?;
        Ok(record_key(self.config().get_key_prefix(), name))
    }

    /// The server's label (host and port, never credentials), attached to errors when known.
    pub(crate) fn label(&self) -> Option<&str> {
        self.config().get_server_label()
    }

    /// `e`, with the server attached when its label is known.
    pub(crate) fn at_server(&self, e: Error) -> Error {
        match self.label() {
            Some(label) => e.at_server(label),
            None => e,
        }
    }

    /// Runs the start-up check once, before the first operation that hands out a term or joins
    /// a group; see [`with_client`](Self::with_client). A failed check is not remembered: the
    /// next such operation runs it again. Answers the store to send that operation through
    /// (`during` it, for the errors of connecting): this one; or, on a `SentinelConnection`,
    /// this store on a connection pinned to one primary connection, checked over that same
    /// connection when its generation has not been — so the operation goes out to the server
    /// that was checked, or fails, and never to a primary promoted since the check.
    pub(crate) async fn started(&self, during: During<'_>) -> Result<Cow<'_, Self>> {
        if let Some(on) = self.pinned(during).await? {
            let checked = self.inner.checked_primary.load(Ordering::SeqCst);
            if on.pinned_generation() != Some(checked) {
                on.check_here().await?;
            }
            return Ok(Cow::Owned(on));
        }
        if !self.inner.started.initialized() {
            self.inner
                .started
                .get_or_try_init(|| self.start_up_check())
                .await?;
        }
        Ok(Cow::Borrowed(self))
    }

    /// On a `SentinelConnection`: this store on a connection
    /// [pinned](crate::SentinelConnection) to the current primary connection (opened first
    /// when there is none; `during` names what for, in its errors). `None` on any other
    /// connection.
    async fn pinned(&self, during: During<'_>) -> Result<Option<Self>> {
        #[cfg(feature = "sentinel")]
        {
            let conn: &dyn std::any::Any = &self.conn;
            if let Some(sentinel) = conn.downcast_ref::<crate::SentinelConnection>() {
                let pinned: Box<dyn std::any::Any> =
                    Box::new(self.bounded(during, sentinel.pin()).await?);
                // `C` is `SentinelConnection` here: the downcast cannot fail.
                if let Ok(conn) = pinned.downcast::<C>() {
                    return Ok(Some(RedisStore {
                        conn: *conn,
                        inner: self.inner.clone(),
                    }));
                }
            }
        }
        let _ = during;
        Ok(None)
    }

    /// The generation of the primary connection this store's connection is pinned to; `None`
    /// when it is not a pinned `SentinelConnection`.
    fn pinned_generation(&self) -> Option<u64> {
        #[cfg(feature = "sentinel")]
        {
            let conn: &dyn std::any::Any = &self.conn;
            if let Some(sentinel) = conn.downcast_ref::<crate::SentinelConnection>() {
                return sentinel.pinned_generation();
            }
        }
        None
    }

    /// [`LeaseStore::available`](lease_core::LeaseStore::available): the start-up check, remembered
    /// once it passed.
    pub(crate) async fn check_available(&self) -> Result<()> {
        match self.pinned(During::Task("connect to the primary")).await? {
            Some(on) => on.check_here().await,
            None => self.check_here().await,
        }
    }

    /// The start-up check over this store's connection, remembered once it passed: on a
    /// pinned `SentinelConnection`, for the primary connection it is pinned to (read before
    /// the check, and the check went over that connection alone).
    async fn check_here(&self) -> Result<()> {
        let generation = self.pinned_generation();
        self.start_up_check().await?;
        self.after_check();
        if let Some(generation) = generation {
            self.inner
                .checked_primary
                .fetch_max(generation, Ordering::SeqCst);
        }
        // Later operations need not check again.
        let _ = self.inner.started.set(());
        Ok(())
    }

    /// Tests: runs [`Inner::after_check`] once.
    fn after_check(&self) {
        #[cfg(test)]
        {
            let hook = self
                .inner
                .after_check
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(hook) = hook {
                hook();
            }
        }
    }

    /// One `CONFIG GET` parameter: `Ok(Some(value))`, `Ok(None)` when the server does not know
    /// it, `Err(why)` when it cannot be read (CONFIG disabled, renamed or forbidden).
    async fn config_get(&self, param: &str) -> std::result::Result<Option<String>, String> {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg(param);
        match self
            .command::<HashMap<String, String>>(&format!("CONFIG GET {param}"), cmd)
            .await
        {
            Ok(map) => Ok(map.get(param).cloned()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The checks of [`LeaseStore::available`](lease_core::LeaseStore::available).
    async fn start_up_check(&self) -> Result<()> {
        let (_secs, _micros): (u64, u64) = self.command("TIME", redis::cmd("TIME")).await?;
        for script in SCRIPTS.all() {
            let mut load = redis::cmd("SCRIPT");
            load.arg("LOAD").arg(script.source);
            let sha: String = self
                .command(&format!("SCRIPT LOAD ({})", script.name), load)
                .await
                .map_err(error::scripting_refused)?;
            if !sha.eq_ignore_ascii_case(&script.sha) {
                return Err(self.at_server(Error::unsupported(format!(
                    "the server returned SHA-1 {sha} for the {} script, expected {}",
                    script.name, script.sha
                ))));
            }
        }
        self.publish_check().await?;
        let (risks, unknown) = self.durability_risks().await;
        if risks.is_empty() && unknown.is_empty() {
            return Ok(());
        }
        let mut why = risks.join("; ");
        if !unknown.is_empty() {
            if !why.is_empty() {
                why.push_str("; ");
            }
            why.push_str("durability cannot be checked: ");
            why.push_str(&unknown.join("; "));
        }
        let server = &self.inner.server;
        if self.config().get_allow_volatile() {
            tracing::warn!(
                %server,
                %why,
                "lease records may be lost; terms and partition epochs (fencing tokens) could \
                 then repeat; accepted by allow_volatile"
            );
            return Ok(());
        }
        if self.config().get_term_scheme() == TermScheme::ClockFloor {
            tracing::info!(
                %server,
                %why,
                "lease records may be lost; clock-floor terms and epochs still grow after a \
                 loss unless the server clock goes back"
            );
            return Ok(());
        }
        Err(self.at_server(Error::unsupported(format!(
            "the server may lose lease records, and a lost record restarts its terms (or a lost \
             partition group its epochs) at 1, so fencing tokens could repeat: {why}. Turn on \
             AOF synced on every write (appendonly yes, appendfsync always) and a noeviction or \
             volatile-* maxmemory-policy; or choose TermScheme::ClockFloor; or accept the risk \
             with RedisConfig::allow_volatile(true)"
        ))))
    }

    /// Whether the store's user may `PUBLISH` on the hint channel (`<prefix>changes`): one
    /// `PUBLISH` of a message that no listener takes for a hint. The scripts publish with
    /// `redis.pcall`, so a refusal there is silent: a user without the channel's rights (Redis
    /// 7's default for new ACL users) or without the command claims and releases all the same,
    /// but its changes reach no subscriber. Refused (any server error), the store logs a
    /// warning, once, and its hints say they are disconnected
    /// ([`Hints::set_publishes`](Hints)), so its waiters keep their polling pace;
    /// the check goes on. Only an error of the connection fails it — and, with
    /// [`RedisConfig::replica_acks`], a refused `PUBLISH` on `<prefix>replica-sync`: every
    /// operation's pipeline publishes there, and a refusal would fail each one after its script
    /// took effect (a claim granted but answered as a permanent error), so the check refuses the
    /// server with `Unsupported` instead.
    async fn publish_check(&self) -> Result<()> {
        if self.config().get_replica_acks().is_some() {
            let channel = replica_sync_channel(self.config().get_key_prefix());
            if let Err(e) = self.try_publish(&channel, "").await? {
                return Err(self.at_server(Error::unsupported(format!(
                    "replica_acks publishes on {channel} in every operation's pipeline, and \
                     this user may not (grant it, e.g. ACL SETUSER <user> &{channel} +publish): \
                     {e}"
                ))));
            }
        }
        let channel = changes_channel(self.config().get_key_prefix());
        let Err(refused) = self.try_publish(&channel, PUBLISH_CHECK).await? else {
            self.inner.hints.set_publishes(true);
            return Ok(());
        };
        if self.inner.hints.set_publishes(false) {
            tracing::warn!(
                server = %self.inner.server,
                %channel,
                error = %refused,
                "this store's user may not PUBLISH on the hint channel, so its claims and \
                 releases wake no waiter of another process (those find the change at their \
                 next poll, which is slower where their own hints say connected); this \
                 store's hints say they are disconnected, so its own waiters keep their \
                 polling pace. Grant the user the channel and the command (e.g. ACL SETUSER \
                 <user> &<channel> +publish +subscribe)"
            );
        }
        Ok(())
    }

    /// `PUBLISH channel message`: `Ok(Err(refusal))` when the server refused it, `Err` when the
    /// connection failed or timed out.
    async fn try_publish(
        &self,
        channel: &str,
        message: &str,
    ) -> Result<std::result::Result<(), redis::RedisError>> {
        let during = During::Task("PUBLISH at the start-up check");
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(channel).arg(message);
        let answer = self
            .bounded(during, async {
                let mut conn = self.conn.clone();
                Ok(cmd.query_async::<redis::Value>(&mut conn).await)
            })
            .await?;
        match answer {
            Ok(_) => Ok(Ok(())),
            Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => Ok(Err(e)),
            Err(e) => Err(error::from_redis(e, during, self.label())),
        }
    }

    /// With AOF on: how often the file is synced. `always` loses nothing acknowledged;
    /// `everysec` (Redis's default) can lose the last second of writes when the host crashes,
    /// and `no` the last tens of seconds (whenever the kernel flushes), so claims acknowledged
    /// in that window vanish and a `Counter` term repeats. `everysec` is accepted, with a
    /// warning, under [`RedisConfig::allow_fsync_everysec`].
    async fn fsync_risks(&self, risks: &mut Vec<String>, unknown: &mut Vec<String>) {
        match self.config_get("appendfsync").await {
            Ok(Some(v)) if v.eq_ignore_ascii_case("always") => {}
            Ok(Some(v)) if v.eq_ignore_ascii_case("everysec") => {
                if self.config().get_allow_fsync_everysec() {
                    tracing::warn!(
                        server = %self.inner.server,
                        "appendfsync is everysec: a host crash can lose the last second of \
                         claims, and terms and partition epochs (fencing tokens) issued in it \
                         could repeat; accepted by allow_fsync_everysec"
                    );
                } else {
                    risks.push(
                        "appendfsync is everysec, so a crash of the host loses up to the last \
                         second of lease records written (use appendfsync always, or accept \
                         that window with RedisConfig::allow_fsync_everysec(true))"
                            .to_owned(),
                    );
                }
            }
            Ok(Some(v)) => risks.push(format!(
                "appendfsync is {v}, so a crash of the host loses the lease records written \
                 since the kernel last flushed the file (use appendfsync always)"
            )),
            Ok(None) => unknown.push("CONFIG GET appendfsync answered nothing".to_owned()),
            Err(why) => unknown.push(format!("CONFIG GET appendfsync failed: {why}")),
        }
    }

    /// What can make this server lose lease records, as far as it can be checked.
    async fn durability_risks(&self) -> (Vec<String>, Vec<String>) {
        let mut risks = Vec::new();
        let mut unknown = Vec::new();
        match self.config_get("appendonly").await {
            Ok(Some(v)) if v.eq_ignore_ascii_case("yes") => {
                self.fsync_risks(&mut risks, &mut unknown).await
            }
            Ok(Some(_)) => risks.push(
                "appendonly is off, so a restart loses every lease record (RDB snapshots, if \
                 any, lose the claims since the last one)"
                    .to_owned(),
            ),
            Ok(None) => unknown.push("CONFIG GET appendonly answered nothing".to_owned()),
            Err(why) => unknown.push(format!("CONFIG GET appendonly failed: {why}")),
        }
        match self.config_get("maxmemory-policy").await {
            Ok(Some(v)) if v.to_ascii_lowercase().starts_with("allkeys-") => risks.push(format!(
                "maxmemory-policy is {v}, which may evict lease records when memory is full \
                 (use noeviction or a volatile-* policy: lease records carry no key TTL)"
            )),
            Ok(_) => {}
            Err(why) => unknown.push(format!("CONFIG GET maxmemory-policy failed: {why}")),
        }
        (risks, unknown)
    }
}
