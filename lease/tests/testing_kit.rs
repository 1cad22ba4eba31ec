//! The test kit (`lease::testing`) used as a user would: a leader-only service checked under a
//! forced take-over — the one that stops on `term.done()` passes, the one that ignores it fails
//! the same check (asserted here, so the suite stays green while showing the kit finds the bug)
//! — and each handle of the kit doing what it says. All in paused time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use lease::testing::{Fault, FencedHistory, Report, TestStore, Violation, Write};
use lease::{Coordinator, ErrorKind, Timings};
use tokio::time::{Instant, sleep};

const NAME: &str = "leader";
const SERVICE: &str = "service-1";
const OTHER: &str = "node-2";

type Service = fn(Coordinator, FencedHistory) -> Pin<Box<dyn Future<Output = ()> + Send>>;

fn timings() -> Timings {
    // Lease 3 s: renew every 400 ms, deadline 2 s, grace 800 ms.
    Timings::from_lease(Duration::from_secs(3)).unwrap()
}

/// A correct leader-only service: it writes with its term's token while elected, and returns
/// as soon as `term.done()` fires.
fn stops_on_done(
    coordinator: Coordinator,
    history: FencedHistory,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let _ = coordinator
            .run_elected(NAME, move |term| {
                let history = history.clone();
                async move {
                    loop {
                        tokio::select! {
                            () = term.done() => return Ok::<(), std::io::Error>(()),
                            () = sleep(Duration::from_millis(100)) => {
                                history.write(term.instance(), term.token());
                            }
                        }
                    }
                }
            })
            .await;
    })
}

/// The bug: it takes the lease, then writes with its token forever, never looking at
/// `term.done()`.
fn ignores_done(
    coordinator: Coordinator,
    history: FencedHistory,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let term = coordinator
            .acquire(NAME, Duration::from_secs(10))
            .await
            .unwrap();
        loop {
            history.write(term.instance(), term.token());
            sleep(Duration::from_millis(100)).await;
        }
    })
}

/// What the check saw.
struct Seen {
    report: Report,
    handed_over: Instant,
    last_service_write: Write,
    other_token: u64,
}

/// The check: the service leads for 2 s; then another node takes the name over. From the
/// latest instant a correct holder may still write — it hears of the loss at its next renewal
/// (`renew_every`) and then has its `grace` — the other node writes with its new token for
/// 2 s. The service must not write after that.
async fn forced_take_over(service: Service) -> Seen {
    let kit = TestStore::new();
    let t = timings();
    let coordinator = kit.coordinator(SERVICE).timings(t).build().unwrap();
    let history = FencedHistory::new();
    let task = tokio::spawn(service(coordinator.clone(), history.clone()));

    sleep(Duration::from_secs(2)).await;
    assert!(
        history.last_write_by(SERVICE).is_some(),
        "the service never wrote while it led"
    );
    let handed_over = Instant::now();
    let other_token = kit
        .hand_over(NAME, OTHER, Duration::from_secs(60))
        .await
        .unwrap();
    sleep(t.renew_every() + t.grace()).await;
    for _ in 0..20 {
        history.write(OTHER, other_token);
        sleep(Duration::from_millis(100)).await;
    }

    task.abort();
    let _ = task.await;
    coordinator.close().await.unwrap();
    Seen {
        report: history.report(),
        handed_over,
        last_service_write: history.last_write_by(SERVICE).unwrap(),
        other_token,
    }
}

#[tokio::test(start_paused = true)]
async fn a_service_that_stops_on_done_passes_the_forced_take_over_check() {
    let seen = forced_take_over(stops_on_done).await;
    assert!(seen.report.is_clean(), "{}", seen.report);
    // It stopped when it heard of the loss: within one renewal of the take-over.
    let t = timings();
    assert!(
        seen.last_service_write.at <= seen.handed_over + t.renew_every(),
        "the service wrote {:?} after the take-over",
        seen.last_service_write.at - seen.handed_over
    );
    assert!(seen.report.writes > 20, "{}", seen.report);
}

#[tokio::test(start_paused = true)]
async fn a_service_that_ignores_done_fails_the_same_check() {
    let seen = forced_take_over(ignores_done).await;
    assert!(
        !seen.report.is_clean(),
        "the kit missed the bug: {}",
        seen.report
    );
    assert_eq!(seen.report.overlaps(), 0, "{}", seen.report);
    // Every write it made while the other node wrote is out of token order: 2 s of writes,
    // one per 100 ms.
    assert!(seen.report.out_of_order() >= 19, "{}", seen.report);
    match &seen.report.violations[0] {
        Violation::OutOfOrder { stale, newer } => {
            assert_eq!((stale.holder.as_str(), stale.token), (SERVICE, 1));
            assert_eq!(
                (newer.holder.as_str(), newer.token),
                (OTHER, seen.other_token)
            );
            assert!(!stale.accepted);
        }
        other => panic!("not an out-of-order write: {other}"),
    }
    assert!(
        seen.report
            .to_string()
            .contains("out of token order: service-1@1 wrote"),
        "{}",
        seen.report
    );
}

/// Work under `run_elected` that ignores `done()` is stopped by the coordinator after its
/// grace: the kit records the fail action (which would have ended the process with code 70)
/// instead of letting it end the test.
#[tokio::test(start_paused = true)]
async fn work_that_outlives_its_grace_is_a_recorded_step_down_failure() {
    let kit = TestStore::new();
    let t = timings();
    let coordinator = kit.coordinator(SERVICE).timings(t).build().unwrap();
    let elected = tokio::spawn({
        let coordinator = coordinator.clone();
        async move {
            coordinator
                .run_elected(NAME, |_term| async {
                    loop {
                        sleep(Duration::from_millis(100)).await;
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), std::io::Error>(())
                })
                .await
        }
    });
    sleep(Duration::from_secs(1)).await;
    assert!(kit.step_down_failures().is_empty());
    let lost = kit.lose(NAME).await.unwrap();
    assert_eq!(lost, Some(1));
    sleep(t.renew_every() + t.grace() + Duration::from_millis(10)).await;
    let failures = kit.step_down_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!((failures[0].name.as_str(), failures[0].term), (NAME, 1));
    assert_eq!(failures[0].instance, SERVICE);
    assert!(
        failures[0].error.is(ErrorKind::Lost),
        "{}",
        failures[0].error
    );
    coordinator.close().await.unwrap();
    elected.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lost_term_is_heard_of_within_one_renewal() {
    let kit = TestStore::new();
    let t = timings();
    let coordinator = kit.coordinator(SERVICE).timings(t).build().unwrap();
    let term = coordinator.try_acquire(NAME).await.unwrap();
    assert_eq!(kit.lose("nobody-holds-this").await.unwrap(), None);
    sleep(Duration::from_millis(250)).await;
    let lost_at = Instant::now();
    assert_eq!(kit.lose(NAME).await.unwrap(), Some(term.token()));
    assert!(kit.holder(NAME).await.unwrap().is_some_and(|h| !h.live));
    term.lost().await;
    assert!(
        lost_at.elapsed() <= t.renew_every(),
        "{:?}",
        lost_at.elapsed()
    );
    assert!(term.err().is_some_and(|e| e.is(ErrorKind::Lost)));
    // The name is free: the next claim gets a higher term.
    let again = coordinator.try_acquire(NAME).await.unwrap();
    assert_eq!(again.token(), term.token() + 1);
    coordinator.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_stalled_store_ends_the_term_at_its_deadline_and_a_cut_one_fails_at_once() {
    let kit = TestStore::new();
    let t = timings();
    let coordinator = kit.coordinator(SERVICE).timings(t).build().unwrap();
    let term = coordinator.try_acquire(NAME).await.unwrap();

    kit.stall();
    assert_eq!(kit.fault(), Fault::Stall);
    let stalled_at = Instant::now();
    term.lost().await;
    let took = stalled_at.elapsed();
    // Not before its last renewal's deadline, and before the lease runs out in the store.
    assert!(
        took >= t.deadline() - t.renew_every() && took <= t.deadline(),
        "lost {took:?} after the stall"
    );
    // The kit's own view is past the fault: the store still holds the lease.
    assert!(kit.holder(NAME).await.unwrap().is_some_and(|h| h.live));
    let store = kit.store();
    let get = tokio::time::timeout(Duration::from_secs(5), store.get(NAME)).await;
    assert!(get.is_err(), "a stalled store answered");

    kit.cut();
    let e = store.get(NAME).await.unwrap_err();
    assert!(e.is(ErrorKind::Unavailable), "{e}");
    assert!(e.to_string().contains("TestStore::heal"), "{e}");

    kit.heal();
    assert_eq!(kit.fault(), Fault::Pass);
    assert!(store.get(NAME).await.unwrap().is_some());
    coordinator.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_handed_over_name_is_held_by_the_other_holder_with_a_higher_term() {
    let kit = TestStore::new();
    let coordinator = kit.coordinator(SERVICE).timings(timings()).build().unwrap();
    let term = coordinator.try_acquire(NAME).await.unwrap();
    let token = kit
        .hand_over(NAME, OTHER, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(token, term.token() + 1);
    let holder = kit.holder(NAME).await.unwrap().unwrap();
    assert_eq!(
        (holder.instance.as_str(), holder.term, holder.live),
        (OTHER, token, true)
    );
    term.lost().await;
    let e = coordinator.try_acquire(NAME).await.unwrap_err();
    assert!(e.is(ErrorKind::Held), "{e}");
    // The other holder never renews: its lease runs out after its TTL.
    sleep(Duration::from_secs(5)).await;
    assert_eq!(
        coordinator.try_acquire(NAME).await.unwrap().token(),
        token + 1
    );
    coordinator.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn writes_in_progress_of_two_holders_overlap() {
    let history = FencedHistory::new();
    let a = history.begin("a", 1);
    // The same holder and token may write twice at once.
    let a_again = history.begin("a", 1);
    assert!(history.report().is_clean(), "{}", history.report());
    sleep(Duration::from_millis(30)).await;
    let b = history.begin("b", 2);
    assert!(b.write().accepted);
    let report = history.report();
    assert_eq!(report.overlaps(), 2, "{report}");
    assert!(
        report
            .to_string()
            .contains("overlap: b@2 began a write while a@1"),
        "{report}"
    );
    drop((a, a_again));
    b.end();
    assert!(history.write("c", 3));
    assert_eq!(history.report().violations.len(), 2);
    // A second holder with the newest token is out of order too.
    assert!(!history.write("d", 3));
    assert_eq!(history.report().out_of_order(), 1);
}
