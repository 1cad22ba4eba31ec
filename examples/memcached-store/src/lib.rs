//! A worked example of a backend written outside the workspace's own stores: leases over
//! memcached's text protocol, as a [`LeaseStore`] (fenced leases for a
//! [`Coordinator`](lease_core::Coordinator)) and as a [`PollingStore`] (the minimal contract of
//! the [`PollingLeaser`](lease_core::backend::polling::PollingLeaser)). The guide that walks
//! through it is `docs/writing-a-backend.md`; its tests run the conformance suite against a
//! real memcached (`LEASE_TEST_MEMCACHED_URL=memcached://127.0.0.1:11211`).
//!
//! # How the lease is kept
//!
//! - `lease:<hex name>` holds `<holder token hex> <term> <instance>` and carries the lease's
//!   expiry as the item's own expiry time, so **memcached's clock** decides when it ends. A
//!   claim is `add` (it stores only when the key is absent, and an expired item is absent); a
//!   renewal and a release are `cas` against the value the same holder read (`mg … c`), the
//!   release with a negative expiry, which ends the item at once.
//! - `term:<hex name>` is a counter bumped by `incr` before each claim; a claim that loses the
//!   `add` race leaves a gap, so terms strictly increase with gaps (`consecutive_terms:
//!   false`). When the counter is missing (never claimed, or lost to a restart or an eviction)
//!   it starts again at the server's Unix time × 1 000 000, above any term the lost counter can
//!   have issued unless a name was claimed a million times a second.
//! - The record of an ended lease is gone (`keeps_ended_records: false`).
//!
//! # The clock
//!
//! memcached counts expiry in whole seconds, from a clock it updates once a second: an item
//! stored for `N` seconds ends between `N − 2` and `N` seconds later. A lease of `ttl` is
//! stored for `ceil(ttl) + 1` seconds, so it never ends sooner than `ttl − 1 s`: the store
//! declares `clock_granularity: 1 s`, and reports the time left two seconds short of what
//! memcached counts (`ceil(ttl) − 1` after a claim or renewal). A
//! [`Coordinator`](lease_core::Coordinator) over it needs timings that keep that second back
//! (`deadline + grace + 1 s ≤ lease − 1 %`; it refuses others at build time).
//!
//! # What memcached cannot promise
//!
//! A server restart or an eviction loses every lease: the names are free at once, while their
//! holders may still work until their local deadline. Run memcached with `-M` (refuse to evict)
//! and a memory limit far above what the leases take; [`MemcachedStore::available`] checks the
//! first. Use a store that persists when a restart must not free the names.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lease_core::backend::polling::PollingStore;
use lease_core::backend::{
    Capabilities, Grant, HolderToken, LeaseInfo, async_trait, check, derived_capabilities,
};
use lease_core::layer::Operation;
use lease_core::{Error, LeaseStore, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The longest lease name: its hex form plus the key prefix stays under memcached's 250-byte
/// keys.
pub const MAX_NAME_BYTES: usize = 100;

/// memcached's clock step: expiry in whole seconds, updated once a second.
pub const CLOCK_GRANULARITY: Duration = Duration::from_secs(1);

/// How long any one exchange with the server may take before the connection is given up.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A lease store over one memcached server.
#[derive(Clone)]
pub struct MemcachedStore {
    inner: Arc<Inner>,
}

struct Inner {
    addr: String,
    idle: Mutex<Vec<Conn>>,
}

impl fmt::Debug for MemcachedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemcachedStore")
            .field("addr", &self.inner.addr)
            .finish_non_exhaustive()
    }
}

impl MemcachedStore {
    /// A store for the server at `url` (`memcached://host:port`, or plain `host:port`).
    /// Connects lazily; [`available`](LeaseStore::available) checks the server.
    pub fn new(url: &str) -> Result<MemcachedStore> {
        let addr = url.strip_prefix("memcached://").unwrap_or(url);
        let addr = addr.trim_end_matches('/');
        if addr.is_empty() || addr.contains('/') || !addr.contains(':') {
            return Err(Error::invalid_argument(format!(
                "a memcached URL is memcached://HOST:PORT, not {url:?}"
            )));
        }
        Ok(MemcachedStore {
            inner: Arc::new(Inner {
                addr: addr.to_owned(),
                idle: Mutex::new(Vec::new()),
            }),
        })
    }

    /// An idle connection, or a new one.
    async fn conn(&self) -> Result<Conn> {
        let idle = self
            .inner
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        if let Some(c) = idle {
            return Ok(c);
        }
        let stream = tokio::time::timeout(IO_TIMEOUT, TcpStream::connect(&self.inner.addr))
            .await
            .map_err(|_| Error::timeout("connecting to memcached", IO_TIMEOUT))?
            .map_err(|e| {
                Error::unavailable(format!("cannot connect to memcached: {e}")).with_source(e)
            })?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream: BufReader::new(stream),
        })
    }

    /// Gives a connection back after a complete exchange. A connection whose exchange was cut
    /// short (an error, or a future dropped mid-way) is never given back: it may hold an
    /// unread answer.
    fn put(&self, c: Conn) {
        self.inner
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(c);
    }

    /// Runs `requests` on one connection, bounded by [`IO_TIMEOUT`].
    async fn exchange<T>(
        &self,
        op: Operation,
        name: &str,
        f: impl AsyncFnOnce(&mut Conn) -> Result<T>,
    ) -> Result<T> {
        let mut c = self.conn().await.map_err(|e| self.context(e, op, name))?;
        let answer = tokio::time::timeout(IO_TIMEOUT, f(&mut c))
            .await
            .map_err(|_| Error::timeout("a memcached exchange", IO_TIMEOUT))
            .and_then(|r| r)
            .map_err(|e| self.context(e, op, name))?;
        self.put(c);
        Ok(answer)
    }

    fn context(&self, e: Error, op: Operation, name: &str) -> Error {
        e.during(op, name)
            .at_server(format!("memcached://{}", self.inner.addr))
    }
}

/// The key of a name's lease, and of its term counter.
fn keys(name: &str) -> (String, String) {
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    (format!("lease:{hex}"), format!("term:{hex}"))
}

/// The item lifetime, in seconds, for a lease of `ttl`: `ceil(ttl) + 1`, so that memcached's
/// once-a-second clock ends it no sooner than `ttl − 1 s`.
fn item_seconds(ttl: Duration) -> u64 {
    ttl.as_nanos().div_ceil(1_000_000_000) as u64 + 1
}

/// The time left to report for an item memcached says has `seconds` left (or was just stored
/// for `seconds`): two seconds short, since memcached's clock may lag the true time by up to
/// two (it is updated once a second and counts whole seconds), and never more than the lease
/// asked for.
fn time_left(seconds: u64, ttl: Option<Duration>) -> Duration {
    let left = Duration::from_secs(seconds.saturating_sub(2));
    ttl.map_or(left, |t| left.min(t))
}

/// A lease record: `<holder hex> <term> <instance>`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: String,
    term: u64,
    instance: String,
}

impl Record {
    fn encode(&self) -> Vec<u8> {
        format!("{} {} {}", self.holder, self.term, self.instance).into_bytes()
    }

    fn decode(data: &[u8]) -> Result<Record> {
        let text = std::str::from_utf8(data)
            .map_err(|_| Error::schema("a lease record in memcached is not UTF-8"))?;
        let mut parts = text.splitn(3, ' ');
        let (Some(holder), Some(term), Some(instance)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(Error::schema(format!(
                "a lease record in memcached is not `holder term instance`: {text:?}"
            )));
        };
        let term = term.parse().map_err(|_| {
            Error::schema(format!("a lease record's term is not a number: {text:?}"))
        })?;
        Ok(Record {
            holder: holder.to_owned(),
            term,
            instance: instance.to_owned(),
        })
    }
}

/// An item as `mg <key> v t c` answers it.
struct Item {
    data: Vec<u8>,
    seconds_left: u64,
    cas: u64,
}

/// One connection to the server.
struct Conn {
    stream: BufReader<TcpStream>,
}

impl Conn {
    async fn send(&mut self, request: &[u8]) -> Result<()> {
        self.stream
            .get_mut()
            .write_all(request)
            .await
            .map_err(io_error)
    }

    /// One answer line, without its `\r\n`; a server error line is an error.
    async fn line(&mut self) -> Result<String> {
        let mut line = String::new();
        let n = self.stream.read_line(&mut line).await.map_err(io_error)?;
        if n == 0 {
            return Err(Error::unavailable("memcached closed the connection"));
        }
        let line = line.trim_end_matches(['\r', '\n']).to_owned();
        if line == "ERROR" || line.starts_with("CLIENT_ERROR") || line.starts_with("SERVER_ERROR") {
            let temporary = line.starts_with("SERVER_ERROR");
            return Err(Error::backend(
                format!("memcached answered {line:?}"),
                line.clone(),
                temporary,
            ));
        }
        Ok(line)
    }

    /// `mg <key> v t c`: the item, or `None` when absent (or expired).
    async fn meta_get(&mut self, key: &str) -> Result<Option<Item>> {
        self.send(format!("mg {key} v t c\r\n").as_bytes()).await?;
        let head = self.line().await?;
        if head == "EN" {
            return Ok(None);
        }
        let mut words = head.split(' ');
        if words.next() != Some("VA") {
            return Err(unexpected("mg", &head));
        }
        let len: usize = words
            .next()
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| unexpected("mg", &head))?;
        let (mut seconds_left, mut cas) = (None, None);
        for w in words {
            if let Some(t) = w.strip_prefix('t') {
                // -1: no expiry. A lease item always has one; treat it as already ending.
                seconds_left = Some(t.parse::<i64>().map_or(0, |t| t.max(0) as u64));
            } else if let Some(c) = w.strip_prefix('c') {
                cas = c.parse().ok();
            }
        }
        let mut data = vec![0; len + 2];
        self.stream.read_exact(&mut data).await.map_err(io_error)?;
        data.truncate(len);
        match (seconds_left, cas) {
            (Some(seconds_left), Some(cas)) => Ok(Some(Item {
                data,
                seconds_left,
                cas,
            })),
            _ => Err(unexpected("mg", &head)),
        }
    }

    /// `add`: `true` when stored (the key was absent).
    async fn add(&mut self, key: &str, seconds: u64, data: &[u8]) -> Result<bool> {
        let mut req = format!("add {key} 0 {seconds} {}\r\n", data.len()).into_bytes();
        req.extend_from_slice(data);
        req.extend_from_slice(b"\r\n");
        self.send(&req).await?;
        match self.line().await?.as_str() {
            "STORED" => Ok(true),
            "NOT_STORED" => Ok(false),
            other => Err(unexpected("add", other)),
        }
    }

    /// `cas`: `true` when stored (the item is still the one read with `cas`). A negative
    /// `seconds` ends the item at once.
    async fn cas(&mut self, key: &str, seconds: i64, data: &[u8], cas: u64) -> Result<bool> {
        let mut req = format!("cas {key} 0 {seconds} {} {cas}\r\n", data.len()).into_bytes();
        req.extend_from_slice(data);
        req.extend_from_slice(b"\r\n");
        self.send(&req).await?;
        match self.line().await?.as_str() {
            "STORED" => Ok(true),
            "EXISTS" | "NOT_FOUND" => Ok(false),
            other => Err(unexpected("cas", other)),
        }
    }

    /// `incr <key> 1`: the new value, or `None` when the counter is absent.
    async fn incr(&mut self, key: &str) -> Result<Option<u64>> {
        self.send(format!("incr {key} 1\r\n").as_bytes()).await?;
        let line = self.line().await?;
        if line == "NOT_FOUND" {
            return Ok(None);
        }
        line.parse()
            .map(Some)
            .map_err(|_| unexpected("incr", &line))
    }

    /// `stats` or `stats settings`: the value of `STAT <key> <value>`.
    async fn stat(&mut self, group: &str, key: &str) -> Result<Option<String>> {
        self.send(format!("stats{group}\r\n").as_bytes()).await?;
        let mut found = None;
        loop {
            let line = self.line().await?;
            if line == "END" {
                return Ok(found);
            }
            let mut words = line.splitn(3, ' ');
            if words.next() == Some("STAT") && words.next() == Some(key) {
                found = words.next().map(str::to_owned);
            }
        }
    }

    /// The next term of a name: its counter bumped, or started at the server's Unix time ×
    /// 1 000 000 when absent.
    async fn next_term(&mut self, key: &str) -> Result<u64> {
        for _ in 0..3 {
            if let Some(term) = self.incr(key).await? {
                return Ok(term);
            }
            let now: u64 = self
                .stat("", "time")
                .await?
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| Error::schema("memcached's `stats` has no `time`"))?;
            let start = now.saturating_mul(1_000_000);
            if self.add(key, 0, start.to_string().as_bytes()).await? {
                return Ok(start);
            }
            // Another claimer created it first: bump theirs.
        }
        Err(Error::unavailable(
            "the term counter kept disappearing: is memcached evicting (run it with -M)?",
        ))
    }
}

fn io_error(e: std::io::Error) -> Error {
    Error::unavailable(format!("memcached connection failed: {e}")).with_source(e)
}

fn unexpected(command: &str, answer: &str) -> Error {
    Error::backend(
        format!("memcached answered {command} with {answer:?}"),
        answer.to_owned(),
        false,
    )
}

#[async_trait]
impl LeaseStore for MemcachedStore {
    fn backend(&self) -> &'static str {
        "memcached"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // Terms from a counter that claims lost to a race also bump: gaps.
            consecutive_terms: false,
            // An ended lease is an absent item.
            keeps_ended_records: false,
            clock_granularity: CLOCK_GRANULARITY,
            max_name_bytes: MAX_NAME_BYTES,
            // No permits, partitions, membership or slots: the accessors answer None.
            ..derived_capabilities(self)
        }
    }

    /// Checks that the server answers and does not evict (`memcached -M`): an evicted lease
    /// would free its name while its holder works.
    async fn available(&self) -> Result<()> {
        let evictions = self
            .exchange(Operation::Available, "", async |c| {
                c.stat(" settings", "evictions").await
            })
            .await?;
        if evictions.as_deref() != Some("off") {
            return Err(Error::schema(format!(
                "memcached at {} evicts items under memory pressure (evictions {}): an evicted \
                 lease frees its name while its holder still works; start memcached with -M",
                self.inner.addr,
                evictions.as_deref().unwrap_or("unknown")
            )));
        }
        Ok(())
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::claim(self, name, instance, ttl)?;
        let (lease, term_key) = keys(name);
        let holder = holder.to_hex();
        let instance = instance.to_owned();
        self.exchange(Operation::Claim, name, async move |c| {
            // Cheap refusal of a live lease, without bumping the term.
            if c.meta_get(&lease).await?.is_some() {
                return Ok(None);
            }
            let term = c.next_term(&term_key).await?;
            let record = Record {
                holder,
                term,
                instance,
            };
            if c.add(&lease, item_seconds(ttl), &record.encode()).await? {
                Ok(Some(Grant {
                    term,
                    expires_in: time_left(item_seconds(ttl), Some(ttl)),
                }))
            } else {
                Ok(None)
            }
        })
        .await
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::renew(self, name, ttl)?;
        let (lease, _) = keys(name);
        let holder = holder.to_hex();
        self.exchange(Operation::Renew, name, async move |c| {
            let Some(item) = c.meta_get(&lease).await? else {
                return Ok(None);
            };
            let record = Record::decode(&item.data)?;
            if record.holder != holder {
                return Ok(None);
            }
            // The same value, a new expiry, only if nobody changed the item since the read
            // (an expired item is absent: never revived).
            let seconds = item_seconds(ttl) as i64;
            if c.cas(&lease, seconds, &item.data, item.cas).await? {
                Ok(Some(Grant {
                    term: record.term,
                    expires_in: time_left(item_seconds(ttl), Some(ttl)),
                }))
            } else {
                Ok(None)
            }
        })
        .await
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        check::name(self, name)?;
        let (lease, _) = keys(name);
        let holder = holder.to_hex();
        self.exchange(Operation::Release, name, async move |c| {
            let Some(item) = c.meta_get(&lease).await? else {
                return Ok(false);
            };
            if Record::decode(&item.data)?.holder != holder {
                return Ok(false);
            }
            c.cas(&lease, -1, &item.data, item.cas).await
        })
        .await
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        check::name(self, name)?;
        let (lease, _) = keys(name);
        let holder = holder.to_hex();
        self.exchange(Operation::Verify, name, async move |c| {
            let Some(item) = c.meta_get(&lease).await? else {
                return Ok(None);
            };
            let record = Record::decode(&item.data)?;
            Ok((record.holder == holder).then(|| Grant {
                term: record.term,
                expires_in: time_left(item.seconds_left, None),
            }))
        })
        .await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        check::name(self, name)?;
        let (lease, _) = keys(name);
        let owned = name.to_owned();
        self.exchange(Operation::Get, name, async move |c| {
            let Some(item) = c.meta_get(&lease).await? else {
                return Ok(None);
            };
            let record = Record::decode(&item.data)?;
            Ok(Some(LeaseInfo {
                name: owned,
                instance: record.instance,
                term: record.term,
                live: true,
                expires_in: time_left(item.seconds_left, None),
            }))
        })
        .await
    }
}

/// The polling contract: `poll:<hex name>` holds the holder's bytes (hex), with the lease's
/// expiry as the item's, `ceil(ttl) + 1` seconds as for [`LeaseStore`].
#[async_trait]
impl PollingStore for MemcachedStore {
    async fn try_acquire(
        &self,
        name: &str,
        holder: &[u8],
        ttl: Duration,
    ) -> Result<(bool, Vec<u8>)> {
        check::name(self, name)?;
        lease_core::backend::validate_ttl(ttl)?;
        let key = format!("poll:{}", &keys(name).0["lease:".len()..]);
        let mine: Vec<u8> = holder.to_vec();
        let seconds = item_seconds(ttl);
        self.exchange(Operation::Claim, name, async move |c| {
            // Free: take it. Ours: extend it. Someone else's: say whose. An item that vanishes
            // or changes between the read and the write is tried again.
            for _ in 0..3 {
                if c.add(&key, seconds, &mine).await? {
                    return Ok((true, mine));
                }
                let Some(item) = c.meta_get(&key).await? else {
                    continue;
                };
                if item.data != mine {
                    return Ok((false, item.data));
                }
                if c.cas(&key, seconds as i64, &mine, item.cas).await? {
                    return Ok((true, mine));
                }
            }
            Err(Error::unavailable(
                "the polling lease changed under every attempt; try again",
            ))
        })
        .await
    }

    async fn release(&self, name: &str, holder: &[u8]) -> Result<()> {
        check::name(self, name)?;
        let key = format!("poll:{}", &keys(name).0["lease:".len()..]);
        let mine = holder.to_vec();
        self.exchange(Operation::Release, name, async move |c| {
            if let Some(item) = c.meta_get(&key).await?
                && item.data == mine
            {
                c.cas(&key, -1, &mine, item.cas).await?;
            }
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_lives_at_least_its_ttl_less_one_clock_step() {
        // memcached ends an item stored for N seconds between N − 2 and N seconds later.
        for ms in [1, 600, 1000, 1001, 2999, 3000] {
            let ttl = Duration::from_millis(ms);
            let n = item_seconds(ttl);
            assert!(
                Duration::from_secs(n - 2) + CLOCK_GRANULARITY >= ttl,
                "{ttl:?}: {n}"
            );
            assert!(time_left(n, Some(ttl)) <= ttl);
        }
    }

    #[test]
    fn records_round_trip_and_bad_ones_are_named() {
        let r = Record {
            holder: "ab".into(),
            term: 7,
            instance: "worker 1".into(),
        };
        assert_eq!(Record::decode(&r.encode()).unwrap(), r);
        assert!(Record::decode(b"ab x y").is_err());
        assert!(Record::decode(b"ab").is_err());
    }

    #[test]
    fn urls_are_checked() {
        assert!(MemcachedStore::new("memcached://127.0.0.1:11211").is_ok());
        assert!(MemcachedStore::new("127.0.0.1:11211").is_ok());
        assert!(MemcachedStore::new("memcached://").is_err());
        assert!(MemcachedStore::new("memcached://h:1/db").is_err());
    }
}
