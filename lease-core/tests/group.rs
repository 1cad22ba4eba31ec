//! Group worker (balancer) tests on lease-local, in paused tokio time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use lease_core::{
    Assignment, ErrorKind, GroupStore, GroupWorker, MembershipStore, PartitionStore, Timings,
};
use lease_local::{AssignmentAudit, FaultMode, FaultyStore, MemoryStore, assignments_settled};
use tokio::time::{Instant, sleep};

const GROUP: &str = "orders";
const N: u32 = 12;
const STEP: Duration = Duration::from_millis(10);

fn timings() -> Timings {
    Timings::default()
}

async fn worker(store: impl GroupStore, node: &str, audit: &AssignmentAudit) -> GroupWorker {
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
    let cut = FaultyStore::new(store.clone());
    let a = worker(store.clone(), "a", &audit).await;
    let b = worker(store.clone(), "b", &audit).await;
    let c = worker(cut.clone(), "c", &audit).await;
    settle(&[&a, &b, &c], GroupWorker::settle_time(&t), "start").await;
    let held: Vec<u32> = c.assignment().borrow().partitions.keys().copied().collect();

    let cut_at = Instant::now();
    cut.set_mode(FaultMode::Stall);
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

    cut.set_mode(FaultMode::Pass);
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
    let store = FaultyStore::new(MemoryStore::new());
    let audit = AssignmentAudit::new();
    let t = timings();
    let a = worker(store.clone(), "a", &audit).await;
    settle(&[&a], GroupWorker::settle_time(&t), "start").await;
    let before = store.counts();
    sleep(t.renew_every() * 10).await;
    let after = store.counts();
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
    sleep(STEP).await;
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

    let down = FaultyStore::new(store.clone());
    down.set_mode(FaultMode::Fail);
    let err = GroupWorker::builder(down, GROUP, 4)
        .start()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");

    let hung = FaultyStore::new(store.clone());
    hung.set_mode(FaultMode::Stall);
    let err = GroupWorker::builder(hung, GROUP, 4)
        .start()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
}
