//! [`PartitionStore`] on the lease bucket: one key per `(group, partition)`, expired by the
//! bucket's max age like a lease, and the memory of this store object's own last writes that
//! spares batch renewals and releases a read. See the crate docs, *Partitions*, for the
//! protocol and its round trips.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use lease_core::backend::{async_trait, check, partitions::MAX_PARTITIONS_PER_CALL};
use lease_core::layer::Operation;
use lease_core::{
    Result,
    backend::partitions::{PartitionLease, PartitionStore},
};
use tracing::debug;

use crate::known_writes::{KnownPartition, KnownPartitions};
use crate::store::{MAX_TRIES, NatsStore, Seen, pipelined};
use crate::wire::codec::PartitionRecord;
use crate::wire::keys::{decode_partition, partition_key, partition_prefix};

/// How many recent partition writes a store remembers before it first drops those older than
/// a lease: several of the largest batches.
pub(crate) const KNOWN_PARTITIONS_FLOOR: usize = 4 * MAX_PARTITIONS_PER_CALL;

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
    fn parts_map(&self) -> MutexGuard<'_, KnownPartitions> {
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
            map.remember(
                key,
                KnownPartition {
                    owner: owner.to_owned(),
                    revision,
                    epoch,
                    sent_at,
                },
                ttl,
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
        op: Operation,
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
        op: Operation,
        group: &str,
        partitions: &[u32],
    ) -> Vec<Result<Seen<PartitionRecord>>> {
        pipelined(partitions, |&p| self.read_partition(op, group, p)).await
    }

    async fn renew_batch(
        &self,
        group: &str,
        wanted: &BTreeSet<u32>,
        owner: &str,
    ) -> Result<Vec<PartitionLease>> {
        const OP: Operation = Operation::RenewPartitions;
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
        const OP: Operation = Operation::ReleasePartitions;
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
        const OP: Operation = Operation::AcquirePartition;
        check::acquire_partition(self, group, owner, ttl)?;
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
        if check::renew_partitions(self, group, partitions, owner, ttl)? == check::Batch::Empty {
            return Ok(Vec::new());
        }
        let wanted: BTreeSet<u32> = partitions.iter().copied().collect();
        self.bounded(
            Operation::RenewPartitions,
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
        if check::release_partitions(self, group, partitions, owner)? == check::Batch::Empty {
            return Ok(0);
        }
        let wanted: BTreeSet<u32> = partitions.iter().copied().collect();
        self.bounded(
            Operation::ReleasePartitions,
            group,
            self.release_batch(group, &wanted, owner),
        )
        .await?
    }

    /// Lists the group's keys with one `STREAM.INFO` request (a subject filter), then reads
    /// them with pipelined direct gets: two bursts (one when the group has no key).
    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        const OP: Operation = Operation::Owners;
        check::owners(self, group)?;
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
