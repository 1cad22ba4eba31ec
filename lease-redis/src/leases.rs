//! [`LeaseStore`] on Redis: one Lua script per operation (`claim.lua`, `renew.lua`, …), and
//! the clean-up of records no longer used ([`RedisStore::forget`],
//! [`RedisStore::purge_expired`]).

use std::time::Duration;

use lease_core::backend::names::{self, ListedName, NamePage};
use lease_core::backend::notify::{Topic, Wakeups};
use lease_core::backend::{Grant, HolderToken, RenewItem, async_trait, ceil_millis, check};
use lease_core::layer::Operation;
use lease_core::{
    LeaseStore, Result,
    backend::{
        Capabilities, LeaseInfo, LeaseStoreExt, membership::MembershipStore,
        partitions::PartitionStore, permits::PermitStore, slots::SlotStore,
    },
};
use redis::aio::ConnectionLike;

use crate::config::TermScheme;
use crate::error::During;
use crate::store::{MAX_NAME_BYTES, RedisStore};
use crate::wire::codec::{HolderHex, grant};
use crate::wire::keys::{
    listed_name, name_of, names_pattern, record_key, scan_pattern, waiting_key,
};
use crate::wire::scripts::SCRIPTS;

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
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
        let what = format!("forget of lease '{name}'");
        let n: i64 = self
            .eval(
                During::Task(&what),
                &SCRIPTS.forget,
                key.as_bytes(),
                &[&idle],
            )
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
                .bounded(During::Task("purge (SCAN)"), async {
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
                let what = format!("purge of lease '{name}'");
                let n: i64 = self
                    .eval(During::Task(&what), &SCRIPTS.forget, &key, &[&idle])
                    .await?;
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
}

/// How many keys one `SCAN` of a listing of names asks the server to look at.
const SCAN_COUNT: u32 = 1000;

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// `Unsupported` on a Redis Cluster node (`INFO cluster` says `cluster_enabled:1`), where a
    /// `SCAN` sees one node's keys only; asked once per store, and again after a failed ask.
    async fn refuse_cluster(&self, prefix: &str) -> Result<()> {
        let cluster = self
            .inner
            .cluster
            .get_or_try_init(|| async {
                let info: redis::Value = self
                    .bounded(During::Op(Operation::Names, prefix), async {
                        let mut conn = self.conn.clone();
                        redis::cmd("INFO")
                            .arg("cluster")
                            .query_async(&mut conn)
                            .await
                    })
                    .await?;
                Ok::<bool, lease_core::Error>(says_cluster(&info))
            })
            .await?;
        if *cluster {
            return Err(lease_core::Error::unsupported(format!(
                "{} is a Redis Cluster node: listing names walks the keys with SCAN, which sees \
                 one node only, so it is refused rather than answered partly; name the leases \
                 instead",
                self.inner.server
            ))
            .during(Operation::Names, prefix));
        }
        Ok(())
    }
}

/// Whether an `INFO cluster` answer (one text, or one per node) says cluster mode is on.
fn says_cluster(info: &redis::Value) -> bool {
    match info {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes)
            .lines()
            .any(|l| l.trim() == "cluster_enabled:1"),
        redis::Value::VerbatimString { text, .. } | redis::Value::SimpleString(text) => {
            text.lines().any(|l| l.trim() == "cluster_enabled:1")
        }
        redis::Value::Array(items) | redis::Value::Set(items) => items.iter().any(says_cluster),
        redis::Value::Map(pairs) => pairs.iter().any(|(_, v)| says_cluster(v)),
        _ => false,
    }
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
            // Records are kept (never evicted: `available()` checks the eviction policy).
            keeps_ended_records: true,
            // Expiries in the server's milliseconds: the default clock granularity.
            force_release: true,
            list_names: true,
            // Hints cover other processes only with a subscriber connection.
            watch: self.listens(),
            max_name_bytes: MAX_NAME_BYTES,
            // Up to 10,000 names in one pipeline of `renew_many.lua` calls (renewals.rs).
            renew_many: true,
            ..lease_core::backend::derived_capabilities(self)
        }
    }

    fn permit_store(&self) -> Option<&dyn PermitStore> {
        Some(self)
    }

    fn partition_store(&self) -> Option<&dyn PartitionStore> {
        Some(self)
    }

    fn membership_store(&self) -> Option<&dyn MembershipStore> {
        Some(self)
    }

    fn slot_store(&self) -> Option<&dyn SlotStore> {
        Some(self)
    }

    /// Checks, in a few round trips: the server answers `TIME`; every script loads (`SCRIPT
    /// LOAD`, which also warms the script cache so the first operations take one round trip);
    /// and the server keeps records across a restart and a host crash (`CONFIG GET appendonly`
    /// is `yes` and `appendfsync` is `always`) and never evicts them (`maxmemory-policy` is not
    /// `allkeys-*`). It also publishes once on the hint channel: a user who may not publish
    /// gets a warning, once, and hints that say they are disconnected (see the crate
    /// documentation, *Hints*), and the check goes on. The store runs this check itself before
    /// its first claim (see [`RedisStore::with_client`]); a passed explicit call spares that.
    ///
    /// When a durability check fails or cannot be made (CONFIG disabled or renamed, as on many
    /// managed services), it fails with `Unsupported`, saying why, unless
    /// [`RedisConfig::allow_volatile`](crate::RedisConfig::allow_volatile) is set (then it logs a
    /// warning), or the only risk is `appendfsync everysec` and
    /// [`RedisConfig::allow_fsync_everysec`](crate::RedisConfig::allow_fsync_everysec) is set (a
    /// warning too), or the term scheme is [`TermScheme::ClockFloor`] (then it logs at info level:
    /// terms and partition epochs still grow after a loss, within the limits that scheme
    /// documents). The same checks cover the partition and membership keys: they live on the same
    /// server under the same prefix.
    async fn available(&self) -> Result<()> {
        self.check_available().await
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::claim(self, name, instance, ttl)?;
        let during = During::Op(Operation::Claim, name);
        let on = self.started(during).await?;
        let key = record_key(self.config().get_key_prefix(), name);
        let mark = waiting_key(self.config().get_key_prefix(), name);
        let holder = HolderHex::new(holder);
        let ttl = ceil_millis(ttl);
        let flag = self.config().get_term_scheme().script_flag();
        let reply: Option<(u64, u64)> = on
            .eval_with(
                during,
                &SCRIPTS.claim,
                &[key.as_bytes(), mark.as_bytes()],
                4,
                32 + instance.len() + 20 + 1,
                |cmd| {
                    cmd.arg(holder.as_bytes()).arg(instance).arg(ttl).arg(flag);
                },
            )
            .await?;
        if reply.is_some() {
            self.changed(&Topic::lease(name));
        }
        Ok(reply.map(grant))
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::renew(self, name, ttl)?;
        let key = record_key(self.config().get_key_prefix(), name);
        let holder = HolderHex::new(holder);
        let ttl = ceil_millis(ttl);
        let reply: Option<(u64, u64)> = self
            .eval_with(
                During::Op(Operation::Renew, name),
                &SCRIPTS.renew,
                &[key.as_bytes()],
                2,
                32 + 20,
                |cmd| {
                    cmd.arg(holder.as_bytes()).arg(ttl);
                },
            )
            .await?;
        Ok(reply.map(grant))
    }

    /// Every name checked exactly as [`renew`](LeaseStore::renew) checks one, in calls of
    /// `renew_many.lua` of at most 1,000 names each, all in **one pipeline: one round trip**
    /// for up to 10,000 names (two when the server had not cached the script). Each call is
    /// atomic and reads the server's clock once; each name gets its own answer, and a lost name
    /// ends exactly that lease. With
    /// [`replica_acks`](crate::RedisConfig::replica_acks) the pipeline ends with `PUBLISH` and
    /// `WAIT`; too few acknowledgements turn every renewal into an error (its outcome is unknown
    /// to a failover). On Redis Cluster, which refuses a call over many hash slots, the names
    /// are renewed one by one, concurrently. No I/O for an empty list.
    async fn renew_many(
        &self,
        items: &[RenewItem<'_>],
        ttl: Duration,
    ) -> Result<Vec<Result<Option<Grant>>>> {
        self.renew_batch(items, ttl).await
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        check::name(self, name)?;
        let key = record_key(self.config().get_key_prefix(), name);
        let mark = waiting_key(self.config().get_key_prefix(), name);
        let holder = HolderHex::new(holder);
        let n: i64 = self
            .eval_with(
                During::Op(Operation::Release, name),
                &SCRIPTS.release,
                &[key.as_bytes(), mark.as_bytes()],
                1,
                32,
                |cmd| {
                    cmd.arg(holder.as_bytes());
                },
            )
            .await?;
        if n == 1 {
            self.changed(&Topic::lease(name));
        }
        Ok(n == 1)
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        check::name(self, name)?;
        let key = record_key(self.config().get_key_prefix(), name);
        let holder = HolderHex::new(holder);
        let reply: Option<(u64, u64)> = self
            .eval_with(
                During::Op(Operation::Verify, name),
                &SCRIPTS.verify,
                &[key.as_bytes()],
                1,
                32,
                |cmd| {
                    cmd.arg(holder.as_bytes());
                },
            )
            .await?;
        Ok(reply.map(grant))
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        check::name(self, name)?;
        let key = record_key(self.config().get_key_prefix(), name);
        let reply: Option<(String, u64, i64, u64)> = self
            .eval(
                During::Op(Operation::Get, name),
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
        check::name(self, name)?;
        let key = record_key(self.config().get_key_prefix(), name);
        let mark = waiting_key(self.config().get_key_prefix(), name);
        let n: i64 = self
            .eval_keys(
                During::Op(Operation::ForceRelease, name),
                &SCRIPTS.force_release,
                &[key.as_bytes(), mark.as_bytes()],
                &[],
            )
            .await?;
        if n == 1 {
            self.changed(&Topic::lease(name));
        }
        Ok(n == 1)
    }

    /// `SCAN … MATCH <key prefix>{<escaped name prefix>*` (never `KEYS`, which blocks the server
    /// for the whole keyspace), both prefixes glob-escaped (see `wire::keys::names_pattern`), over
    /// the whole keyspace: Redis keeps no order, so the page is the least `limit` names found,
    /// kept in a bounded set while the walk goes on (one round trip per 1,000 keys looked at).
    /// Lease records and counted names' permit hashes are listed; partition and member keys are
    /// not. A record stays until [`forget`](RedisStore::forget) or
    /// [`purge_expired`](RedisStore::purge_expired) deletes it, so released and expired leases
    /// show.
    ///
    /// On Redis Cluster, where one connection's `SCAN` walks one node only, the listing is
    /// refused with `Unsupported` (the store asks `INFO cluster` once) rather than answered from
    /// one node's keys.
    async fn names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<lease_core::backend::names::NamePage> {
        check::names(self, prefix, after, limit)?;
        self.refuse_cluster(prefix).await?;
        let key_prefix = self.config().get_key_prefix();
        let pattern = names_pattern(key_prefix, prefix);
        let mut kept: std::collections::BTreeMap<String, ListedName> = Default::default();
        let mut cursor: u64 = 0;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let (next, keys): (u64, Vec<Vec<u8>>) = self
                .bounded(During::Op(Operation::Names, prefix), async {
                    let mut conn = self.conn.clone();
                    scan.query_async(&mut conn).await
                })
                .await?;
            for key in keys {
                let Some((name, counted)) = std::str::from_utf8(&key)
                    .ok()
                    .and_then(|k| listed_name(key_prefix, k))
                else {
                    continue;
                };
                if !names::in_range(&name, prefix, after) {
                    continue;
                }
                let entry = kept.entry(name.clone()).or_insert(ListedName {
                    name,
                    lease: false,
                    counted: false,
                });
                entry.lease |= !counted;
                entry.counted |= counted;
                // The least `limit + 1` names are all a page needs.
                if kept.len() > limit.saturating_add(1) {
                    kept.pop_last();
                }
            }
            if next == 0 {
                return Ok(NamePage::from_found(kept.into_values(), limit));
            }
            cursor = next;
        }
    }

    /// Hints for `topic` (see the crate documentation, *Hints*): from every process while the
    /// store's subscriber connection is up, from this store's own operations otherwise (then
    /// [`Wakeups::is_connected`] is `false`).
    fn changes(&self, topic: &Topic) -> Option<Wakeups> {
        Some(self.wakeups(topic))
    }
}
