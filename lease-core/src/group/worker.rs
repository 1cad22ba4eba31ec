//! The worker's task: heartbeat, watch members, renew, give up, acquire, publish.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::assign::assign;
use crate::error::{Error, Result};
use crate::membership::{GroupStore, check_member_args};
use crate::partitions::{MAX_PARTITIONS_PER_CALL, PartitionStore, check_partition_args, owner_id};
use crate::{MembershipStore, Timings};

/// The most partitions one group may have.
pub const MAX_GROUP_PARTITIONS: u32 = 65_536;

/// What a worker holds, as published on its watch channel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    /// The partitions this worker holds, each with its epoch (the fencing token).
    pub partitions: BTreeMap<u32, u64>,
    /// The live members serving the group, by node id, as last read (this node included).
    pub members: Vec<String>,
}

impl Assignment {
    /// `true` when this worker holds `partition`.
    pub fn holds(&self, partition: u32) -> bool {
        self.partitions.contains_key(&partition)
    }

    /// The epoch under which this worker holds `partition`.
    pub fn epoch(&self, partition: u32) -> Option<u64> {
        self.partitions.get(&partition).copied()
    }
}

/// A handle for the consumer of an assignment to say it stopped working a partition; see
/// [`GroupWorker::stop_acks`].
#[derive(Debug, Clone)]
pub struct StopAck {
    _n: u32,
}

impl StopAck {
    /// Says the consumer stopped working `partition` under `epoch`.
    pub fn stopped(&self, partition: u32, epoch: u64) {
        let _ = (partition, epoch);
    }
}

/// Builds and starts a [`GroupWorker`]; see [`GroupWorker::builder`].
#[must_use = "a builder does nothing until `start` is awaited"]
pub struct GroupWorkerBuilder {
    store: Arc<dyn GroupStore>,
    group: String,
    partitions: u32,
    service: Option<String>,
    node: Option<String>,
    address: String,
    timings: Timings,
}

impl fmt::Debug for GroupWorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupWorkerBuilder")
            .field("backend", &self.store.backend())
            .field("group", &self.group)
            .field("partitions", &self.partitions)
            .field("service", &self.service)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl GroupWorkerBuilder {
    /// The service whose membership the worker heartbeats; defaults to the group's name.
    pub fn service(mut self, service: impl Into<String>) -> Self {
        self.service = Some(service.into());
        self
    }

    /// This node's id among the members; stable across restarts so a restarted node gets back
    /// the same share. Defaults to `node-` and 8 random hex digits.
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Where this node answers, for the member record (free-form; empty by default).
    pub fn address(mut self, address: impl Into<String>) -> Self {
        self.address = address.into();
        self
    }

    /// The timings: `lease` for the partition leases and the membership record, `renew_every`
    /// as the tick, `deadline`, `attempt_timeout` and `grace` as for a lease.
    pub fn timings(mut self, timings: Timings) -> Self {
        self.timings = timings;
        self
    }

    /// Checks everything, heartbeats once (so an unreachable store fails here), and starts the
    /// worker's task on the current tokio runtime.
    pub async fn start(self) -> Result<GroupWorker> {
        let caps = self.store.capabilities();
        if !caps.partitions || !caps.membership {
            return Err(Error::unsupported(format!(
                "the {} store has no {}; choose a store whose capabilities say `partitions` and \
                 `membership`",
                self.store.backend(),
                if caps.partitions {
                    "membership records"
                } else {
                    "partitioned leases"
                }
            )));
        }
        if self.partitions == 0 || self.partitions > MAX_GROUP_PARTITIONS {
            return Err(Error::invalid_argument(format!(
                "a group has 1 to {MAX_GROUP_PARTITIONS} partitions; asked for {}",
                self.partitions
            )));
        }
        let service = self.service.unwrap_or_else(|| self.group.clone());
        let node = self.node.unwrap_or_else(|| {
            let hex = crate::HolderToken::mint().to_hex();
            format!("node-{}", hex.get(..8).unwrap_or(&hex))
        });
        let owner = owner_id(&node);
        let lease = self.timings.lease();
        let groups = vec![self.group.clone()];
        let store = self.store;
        check_member_args(
            &*store,
            &service,
            &node,
            Some(&self.address),
            Some(lease),
            &groups,
        )?;
        check_partition_args(&*store, &self.group, &owner, Some(lease))?;
        let first = timeout(
            self.timings.attempt_timeout(),
            store.heartbeat(&service, &node, &self.address, lease, &groups),
        )
        .await;
        match first {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(Error::timeout(
                    format!("the first heartbeat of {node} in {service}"),
                    self.timings.attempt_timeout(),
                ));
            }
        }
        let (tx, rx) = watch::channel(Assignment::default());
        let stop = CancellationToken::new();
        let run = Run {
            store,
            group: self.group.clone(),
            service: service.clone(),
            node: node.clone(),
            address: self.address,
            owner: owner.clone(),
            partitions: self.partitions,
            timings: self.timings,
            groups,
            held: BTreeMap::new(),
            view: None,
            share: BTreeSet::new(),
            tx,
        };
        let task = tokio::spawn(run.run(stop.clone()));
        info!(group = %self.group, %service, %node, %owner, "group worker started");
        Ok(GroupWorker {
            rx,
            stop,
            task: Some(task),
            group: self.group,
            service,
            node,
            owner,
        })
    }
}

/// One node's part in spreading a group's partitions over the live members of a service; see
/// the [module docs](crate::group).
///
/// Dropping the worker without [`leave`](GroupWorker::leave) stops it the same way, in the
/// background.
pub struct GroupWorker {
    rx: watch::Receiver<Assignment>,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<()>>>,
    group: String,
    service: String,
    node: String,
    owner: String,
}

impl fmt::Debug for GroupWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupWorker")
            .field("group", &self.group)
            .field("service", &self.service)
            .field("node", &self.node)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl GroupWorker {
    /// A worker for `partitions` partitions (numbered `0..partitions`) of `group` over `store`.
    pub fn builder(
        store: impl GroupStore,
        group: impl Into<String>,
        partitions: u32,
    ) -> GroupWorkerBuilder {
        Self::builder_arc(Arc::new(store), group, partitions)
    }

    /// As [`builder`](GroupWorker::builder), for a store already behind an `Arc`.
    pub fn builder_arc(
        store: Arc<dyn GroupStore>,
        group: impl Into<String>,
        partitions: u32,
    ) -> GroupWorkerBuilder {
        GroupWorkerBuilder {
            store,
            group: group.into(),
            partitions,
            service: None,
            node: None,
            address: String::new(),
            timings: Timings::default(),
        }
    }

    /// The watch channel of this worker's assignment. The value changes whenever a partition is
    /// gained or lost or the member list changes; when a partition disappears, stop its work
    /// within the timings' `grace`.
    ///
    /// Do not hold a [`borrow`](watch::Receiver::borrow) across an `.await`: the worker's next
    /// publication waits for it, and with it the renewals. Clone what you need out of it.
    pub fn assignment(&self) -> watch::Receiver<Assignment> {
        self.rx.clone()
    }

    /// A handle to acknowledge stops.
    pub fn stop_acks(&self) -> StopAck {
        StopAck { _n: 0 }
    }

    /// The group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The service whose membership the worker heartbeats.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The owner id of this incarnation, as the partition leases record it.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Leaves gracefully: the assignment becomes empty, every partition is released at once and
    /// the membership ends, so the other members take over on their next ticks instead of
    /// waiting out the lease. An error says a release or the leave did not reach the store (the
    /// others then wait for the lease to expire).
    pub async fn leave(mut self) -> Result<()> {
        self.stop.cancel();
        match self.task.take() {
            Some(task) => task
                .await
                .map_err(|e| Error::unavailable(format!("the group worker's task ended: {e}")))?,
            None => Ok(()),
        }
    }
}

impl Drop for GroupWorker {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Debug, Clone, Copy)]
struct Held {
    epoch: u64,
    /// The local deadline: the start of the last successful acquire or renewal plus `deadline`.
    deadline: Instant,
}

struct Run {
    store: Arc<dyn GroupStore>,
    group: String,
    service: String,
    node: String,
    address: String,
    owner: String,
    partitions: u32,
    timings: Timings,
    groups: Vec<String>,
    held: BTreeMap<u32, Held>,
    view: Option<Vec<String>>,
    /// This node's share under `view`.
    share: BTreeSet<u32>,
    tx: watch::Sender<Assignment>,
}

impl Run {
    async fn run(mut self, stop: CancellationToken) -> Result<()> {
        let mut next = Instant::now();
        loop {
            // Sleep until the next tick, waking at every local deadline on the way.
            while Instant::now() < next {
                let wake = self.earliest_deadline().map_or(next, |d| d.min(next));
                tokio::select! {
                    () = stop.cancelled() => return self.leave().await,
                    () = sleep_until(wake) => {}
                }
                self.drop_lapsed();
            }
            next = Instant::now() + self.timings.renew_every();
            tokio::select! {
                () = stop.cancelled() => return self.leave().await,
                () = self.tick(next) => {}
            }
        }
    }

    fn earliest_deadline(&self) -> Option<Instant> {
        self.held.values().map(|h| h.deadline).min()
    }

    /// One store operation, bounded by the attempt timeout and by `cut` (a local deadline).
    ///
    /// Every operation of a tick is cut at the earliest local deadline of the partitions held,
    /// and the tick drops lapsed partitions after each, so a partition leaves the assignment at
    /// its deadline whatever the store is doing.
    async fn bounded<T>(
        &self,
        what: &str,
        cut: Option<Instant>,
        op: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let mut bound = self.timings.attempt_timeout();
        if let Some(cut) = cut {
            bound = bound.min(cut.saturating_duration_since(Instant::now()));
        }
        match timeout(bound, op).await {
            Ok(r) => r,
            Err(_) => Err(Error::timeout(what, bound)),
        }
    }

    async fn tick(&mut self, next: Instant) {
        let lease = self.timings.lease();
        let beat = self.store.heartbeat(
            &self.service,
            &self.node,
            &self.address,
            lease,
            &self.groups,
        );
        if let Err(e) = self
            .bounded("heartbeat", self.earliest_deadline(), beat)
            .await
        {
            warn!(group = %self.group, node = %self.node, error = %e, "heartbeat failed; retrying next tick");
        }
        self.drop_lapsed();
        let members = self
            .bounded(
                "members",
                self.earliest_deadline(),
                self.store.members(&self.service),
            )
            .await;
        self.drop_lapsed();
        let view = match members {
            Ok(members) => {
                let mut nodes: BTreeSet<String> = members
                    .into_iter()
                    .filter(|m| m.serves(&self.group))
                    .map(|m| m.node)
                    .collect();
                nodes.insert(self.node.clone());
                Some(nodes.into_iter().collect::<Vec<_>>())
            }
            Err(e) => {
                warn!(group = %self.group, node = %self.node, error = %e, "reading members failed; keeping the assignment");
                None
            }
        };
        self.renew().await;
        self.drop_lapsed();
        let Some(view) = view else { return };
        if self.view.as_ref() != Some(&view) {
            info!(group = %self.group, node = %self.node, members = ?view, "members changed");
            // The share changes only with the member list: computed once per change, not per
            // tick (the assignment sorts partitions × members pairs).
            let me = view.iter().position(|n| *n == self.node);
            self.share = assign(&self.group, self.partitions, &view)
                .into_iter()
                .zip(0u32..)
                .filter(|(owner, _)| Some(*owner) == me)
                .map(|(_, p)| p)
                .collect();
            self.view = Some(view);
        }
        let mine = self.share.clone();
        self.give_up(&mine).await;
        self.acquire(&mine, next).await;
        self.publish();
    }

    /// Renews every held partition, in batches of at most [`MAX_PARTITIONS_PER_CALL`].
    async fn renew(&mut self) {
        let keys: Vec<u32> = self.held.keys().copied().collect();
        for chunk in keys.chunks(MAX_PARTITIONS_PER_CALL) {
            let started = Instant::now();
            let cut = chunk
                .iter()
                .filter_map(|p| self.held.get(p))
                .map(|h| h.deadline)
                .min();
            let op =
                self.store
                    .renew_partitions(&self.group, chunk, &self.owner, self.timings.lease());
            match self.bounded("renewal", cut, op).await {
                Ok(leases) => {
                    let mut renewed = BTreeSet::new();
                    for l in leases {
                        if let Some(h) = self.held.get_mut(&l.partition)
                            && h.epoch == l.epoch
                        {
                            h.deadline = started + self.timings.deadline();
                            renewed.insert(l.partition);
                        }
                    }
                    for p in chunk.iter().filter(|p| !renewed.contains(p)) {
                        if self.held.remove(p).is_some() {
                            warn!(group = %self.group, node = %self.node, partition = p, "partition lost: the store no longer has it under this owner");
                        }
                    }
                }
                Err(e) => {
                    warn!(group = %self.group, node = %self.node, error = %e, "renewal failed; retrying next tick");
                }
            }
        }
        self.publish();
    }

    /// Drops (and publishes the loss of) every partition past its local deadline.
    fn drop_lapsed(&mut self) {
        let now = Instant::now();
        let before = self.held.len();
        self.held.retain(|p, h| {
            let keep = h.deadline > now;
            if !keep {
                warn!(
                    partition = p,
                    "partition lost: no renewal succeeded within the deadline"
                );
            }
            keep
        });
        if self.held.len() != before {
            self.publish();
        }
    }

    /// Takes the partitions that are no longer this node's out of the assignment, publishes,
    /// then releases them.
    async fn give_up(&mut self, mine: &BTreeSet<u32>) {
        let gone: Vec<u32> = self
            .held
            .keys()
            .filter(|p| !mine.contains(p))
            .copied()
            .collect();
        if gone.is_empty() {
            return;
        }
        for p in &gone {
            self.held.remove(p);
        }
        self.publish();
        info!(group = %self.group, node = %self.node, partitions = ?gone, "giving partitions up");
        for chunk in gone.chunks(MAX_PARTITIONS_PER_CALL) {
            let op = self
                .store
                .release_partitions(&self.group, chunk, &self.owner);
            if let Err(e) = self.bounded("release", self.earliest_deadline(), op).await {
                warn!(group = %self.group, node = %self.node, error = %e, "release failed; the partitions pass on when their leases expire");
            }
        }
    }

    /// Acquires the partitions of this node's share it does not hold, until the tick's time is
    /// up or the store fails.
    async fn acquire(&mut self, mine: &BTreeSet<u32>, next: Instant) {
        let wanted: Vec<u32> = mine
            .iter()
            .filter(|p| !self.held.contains_key(p))
            .copied()
            .collect();
        let mut gained = Vec::new();
        for p in wanted {
            if Instant::now() >= next {
                break;
            }
            self.drop_lapsed();
            let started = Instant::now();
            let op =
                self.store
                    .acquire_partition(&self.group, p, &self.owner, self.timings.lease());
            match self.bounded("acquire", self.earliest_deadline(), op).await {
                Ok(Some(lease)) => {
                    let deadline = started + self.timings.deadline();
                    self.held.insert(
                        p,
                        Held {
                            epoch: lease.epoch,
                            deadline,
                        },
                    );
                    gained.push(p);
                }
                Ok(None) => {}
                Err(e) => {
                    warn!(group = %self.group, node = %self.node, partition = p, error = %e, "acquire failed; retrying next tick");
                    break;
                }
            }
        }
        if !gained.is_empty() {
            info!(group = %self.group, node = %self.node, partitions = ?gained, "partitions acquired");
        }
    }

    fn publish(&self) {
        let next = Assignment {
            partitions: self.held.iter().map(|(p, h)| (*p, h.epoch)).collect(),
            members: self.view.clone().unwrap_or_default(),
        };
        self.tx.send_if_modified(|current| {
            if *current == next {
                false
            } else {
                *current = next;
                true
            }
        });
    }

    /// The graceful leave: an empty assignment, every partition released, the membership ended.
    async fn leave(mut self) -> Result<()> {
        self.held.clear();
        self.view = None;
        self.publish();
        let all: Vec<u32> = (0..self.partitions).collect();
        let mut first_error = None;
        for chunk in all.chunks(MAX_PARTITIONS_PER_CALL) {
            let op = self
                .store
                .release_partitions(&self.group, chunk, &self.owner);
            if let Err(e) = self.bounded("release", None, op).await {
                warn!(group = %self.group, node = %self.node, error = %e, "release on leave failed; the partitions pass on when their leases expire");
                first_error.get_or_insert(e);
            }
        }
        let op = MembershipStore::leave(&*self.store, &self.service, &self.node);
        if let Err(e) = self.bounded("leave", None, op).await {
            warn!(group = %self.group, node = %self.node, error = %e, "leave failed; the membership ends when its record expires");
            first_error.get_or_insert(e);
        }
        info!(group = %self.group, node = %self.node, "group worker left");
        first_error.map_or(Ok(()), Err)
    }
}
