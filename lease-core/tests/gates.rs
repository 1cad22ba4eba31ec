//! Claim gates through the engine, in paused tokio time on the memory store: a coordinator's
//! lock-delay after a crash and after a resign, per-name delays, `Term::hand_over` to a chosen
//! waiter and to one that never comes, and the refusals of a store without the capabilities.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use lease_conformance::{FaultMode, faulty};
use lease_core::backend::wait::HINT_JITTER;
use lease_core::{Coordinator, ErrorKind, LeaseStore, Term, Timings};
use lease_local::MemoryStore;
use tokio::time::{Instant, sleep};

const S: Duration = Duration::from_secs(1);
const DELAY: Duration = Duration::from_secs(10);

fn builder(
    store: Arc<dyn LeaseStore>,
    instance: &str,
) -> lease_core::coordinator::CoordinatorBuilder {
    Coordinator::builder(store)
        .instance(instance)
        .timings(Timings::default())
}

fn waiting(
    c: &Coordinator,
    name: &str,
    limit: Duration,
) -> tokio::task::JoinHandle<(lease_core::Result<Term>, Instant)> {
    let c = c.clone();
    let name = name.to_owned();
    tokio::spawn(async move {
        let r = c.acquire(&name, limit).await;
        (r, Instant::now())
    })
}

/// How late a waiter may see a gate open: it polls at the retry pace (no hint marks the
/// opening), plus the wait's margins.
fn poll_late() -> Duration {
    let t = Timings::default();
    t.retry() + t.jitter() + HINT_JITTER
}

/// Cuts the holder off the store: no renewal and no release reach it, so the lease expires.
async fn crash_and_wait_for_successor(delay_for_job: Option<Duration>) -> (Duration, u64, u64) {
    let holder_side = faulty(MemoryStore::new());
    let inner = holder_side.inner().clone();
    let mut a = builder(Arc::new(holder_side.clone()), "a").lock_delay(DELAY);
    if let Some(d) = delay_for_job {
        a = a.lock_delay_for("job", d);
    }
    let a = a.build().unwrap();
    // The successor declares no delay of its own: it honours the lost holder's.
    let b = builder(Arc::new(inner.clone()), "b").build().unwrap();
    let t1 = a.try_acquire("job").await.unwrap();
    let w = waiting(&b, "job", 120 * S);
    sleep(7 * S).await;
    holder_side.hook().set_mode(FaultMode::Cut);
    let info = inner.get("job").await.unwrap().unwrap();
    let expiry = Instant::now() + info.expires_in;
    let (t2, at) = w.await.unwrap();
    t1.lost().await;
    let t2 = t2.unwrap();
    assert!(
        at >= expiry,
        "successor {:?} before the expiry",
        expiry - at
    );
    (at - expiry, t1.token(), t2.token())
}

#[tokio::test(start_paused = true)]
async fn a_crashed_holder_with_a_lock_delay_is_succeeded_after_expiry_plus_delay() {
    let (after_expiry, t1, t2) = crash_and_wait_for_successor(None).await;
    assert!(
        after_expiry >= DELAY,
        "successor {after_expiry:?} after the expiry, before the lock-delay of {DELAY:?}"
    );
    assert!(
        after_expiry <= DELAY + poll_late(),
        "successor {after_expiry:?} after the expiry"
    );
    assert_eq!(t2, t1 + 1);
}

#[tokio::test(start_paused = true)]
async fn a_per_name_delay_of_zero_lets_the_successor_in_at_the_expiry() {
    let (after_expiry, t1, t2) = crash_and_wait_for_successor(Some(Duration::ZERO)).await;
    assert!(
        after_expiry < DELAY,
        "successor {after_expiry:?} after the expiry: the per-name delay of zero was ignored"
    );
    assert_eq!(t2, t1 + 1);
}

#[tokio::test(start_paused = true)]
async fn a_resigned_holder_with_a_lock_delay_is_succeeded_at_once() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let a = builder(store.clone(), "a")
        .lock_delay(DELAY)
        .build()
        .unwrap();
    let b = builder(store.clone(), "b").build().unwrap();
    let t1 = a.try_acquire("job").await.unwrap();
    let w = waiting(&b, "job", 60 * S);
    sleep(5 * S).await;
    let released = Instant::now();
    t1.resign().await.unwrap();
    let (t2, at) = w.await.unwrap();
    assert!(at - released <= HINT_JITTER, "{:?}", at - released);
    assert_eq!(t2.unwrap().token(), t1.token() + 1);
}

#[tokio::test(start_paused = true)]
async fn hand_over_goes_to_the_chosen_waiter_and_no_other() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let a = builder(store.clone(), "a")
        .lock_delay(DELAY)
        .build()
        .unwrap();
    let b = builder(store.clone(), "b").build().unwrap();
    let c = builder(store.clone(), "c").build().unwrap();
    let t1 = a.try_acquire("job").await.unwrap();
    // b waits first, and is woken by the hand-over's hint: it must still not get the name.
    let wb = waiting(&b, "job", 120 * S);
    sleep(5 * S).await;
    assert!(t1.hand_over("c", 30 * S).await.unwrap());
    assert!(!t1.is_live());
    sleep(S).await;
    assert!(!wb.is_finished(), "b claimed a name handed over to c");
    let wc = waiting(&c, "job", 120 * S);
    let asked = Instant::now();
    let (tc, at) = wc.await.unwrap();
    assert!(at - asked <= HINT_JITTER, "{:?}", at - asked);
    let tc = tc.unwrap();
    assert_eq!(tc.token(), t1.token() + 1);
    // b keeps waiting while c holds; c's own release opens the name to b at once.
    sleep(40 * S).await;
    assert!(!wb.is_finished(), "b claimed a name c holds");
    tc.resign().await.unwrap();
    let (tb, _) = wb.await.unwrap();
    assert_eq!(tb.unwrap().token(), tc.token() + 1);
    // A term that was handed over cannot be handed over again.
    assert!(!t1.hand_over("b", 30 * S).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_hand_over_to_an_absent_successor_opens_to_anyone_after_the_window() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let a = builder(store.clone(), "a").build().unwrap();
    let b = builder(store.clone(), "b").build().unwrap();
    let t1 = a.try_acquire("job").await.unwrap();
    let wb = waiting(&b, "job", 120 * S);
    sleep(5 * S).await;
    let handed = Instant::now();
    let window = 10 * S;
    assert!(t1.hand_over("nobody", window).await.unwrap());
    let (tb, at) = wb.await.unwrap();
    let took = at - handed;
    assert!(
        took >= window,
        "b claimed {took:?} into a window of {window:?}"
    );
    assert!(
        took <= window + poll_late(),
        "b claimed {took:?} after the hand-over"
    );
    assert_eq!(tb.unwrap().token(), t1.token() + 1);
}

#[tokio::test(start_paused = true)]
async fn a_store_without_gates_refuses_them_and_keeps_the_term() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::never_expiring());
    let err = builder(store.clone(), "a")
        .lock_delay(DELAY)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.to_string().contains("lock-delay"), "{err}");
    let err = builder(Arc::new(MemoryStore::new()), "a")
        .lock_delay(2 * lease_core::backend::MAX_LOCK_DELAY)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidTimings, "{err}");
    // A hand-over on the never-expiring store works; with a bad window it is refused and the
    // term kept.
    let a = builder(store.clone(), "a").build().unwrap();
    let t = a.try_acquire("job").await.unwrap();
    let err = t.hand_over("b", Duration::ZERO).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidTimings, "{err}");
    assert!(t.is_live());
    let err = t.hand_over("", S).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidName, "{err}");
    assert!(t.is_live());
    assert!(t.hand_over("b", S).await.unwrap());
}
