//! The worker's task: heartbeats on a schedule of their own and, beside them, ticks that watch
//! members, renew, give up, acquire and publish.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::assign::assign;
use super::assignment::{AckBox, Assignment};
use super::owners::Owners;
use crate::clock::{Deadline, Stamp};
use crate::store::error::{Error, Result};
use crate::store::lease_store::{LeaseStore, membership_of, partitions_of};
use crate::store::notify::Wakeups;
use crate::store::partitions::MAX_PARTITIONS_PER_CALL;
use crate::telemetry;
use crate::timings::Timings;

/// How many times a step of the graceful leave is tried while it fails with a temporary error.
const LEAVE_TRIES: u32 = 3;

/// A partition in the published assignment.
#[derive(Debug, Clone)]
struct Held {
    epoch: u64,
    /// The owner id it was acquired under.
    owner: Owner,
    /// The local deadline: the start of the last successful acquire or renewal plus `deadline`.
    deadline: Deadline,
}

/// A partition taken out of the published assignment (given up, lost, or left) that the store
/// may still hold under this owner: it is released once its consumer acknowledged the stop or
/// the grace has passed, and only a release that the store answered ends it. Until then it is
/// not acquired again, so its next holding — by anyone, this node included — gets a higher
/// epoch.
#[derive(Debug, Clone)]
struct Draining {
    epoch: u64,
    owner: Owner,
    /// The lease's local deadline while it is still renewed (a partition given up, until it is
    /// due); `None` once lapsed, or for a partition that was lost.
    renewed_until: Option<Deadline>,
    /// The end of the consumer's grace, from the removal's publication.
    grace: Deadline,
    /// The consumer said it stopped.
    acked: bool,
    /// A release failed: it is tried again at every tick, not between ticks.
    retry: bool,
}

impl Draining {
    fn due(&self) -> bool {
        self.acked || self.grace.has_passed()
    }
}

/// An owner id, shared between the partitions held under it.
type Owner = Arc<str>;

/// What a worker's task starts from: the builder's settings, once checked and heartbeated.
pub(super) struct Start {
    pub(super) store: Arc<dyn LeaseStore>,
    pub(super) group: String,
    pub(super) service: String,
    pub(super) node: String,
    pub(super) address: String,
    pub(super) owner: String,
    pub(super) owners: Arc<Owners>,
    pub(super) partitions: u32,
    pub(super) timings: Timings,
    pub(super) groups: Vec<String>,
    pub(super) acks: Arc<AckBox>,
    pub(super) tx: watch::Sender<Assignment>,
    pub(super) hints: Option<Wakeups>,
    /// When the task's first heartbeat is due: `renew_every` after the start of the builder's.
    pub(super) first_beat: Deadline,
}

/// The membership heartbeats of a worker, on a schedule of their own: one every `renew_every`
/// from the start of the one before, each bounded by the attempt timeout, whatever the ticks are
/// doing. A heartbeat that outlasts `renew_every` is followed by the next one at once, never
/// overlapped by it; so while the store answers within the attempt timeout, the member record
/// is refreshed at most `renew_every + attempt_timeout` apart, well within its lifetime
/// (`lease`). A failed heartbeat is retried at the next beat, not sooner.
pub(super) struct Heartbeats {
    store: Arc<dyn LeaseStore>,
    group: String,
    service: String,
    node: String,
    address: String,
    groups: Vec<String>,
    timings: Timings,
    first: Deadline,
}

impl Heartbeats {
    fn new(start: &Start) -> Heartbeats {
        Heartbeats {
            store: Arc::clone(&start.store),
            group: start.group.clone(),
            service: start.service.clone(),
            node: start.node.clone(),
            address: start.address.clone(),
            groups: start.groups.clone(),
            timings: start.timings,
            first: start.first_beat,
        }
    }

    /// Heartbeats until `stop`. A heartbeat under way when `stop` comes is let finish (or given
    /// up at its attempt timeout) before this returns, so that a leave after it is not undone by
    /// the heartbeat landing later — except one given up whose request still reaches the store.
    async fn run(self, stop: &CancellationToken) {
        let mut due = self.first;
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                () = due.reached() => {}
            }
            due = Deadline::in_(self.timings.renew_every());
            self.beat().await;
        }
    }

    async fn beat(&self) {
        let attempt = self.timings.attempt_timeout();
        let cut = Deadline::in_(attempt);
        let op = async {
            membership_of(&*self.store)?
                .heartbeat(
                    &self.service,
                    &self.node,
                    &self.address,
                    self.timings.lease(),
                    &self.groups,
                )
                .await
        };
        let answer = tokio::select! {
            biased;
            r = op => r,
            () = cut.reached() => Err(Error::timeout("heartbeat", attempt)),
        };
        if let Err(e) = answer {
            warn!(group = %self.group, node = %self.node, error = %e, "heartbeat failed; retrying at the next beat");
        }
    }
}

pub(super) struct Run {
    store: Arc<dyn LeaseStore>,
    group: String,
    service: String,
    node: String,
    /// The current generation's owner id: new acquires use it.
    owner: Owner,
    owners: Arc<Owners>,
    partitions: u32,
    timings: Timings,
    held: BTreeMap<u32, Held>,
    draining: BTreeMap<u32, Draining>,
    /// Partitions whose acquire had no answer, with the owner id tried: read back by the next
    /// renewal.
    unsure: BTreeMap<u32, Owner>,
    /// Partitions read back as this worker's that are not its share and were never published:
    /// released at the next give-up.
    strays: BTreeMap<u32, Owner>,
    view: Option<Vec<String>>,
    /// This node's share under `view`.
    share: BTreeSet<u32>,
    acks: Arc<AckBox>,
    tx: watch::Sender<Assignment>,
    /// How many partitions the last publication had (what this worker adds to the gauge).
    published: usize,
    /// Since the member list changed, until the assignment matches the share again.
    rebalancing: Option<Stamp>,
    /// Partitions of the share the last acquire found held by someone else.
    waiting: BTreeSet<u32>,
    /// The store's hints for the group's topic: a release by a leaving node, a member joining
    /// or leaving, wakes the worker for a tick at once instead of at the next one.
    hints: Option<Wakeups>,
}

impl Drop for Run {
    fn drop(&mut self) {
        // The task ended (or was dropped with its runtime): it holds nothing any more.
        telemetry::group_held(&self.group, self.published, 0);
    }
}

/// The earliest of some deadlines (the one with the least time left).
fn earliest(deadlines: impl Iterator<Item = Deadline>) -> Option<Deadline> {
    deadlines.min_by_key(Deadline::remaining)
}

impl Run {
    /// The worker's task and its heartbeats, from the builder's settings.
    pub(super) fn new(start: Start) -> (Run, Heartbeats) {
        let beats = Heartbeats::new(&start);
        let run = Run {
            store: start.store,
            group: start.group,
            service: start.service,
            node: start.node,
            owner: Arc::from(start.owner.as_str()),
            owners: start.owners,
            partitions: start.partitions,
            timings: start.timings,
            held: BTreeMap::new(),
            draining: BTreeMap::new(),
            unsure: BTreeMap::new(),
            strays: BTreeMap::new(),
            view: None,
            share: BTreeSet::new(),
            acks: start.acks,
            tx: start.tx,
            published: 0,
            rebalancing: None,
            waiting: BTreeSet::new(),
            hints: start.hints,
        };
        (run, beats)
    }

    /// Runs the worker until `stop`, then leaves. The heartbeats run beside the ticks in this
    /// task, so a slow tick does not delay them. On `stop` the assignment is emptied at once;
    /// the membership ends only once the heartbeats have stopped and the one under way, if any,
    /// finished or was given up at its attempt timeout, so that a heartbeat the store answers
    /// never lands after the leave. That wait is the remaining time of one heartbeat at most.
    /// A heartbeat given up may still land late: [`Run::leave`] ends the membership once more
    /// at its end.
    pub(super) async fn run(mut self, beats: Heartbeats, stop: CancellationToken) -> Result<()> {
        tokio::join!(beats.run(&stop), async {
            self.ticks(&stop).await;
            self.withdraw();
        });
        self.leave().await
    }

    /// Ticks until `stop`: every `renew_every`, and at once (after a jitter) on a hint.
    async fn ticks(&mut self, stop: &CancellationToken) {
        let acks = Arc::clone(&self.acks);
        let mut next = Deadline::in_(Duration::ZERO);
        loop {
            // Until the next tick, wake at every local deadline and end of a grace on the way,
            // and whenever the consumer acknowledges a stop.
            while !next.has_passed() {
                let wake = self.next_wake().map_or(next, |w| w.min(next));
                let hinted = tokio::select! {
                    () = stop.cancelled() => return,
                    () = acks.notify.notified() => false,
                    () = wake.reached() => false,
                    () = crate::engine::wait::next_hint(&mut self.hints) => true,
                };
                self.take_acks();
                self.drop_lapsed();
                self.release_due(false).await;
                if hinted {
                    // A partition was released or taken, or a member joined or left: tick now
                    // (after a small random jitter, so that one change does not make every
                    // worker of the group ask at the same instant). The tick's reads decide.
                    let spread = Deadline::in_(crate::engine::wait::hint_jitter(&self.timings));
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = spread.reached() => {}
                    }
                    break;
                }
            }
            next = Deadline::in_(self.timings.renew_every());
            // The hints so far are covered by this tick's reads. Those that arrive during the
            // tick are kept, even though most are the tick's own changes: another node's
            // release read too early by this tick must still wake it (one more tick, which
            // finds nothing to do when nothing else changed).
            if let Some(h) = &mut self.hints {
                h.mark_seen();
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.tick() => {}
            }
        }
    }

    fn earliest_deadline(&self) -> Option<Deadline> {
        earliest(self.held.values().map(|h| h.deadline))
    }

    /// When the task has something to do before the next tick: a held partition's deadline,
    /// the end of a drain's grace (at once for an acknowledged one).
    fn next_wake(&self) -> Option<Deadline> {
        let drains = self.draining.values().filter(|d| !d.retry).map(|d| {
            if d.acked {
                Deadline::in_(Duration::ZERO)
            } else {
                d.grace
            }
        });
        earliest(self.held.values().map(|h| h.deadline).chain(drains))
    }

    /// One store operation, bounded by the attempt timeout and by `cut` (a local deadline).
    ///
    /// Every operation of a tick is cut at the earliest local deadline of the partitions held,
    /// and the tick drops lapsed partitions after each, so a partition leaves the assignment at
    /// its deadline whatever the store is doing — also when the machine was suspended during
    /// the operation (the cut is a [`Deadline`], woken at a resume).
    async fn bounded<T>(
        &self,
        what: &str,
        cut: Option<Deadline>,
        op: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let attempt = self.timings.attempt_timeout();
        let cut = cut.map_or(Deadline::in_(attempt), |c| c.min(Deadline::in_(attempt)));
        let bound = cut.remaining();
        tokio::select! {
            biased;
            r = op => r,
            () = cut.reached() => Err(Error::timeout(what, bound)),
        }
    }

    /// A step of the leave, `op()` within the attempt timeout, tried again while it fails with
    /// a temporary error, up to [`LEAVE_TRIES`] tries `renew_every / 2` apart (bounded: a few
    /// attempt timeouts). Only for idempotent steps: a try whose answer was lost may have taken
    /// effect.
    async fn confirmed<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut tries = 1;
        loop {
            match self.bounded(what, None, op()).await {
                Err(e) if e.is_temporary() && tries < LEAVE_TRIES => {
                    debug!(group = %self.group, node = %self.node, error = %e, tries, "{what} on leave failed; trying again");
                    tries += 1;
                    Deadline::in_(self.timings.renew_every() / 2)
                        .reached()
                        .await;
                }
                answer => return answer,
            }
        }
    }

    /// One tick: read the members, renew, release what is due, give up, acquire, publish. The
    /// heartbeat is not part of it (see [`Heartbeats`]): a tick may take longer than
    /// `renew_every` on a slow store without the member record lapsing.
    async fn tick(&mut self) {
        let members = self
            .bounded("members", self.earliest_deadline(), async {
                membership_of(&*self.store)?.members(&self.service).await
            })
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
        // The share first, so that the renewal's read-back of unknown acquires adopts only
        // what is still this node's.
        if let Some(view) = &view
            && self.view.as_ref() != Some(view)
        {
            info!(group = %self.group, node = %self.node, members = ?view, "members changed");
            self.rebalancing.get_or_insert_with(Stamp::now);
            // The share changes only with the member list: computed once per change, not per
            // tick (the assignment sorts partitions × members pairs).
            let me = view.iter().position(|n| n == &self.node);
            self.share = assign(&self.group, self.partitions, view)
                .into_iter()
                .zip(0u32..)
                .filter(|(owner, _)| Some(*owner) == me)
                .map(|(_, p)| p)
                .collect();
            self.view = Some(view.clone());
        }
        self.renew().await;
        self.take_acks();
        self.release_due(true).await;
        if view.is_none() {
            return;
        }
        let mine = self.share.clone();
        self.give_up(&mine).await;
        self.acquire(&mine).await;
        self.publish();
        self.check_settled();
    }

    /// Records the rebalance's time once this worker holds exactly its share, with nothing
    /// draining or of unknown outcome.
    fn check_settled(&mut self) {
        let Some(since) = self.rebalancing else {
            return;
        };
        let settled = self.draining.is_empty()
            && self.unsure.is_empty()
            && self.held.len() == self.share.len()
            && self.share.iter().all(|p| self.held.contains_key(p));
        if settled {
            self.rebalancing = None;
            telemetry::group_rebalanced(&self.group, since.elapsed());
        }
    }

    /// Renews every held partition, every partition still draining within its grace, and reads
    /// back every acquire of unknown outcome — in batches of at most
    /// [`MAX_PARTITIONS_PER_CALL`]. Each batch is cut at the earliest deadline of all held
    /// partitions, and lapsed partitions are dropped between batches.
    async fn renew(&mut self) {
        // By owner id: one batch per generation still holding something (usually one).
        let mut by_owner: BTreeMap<Owner, BTreeSet<u32>> = BTreeMap::new();
        for (p, h) in &self.held {
            by_owner.entry(Arc::clone(&h.owner)).or_default().insert(*p);
        }
        for (p, d) in &self.draining {
            if d.renewed_until.is_some() && !d.due() {
                by_owner.entry(Arc::clone(&d.owner)).or_default().insert(*p);
            }
        }
        for (p, owner) in &self.unsure {
            by_owner.entry(Arc::clone(owner)).or_default().insert(*p);
        }
        for (owner, keys) in by_owner {
            let keys: Vec<u32> = keys.into_iter().collect();
            for chunk in keys.chunks(MAX_PARTITIONS_PER_CALL) {
                self.drop_lapsed();
                let started = Stamp::now();
                let lease = self.timings.lease();
                let op = async {
                    partitions_of(&*self.store)?
                        .renew_partitions(&self.group, chunk, &owner, lease)
                        .await
                };
                match self.bounded("renewal", self.earliest_deadline(), op).await {
                    Ok(leases) => {
                        let answered: BTreeMap<u32, u64> = leases
                            .into_iter()
                            .filter(|l| *l.owner == *owner)
                            .map(|l| (l.partition, l.epoch))
                            .collect();
                        let deadline = started.deadline_after(self.timings.deadline());
                        for &p in chunk {
                            self.renewed(p, &owner, answered.get(&p).copied(), deadline);
                        }
                    }
                    Err(e) => {
                        warn!(group = %self.group, node = %self.node, error = %e, "renewal failed; retrying next tick");
                    }
                }
                self.drop_lapsed();
                self.publish();
            }
        }
    }

    /// The store's known answer for `p`: `Some(epoch)` when it holds `p` live under this owner
    /// (now renewed to `deadline`), `None` when it does not.
    fn renewed(&mut self, p: u32, owner: &Owner, answer: Option<u64>, deadline: Deadline) {
        if let Some(h) = self.held.get_mut(&p)
            && h.owner == *owner
        {
            match answer {
                Some(epoch) if epoch == h.epoch => h.deadline = deadline,
                _ => {
                    warn!(group = %self.group, node = %self.node, partition = p, "partition lost: the store no longer has it under this owner");
                    telemetry::group_handed_over(&self.group, "lost", 1);
                    // Drained under the epoch the consumer knows.
                    let (epoch, owner) = (h.epoch, Arc::clone(&h.owner));
                    self.held.remove(&p);
                    self.retire(p, epoch, owner, None);
                }
            }
        } else if let Some(d) = self.draining.get_mut(&p)
            && d.owner == *owner
        {
            match answer {
                Some(_) => d.renewed_until = Some(deadline),
                // The store holds it no longer: nothing to release, and the next acquire
                // gets a higher epoch. The consumer's grace is kept all the same.
                None => d.renewed_until = None,
            }
        } else if self.unsure.get(&p) == Some(owner) {
            self.unsure.remove(&p);
            let Some(epoch) = answer else { return };
            if self.share.contains(&p) && !self.held.contains_key(&p) {
                info!(group = %self.group, node = %self.node, partition = p, epoch, "partition adopted: an acquire whose answer was lost had taken effect");
                let owner = Arc::clone(owner);
                self.held.insert(
                    p,
                    Held {
                        epoch,
                        owner,
                        deadline,
                    },
                );
            } else {
                self.strays.insert(p, Arc::clone(owner));
            }
        }
    }

    /// Takes `p` (published until now under `epoch`) into the drain: the consumer has the grace
    /// from now to stop.
    fn retire(&mut self, p: u32, epoch: u64, owner: Owner, renewed_until: Option<Deadline>) {
        self.draining.insert(
            p,
            Draining {
                epoch,
                owner,
                renewed_until,
                grace: Deadline::in_(self.timings.grace()),
                acked: false,
                retry: false,
            },
        );
    }

    /// Applies the consumer's acknowledgements to the partitions draining under those epochs.
    fn take_acks(&mut self) {
        for (p, epoch) in self.acks.take() {
            if let Some(d) = self.draining.get_mut(&p)
                && d.epoch == epoch
            {
                d.acked = true;
            }
        }
    }

    /// Drops (and publishes the loss of) every partition past its local deadline: each goes into
    /// the drain, not renewed; a draining partition past its deadline is no longer renewed.
    fn drop_lapsed(&mut self) {
        let lapsed: Vec<(u32, u64, Owner)> = self
            .held
            .iter()
            .filter(|(_, h)| h.deadline.has_passed())
            .map(|(p, h)| (*p, h.epoch, Arc::clone(&h.owner)))
            .collect();
        for d in self.draining.values_mut() {
            if d.renewed_until.is_some_and(|r| r.has_passed()) {
                d.renewed_until = None;
            }
        }
        if lapsed.is_empty() {
            return;
        }
        warn!(group = %self.group, node = %self.node, partitions = ?lapsed.iter().map(|(p, _, _)| p).collect::<Vec<_>>(), "partitions lost: no renewal succeeded within the deadline");
        telemetry::group_handed_over(&self.group, "lost", lapsed.len());
        for (p, epoch, owner) in lapsed {
            self.held.remove(&p);
            self.retire(p, epoch, owner, None);
        }
        self.publish();
    }

    /// Releases the draining partitions that are due (acknowledged, or past the grace); those
    /// whose release failed only at a tick (`at_tick`). A release the store answered ends the
    /// drain.
    async fn release_due(&mut self, at_tick: bool) {
        let mut due: BTreeMap<Owner, Vec<u32>> = BTreeMap::new();
        for (p, d) in &self.draining {
            if (at_tick || !d.retry) && d.due() {
                due.entry(Arc::clone(&d.owner)).or_default().push(*p);
            }
        }
        for (owner, parts) in due {
            for chunk in parts.chunks(MAX_PARTITIONS_PER_CALL) {
                self.drop_lapsed();
                let op = async {
                    partitions_of(&*self.store)?
                        .release_partitions(&self.group, chunk, &owner)
                        .await
                };
                match self.bounded("release", self.earliest_deadline(), op).await {
                    Ok(_) => {
                        for p in chunk {
                            self.draining.remove(p);
                        }
                    }
                    Err(e) => {
                        warn!(group = %self.group, node = %self.node, error = %e, "release failed; retrying next tick (the partitions pass on when their leases expire)");
                        self.unanswered_release(&owner);
                        for p in chunk {
                            if let Some(d) = self.draining.get_mut(p) {
                                d.retry = true;
                            }
                        }
                    }
                }
            }
        }
    }

    /// A release under `owner` had no answer: it may still reach the store, so nothing is
    /// acquired under that owner id again.
    fn unanswered_release(&mut self, owner: &Owner) {
        if *owner == self.owner {
            self.owner = Arc::from(self.owners.next().as_str());
            info!(group = %self.group, node = %self.node, owner = %self.owner, "a release had no answer: acquiring under a new owner id from now on");
        }
    }

    /// Takes the partitions that are no longer this node's out of the assignment and publishes:
    /// they drain, and are released once their consumer acknowledged the stop or the grace has
    /// passed. Releases the strays at once (never published).
    async fn give_up(&mut self, mine: &BTreeSet<u32>) {
        let gone: Vec<u32> = self
            .held
            .keys()
            .filter(|p| !mine.contains(p))
            .copied()
            .collect();
        if !gone.is_empty() {
            for p in &gone {
                if let Some(h) = self.held.remove(p) {
                    self.retire(*p, h.epoch, h.owner, Some(h.deadline));
                }
            }
            self.publish();
            telemetry::group_handed_over(&self.group, "rebalance", gone.len());
            info!(group = %self.group, node = %self.node, partitions = ?gone, "giving partitions up: released once the consumer acknowledges the stop or the grace passes");
        }
        let mut strays: BTreeMap<Owner, Vec<u32>> = BTreeMap::new();
        for (p, owner) in std::mem::take(&mut self.strays) {
            strays.entry(owner).or_default().push(p);
        }
        for (owner, parts) in strays {
            for chunk in parts.chunks(MAX_PARTITIONS_PER_CALL) {
                let op = async {
                    partitions_of(&*self.store)?
                        .release_partitions(&self.group, chunk, &owner)
                        .await
                };
                if let Err(e) = self.bounded("release", self.earliest_deadline(), op).await {
                    warn!(group = %self.group, node = %self.node, error = %e, "release failed; reading the partitions back next tick");
                    self.unanswered_release(&owner);
                    for p in chunk {
                        self.unsure.insert(*p, Arc::clone(&owner));
                    }
                }
            }
        }
    }

    /// Acquires the partitions of this node's share it neither holds nor drains, one after
    /// another, until one tick's time (`renew_every`) has passed since the first or the store
    /// fails. That time counts from the first acquire, not from the tick's start, so a tick
    /// whose member read, renewals and releases outlast `renew_every` (a slow store) still
    /// acquires. An acquire without an answer is read back by the next renewal.
    async fn acquire(&mut self, mine: &BTreeSet<u32>) {
        let wanted: Vec<u32> = mine
            .iter()
            .filter(|p| {
                !self.held.contains_key(p)
                    && !self.draining.contains_key(p)
                    && !self.strays.contains_key(p)
            })
            .copied()
            .collect();
        let mut gained = Vec::new();
        let mut waiting = BTreeSet::new();
        // A new holding's deadline is later than every held one: the earliest stays put until
        // something lapses.
        let mut cut = self.earliest_deadline();
        let until = Deadline::in_(self.timings.renew_every());
        for p in wanted {
            if until.has_passed() {
                break;
            }
            if cut.is_some_and(|c| c.has_passed()) {
                self.drop_lapsed();
                cut = self.earliest_deadline();
            }
            let started = Stamp::now();
            let owner = Arc::clone(&self.owner);
            // An earlier acquire of unknown outcome under another owner id: read back first.
            if self.unsure.get(&p).is_some_and(|o| *o != owner) {
                continue;
            }
            let lease = self.timings.lease();
            let op = async {
                partitions_of(&*self.store)?
                    .acquire_partition(&self.group, p, &owner, lease)
                    .await
            };
            match self.bounded("acquire", cut, op).await {
                Ok(Some(lease)) => {
                    self.unsure.remove(&p);
                    let deadline = started.deadline_after(self.timings.deadline());
                    self.held.insert(
                        p,
                        Held {
                            epoch: lease.epoch,
                            owner,
                            deadline,
                        },
                    );
                    cut.get_or_insert(deadline);
                    gained.push(p);
                }
                Ok(None) => {
                    self.unsure.remove(&p);
                    waiting.insert(p);
                }
                Err(e) => {
                    warn!(group = %self.group, node = %self.node, partition = p, error = %e, "acquire failed; reading it back and retrying next tick");
                    self.unsure.insert(p, owner);
                    break;
                }
            }
        }
        if !gained.is_empty() {
            telemetry::group_acquired(&self.group, gained.len());
            info!(group = %self.group, node = %self.node, partitions = ?gained, "partitions acquired");
        }
        if waiting != self.waiting {
            if !waiting.is_empty() {
                info!(group = %self.group, node = %self.node, partitions = ?waiting, "partitions of this node's share are still held by their previous owner; trying again every tick");
            }
            self.waiting = waiting;
        }
    }

    fn publish(&mut self) {
        let next = Assignment {
            partitions: self.held.iter().map(|(p, h)| (*p, h.epoch)).collect(),
            members: self.view.clone().unwrap_or_default(),
        };
        let count = next.partitions.len();
        telemetry::group_held(&self.group, self.published, count);
        self.published = count;
        self.tx.send_if_modified(|current| {
            if *current == next {
                false
            } else {
                *current = next;
                true
            }
        });
    }

    /// The first step of the graceful leave, at `stop`: an empty assignment at once, every held
    /// partition taken into the drain.
    fn withdraw(&mut self) {
        telemetry::group_handed_over(&self.group, "leave", self.held.len());
        for (p, h) in std::mem::take(&mut self.held) {
            self.retire(p, h.epoch, h.owner, Some(h.deadline));
        }
        self.view = None;
        self.share.clear();
        self.publish();
    }

    /// The rest of the graceful leave, once [`withdraw`](Run::withdraw) has emptied the
    /// assignment and the heartbeats have stopped (never before: see [`Run::run`]): the
    /// membership ended at once; the partitions drain (renewed) until their consumer
    /// acknowledged each stop or the grace has passed; then every partition number of the group
    /// is released for this owner.
    ///
    /// Its answer tells whether the store confirmed the end state: no membership and nothing
    /// held. Every step is idempotent, so a step that fails with a temporary error is tried
    /// again (up to [`LEAVE_TRIES`] times in all), and the first leave's outcome is decided by
    /// the last one (a store that confirms replication, Redis with `replica_acks`, confirms with
    /// a later write every earlier one). An error means the store did not confirm some step:
    /// what it left behind expires with its record.
    async fn leave(mut self) -> Result<()> {
        let mut first_error = None;
        // The others rebalance while this node drains: they acquire as soon as it releases. Its
        // failure is not the leave's: the last leave below decides whether the membership ended.
        let op = async {
            membership_of(&*self.store)?
                .leave(&self.service, &self.node)
                .await
        };
        if let Err(e) = self.bounded("leave", None, op).await {
            debug!(group = %self.group, node = %self.node, error = %e, "leave failed; tried again once the partitions are released");
        }
        if !self.draining.is_empty() {
            info!(group = %self.group, node = %self.node, partitions = self.draining.len(), "leaving: the partitions are released once the consumer acknowledges each stop or the grace passes");
        }
        let acks = Arc::clone(&self.acks);
        let mut next = Deadline::in_(self.timings.renew_every());
        // Bounded: every drain is due at the latest at the end of its grace.
        loop {
            self.take_acks();
            self.drop_lapsed();
            self.release_due(false).await;
            if self.draining.values().all(Draining::due) {
                break;
            }
            if next.has_passed() {
                self.renew().await;
                next = Deadline::in_(self.timings.renew_every());
                continue;
            }
            let wake = self.next_wake().map_or(next, |w| w.min(next));
            tokio::select! {
                () = acks.notify.notified() => {}
                () = wake.reached() => {}
            }
        }
        // Every owner id that may still hold something: the current one (an acquire cut short
        // by the leave) and those of the partitions still draining or read back.
        let mut owners: BTreeSet<Owner> = BTreeSet::from([Arc::clone(&self.owner)]);
        owners.extend(self.draining.values().map(|d| Arc::clone(&d.owner)));
        owners.extend(self.unsure.values().cloned());
        owners.extend(self.strays.values().cloned());
        let all: Vec<u32> = (0..self.partitions).collect();
        for owner in owners {
            for chunk in all.chunks(MAX_PARTITIONS_PER_CALL) {
                let op = || async {
                    partitions_of(&*self.store)?
                        .release_partitions(&self.group, chunk, &owner)
                        .await
                };
                if let Err(e) = self.confirmed("release", op).await {
                    warn!(group = %self.group, node = %self.node, error = %e, "release on leave failed; the partitions pass on when their leases expire");
                    first_error.get_or_insert(e);
                }
            }
        }
        // End the membership once more: a heartbeat given up at its attempt timeout may have
        // reached the store after the first leave (a dropped future's request can still land)
        // and put this node back on the member list until its record expires.
        let op = || async {
            membership_of(&*self.store)?
                .leave(&self.service, &self.node)
                .await
        };
        if let Err(e) = self.confirmed("leave", op).await {
            warn!(group = %self.group, node = %self.node, error = %e, "leave failed; the membership ends when its record expires");
            first_error.get_or_insert(e);
        }
        info!(group = %self.group, node = %self.node, "group worker left");
        first_error.map_or(Ok(()), Err)
    }
}
