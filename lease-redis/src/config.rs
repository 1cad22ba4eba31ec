//! Options of a [`RedisStore`](crate::RedisStore): key prefix, timeouts, how terms are made and
//! what risk of data loss to accept.

use std::time::Duration;

use lease_core::{Error, ErrorKind, Result};
use redis::aio::ConnectionManagerConfig;

/// The key prefix used unless one is given.
pub const DEFAULT_KEY_PREFIX: &str = "lease:";

/// The longest key prefix, in bytes.
pub const MAX_KEY_PREFIX_BYTES: usize = 256;

/// The bound on one store operation unless one is given: the default attempt timeout of
/// [`lease_core::Timings`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// The bound on opening one connection unless one is given.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How many times [`RedisStore::connect`](crate::RedisStore::connect) retries opening a connection (after the first
/// attempt) before it reports the server unavailable, and how many times its
/// `ConnectionManager` retries a reconnection before waiting for the next request.
pub const CONNECT_RETRIES: usize = 2;

/// How the term (fencing token) of a claim is made, and the epoch of a partition lease.
///
/// Whatever the scheme, a name's term strictly increases for as long as its record exists in
/// Redis, and a partition's epoch for as long as its group's hash does; the schemes differ in
/// what happens when the record (the hash) is lost (see the crate documentation,
/// *Durability*). Epochs follow the same scheme as terms: with `Counter` the first epoch is 1
/// and each change of hands adds one; with `ClockFloor` an epoch that goes up becomes the larger
/// of the stored epoch plus one and the server's clock in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TermScheme {
    /// The contract's counter: the first claim of a name gets term 1 and every later claim the
    /// stored term plus one. If the record is lost, terms start again at 1 and **repeat**. The
    /// default, and what the shared conformance suite checks.
    #[default]
    Counter,
    /// The larger of the stored term plus one and the server's clock in microseconds
    /// (`TIME`) at the claim. Terms still strictly increase, but not by one, and the first term
    /// of a name is about 1.8 × 10¹⁵ rather than 1. If the record is lost, the next term is
    /// still higher than every earlier one unless the clock of the Redis that serves the next
    /// claim reads no later than the clock of the Redis that issued the last lost term did
    /// (a clock stepped back, or a failover to a host whose clock is behind).
    ClockFloor,
}

impl TermScheme {
    /// The flag the claim and partition-acquire scripts receive.
    pub(crate) fn script_flag(self) -> &'static str {
        match self {
            TermScheme::Counter => "0",
            TermScheme::ClockFloor => "1",
        }
    }
}

/// Options of a [`RedisStore`](crate::RedisStore).
///
/// ```
/// use std::time::Duration;
/// use lease_redis::{RedisConfig, TermScheme};
///
/// let config = RedisConfig::new()
///     .key_prefix("billing:lease:")
///     .operation_timeout(Some(Duration::from_secs(2)))
///     .term_scheme(TermScheme::Counter);
/// assert!(config.validate().is_ok());
/// assert!(RedisConfig::new().key_prefix("a{b}:").validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    key_prefix: String,
    operation_timeout: Option<Duration>,
    connect_timeout: Duration,
    allow_volatile: bool,
    allow_fsync_everysec: bool,
    term_scheme: TermScheme,
    replica_acks: Option<(u32, Duration)>,
    server_label: Option<String>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            operation_timeout: Some(DEFAULT_OPERATION_TIMEOUT),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            allow_volatile: false,
            allow_fsync_everysec: false,
            term_scheme: TermScheme::Counter,
            replica_acks: None,
            server_label: None,
        }
    }
}

impl RedisConfig {
    /// The defaults: prefix [`DEFAULT_KEY_PREFIX`], operations bounded by
    /// [`DEFAULT_OPERATION_TIMEOUT`], connections by [`DEFAULT_CONNECT_TIMEOUT`], counter terms,
    /// and no volatile server accepted (AOF on, synced on every write, no `allkeys-*`
    /// eviction).
    pub fn new() -> Self {
        Self::default()
    }

    /// Options from the environment, over the defaults:
    ///
    /// - `LEASE_REDIS_KEY_PREFIX`: the key prefix;
    /// - `LEASE_REDIS_ALLOW_VOLATILE`: `true`/`1`/`yes` or `false`/`0`/`no`;
    /// - `LEASE_REDIS_ALLOW_FSYNC_EVERYSEC`: the same values;
    /// - `LEASE_REDIS_TERMS`: `counter` or `clock-floor`;
    /// - `LEASE_REDIS_OPERATION_TIMEOUT_MS`: milliseconds, `0` for no bound.
    ///
    /// A malformed value is refused with a message naming the variable.
    pub fn from_env() -> Result<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut config = RedisConfig::new();
        if let Some(prefix) = var("LEASE_REDIS_KEY_PREFIX") {
            config = config.key_prefix(prefix);
        }
        let flag = |name: &str| -> Result<Option<bool>> {
            let Some(v) = var(name) else { return Ok(None) };
            match v.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" => Ok(Some(true)),
                "0" | "false" | "no" => Ok(Some(false)),
                _ => Err(Error::unsupported(format!(
                    "{name} is {v:?}; give true or false"
                ))),
            }
        };
        if let Some(allow) = flag("LEASE_REDIS_ALLOW_VOLATILE")? {
            config = config.allow_volatile(allow);
        }
        if let Some(allow) = flag("LEASE_REDIS_ALLOW_FSYNC_EVERYSEC")? {
            config = config.allow_fsync_everysec(allow);
        }
        if let Some(v) = var("LEASE_REDIS_TERMS") {
            let scheme = match v.trim().to_ascii_lowercase().as_str() {
                "counter" => TermScheme::Counter,
                "clock-floor" | "clock_floor" => TermScheme::ClockFloor,
                _ => {
                    return Err(Error::unsupported(format!(
                        "LEASE_REDIS_TERMS is {v:?}; give counter or clock-floor"
                    )));
                }
            };
            config = config.term_scheme(scheme);
        }
        if let Some(v) = var("LEASE_REDIS_OPERATION_TIMEOUT_MS") {
            let ms: u64 = v.trim().parse().map_err(|_| {
                Error::invalid_timings(format!(
                    "LEASE_REDIS_OPERATION_TIMEOUT_MS is {v:?}; give whole milliseconds"
                ))
            })?;
            config = config.operation_timeout((ms > 0).then(|| Duration::from_millis(ms)));
        }
        config.validate()?;
        Ok(config)
    }

    /// Sets the prefix of every key the store writes (default [`DEFAULT_KEY_PREFIX`]). It may
    /// not hold `{`, `}` or control characters (the braces would break the Redis Cluster hash
    /// tag), and is at most [`MAX_KEY_PREFIX_BYTES`] long; [`validate`](Self::validate) checks.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Bounds every store operation (default [`DEFAULT_OPERATION_TIMEOUT`]); `None` leaves the
    /// bound to the connection and the caller. An operation cut off by the bound fails with
    /// `Timeout`: it may or may not have taken effect.
    pub fn operation_timeout(mut self, bound: Option<Duration>) -> Self {
        self.operation_timeout = bound;
        self
    }

    /// Bounds opening one connection in [`RedisStore::connect`](crate::RedisStore::connect) and
    /// [`manager_config`](Self::manager_config) (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, bound: Duration) -> Self {
        self.connect_timeout = bound;
        self
    }

    /// Accepts a server that may lose lease records (default `false`): see the crate
    /// documentation, *Durability*. With `true`,
    /// [`available`](lease_core::LeaseStore::available) logs the risk as a warning instead of
    /// failing. Set it only when a repeated term or partition epoch cannot hurt (nothing is
    /// fenced), or when you
    /// made the server durable in a way the store cannot see (for example CONFIG is disabled).
    pub fn allow_volatile(mut self, allow: bool) -> Self {
        self.allow_volatile = allow;
        self
    }

    /// Accepts a server with AOF on but synced once a second (`appendfsync everysec`, Redis's
    /// default) rather than on every write (default `false`). With `everysec`, a crash of the
    /// host (not of the Redis process alone: the kernel still holds its writes) loses up to the
    /// last second of acknowledged writes, so a claim made in that second can be made again
    /// after the restart with the same [`TermScheme::Counter`] term. Set it when a host crash
    /// followed within a lease of a second holder fenced by the same token is a risk you accept;
    /// [`available`](lease_core::LeaseStore::available) then logs the risk as a warning.
    /// [`allow_volatile`](Self::allow_volatile) accepts this and every other risk;
    /// `appendfsync no` is accepted only by `allow_volatile`.
    pub fn allow_fsync_everysec(mut self, allow: bool) -> Self {
        self.allow_fsync_everysec = allow;
        self
    }

    /// Chooses how terms are made (default [`TermScheme::Counter`]).
    pub fn term_scheme(mut self, scheme: TermScheme) -> Self {
        self.term_scheme = scheme;
        self
    }

    /// Makes every operation wait until `replicas` replicas have acknowledged it, for up to
    /// `timeout`, before it answers (default: no wait; `replicas` 0 turns the wait off again).
    ///
    /// Redis replicates asynchronously: a claim or renewal the primary answered may not have
    /// reached any replica when the primary dies, and a failover (Sentinel, or an operator's
    /// `REPLICAOF NO ONE`) then promotes a replica without it — the next claim gets the **same
    /// term** again under [`TermScheme::Counter`], or a lease still held by the holder's
    /// reckoning expires early on the new primary. With this option each script is sent in one
    /// pipeline with a `PUBLISH` (which every replica receives, so the wait covers every write
    /// the primary has applied, this one included) and `WAIT <replicas> <timeout>` (which is not
    /// allowed inside a script); when fewer replicas acknowledge within `timeout`, the operation
    /// fails with `Unavailable`, as if the primary had not answered: the coordinator treats a
    /// claim's outcome as unknown and reads it back (that read waits for the replicas too), a
    /// renewal as failed. So an answer the store gives is on `replicas` replicas. The `PUBLISH`
    /// goes to `<prefix>replica-sync`, which the user must be allowed (Redis 7 gives new ACL
    /// users no channel rights): the start-up check tries it and refuses the server with
    /// `Unsupported` when it may not, as each operation would otherwise fail after its script
    /// took effect.
    ///
    /// What it does not do: it makes no replica wait for the write to reach its disk, and a
    /// failover keeps the write only if it promotes a replica that acknowledged it — Sentinel
    /// prefers the replica with the highest replication offset, so it does while those replicas
    /// are reachable; if they are lost with the primary, the write is lost. Set `replicas` to
    /// the number of replicas to close that too, at the price of availability: every operation
    /// then fails while any replica is down. With fewer replicas up than `replicas`, no
    /// operation succeeds. `timeout` must be at least 1 ms (`WAIT` counts whole milliseconds,
    /// and 0 would wait for ever) and shorter than the operation timeout.
    pub fn replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_acks = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// Names the server in error messages, e.g. `"cache-1:6379"`. [`RedisStore::connect`](crate::RedisStore::connect)
    /// sets it from the URL (host and port, never credentials); a store built on your own
    /// connection says "the Redis server" unless you set it.
    pub fn server_label(mut self, label: impl Into<String>) -> Self {
        self.server_label = Some(label.into());
        self
    }

    /// The key prefix.
    pub fn get_key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The bound on one operation.
    pub fn get_operation_timeout(&self) -> Option<Duration> {
        self.operation_timeout
    }

    /// The bound on opening one connection.
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Whether a server that may lose records is accepted.
    pub fn get_allow_volatile(&self) -> bool {
        self.allow_volatile
    }

    /// Whether a server syncing its AOF once a second is accepted.
    pub fn get_allow_fsync_everysec(&self) -> bool {
        self.allow_fsync_everysec
    }

    /// How terms are made.
    pub fn get_term_scheme(&self) -> TermScheme {
        self.term_scheme
    }

    /// The replicas every operation waits for and how long, when set
    /// ([`replica_acks`](Self::replica_acks)).
    pub fn get_replica_acks(&self) -> Option<(u32, Duration)> {
        self.replica_acks
    }

    /// The server's name in error messages.
    pub fn get_server_label(&self) -> Option<&str> {
        self.server_label.as_deref()
    }

    /// Checks the options; no I/O.
    pub fn validate(&self) -> Result<()> {
        let p = &self.key_prefix;
        if p.len() > MAX_KEY_PREFIX_BYTES {
            return Err(Error::invalid_name(format!(
                "the Redis key prefix is {} bytes long; give at most {MAX_KEY_PREFIX_BYTES}",
                p.len()
            )));
        }
        if let Some(c) = p.chars().find(|c| matches!(c, '{' | '}') || c.is_control()) {
            return Err(Error::invalid_name(format!(
                "the Redis key prefix {p:?} holds {c:?}; braces would break the per-name Redis \
                 Cluster hash tag and control characters are not allowed"
            )));
        }
        if self.operation_timeout.is_some_and(|t| t.is_zero()) || self.connect_timeout.is_zero() {
            return Err(Error::new(
                ErrorKind::InvalidTimings,
                "Redis operation and connect timeouts must be positive (use None for no \
                 operation bound)",
            ));
        }
        if let Some((replicas, wait)) = self.replica_acks {
            // WAIT takes whole milliseconds, and `WAIT n 0` blocks for ever: a wait under 1 ms
            // would be sent as 0.
            if wait < Duration::from_millis(1) {
                return Err(Error::invalid_timings(format!(
                    "the wait for {replicas} replica acknowledgements is {wait:?}; Redis's WAIT \
                     counts whole milliseconds (0 would wait for ever): give at least 1 ms, \
                     such as 200 ms"
                )));
            }
            if let Some(bound) = self.operation_timeout
                && wait >= bound
            {
                return Err(Error::invalid_timings(format!(
                    "the wait for replica acknowledgements ({wait:?}) must be shorter than the \
                     operation timeout ({bound:?}): lower it, or raise the operation timeout"
                )));
            }
        }
        Ok(())
    }

    /// The `ConnectionManager` settings [`RedisStore::connect`](crate::RedisStore::connect)
    /// uses, for building your own manager the same way: each connection attempt times out after
    /// the connect timeout, and a reconnection is retried [`CONNECT_RETRIES`] times, 100 ms
    /// apart at first. It sets **no response timeout**: the store bounds each operation by the
    /// operation timeout itself (one timer per operation, covering a `NOSCRIPT` retry and a
    /// wait for a reconnection too), so a request on a stalled socket still fails with
    /// `Timeout` within the bound, and a second timer per request would only cost time.
    pub fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(self.connect_timeout))
            .set_number_of_retries(CONNECT_RETRIES)
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_timeouts_are_checked() {
        assert!(RedisConfig::new().validate().is_ok());
        assert!(RedisConfig::new().key_prefix("").validate().is_ok());
        for bad in ["a{", "}", "a\nb", &"p".repeat(MAX_KEY_PREFIX_BYTES + 1)] {
            let e = RedisConfig::new().key_prefix(bad).validate().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad:?}");
        }
        let e = RedisConfig::new()
            .operation_timeout(Some(Duration::ZERO))
            .validate()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings);
        assert!(
            RedisConfig::new()
                .operation_timeout(None)
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn replica_waits_are_checked() {
        let ms = Duration::from_millis;
        let config = RedisConfig::new().replica_acks(1, ms(200));
        assert_eq!(config.get_replica_acks(), Some((1, ms(200))));
        assert!(config.validate().is_ok());
        assert_eq!(config.replica_acks(0, ms(200)).get_replica_acks(), None);
        for bad in [
            RedisConfig::new().replica_acks(1, Duration::ZERO),
            // Sent as `WAIT 1 0`, which blocks for ever.
            RedisConfig::new().replica_acks(1, Duration::from_micros(500)),
            RedisConfig::new()
                .operation_timeout(Some(ms(300)))
                .replica_acks(1, ms(300)),
        ] {
            let e = bad.validate().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{e}");
        }
    }

    #[test]
    fn the_manager_arms_no_second_timer() {
        // The store's operation timeout is the one timer of a request; the manager only bounds
        // connecting.
        let config = RedisConfig::new().connect_timeout(Duration::from_millis(700));
        let manager = config.manager_config();
        assert_eq!(manager.response_timeout(), None);
        assert_eq!(
            manager.connection_timeout(),
            Some(Duration::from_millis(700))
        );
    }
}
