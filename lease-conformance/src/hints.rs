//! Checks of a store's hints across stores (see `lease_core::backend::notify`), shared by the
//! backends' `tests/hints.rs`: a claim and a release by *another* store — as another process would
//! make them — wake a waiter within [`HINT_BOUND`]; a renewal, a refused claim and a release that
//! ended nothing wake nobody; another name's waiter is never woken
//! ([`another_store_wakes_a_waiter`]). The same holds for a counted name's permits
//! ([`another_store_wakes_a_permit_waiter`]), a group's partitions
//! ([`partition_changes_wake_the_group`]) and members ([`member_changes_wake_the_group`]), and a
//! scheduled job's slots ([`slot_changes_wake_the_slots_topic`]).
//!
//! Hints are hints: these checks bound their latency and their noise, never a safety decision
//! (the conformance cases in [`cases`](crate::cases) check that a waiter claims as usual).
//!
//! ```
//! # use std::time::Duration;
//! use lease_conformance::hints;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // Two handles on one memory store, as two processes would share a database.
//! let a = lease_local::MemoryStore::new();
//! let b = a.clone();
//! let ttl = Duration::from_secs(5);
//! hints::another_store_wakes_a_waiter(&a, &b, ttl, "local").await;
//! hints::another_store_wakes_a_permit_waiter(&a, &b, ttl, "local").await;
//! hints::partition_changes_wake_the_group(&a, &b, ttl, "local").await;
//! hints::member_changes_wake_the_group(&a, &b, ttl, "local").await;
//! hints::slot_changes_wake_the_slots_topic(&a, &b, ttl, "local").await;
//! # }
//! ```

use std::time::{Duration, Instant};

use lease_core::backend::notify::{Topic, Wakeups};
use lease_core::backend::{HolderToken, slots::SlotClaim};
use lease_core::{
    LeaseStore,
    backend::{
        LeaseStoreExt, membership::MembershipStore, partitions::PartitionStore, slots::SlotStore,
    },
};

/// The bound a hint must arrive within.
pub const HINT_BOUND: Duration = Duration::from_millis(250);
/// How long a waiter is watched for a hint that must not come.
pub const QUIET: Duration = Duration::from_millis(300);

/// How long until `w` is woken, or `None` when `bound` passes first.
pub async fn woken_within(w: &mut Wakeups, bound: Duration) -> Option<Duration> {
    let started = Instant::now();
    tokio::time::timeout(bound, w.changed())
        .await
        .ok()
        .map(|()| started.elapsed())
}

/// Waits until `w` says its hints cover every process, then drains what the connection woke.
///
/// # Panics
///
/// When the hints are not connected within 5 s.
pub async fn connected(w: &mut Wakeups) {
    let started = Instant::now();
    while !w.is_connected() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the store's hints did not connect within 5 s"
        );
        let _ = tokio::time::timeout(Duration::from_millis(50), w.changed()).await;
    }
    while woken_within(w, Duration::from_millis(50)).await.is_some() {}
}

/// `actor` claims, renews, is refused, releases (twice) and force-releases a name of its own
/// (when it can) five times over, with leases of `ttl`, while `waiter` — another store on the
/// same data — waits on it and on another name. Prints the hint latencies, labelled `backend`.
///
/// # Panics
///
/// When `waiter` does not declare `watch`, its hints do not connect, a change of hands is not
/// hinted within [`HINT_BOUND`], a renewal, a refused claim or a release that ended nothing
/// wakes the waiter within [`QUIET`], or the other name's waiter is woken.
pub async fn another_store_wakes_a_waiter(
    waiter: &dyn LeaseStore,
    actor: &dyn LeaseStore,
    ttl: Duration,
    backend: &str,
) {
    assert!(
        waiter.capabilities().watch,
        "{backend}: the store does not declare hints (Capabilities::watch)"
    );
    let name = format!("hinted-{:08x}", rand::random::<u32>());
    let hint = |w: Option<Wakeups>| w.unwrap_or_else(|| panic!("{backend}: changes() is None"));
    let mut w = hint(waiter.changes(&Topic::lease(&name)));
    let mut other = hint(waiter.changes(&Topic::lease(format!("{name}-other"))));
    connected(&mut w).await;
    connected(&mut other).await;
    let expect = |woke: Option<Duration>, what: &str| {
        woke.unwrap_or_else(|| panic!("{backend}: {what} woke nobody within {HINT_BOUND:?}"))
    };
    let quiet = |woke: Option<Duration>, what: &str| {
        assert_eq!(woke, None, "{backend}: {what} woke the waiter");
    };

    let mut latencies = Vec::new();
    for _ in 0..5 {
        let holder = HolderToken::mint();
        let claimed = actor.claim(&name, &holder, "actor", ttl).await;
        assert!(
            matches!(claimed, Ok(Some(_))),
            "{backend}: the claim of a free name answered {claimed:?}"
        );
        latencies.push(expect(woken_within(&mut w, HINT_BOUND).await, "a claim"));

        let renewed = actor.renew(&name, &holder, ttl).await;
        assert!(
            matches!(renewed, Ok(Some(_))),
            "{backend}: the holder's renewal answered {renewed:?}"
        );
        let refused = actor.claim(&name, &HolderToken::mint(), "other", ttl).await;
        assert!(
            matches!(refused, Ok(None)),
            "{backend}: a claim of a held name answered {refused:?}"
        );
        quiet(
            woken_within(&mut w, QUIET).await,
            "a renewal or a refused claim",
        );

        assert!(
            matches!(actor.release(&name, &holder).await, Ok(true)),
            "{backend}: the holder's release did not end its lease"
        );
        latencies.push(expect(woken_within(&mut w, HINT_BOUND).await, "a release"));
        assert!(
            matches!(actor.release(&name, &holder).await, Ok(false)),
            "{backend}: a second release ended something"
        );
        quiet(
            woken_within(&mut w, QUIET).await,
            "a release that ended nothing",
        );
    }
    quiet(
        woken_within(&mut other, Duration::from_millis(50)).await,
        "another name's change",
    );
    latencies.sort();
    eprintln!(
        "{backend} hint latency over {} changes: median {:?}, max {:?}",
        latencies.len(),
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );

    if actor.capabilities().force_release {
        let holder = HolderToken::mint();
        let claimed = actor.claim(&name, &holder, "actor", ttl).await;
        assert!(matches!(claimed, Ok(Some(_))), "{backend}: {claimed:?}");
        expect(woken_within(&mut w, HINT_BOUND).await, "a claim");
        assert!(
            matches!(actor.force_release(&name).await, Ok(true)),
            "{backend}: the forced release ended nothing"
        );
        expect(woken_within(&mut w, HINT_BOUND).await, "a forced release");
    }
}

/// A fresh name of `what` for one check, so runs and checks sharing a server never collide. It
/// holds a dot, which stores that build keys or subjects from names must escape (NATS).
fn fresh(what: &str) -> String {
    format!("hinted-{what}.{:08x}", rand::random::<u32>())
}

/// `waiter`'s connected hints on `topic`, panicking (labelled `backend`) when it has none.
async fn watch(waiter: &dyn LeaseStore, topic: &Topic, backend: &str) -> Wakeups {
    let mut w = waiter
        .changes(topic)
        .unwrap_or_else(|| panic!("{backend}: changes({topic}) is None"));
    connected(&mut w).await;
    w
}

/// Panics, naming `backend` and `what`, unless `w` is woken within [`HINT_BOUND`].
async fn expect_woken(w: &mut Wakeups, backend: &str, what: &str) {
    if woken_within(w, HINT_BOUND).await.is_none() {
        panic!("{backend}: {what} woke nobody within {HINT_BOUND:?}");
    }
}

/// Panics, naming `backend` and `what`, when `w` is woken within [`QUIET`].
async fn expect_quiet(w: &mut Wakeups, backend: &str, what: &str) {
    if let Some(after) = woken_within(w, QUIET).await {
        panic!("{backend}: {what} woke the waiter (after {after:?})");
    }
}

/// `actor` claims a permit of a counted name of its own, renews it and releases it, with a
/// lease of `ttl`, while `waiter` — another store on the same data — waits on the name's
/// [`Topic::Lease`] (which permit waiters watch). Labelled `backend`.
///
/// # Panics
///
/// When `waiter`'s hints do not connect, the claim or the release is not hinted within
/// [`HINT_BOUND`], the renewal wakes the waiter within [`QUIET`], or an operation fails.
pub async fn another_store_wakes_a_permit_waiter(
    waiter: &dyn LeaseStore,
    actor: &dyn LeaseStore,
    ttl: Duration,
    backend: &str,
) {
    let name = fresh("permits");
    let mut w = watch(waiter, &Topic::lease(&name), backend).await;
    let holder = HolderToken::mint();
    let granted = actor.claim_permit(&name, 2, &holder, "actor", ttl).await;
    let Ok(Some(granted)) = granted else {
        panic!("{backend}: the claim of a free permit answered {granted:?}");
    };
    expect_woken(&mut w, backend, "a permit claim").await;
    let renewed = actor
        .renew_permit(&name, granted.permit, &holder, ttl)
        .await;
    assert!(
        matches!(renewed, Ok(Some(_))),
        "{backend}: the permit holder's renewal answered {renewed:?}"
    );
    expect_quiet(&mut w, backend, "a permit renewal").await;
    let released = actor.release_permit(&name, granted.permit, &holder).await;
    assert!(
        matches!(released, Ok(true)),
        "{backend}: the permit holder's release answered {released:?}"
    );
    expect_woken(&mut w, backend, "a permit release").await;
}

/// `actor` acquires a partition of a group of its own, acquires it again and renews it (both
/// keep the epoch: nothing changed hands), then releases it, with leases of `ttl`, while
/// `waiter` — another store on the same data — waits on the group's [`Topic::Group`].
/// Labelled `backend`.
///
/// # Panics
///
/// When `waiter`'s hints do not connect, the acquire or the release is not hinted within
/// [`HINT_BOUND`], the owner's own re-acquire or renewal wakes the waiter within [`QUIET`],
/// the re-acquire changes the epoch, or an operation fails.
pub async fn partition_changes_wake_the_group(
    waiter: &dyn LeaseStore,
    actor: &dyn PartitionStore,
    ttl: Duration,
    backend: &str,
) {
    let group = fresh("group");
    let mut w = watch(waiter, &Topic::group(&group), backend).await;
    let acquired = actor.acquire_partition(&group, 3, "node-b", ttl).await;
    let Ok(Some(lease)) = acquired else {
        panic!("{backend}: the acquire of a free partition answered {acquired:?}");
    };
    expect_woken(&mut w, backend, "a partition acquire").await;
    let again = actor.acquire_partition(&group, 3, "node-b", ttl).await;
    let Ok(Some(again)) = again else {
        panic!("{backend}: the owner's own re-acquire answered {again:?}");
    };
    assert_eq!(
        again.epoch, lease.epoch,
        "{backend}: the owner's own re-acquire changed the epoch"
    );
    let renewed = actor.renew_partitions(&group, &[3], "node-b", ttl).await;
    assert!(
        matches!(&renewed, Ok(kept) if kept.len() == 1),
        "{backend}: the owner's renewal answered {renewed:?}"
    );
    expect_quiet(&mut w, backend, "the owner's own re-acquire or renewal").await;
    let released = actor.release_partitions(&group, &[3, 4], "node-b").await;
    assert!(
        matches!(released, Ok(1)),
        "{backend}: the release of one held and one free partition answered {released:?}"
    );
    expect_woken(&mut w, backend, "a partition release").await;
}

/// `actor` heartbeats a member of a service of its own into a group (joining), heartbeats it
/// again, then makes it leave, with records of `ttl`, while `waiter` — another store on the
/// same data — waits on the group's [`Topic::Group`]. Labelled `backend`.
///
/// # Panics
///
/// When `waiter`'s hints do not connect, the join or the leave is not hinted within
/// [`HINT_BOUND`], the repeated heartbeat wakes the waiter within [`QUIET`], or an operation
/// fails.
pub async fn member_changes_wake_the_group(
    waiter: &dyn LeaseStore,
    actor: &dyn MembershipStore,
    ttl: Duration,
    backend: &str,
) {
    let group = fresh("group");
    let service = fresh("service");
    let mut w = watch(waiter, &Topic::group(&group), backend).await;
    let groups = vec![group.clone()];
    let joined = actor
        .heartbeat(&service, "node-b", "h:1", ttl, &groups)
        .await;
    assert!(
        joined.is_ok(),
        "{backend}: the first heartbeat answered {joined:?}"
    );
    expect_woken(&mut w, backend, "a member joining").await;
    let again = actor
        .heartbeat(&service, "node-b", "h:1", ttl, &groups)
        .await;
    assert!(
        again.is_ok(),
        "{backend}: a repeated heartbeat answered {again:?}"
    );
    expect_quiet(&mut w, backend, "a repeated heartbeat").await;
    let left = actor.leave(&service, "node-b").await;
    assert!(
        matches!(left, Ok(true)),
        "{backend}: the member's leave answered {left:?}"
    );
    expect_woken(&mut w, backend, "a member leaving").await;
}

/// `actor` claims a past instant of a job of its own with a lease of `ttl`, then finishes the
/// round, while `waiter` — another store on the same data — waits on the job's
/// [`Topic::Slots`] and on its [`Topic::Lease`]. Labelled `backend`.
///
/// # Panics
///
/// When `waiter`'s hints do not connect, the claim is not hinted on both topics or the finish
/// on the slots topic within [`HINT_BOUND`], the instant is not claimed, or the finish is not
/// recorded or does not give the lease back.
pub async fn slot_changes_wake_the_slots_topic(
    waiter: &dyn LeaseStore,
    actor: &dyn SlotStore,
    ttl: Duration,
    backend: &str,
) {
    let job = fresh("job");
    let mut slots = watch(waiter, &Topic::slots(&job), backend).await;
    let mut lease = watch(waiter, &Topic::lease(&job), backend).await;
    let holder = HolderToken::mint();
    // A minute ago by this clock: in the past by the server's too, give or take its skew.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let instant = now_ms - 60_000;
    let claimed = actor.claim_slot(&job, &holder, "actor", ttl, instant).await;
    assert!(
        matches!(claimed, Ok(SlotClaim::Claimed { .. })),
        "{backend}: the claim of a past instant answered {claimed:?}"
    );
    expect_woken(&mut slots, backend, "a slot claim (on the slots topic)").await;
    expect_woken(
        &mut lease,
        backend,
        "a slot claim (on the job's lease topic)",
    )
    .await;
    let finished = actor.finish_slot(&job, &holder, instant, None).await;
    assert!(
        matches!(&finished, Ok(f) if f.recorded && f.released),
        "{backend}: the finish of the claimed round answered {finished:?}"
    );
    expect_woken(&mut slots, backend, "a slot finish").await;
}
