//! A machine suspend, simulated in paused time by jumping the boot clock
//! (`lease_core::backend::clock::testing::suspend`): a term whose deadline passed while the machine
//! slept ends at once on resume — `is_live()`, and the `lost()` / `done()` events the CLI and the
//! work wait on — not when the keeper's tokio timer, which does not count a suspend, next fires.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use lease_conformance::{FaultMode, FaultyStore, faulty};
use lease_core::backend::clock::testing;
use lease_core::{Coordinator, ErrorKind, Timings};
use lease_local::MemoryStore;
use tokio::time::{Instant, sleep, timeout};

const S: Duration = Duration::from_secs(1);

fn coordinator(store: FaultyStore<MemoryStore>) -> Coordinator {
    Coordinator::builder(store)
        .instance("a")
        .timings(Timings::default())
        .fail_action(|_| {})
        .build()
        .unwrap()
}

/// Waits for `fut` without letting paused time move: it must be ready at this instant.
async fn at_once<F: std::future::Future>(fut: F) -> Option<F::Output> {
    let before = Instant::now();
    let out = timeout(Duration::from_millis(1), fut).await.ok();
    assert!(before.elapsed() <= Duration::from_millis(1));
    out
}

#[tokio::test(start_paused = true)]
async fn a_suspend_past_the_deadline_ends_the_term_at_once_on_resume() {
    if !testing::can_suspend() {
        eprintln!("no boot clock on this platform: nothing to test");
        return;
    }
    let store = faulty(MemoryStore::new());
    let c = coordinator(store.clone());
    let term = c.try_acquire("job").await.unwrap();
    // Between renewals (every 2 s): the keeper sleeps on tokio's timer.
    sleep(S / 2).await;
    assert!(term.is_live());
    testing::suspend(Duration::from_secs(3600));
    assert!(!term.is_live(), "is_live reads the clock");
    assert!(
        at_once(term.lost()).await.is_some(),
        "lost() must fire at the resume, not at the keeper's next timer"
    );
    assert!(at_once(term.done()).await.is_some());
    assert!(term.err().unwrap().is(ErrorKind::Lost));
}

#[tokio::test(start_paused = true)]
async fn a_suspend_during_a_hanging_renewal_ends_the_term_at_once_on_resume() {
    if !testing::can_suspend() {
        eprintln!("no boot clock on this platform: nothing to test");
        return;
    }
    let store = faulty(MemoryStore::new());
    let c = coordinator(store.clone());
    let term = c.try_acquire("job").await.unwrap();
    store.hook().set_mode(FaultMode::Stall);
    // The first renewal starts at 2 s and hangs (its timeout runs on tokio's clock).
    sleep(S * 2 + Duration::from_millis(100)).await;
    assert!(term.is_live());
    testing::suspend(Duration::from_secs(3600));
    assert!(
        at_once(term.lost()).await.is_some(),
        "lost() must fire at the resume, not when the attempt's timeout ends"
    );
}

#[tokio::test(start_paused = true)]
async fn a_short_suspend_within_the_deadline_keeps_the_term() {
    if !testing::can_suspend() {
        return;
    }
    let store = faulty(MemoryStore::new());
    let c = coordinator(store.clone());
    let term = c.try_acquire("job").await.unwrap();
    sleep(S / 2).await;
    testing::suspend(S);
    assert!(at_once(term.done()).await.is_none(), "1 s of a 15 s lease");
    sleep(S * 10).await;
    assert!(term.is_live(), "renewals go on after the resume");
    term.resign().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_suspend_past_an_acquires_limit_ends_the_wait_at_once_on_resume() {
    if !testing::can_suspend() {
        return;
    }
    let store = faulty(MemoryStore::new());
    let holder = coordinator(store.clone());
    let _held = holder.try_acquire("job").await.unwrap();
    let waiter = Coordinator::builder(store.clone())
        .instance("b")
        .timings(Timings::default())
        .build()
        .unwrap();
    let w = tokio::spawn(async move { waiter.acquire("job", S * 60).await });
    // b waits behind a holder that renews: for the holder's expiry, on tokio's timer.
    sleep(S * 3).await;
    assert!(!w.is_finished());
    testing::suspend(Duration::from_secs(3600));
    let won = at_once(w)
        .await
        .expect("the wait must end at the resume, not when its tokio timer fires")
        .unwrap();
    assert!(won.unwrap_err().is(ErrorKind::Timeout));
}
