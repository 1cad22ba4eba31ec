//! Work under a term, the hard cases: a run whose future is dropped, a run racing `close`, and
//! an elector whose work fails or learns of its loss on its own. All on lease-local in paused
//! tokio time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_conformance::capture::MetricsCapture;
use lease_conformance::{FaultMode, FaultyStore, faulty};
use lease_core::{
    Coordinator, Error, ErrorKind, LeaseStore, Term,
    coordinator::{OnWorkError, StepDownFailure},
    telemetry,
};
use lease_local::MemoryStore;
use tokio::sync::Notify;
use tokio::time::{Instant, sleep};

const S: Duration = Duration::from_secs(1);

#[derive(Clone, Default)]
struct Failures(Arc<Mutex<Vec<(Instant, StepDownFailure)>>>);

impl Failures {
    fn list(&self) -> Vec<(Instant, StepDownFailure)> {
        self.0.lock().unwrap().clone()
    }
}

fn coordinator(store: &FaultyStore<MemoryStore>, instance: &str) -> (Coordinator, Failures) {
    let failures = Failures::default();
    let f = failures.clone();
    let c = Coordinator::builder(store.clone())
        .instance(instance)
        .fail_action(move |failure| {
            f.0.lock().unwrap().push((Instant::now(), failure.clone()));
        })
        .build()
        .unwrap();
    (c, failures)
}

async fn live_holder(store: &impl LeaseStore, name: &str) -> Option<String> {
    store
        .get(name)
        .await
        .unwrap()
        .filter(|i| i.live)
        .map(|i| i.instance)
}

// ---------------------------------------------------------------------------------------------
// A dropped run: the lease stays held and renewed until its work returns

#[derive(Clone, Copy, Debug)]
enum Via {
    TermRun,
    CoordinatorRun,
    RunElected,
}

/// Drops the future of a run while its work — which ignores its term, keeping no handle on it —
/// still runs for 30 s: the lease must stay held (renewed past its 15 s TTL) until the work
/// returns, then be released.
#[tokio::test(start_paused = true)]
async fn a_dropped_run_keeps_its_lease_until_the_work_returns() {
    for via in [Via::TermRun, Via::CoordinatorRun, Via::RunElected] {
        let store = faulty(MemoryStore::new());
        let (a, _) = coordinator(&store, "a");
        let (b, _) = coordinator(&store, "b");
        let started = Arc::new(Notify::new());
        let returned = Arc::new(AtomicBool::new(false));
        let work = {
            let started = started.clone();
            let returned = returned.clone();
            move |_term: Term| async move {
                started.notify_one();
                sleep(30 * S).await;
                returned.store(true, Ordering::SeqCst);
                Ok::<(), std::io::Error>(())
            }
        };
        let runner = match via {
            Via::TermRun => {
                let term = a.try_acquire("job").await.unwrap();
                tokio::spawn(async move { term.run(work).await.map(|_| ()) })
            }
            Via::CoordinatorRun => {
                let a = a.clone();
                tokio::spawn(async move { a.run("job", work).await.map(|_| ()) })
            }
            Via::RunElected => {
                let a = a.clone();
                let work = Arc::new(Mutex::new(Some(work)));
                tokio::spawn(async move {
                    a.run_elected("job", move |term| {
                        let work = work.lock().unwrap().take().expect("one term only");
                        work(term)
                    })
                    .await
                })
            }
        };
        started.notified().await;
        // The work's start (run_elected spreads its first claim by up to 16 ms).
        let t0 = Instant::now();
        runner.abort();
        assert!(runner.await.unwrap_err().is_cancelled());
        sleep(20 * S).await;
        assert!(!returned.load(Ordering::SeqCst));
        assert_eq!(
            live_holder(store.inner(), "job").await.as_deref(),
            Some("a"),
            "{via:?}: the run's future was dropped at 0 s and its work still runs at 20 s, past \
             the 15 s TTL: the lease must still be held and renewed"
        );
        let e = b.try_acquire("job").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Held, "{via:?}: {e}");
        sleep(10 * S + Duration::from_millis(1)).await;
        assert!(
            returned.load(Ordering::SeqCst),
            "{via:?}: the work ends at 30 s"
        );
        assert_eq!(t0.elapsed(), 30 * S + Duration::from_millis(1));
        let next = b.try_acquire("job").await.unwrap();
        assert_eq!(next.token(), 2, "{via:?}: released once the work returned");
        next.resign().await.unwrap();
        a.close().await.unwrap();
    }
}

/// The work of a dropped run is told to stop (its term ends as closed), and renewals go on
/// while it winds down.
#[tokio::test(start_paused = true)]
async fn a_dropped_run_tells_its_work_to_stop_and_renews_while_it_winds_down() {
    let store = faulty(MemoryStore::new());
    let (a, _) = coordinator(&store, "a");
    let (b, _) = coordinator(&store, "b");
    let term = a.try_acquire("job").await.unwrap();
    let told = Arc::new(Mutex::new(None));
    let t = told.clone();
    let t0 = Instant::now();
    let runner = tokio::spawn(term.run(move |term| async move {
        term.done().await;
        *t.lock().unwrap() = Some((Instant::now(), term.err().map(|e| e.kind())));
        drop(term);
        sleep(20 * S).await; // a long wind-down, holding no handle
        Ok::<(), std::io::Error>(())
    }));
    sleep(S).await;
    runner.abort();
    sleep(S).await;
    assert_eq!(
        *told.lock().unwrap(),
        Some((t0 + S, Some(ErrorKind::Closed)))
    );
    sleep(17 * S).await;
    assert_eq!(
        b.try_acquire("job").await.unwrap_err().kind(),
        ErrorKind::Held,
        "held at 19 s, past the TTL, while the work winds down"
    );
    sleep(2 * S).await;
    tokio::task::yield_now().await;
    assert_eq!(b.try_acquire("job").await.unwrap().token(), 2);
}

/// A dropped run whose term is then lost still gets the step-down rules: the grace, then the
/// fail action and the abort of the work.
#[tokio::test(start_paused = true)]
async fn a_dropped_run_still_fails_work_that_outlives_the_grace_after_a_loss() {
    let store = faulty(MemoryStore::new());
    let (a, failures) = coordinator(&store, "a");
    let term = a.try_acquire("job").await.unwrap();
    let t0 = Instant::now();
    let finished = Arc::new(AtomicBool::new(false));
    let f = finished.clone();
    let runner = tokio::spawn(term.run(move |_term| async move {
        sleep(3600 * S).await; // never looks at its term
        f.store(true, Ordering::SeqCst);
        Ok::<(), std::io::Error>(())
    }));
    sleep(S).await;
    runner.abort();
    store.hook().set_mode(FaultMode::Cut);
    sleep(20 * S).await;
    let failures = failures.list();
    assert_eq!(failures.len(), 1, "the fail action ran");
    assert_eq!(
        failures[0].0 - t0,
        14 * S,
        "at the deadline (10 s) + grace (4 s)"
    );
    sleep(7200 * S).await;
    assert!(!finished.load(Ordering::SeqCst), "the work was aborted");
}

/// Work abandoned after a loss (past the grace: the fail action, the abort) has its lease
/// released once its task is gone, though another handle on the term is still held: the
/// supervisor releases, for `run` as for a scheduler round.
#[tokio::test(start_paused = true)]
async fn abandoned_work_is_released_once_its_task_is_gone_though_a_handle_is_kept() {
    let store = faulty(MemoryStore::new());
    let (a, failures) = coordinator(&store, "a");
    let (b, _) = coordinator(&store, "b");
    let term = a.try_acquire("job").await.unwrap();
    let kept = term.clone();
    let t0 = Instant::now();
    let runner = tokio::spawn(term.run(move |_term| async move {
        sleep(3600 * S).await; // never looks at its term
        Ok::<(), std::io::Error>(())
    }));
    sleep(S).await;
    // Renewals fail: the term is lost at its local deadline (10 s), while the store still
    // holds the lease (its TTL runs out at 15 s).
    store.hook().set_mode(FaultMode::Cut);
    sleep(11 * S).await;
    assert!(kept.is_lost());
    store.hook().set_mode(FaultMode::Pass);
    let e = runner.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert_eq!(t0.elapsed(), 14 * S, "at the deadline (10 s) + grace (4 s)");
    assert_eq!(failures.list().len(), 1, "the fail action ran");
    sleep(Duration::from_millis(1)).await;
    assert!(t0.elapsed() < 15 * S, "before the lease's TTL runs out");
    let next = b
        .try_acquire("job")
        .await
        .expect("released once the aborted work was gone, though `kept` is still held");
    assert_eq!(next.token(), 2);
    drop(kept);
    next.resign().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// close racing run: either the run is counted or it starts nothing

/// `close` signals a term no run is using and releases it; a `run` handed that term meanwhile
/// must not start its work: the lease is (being) released, so another holder may start too.
#[tokio::test(start_paused = true)]
async fn close_racing_run_never_starts_work_under_a_released_term() {
    for stall_release in [false, true] {
        let store = faulty(MemoryStore::new());
        let (a, _) = coordinator(&store, "a");
        let term = a.try_acquire("job").await.unwrap();
        let closing = {
            let a = a.clone();
            tokio::spawn(async move { a.close().await })
        };
        if stall_release {
            // close's release hangs: the term is being released.
            store.hook().set_mode(FaultMode::Stall);
            while store.hook().counts().releases == 0 {
                tokio::task::yield_now().await;
            }
        } else {
            // close has released the term.
            while live_holder(store.inner(), "job").await.is_some() {
                tokio::task::yield_now().await;
            }
        }
        let started = Arc::new(AtomicBool::new(false));
        let s = started.clone();
        let result = term
            .run(move |_term| async move {
                s.store(true, Ordering::SeqCst);
                sleep(S).await;
                Ok::<(), std::io::Error>(())
            })
            .await;
        assert!(
            !started.load(Ordering::SeqCst),
            "stall_release {stall_release}: work started under a term that close released \
             (run returned {result:?})"
        );
        assert_eq!(result.unwrap_err().kind(), ErrorKind::Closed);
        store.hook().set_mode(FaultMode::Pass);
        closing.await.unwrap().unwrap();
    }
}

/// A term resigned (released) before it is handed to `run` starts no work either.
#[tokio::test(start_paused = true)]
async fn run_of_a_resigned_or_lost_term_starts_no_work() {
    let store = faulty(MemoryStore::new());
    let (a, _) = coordinator(&store, "a");
    let term = a.try_acquire("job").await.unwrap();
    term.resign().await.unwrap();
    let started = Arc::new(AtomicBool::new(false));
    let s = started.clone();
    let e = term
        .run(move |_| async move {
            s.store(true, Ordering::SeqCst);
            Ok::<(), std::io::Error>(())
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Closed, "{e}");
    assert!(!started.load(Ordering::SeqCst));

    let term = a.try_acquire("job").await.unwrap();
    assert!(store.inner().force_release("job").await.unwrap());
    term.lost().await;
    let s = started.clone();
    let e = term
        .run(move |_| async move {
            s.store(true, Ordering::SeqCst);
            Ok::<(), std::io::Error>(())
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert!(!started.load(Ordering::SeqCst));
}

// ---------------------------------------------------------------------------------------------
// An elector whose work fails: by default it steps down, backs off and campaigns again

/// A work error that wraps another error, as `?` through an application error type does.
#[derive(Debug)]
struct AppError(Box<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("writing the report failed")
    }
}

impl std::error::Error for AppError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

#[derive(Clone, Copy, Debug)]
enum Learns {
    /// The work returns the `Lost` error of a fenced write (`begin_verified`) as is.
    LostError,
    /// The same `Lost`, wrapped in the application's error type.
    WrappedLost,
    /// A plain error (the fenced write failed in a way that says nothing of the lease), while
    /// the store no longer holds the lease for this term.
    PlainError,
}

/// The store drops the lease a moment before the keeper could notice (an administrator's break
/// stands in for a row that expired); the work learns of it first and returns an error. That
/// is the term's loss: the elector steps down and campaigns again, and the loss is counted.
#[tokio::test(start_paused = true)]
async fn run_elected_campaigns_again_when_the_work_learns_of_the_loss_first() {
    for learns in [Learns::LostError, Learns::WrappedLost, Learns::PlainError] {
        let rec = MetricsCapture::default();
        let _local = rec.install_local();
        let store = faulty(MemoryStore::new());
        let (a, failures) = coordinator(&store, "a");
        let terms = Arc::new(Mutex::new(Vec::new()));
        let seen = terms.clone();
        let inner = store.inner().clone();
        let elected = {
            let a = a.clone();
            tokio::spawn(async move {
                a.run_elected("job", move |term: Term| {
                    let seen = seen.clone();
                    let inner = inner.clone();
                    async move {
                        let n = {
                            let mut seen = seen.lock().unwrap();
                            seen.push(term.token());
                            seen.len()
                        };
                        if n > 1 {
                            term.done().await;
                            return Ok(());
                        }
                        sleep(Duration::from_millis(500)).await;
                        // The row is gone a moment before the keeper's next renewal (at 2 s).
                        assert!(inner.force_release("job").await.unwrap());
                        assert!(term.is_live(), "the keeper has not noticed yet");
                        let verified = inner.verify("job", term.holder()).await.unwrap();
                        assert!(verified.is_none());
                        let lost = Error::lost("job", "the lease is not held (verify)");
                        Err(match learns {
                            Learns::LostError => Box::new(lost) as lease_core::backend::BoxError,
                            Learns::WrappedLost => Box::new(AppError(Box::new(lost))),
                            Learns::PlainError => {
                                Box::new(std::io::Error::other("the fenced write failed"))
                            }
                        })
                    }
                })
                .await
            })
        };
        sleep(10 * S).await;
        assert!(
            !elected.is_finished(),
            "{learns:?}: run_elected ended: {:?}",
            elected.await.unwrap()
        );
        assert_eq!(*terms.lock().unwrap(), vec![1, 2], "{learns:?}");
        assert_eq!(
            rec.counter(telemetry::LOSSES, &[("name", "job")]),
            1,
            "{learns:?}: the loss is counted"
        );
        a.close().await.unwrap();
        assert!(elected.await.unwrap().is_ok());
        assert!(failures.list().is_empty());
    }
}

/// By default a work failure under a live term is a step-down: the lease is released at once
/// (another node may take over), and this node campaigns again after a backoff that doubles
/// with each failure in a row. Each failure is counted; so is the end of the loop.
#[tokio::test(start_paused = true)]
async fn run_elected_restarts_failed_work_with_a_backoff_by_default() {
    let rec = MetricsCapture::default();
    let _local = rec.install_local();
    let store = faulty(MemoryStore::new());
    let (a, failures) = coordinator(&store, "a");
    let starts = Arc::new(Mutex::new(Vec::new()));
    let seen = starts.clone();
    let inner = store.inner().clone();
    let held_while_working = Arc::new(AtomicBool::new(true));
    let r = held_while_working.clone();
    let t0 = Instant::now();
    let elected = {
        let a = a.clone();
        tokio::spawn(async move {
            a.run_elected("job", move |term: Term| {
                let seen = seen.clone();
                let inner = inner.clone();
                let r = r.clone();
                async move {
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        seen.push((term.token(), Instant::now()));
                        seen.len()
                    };
                    if live_holder(&inner, "job").await.as_deref() != Some("a") {
                        r.store(false, Ordering::SeqCst);
                    }
                    if n <= 4 {
                        return Err(std::io::Error::other("the database blipped"));
                    }
                    term.done().await;
                    Ok(())
                }
            })
            .await
        })
    };
    // Failures at 0, then pauses of 2, 4, 8, 16 s (retry 2 s doubled), each plus ≤ 0.5 s of
    // jitter: the fifth term starts between 30 and 32 s.
    sleep(33 * S).await;
    assert!(!elected.is_finished(), "the elector goes on");
    let starts = starts.lock().unwrap().clone();
    let tokens: Vec<u64> = starts.iter().map(|s| s.0).collect();
    assert_eq!(tokens, vec![1, 2, 3, 4, 5]);
    let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1].1 - w[0].1).collect();
    for (i, (gap, base)) in gaps.iter().zip([2 * S, 4 * S, 8 * S, 16 * S]).enumerate() {
        assert!(
            *gap >= base && *gap <= base + Duration::from_millis(500),
            "pause {i} after a failure: {gap:?}, expected {base:?} + up to 0.5 s jitter"
        );
    }
    // At once, within the first-claim spread of run_elected (16 ms, and a timer tick).
    assert!(
        starts[0].1 - t0 <= Duration::from_millis(17),
        "{:?}",
        starts[0].1 - t0
    );
    assert!(held_while_working.load(Ordering::SeqCst));
    assert_eq!(rec.counter(telemetry::WORK_FAILURES, &[("name", "job")]), 4);
    assert_eq!(
        rec.counter(telemetry::LOSSES, &[("name", "job")]),
        0,
        "not a loss"
    );
    a.close().await.unwrap();
    assert!(elected.await.unwrap().is_ok());
    assert_eq!(
        rec.counter(
            telemetry::ELECTIONS_ENDED,
            &[("name", "job"), ("reason", "closed")]
        ),
        1
    );
    assert!(failures.list().is_empty());
}

/// Between failures the name is free, so a healthy node takes over at once.
#[tokio::test(start_paused = true)]
async fn a_failing_elector_lets_a_healthy_node_take_over() {
    let store = faulty(MemoryStore::new());
    let (a, _) = coordinator(&store, "a");
    let (b, _) = coordinator(&store, "b");
    let failing = {
        let a = a.clone();
        tokio::spawn(async move {
            a.run_elected("job", |_term: Term| async {
                Err::<(), _>(std::io::Error::other("the disk is full"))
            })
            .await
        })
    };
    tokio::task::yield_now().await;
    sleep(Duration::from_millis(100)).await;
    let healthy = {
        let b = b.clone();
        tokio::spawn(async move {
            b.run_elected("job", |term: Term| async move {
                term.done().await;
                Ok::<(), std::io::Error>(())
            })
            .await
        })
    };
    sleep(S).await;
    assert_eq!(
        live_holder(store.inner(), "job").await.as_deref(),
        Some("b"),
        "b campaigned while a backed off"
    );
    sleep(60 * S).await;
    assert_eq!(
        live_holder(store.inner(), "job").await.as_deref(),
        Some("b")
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
    assert!(failing.await.unwrap().is_ok());
    assert!(healthy.await.unwrap().is_ok());
}

/// Under `OnWorkError::Return` a work failure ends the election: the error is returned, the
/// failure and the end are counted.
#[tokio::test(start_paused = true)]
async fn run_elected_under_the_return_policy_returns_and_counts_the_end() {
    let rec = MetricsCapture::default();
    let _local = rec.install_local();
    let store = faulty(MemoryStore::new());
    let a = Coordinator::builder(store.clone())
        .instance("a")
        .on_work_error(OnWorkError::Return)
        .build()
        .unwrap();
    let err = a
        .run_elected("job", |_term: Term| async {
            Err::<(), _>(std::io::Error::other("bad config"))
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Work);
    assert!(err.to_string().contains("bad config"), "{err}");
    assert_eq!(rec.counter(telemetry::WORK_FAILURES, &[("name", "job")]), 1);
    assert_eq!(
        rec.counter(
            telemetry::ELECTIONS_ENDED,
            &[("name", "job"), ("reason", "work")]
        ),
        1
    );
    assert_eq!(live_holder(store.inner(), "job").await, None, "released");
    // A backoff over a day is refused up front.
    let e = Coordinator::builder(store.clone())
        .on_work_error(OnWorkError::Restart {
            max_backoff: Duration::from_secs(2 * 24 * 3600),
        })
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidTimings);
}

/// A work error after a close (the term ended, still renewed, the store still holding it) is
/// the work's error, not a loss.
#[tokio::test(start_paused = true)]
async fn a_work_error_after_a_close_is_not_a_loss() {
    let rec = MetricsCapture::default();
    let _local = rec.install_local();
    let store = faulty(MemoryStore::new());
    let (a, _) = coordinator(&store, "a");
    let term = a.try_acquire("job").await.unwrap();
    let run = tokio::spawn(term.run(|term| async move {
        term.done().await;
        Err::<(), _>(std::io::Error::other("interrupted by the shutdown"))
    }));
    a.close().await.unwrap();
    let e = run.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Work, "{e}");
    assert_eq!(rec.counter(telemetry::LOSSES, &[("name", "job")]), 0);
    assert_eq!(live_holder(store.inner(), "job").await, None);
}

/// The same race on a multi-threaded runtime, many times over, with no help from the test:
/// whenever work starts, its lease is held in the store, and stays held until it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_racing_run_on_two_threads_never_releases_under_running_work() {
    let mut started = 0;
    for _ in 0..300 {
        let store = faulty(MemoryStore::new());
        let (a, _) = coordinator(&store, "a");
        let term = a.try_acquire("job").await.unwrap();
        let closing = {
            let a = a.clone();
            tokio::spawn(async move { a.close().await })
        };
        let inner = store.inner().clone();
        let run = tokio::spawn(async move {
            term.run(move |_term| async move {
                let at_start = live_holder(&inner, "job").await;
                tokio::task::yield_now().await;
                let at_end = live_holder(&inner, "job").await;
                Ok::<_, std::io::Error>((at_start, at_end))
            })
            .await
        });
        match run.await.unwrap() {
            Ok((at_start, at_end)) => {
                started += 1;
                assert_eq!(at_start.as_deref(), Some("a"), "work started unheld");
                assert_eq!(at_end.as_deref(), Some("a"), "released under the work");
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::Closed, "{e}"),
        }
        closing.await.unwrap().unwrap();
        assert_eq!(live_holder(store.inner(), "job").await, None);
    }
    eprintln!("work started in {started} of 300 races");
}
