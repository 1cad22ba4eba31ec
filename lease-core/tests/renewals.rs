//! Coalesced renewals (`Renewals::Coalesced`), in paused tokio time: one batch per period for
//! every term of a coordinator, each term keeping its own deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::backend::LeaseStoreExt;
use lease_core::coordinator::Renewals;
use lease_core::layer::{Answer, Call, Hook, Intercept, Operation};
use lease_core::{Coordinator, ErrorKind, LeaseStore, Timings};
use lease_local::MemoryStore;
use tokio::time::{Instant, sleep};

const S: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pass,
    /// The store renews at once, its answer arrives this much later; every later batch
    /// stalls.
    SlowOnce(Duration),
    /// Nothing answers, and nothing reaches the store.
    Stall,
}

/// Counts renewals (single and batched) and plays the mode on batches.
#[derive(Debug)]
struct Batches {
    mode: Mutex<Mode>,
    batches: AtomicU64,
    singles: AtomicU64,
    releases: AtomicU64,
}

impl Batches {
    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

impl Hook for Batches {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        match call.operation {
            Operation::Renew => {
                self.singles.fetch_add(1, Ordering::SeqCst);
                return op;
            }
            Operation::Release => {
                self.releases.fetch_add(1, Ordering::SeqCst);
                return op;
            }
            Operation::RenewMany => {}
            _ => return op,
        }
        self.batches.fetch_add(1, Ordering::SeqCst);
        let mode = {
            let mut mode = self.mode.lock().unwrap();
            let now = *mode;
            if let Mode::SlowOnce(_) = now {
                *mode = Mode::Stall;
            }
            now
        };
        Box::pin(async move {
            match mode {
                Mode::Pass => op.await,
                Mode::SlowOnce(d) => {
                    let answer = op.await;
                    sleep(d).await;
                    answer
                }
                Mode::Stall => std::future::pending().await,
            }
        })
    }
}

type Store = Arc<Intercept<MemoryStore, Batches>>;

/// A memory store (native batches) whose renewals and releases are counted, passing through.
fn counted_store() -> Store {
    Arc::new(MemoryStore::new().with_hook(Batches {
        mode: Mutex::new(Mode::Pass),
        batches: AtomicU64::new(0),
        singles: AtomicU64::new(0),
        releases: AtomicU64::new(0),
    }))
}

fn rig() -> (Store, Coordinator) {
    let store = counted_store();
    let coordinator = Coordinator::builder(store.clone())
        .instance("a")
        .timings(Timings::default())
        .renewals(Renewals::Coalesced)
        .fail_action(|_| {})
        .build()
        .unwrap();
    (store, coordinator)
}

fn batches(store: &Store) -> u64 {
    store.hook().batches.load(Ordering::SeqCst)
}

#[tokio::test(start_paused = true)]
async fn terms_of_one_coordinator_renew_in_one_batch_per_period() {
    let (store, coordinator) = rig();
    let mut terms = Vec::new();
    for i in 0..50 {
        terms.push(coordinator.try_acquire(format!("job-{i}")).await.unwrap());
    }
    sleep(Duration::from_millis(60_500)).await;
    // Batches at 2, 4, …, 60 s: 30, each renewing all 50 names; no single renewal.
    assert_eq!(batches(&store), 30);
    assert_eq!(store.hook().singles.load(Ordering::SeqCst), 0);
    for term in &terms {
        assert!(term.is_live());
        let info = store.inner().get(term.name()).await.unwrap().unwrap();
        assert!(info.live && info.expires_in == 15 * S - 500 * Duration::from_millis(1));
    }
    coordinator.close().await.unwrap();
}

/// A term's deadline counts from the start of the batch that renewed it, not from its answer:
/// the batch sent at 2 s is answered at 5 s, the store then stops answering, and the terms
/// are lost at 12 s.
#[tokio::test(start_paused = true)]
async fn a_deadline_counts_from_the_start_of_its_batch() {
    // The break switch: deadlines counted from the answer make this test fail (lost at 15 s).
    let broken = std::env::var_os("LEASE_TEST_BREAK_BATCH_STAMP").is_some();
    lease_core::coordinator::testing::stamp_batches_at_answer(broken);
    let (store, coordinator) = rig();
    let t0 = Instant::now();
    let a = coordinator.try_acquire("a").await.unwrap();
    let b = coordinator.try_acquire("b").await.unwrap();
    store.hook().set(Mode::SlowOnce(3 * S));
    sleep(Duration::from_millis(5001)).await;
    assert_eq!(
        batches(&store),
        2,
        "the batch sent at 2 s was answered at 5 s, the next sent at once"
    );
    for term in [&a, &b] {
        assert_eq!(
            term.deadline_in(),
            Duration::from_millis(6999),
            "deadline = 2 s (the batch's start) + 10 s"
        );
    }
    a.lost().await;
    assert_eq!(
        t0.elapsed(),
        12 * S,
        "lost at the batch's start + the 10 s deadline"
    );
    b.lost().await;
    assert_eq!(t0.elapsed(), 12 * S);
    let err = a.err().unwrap();
    assert_eq!(err.kind(), ErrorKind::Lost);
    assert!(err.to_string().contains("deadline"), "{err}");
}

/// A batch answer that says one name is gone ends that term alone, at once, and nothing is
/// released for it; the others go on renewing.
#[tokio::test(start_paused = true)]
async fn a_batch_that_loses_one_name_ends_only_that_term() {
    let (store, coordinator) = rig();
    let t0 = Instant::now();
    let a = coordinator.try_acquire("a").await.unwrap();
    let b = coordinator.try_acquire("b").await.unwrap();
    let c = coordinator.try_acquire("c").await.unwrap();
    // An administrator breaks b's lease: the store no longer holds it for this holder.
    assert!(store.inner().force_release("b").await.unwrap());
    b.lost().await;
    assert_eq!(t0.elapsed(), 2 * S, "at the first batch");
    assert!(
        b.err().unwrap().to_string().contains("no longer held"),
        "{:?}",
        b.err()
    );
    assert!(a.is_live() && c.is_live());
    drop(b);
    sleep(Duration::from_millis(19_500)).await;
    assert!(a.is_live() && c.is_live(), "the others renew on");
    assert_eq!(batches(&store), 10, "one batch per period, at 2 … 20 s");
    assert_eq!(
        store.hook().releases.load(Ordering::SeqCst),
        0,
        "nothing released for the lease the store said is gone"
    );
    let info = store.inner().get("a").await.unwrap().unwrap();
    assert!(info.live);
    a.resign().await.unwrap();
    assert_eq!(store.hook().releases.load(Ordering::SeqCst), 1);
    assert!(!store.inner().get("a").await.unwrap().unwrap().live);
    assert!(c.is_live());
}

/// A batch that never answers ends each term at its own deadline: a claimed at 0 s and
/// renewed at 2 s is lost at 12 s; b, claimed at 3 s and never renewed, at 13 s. Neither
/// waits for the batch's attempt timeout.
#[tokio::test(start_paused = true)]
async fn a_stalled_batch_ends_terms_at_their_own_deadlines() {
    let (store, coordinator) = rig();
    let t0 = Instant::now();
    let a = coordinator.try_acquire("a").await.unwrap();
    sleep(3 * S).await;
    let b = coordinator.try_acquire("b").await.unwrap();
    store.hook().set(Mode::Stall);
    a.lost().await;
    assert_eq!(t0.elapsed(), 12 * S, "a: renewed at 2 s, + 10 s");
    assert!(b.is_live());
    b.lost().await;
    assert_eq!(t0.elapsed(), 13 * S, "b: claimed at 3 s, + 10 s");
}

/// A term resigned while its coordinator renews in batches is released at once, not at the
/// next tick.
#[tokio::test(start_paused = true)]
async fn a_resign_releases_at_once() {
    let (store, coordinator) = rig();
    let a = coordinator.try_acquire("a").await.unwrap();
    let b = coordinator.try_acquire("b").await.unwrap();
    sleep(S).await;
    let t = Instant::now();
    a.resign().await.unwrap();
    assert_eq!(t.elapsed(), Duration::ZERO);
    assert!(!store.inner().get("a").await.unwrap().unwrap().live);
    drop(b);
    // Dropping the last handle releases too, without waiting for a tick.
    sleep(Duration::from_millis(1)).await;
    assert!(!store.inner().get("b").await.unwrap().unwrap().live);
    assert_eq!(batches(&store), 0);
}

/// The default (`Renewals::Auto`) coalesces on a store with native batches: one batch per
/// period for both terms, no single renewal.
#[tokio::test(start_paused = true)]
async fn the_default_coalesces_on_a_store_with_batches() {
    let store = counted_store();
    assert!(store.capabilities().renew_many);
    let coordinator = Coordinator::builder(store.clone()).build().unwrap();
    let _a = coordinator.try_acquire("a").await.unwrap();
    let _b = coordinator.try_acquire("b").await.unwrap();
    sleep(Duration::from_millis(4500)).await;
    assert_eq!(batches(&store), 2, "batches at 2 s and 4 s");
    assert_eq!(store.hook().singles.load(Ordering::SeqCst), 0);
}

/// The per-term path is still there: one renew per term per period, no batch.
#[tokio::test(start_paused = true)]
async fn per_term_renewals_can_still_be_chosen() {
    let store = counted_store();
    assert!(store.capabilities().renew_many);
    let coordinator = Coordinator::builder(store.clone())
        .renewals(Renewals::PerTerm)
        .build()
        .unwrap();
    let _a = coordinator.try_acquire("a").await.unwrap();
    let _b = coordinator.try_acquire("b").await.unwrap();
    sleep(Duration::from_millis(4500)).await;
    assert_eq!(store.hook().singles.load(Ordering::SeqCst), 4);
    assert_eq!(batches(&store), 0);
}

/// A batch that answers after its oldest term's deadline still renews the others: a, never
/// renewed, is lost at its deadline (10 s) while the batch sent at 7 s is in flight; b,
/// claimed at 5 s, is renewed by that batch when it answers at 11 s, its deadline then 7 s +
/// 10 s.
#[tokio::test(start_paused = true)]
async fn a_slow_batch_ends_its_oldest_term_and_renews_the_others() {
    let (store, coordinator) = rig();
    let t0 = Instant::now();
    store.hook().set(Mode::Stall);
    let a = coordinator.try_acquire("a").await.unwrap();
    sleep(5 * S).await;
    let b = coordinator.try_acquire("b").await.unwrap();
    sleep(Duration::from_millis(1500)).await;
    // The batch sent at 2 s stalls until its attempt timeout at 7 s; the next, sent at once,
    // answers 4 s later.
    store.hook().set(Mode::SlowOnce(4 * S));
    a.lost().await;
    assert_eq!(t0.elapsed(), 10 * S, "a: claimed at 0 s, + 10 s");
    assert!(b.is_live());
    sleep(Duration::from_millis(1001)).await;
    assert_eq!(
        b.deadline_in(),
        Duration::from_millis(5999),
        "b renewed by the batch sent at 7 s"
    );
}
