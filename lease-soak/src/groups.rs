//! The group phase: group workers share one group's partitions while a seeded schedule stalls,
//! cuts and blips one worker's connection at a time, one worker leaves gracefully and joins
//! again, another is dropped without a leave, and the server restarts (the lease phase's
//! restart: both phases run at once on the same server).
//!
//! An [`AssignmentAudit`] watches every worker's published assignment (every 5 ms and on every
//! change) for a partition held by two workers at once or under an epoch lower than one already
//! seen. Each worker also has a simulated consumer that records when it starts and stops working
//! each partition, and under which epoch: half of them stop soon after a partition leaves and
//! acknowledge the stop ([`StopAck`](lease::group::StopAck)), the others go on working for half
//! the grace and never acknowledge. The audit fails on two consumers working one partition at
//! once, and on a holding whose epoch is not above every earlier holding's of that partition. Once every fault and event is over (and the server is back), and every live worker's
//! store answers again (a client may still be waiting between reconnection attempts), the
//! assignment must settle — every partition held by exactly one live worker, fair shares —
//! within [`GroupWorker::crash_settle_time`] plus a second, stay settled for a lease, and agree
//! with the store's [`owners`](PartitionStore::owners); then every worker leaves and the store
//! must hold no live partition lease and no live member.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease::backend::membership::MembershipStore;
use lease::backend::partitions::PartitionStore;
use lease::{Assignment, GroupWorker, Timings};
use lease_conformance::GroupStore;
use lease_conformance::{AssignmentAudit, ConsumerPlan, assignments_settled};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use crate::cli::Args;
use crate::report::{GroupReport, Settle};
use crate::schedule::{GroupAction, GroupSchedule, Mode};
use crate::stores::{LyingGroups, Switch};

/// How often the audit reads each worker's assignment (besides every change).
const AUDIT_EVERY: Duration = Duration::from_millis(5);
/// How often the phase checks whether the assignment has settled.
const POLL: Duration = Duration::from_millis(10);
/// What the final settle may take beyond `GroupWorker::crash_settle_time`: the store
/// operations of the ticks, a client reconnecting.
const SETTLE_MARGIN: Duration = Duration::from_secs(1);
/// How long every live worker's store may take to answer again once the faults are over.
const STORES_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a worker that joins again keeps trying to start (a store that does not answer).
const REJOIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an assignment that missed its bound is watched for the evidence: whether it
/// settles late, and when.
const LATE_WATCH: Duration = Duration::from_secs(10);
/// How long the audit's watchers may take to end once every worker has left.
const WATCHERS_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the server's restart stands, as the lease phase's restarter tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restart {
    /// Still to come.
    Ahead,
    /// The server is stopped.
    Down,
    /// Over (the server is back, or the restart failed), or none planned.
    Over,
}

/// The group workers' stores, each reached through its own fault switch.
pub(crate) struct GroupSetup {
    /// One store per worker.
    pub(crate) stores: Vec<Arc<dyn GroupStore>>,
    /// The switch of each worker's connection.
    pub(crate) switches: Vec<Switch>,
}

/// The schedule of the group phase for `backend`.
pub(crate) fn schedule_for(backend: &str, args: &Args) -> GroupSchedule {
    GroupSchedule::generate(
        args.seed,
        backend,
        args.duration(),
        args.group_workers(),
        args.lease(),
    )
}

/// One worker's place: its store, switch and current incarnation.
struct Slot {
    node: String,
    store: Arc<dyn GroupStore>,
    switch: Switch,
    incarnation: u32,
    worker: Option<GroupWorker>,
}

/// Settle times after events, each measured until the first settled observation.
#[derive(Default)]
struct Tracker {
    pending: Option<(&'static str, Instant)>,
    settles: Vec<Settle>,
}

impl Tracker {
    /// An event: the previous one, if still unsettled, is recorded as interrupted.
    fn event(&mut self, after: &'static str) {
        self.interrupt();
        self.pending = Some((after, Instant::now()));
    }

    /// Something that unsettles everything (the server going down) without an event of its own.
    fn interrupt(&mut self) {
        if let Some((after, _)) = self.pending.take() {
            self.settles.push(Settle { after, took: None });
        }
    }

    fn settled(&mut self) {
        if let Some((after, at)) = self.pending.take() {
            self.settles.push(Settle {
                after,
                took: Some(at.elapsed()),
            });
        }
    }
}

/// Records every (partition, epoch) pair a worker publishes, until its channel closes.
fn track_epochs(
    seen: Arc<Mutex<HashSet<(u32, u64)>>>,
    mut rx: watch::Receiver<Assignment>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let pairs: Vec<(u32, u64)> = rx
                .borrow_and_update()
                .partitions
                .iter()
                .map(|(p, e)| (*p, *e))
                .collect();
            seen.lock().unwrap_or_else(|p| p.into_inner()).extend(pairs);
            if rx.changed().await.is_err() {
                break;
            }
        }
    })
}

/// The group phase of one backend.
struct GroupRun {
    group: String,
    partitions: u32,
    timings: Timings,
    slots: Vec<Slot>,
    audit: AssignmentAudit,
    seen: Arc<Mutex<HashSet<(u32, u64)>>>,
    watchers: Vec<JoinHandle<()>>,
    tracker: Tracker,
    restart: watch::Receiver<Restart>,
    restart_state: Restart,
    rejoins: usize,
    crashes: usize,
    errors: Vec<String>,
}

impl GroupRun {
    /// Starts the worker of slot `i` (a new incarnation) and puts it under watch.
    async fn start(&mut self, i: usize) -> lease::Result<()> {
        let Some(slot) = self.slots.get_mut(i) else {
            return Ok(());
        };
        let worker =
            GroupWorker::builder(Arc::clone(&slot.store), self.group.clone(), self.partitions)
                .node(slot.node.clone())
                .address(format!("{}.soak:7000", slot.node))
                .timings(self.timings)
                .start()
                .await?;
        slot.incarnation += 1;
        let label = format!("{}#{}", slot.node, slot.incarnation);
        self.watchers
            .push(self.audit.watch(&label, worker.assignment(), AUDIT_EVERY));
        // Half the consumers stop soon and acknowledge; the others take half the grace and
        // never acknowledge (the worker must then wait the grace out).
        let plan = if i.is_multiple_of(2) {
            ConsumerPlan {
                stop_after: AUDIT_EVERY,
                acks: Some(worker.stop_acks()),
            }
        } else {
            ConsumerPlan {
                stop_after: self.timings.grace() / 2,
                acks: None,
            }
        };
        self.watchers
            .push(self.audit.consume(&label, worker.assignment(), plan));
        self.watchers
            .push(track_epochs(Arc::clone(&self.seen), worker.assignment()));
        slot.worker = Some(worker);
        Ok(())
    }

    /// The current assignment of every live worker.
    fn snapshot(&self) -> Vec<Assignment> {
        self.slots
            .iter()
            .filter_map(|s| s.worker.as_ref())
            .map(|w| w.assignment().borrow().clone())
            .collect()
    }

    fn is_settled(&self) -> bool {
        assignments_settled(&self.snapshot(), self.partitions)
    }

    /// Each live worker's partitions and member view, for a failure message.
    fn describe(&self) -> String {
        let workers: Vec<String> = self
            .slots
            .iter()
            .filter_map(|s| {
                s.worker
                    .as_ref()
                    .map(|w| (s, w.assignment().borrow().clone()))
            })
            .map(|(s, a)| {
                format!(
                    "{}#{} holds {:?} and sees {:?}",
                    s.node,
                    s.incarnation,
                    a.partitions.keys().collect::<Vec<_>>(),
                    a.members
                )
            })
            .collect();
        workers.join("; ")
    }

    /// Notes the restart's progress and whether the assignment has settled.
    fn poll(&mut self) {
        if self.restart.has_changed().unwrap_or(false) {
            let state = *self.restart.borrow_and_update();
            match (self.restart_state, state) {
                (_, Restart::Down) => self.tracker.interrupt(),
                (Restart::Down, Restart::Over) => self.tracker.event("restart"),
                _ => {}
            }
            self.restart_state = state;
        }
        if self.tracker.pending.is_some() && self.is_settled() {
            self.tracker.settled();
        }
    }

    /// Polls until `when`.
    async fn wait_until(&mut self, when: Instant) {
        // Bounded: ends at `when`.
        loop {
            self.poll();
            let now = Instant::now();
            if now >= when {
                break;
            }
            sleep_until(when.min(now + POLL)).await;
        }
    }

    /// Polls until the restart is over (it always ends: the restarter's steps are bounded).
    async fn wait_for_restart(&mut self) {
        while self.restart_state != Restart::Over {
            if self.restart.has_changed().is_err() {
                // The restarter is gone: nothing more will happen.
                break;
            }
            self.wait_until(Instant::now() + POLL).await;
        }
    }

    /// Waits until every live worker's store answers a member read, each try bounded by the
    /// attempt timeout, for up to [`STORES_TIMEOUT`]; returns how long that took, or `None`
    /// (and an error naming the silent worker) when one did not answer.
    async fn wait_for_stores(&mut self) -> Option<Duration> {
        let began = Instant::now();
        let live: Vec<(String, Arc<dyn GroupStore>)> = self
            .slots
            .iter()
            .filter(|s| s.worker.is_some())
            .map(|s| (s.node.clone(), Arc::clone(&s.store)))
            .collect();
        for (node, store) in live {
            // Bounded: ends `STORES_TIMEOUT` after `began`.
            loop {
                let read = timeout(self.timings.attempt_timeout(), store.members(&self.group));
                if read.await.is_ok_and(|r| r.is_ok()) {
                    break;
                }
                if began.elapsed() > STORES_TIMEOUT {
                    self.errors.push(format!(
                        "{node}'s store did not answer within {STORES_TIMEOUT:?} after the faults"
                    ));
                    return None;
                }
                sleep(POLL * 5).await;
            }
        }
        Some(began.elapsed())
    }

    /// The store of a live worker, for the checks.
    fn a_live_store(&self) -> Option<Arc<dyn GroupStore>> {
        self.slots
            .iter()
            .find(|s| s.worker.is_some())
            .map(|s| Arc::clone(&s.store))
    }

    /// The settled assignment stays settled for `steady` (no fault, no event: nothing should
    /// move).
    async fn check_steady(&mut self, steady: Duration) {
        let settled_at = Instant::now();
        // Bounded: ends `steady` after `settled_at`.
        while settled_at.elapsed() < steady {
            if !self.is_settled() {
                self.errors.push(format!(
                    "the settled assignment came apart {:.2} s later without a fault: {}",
                    settled_at.elapsed().as_secs_f64(),
                    self.describe()
                ));
                return;
            }
            sleep(POLL).await;
        }
    }

    /// The store agrees with the settled assignment (a few tries: the snapshot and the read are
    /// not one instant).
    async fn check_store_agrees(&mut self) {
        let Some(store) = self.a_live_store() else {
            return;
        };
        let mut disagreement = None;
        for _ in 0..3 {
            disagreement = self.store_disagrees(store.as_ref()).await;
            if disagreement.is_none() {
                return;
            }
            sleep(POLL * 10).await;
        }
        if let Some(d) = disagreement {
            self.errors
                .push(format!("the store disagrees with the assignment: {d}"));
        }
    }

    /// Every live worker leaves at once; the store must then hold nothing live for the group,
    /// and every audit watcher end.
    async fn leave_all(&mut self) {
        let check_store = self.a_live_store();
        let leaving: Vec<(String, JoinHandle<lease::Result<()>>)> = self
            .slots
            .iter_mut()
            .filter_map(|s| {
                s.worker
                    .take()
                    .map(|w| (s.node.clone(), tokio::spawn(w.leave())))
            })
            .collect();
        for (node, handle) in leaving {
            match handle.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => self
                    .errors
                    .push(format!("{node}: the final leave failed: {e}")),
                Err(e) => self.errors.push(format!("{node}: leaving: {e}")),
            }
        }
        if let Some(store) = check_store {
            let attempt = self.timings.attempt_timeout();
            match timeout(attempt, store.owners(&self.group)).await {
                Ok(Ok(o)) if o.is_empty() => {}
                Ok(Ok(o)) => self.errors.push(format!(
                    "{} partition leases still live after every worker left: {:?}",
                    o.len(),
                    o.iter().map(|l| l.partition).collect::<BTreeSet<_>>()
                )),
                Ok(Err(e)) => self
                    .errors
                    .push(format!("reading the owners after the leaves: {e}")),
                Err(_) => self.errors.push(format!(
                    "reading the owners after the leaves: no answer within {attempt:?}"
                )),
            }
            match timeout(attempt, store.members(&self.group)).await {
                Ok(Ok(m)) if m.is_empty() => {}
                Ok(Ok(m)) => self.errors.push(format!(
                    "members still live after every worker left: {:?}",
                    m.iter().map(|m| m.node.as_str()).collect::<Vec<_>>()
                )),
                Ok(Err(e)) => self
                    .errors
                    .push(format!("reading the members after the leaves: {e}")),
                Err(_) => self.errors.push(format!(
                    "reading the members after the leaves: no answer within {attempt:?}"
                )),
            }
        }
        for handle in std::mem::take(&mut self.watchers) {
            if timeout(WATCHERS_TIMEOUT, handle).await.is_err() {
                self.errors
                    .push("an assignment watcher did not end after its worker left".to_owned());
            }
        }
    }

    fn set(&self, worker: usize, mode: Mode) {
        if let Some(slot) = self.slots.get(worker) {
            slot.switch.set(mode);
        }
    }

    async fn apply(&mut self, action: GroupAction, schedule: &GroupSchedule) {
        match action {
            GroupAction::FaultStarts(i) => {
                if let Some(f) = schedule.faults.get(i) {
                    self.set(f.worker, f.mode);
                }
            }
            GroupAction::FaultEnds(i) => {
                if let Some(f) = schedule.faults.get(i) {
                    self.set(f.worker, Mode::Pass);
                }
            }
            GroupAction::Leave(w) => {
                let left = self.slots.get_mut(w).and_then(|s| s.worker.take());
                if let Some(worker) = left {
                    if let Err(e) = worker.leave().await {
                        self.errors
                            .push(format!("worker-{w}: the graceful leave failed: {e}"));
                    }
                    self.tracker.event("leave");
                }
            }
            GroupAction::Rejoin(w) => {
                let until = Instant::now() + REJOIN_TIMEOUT;
                // Bounded: ends at `until`.
                loop {
                    match self.start(w).await {
                        Ok(()) => {
                            self.rejoins += 1;
                            self.tracker.event("join");
                            break;
                        }
                        Err(e) if Instant::now() >= until => {
                            self.errors.push(format!(
                                "worker-{w} could not join again within {REJOIN_TIMEOUT:?}: {e}"
                            ));
                            break;
                        }
                        Err(_) => self.wait_until(Instant::now() + POLL * 10).await,
                    }
                }
            }
            GroupAction::Crash(w) => {
                // Cut first, so that the leave the dropped worker attempts in the background
                // fails: its partitions and membership must expire.
                self.set(w, Mode::Cut);
                let crashed = self.slots.get_mut(w).and_then(|s| s.worker.take());
                if crashed.is_some() {
                    drop(crashed);
                    self.crashes += 1;
                    self.tracker.event("crash");
                }
            }
            GroupAction::Calm => {}
        }
    }

    /// The store's live partition leases agree with the published assignments: `None`, or
    /// what differs.
    async fn store_disagrees(&self, store: &dyn GroupStore) -> Option<String> {
        let attempt = self.timings.attempt_timeout();
        let owners = match timeout(attempt, store.owners(&self.group)).await {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => return Some(format!("reading the owners failed: {e}")),
            Err(_) => return Some(format!("reading the owners: no answer within {attempt:?}")),
        };
        let live: Vec<&GroupWorker> = self
            .slots
            .iter()
            .filter_map(|s| s.worker.as_ref())
            .collect();
        if owners.len() != self.partitions as usize {
            return Some(format!(
                "{} live partition leases in the store for {} partitions",
                owners.len(),
                self.partitions
            ));
        }
        for lease in owners {
            let published = live
                .iter()
                .find(|w| w.owns(&lease.owner))
                .map(|w| w.assignment().borrow().epoch(lease.partition));
            if published != Some(Some(lease.epoch)) {
                return Some(format!(
                    "partition {} is leased to {} under epoch {}, which no live worker publishes \
                     (published: {published:?})",
                    lease.partition, lease.owner, lease.epoch
                ));
            }
        }
        None
    }
}

/// Watches an assignment that missed its bound until it settles or `until` after `calm`, and
/// says which, for the evidence (the run fails either way).
async fn late_settle(run: &mut GroupRun, calm: Instant, until: Duration) -> String {
    // Bounded: ends `until` after `calm`.
    while calm.elapsed() <= until {
        if run.is_settled() {
            return format!(
                "it settled {:.1} s after the calm: {}",
                calm.elapsed().as_secs_f64(),
                run.describe()
            );
        }
        sleep(POLL).await;
    }
    format!(
        "still not settled {:.1} s after the calm: {}",
        until.as_secs_f64(),
        run.describe()
    )
}

/// Runs the group phase: `start` is the start of the soak (the schedule's zero), `restart` the
/// restarter's progress.
pub(crate) async fn run(
    backend: &'static str,
    args: &Args,
    timings: Timings,
    setup: GroupSetup,
    start: Instant,
    restart: watch::Receiver<Restart>,
) -> GroupReport {
    let schedule = schedule_for(backend, args);
    let bound = GroupWorker::crash_settle_time(&timings) + SETTLE_MARGIN;
    let restart_state = *restart.borrow();
    let slots: Vec<Slot> = setup
        .stores
        .into_iter()
        .zip(setup.switches)
        .enumerate()
        .map(|(i, (store, switch))| Slot {
            node: format!("worker-{i}"),
            store: if args.break_group_renewals {
                Arc::new(LyingGroups::wrap(store, args.lease()))
            } else {
                store
            },
            switch,
            incarnation: 0,
            worker: None,
        })
        .collect();
    let workers = slots.len();
    let mut run = GroupRun {
        group: format!("soak-{backend}-{}-group", args.seed),
        partitions: args.group_partitions,
        timings,
        slots,
        audit: AssignmentAudit::new(),
        seen: Arc::default(),
        watchers: Vec::new(),
        tracker: Tracker::default(),
        restart,
        restart_state,
        rejoins: 0,
        crashes: 0,
        errors: Vec::new(),
    };

    for i in 0..workers {
        // A worker's first heartbeat is bounded by the attempt timeout, so on a busy store
        // (SQLite's one writer, with the mixed-count claimers racing beside) `start` may answer
        // a temporary error with the outcome unknown; a user starts again, and so does the
        // soak, within the bound of a re-join. Any other error, or one past it, fails the run.
        let until = Instant::now() + REJOIN_TIMEOUT;
        loop {
            match run.start(i).await {
                Ok(()) => break,
                Err(e) if e.is_temporary() && Instant::now() < until => {
                    run.wait_until(Instant::now() + POLL * 10).await;
                }
                Err(e) => {
                    run.errors.push(format!("worker-{i} did not start: {e}"));
                    break;
                }
            }
        }
    }
    run.tracker.event("start");
    for (at, action) in schedule.actions() {
        run.wait_until(start + at).await;
        run.apply(action, &schedule).await;
    }

    // Calm: every fault and event is over; the restart too, once it is.
    run.wait_for_restart().await;
    run.tracker.interrupt();
    // The bound assumes the store answers: wait until every live worker's client does again
    // (a client may still be backing off between reconnection attempts after the outages).
    let stores_back = run.wait_for_stores().await;
    let calm = Instant::now();
    let mut final_settle = None;
    let mut unsettled = None;
    // A fault that ended just before the calm can still make a worker's partitions lapse up to
    // `deadline` after it (the worker had no successful renewal since, and a lapsed partition
    // comes back only after its drain and a tick, under a higher epoch): the final settle is
    // looked for once every such deadline has passed, still within the bound from the calm.
    let lapses_over = calm + timings.deadline();
    // Bounded: ends `bound` after `calm`.
    loop {
        if Instant::now() >= lapses_over && run.is_settled() {
            final_settle = Some(calm.elapsed());
            break;
        }
        if calm.elapsed() > bound {
            // The failure stands; for its evidence, how it looked at the bound, when the calm
            // began (to place it against the node kills' times) and whether and when it
            // settled after all.
            let view = run.describe();
            let late = late_settle(&mut run, calm, bound + LATE_WATCH).await;
            unsettled = Some(format!(
                "at the bound: {view}; the calm began {:.1} s into the run; {late}",
                calm.duration_since(start).as_secs_f64()
            ));
            break;
        }
        sleep(POLL).await;
    }
    let steady = timings.lease();
    if final_settle.is_some() {
        run.check_steady(steady).await;
        run.check_store_agrees().await;
    }
    run.leave_all().await;
    if run.audit.work_intervals() == 0 {
        run.errors
            .push("no consumer ever worked a partition: the work audit saw nothing".to_owned());
    }

    let seen = run.seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let distinct: BTreeSet<u32> = seen.iter().map(|(p, _)| *p).collect();
    GroupReport {
        backend,
        workers,
        partitions: run.partitions,
        stalls: schedule.stalls(),
        cuts: schedule.cuts(),
        blips: schedule.blips(),
        restarts: 0,
        rejoins: run.rejoins,
        crashes: run.crashes,
        observations: run.audit.observations(),
        work_intervals: run.audit.work_intervals(),
        handovers: (seen.len() - distinct.len()) as u64,
        violations: run.audit.violations(),
        settles: run.tracker.settles,
        stores_back,
        final_settle,
        unsettled,
        bound,
        steady,
        errors: run.errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_before_the_settle_interrupts_it() {
        let mut t = Tracker::default();
        t.event("leave");
        t.event("join");
        t.settled();
        t.settled();
        assert_eq!(t.settles.len(), 2);
        assert_eq!(t.settles[0].took, None);
        assert_eq!(t.settles[1].after, "join");
        assert!(t.settles[1].took.is_some());
    }
}
