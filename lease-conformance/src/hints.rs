//! Checks of a store's hints across stores (see `lease_core::notify`), shared by the backends'
//! `tests/hints.rs`: a claim and a release by *another* store — as another process would make
//! them — wake a waiter within [`HINT_BOUND`]; a renewal, a refused claim and a release that
//! ended nothing wake nobody; another name's waiter is never woken.
//!
//! Hints are hints: these checks bound their latency and their noise, never a safety decision
//! (the conformance cases in [`cases`](crate::cases) check that a waiter claims as usual).
//!
//! ```
//! # use std::time::Duration;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // Two handles on one memory store, as two processes would share a database.
//! let a = lease_local::MemoryStore::new();
//! let b = a.clone();
//! lease_conformance::hints::another_store_wakes_a_waiter(&a, &b, Duration::from_secs(5), "local")
//!     .await;
//! # }
//! ```

use std::time::{Duration, Instant};

use lease_core::LeaseStore;
use lease_core::backend::HolderToken;
use lease_core::notify::{Topic, Wakeups};

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
