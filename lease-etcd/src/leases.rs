//! [`LeaseStore`] on etcd: one key per name, hung on an etcd lease granted for each claim.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, DeleteOptions, KeyValue, PutOptions, Txn, TxnOp};
use lease_core::backend::{
    Grant, HolderToken, async_trait, check, clock::Stamp, partitions::BatchRenew,
};
use lease_core::layer::Operation;
use lease_core::{
    LeaseStore, Result,
    backend::{
        Capabilities, LeaseInfo, membership::MembershipStore, partitions::PartitionStore,
        permits::PermitStore,
    },
};

use crate::error::{Site, lease_not_found};
use crate::known_leases::Held;
use crate::store::{EtcdStore, Move, lock, revision};
use crate::wire::codec::LeaseValue;
use crate::wire::keys;

/// How many etcd leases a claim grants at most when each ends before the transaction hanging
/// the key on it lands (etcd refuses the transaction whole: "requested lease not found"); then
/// it answers a temporary error.
pub(crate) const GONE_TRIES: usize = 3;

/// `true` when the lease record at `kv` names `holder` (a value this store did not write names
/// nobody).
pub(crate) fn held_by(kv: &KeyValue, holder: &HolderToken) -> bool {
    LeaseValue::decode(kv.value()).is_some_and(|v| v.holder == *holder)
}

/// The create revision of a key as a term.
pub(crate) fn term_of(kv: &KeyValue) -> u64 {
    u64::try_from(kv.create_revision()).unwrap_or(0)
}

impl EtcdStore {
    /// The time left on the holding at `kv`, held by `holder`, for a read-back of it: its etcd
    /// lease's, or, when that lease is gone because the key moved onto another meanwhile
    /// ([`EtcdStore::live`]), the new lease's — if the key still holds the same holding
    /// (`holder`'s, the same term). `None`: the holding is gone.
    pub(crate) async fn held_time_left(
        &self,
        site: Site<'_>,
        kv: &KeyValue,
        holder: &HolderToken,
    ) -> Result<Option<Duration>> {
        if let Some(left) = self.time_left(site, kv.lease()).await? {
            return Ok(Some(left));
        }
        Ok(self
            .followed(site, kv)
            .await?
            .filter(|(now, _)| {
                held_by(now, holder) && now.create_revision() == kv.create_revision()
            })
            .map(|(_, left)| left))
    }

    pub(crate) fn key(&self, name: &str) -> Vec<u8> {
        keys::lease(&self.inner.prefix, name)
    }

    /// The lease record in `kv`; an error for a value this store did not write.
    fn decode(site: Site<'_>, kv: &KeyValue) -> Result<LeaseValue> {
        LeaseValue::decode(kv.value()).ok_or_else(|| site.foreign_value(kv.key()))
    }

    /// When the etcd lease `lease` (renewed for `granted` by a keep-alive sent after `sent`)
    /// is shorter than `ttl`, moves the key to a new etcd lease of `ttl` (the key and its
    /// create revision stay: the term is kept), if it still hangs on `lease` and the move
    /// lands while `lease` is live ([`move_live`](EtcdStore::move_live): an expired lease is
    /// never revived through a move, even before etcd's sweep deleted its key). Answers the
    /// lease the key hangs on, the TTL it counts and the stamp taken before that TTL started;
    /// `None` when the key moved on or lapsed.
    pub(crate) async fn fit(
        &self,
        site: Site<'_>,
        key: &[u8],
        lease: i64,
        granted: Duration,
        sent: Stamp,
        ttl: Duration,
    ) -> Result<Option<(i64, Duration, Stamp)>> {
        if granted >= ttl {
            return Ok(Some((lease, granted, sent)));
        }
        let since = Stamp::now();
        let (longer, longer_granted) = self.grant(site, ttl).await?;
        match self
            .move_live(site, key, Vec::new(), lease, (sent, granted), longer)
            .await?
        {
            Move::Moved => {
                self.revoke_later(lease);
                Ok(Some((longer, longer_granted, since)))
            }
            Move::Changed => {
                self.revoke_later(longer);
                Ok(None)
            }
            Move::Lapsed => {
                self.revoke_later(longer);
                self.revoke_later(lease);
                Ok(None)
            }
            // The new etcd lease ended before the move landed (nothing was written): a
            // temporary error, the renewal is tried again.
            Move::TargetGone(e) => Err(site.etcd(e)),
        }
    }
}

/// How many permit keys one read of a listing of names takes.
const PERMIT_KEYS_PER_READ: usize = 1000;

#[async_trait]
impl LeaseStore for EtcdStore {
    fn backend(&self) -> &'static str {
        "etcd"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // etcd counts a lease's TTL in whole seconds but rounds it up and expires it in a
            // sweep: never before the TTL asked for, so the default clock granularity.
            // The term is the key's create revision: the cluster's revision at the claim.
            consecutive_terms: false,
            // etcd deletes the key when its lease ends.
            keeps_ended_records: false,
            force_release: true,
            list_names: true,
            // A key per permit (see `permits.rs`).
            // A range read of the group, then the keep-alives of the owner's etcd leases it
            // found (sent with the read when this store renewed the group before): at most two
            // exchanges one after the other, plus at most one that HTTP/2's control frames
            // (gRPC's PING acknowledgements, window updates) add on the wire.
            batch_renew: BatchRenew::Fixed { round_trips: 3 },
            // A watch on the prefix (see `hints.rs`).
            watch: true,
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

    async fn available(&self) -> Result<()> {
        self.check(Some(Operation::Available)).await
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::claim(self, name, instance, ttl)?;
        let site = self.site(Operation::Claim, name);
        let key = self.key(name);
        let mut tries = 0;
        loop {
            let sent = Stamp::now();
            let (lease, granted) = self.grant(site, ttl).await?;
            let bound = ttl.min(granted);
            // Remembered before the transaction is sent, so that a verify after an unknown
            // outcome counts the time left from before the etcd lease started.
            lock(&self.inner.known).insert(
                name,
                holder,
                Held {
                    lease,
                    term: 0,
                    bound,
                    since: sent,
                },
            );
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    LeaseValue::encode(holder, instance),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let resp = match self.txn_raw(site, txn).await? {
                Ok(resp) => resp,
                // The etcd lease ended before the transaction landed (etcd refused it whole,
                // nothing was written): claim again on a new one.
                Err(e) if lease_not_found(&e) => {
                    lock(&self.inner.known).remove(name, holder, Some(lease));
                    tries += 1;
                    if tries < GONE_TRIES {
                        continue;
                    }
                    return Err(site.etcd(e));
                }
                Err(e) => return Err(site.etcd(e)),
            };
            if !resp.succeeded() {
                lock(&self.inner.known).remove(name, holder, Some(lease));
                self.revoke_later(lease);
                return Ok(None);
            }
            let term = revision(site, &resp)?;
            lock(&self.inner.known).insert(
                name,
                holder,
                Held {
                    lease,
                    term,
                    bound,
                    since: sent,
                },
            );
            return Ok(Some(Grant {
                term,
                expires_in: sent.remaining(bound),
            }));
        }
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::renew(self, name, ttl)?;
        let site = self.site(Operation::Renew, name);
        let key = self.key(name);
        let known = lock(&self.inner.known).get(name, holder);
        let sent = Stamp::now();
        let renewed = match known {
            // This store's own claim: the keep-alive and the check that the key still hangs on
            // the lease go out together.
            Some(held) if held.term > 0 => {
                let (alive, kv) =
                    tokio::join!(self.keep_alive(site, held.lease), self.get_key(site, &key));
                let ours = kv?.is_some_and(|kv| kv.lease() == held.lease);
                match alive? {
                    Some(granted) if ours => Some((held.lease, held.term, granted)),
                    _ => None,
                }
            }
            // Someone else's claim under this holder token (or an unknown outcome): read the
            // key first, then keep its etcd lease alive.
            _ => match self.get_key(site, &key).await? {
                Some(kv) if kv.lease() != 0 && held_by(&kv, holder) => self
                    .keep_alive(site, kv.lease())
                    .await?
                    .map(|granted| (kv.lease(), term_of(&kv), granted)),
                _ => None,
            },
        };
        let Some((lease, term, granted)) = renewed else {
            lock(&self.inner.known).remove(name, holder, None);
            return Ok(None);
        };
        let Some((lease, granted, since)) = self.fit(site, &key, lease, granted, sent, ttl).await?
        else {
            lock(&self.inner.known).remove(name, holder, None);
            return Ok(None);
        };
        let bound = ttl.min(granted);
        lock(&self.inner.known).insert(
            name,
            holder,
            Held {
                lease,
                term,
                bound,
                since,
            },
        );
        Ok(Some(Grant {
            term,
            expires_in: since.remaining(bound),
        }))
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        check::name(self, name)?;
        let site = self.site(Operation::Release, name);
        let key = self.key(name);
        let known = lock(&self.inner.known).get(name, holder);
        let (lease, compare) = match known {
            // The etcd lease was granted for this claim alone: the key hangs on it only while
            // the claim lives.
            Some(held) if held.term > 0 => (
                held.lease,
                Compare::lease(key.clone(), CompareOp::Equal, held.lease),
            ),
            _ => match self.get_key(site, &key).await? {
                Some(kv) if held_by(&kv, holder) => (
                    kv.lease(),
                    Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision()),
                ),
                _ => {
                    lock(&self.inner.known).remove(name, holder, None);
                    return Ok(false);
                }
            },
        };
        let resp = self
            .txn(
                site,
                Txn::new()
                    .when([compare])
                    .and_then([TxnOp::delete(key, None)]),
            )
            .await?;
        lock(&self.inner.known).remove(name, holder, None);
        if resp.succeeded() && lease != 0 {
            self.revoke_later(lease);
        }
        Ok(resp.succeeded())
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        check::name(self, name)?;
        let site = self.site(Operation::Verify, name);
        let Some(kv) = self.get_key(site, &self.key(name)).await? else {
            lock(&self.inner.known).remove(name, holder, None);
            return Ok(None);
        };
        if !held_by(&kv, holder) {
            lock(&self.inner.known).remove(name, holder, None);
            return Ok(None);
        }
        let term = term_of(&kv);
        let known = lock(&self.inner.known)
            .get(name, holder)
            .filter(|h| h.lease == kv.lease());
        let expires_in = match known {
            Some(held) => {
                // An unknown claim read back: its term is known now.
                lock(&self.inner.known).insert(name, holder, Held { term, ..held });
                held.since.remaining(held.bound)
            }
            None => match self.held_time_left(site, &kv, holder).await? {
                Some(left) => left,
                None => return Ok(None),
            },
        };
        Ok(Some(Grant { term, expires_in }))
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        check::name(self, name)?;
        let site = self.site(Operation::Get, name);
        let Some(kv) = self.get_key(site, &self.key(name)).await? else {
            return Ok(None);
        };
        let known = lock(&self.inner.known).by_lease(name, kv.lease());
        let (kv, left) = match known {
            Some(held) => (kv, Some(held.since.remaining(held.bound))),
            None => match self.time_left_of(site, kv.lease()).await? {
                Some(left) => (kv, Some(left)),
                // Gone, or the key moved onto another etcd lease since it was read.
                None => match self.followed(site, &kv).await? {
                    Some((now, left)) => (now, Some(left)),
                    None => (kv, None),
                },
            },
        };
        let value = Self::decode(site, &kv)?;
        Ok(Some(LeaseInfo {
            name: name.to_owned(),
            instance: value.instance,
            term: term_of(&kv),
            live: left.is_some(),
            expires_in: left.unwrap_or_default(),
        }))
    }

    /// Range reads of the key space, never a pattern: the lease keys from `<prefix>l/<name
    /// prefix>` to its range end (one read of at most `limit + 1` keys), and the permit keys from
    /// `<prefix>c/<name prefix>` the same way, 1,000 keys per read, each read starting past the
    /// last counted name seen (`<name>\x01`: its permit keys end with `\0` and digits). Keys are
    /// the names' bytes, so the range is exactly the names under the prefix, in byte order, and
    /// no character of the prefix is special. A key is there while its etcd lease lives (and
    /// until etcd's sweep removes it once expired): held names show, released ones do not.
    async fn names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<lease_core::backend::names::NamePage> {
        use lease_core::backend::names::{NamePage, counted_name, lease_name};
        check::names(self, prefix, after, limit)?;
        let site = self.site(Operation::Names, prefix);
        let store_prefix = &self.inner.prefix;
        // From the prefix, or from past `after` (`trailer`: the least byte past a name's keys).
        let bounds = |space: Vec<u8>, trailer: u8| {
            let mut from = space.clone();
            from.extend_from_slice(prefix.as_bytes());
            let end = keys::range_end(&from);
            if let Some(after) = after {
                let mut past = space;
                past.extend_from_slice(after.as_bytes());
                past.push(trailer);
                from = from.max(past);
            }
            (from, end)
        };
        let space = keys::lease_space(store_prefix);
        let (from, end) = bounds(space.clone(), 0);
        let lease_keys = self.range_keys(site, &from, &end, limit + 1).await?;
        let mut found: Vec<_> = lease_keys
            .iter()
            .filter_map(|k| k.strip_prefix(space.as_slice()))
            .filter_map(|n| String::from_utf8(n.to_vec()).ok())
            .map(lease_name)
            .collect();
        let space = keys::permit_space(store_prefix);
        let (mut from, end) = bounds(space.clone(), 1);
        let mut counted = 0;
        loop {
            let page = self
                .range_keys(site, &from, &end, PERMIT_KEYS_PER_READ)
                .await?;
            let mut last = None;
            for key in &page {
                let Some(name) = key
                    .strip_prefix(space.as_slice())
                    .and_then(keys::counted_of)
                else {
                    continue;
                };
                if last.as_ref() != Some(&name) {
                    counted += 1;
                    last = Some(name.clone());
                    found.push(counted_name(name));
                }
            }
            let Some(last) = last else { break };
            if page.len() < PERMIT_KEYS_PER_READ || counted > limit {
                break;
            }
            from = space.clone();
            from.extend_from_slice(last.as_bytes());
            from.push(1);
        }
        Ok(NamePage::from_found(found, limit))
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        check::name(self, name)?;
        let site = self.site(Operation::ForceRelease, name);
        let mut kv = self.inner.client.kv_client();
        let mut resp = self
            .bounded(
                site,
                kv.delete(self.key(name), Some(DeleteOptions::new().with_prev_key())),
            )
            .await?;
        lock(&self.inner.known).remove_name(name);
        let Some(prev) = resp.take_prev_kvs().into_iter().next() else {
            return Ok(false);
        };
        // Revoked at once, so the holder's next keep-alive fails.
        if prev.lease() != 0 {
            self.revoke(site, prev.lease()).await?;
        }
        Ok(true)
    }

    /// Hints from a watch on the store's prefix (see the crate docs, *Hints*): claims, releases
    /// and expiries by any process.
    fn changes(
        &self,
        topic: &lease_core::backend::notify::Topic,
    ) -> Option<lease_core::backend::notify::Wakeups> {
        Some(self.watch(topic))
    }
}
