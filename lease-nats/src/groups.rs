//! [`PartitionStore`] and [`MembershipStore`] on the lease bucket: one key per
//! `(group, partition)` and per `(service, node)`, expired by the bucket's max age like a lease.
//! See the crate docs, *Partitions* and *Membership*, for the protocol and its round trips.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use futures::future::join_all;
use lease_core::Error;
use lease_core::LeaseStoreExt;
use lease_core::{
    Member, MembershipStore, PartitionLease, PartitionStore, Result,
    backend::{async_trait, check_member_args, check_partition_args, check_partition_batch},
};
use serde_json::Value;
use tracing::debug;

use crate::backend::{KnownPartition, MAX_TRIES, NatsStore, Seen};
use crate::codec::{
    MemberRecord, PartitionRecord, decode_key, decode_partition, encode_key, member_key,
    member_prefix, partition_key, partition_prefix,
};

/// How many recent partition writes a store remembers: several of the largest batches.
const MAX_KNOWN_PARTITIONS: usize = 4 * lease_core::backend::MAX_PARTITIONS_PER_CALL;

/// How many requests one pipelined burst sends before awaiting their answers. Bursts of a
/// larger batch go one after the other, so one call never has more publishes awaiting their
/// acknowledgement than this (a JetStream context allows 5,000 by default).
const WINDOW: usize = 1000;

/// Runs `f` on every item, pipelined: each window of [`WINDOW`] futures runs concurrently (all
/// requests sent before any answer is awaited), windows one after the other. Answers in the
/// order of `items`.
async fn pipelined<'a, I, T, F, Fut>(items: &'a [I], f: F) -> Vec<T>
where
    F: Fn(&'a I) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut out = Vec::with_capacity(items.len());
    for window in items.chunks(WINDOW) {
        out.extend(join_all(window.iter().map(&f)).await);
    }
    out
}

/// What the next step of an acquisition is.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Publish with `Nats-Expected-Last-Subject-Sequence: expected`, the value carrying `epoch`
    /// (0: "this message's sequence", a new epoch).
    Write { expected: u64, epoch: u64 },
    /// Read the key to see who holds it.
    Read,
}

impl NatsStore {
    fn parts_map(&self) -> MutexGuard<'_, HashMap<(String, u32), KnownPartition>> {
        self.inner.parts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last write this store made to `partition` of `group` for `owner`: (revision, epoch).
    fn part_known(&self, group: &str, partition: u32, owner: &str) -> Option<(u64, u64)> {
        self.parts_map()
            .get(&(group.to_owned(), partition))
            .filter(|k| k.owner == owner)
            .map(|k| (k.revision, k.epoch))
    }

    /// Remembers writes `owner` made to `group`'s partitions: (partition, revision, epoch).
    fn part_remember(
        &self,
        group: &str,
        owner: &str,
        sent_at: Instant,
        writes: impl IntoIterator<Item = (u32, u64, u64)>,
    ) {
        let ttl = self.inner.ttl;
        let mut map = self.parts_map();
        for (partition, revision, epoch) in writes {
            let key = (group.to_owned(), partition);
            if map.len() >= MAX_KNOWN_PARTITIONS && !map.contains_key(&key) {
                map.retain(|_, k| k.sent_at.elapsed() < ttl);
                if map.len() >= MAX_KNOWN_PARTITIONS {
                    map.clear();
                }
            }
            map.insert(
                key,
                KnownPartition {
                    owner: owner.to_owned(),
                    revision,
                    epoch,
                    sent_at,
                },
            );
        }
    }

    /// Forgets what this store wrote to `group`'s `partitions` for `owner`.
    fn part_forget(&self, group: &str, owner: &str, partitions: impl IntoIterator<Item = u32>) {
        let mut map = self.parts_map();
        for partition in partitions {
            let key = (group.to_owned(), partition);
            if map.get(&key).is_some_and(|k| k.owner == owner) {
                map.remove(&key);
            }
        }
    }

    /// Time left on a partition lease read back: by the monotonic clock when this store made
    /// that write, otherwise an estimate from the server's timestamp.
    fn part_left(&self, group: &str, partition: u32, revision: u64, created_ns: i128) -> Duration {
        let sent_at = self
            .parts_map()
            .get(&(group.to_owned(), partition))
            .filter(|k| k.revision == revision)
            .map(|k| k.sent_at);
        match sent_at {
            Some(at) => self.left_since(at),
            None => self.estimate_left(created_ns),
        }
    }

    /// Reads one partition key (a direct get).
    async fn read_partition(
        &self,
        op: &str,
        group: &str,
        partition: u32,
    ) -> Result<Seen<PartitionRecord>> {
        let key = partition_key(group, partition);
        self.read_as(op, group, &key, PartitionRecord::decode).await
    }

    /// Reads many partition keys, pipelined: every direct get is sent before any answer is
    /// awaited. Answers in the order of `partitions`.
    async fn read_partitions(
        &self,
        op: &str,
        group: &str,
        partitions: &[u32],
    ) -> Vec<Result<Seen<PartitionRecord>>> {
        pipelined(partitions, |&p| self.read_partition(op, group, p)).await
    }

    /// The keys under `prefix` (a key prefix ending with `.`), without the prefix: one
    /// `$JS.API.STREAM.INFO` request with a subject filter (one more per 100,000 keys).
    async fn list_keys(&self, op: &str, name: &str, prefix: &str) -> Result<Vec<String>> {
        let api = format!("STREAM.INFO.KV_{}", self.inner.bucket);
        let subject_prefix = format!("{}{prefix}", self.inner.subject_prefix);
        let filter = format!("{subject_prefix}>");
        let mut keys = Vec::new();
        let mut offset = 0usize;
        loop {
            let request = serde_json::json!({ "subjects_filter": filter, "offset": offset });
            let reply: Value = self
                .bounded(op, name, self.inner.js.request(api.clone(), &request))
                .await?
                .map_err(|e| self.site(op, name).request(e))?;
            if let Some(error) = reply.get("error") {
                let description = error
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or("an error without a description")
                    .to_owned();
                return Err(self.site(op, name).backend(description, true));
            }
            let subjects = reply.pointer("/state/subjects").and_then(Value::as_object);
            let page = subjects.map_or(0, serde_json::Map::len);
            if let Some(subjects) = subjects {
                keys.extend(
                    subjects
                        .keys()
                        .filter_map(|s| s.strip_prefix(&subject_prefix))
                        .map(str::to_owned),
                );
            }
            offset += page;
            let total = reply.get("total").and_then(Value::as_u64).unwrap_or(0);
            if page == 0 || u64::try_from(offset).unwrap_or(u64::MAX) >= total {
                return Ok(keys);
            }
        }
    }

    fn foreign_key(&self, op: &str, name: &str, key: &str) -> Error {
        self.site(op, name).foreign_value(key)
    }

    async fn renew_batch(
        &self,
        group: &str,
        wanted: &BTreeSet<u32>,
        owner: &str,
    ) -> Result<Vec<PartitionLease>> {
        const OP: &str = "renew partitions";
        let start = Instant::now();
        // Each partition with the (revision, epoch) to compare-and-set against, when known.
        let mut pending: Vec<(u32, Option<(u64, u64)>)> = {
            let map = self.parts_map();
            wanted
                .iter()
                .map(|&p| {
                    let known = map
                        .get(&(group.to_owned(), p))
                        .filter(|k| k.owner == owner)
                        .map(|k| (k.revision, k.epoch));
                    (p, known)
                })
                .collect()
        };
        let mut out = Vec::with_capacity(pending.len());
        for _ in 0..MAX_TRIES {
            // Read, pipelined, what this store does not know; keep the owner's live leases.
            let unknown: Vec<u32> = pending
                .iter()
                .filter(|(_, t)| t.is_none())
                .map(|(p, _)| *p)
                .collect();
            if !unknown.is_empty() {
                let seen = self.read_partitions(OP, group, &unknown).await;
                let mut found = HashMap::new();
                let mut lost = Vec::new();
                for (&p, s) in unknown.iter().zip(seen) {
                    match s? {
                        Seen::Live {
                            record, revision, ..
                        } if record.owner == owner => {
                            found.insert(p, (revision, record.epoch_at(revision)));
                        }
                        _ => lost.push(p),
                    }
                }
                self.part_forget(group, owner, lost);
                pending = pending
                    .into_iter()
                    .filter_map(|(p, t)| t.or_else(|| found.get(&p).copied()).map(|t| (p, Some(t))))
                    .collect();
            }
            if pending.is_empty() {
                break;
            }
            // Write, pipelined: each a compare-and-set on the revision read or remembered.
            let targets: Vec<(u32, u64, u64)> = pending
                .iter()
                .filter_map(|&(p, t)| t.map(|(revision, epoch)| (p, revision, epoch)))
                .collect();
            let sent_at = Instant::now();
            let written = pipelined(&targets, |&(p, revision, epoch)| {
                let value = PartitionRecord {
                    epoch,
                    owner: owner.to_owned(),
                }
                .encode();
                let key = partition_key(group, p);
                async move { self.write(OP, group, &key, value, revision).await }
            })
            .await;
            let mut renewed = Vec::new();
            let mut again = Vec::new();
            let mut failed = None;
            for (&(p, revision, epoch), w) in targets.iter().zip(written) {
                match w {
                    Ok(Some(new)) => renewed.push((p, new, epoch)),
                    Ok(None) => {
                        debug!(
                            group,
                            partition = p,
                            revision,
                            "renewal found the key changed"
                        );
                        again.push((p, None));
                    }
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
            for &(p, _, epoch) in &renewed {
                out.push(PartitionLease {
                    partition: p,
                    owner: owner.to_owned(),
                    epoch,
                    // Measured from the start of the call: one expiry for the whole batch,
                    // never overstated.
                    expires_in: self.left_since(start),
                });
            }
            self.part_remember(group, owner, sent_at, renewed);
            if let Some(e) = failed {
                return Err(e);
            }
            pending = again;
            if pending.is_empty() {
                break;
            }
        }
        if !pending.is_empty() {
            return Err(self.racing(OP, group));
        }
        Ok(out)
    }

    async fn release_batch(
        &self,
        group: &str,
        wanted: &BTreeSet<u32>,
        owner: &str,
    ) -> Result<usize> {
        const OP: &str = "release partitions";
        let mut pending: Vec<(u32, Option<u64>)> = {
            let map = self.parts_map();
            wanted
                .iter()
                .map(|&p| {
                    let known = map
                        .get(&(group.to_owned(), p))
                        .filter(|k| k.owner == owner)
                        .map(|k| k.revision);
                    (p, known)
                })
                .collect()
        };
        let mut ended = 0;
        for _ in 0..MAX_TRIES {
            let unknown: Vec<u32> = pending
                .iter()
                .filter(|(_, t)| t.is_none())
                .map(|(p, _)| *p)
                .collect();
            if !unknown.is_empty() {
                let seen = self.read_partitions(OP, group, &unknown).await;
                let mut found = HashMap::new();
                let mut gone = Vec::new();
                for (&p, s) in unknown.iter().zip(seen) {
                    match s? {
                        Seen::Live {
                            record, revision, ..
                        } if record.owner == owner => {
                            found.insert(p, revision);
                        }
                        _ => gone.push(p),
                    }
                }
                self.part_forget(group, owner, gone);
                pending = pending
                    .into_iter()
                    .filter_map(|(p, t)| t.or_else(|| found.get(&p).copied()).map(|t| (p, Some(t))))
                    .collect();
            }
            if pending.is_empty() {
                break;
            }
            // Purge, pipelined: each removes the key only while `revision` is its last message.
            let targets: Vec<(u32, u64)> = pending
                .iter()
                .filter_map(|&(p, t)| t.map(|revision| (p, revision)))
                .collect();
            let purged = pipelined(&targets, |&(p, revision)| {
                let key = partition_key(group, p);
                async move { self.purge_through(OP, group, &key, revision).await }
            })
            .await;
            let mut done = Vec::new();
            let mut again = Vec::new();
            let mut failed = None;
            for (&(p, _), r) in targets.iter().zip(purged) {
                match r {
                    Ok(true) => done.push(p),
                    Ok(false) => again.push((p, None)),
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
            ended += done.len();
            self.part_forget(group, owner, done);
            if let Some(e) = failed {
                return Err(e);
            }
            pending = again;
            if pending.is_empty() {
                break;
            }
        }
        if !pending.is_empty() {
            return Err(self.racing(OP, group));
        }
        Ok(ended)
    }
}

#[async_trait]
impl PartitionStore for NatsStore {
    /// Acquires a partition by compare-and-set on its key's revision.
    ///
    /// Round trips: 1 for a free partition (a create: `Nats-Expected-Last-Subject-Sequence:
    /// 0`, the epoch is the create's stream sequence) and for the owner's own live lease when
    /// this store object made its last write (an update at that revision, the epoch kept); 2
    /// when another owner holds it (the failed create, a direct get); 3 for the owner's own
    /// live lease whose last write another store object made (create, get, update).
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<PartitionLease>> {
        const OP: &str = "acquire partition";
        check_partition_args(self, group, owner, Some(ttl))?;
        let key = partition_key(group, partition);
        let mut step = match self.part_known(group, partition, owner) {
            Some((revision, epoch)) => Step::Write {
                expected: revision,
                epoch,
            },
            None => Step::Write {
                expected: 0,
                epoch: 0,
            },
        };
        let mut writes = 0;
        loop {
            match step {
                Step::Write { expected, epoch } => {
                    if writes == MAX_TRIES {
                        return Err(self.racing(OP, group));
                    }
                    writes += 1;
                    let value = PartitionRecord {
                        epoch,
                        owner: owner.to_owned(),
                    }
                    .encode();
                    let sent_at = Instant::now();
                    if let Some(revision) = self.write(OP, group, &key, value, expected).await? {
                        // A new epoch is this very write's stream sequence.
                        let epoch = if epoch == 0 { revision } else { epoch };
                        self.part_remember(group, owner, sent_at, [(partition, revision, epoch)]);
                        debug!(group, partition, epoch, owner, "acquired a partition");
                        return Ok(Some(PartitionLease {
                            partition,
                            owner: owner.to_owned(),
                            epoch,
                            expires_in: self.left_since(sent_at),
                        }));
                    }
                    step = Step::Read;
                }
                Step::Read => match self.read_partition(OP, group, partition).await? {
                    // Expired or released since: create it.
                    Seen::Absent => {
                        step = Step::Write {
                            expected: 0,
                            epoch: 0,
                        };
                    }
                    // The owner's own live lease: extend it, keeping the epoch.
                    Seen::Live {
                        record, revision, ..
                    } if record.owner == owner => {
                        step = Step::Write {
                            expected: revision,
                            epoch: record.epoch_at(revision),
                        };
                    }
                    Seen::Live { .. } => {
                        self.part_forget(group, owner, [partition]);
                        return Ok(None);
                    }
                    // A delete or purge marker another tool left: free; a new epoch.
                    Seen::Marker { revision } => {
                        step = Step::Write {
                            expected: revision,
                            epoch: 0,
                        };
                    }
                    Seen::Foreign { .. } => return Err(self.foreign_key(OP, group, &key)),
                },
            }
        }
    }

    /// Renews by one compare-and-set update per partition, all pipelined (sent before any
    /// answer is awaited): one burst when this store object made each lease's last write, two
    /// (direct gets, then updates) for leases it did not. Each update is atomic on its own.
    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<PartitionLease>> {
        check_partition_args(self, group, owner, Some(ttl))?;
        check_partition_batch(partitions)?;
        let wanted: BTreeSet<u32> = partitions.iter().copied().collect();
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        self.bounded(
            "renew partitions",
            group,
            self.renew_batch(group, &wanted, owner),
        )
        .await?
    }

    /// Releases by one purge per partition, limited to the key and to the owner's revision (a
    /// compare-and-set that leaves no marker), all pipelined: one burst when this store object
    /// made each lease's last write, two (direct gets, then purges) otherwise.
    async fn release_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> Result<usize> {
        check_partition_args(self, group, owner, None)?;
        check_partition_batch(partitions)?;
        let wanted: BTreeSet<u32> = partitions.iter().copied().collect();
        if wanted.is_empty() {
            return Ok(0);
        }
        self.bounded(
            "release partitions",
            group,
            self.release_batch(group, &wanted, owner),
        )
        .await?
    }

    /// Lists the group's keys with one `STREAM.INFO` request (a subject filter), then reads
    /// them with pipelined direct gets: two bursts (one when the group has no key).
    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        const OP: &str = "list partition owners";
        self.validate_name(group)?;
        let prefix = partition_prefix(group);
        let listing = async {
            let keys = self.list_keys(OP, group, &prefix).await?;
            let mut partitions = Vec::with_capacity(keys.len());
            for suffix in &keys {
                match decode_partition(suffix) {
                    Some(p) => partitions.push(p),
                    None => {
                        return Err(self.foreign_key(OP, group, &format!("{prefix}{suffix}")));
                    }
                }
            }
            let seen = self.read_partitions(OP, group, &partitions).await;
            let mut live = BTreeMap::new();
            for (&p, s) in partitions.iter().zip(seen) {
                match s? {
                    Seen::Live {
                        record,
                        revision,
                        created_ns,
                    } => {
                        let lease = PartitionLease {
                            partition: p,
                            epoch: record.epoch_at(revision),
                            owner: record.owner,
                            expires_in: self.part_left(group, p, revision, created_ns),
                        };
                        live.insert(p, lease);
                    }
                    Seen::Absent | Seen::Marker { .. } => {}
                    Seen::Foreign { .. } => {
                        return Err(self.foreign_key(OP, group, &partition_key(group, p)));
                    }
                }
            }
            Ok(live.into_values().collect())
        };
        self.bounded(OP, group, listing).await?
    }
}

#[async_trait]
impl MembershipStore for NatsStore {
    /// One unconditional publish to the member's key: it replaces the record and starts its
    /// age again. One round trip.
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member> {
        const OP: &str = "heartbeat";
        check_member_args(self, service, node, Some(address), Some(ttl), groups)?;
        let key = member_key(service, node);
        let record = MemberRecord {
            address: address.to_owned(),
            groups: groups.to_vec(),
        };
        let sent_at = Instant::now();
        self.bounded(OP, service, self.inner.kv.put(&key, record.encode()))
            .await?
            .map_err(|e| self.site(OP, service).put(e))?;
        Ok(Member {
            node: node.to_owned(),
            address: record.address,
            groups: record.groups,
            expires_in: self.left_since(sent_at),
        })
    }

    /// Lists the service's keys with one `STREAM.INFO` request (a subject filter), then reads
    /// them with pipelined direct gets: two bursts (one when the service has no member).
    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        const OP: &str = "list members";
        check_member_args(self, service, "-", None, None, &[])?;
        let prefix = member_prefix(service);
        let listing = async {
            let keys = self.list_keys(OP, service, &prefix).await?;
            let mut nodes = Vec::with_capacity(keys.len());
            for suffix in &keys {
                // Only a key this store would have made for that node (one escaped token).
                match decode_key(suffix).filter(|node| encode_key(node) == *suffix) {
                    Some(node) => nodes.push((node, format!("{prefix}{suffix}"))),
                    None => {
                        return Err(self.foreign_key(OP, service, &format!("{prefix}{suffix}")));
                    }
                }
            }
            let seen = pipelined(&nodes, |(_, key)| {
                self.read_as(OP, service, key, MemberRecord::decode)
            })
            .await;
            let mut live = BTreeMap::new();
            for ((node, key), s) in nodes.into_iter().zip(seen) {
                match s? {
                    Seen::Live {
                        record, created_ns, ..
                    } => {
                        let member = Member {
                            expires_in: self.estimate_left(created_ns),
                            node: node.clone(),
                            address: record.address,
                            groups: record.groups,
                        };
                        live.insert(node, member);
                    }
                    Seen::Absent | Seen::Marker { .. } => {}
                    Seen::Foreign { .. } => return Err(self.foreign_key(OP, service, &key)),
                }
            }
            Ok(live.into_values().collect())
        };
        self.bounded(OP, service, listing).await?
    }

    /// One purge of the member's key. One round trip.
    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        const OP: &str = "leave";
        check_member_args(self, service, node, None, None, &[])?;
        let key = member_key(service, node);
        let subject = format!("{}{key}", self.inner.subject_prefix);
        let purge = self.inner.kv.stream.purge().filter(subject);
        let purged = self
            .bounded(OP, service, async move { purge.await })
            .await?
            .map_err(|e| self.site(OP, service).purge(e))?;
        Ok(purged.purged > 0)
    }
}
