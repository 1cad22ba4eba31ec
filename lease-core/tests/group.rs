//! Group worker (balancer) tests on lease-local, in paused tokio time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_conformance::{AssignmentAudit, ConsumerPlan, FaultMode, assignments_settled, faulty};
use lease_core::layer::{Answer, Call, Hook, Intercept, Operation};
use lease_core::{
    Assignment, ErrorKind, GroupWorker, LeaseStore, Timings,
    backend::{LeaseStoreExt, membership::MembershipStore, partitions::PartitionStore},
};
use lease_local::MemoryStore;
use tokio::time::{Instant, sleep};

const GROUP: &str = "orders";
const N: u32 = 12;
const STEP: Duration = Duration::from_millis(10);

fn timings() -> Timings {
    Timings::default()
}

async fn worker(store: impl LeaseStore, node: &str, audit: &AssignmentAudit) -> GroupWorker {
    let w = GroupWorker::builder(store, GROUP, N)
        .node(node)
        .address(format!("{node}:7000"))
        .timings(timings())
        .start()
        .await
        .unwrap();
    audit.watch(node, w.assignment(), STEP);
    w
}

fn snapshot(workers: &[&GroupWorker]) -> Vec<Assignment> {
    workers
        .iter()
        .map(|w| w.assignment().borrow().clone())
        .collect()
}

/// Every partition held by exactly one of `workers`, each holding its fair share.
fn settled(workers: &[&GroupWorker]) -> bool {
    assignments_settled(&snapshot(workers), N)
}

/// How long until `workers` settle, checked every 10 ms; panics past `bound`.
async fn settle(workers: &[&GroupWorker], bound: Duration, what: &str) -> Duration {
    let start = Instant::now();
    while !settled(workers) {
        assert!(
            start.elapsed() <= bound,
            "{what}: not settled within {bound:?}: {:#?}",
            snapshot(workers)
        );
        sleep(STEP).await;
    }
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn three_workers_split_the_partitions_and_a_joiner_settles_within_the_bound() {
    let store = MemoryStore::new();
    let audit = AssignmentAudit::new();
    let t = timings();
    let a = worker(store.clone(), "a", &audit).await;
    settle(&[&a], GroupWorker::settle_time(&t), "one worker alone").await;
    assert_eq!(a.assignment().borrow().partitions.len(), 12);
    assert_eq!(a.assignment().borrow().members, ["a"]);

    let b = worker(store.clone(), "b", &audit).await;
    settle(&[&a, &b], GroupWorker::settle_time(&t), "b joins").await;
    let c = worker(store.clone(), "c", &audit).await;
    let took = settle(&[&a, &b, &c], GroupWorker::settle_time(&t), "c joins").await;
    println!("c's join settled in {took:?}");
    for w in [&a, &b, &c] {
        assert_eq!(w.assignment().borrow().partitions.len(), 4);
        assert_eq!(w.assignment().borrow().members, ["a", "b", "c"]);
    }
    // What the workers publish is what the store says.
    let owners = store.owners(GROUP).await.unwrap();
    assert_eq!(owners.len(), 12);
    for lease in owners {
        let holder = [&a, &b, &c]
            .into_iter()
            .find(|w| w.owner() == lease.owner)
            .expect("every live lease belongs to a worker");
        assert_eq!(
            holder.assignment().borrow().epoch(lease.partition),
            Some(lease.epoch)
        );
    }
    // Stays settled.
    sleep(t.lease() * 4).await;
    assert!(settled(&[&a, &b, &c]));

    for w in [a, b, c] {
        w.leave().await.unwrap();
    }
    audit.assert_clean();
    assert!(store.owners(GROUP).await.unwrap().is_empty());
    assert!(store.members(GROUP).await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_graceful_leave_hands_over_within_the_bound_with_higher_epochs() {
    let store = MemoryStore::new();
    let audit = AssignmentAudit::new();
    let t = timings();
    let a = worker(store.clone(), "a", &audit).await;
    let b = worker(store.clone(), "b", &audit).await;
    let c = worker(store.clone(), "c", &audit).await;
    settle(&[&a, &b, &c], GroupWorker::settle_time(&t), "start").await;
    let left: BTreeMap<u32, u64> = a.assignment().borrow().partitions.clone();
    let mut rx = a.assignment();

    a.leave().await.unwrap();
    assert!(
        rx.borrow_and_update().partitions.is_empty(),
        "a leaver publishes an empty assignment"
    );
    let took = settle(&[&b, &c], GroupWorker::settle_time(&t), "a leaves").await;
    println!("a's leave settled in {took:?}");
    assert!(
        took < t.lease(),
        "a graceful leave does not wait out the lease"
    );
    for (p, epoch) in left {
        let now = [&b, &c]
            .iter()
            .find_map(|w| w.assignment().borrow().epoch(p))
            .unwrap();
        assert!(
            now > epoch,
            "partition {p} changed hands: epoch {epoch} → {now}"
        );
    }
    b.leave().await.unwrap();
    c.leave().await.unwrap();
    audit.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_member_cut_off_from_the_store_stops_before_it_is_replaced_and_comes_back() {
    let store = MemoryStore::new();
    let audit = AssignmentAudit::new();
    let t = timings();
    let cut = faulty(store.clone());
    let a = worker(store.clone(), "a", &audit).await;
    let b = worker(store.clone(), "b", &audit).await;
    let c = worker(cut.clone(), "c", &audit).await;
    settle(&[&a, &b, &c], GroupWorker::settle_time(&t), "start").await;
    let held: Vec<u32> = c.assignment().borrow().partitions.keys().copied().collect();

    let cut_at = Instant::now();
    cut.hook().set_mode(FaultMode::Stall);
    // c drops its partitions by its local deadline: before the store lets anyone else take
    // them.
    let mut rx = c.assignment();
    let stopped = tokio::time::timeout(t.lease(), rx.wait_for(|a| a.partitions.is_empty()))
        .await
        // Drop the watch guard at once: holding it would block the worker's next publish.
        .is_ok_and(|r| r.is_ok());
    assert!(
        stopped,
        "c still publishes its partitions a lease after the cut"
    );
    let dropped = cut_at.elapsed();
    // At its deadline after the start of its last successful renewal, which was before the
    // cut, whatever the stalled heartbeat and member reads are doing.
    assert!(
        dropped <= t.deadline(),
        "c stopped {dropped:?} after the cut; its deadline is {:?}",
        t.deadline()
    );
    for p in &held {
        let lease = store
            .owners(GROUP)
            .await
            .unwrap()
            .into_iter()
            .find(|l| l.partition == *p);
        assert_eq!(
            lease.map(|l| l.owner),
            Some(c.owner().to_string()),
            "still c's in the store"
        );
    }

    let took = settle(
        &[&a, &b],
        GroupWorker::crash_settle_time(&t),
        "c is cut off",
    )
    .await;
    println!("c's loss settled in {took:?} after its partitions were dropped");
    assert!(cut_at.elapsed() <= GroupWorker::crash_settle_time(&t));

    cut.hook().set_mode(FaultMode::Pass);
    settle(
        &[&a, &b, &c],
        GroupWorker::crash_settle_time(&t),
        "c comes back",
    )
    .await;
    for w in [a, b, c] {
        w.leave().await.unwrap();
    }
    audit.assert_clean();
    assert!(audit.observations() > 100);
}

#[tokio::test(start_paused = true)]
async fn renewals_go_in_one_batch_per_tick() {
    let store = faulty(MemoryStore::new());
    let audit = AssignmentAudit::new();
    let t = timings();
    let a = worker(store.clone(), "a", &audit).await;
    settle(&[&a], GroupWorker::settle_time(&t), "start").await;
    let before = store.hook().counts();
    sleep(t.renew_every() * 10).await;
    let after = store.hook().counts();
    let renewals = after.renews - before.renews;
    assert!(
        (9..=11).contains(&renewals),
        "12 partitions over 10 ticks took {renewals} renewal calls"
    );
    assert_eq!(after.claims, before.claims, "no acquire once settled");
    a.leave().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn dropping_a_worker_leaves_in_the_background() {
    let store = MemoryStore::new();
    let audit = AssignmentAudit::new();
    let a = worker(store.clone(), "a", &audit).await;
    settle(&[&a], GroupWorker::settle_time(&timings()), "start").await;
    drop(a);
    // No consumer acknowledges: the partitions are released once the grace has passed.
    sleep(timings().grace() + STEP).await;
    assert!(store.owners(GROUP).await.unwrap().is_empty());
    assert!(store.members(GROUP).await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn bad_settings_are_refused_at_start() {
    let store = MemoryStore::new();
    let start = |n: u32, node: &str| {
        GroupWorker::builder(store.clone(), GROUP, n)
            .node(node)
            .timings(timings())
            .start()
    };
    assert_eq!(
        start(0, "a").await.unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        start(70_000, "a").await.unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        start(4, "").await.unwrap_err().kind(),
        ErrorKind::InvalidName
    );
    let err = GroupWorker::builder(store.clone(), "", 4)
        .start()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidName);

    let down = faulty(store.clone());
    down.hook().set_mode(FaultMode::Cut);
    let err = GroupWorker::builder(down, GROUP, 4)
        .start()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");

    let hung = faulty(store.clone());
    hung.hook().set_mode(FaultMode::Stall);
    let err = GroupWorker::builder(hung, GROUP, 4)
        .start()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
}

// ---------------------------------------------------------------------------------------------
// Consumers' work: hand-overs with grace, epochs never shared.

/// A worker over `store` for `n` partitions with a simulated consumer recording its work in
/// `audit`: it goes on working a removed partition for `stop_after`, then acknowledges the
/// stop when `ack`.
async fn consumed(
    store: impl LeaseStore,
    node: &str,
    n: u32,
    audit: &AssignmentAudit,
    stop_after: Duration,
    ack: bool,
) -> GroupWorker {
    let w = GroupWorker::builder(store, GROUP, n)
        .node(node)
        .timings(timings())
        .start()
        .await
        .unwrap();
    audit.watch(node, w.assignment(), STEP);
    let acks = ack.then(|| w.stop_acks());
    audit.consume(node, w.assignment(), ConsumerPlan { stop_after, acks });
    w
}

/// Through joins, a graceful leave and a dropped worker, with consumers that acknowledge at once,
/// acknowledge late, or never do (and stop just within the grace), no two consumers ever work one
/// partition at once, and every holding of a partition has a higher epoch than the one before.
#[tokio::test(start_paused = true)]
async fn a_graceful_rebalance_never_lets_two_consumers_work_one_partition() {
    let store = MemoryStore::new();
    let audit = AssignmentAudit::new();
    let t = timings();
    let (quick, slow, silent) = (
        Duration::ZERO,
        t.grace() / 2,
        t.grace() - Duration::from_millis(50),
    );
    let a = consumed(store.clone(), "a", N, &audit, silent, false).await;
    settle(&[&a], GroupWorker::settle_time(&t), "a alone").await;
    let b = consumed(store.clone(), "b", N, &audit, slow, true).await;
    settle(&[&a, &b], GroupWorker::settle_time(&t), "b joins").await;
    let c = consumed(store.clone(), "c", N, &audit, quick, true).await;
    settle(&[&a, &b, &c], GroupWorker::settle_time(&t), "c joins").await;
    let d = consumed(store.clone(), "d", N, &audit, silent, false).await;
    settle(&[&a, &b, &c, &d], GroupWorker::settle_time(&t), "d joins").await;
    a.leave().await.unwrap();
    settle(&[&b, &c, &d], GroupWorker::settle_time(&t), "a leaves").await;
    drop(c);
    settle(&[&b, &d], GroupWorker::settle_time(&t), "c is dropped").await;
    let e = consumed(store.clone(), "e", N, &audit, slow, false).await;
    settle(&[&b, &d, &e], GroupWorker::settle_time(&t), "e joins").await;
    for w in [b, d, e] {
        w.leave().await.unwrap();
    }
    sleep(t.grace()).await;
    assert!(audit.work_intervals() > 20, "{}", audit.work_intervals());
    audit.assert_clean();
    assert!(store.owners(GROUP).await.unwrap().is_empty());
}

/// A partition given up is released only once its consumer acknowledged the stop or the grace
/// passed; an acknowledgement makes the hand-over (and `leave`) prompt.
#[tokio::test(start_paused = true)]
async fn a_hand_over_waits_for_the_acknowledgement_or_the_grace() {
    let t = timings();
    for ack in [false, true] {
        let store = MemoryStore::new();
        let audit = AssignmentAudit::new();
        let a = consumed(store.clone(), "a", N, &audit, Duration::ZERO, ack).await;
        let b = consumed(store.clone(), "b", N, &audit, Duration::ZERO, true).await;
        settle(&[&a, &b], GroupWorker::settle_time(&t), "start").await;
        let given: Vec<u32> = a.assignment().borrow().partitions.keys().copied().collect();
        let a_owner = a.owner().to_string();
        let mut rx = a.assignment();
        let began = Instant::now();
        let leave = tokio::spawn(a.leave());
        rx.wait_for(|a| a.partitions.is_empty()).await.ok();
        let removed = began.elapsed();
        if !ack {
            // Just before the grace ends: still a's, and renewed while draining.
            sleep(t.grace() - Duration::from_millis(100)).await;
            let owners = store.owners(GROUP).await.unwrap();
            for p in &given {
                let lease = owners.iter().find(|l| l.partition == *p).unwrap();
                assert_eq!(lease.owner, a_owner, "partition {p} drains under a");
                assert!(
                    lease.expires_in >= t.lease() - t.renew_every() - STEP,
                    "partition {p} is not renewed while it drains: {:?} left",
                    lease.expires_in
                );
            }
        }
        // When b first holds every partition a gave up.
        let mut took = None;
        while took.is_none() {
            if given.iter().all(|p| b.assignment().borrow().holds(*p)) {
                took = Some(began.elapsed());
            }
            sleep(Duration::from_millis(1)).await;
        }
        let took = took.unwrap();
        let left = leave.await.unwrap();
        left.unwrap();
        if ack {
            assert!(
                took <= t.renew_every() * 2,
                "acknowledged at once, the hand-over took {took:?}"
            );
        } else {
            assert!(
                took >= removed + t.grace(),
                "b took a's partitions {took:?} after a's leave began, a removed them after \
                 {removed:?}: within the grace of {:?}",
                t.grace()
            );
            assert!(took <= removed + t.grace() + t.renew_every() + STEP);
        }
        b.leave().await.unwrap();
        audit.assert_clean();
    }
}

/// Renewals reach the store but their answers are lost, so the worker publishes the loss at its
/// deadline while the store still holds the partitions under its owner; the partitions come back
/// under higher epochs, never the same ones.
#[tokio::test(start_paused = true)]
async fn a_published_loss_is_never_followed_by_the_same_epoch() {
    let store = scripted();
    let audit = AssignmentAudit::new();
    let t = timings();
    let a = consumed(store.clone(), "a", N, &audit, t.grace() / 2, false).await;
    settle(&[&a], GroupWorker::settle_time(&t), "start").await;
    let before = a.assignment().borrow().partitions.clone();
    store.hook().rules().lose_renewal_answers = true;
    // Past the deadline: the loss is published (at once followed by a new acquire on the old
    // code: a watcher may not even see the gap).
    sleep(t.deadline() + t.renew_every()).await;
    // The store still holds them under a's owner.
    let owners = store.owners(GROUP).await.unwrap();
    assert_eq!(owners.len(), N as usize);
    assert!(owners.iter().all(|l| l.owner == a.owner()));
    settle(&[&a], GroupWorker::crash_settle_time(&t), "after the loss").await;
    for (p, e) in a.assignment().borrow().partitions.iter() {
        assert!(
            *e > before[p],
            "partition {p}: epoch {} before the published loss, {e} after",
            before[p]
        );
    }
    store.hook().rules().lose_renewal_answers = false;
    a.leave().await.unwrap();
    sleep(t.grace()).await;
    audit.assert_clean();
}

/// An acquire whose answer is lost (it took effect) is read back: the partition is adopted while it
/// is still this node's share, released at once (never published) when the assignment has moved it
/// elsewhere — so its new owner does not wait out the lease.
#[tokio::test(start_paused = true)]
async fn an_acquire_of_unknown_outcome_is_read_back() {
    let t = timings();
    // A node name that the assignment of two gives partition 0 (b, alone, tries it first).
    let c_name = (0..)
        .map(|i| format!("c{i}"))
        .find(|c| {
            let nodes = ["b".to_string(), c.clone()];
            nodes[lease_core::group::assign(GROUP, N, &nodes)[0]] == *c
        })
        .unwrap();
    // c joins while b's first acquire hangs (b then never holds partition 0), or after b read
    // it back and adopted it.
    for adopted_first in [false, true] {
        let store = MemoryStore::new();
        let lossy = faulty(store.clone());
        let audit = AssignmentAudit::new();
        lossy.hook().set_claim_mode(FaultMode::LoseAnswers);
        let b = consumed(lossy.clone(), "b", N, &audit, Duration::ZERO, true).await;
        let mut b_rx = b.assignment();
        let b_held_0 = tokio::spawn(async move {
            let mut held = false;
            loop {
                held |= b_rx.borrow_and_update().holds(0);
                if b_rx.changed().await.is_err() {
                    return held;
                }
            }
        });
        // b's first acquire (partition 0) takes effect, its answer is lost.
        while lossy.hook().counts().claims == 0 {
            sleep(Duration::from_millis(1)).await;
        }
        let owners = store.owners(GROUP).await.unwrap();
        assert!(
            owners
                .iter()
                .any(|l| l.partition == 0 && l.owner == b.owner()),
            "the lost acquire took effect: {owners:?}"
        );
        if adopted_first {
            sleep(t.attempt_timeout() + STEP).await;
        }
        // From now on b's acquires fail outright.
        lossy.hook().set_claim_mode(FaultMode::Cut);
        let c = consumed(store.clone(), &c_name, N, &audit, Duration::ZERO, true).await;
        let joined = Instant::now();
        let mut rx = c.assignment();
        let bound = t.renew_every() * 3 + t.attempt_timeout();
        let got = tokio::time::timeout(t.lease(), rx.wait_for(|a| a.holds(0)))
            .await
            .is_ok_and(|r| r.is_ok());
        let took = joined.elapsed();
        assert!(
            got && took <= bound,
            "adopted first: {adopted_first}: {c_name} got partition 0 {took:?} after joining \
             (bound {bound:?}); the store: {:?}",
            store.owners(GROUP).await.unwrap()
        );
        b.leave().await.unwrap();
        c.leave().await.unwrap();
        assert_eq!(
            b_held_0.await.unwrap(),
            adopted_first,
            "b published partition 0 only when it was still its share"
        );
        audit.assert_clean();
    }
}

/// Scripted faults on a store's partition operations: batch renewals of the chunks holding a
/// partition of 10,000 or more can fail, those of the chunks below can stall, renewal answers
/// can be lost, and releases can be held back. Every other operation passes through.
#[derive(Debug, Clone, Default)]
struct Script(Arc<Mutex<Rules>>);

#[derive(Debug, Default)]
struct Rules {
    fail_high: bool,
    stall_low: bool,
    lose_renewal_answers: bool,
    /// Releases are held back without an answer (a connection that stalls), to be delivered
    /// later with `deliver_releases`.
    hold_releases: bool,
    held_releases: Vec<(String, Vec<u32>, String)>,
    /// When the last high chunk's renewal that reached the store began.
    last_high_renewal: Option<Instant>,
}

impl Script {
    fn rules(&self) -> std::sync::MutexGuard<'_, Rules> {
        self.0.lock().unwrap()
    }

    /// Carries out on `store` the releases held back so far, late.
    async fn deliver_releases(&self, store: &MemoryStore) -> usize {
        let held = std::mem::take(&mut self.rules().held_releases);
        let mut ended = 0;
        for (group, partitions, owner) in held {
            ended += store
                .release_partitions(&group, &partitions, &owner)
                .await
                .unwrap();
        }
        ended
    }

    /// A batch renewal by the rules: failed, stalled, or run with its answer kept or lost.
    fn renewal<'a, T: Send + 'static>(&self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        let high = call.partitions.iter().any(|p| *p >= 10_000);
        let mut rules = self.rules();
        if high && rules.fail_high {
            return Box::pin(async {
                Err(lease_core::Error::unavailable("injected: high chunk fails"))
            });
        }
        if high {
            rules.last_high_renewal = Some(Instant::now());
        }
        let (stall, lose) = (!high && rules.stall_low, rules.lose_renewal_answers);
        Box::pin(async move {
            if stall {
                return std::future::pending().await;
            }
            let answer = op.await;
            if lose {
                return std::future::pending().await;
            }
            answer
        })
    }

    /// A release, held back without an answer while the rules say so.
    fn release<'a, T: Send + 'static>(&self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        let mut rules = self.rules();
        if !rules.hold_releases {
            return op;
        }
        let owner = call.who.unwrap_or_default().to_owned();
        rules
            .held_releases
            .push((call.name.to_owned(), call.partitions.to_vec(), owner));
        Box::pin(std::future::pending())
    }
}

impl Hook for Script {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        match call.operation {
            Operation::RenewPartitions => self.renewal(call, op),
            Operation::ReleasePartitions => self.release(call, op),
            _ => op,
        }
    }
}

/// A memory store with [`Script`]ed partition faults.
type ScriptedStore = Intercept<MemoryStore, Script>;

fn scripted() -> ScriptedStore {
    MemoryStore::new().with_hook(Script::default())
}

/// With more than 10,000 partitions the batch renewal goes in chunks; a stalled chunk is cut at the
/// earliest deadline of every held partition, and a partition of another chunk leaves the
/// assignment at its own deadline, not when the stalled chunk gives up.
#[tokio::test(start_paused = true)]
async fn a_stalled_chunk_does_not_keep_another_chunks_partitions_past_their_deadline() {
    const BIG: u32 = 10_050;
    let store = scripted();
    let t = timings();
    let a = GroupWorker::builder(store.clone(), GROUP, BIG)
        .node("a")
        .timings(t)
        .start()
        .await
        .unwrap();
    let mut rx = a.assignment();
    tokio::time::timeout(
        GroupWorker::settle_time(&t),
        rx.wait_for(|a| a.partitions.len() == BIG as usize),
    )
    .await
    .is_ok_and(|r| r.is_ok())
    .then_some(())
    .expect("a holds every partition");
    sleep(t.renew_every() * 2).await;
    // The high chunk's renewals fail from now on; the low chunk's stall from 5 s later, so the
    // stall straddles the high partitions' deadline.
    store.hook().rules().fail_high = true;
    sleep(Duration::from_secs(5)).await;
    store.hook().rules().stall_low = true;
    let deadline = store.hook().rules().last_high_renewal.unwrap() + t.deadline();
    tokio::time::timeout(t.lease(), rx.wait_for(|a| !a.holds(BIG - 1)))
        .await
        .is_ok_and(|r| r.is_ok())
        .then_some(())
        .expect("the high partitions lapse");
    let late = Instant::now().saturating_duration_since(deadline);
    assert!(
        late <= STEP,
        "the high partitions stayed published {late:?} past their deadline"
    );
    drop(a);
}

/// The group worker's local deadlines count a machine suspend. A suspend past the deadline —
/// simulated by jumping the boot clock — unpublishes every partition at once on resume, whether the
/// worker is between ticks or waiting on a store that does not answer; the partitions come back
/// later under higher epochs.
#[tokio::test(start_paused = true)]
async fn a_suspend_past_the_deadline_unpublishes_at_once_on_resume() {
    use lease_core::backend::clock::testing;
    if !testing::can_suspend() {
        eprintln!("no boot clock on this platform: nothing to test");
        return;
    }
    let t = timings();
    for stalled in [false, true] {
        let store = faulty(MemoryStore::new());
        let audit = AssignmentAudit::new();
        let a = consumed(store.clone(), "a", N, &audit, Duration::ZERO, true).await;
        settle(&[&a], GroupWorker::settle_time(&t), "start").await;
        let before = a.assignment().borrow().partitions.clone();
        if stalled {
            store.hook().set_mode(FaultMode::Stall);
            // The worker is now inside a store operation that does not answer.
            sleep(t.renew_every() + STEP).await;
        }
        assert_eq!(a.assignment().borrow().partitions.len(), N as usize);
        let resumed = Instant::now();
        testing::suspend(t.lease() * 2);
        let mut rx = a.assignment();
        let gone = tokio::time::timeout(STEP, rx.wait_for(|a| a.partitions.is_empty()))
            .await
            .is_ok_and(|r| r.is_ok());
        assert!(
            gone && resumed.elapsed() <= Duration::from_millis(1),
            "stalled: {stalled}: the partitions were still published {:?} after the resume",
            resumed.elapsed()
        );
        store.hook().set_mode(FaultMode::Pass);
        settle(
            &[&a],
            GroupWorker::crash_settle_time(&t),
            "after the resume",
        )
        .await;
        for (p, e) in a.assignment().borrow().partitions.iter() {
            assert!(
                *e > before[p],
                "partition {p}: epoch {} then {e}",
                before[p]
            );
        }
        a.leave().await.unwrap();
        audit.assert_clean();
    }
}

/// A release that had no answer may reach the store later: it must not end a later holding.
/// Here a's partitions lapse (renewal answers lost) and their releases hang; once the store
/// answers again a gets them back — and then the hung releases arrive. a's holdings live on,
/// because a acquired them again under a new owner id.
#[tokio::test(start_paused = true)]
async fn a_late_release_does_not_end_a_later_holding() {
    let store = scripted();
    let audit = AssignmentAudit::new();
    let t = timings();
    let a = consumed(store.clone(), "a", N, &audit, Duration::ZERO, true).await;
    settle(&[&a], GroupWorker::settle_time(&t), "start").await;
    let first_owner = a.owner();
    {
        let mut rules = store.hook().rules();
        rules.lose_renewal_answers = true;
        rules.hold_releases = true;
    }
    sleep(t.deadline() + t.attempt_timeout() + t.renew_every()).await;
    assert!(a.assignment().borrow().partitions.is_empty());
    assert!(
        !store.hook().rules().held_releases.is_empty(),
        "releases were tried"
    );
    {
        let mut rules = store.hook().rules();
        rules.lose_renewal_answers = false;
        rules.hold_releases = false;
    }
    settle(&[&a], GroupWorker::crash_settle_time(&t), "back").await;
    let back = a.assignment().borrow().partitions.clone();
    let mut rx = a.assignment();
    rx.borrow_and_update();
    store.hook().deliver_releases(store.inner()).await;
    sleep(t.renew_every() * 2).await;
    assert!(
        !rx.has_changed().unwrap() && a.assignment().borrow().partitions == back,
        "the late releases ended a's new holdings: {back:?} became {:?}",
        a.assignment().borrow().partitions
    );
    let owners = store.owners(GROUP).await.unwrap();
    assert_eq!(owners.len(), N as usize);
    assert!(owners.iter().all(|l| a.owns(&l.owner)));
    assert_ne!(
        a.owner(),
        first_owner,
        "a new owner id after an unanswered release"
    );
    a.leave().await.unwrap();
    audit.assert_clean();
}

/// A leave hinted while a worker's tick is under way (its member list read before the leave)
/// wakes the worker for another tick at once: the hint is not taken as covered by the tick that
/// read too early.
#[tokio::test(start_paused = true)]
async fn a_leave_hinted_during_a_tick_is_not_lost() {
    let store = MemoryStore::new();
    let audit = AssignmentAudit::new();
    // A long lease, so that the next tick (renew_every, 8 s) is far from a prompt one.
    let t = Timings::from_lease(Duration::from_secs(60)).unwrap();
    async fn start(store: impl LeaseStore, node: &str, t: Timings) -> GroupWorker {
        GroupWorker::builder(store, GROUP, N)
            .node(node)
            .timings(t)
            .start()
            .await
            .unwrap()
    }
    let hook = SlowAnswers::new(Duration::from_secs(1), &[Operation::Members]);
    let slow = store.clone().with_hook(hook.clone());
    let a = start(store.clone(), "a", t).await;
    let b = start(slow, "b", t).await;
    audit.watch("a", a.assignment(), STEP);
    audit.watch("b", b.assignment(), STEP);
    // a's consumer acknowledges each stop at once, so its leave takes milliseconds.
    let plan = ConsumerPlan {
        stop_after: Duration::ZERO,
        acks: Some(a.stop_acks()),
    };
    audit.consume("a", a.assignment(), plan);
    settle(&[&a, &b], GroupWorker::settle_time(&t), "start").await;
    // Right after b's tick read the members (a still one of them), a leaves.
    let mut seen = hook.done.subscribe();
    seen.borrow_and_update();
    seen.changed().await.unwrap();
    let left = Instant::now();
    a.leave().await.unwrap();
    let leave_took = left.elapsed();
    assert!(
        leave_took < Duration::from_millis(500),
        "a's leave took {leave_took:?}"
    );
    settle(&[&b], GroupWorker::settle_time(&t), "a leaves").await;
    let since = left.elapsed();
    println!("b took a's partitions {since:?} after a left (its leave took {leave_took:?})");
    // The tick under way ends 1 s after its read; the next one reads for 1 s more. Without the
    // hint, b would wait for its next tick (renew_every after the last: 8 s).
    assert!(
        since < Duration::from_secs(3),
        "b took a's partitions {since:?} after a's leave: the hint during its tick was lost"
    );
    assert!(since < t.renew_every(), "{since:?}");
    b.leave().await.unwrap();
    audit.assert_clean();
}

/// A graceful leave is hinted: the remaining worker takes the partitions within the hint
/// jitter, not at its next tick (renew_every, 2 s).
#[tokio::test(start_paused = true)]
async fn a_graceful_leave_is_taken_over_at_the_hint() {
    let store = MemoryStore::new();
    let audit = AssignmentAudit::new();
    let t = timings();
    let a = consumed(store.clone(), "a", N, &audit, Duration::ZERO, true).await;
    let b = worker(store.clone(), "b", &audit).await;
    settle(&[&a, &b], GroupWorker::settle_time(&t), "start").await;
    // Half a tick after b's last tick, so that its next one is far.
    sleep(t.renew_every() / 2).await;
    let left = Instant::now();
    a.leave().await.unwrap();
    while b.assignment().borrow().partitions.len() < N as usize {
        sleep(Duration::from_millis(1)).await;
    }
    let took = left.elapsed();
    println!("b took a's partitions {took:?} after a's leave began");
    assert!(
        took <= lease_core::backend::wait::HINT_JITTER + Duration::from_millis(5),
        "{took:?}: not woken by the leave's hint"
    );
    b.leave().await.unwrap();
    audit.assert_clean();
}

/// A store slower than the tick still gets the share acquired: here each member read takes
/// longer than `renew_every` (but less than the attempt timeout), so every tick's member read
/// alone outlasts the tick. The acquires get a tick's time of their own after it, so the worker
/// holds its share within the settle time plus the read, not never.
#[tokio::test(start_paused = true)]
async fn a_tick_longer_than_renew_every_still_acquires() {
    let store = MemoryStore::new();
    let audit = AssignmentAudit::new();
    let t = Timings::from_lease(Duration::from_millis(1500)).unwrap();
    let pause = t.renew_every() + t.renew_every() / 2;
    assert!(pause < t.attempt_timeout());
    let slow = store
        .clone()
        .with_hook(SlowAnswers::new(pause, &[Operation::Members]));
    let a = GroupWorker::builder(slow, GROUP, N)
        .node("a")
        .timings(t)
        .start()
        .await
        .unwrap();
    audit.watch("a", a.assignment(), STEP);
    settle(&[&a], GroupWorker::settle_time(&t) + pause, "a slow store").await;
    a.leave().await.unwrap();
    audit.assert_clean();
}

/// Holds back the answers of the `slow` operations for `pause` after the store carried them out
/// (a slow store), and logs which of them the store carried out, and when.
#[derive(Debug, Clone)]
struct SlowAnswers {
    pause: Duration,
    slow: &'static [Operation],
    done: Arc<tokio::sync::watch::Sender<Vec<(Operation, Instant)>>>,
}

impl SlowAnswers {
    fn new(pause: Duration, slow: &'static [Operation]) -> SlowAnswers {
        SlowAnswers {
            pause,
            slow,
            done: Arc::new(tokio::sync::watch::Sender::new(Vec::new())),
        }
    }
}

impl Hook for SlowAnswers {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        let operation = call.operation;
        if !self.slow.contains(&operation) {
            return op;
        }
        let (pause, done) = (self.pause, Arc::clone(&self.done));
        Box::pin(async move {
            let answer = op.await;
            done.send_modify(|d| d.push((operation, Instant::now())));
            sleep(pause).await;
            answer
        })
    }
}

/// The member record is refreshed on a schedule of its own, whatever a tick takes. Here the
/// heartbeat, the member read and each acquire answer just within the attempt timeout, so a
/// tick that acquires lasts about three of those; the heartbeats still reach the store at most
/// `renew_every + attempt_timeout` apart (here one slow answer apart), well within the member
/// record's lifetime (`lease`).
#[tokio::test(start_paused = true)]
async fn heartbeats_keep_their_cadence_while_a_tick_is_slow() {
    let store = MemoryStore::new();
    let audit = AssignmentAudit::new();
    let t = timings();
    let pause = t.attempt_timeout() - Duration::from_millis(200);
    let hook = SlowAnswers::new(
        pause,
        &[
            Operation::Heartbeat,
            Operation::Members,
            Operation::AcquirePartition,
        ],
    );
    let slow = store.clone().with_hook(hook.clone());
    let a = GroupWorker::builder(slow, GROUP, N)
        .node("a")
        .timings(t)
        .start()
        .await
        .unwrap();
    audit.watch("a", a.assignment(), STEP);
    sleep(t.lease() * 4).await;
    let beats: Vec<Instant> = hook
        .done
        .borrow()
        .iter()
        .filter(|(op, _)| *op == Operation::Heartbeat)
        .map(|(_, at)| *at)
        .collect();
    let widest = beats.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    println!(
        "{} heartbeats, at most {widest:?} apart; a holds {} partitions",
        beats.len(),
        a.assignment().borrow().partitions.len()
    );
    let bound = t.renew_every() + t.attempt_timeout();
    assert!(
        widest <= bound,
        "{widest:?} between two heartbeats reaching the store (bound {bound:?}; the member \
         record lives {:?})",
        t.lease()
    );
    assert!(beats.len() >= 10, "{} heartbeats", beats.len());
    a.leave().await.unwrap();
    audit.assert_clean();
}

/// Delays each heartbeat by `pause` on its way to the store (a request in transit), counting
/// those that began, and logs heartbeats and leaves in the order the store carried them out.
#[derive(Debug, Clone)]
struct LateBeats {
    pause: Duration,
    begun: Arc<tokio::sync::watch::Sender<u64>>,
    log: Arc<Mutex<Vec<(Operation, Instant)>>>,
}

impl Hook for LateBeats {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        let operation = call.operation;
        let pause = match operation {
            Operation::Heartbeat => self.pause,
            Operation::Leave => Duration::ZERO,
            _ => return op,
        };
        if operation == Operation::Heartbeat {
            self.begun.send_modify(|n| *n += 1);
        }
        let log = Arc::clone(&self.log);
        Box::pin(async move {
            sleep(pause).await;
            let answer = op.await;
            log.lock().unwrap().push((operation, Instant::now()));
            answer
        })
    }
}

/// A leave ends the membership only after the heartbeats stopped: a heartbeat on its way to the
/// store when the leave is asked for gets there first (it is let finish), and none gets there
/// after the leave, which would put the node back on the member list until its record expires.
#[tokio::test(start_paused = true)]
async fn no_heartbeat_reaches_the_store_after_the_leave() {
    let store = MemoryStore::new();
    let audit = AssignmentAudit::new();
    let t = timings();
    let hook = LateBeats {
        pause: t.renew_every() / 2,
        begun: Arc::new(tokio::sync::watch::Sender::new(0)),
        log: Arc::default(),
    };
    let late = store.clone().with_hook(hook.clone());
    let a = GroupWorker::builder(late, GROUP, N)
        .node("a")
        .timings(t)
        .start()
        .await
        .unwrap();
    audit.watch("a", a.assignment(), STEP);
    settle(&[&a], GroupWorker::settle_time(&t), "start").await;
    // Half-way through a heartbeat's way to the store.
    let mut begun = hook.begun.subscribe();
    begun.borrow_and_update();
    begun.changed().await.unwrap();
    sleep(hook.pause / 2).await;
    let asked = Instant::now();
    a.leave().await.unwrap();
    // Anything still on its way has landed by now.
    sleep(t.lease()).await;
    let log = hook.log.lock().unwrap().clone();
    let first_leave = log
        .iter()
        .position(|(op, _)| *op == Operation::Leave)
        .expect("the leave reached the store");
    assert!(
        log[first_leave..]
            .iter()
            .all(|(op, _)| *op == Operation::Leave),
        "a heartbeat reached the store after the leave: {log:?}"
    );
    assert!(
        log[..first_leave]
            .iter()
            .any(|(op, at)| *op == Operation::Heartbeat && *at > asked),
        "the heartbeat in flight at the leave was not let finish: {log:?}"
    );
    assert!(store.members(GROUP).await.unwrap().is_empty());
    audit.assert_clean();
}

/// Carries out each leave and partition release, then answers the first `unconfirmed` leaves
/// and the first `unconfirmed` releases with a temporary error, as Redis with `replica_acks` answers a write the primary applied but
/// no replica acknowledged in time.
#[derive(Debug, Clone)]
struct Unconfirmed {
    unconfirmed: usize,
    answered: Arc<Mutex<Vec<Operation>>>,
}

impl Hook for Unconfirmed {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        let operation = call.operation;
        if !matches!(operation, Operation::Leave | Operation::ReleasePartitions) {
            return op;
        }
        let answered = Arc::clone(&self.answered);
        let unconfirmed = self.unconfirmed;
        Box::pin(async move {
            let answer = op.await;
            let mut log = answered.lock().unwrap();
            log.push(operation);
            if log.iter().filter(|o| **o == operation).count() <= unconfirmed {
                return Err(lease_core::Error::unavailable(
                    "injected: applied, but no replica acknowledged it in time",
                ));
            }
            answer
        })
    }
}

/// Leaves through a store that answers the first `unconfirmed` leaves and releases each with a
/// temporary error after carrying them out; returns the leave's answer and what the store
/// holds afterwards (members, partition owners).
async fn leave_unconfirmed(unconfirmed: usize) -> (lease_core::Result<()>, usize, usize) {
    let store = MemoryStore::new();
    let audit = AssignmentAudit::new();
    let hook = Unconfirmed {
        unconfirmed,
        answered: Arc::default(),
    };
    let a = worker(store.clone().with_hook(hook.clone()), "a", &audit).await;
    settle(&[&a], GroupWorker::settle_time(&timings()), "start").await;
    let answer = a.leave().await;
    audit.assert_clean();
    let members = store.members(GROUP).await.unwrap().len();
    let owners = store.owners(GROUP).await.unwrap().len();
    (answer, members, owners)
}

/// A leave and releases the store carried out but did not confirm at first (an answer that
/// says "not acknowledged by the replicas") are tried again, and the leave answers `Ok` once
/// the store confirmed the end state: no membership, nothing held.
#[tokio::test(start_paused = true)]
async fn a_graceful_leave_the_store_confirms_on_a_later_try_succeeds() {
    // Unconfirmed: the first leave and the last leave's first try; a release's first two tries.
    let (answer, members, owners) = leave_unconfirmed(2).await;
    answer.expect("every step was confirmed on a later try");
    assert_eq!((members, owners), (0, 0));
}

/// A store that never confirms: the leave says so (its steps took effect all the same).
#[tokio::test(start_paused = true)]
async fn a_graceful_leave_the_store_never_confirms_is_an_error() {
    let (answer, members, owners) = leave_unconfirmed(usize::MAX).await;
    let e = answer.expect_err("no step was confirmed");
    assert!(e.is_temporary(), "{e}");
    assert!(e.message().contains("no replica acknowledged"), "{e}");
    assert_eq!((members, owners), (0, 0));
}
