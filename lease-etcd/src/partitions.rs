//! [`PartitionStore`] on etcd: one key per `(group, partition)`, hung on its owner's etcd lease.
//!
//! Each owner (one process incarnation) gets one etcd lease per TTL from a store, its
//! *session* (as etcd's own `concurrency.Session`): every partition key it acquires hangs on
//! it, so a batch renewal is one keep-alive, however many partitions, and a crashed owner's
//! partitions all end together when etcd expires the session.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse};
use futures::future::join_all;
use lease_core::backend::check::Batch;
use lease_core::backend::{async_trait, check, clock::Stamp};
use lease_core::layer::Operation;
use lease_core::{
    Error, Result,
    backend::partitions::{PartitionLease, PartitionStore},
};

use crate::error::{Site, lease_not_found};
use crate::leases::term_of;
use crate::store::{EtcdStore, Move, lock, revision, server_seconds};
use crate::wire::codec::{decode_part, encode_part};
use crate::wire::keys;

/// How often an acquisition looks again when the key or the session changed under it.
const MAX_TRIES: usize = 3;

impl EtcdStore {
    /// `owner`'s session for `ttl`: its etcd lease, and the TTL granted when this call granted
    /// it (then it needs no keep-alive now: its TTL started after the caller's stamp).
    async fn session(
        &self,
        site: Site<'_>,
        owner: &str,
        ttl: Duration,
    ) -> Result<(i64, Option<Duration>)> {
        let key = (owner.to_owned(), server_seconds(ttl));
        let mut map = self.inner.sessions.map.lock().await;
        if let Some(&lease) = map.get(&key) {
            return Ok((lease, None));
        }
        if map.len() >= 10_000 {
            map.clear();
        }
        let (lease, granted) = self.grant(site, ttl).await?;
        map.insert(key, lease);
        Ok((lease, Some(granted)))
    }

    /// Forgets `owner`'s session `lease` for `ttl` (it expired or was revoked).
    async fn end_session(&self, owner: &str, ttl: Duration, lease: i64) {
        let key = (owner.to_owned(), server_seconds(ttl));
        let mut map = self.inner.sessions.map.lock().await;
        if map.get(&key) == Some(&lease) {
            map.remove(&key);
        }
        self.forget_lease(lease);
    }

    /// The partition keys of `group` that `owner` holds, among `wanted`: (partition, etcd
    /// lease, epoch).
    fn owned(
        group_prefix: &[u8],
        kvs: &[KeyValue],
        owner: &str,
        wanted: &HashSet<u32>,
    ) -> Vec<(u32, i64, u64)> {
        kvs.iter()
            .filter_map(|kv| {
                let p = keys::partition_of(group_prefix, kv.key())?;
                let ours = wanted.contains(&p)
                    && kv.lease() != 0
                    && decode_part(kv.value()).as_deref() == Some(owner);
                ours.then(|| (p, kv.lease(), term_of(kv)))
            })
            .collect()
    }
}

/// The key-value a transaction's first read found.
fn first_read(resp: &etcd_client::TxnResponse) -> Option<KeyValue> {
    resp.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(get) => get.kvs().first().cloned(),
        _ => None,
    })
}

#[async_trait]
impl PartitionStore for EtcdStore {
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<PartitionLease>> {
        check::acquire_partition(self, group, owner, ttl)?;
        let site = self.site(Operation::AcquirePartition, group);
        let key = keys::partition(&self.inner.prefix, group, partition);
        let value = encode_part(owner);
        for _ in 0..MAX_TRIES {
            let sent = Stamp::now();
            let (lease, fresh) = self.session(site, owner, ttl).await?;
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    value.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(key.clone(), None)]);
            // A session granted before this call is kept alive in the same breath, so the
            // partition has the whole TTL from `sent`.
            let (alive, answer) = match fresh {
                Some(granted) => (Ok(Some(granted)), self.txn_raw(site, txn).await),
                None => tokio::join!(self.keep_alive(site, lease), self.txn_raw(site, txn)),
            };
            let answer = answer?;
            let Some(granted) = alive? else {
                self.end_session(owner, ttl, lease).await;
                continue;
            };
            let resp = match answer {
                Ok(resp) => resp,
                Err(e) if lease_not_found(&e) => {
                    self.end_session(owner, ttl, lease).await;
                    continue;
                }
                Err(e) => return Err(site.etcd(e)),
            };
            let lease_of = |epoch: u64| PartitionLease {
                partition,
                owner: owner.to_owned(),
                epoch,
                expires_in: sent.remaining(ttl.min(granted)),
            };
            if resp.succeeded() {
                return Ok(Some(lease_of(revision(site, &resp)?)));
            }
            let Some(kv) = first_read(&resp) else {
                continue; // deleted since the compare: look again
            };
            match decode_part(kv.value()) {
                Some(o) if o == owner => {
                    if kv.lease() == lease {
                        // The session's keep-alive, sent with the read, was accepted: the
                        // session was live then (etcd never revives an expired lease), and the
                        // read landed before the TTL it gave ran out from `sent` — unless the
                        // answers took longer than that; then look again.
                        if sent.remaining(granted).is_zero() {
                            continue;
                        }
                        return Ok(Some(lease_of(term_of(&kv))));
                    }
                    // The owner's key on another etcd lease of its (another TTL, another store
                    // object): moved onto this session, the epoch kept — only while that lease
                    // is live. One whose TTL ran out keeps its key until etcd's sweep revokes
                    // it; the owner let the partition lapse, so it must come back with a new
                    // epoch. A keep-alive proves the lease live (etcd refuses one of an
                    // expired lease, after its sweep deleted the key).
                    let proved = Stamp::now();
                    let Some(old_granted) = self.keep_alive(site, kv.lease()).await? else {
                        continue; // lapsed, its key deleted: look again (a create)
                    };
                    let moved = self
                        .move_live(
                            site,
                            &key,
                            vec![Compare::value(key.clone(), CompareOp::Equal, value.clone())],
                            kv.lease(),
                            (proved, old_granted),
                            lease,
                        )
                        .await?;
                    match moved {
                        Move::Moved => return Ok(Some(lease_of(term_of(&kv)))),
                        Move::Changed | Move::Lapsed => continue,
                        Move::TargetGone(_) => {
                            self.end_session(owner, ttl, lease).await;
                            continue;
                        }
                    }
                }
                Some(_) => return Ok(None),
                None => return Err(site.foreign_value(kv.key())),
            }
        }
        Err(Error::unavailable(format!(
            "partition {partition} changed under the acquisition {MAX_TRIES} times; try again"
        ))
        .during(Operation::AcquirePartition, group)
        .at_server(self.server().to_owned()))
    }

    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<PartitionLease>> {
        if check::renew_partitions(self, group, partitions, owner, ttl)? == Batch::Empty {
            return Ok(Vec::new());
        }
        let site = self.site(Operation::RenewPartitions, group);
        let group_prefix = keys::partitions(&self.inner.prefix, group);
        let wanted: HashSet<u32> = partitions.iter().copied().collect();
        let seen_key = (group.to_owned(), owner.to_owned());
        // The etcd leases this store found the owner's keys on at its last renewal of the
        // group are kept alive together with the read; others found by the read after it.
        let seen = lock(&self.inner.group_leases)
            .get(&seen_key)
            .cloned()
            .unwrap_or_default();
        let sent = Stamp::now();
        let (kvs, early) = tokio::join!(
            self.range(site, &group_prefix),
            join_all(seen.iter().map(|&lease| self.keep_alive(site, lease)))
        );
        let mine = Self::owned(&group_prefix, &kvs?, owner, &wanted);
        let mut granted = HashMap::new();
        for (&lease, alive) in seen.iter().zip(early) {
            granted.insert(lease, alive?);
        }
        let mut late: Vec<i64> = mine
            .iter()
            .map(|&(_, lease, _)| lease)
            .filter(|lease| !granted.contains_key(lease))
            .collect();
        late.sort_unstable();
        late.dedup();
        let alive = join_all(late.iter().map(|&lease| self.keep_alive(site, lease))).await;
        for (lease, alive) in late.into_iter().zip(alive) {
            granted.insert(lease, alive?);
        }
        let live: Vec<i64> = granted
            .iter()
            .filter(|(_, g)| g.is_some())
            .map(|(&lease, _)| lease)
            .collect();
        {
            let mut remembered = lock(&self.inner.group_leases);
            if remembered.len() >= 10_000 {
                remembered.clear();
            }
            remembered.insert(seen_key, live);
        }
        // A key hangs on its etcd lease until that lease ends: a lease kept alive keeps every
        // key on it. One on an etcd lease shorter than `ttl` (acquired with a shorter TTL) is
        // left out of the answer: it cannot be counted on for `ttl`; `acquire_partition` with
        // the new TTL moves it onto a session of that TTL, its epoch kept.
        Ok(mine
            .into_iter()
            .filter_map(|(partition, lease, epoch)| {
                let g = (*granted.get(&lease)?)?;
                (g >= ttl).then(|| PartitionLease {
                    partition,
                    owner: owner.to_owned(),
                    epoch,
                    expires_in: sent.remaining(ttl),
                })
            })
            .collect())
    }

    async fn release_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> Result<usize> {
        if check::release_partitions(self, group, partitions, owner)? == Batch::Empty {
            return Ok(0);
        }
        let site = self.site(Operation::ReleasePartitions, group);
        let mut unique: Vec<u32> = partitions.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let value = encode_part(owner);
        // One transaction per chunk, each partition a nested transaction of its own: deleted
        // when it holds `owner`'s record (a key that exists is live). etcd counts a nested
        // transaction's operations against what its parent leaves of `--max-txn-ops`, so a
        // chunk is half the limit.
        let chunk = (self.inner.max_txn_ops / 2).max(1);
        let txns = unique.chunks(chunk).map(|chunk| {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|&p| {
                    let key = keys::partition(&self.inner.prefix, group, p);
                    TxnOp::txn(
                        Txn::new()
                            .when([Compare::value(key.clone(), CompareOp::Equal, value.clone())])
                            .and_then([TxnOp::delete(key, None)]),
                    )
                })
                .collect();
            self.txn(site, Txn::new().and_then(ops))
        });
        let mut released = 0;
        for resp in join_all(txns).await {
            released += resp?
                .op_responses()
                .into_iter()
                .filter(|op| matches!(op, TxnOpResponse::Txn(t) if t.succeeded()))
                .count();
        }
        Ok(released)
    }

    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        check::owners(self, group)?;
        let site = self.site(Operation::Owners, group);
        let group_prefix = keys::partitions(&self.inner.prefix, group);
        let kvs = self.range(site, &group_prefix).await?;
        let mut found = Vec::new();
        for (kv, expires_in) in self.live(site, kvs).await? {
            let Some(partition) = keys::partition_of(&group_prefix, kv.key()) else {
                continue;
            };
            let Some(owner) = decode_part(kv.value()) else {
                return Err(site.foreign_value(kv.key()));
            };
            found.push(PartitionLease {
                partition,
                owner,
                epoch: term_of(&kv),
                expires_in,
            });
        }
        Ok(found)
    }
}
