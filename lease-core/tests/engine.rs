//! Engine tests on lease-local, in paused tokio time: minutes of protocol in milliseconds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_conformance::{FaultMode, FaultyStore, HintMode, faulty};
use lease_core::{
    Coordinator, ErrorKind, LeaseStore, Timings,
    coordinator::{OnWorkError, StepDownFailure},
};
use lease_local::MemoryStore;
use tokio::time::{Instant, advance, sleep};

const S: Duration = Duration::from_secs(1);

#[derive(Clone, Default)]
struct Failures(Arc<Mutex<Vec<(Instant, StepDownFailure)>>>);

impl Failures {
    fn list(&self) -> Vec<(Instant, StepDownFailure)> {
        self.0.lock().unwrap().clone()
    }
}

struct Rig {
    store: FaultyStore<MemoryStore>,
    coordinator: Coordinator,
    failures: Failures,
}

fn rig_with(store: FaultyStore<MemoryStore>, instance: &str) -> Rig {
    let failures = Failures::default();
    let f = failures.clone();
    let coordinator = Coordinator::builder(store.clone())
        .instance(instance)
        .timings(Timings::default())
        .fail_action(move |failure| {
            f.0.lock().unwrap().push((Instant::now(), failure.clone()));
        })
        .build()
        .unwrap();
    Rig {
        store,
        coordinator,
        failures,
    }
}

fn rig() -> Rig {
    rig_with(faulty(MemoryStore::new()), "a")
}

async fn live_holder(store: &impl LeaseStore, name: &str) -> Option<String> {
    store
        .get(name)
        .await
        .unwrap()
        .filter(|i| i.live)
        .map(|i| i.instance)
}

#[tokio::test(start_paused = true)]
async fn renews_at_the_cadence() {
    let r = rig();
    let term = r.coordinator.try_acquire("job").await.unwrap();
    assert_eq!(r.store.hook().counts().renews, 0);
    sleep(Duration::from_millis(1999)).await;
    assert_eq!(r.store.hook().counts().renews, 0, "no renewal before 2 s");
    sleep(Duration::from_millis(2)).await;
    assert_eq!(r.store.hook().counts().renews, 1, "first renewal at 2 s");
    sleep(Duration::from_secs(60)).await;
    assert_eq!(r.store.hook().counts().renews, 31, "one renewal every 2 s");
    // Renewal really extends the lease: a minute on, it is still live by the store's clock.
    assert!(term.is_live());
    assert_eq!(
        live_holder(r.store.inner(), "job").await.as_deref(),
        Some("a")
    );
    let left = term.expires_in();
    assert!(left > 12 * S && left <= 15 * S, "{left:?}");
}

#[tokio::test(start_paused = true)]
async fn failed_renewals_are_retried_at_the_cadence() {
    let r = rig();
    let term = r.coordinator.try_acquire("job").await.unwrap();
    r.store.hook().set_mode(FaultMode::Cut);
    sleep(Duration::from_millis(7500)).await;
    assert_eq!(r.store.hook().counts().renews, 3, "attempts at 2, 4, 6 s");
    assert!(term.is_live());
    r.store.hook().set_mode(FaultMode::Pass);
    sleep(S).await;
    assert_eq!(r.store.hook().counts().renews, 4, "attempt at 8 s");
    sleep(20 * S).await;
    assert!(
        term.is_live(),
        "a renewal before the deadline saved the term"
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_against_a_hanging_store_is_bounded() {
    let r = rig();
    let t0 = Instant::now();
    let term = r.coordinator.try_acquire("job").await.unwrap();
    r.store.hook().set_mode(FaultMode::Stall);
    sleep(Duration::from_millis(2001)).await;
    assert_eq!(
        r.store.hook().counts().renews,
        1,
        "first attempt started at 2 s and hangs"
    );
    sleep(Duration::from_millis(4998)).await;
    assert_eq!(r.store.hook().counts().renews, 1, "attempts never overlap");
    sleep(Duration::from_millis(2)).await;
    // Cut at the attempt timeout (5 s, at 7 s); the next starts at once, since 2 s have passed.
    assert_eq!(r.store.hook().counts().renews, 2, "second attempt at 7 s");
    // It is cut at the deadline, not 5 s later.
    term.lost().await;
    assert_eq!(t0.elapsed(), 10 * S);
}

#[tokio::test(start_paused = true)]
async fn loss_comes_exactly_at_the_deadline() {
    for mode in [FaultMode::Stall, FaultMode::Cut, FaultMode::LoseAnswers] {
        let r = rig();
        let t0 = Instant::now();
        let term = r.coordinator.try_acquire("job").await.unwrap();
        sleep(Duration::from_millis(4500)).await; // renewals at 2 and 4 s succeed
        r.store.hook().set_mode(mode);
        sleep(Duration::from_millis(9499)).await;
        assert!(term.is_live(), "{mode:?}: live 1 ms before the deadline");
        assert!(term.err().is_none());
        term.lost().await;
        assert_eq!(
            t0.elapsed(),
            14 * S,
            "{mode:?}: deadline = last success at 4 s + 10 s"
        );
        let err = term.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Lost);
        assert!(err.to_string().contains("deadline"), "{err}");
        assert!(term.check().is_err());
        // The store lets no-one else in for another 5 s: the grace (4 s) and the margin that
        // deadline + grace < lease guarantees. (A lost answer may have renewed it further.)
        let info = r.store.inner().get("job").await.unwrap().unwrap();
        assert!(info.live && info.expires_in >= 5 * S, "{mode:?}: {info:?}");
        if mode != FaultMode::LoseAnswers {
            assert_eq!(info.expires_in, 5 * S, "{mode:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn loss_is_immediate_when_the_store_says_the_lease_is_gone() {
    let r = rig();
    let t0 = Instant::now();
    let term = r.coordinator.try_acquire("job").await.unwrap();
    assert!(r.store.inner().force_release("job").await.unwrap());
    term.lost().await;
    assert_eq!(t0.elapsed(), 2 * S, "at the first renewal");
    assert!(term.err().unwrap().to_string().contains("no longer held"));
}

#[tokio::test(start_paused = true)]
async fn renewals_continue_while_work_winds_down_on_close() {
    let r = rig();
    let t0 = Instant::now();
    let term = r.coordinator.try_acquire("job").await.unwrap();
    let runner = tokio::spawn(term.run(|term| async move {
        term.done().await;
        // Ignores the cancellation for 30 s: a long, careful wind-down.
        sleep(30 * S).await;
        Ok::<_, std::io::Error>(term.token())
    }));
    sleep(S).await;
    let closed = r.coordinator.close().await;
    assert_eq!(t0.elapsed(), 5 * S, "close waits the step-down grace");
    assert_eq!(closed.unwrap_err().kind(), ErrorKind::Timeout);
    let renews = r.store.hook().counts().renews;
    sleep(20 * S).await;
    assert!(
        r.store.hook().counts().renews >= renews + 9,
        "still renewing"
    );
    assert_eq!(
        live_holder(r.store.inner(), "job").await.as_deref(),
        Some("a"),
        "never freed while the work is winding down"
    );
    assert_eq!(runner.await.unwrap().unwrap(), 1);
    assert_eq!(t0.elapsed(), 31 * S);
    assert_eq!(
        live_holder(r.store.inner(), "job").await,
        None,
        "released after"
    );
    assert!(r.failures.list().is_empty(), "a close is not a loss");
}

#[tokio::test(start_paused = true)]
async fn close_signals_terms_waits_for_work_then_releases() {
    let r = rig();
    let bare = r.coordinator.try_acquire("bare").await.unwrap();
    let worked = r.coordinator.try_acquire("worked").await.unwrap();
    let runner = tokio::spawn(worked.run(|term| async move {
        term.done().await;
        sleep(S).await;
        Ok::<_, std::io::Error>(())
    }));
    let t0 = Instant::now();
    r.coordinator.close().await.unwrap();
    assert_eq!(t0.elapsed(), S, "waited for the work, not the whole grace");
    assert_eq!(bare.err().unwrap().kind(), ErrorKind::Closed);
    runner.await.unwrap().unwrap();
    assert_eq!(live_holder(r.store.inner(), "bare").await, None);
    assert_eq!(live_holder(r.store.inner(), "worked").await, None);
    let e = r.coordinator.try_acquire("other").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Closed);
    r.coordinator.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn lost_work_gets_the_grace_then_the_fail_action() {
    let r = rig();
    let t0 = Instant::now();
    let term = r.coordinator.try_acquire("job").await.unwrap();
    r.store.hook().set_mode(FaultMode::Stall);
    let stuck = Arc::new(Mutex::new(true));
    let s = stuck.clone();
    let result = term
        .run(|_term| async move {
            sleep(3600 * S).await; // never looks at the term
            *s.lock().unwrap() = false;
            Ok::<_, std::io::Error>(())
        })
        .await;
    assert_eq!(t0.elapsed(), 14 * S, "deadline 10 s + grace 4 s");
    let err = result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost);
    assert!(err.to_string().contains("step-down grace"), "{err}");
    let failures = r.failures.list();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].0 - t0, 14 * S);
    assert_eq!(failures[0].1.name, "job");
    assert_eq!(failures[0].1.term, 1);
    sleep(7200 * S).await;
    assert!(*stuck.lock().unwrap(), "the work was aborted");
}

#[tokio::test(start_paused = true)]
async fn lost_work_that_returns_within_the_grace_is_not_failed() {
    let r = rig();
    let t0 = Instant::now();
    let term = r.coordinator.try_acquire("job").await.unwrap();
    r.store.hook().set_mode(FaultMode::Cut);
    let result = term
        .run(|term| async move {
            term.done().await;
            sleep(3 * S).await;
            Err::<(), _>(std::io::Error::other("interrupted"))
        })
        .await;
    assert_eq!(t0.elapsed(), 13 * S);
    assert_eq!(
        result.unwrap_err().kind(),
        ErrorKind::Lost,
        "lost, not the work's error"
    );
    assert!(r.failures.list().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_panic_becomes_an_error_and_the_lease_is_released() {
    let r = rig();
    let term = r.coordinator.try_acquire("job").await.unwrap();
    let err = term
        .run(|_| async move {
            sleep(S).await;
            if true {
                panic!("boom at step 3");
            }
            Ok::<(), std::io::Error>(())
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Panicked);
    assert!(err.to_string().contains("boom at step 3"), "{err}");
    assert_eq!(live_holder(r.store.inner(), "job").await, None);
}

#[tokio::test(start_paused = true)]
async fn run_returns_the_work_result_and_releases() {
    let r = rig();
    let v = r
        .coordinator
        .run("job", |term| async move {
            Ok::<_, std::io::Error>(term.token() * 10)
        })
        .await
        .unwrap();
    assert_eq!(v, 10);
    assert_eq!(live_holder(r.store.inner(), "job").await, None);
    let err = r
        .coordinator
        .run("job", |_| async {
            Err::<(), _>(std::io::Error::other("disk full"))
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Work);
    assert!(err.to_string().contains("disk full"), "{err}");
    let info = r.store.inner().get("job").await.unwrap().unwrap();
    assert_eq!((info.term, info.live), (2, false));
}

#[tokio::test(start_paused = true)]
async fn resign_frees_the_name_at_once_with_a_higher_term() {
    let store = faulty(MemoryStore::new());
    let a = rig_with(store.clone(), "a");
    let b = rig_with(store.clone(), "b");
    let t1 = a.coordinator.try_acquire("job").await.unwrap();
    assert_eq!(
        b.coordinator.try_acquire("job").await.unwrap_err().kind(),
        ErrorKind::Held
    );
    t1.resign().await.unwrap();
    assert!(t1.err().is_none() && !t1.is_live());
    let t2 = b.coordinator.try_acquire("job").await.unwrap();
    assert!(t2.token() > t1.token());
    // Dropping every handle releases in the background.
    drop(t2);
    tokio::task::yield_now().await;
    sleep(Duration::from_millis(1)).await;
    let t3 = a.coordinator.try_acquire("job").await.unwrap();
    assert_eq!(t3.token(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_claim_whose_answer_was_lost_is_adopted() {
    let r = rig();
    r.store.hook().set_claim_mode(FaultMode::LoseAnswers);
    let t0 = Instant::now();
    let term = r.coordinator.try_acquire("job").await.unwrap();
    assert_eq!(t0.elapsed(), 5 * S, "after the attempt timeout");
    assert_eq!(term.token(), 1);
    assert_eq!(r.store.hook().counts().verifies, 1, "read back once");
    assert!(
        term.deadline_in() <= 5 * S,
        "the deadline counts from the claim's start"
    );
    r.store.hook().set_claim_mode(FaultMode::Pass);
    sleep(30 * S).await;
    assert!(term.is_live(), "kept like any other term");
}

#[tokio::test(start_paused = true)]
async fn a_claim_that_did_not_take_effect_is_not_adopted() {
    let r = rig();
    r.store.hook().set_claim_mode(FaultMode::Cut);
    let err = r.coordinator.try_acquire("job").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert_eq!(
        r.store.hook().counts().verifies,
        1,
        "read back before giving up"
    );
    assert_eq!(r.store.inner().get("job").await.unwrap(), None);
}

/// Under `OnWorkError::Return` (the default restarts: see tests/runs.rs).
#[tokio::test(start_paused = true)]
async fn run_elected_returns_an_error_of_a_live_term() {
    let mut r = rig();
    r.coordinator = Coordinator::builder(r.store.clone())
        .instance("a")
        .on_work_error(OnWorkError::Return)
        .build()
        .unwrap();
    let err = r
        .coordinator
        .run_elected("job", |_term| async {
            Err::<(), _>(std::io::Error::other("bad config"))
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Work);
    assert!(err.to_string().contains("bad config"), "{err}");
    let err = r
        .coordinator
        .run_elected("job", |_term| async {
            if true {
                panic!("kaboom");
            }
            Ok::<(), std::io::Error>(())
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Panicked);
    let err = r
        .coordinator
        .run_elected("", |_term| async { Ok::<(), std::io::Error>(()) })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidName);
}

#[tokio::test(start_paused = true)]
async fn run_elected_treats_held_lost_and_failed_campaigns_as_the_election_working() {
    let store = faulty(MemoryStore::new());
    // Without hints, so that the campaigns while held come at the retry pace (with hints they
    // come about once per lease period: tests/handover.rs).
    store.hook().set_hint_mode(HintMode::Cut);
    let rival = rig_with(store.clone(), "rival");
    let r = rig_with(store.clone(), "a");
    let rival_term = rival.coordinator.try_acquire("job").await.unwrap();
    let terms = Arc::new(Mutex::new(Vec::new()));
    let seen = terms.clone();
    let (lost_tx, mut lost_rx) = tokio::sync::watch::channel(false);
    let lost_tx = Arc::new(lost_tx);
    let coordinator = r.coordinator.clone();
    let elected = tokio::spawn(async move {
        coordinator
            .run_elected("job", move |term| {
                let seen = seen.clone();
                let lost_tx = lost_tx.clone();
                async move {
                    seen.lock().unwrap().push(term.token());
                    let n = seen.lock().unwrap().len();
                    if n == 1 {
                        // First term: lose it, then fail: an error of a lost term is not returned.
                        term.done().await;
                        lost_tx.send_replace(term.is_lost());
                        return Err(std::io::Error::other("interrupted by the loss"));
                    }
                    term.done().await;
                    Ok(())
                }
            })
            .await
    });
    // Held: it keeps campaigning.
    sleep(10 * S).await;
    assert!(terms.lock().unwrap().is_empty());
    let claims_while_held = store.hook().counts().claims;
    assert!(
        (4..=6).contains(&claims_while_held),
        "{claims_while_held} campaigns in 10 s"
    );
    rival_term.resign().await.unwrap();
    sleep(3 * S).await;
    assert_eq!(*terms.lock().unwrap(), vec![2]);
    // Lost: an admin breaks the lease; the work fails after the loss; campaigning goes on.
    assert!(store.inner().force_release("job").await.unwrap());
    lost_rx.wait_for(|lost| *lost).await.unwrap();
    // Failed campaigns: the store is cut for a while.
    store.hook().set_mode(FaultMode::Cut);
    sleep(10 * S).await;
    assert_eq!(terms.lock().unwrap().len(), 1);
    store.hook().set_mode(FaultMode::Pass);
    sleep(3 * S).await;
    assert_eq!(*terms.lock().unwrap(), vec![2, 3]);
    // Closed ends the loop with Ok.
    r.coordinator.close().await.unwrap();
    assert!(elected.await.unwrap().is_ok());
    assert!(r.failures.list().is_empty());
}

#[tokio::test(start_paused = true)]
async fn campaigns_are_spaced_by_retry_plus_jitter() {
    // The polling pace, where hints are missing (with hints an idle candidate asks about once
    // per lease period: tests/handover.rs).
    let store = faulty(MemoryStore::new());
    store.hook().set_hint_mode(HintMode::Cut);
    let holder = rig_with(store.clone(), "holder");
    let _term = holder.coordinator.try_acquire("job").await.unwrap();
    let mut candidates = Vec::new();
    for i in 0..8 {
        let c = rig_with(store.clone(), &format!("c{i}"));
        let coordinator = c.coordinator.clone();
        candidates.push(c);
        tokio::spawn(async move {
            coordinator
                .run_elected("job", |_| async { Ok::<(), std::io::Error>(()) })
                .await
        });
    }
    let before = store.hook().counts().claims;
    sleep(100 * S).await;
    let claims = store.hook().counts().claims - before;
    // 8 candidates, one claim each per [2 s, 2.5 s]: between 8 × 100 / 2.5 and 8 × 100 / 2 + 8.
    assert!((320..=408).contains(&claims), "{claims} claims");
}

#[tokio::test(start_paused = true)]
async fn close_ends_run_elected_while_it_waits() {
    let r = rig();
    let rival = rig_with(r.store.clone(), "rival");
    let _held = rival.coordinator.try_acquire("job").await.unwrap();
    let c = r.coordinator.clone();
    let elected = tokio::spawn(async move {
        c.run_elected("job", |_| async { Ok::<(), std::io::Error>(()) })
            .await
    });
    sleep(S).await;
    r.coordinator.close().await.unwrap();
    assert!(elected.await.unwrap().is_ok());
}

#[tokio::test(start_paused = true)]
async fn names_and_timings_are_checked_before_any_io() {
    let r = rig();
    for bad in ["", "a\0b"] {
        let e = r.coordinator.try_acquire(bad).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName);
    }
    let e = r
        .coordinator
        .try_acquire(&"x".repeat(256))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("256 bytes"), "{e}");
    assert_eq!(r.store.hook().counts(), Default::default(), "no I/O");
    let e = Coordinator::builder(MemoryStore::new())
        .instance("")
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);
}

#[tokio::test(start_paused = true)]
async fn local_terms_never_expire() {
    let c = lease_local::Local::coordinator().unwrap();
    let term = c.try_acquire("job").await.unwrap();
    advance(3600 * S).await;
    sleep(S).await;
    assert!(term.is_live());
    assert_eq!(
        c.try_acquire("job").await.unwrap_err().kind(),
        ErrorKind::Held
    );
    let store = MemoryStore::never_expiring();
    let holder = lease_core::backend::HolderToken::mint();
    store
        .claim("x", &holder, "i", Duration::from_millis(1))
        .await
        .unwrap()
        .unwrap();
    advance(3600 * S).await;
    assert!(store.get("x").await.unwrap().unwrap().live);
}

#[tokio::test(start_paused = true)]
async fn polling_leaser_hands_over_on_close() {
    let store = MemoryStore::new();
    let leaser = lease_core::backend::polling::PollingLeaser::new(store, 3 * S, S).unwrap();
    let a = leaser.new_lease("job", b"a".to_vec()).unwrap();
    sleep(Duration::from_millis(10)).await;
    let b = leaser.new_lease("job", b"b".to_vec()).unwrap();
    sleep(Duration::from_millis(10)).await;
    assert!(a.is_held());
    assert!(!b.is_held());
    assert_eq!(b.holder(), Some(b"a".to_vec()));
    sleep(10 * S).await;
    assert!(a.is_held(), "polling bumps its own TTL");
    let mut changes = b.changes();
    a.close().await;
    changes.wait_for(|s| s.held).await.unwrap();
    assert!(b.is_held());
    assert!(
        lease_core::backend::polling::PollingLeaser::new(MemoryStore::new(), 3 * S, 2 * S).is_err()
    );
}
