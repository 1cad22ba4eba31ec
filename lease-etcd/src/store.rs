//! [`EtcdStore`]: the store struct, how it is opened ([`EtcdStore::connect`],
//! [`EtcdStore::with_client`]), and the requests every operation shares: grants, keep-alives,
//! reads and transactions, each bounded by the operation timeout.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use etcd_client::{
    Client, ConnectOptions, GetOptions, KeyValue, LeaseKeepAliveStream, LeaseKeeper, Txn,
    TxnResponse,
};
use lease_core::backend::clock::Stamp;
use lease_core::layer::Operation;
use lease_core::{Error, Result};

use crate::config::EtcdConfig;
use crate::error::{Site, lease_not_found};
use crate::hint_state::Hints;
use crate::known_leases::KnownLeases;
use crate::sessions::Sessions;

/// How many keep-alive streams (one per etcd lease renewed) a store keeps open at most; past
/// that a renewal opens a stream for its one exchange and closes it.
const MAX_KEEPERS: usize = 4096;

/// How many etcd leases a listing follows one key onto ([`EtcdStore::live`]) before it answers
/// a temporary error.
pub(crate) const MOVED_TRIES: usize = 3;

/// A lease store on etcd v3.
///
/// One key per name under the configured prefix; each claim grants an etcd lease and attaches
/// the key to it, so etcd deletes the key when the lease's TTL runs out by the server's clock.
/// Claims are transactions comparing the key's create revision with 0 (vacant), and the key's
/// create revision is the fencing token. See the [crate docs](crate) for the whole protocol,
/// its guarantees and its round trips.
///
/// Cloning is cheap and shares the connection, the open keep-alive streams and the memory of
/// this store's own claims.
#[derive(Clone)]
pub struct EtcdStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) prefix: String,
    op_timeout: Duration,
    pub(crate) max_txn_ops: usize,
    server: String,
    /// The etcd leases this store granted and their TTL, so a first keep-alive needs no second
    /// exchange to learn it.
    grants: Mutex<HashMap<i64, Duration>>,
    /// Open keep-alive streams, by etcd lease id. A stream is taken out for an exchange and put
    /// back after it, so one whose exchange was cut short is dropped, never reused.
    keepers: Mutex<HashMap<i64, Keeper>>,
    /// This store's own claims: the etcd lease and the local start of the time it counts.
    pub(crate) known: Mutex<KnownLeases>,
    /// The owners' etcd leases that partition keys hang on.
    pub(crate) sessions: Sessions,
    /// Per (group, owner), the etcd leases this store's last batch renewal found the owner's
    /// keys on: the next renewal keeps them alive together with its read.
    pub(crate) group_leases: Mutex<HashMap<(String, String), Vec<i64>>>,
    /// The hints waiters subscribe to and the watch that feeds them (see `hints.rs`).
    pub(crate) hints: Hints,
    /// Tests only: how many of the next etcd leases granted are revoked at once, before the
    /// caller uses them (as a lease that ran out before the request hung on it landed).
    #[cfg(test)]
    pub(crate) revoke_grants: std::sync::atomic::AtomicUsize,
}

struct Keeper {
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("server", &self.inner.server)
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

/// Locks `m`, taking the data of a poisoned lock as it is (every critical section here only
/// inserts or removes whole entries).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The whole seconds etcd keeps a lease of `ttl`: rounded up, at least 1.
///
/// etcd's TTLs are whole seconds, and a server raises one below its minimum (1.5 election
/// timeouts, rounded up: 2 s with the default settings) to that minimum. Rounding up keeps
/// the server's expiry at or after the requested TTL; the holder's local deadline still counts
/// from the requested TTL, so the holder steps down before the server lets anyone else in.
pub(crate) fn server_seconds(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

/// A server's TTL answer (seconds) as a duration; zero for none.
pub(crate) fn seconds(ttl: i64) -> Duration {
    Duration::from_secs(u64::try_from(ttl).unwrap_or(0))
}

/// The endpoints of a URL: `etcd://host:port[,host:port…]` (plain HTTP/2), or
/// `http://host:port[,…]`, or bare `host:port[,…]`.
pub(crate) fn endpoints(url: &str) -> Result<Vec<String>> {
    let bad = |why: &str| {
        Error::invalid_argument(format!(
            "etcd URL {url:?} {why}; write etcd://host:2379 (several endpoints separated by \
             commas: etcd://h1:2379,h2:2379)"
        ))
    };
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("etcd") => rest,
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
            return Err(bad(
                "asks for TLS, which this build does not offer; connect through a TLS client \
                 of your own with EtcdStore::with_client",
            ));
        }
        Some(_) => return Err(bad("has another scheme")),
        None => url,
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Err(bad("names no host"));
    }
    let mut out = Vec::new();
    for host in rest.split(',') {
        let host = host
            .strip_prefix("http://")
            .or_else(|| host.strip_prefix("etcd://"))
            .unwrap_or(host);
        if host.is_empty() || host.contains(['/', '?', '@', '#']) {
            return Err(bad(&format!(
                "has the endpoint {host:?}: give host:port only (no path, query or user)"
            )));
        }
        out.push(format!("http://{host}"));
    }
    Ok(out)
}

impl EtcdStore {
    /// Connects to the etcd endpoints of `url` (`etcd://host:2379`, several separated by
    /// commas; `http://host:2379` works too) and opens the store there, as
    /// [`with_client`](Self::with_client) does on a client of the caller's.
    ///
    /// The connection is made lazily by the client; the check at the end (one linearizable
    /// read under the prefix) fails fast with `Unavailable` when no member answers.
    pub async fn connect(url: &str, config: EtcdConfig) -> Result<EtcdStore> {
        config.validate()?;
        let endpoints = endpoints(url)?;
        let label = config.server_label.clone().unwrap_or_else(|| {
            endpoints
                .iter()
                .map(|e| e.trim_start_matches("http://"))
                .collect::<Vec<_>>()
                .join(",")
        });
        let options = ConnectOptions::new()
            .with_connect_timeout(config.op_timeout)
            .with_timeout(config.op_timeout);
        let site = Site {
            op: None,
            name: "",
            server: &label,
            doing: None,
        };
        let client = match tokio::time::timeout(
            config.op_timeout,
            Client::connect(&endpoints, Some(options)),
        )
        .await
        {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(site.etcd(e)),
            Err(_) => return Err(site.timed_out(config.op_timeout)),
        };
        let config = config.server_label(label);
        EtcdStore::with_client(client, config).await
    }

    /// Opens the store on `client`, a client of the caller's (sharing its connection), and
    /// checks that etcd answers: one linearizable read under the prefix.
    pub async fn with_client(client: Client, config: EtcdConfig) -> Result<EtcdStore> {
        config.validate()?;
        let server = config
            .server_label
            .clone()
            .unwrap_or_else(|| "etcd".to_owned());
        let store = EtcdStore {
            inner: Arc::new(Inner {
                hints: Hints::new(client.clone()),
                client,
                prefix: config.prefix,
                op_timeout: config.op_timeout,
                max_txn_ops: config.max_txn_ops,
                server,
                grants: Mutex::default(),
                keepers: Mutex::default(),
                known: Mutex::default(),
                sessions: Sessions::default(),
                group_leases: Mutex::default(),
                #[cfg(test)]
                revoke_grants: std::sync::atomic::AtomicUsize::new(0),
            }),
        };
        store.check(None).await?;
        Ok(store)
    }

    /// The etcd client this store sends through (for etcd's own APIs, e.g. in a test).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The endpoints, as errors name them.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// Where an operation on `name` runs, for its errors.
    pub(crate) fn site<'a>(&'a self, op: Operation, name: &'a str) -> Site<'a> {
        Site {
            op: Some(op),
            name,
            server: &self.inner.server,
            doing: None,
        }
    }

    /// One linearizable read under the prefix: it needs a member with a leader.
    pub(crate) async fn check(&self, op: Option<Operation>) -> Result<()> {
        let site = Site {
            op,
            name: "",
            server: &self.inner.server,
            doing: None,
        };
        let mut kv = self.inner.client.kv_client();
        let prefix = self.inner.prefix.clone();
        self.bounded(site, async move {
            kv.get(
                prefix,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// `fut`, bounded by the operation timeout, its errors as lease errors.
    pub(crate) async fn bounded<T>(
        &self,
        site: Site<'_>,
        fut: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.inner.op_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(site.etcd(e)),
            Err(_) => Err(site.timed_out(self.inner.op_timeout)),
        }
    }

    /// Grants an etcd lease for `ttl` ([`server_seconds`]); answers its id and the TTL the
    /// server granted (never less than asked).
    pub(crate) async fn grant(&self, site: Site<'_>, ttl: Duration) -> Result<(i64, Duration)> {
        let mut lease = self.inner.client.lease_client();
        let resp = self
            .bounded(site, lease.grant(server_seconds(ttl), None))
            .await?;
        let granted = seconds(resp.ttl());
        if granted.is_zero() {
            return Err(site.malformed("a TTL for the lease it granted"));
        }
        {
            let mut grants = lock(&self.inner.grants);
            if grants.len() >= MAX_KEEPERS * 4 {
                grants.clear();
            }
            grants.insert(resp.id(), granted);
        }
        #[cfg(test)]
        {
            use std::sync::atomic::Ordering;
            let revoke =
                self.inner
                    .revoke_grants
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            if revoke.is_ok() {
                self.revoke(site, resp.id()).await?;
            }
        }
        Ok((resp.id(), granted))
    }

    /// Revokes `id` in the background (it ends by its TTL anyway): for an etcd lease no key
    /// hangs on any more.
    pub(crate) fn revoke_later(&self, id: i64) {
        self.forget_lease(id);
        let mut lease = self.inner.client.lease_client();
        let bound = self.inner.op_timeout;
        tokio::spawn(async move {
            let _ = tokio::time::timeout(bound, lease.revoke(id)).await;
        });
    }

    /// Revokes `id` now; `false` when it was not granted any more.
    pub(crate) async fn revoke(&self, site: Site<'_>, id: i64) -> Result<bool> {
        self.forget_lease(id);
        let mut lease = self.inner.client.lease_client();
        match tokio::time::timeout(self.inner.op_timeout, lease.revoke(id)).await {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(e)) if lease_not_found(&e) => Ok(false),
            Ok(Err(e)) => Err(site.etcd(e)),
            Err(_) => Err(site.timed_out(self.inner.op_timeout)),
        }
    }

    /// Drops what this store remembers of etcd lease `id` (its TTL, its keep-alive stream).
    pub(crate) fn forget_lease(&self, id: i64) {
        lock(&self.inner.grants).remove(&id);
        lock(&self.inner.keepers).remove(&id);
    }

    /// One keep-alive of etcd lease `id`: the TTL it was renewed for, or `None` when the lease
    /// is gone (expired or revoked: etcd never revives one).
    ///
    /// The TTL counts from when the leader took the request, which is after the caller's
    /// stamp taken before this call; an expired lease is refused by etcd even before its keys
    /// were deleted. A cached stream that broke is replaced by a new one (a keep-alive repeated
    /// is harmless: it only renews again).
    pub(crate) async fn keep_alive(&self, site: Site<'_>, id: i64) -> Result<Option<Duration>> {
        let answer = self
            .bounded(site, async {
                let cached = lock(&self.inner.keepers).remove(&id);
                if let Some(mut k) = cached {
                    match exchange(&mut k).await {
                        Ok(Some(ttl)) => return Ok(Some((ttl, k))),
                        Ok(None) => return Ok(None),
                        Err(_) => {} // the stream broke: open another
                    }
                }
                let mut lease = self.inner.client.lease_client();
                let (keeper, stream) = match lease.keep_alive(id).await {
                    Ok(pair) => pair,
                    Err(e) if lease_not_found(&e) => return Ok(None),
                    Err(e) => return Err(e),
                };
                let mut k = Keeper { keeper, stream };
                let granted = lock(&self.inner.grants).get(&id).copied();
                let ttl = match granted {
                    Some(ttl) => ttl,
                    // Opening the stream renewed the lease but did not say for how long: ask
                    // once more on it.
                    None => match exchange(&mut k).await? {
                        Some(ttl) => ttl,
                        None => return Ok(None),
                    },
                };
                Ok(Some((ttl, k)))
            })
            .await?;
        match answer {
            Some((ttl, k)) => {
                let mut keepers = lock(&self.inner.keepers);
                if keepers.len() < MAX_KEEPERS {
                    keepers.insert(id, k);
                }
                Ok(Some(ttl))
            }
            None => {
                self.forget_lease(id);
                Ok(None)
            }
        }
    }

    /// The time left on etcd lease `id` by the server, in whole seconds rounded down; `None`
    /// when the lease is gone.
    pub(crate) async fn time_left(&self, site: Site<'_>, id: i64) -> Result<Option<Duration>> {
        let mut lease = self.inner.client.lease_client();
        let resp = self.bounded(site, lease.time_to_live(id, None)).await?;
        Ok((resp.ttl() >= 0).then(|| seconds(resp.ttl())))
    }

    /// The time left on another's etcd lease `id`, for `get`; `None` when the lease is gone.
    ///
    /// etcd answers whole seconds rounded down (`LeaseTimeToLive`), so the expiry lies up to a
    /// second after the time left it reports, and an observer would take a release in that
    /// second for an expiry. When this store's watch saw the lease key put on `id` (a claim,
    /// or a renewal moving it onto a longer etcd lease), the lease was granted before that
    /// moment, so its TTL as granted runs out before that moment plus the TTL: that bound is
    /// answered, when it is consistent with etcd's answer (a keep-alive since moved the expiry
    /// past it otherwise, and the whole seconds are answered as before) and no more than a
    /// second past it. Limits: it may exceed the time left by the time between the grant and
    /// the put being seen (milliseconds; never what a holder's deadline counts on: `verify`
    /// keeps [`time_left`](Self::time_left)); a keep-alive that moved the expiry by less than
    /// a second may go unnoticed, and then the answer is early, as etcd's whole seconds are.
    pub(crate) async fn time_left_of(&self, site: Site<'_>, id: i64) -> Result<Option<Duration>> {
        let asked = Stamp::now();
        let mut lease = self.inner.client.lease_client();
        let resp = self.bounded(site, lease.time_to_live(id, None)).await?;
        if resp.ttl() < 0 {
            return Ok(None);
        }
        let floor = seconds(resp.ttl());
        let seen = lock(&self.inner.hints.puts_seen).get(&id).copied();
        let Some(put) = seen else {
            return Ok(Some(floor));
        };
        Ok(Some(refined(
            floor,
            seconds(resp.granted_ttl()),
            asked.elapsed(),
            put.elapsed(),
        )))
    }

    /// The time left on each of `ids` ([`time_left`](Self::time_left)), asked all at once.
    pub(crate) async fn times_left(
        &self,
        site: Site<'_>,
        ids: impl IntoIterator<Item = i64>,
    ) -> Result<HashMap<i64, Option<Duration>>> {
        let mut ids: Vec<i64> = ids.into_iter().filter(|&id| id != 0).collect();
        ids.sort_unstable();
        ids.dedup();
        let answers =
            futures::future::join_all(ids.iter().map(|&id| self.time_left(site, id))).await;
        ids.into_iter()
            .zip(answers)
            .map(|(id, a)| a.map(|a| (id, a)))
            .collect()
    }

    /// The key-values of a listing that hang on a live etcd lease, each with the time left on
    /// it, in the listing's order.
    ///
    /// A listing reads the keys, then asks about their etcd leases: between the two a key can
    /// move onto another etcd lease (a heartbeat, a renewal onto a longer lease, a new partition
    /// session) and the lease it was read on be revoked. "Gone" for the lease read then says
    /// nothing about the key, which is live on its new lease. So a key whose lease answered
    /// gone is read again, linearizably: absent, or still on that lease (etcd is deleting it
    /// with its lease), it is left out; on another lease, that lease is asked about, and so on,
    /// at most [`MOVED_TRIES`] times before a temporary error (never a listing without a live
    /// key).
    pub(crate) async fn live(
        &self,
        site: Site<'_>,
        kvs: Vec<KeyValue>,
    ) -> Result<Vec<(KeyValue, Duration)>> {
        let left = self
            .times_left(site, kvs.iter().map(KeyValue::lease))
            .await?;
        let mut out = Vec::with_capacity(kvs.len());
        for kv in kvs {
            match left.get(&kv.lease()).copied().flatten() {
                Some(time) => out.push((kv, time)),
                None if kv.lease() == 0 => {}
                None => {
                    if let Some(moved) = self.followed(site, &kv).await? {
                        out.push(moved);
                    }
                }
            }
        }
        Ok(out)
    }

    /// A key read on an etcd lease that answered gone, followed onto the leases it moved to
    /// ([`live`](Self::live)).
    pub(crate) async fn followed(
        &self,
        site: Site<'_>,
        kv: &KeyValue,
    ) -> Result<Option<(KeyValue, Duration)>> {
        let mut gone = kv.lease();
        for _ in 0..MOVED_TRIES {
            let Some(now) = self.get_key(site, kv.key()).await? else {
                return Ok(None);
            };
            if now.lease() == gone || now.lease() == 0 {
                return Ok(None);
            }
            match self.time_left(site, now.lease()).await? {
                Some(time) => return Ok(Some((now, time))),
                None => gone = now.lease(),
            }
        }
        Err(site.moving(kv.key(), MOVED_TRIES))
    }

    /// The key-value at `key`, by a linearizable read.
    pub(crate) async fn get_key(&self, site: Site<'_>, key: &[u8]) -> Result<Option<KeyValue>> {
        let mut kv = self.inner.client.kv_client();
        let mut resp = self.bounded(site, kv.get(key.to_vec(), None)).await?;
        Ok(resp.take_kvs().into_iter().next())
    }

    /// Every key-value under `prefix`, by key, by a linearizable read.
    pub(crate) async fn range(&self, site: Site<'_>, prefix: &[u8]) -> Result<Vec<KeyValue>> {
        let mut kv = self.inner.client.kv_client();
        let mut resp = self
            .bounded(
                site,
                kv.get(prefix.to_vec(), Some(GetOptions::new().with_prefix())),
            )
            .await?;
        Ok(resp.take_kvs())
    }

    /// The keys (no values) from `start` up to `end` (excluded), by key, at most `limit`, by a
    /// linearizable read.
    pub(crate) async fn range_keys(
        &self,
        site: Site<'_>,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<Vec<u8>>> {
        let mut kv = self.inner.client.kv_client();
        let options = GetOptions::new()
            .with_range(end.to_vec())
            .with_keys_only()
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        let mut resp = self
            .bounded(site, kv.get(start.to_vec(), Some(options)))
            .await?;
        Ok(resp
            .take_kvs()
            .into_iter()
            .map(|kv| kv.key().to_vec())
            .collect())
    }

    /// One transaction.
    pub(crate) async fn txn(&self, site: Site<'_>, txn: Txn) -> Result<TxnResponse> {
        let mut kv = self.inner.client.kv_client();
        self.bounded(site, kv.txn(txn)).await
    }

    /// One transaction, and the error as etcd gave it when it failed (to tell a lease that
    /// vanished from other failures).
    pub(crate) async fn txn_raw(
        &self,
        site: Site<'_>,
        txn: Txn,
    ) -> Result<std::result::Result<TxnResponse, etcd_client::Error>> {
        let mut kv = self.inner.client.kv_client();
        match tokio::time::timeout(self.inner.op_timeout, kv.txn(txn)).await {
            Ok(answer) => Ok(answer),
            Err(_) => Err(site.timed_out(self.inner.op_timeout)),
        }
    }
}

/// What [`EtcdStore::move_live`] did.
#[derive(Debug)]
pub(crate) enum Move {
    /// The key hangs on the new etcd lease now, its create revision kept.
    Moved,
    /// The key no longer hung on the old etcd lease, or a compare failed: nothing was written.
    Changed,
    /// The move could not be shown to have landed while the old etcd lease was live: it was
    /// taken back (the key deleted, when it was still as the move left it).
    Lapsed,
    /// The new etcd lease was gone (expired or revoked): nothing was written. etcd's refusal.
    TargetGone(etcd_client::Error),
}

impl EtcdStore {
    /// Moves `key` from etcd lease `from` onto etcd lease `to`, keeping the key and so its
    /// create revision (a term, an epoch), when `compares` and `lease(key) == from` hold.
    ///
    /// A key on an etcd lease whose TTL ran out stays until etcd's expiry sweep revokes that
    /// lease (up to about 500 ms, longer on a busy server), and a transaction's compares cannot
    /// tell: moving such a key would carry a lapsed term or epoch over the lapse. So the move
    /// counts only when it can be shown to have landed while `from` was live: `live` is a
    /// keep-alive of `from` that etcd accepted (it refuses one of an expired lease, even before
    /// the sweep) — the stamp taken before it was sent and the TTL it gave — and the move's
    /// answer must arrive within that TTL of the stamp. When it does not, the move is taken
    /// back: the key is deleted if it is still as the move left it, and the caller answers as
    /// for a lapse.
    pub(crate) async fn move_live(
        &self,
        site: Site<'_>,
        key: &[u8],
        compares: Vec<etcd_client::Compare>,
        from: i64,
        live: (Stamp, Duration),
        to: i64,
    ) -> Result<Move> {
        use etcd_client::{Compare, CompareOp, PutOptions, TxnOp};
        let mut when = compares;
        when.push(Compare::lease(key.to_vec(), CompareOp::Equal, from));
        let txn = Txn::new().when(when).and_then([TxnOp::put(
            key.to_vec(),
            Vec::new(),
            Some(PutOptions::new().with_ignore_value().with_lease(to)),
        )]);
        let resp = match self.txn_raw(site, txn).await? {
            Ok(resp) => resp,
            Err(e) if lease_not_found(&e) => return Ok(Move::TargetGone(e)),
            Err(e) => return Err(site.etcd(e)),
        };
        if !resp.succeeded() {
            return Ok(Move::Changed);
        }
        let (proved, ttl) = live;
        if !proved.remaining(ttl).is_zero() {
            return Ok(Move::Moved);
        }
        // Maybe moved after `from` ran out: take it back (the move's revision is the key's
        // mod revision while nothing else changed it).
        let moved_at = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| site.malformed("a header"))?;
        self.txn(
            site,
            Txn::new()
                .when([Compare::mod_revision(
                    key.to_vec(),
                    CompareOp::Equal,
                    moved_at,
                )])
                .and_then([TxnOp::delete(key.to_vec(), None)]),
        )
        .await?;
        Ok(Move::Lapsed)
    }
}

/// The revision an answer was made at: for a transaction that created a key, the key's create
/// revision.
pub(crate) fn revision(site: Site<'_>, resp: &TxnResponse) -> Result<u64> {
    resp.header()
        .and_then(|h| u64::try_from(h.revision()).ok())
        .filter(|&r| r > 0)
        .ok_or_else(|| site.malformed("a revision"))
}

/// The time left on an etcd lease from etcd's whole seconds (`floor`, asked `since_ask` ago)
/// and its TTL as granted (`granted`), first seen put on `since_put` ago (see
/// [`EtcdStore::time_left_of`]): the grant's bound when it lies within etcd's second, else
/// `floor`.
fn refined(
    floor: Duration,
    granted: Duration,
    since_ask: Duration,
    since_put: Duration,
) -> Duration {
    let from_put = granted.saturating_sub(since_put);
    // Expiry by etcd: at least `floor` after the ask. Expiry by the grant: at most `granted`
    // after the put. The first past the second means a keep-alive moved the expiry since.
    let moved = floor.saturating_add(since_put) > granted.saturating_add(since_ask);
    if moved || granted.is_zero() {
        return floor;
    }
    from_put.min(floor.saturating_add(Duration::from_secs(1)))
}

/// One keep-alive exchange on an open stream: the TTL, or `None` for a lease gone.
async fn exchange(k: &mut Keeper) -> std::result::Result<Option<Duration>, etcd_client::Error> {
    k.keeper.keep_alive().await?;
    match k.stream.message().await? {
        Some(resp) if resp.ttl() > 0 => Ok(Some(seconds(resp.ttl()))),
        Some(_) => Ok(None),
        None => Err(etcd_client::Error::LeaseKeepAliveError(
            "the keep-alive stream ended".to_owned(),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        assert_eq!(server_seconds(Duration::from_millis(1)), 1);
        assert_eq!(server_seconds(Duration::from_millis(1000)), 1);
        assert_eq!(server_seconds(Duration::from_millis(1001)), 2);
        assert_eq!(server_seconds(Duration::from_secs(15)), 15);
    }

    #[test]
    fn the_grant_bounds_etcd_whole_seconds_when_consistent() {
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        // Granted 3 s, put seen 2.2 s ago, etcd said 0 s (0.8 s left by the grant).
        assert_eq!(refined(s(0), s(3), ms(5), ms(2200)), ms(800));
        // The grant's bound never exceeds etcd's second.
        assert_eq!(refined(s(1), s(3), ms(5), ms(100)), s(2));
        // A keep-alive moved the expiry past the grant's bound: etcd's whole seconds.
        assert_eq!(refined(s(2), s(3), ms(5), ms(2000)), s(2));
        // No TTL as granted: etcd's whole seconds.
        assert_eq!(refined(s(1), s(0), ms(5), ms(100)), s(1));
    }

    #[test]
    fn urls_name_endpoints() {
        assert_eq!(endpoints("etcd://a:2379").unwrap(), ["http://a:2379"]);
        assert_eq!(
            endpoints("etcd://a:1,b:2").unwrap(),
            ["http://a:1", "http://b:2"]
        );
        assert_eq!(endpoints("http://a:1,http://b:2").unwrap().len(), 2);
        assert_eq!(endpoints("a:1").unwrap(), ["http://a:1"]);
        for bad in [
            "etcd://",
            "etcd://a:1/x",
            "https://a:1",
            "redis://a",
            "etcd://u@a:1",
        ] {
            let e = endpoints(bad).unwrap_err();
            assert!(e.message().contains("etcd"), "{bad}: {e}");
        }
    }
}
