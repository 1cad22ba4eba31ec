//! [`RedisStore`]: the [`LeaseStore`] on Redis, one Lua script per operation.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lease_core::LeaseStoreExt;
use lease_core::{
    Capabilities, Error, ErrorKind, LeaseInfo, LeaseStore, Result,
    backend::{Grant, HolderToken, async_trait, ceil_millis, validate_instance},
};
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, FromRedisValue, RedisResult, ServerErrorKind};
use tokio::sync::OnceCell;

use crate::config::{RedisConfig, TermScheme};
use crate::error::from_redis;
use crate::keys::{name_of, record_key, scan_pattern};
use crate::scripts::{LuaScript, SCRIPTS};

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
/// [`lease_core::SlotStore`]: `unfinished` pipelines one `EVALSHA` per name (one round trip on
/// one server); and [`lease_core::PartitionStore`] and [`lease_core::MembershipStore`] (so
/// [`lease_core::GroupStore`]), one `EVALSHA` per operation however many partitions a renewal
/// names. See the crate documentation for the data layout, the scheduler slots, partitions and
/// membership, the durability of terms and epochs, and the clean-up policy.
#[derive(Clone)]
pub struct RedisStore<C = ConnectionManager> {
    conn: C,
    inner: Arc<Inner>,
}

struct Inner {
    config: RedisConfig,
    /// "redis server host:port", or "the Redis server", for messages.
    server: String,
    /// Set once the start-up check ([`LeaseStore::available`]) has passed.
    started: OnceCell<()>,
}

impl<C> fmt::Debug for RedisStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("server", &self.inner.server)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A store on `conn` with the default [`RedisConfig`]. No I/O: the start-up check runs
    /// before the first operation that hands out a term (see [`with_config`](Self::with_config)).
    pub fn new(conn: C) -> RedisStore<C> {
        RedisStore::build(conn, RedisConfig::default())
    }

    /// A store on `conn` with `config`, refused when the configuration is invalid
    /// ([`RedisConfig::validate`]). No I/O.
    ///
    /// **The start-up check is never skipped.** The store runs
    /// [`available`](LeaseStore::available) itself, once, before its first operation that hands
    /// out a term or joins a group (`claim`, `claim_slot`, `claim_rerun`, `acquire_partition`,
    /// `heartbeat`), so a coordinator, group worker or scheduler built over it refuses to work
    /// on a server that could repeat fencing tokens, whether or not anyone called `available`.
    /// While the check fails, each of those operations fails with the check's error (for a
    /// volatile server `Unsupported`, saying what to change) and tries the check again next
    /// time; once it has passed (or an explicit `available()` call passed), it is not run again.
    /// Call `available()` at start-up anyway, to fail there rather than at the first claim.
    pub fn with_config(conn: C, config: RedisConfig) -> Result<RedisStore<C>> {
        config.validate()?;
        Ok(RedisStore::build(conn, config))
    }

    fn build(conn: C, config: RedisConfig) -> RedisStore<C> {
        let server = match config.get_server_label() {
            Some(label) => format!("redis server {label}"),
            None => "the Redis server".to_owned(),
        };
        RedisStore {
            conn,
            inner: Arc::new(Inner {
                config,
                server,
                started: OnceCell::new(),
            }),
        }
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

    /// Deletes `name`'s record when its lease ended (released or expired) at least `idle` ago by
    /// the server's clock. A live lease is never deleted. `true` when the record was deleted.
    ///
    /// **Deleting a record forgets its term.** With [`TermScheme::Counter`] the next claim of
    /// the name gets term 1 again, so do this only for names that will not be used again, or
    /// whose fenced resources no longer remember tokens issued under the name. One round trip.
    pub async fn forget(&self, name: &str, idle: Duration) -> Result<bool> {
        self.validate_name(name)?;
        let key = record_key(self.config().get_key_prefix(), name);
        let idle = ceil_millis(idle).to_string();
        let what = || format!("forget of lease '{name}'");
        let n: i64 = self
            .eval(what, &SCRIPTS.forget, key.as_bytes(), &[&idle])
            .await?;
        Ok(n == 1)
    }

    /// Deletes every record under the key prefix whose lease ended at least `older_than` ago by
    /// the server's clock, as [`forget`](Self::forget) does for one name; returns the names
    /// whose records were deleted.
    ///
    /// It walks the keys with `SCAN … MATCH <prefix>{*}` and runs the `forget` script on each
    /// key that is a record key of this store (one round trip per `SCAN` page and per record).
    /// Each deletion is atomic and re-checks the expiry, so a lease claimed meanwhile survives.
    /// On Redis Cluster `SCAN` sees one node only: run it with a connection to each primary. Read
    /// the warning on [`forget`](Self::forget): a purged name that is used again starts again at
    /// term 1 under [`TermScheme::Counter`].
    pub async fn purge_expired(&self, older_than: Duration) -> Result<Vec<String>> {
        let prefix = self.config().get_key_prefix();
        let pattern = scan_pattern(prefix);
        let idle = ceil_millis(older_than).to_string();
        let mut cursor: u64 = 0;
        let mut deleted = Vec::new();
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(500);
            let (next, keys): (u64, Vec<Vec<u8>>) = self
                .bounded(|| "purge (SCAN)".to_owned(), async {
                    let mut conn = self.conn.clone();
                    scan.query_async(&mut conn).await
                })
                .await?;
            for key in keys {
                let Some(name) = std::str::from_utf8(&key)
                    .ok()
                    .and_then(|k| name_of(prefix, k))
                else {
                    continue;
                };
                let what = || format!("purge of lease '{name}'");
                let n: i64 = self.eval(what, &SCRIPTS.forget, &key, &[&idle]).await?;
                if n == 1 {
                    deleted.push(name);
                }
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    /// Runs `script` on `key` with `args`: `EVALSHA`, then `EVAL` after a `NOSCRIPT`, bounded by
    /// the operation timeout.
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        what: impl Fn() -> String,
        script: &LuaScript,
        key: &[u8],
        args: &[&str],
    ) -> Result<T> {
        self.eval_keys(what, script, &[key], args).await
    }

    /// Runs `script` on `keys` (all under one hash tag) with `args`: `EVALSHA`, then `EVAL`
    /// after a `NOSCRIPT`, bounded by the operation timeout.
    pub(crate) async fn eval_keys<T: FromRedisValue>(
        &self,
        what: impl Fn() -> String,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&str],
    ) -> Result<T> {
        let call = async {
            let mut conn = self.conn.clone();
            let first = keyed_script_cmd("EVALSHA", &script.sha, keys, args)
                .query_async(&mut conn)
                .await;
            match first {
                Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript) => {
                    tracing::debug!(script = script.name, "script not cached; sending EVAL");
                    keyed_script_cmd("EVAL", script.source, keys, args)
                        .query_async(&mut conn)
                        .await
                }
                other => other,
            }
        };
        self.bounded(what, call).await
    }

    /// Runs the start-up check once, before the first operation that hands out a term or joins
    /// a group; see [`with_config`](Self::with_config). A failed check is not remembered: the
    /// next such operation runs it again.
    pub(crate) async fn started(&self) -> Result<()> {
        if self.inner.started.initialized() {
            return Ok(());
        }
        self.inner
            .started
            .get_or_try_init(|| self.start_up_check())
            .await
            .map(|_| ())
    }

    /// "redis server host:port" or "the Redis server", for messages.
    pub(crate) fn server(&self) -> &str {
        &self.inner.server
    }

    /// Awaits `call` within the operation timeout, mapping errors.
    pub(crate) async fn bounded<T>(
        &self,
        what: impl Fn() -> String,
        call: impl Future<Output = RedisResult<T>>,
    ) -> Result<T> {
        let result = match self.config().get_operation_timeout() {
            Some(bound) => match tokio::time::timeout(bound, call).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(Error::timeout(
                        format!("{} on {}", what(), self.inner.server),
                        bound,
                    ));
                }
            },
            None => call.await,
        };
        result.map_err(|e| from_redis(e, &self.inner.server, &what()))
    }

    /// One command without a key, bounded and mapped.
    async fn command<T: FromRedisValue>(&self, what: &str, cmd: Cmd) -> Result<T> {
        self.bounded(|| what.to_owned(), async {
            let mut conn = self.conn.clone();
            cmd.query_async(&mut conn).await
        })
        .await
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

    /// The checks of [`LeaseStore::available`].
    async fn start_up_check(&self) -> Result<()> {
        let (_secs, _micros): (u64, u64) = self.command("TIME", redis::cmd("TIME")).await?;
        for script in SCRIPTS.all() {
            let mut load = redis::cmd("SCRIPT");
            load.arg("LOAD").arg(script.source);
            let sha: String = self
                .command(&format!("SCRIPT LOAD ({})", script.name), load)
                .await
                .map_err(|e| {
                    if e.is(ErrorKind::Backend) && !e.is_temporary() {
                        Error::unsupported(format!(
                            "{} cannot run the lease scripts ({e}); Lua scripting must be \
                             enabled and allowed for this user",
                            self.inner.server
                        ))
                    } else {
                        e
                    }
                })?;
            if !sha.eq_ignore_ascii_case(&script.sha) {
                return Err(Error::unsupported(format!(
                    "{} returned SHA-1 {sha} for the {} script, expected {}",
                    self.inner.server, script.name, script.sha
                )));
            }
        }
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
        Err(Error::unsupported(format!(
            "{server} may lose lease records, and a lost record restarts its terms (or a lost \
             partition group its epochs) at 1, so fencing tokens could repeat: {why}. Turn on \
             AOF synced on every write (appendonly yes, appendfsync always) and a noeviction or \
             volatile-* maxmemory-policy; or choose TermScheme::ClockFloor; or accept the risk \
             with RedisConfig::allow_volatile(true)"
        )))
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

/// `EVALSHA <sha> 1 <key> <args…>` or `EVAL <source> 1 <key> <args…>`.
pub(crate) fn script_cmd(verb: &str, script: &str, key: &[u8], args: &[&str]) -> Cmd {
    keyed_script_cmd(verb, script, &[key], args)
}

/// `EVALSHA <sha> <n> <keys…> <args…>` or `EVAL <source> <n> <keys…> <args…>`.
pub(crate) fn keyed_script_cmd(verb: &str, script: &str, keys: &[&[u8]], args: &[&str]) -> Cmd {
    let mut cmd = redis::cmd(verb);
    cmd.arg(script).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

#[async_trait]
impl<C> LeaseStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // ClockFloor takes terms (and partition epochs) from the server clock: increasing,
            // with gaps.
            consecutive_terms: self.config().get_term_scheme() == TermScheme::Counter,
            force_release: true,
            slots: true,
            partitions: true,
            membership: true,
            max_name_bytes: MAX_NAME_BYTES,
            ..Capabilities::default()
        }
    }

    /// Checks, in a few round trips: the server answers `TIME`; every script loads (`SCRIPT
    /// LOAD`, which also warms the script cache so the first operations take one round trip);
    /// and the server keeps records across a restart and a host crash (`CONFIG GET appendonly`
    /// is `yes` and `appendfsync` is `always`) and never evicts them (`maxmemory-policy` is not
    /// `allkeys-*`). The store runs this check itself before its first claim (see
    /// [`RedisStore::with_config`]); a passed explicit call spares that.
    ///
    /// When a durability check fails or cannot be made (CONFIG disabled or renamed, as on many
    /// managed services), it fails with `Unsupported`, saying why, unless
    /// [`RedisConfig::allow_volatile`] is set (then it logs a warning), or the only risk is
    /// `appendfsync everysec` and [`RedisConfig::allow_fsync_everysec`] is set (a warning too),
    /// or the term scheme is
    /// [`TermScheme::ClockFloor`] (then it logs at info level: terms and partition epochs still
    /// grow after a loss, within the limits that scheme documents). The same checks cover the
    /// partition and membership keys: they live on the same server under the same prefix.
    async fn available(&self) -> Result<()> {
        self.start_up_check().await?;
        // Later operations need not check again.
        let _ = self.inner.started.set(());
        Ok(())
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
        validate_instance(instance)?;
        self.started().await?;
        let key = record_key(self.config().get_key_prefix(), name);
        let ttl = ceil_millis(ttl).to_string();
        let reply: Option<(u64, u64)> = self
            .eval(
                || format!("claim of lease '{name}'"),
                &SCRIPTS.claim,
                key.as_bytes(),
                &[
                    &holder.to_hex(),
                    instance,
                    &ttl,
                    self.config().get_term_scheme().script_flag(),
                ],
            )
            .await?;
        Ok(reply.map(grant))
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
        let key = record_key(self.config().get_key_prefix(), name);
        let ttl = ceil_millis(ttl).to_string();
        let reply: Option<(u64, u64)> = self
            .eval(
                || format!("renewal of lease '{name}'"),
                &SCRIPTS.renew,
                key.as_bytes(),
                &[&holder.to_hex(), &ttl],
            )
            .await?;
        Ok(reply.map(grant))
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.validate_name(name)?;
        let key = record_key(self.config().get_key_prefix(), name);
        let n: i64 = self
            .eval(
                || format!("release of lease '{name}'"),
                &SCRIPTS.release,
                key.as_bytes(),
                &[&holder.to_hex()],
            )
            .await?;
        Ok(n == 1)
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        let key = record_key(self.config().get_key_prefix(), name);
        let reply: Option<(u64, u64)> = self
            .eval(
                || format!("verify of lease '{name}'"),
                &SCRIPTS.verify,
                key.as_bytes(),
                &[&holder.to_hex()],
            )
            .await?;
        Ok(reply.map(grant))
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.validate_name(name)?;
        let key = record_key(self.config().get_key_prefix(), name);
        let reply: Option<(String, u64, i64, u64)> = self
            .eval(
                || format!("get of lease '{name}'"),
                &SCRIPTS.get,
                key.as_bytes(),
                &[],
            )
            .await?;
        Ok(reply.map(|(instance, term, live, remaining)| LeaseInfo {
            name: name.to_owned(),
            instance,
            term,
            live: live == 1,
            expires_in: Duration::from_millis(remaining),
        }))
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        self.validate_name(name)?;
        let key = record_key(self.config().get_key_prefix(), name);
        let n: i64 = self
            .eval(
                || format!("force release of lease '{name}'"),
                &SCRIPTS.force_release,
                key.as_bytes(),
                &[],
            )
            .await?;
        Ok(n == 1)
    }
}

pub(crate) fn grant((term, remaining_ms): (u64, u64)) -> Grant {
    Grant {
        term,
        expires_in: Duration::from_millis(remaining_ms),
    }
}

/// Connects to the Redis server at `url` (`redis://[user:password@]host:port[/db]`,
/// `rediss://…`, `redis+unix:///path`) with the default [`RedisConfig`].
///
/// The store runs on a [`ConnectionManager`] set up by [`RedisConfig::manager_config`]. A
/// malformed URL or an unreachable server gives `Unavailable`, naming the host and port (never
/// the credentials), after [`CONNECT_RETRIES`](crate::CONNECT_RETRIES) + 1 attempts of at most
/// [`RedisConfig::connect_timeout`] each. Call [`available`](LeaseStore::available) next, at
/// start-up.
pub async fn connect(url: &str) -> Result<RedisStore> {
    connect_with(url, RedisConfig::default()).await
}

/// Connects to the Redis server at `url` with `config`; see [`connect`]. Unless the config
/// names the server already, the store's messages name it by the URL's host and port.
pub async fn connect_with(url: &str, config: RedisConfig) -> Result<RedisStore> {
    config.validate()?;
    let client = redis::Client::open(url).map_err(|e| {
        Error::unavailable(format!(
            "the Redis URL {} is invalid; expected redis://[user:password@]host:port[/db]",
            lease_core::redact::redact_url(url)
        ))
        .with_source(e)
        .with_temporary(false)
    })?;
    let addr = client.get_connection_info().addr().to_string();
    let config = match config.get_server_label() {
        Some(_) => config,
        None => config.server_label(addr.clone()),
    };
    let manager = ConnectionManager::new_with_config(client, config.manager_config())
        .await
        .map_err(|e| {
            if e.is_io_error() {
                Error::unavailable(format!("redis server {addr} is unreachable")).with_source(e)
            } else {
                from_redis(e, &format!("redis server {addr}"), "connect")
            }
        })?;
    RedisStore::with_config(manager, config)
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls_in_messages_never_show_credentials() {
        for (url, host, secret) in [
            ("redis://u:secret@h:1/0", "h:1", "secret"),
            ("redis://:p%40ss@h:1", "h:1", "p%40ss"),
            ("redis//u:secret@h", "@h", "secret"),
            ("redis://u:se/cret@h:1", "h:1", "se/cret"),
        ] {
            let shown = lease_core::redact::redact_url(url);
            assert!(shown.contains(host), "{shown}");
            assert!(!shown.contains(secret), "{shown}");
        }
    }
}
