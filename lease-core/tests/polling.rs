//! The polling leaser gives a lease up at two thirds of its TTL after the last confirming poll,
//! whatever the poll is doing; paused tokio time, the in-memory store behind the fault wrapper.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use lease_conformance::{FaultMode, faulty};
use lease_core::backend::polling::{PollingLeaser, PollingStore};
use lease_local::MemoryStore;
use tokio::time::{Instant, sleep_until};

const TTL: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A fast failure, then a poll that hangs: `is_held()` is false from the give-up instant
/// (2 s after the confirming poll of a 3 s lease), not only once the hanging poll times out at
/// the TTL.
#[tokio::test(start_paused = true)]
async fn is_held_turns_false_at_the_give_up_instant_while_a_poll_hangs() {
    let store = faulty(MemoryStore::new());
    let leaser = PollingLeaser::new(store.clone(), TTL, POLL).unwrap();
    let t0 = Instant::now();
    let lease = leaser.new_lease("job", b"a".to_vec()).unwrap();
    let mut changes = lease.changes();

    // t = 0: the first poll confirms.
    sleep_until(t0 + ms(10)).await;
    assert!(lease.is_held());

    // t = 1: the poll fails at once.
    store.hook().set_mode(FaultMode::Cut);
    sleep_until(t0 + ms(1_500)).await;
    assert!(
        lease.is_held(),
        "a failed poll keeps the lease until its give-up instant"
    );

    // t = 2: the poll hangs (until its bound, at t = 3, the TTL).
    store.hook().set_mode(FaultMode::Stall);
    sleep_until(t0 + ms(1_999)).await;
    assert!(lease.is_held(), "held until two thirds of the TTL");
    sleep_until(t0 + ms(2_001)).await;
    assert!(
        !lease.is_held(),
        "is_held() still true 2.001 s after the confirming poll of a 3 s lease, while a poll hangs"
    );
    assert!(
        !changes.borrow_and_update().held,
        "the change was not published at the give-up instant"
    );
    sleep_until(t0 + ms(2_999)).await;
    assert!(!lease.is_held(), "is_held() true at 2.999 s of a 3 s TTL");

    // The store answers again: the lease comes back (nobody else wanted it).
    store.hook().set_mode(FaultMode::Pass);
    sleep_until(t0 + ms(4_100)).await;
    assert!(lease.is_held());
    lease.close().await;
}

/// A holder whose polls fail, then hang, and a contender polling the same store unhindered:
/// never both held, and the contender takes the name only once the holder's TTL has run out.
#[tokio::test(start_paused = true)]
async fn a_contender_never_overlaps_a_holder_whose_polls_hang() {
    let store = faulty(MemoryStore::new());
    let leaser = PollingLeaser::new(store.clone(), TTL, POLL).unwrap();
    let t0 = Instant::now();
    let a = leaser.new_lease("job", b"a".to_vec()).unwrap();
    sleep_until(t0 + ms(10)).await;
    assert!(a.is_held());
    store.hook().set_mode(FaultMode::Cut);
    sleep_until(t0 + ms(1_500)).await;
    store.hook().set_mode(FaultMode::Stall);
    // A contender on the same store, unaffected by the faults.
    let direct = PollingLeaser::new(store.inner().clone(), TTL, POLL).unwrap();
    let b = direct.new_lease("job", b"b".to_vec()).unwrap();
    let mut t = t0 + ms(1_500);
    let mut b_held_at = None;
    while t < t0 + ms(6_000) {
        t += ms(1);
        sleep_until(t).await;
        assert!(!(a.is_held() && b.is_held()), "both held at {:?}", t - t0);
        if b.is_held() && b_held_at.is_none() {
            b_held_at = Some(t - t0);
        }
    }
    let b_at = b_held_at.expect("the contender took the lease after the TTL");
    assert!(b_at >= TTL, "the contender took a live lease at {b_at:?}");
    // The store's record is b's.
    let (_, holder) = store.inner().try_acquire("job", b"c", TTL).await.unwrap();
    assert_eq!(holder, b"b");
    store.hook().set_mode(FaultMode::Pass);
    b.close().await;
    a.close().await;
}
