//! Hand-over: a waiter woken by the store's hints, the polling fallback when hints are cut,
//! exclusivity under lost and duplicated hints, and crash failover at the store's expiry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_core::backend::notify::Topic;
use lease_core::{Coordinator, ErrorKind, LeaseStore, Term};
use tokio::time::{Instant, sleep};

use super::needs_expiry;
use crate::history::History;
use crate::{Harness, HintMode, faulty};

/// How soon a release must wake a waiter on a store that hints: generous for a loaded CI
/// machine (a release took 425 ms to wake a PostgreSQL waiter with both cores busy 6 times
/// over), and still below anything else that wakes the case's waiter: its retry is seconds,
/// and the holder's expiry it read lies about a lease minus a renewal period (1.3 s for the
/// harness's 1.5 s lease) after the release. So polling cannot explain a wake within it.
pub const WAKE_BOUND: Duration = Duration::from_millis(600);

/// What a case's store round trips may add to a hand-over on a loaded CI machine, on top of
/// the waiter's own pacing.
const ROUND_TRIPS: Duration = Duration::from_millis(250);

/// How far a successor may seem to start before the store's expiry, as the test measures it:
/// stores keep expiries in whole milliseconds (and report the time left truncated), so the
/// measurement can be a few milliseconds off. Never the basis of the store's decision.
const EXPIRY_TOLERANCE: Duration = Duration::from_millis(10);

/// Starts `c.acquire(name, limit)` on a task; it answers the term and when it was won.
fn acquire_in_background(
    c: &Coordinator,
    name: &str,
    limit: Duration,
) -> tokio::task::JoinHandle<(lease_core::Result<Term>, Instant)> {
    let c = c.clone();
    let name = name.to_owned();
    tokio::spawn(async move {
        let won = c.acquire(&name, limit).await;
        (won, Instant::now())
    })
}

/// On a store that hints (`capabilities().watch`), a waiter in `Coordinator::acquire` is woken
/// by the holder's release and holds the name within [`WAKE_BOUND`], although its retry pace
/// is seconds and the holder's lease had most of its time left.
pub async fn a_release_wakes_a_waiter_at_once(h: &Harness) {
    let case = "a_release_wakes_a_waiter_at_once";
    if !h.caps().watch {
        h.not_applicable_loudly(
            case,
            "the store sends no hints (capabilities().watch is false): waiters poll",
        );
        return;
    }
    let name = h.name("wake");
    assert!(
        h.store.changes(&Topic::lease(&name)).is_some(),
        "{}: capabilities().watch is true but changes() answers None: no hint can wake a \
         waiter; implement LeaseStore::changes, or say watch: false",
        h.backend()
    );
    let slow = h
        .timings
        .to_builder()
        .retry(Duration::from_secs(5))
        .jitter(Duration::from_millis(10))
        .build()
        .unwrap();
    let a = h.coordinator("a");
    let b = h.coordinator_timed(h.store.clone(), "b", slow);
    let t1 = a.try_acquire(&name).await.unwrap();
    let waiting = acquire_in_background(&b, &name, h.timings.lease() * 4);
    // Long enough for b to have found the name held and gone to sleep; far less than a lease.
    sleep(h.timings.renew_every()).await;
    assert!(!waiting.is_finished(), "b got the name while a held it");
    let released = Instant::now();
    t1.resign().await.unwrap();
    let (t2, at) = waiting.await.unwrap();
    let t2 = t2.unwrap();
    let took = at - released;
    eprintln!("{}: release → waiter holds the name: {took:?}", h.backend());
    assert!(t2.token() > t1.token());
    assert!(
        took <= WAKE_BOUND,
        "{}: the waiter took the name {took:?} after the release, more than {WAKE_BOUND:?}: \
         the store says `watch` but its hints did not wake the waiter",
        h.backend()
    );
    t2.resign().await.unwrap();
}

/// With the store's hints cut (the fault hook's [`HintMode::Cut`], as when a listener
/// connection is down), a waiter falls back to polling at its retry pace and still takes over
/// within the retry (plus jitter and round trips) of a release.
pub async fn without_hints_a_waiter_still_takes_over_within_the_retry(h: &Harness) {
    let name = h.name("nohints");
    let cut = faulty(h.store.clone());
    cut.hook().set_hint_mode(HintMode::Cut);
    let cut: Arc<dyn LeaseStore> = Arc::new(cut);
    if let Some(hints) = cut.changes(&Topic::lease(&name)) {
        assert!(
            !hints.is_connected(),
            "a cut hint link still reports connected"
        );
    }
    let a = h.coordinator("a");
    let b = h.coordinator_over(cut, "b");
    let t1 = a.try_acquire(&name).await.unwrap();
    let waiting = acquire_in_background(&b, &name, h.timings.lease() * 4);
    // Half a retry off b's polling phase (its polls come every retry plus jitter after its
    // first claim; with the default proportions renew_every equals the retry), so that the
    // release does not fall just before a poll by construction.
    sleep(h.timings.renew_every() + h.timings.retry() / 2).await;
    assert!(!waiting.is_finished(), "b got the name while a held it");
    let released = Instant::now();
    t1.resign().await.unwrap();
    let (t2, at) = waiting.await.unwrap();
    let t2 = t2.unwrap();
    let took = at - released;
    let bound = h.timings.retry() + h.timings.jitter() + ROUND_TRIPS;
    eprintln!(
        "{}: release → polling waiter holds the name: {took:?} (bound {bound:?})",
        h.backend()
    );
    assert!(t2.token() > t1.token());
    assert!(
        took <= bound,
        "{}: with hints cut the waiter took {took:?} to take over, more than the retry pace \
         allows ({bound:?})",
        h.backend()
    );
    t2.resign().await.unwrap();
}

/// Many contenders campaign with `Coordinator::acquire` while the store's hints are dropped
/// and duplicated at random ([`HintMode::Chaos`]): the fenced history has no overlap and no
/// term going back, and the name still changes hands.
pub async fn lost_or_duplicated_hints_never_break_exclusivity(h: &Harness) {
    let name = h.name("chaos");
    let chaos = faulty(h.store.clone());
    chaos.hook().set_hint_mode(HintMode::Chaos {
        drop_percent: 50,
        duplicate_percent: 50,
    });
    let chaos: Arc<dyn LeaseStore> = Arc::new(chaos);
    let history = History::new();
    let sections = Arc::new(AtomicU64::new(0));
    let stop_at = Instant::now() + h.timings.lease() * 2;
    let mut coordinators = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let c = h.coordinator_over(chaos.clone(), &format!("contender-{i}"));
        coordinators.push(c.clone());
        let history = history.clone();
        let sections = sections.clone();
        let name = name.clone();
        let limit = h.timings.lease() * 2;
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                let term = match c.acquire(&name, limit).await {
                    Ok(term) => term,
                    Err(e) if e.is(ErrorKind::Timeout) => continue,
                    Err(e) => panic!("acquire failed: {e}"),
                };
                let who = term.instance().to_owned();
                for _ in 0..3 {
                    if term.check().is_err() {
                        break;
                    }
                    let s = history.enter(&who, term.token());
                    assert!(
                        s.fenced_write(),
                        "fenced write refused for term {}",
                        term.token()
                    );
                    sleep(Duration::from_millis(10)).await;
                    drop(s);
                    sections.fetch_add(1, Ordering::SeqCst);
                }
                term.resign().await.ok();
                // Leave the others, woken by the release (or not), their turn.
                sleep(Duration::from_millis(25)).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender task");
    }
    for c in &coordinators {
        let _ = c.close().await;
    }
    let report = history.report();
    eprintln!("{}: with chaotic hints: {report}", h.backend());
    history.assert_clean();
    assert!(report.distinct_terms >= 3, "too few hand-overs: {report}");
    assert!(
        h.step_down_failures().is_empty(),
        "{:?}",
        h.step_down_failures()
    );
}

/// A holder whose store access is cut (no release) is succeeded by a waiting
/// `Coordinator::acquire` no earlier than the store's expiry of its lease (neither before the
/// time left it reported, nor before the store last answered it live), and soon after the store
/// answers it expired (within round trips, plus the harness's clock slack).
pub async fn a_crashed_holder_is_succeeded_at_the_stores_expiry_not_before(h: &Harness) {
    let case = "a_crashed_holder_is_succeeded_at_the_stores_expiry_not_before";
    let Some(faults) = h.faults.clone() else {
        h.not_applicable(case, "the backend provides no fault path");
        return;
    };
    if !needs_expiry(h, case) {
        return;
    }
    let name = h.name("crash");
    let a = h.coordinator_over(faults.store.clone(), "a");
    let b = h.coordinator("b");
    let t1 = a.try_acquire(&name).await.unwrap();
    let waiting = acquire_in_background(&b, &name, h.timings.lease() * 4);
    // b waits behind a holder that renews; then a is cut off without releasing.
    sleep(h.timings.renew_every() * 2).await;
    assert!(!waiting.is_finished(), "b got the name while a held it");
    faults.switch.cut();
    // Let a renewal that was on its way when the cut came land (or not) before reading.
    sleep(Duration::from_millis(50)).await;
    let asked = Instant::now();
    let info = h.store.get(&name).await.unwrap().unwrap();
    let answered = Instant::now();
    assert!(info.live, "the cut holder's lease ended early: {info:?}");
    assert_eq!(info.term, t1.token());
    // The store's expiry as it answers it: read until the lease is no longer live (or held under
    // a later term, when the successor was quicker than this poll). A store may report its time
    // left coarsely (etcd: whole seconds, expired in a 500 ms sweep), so the bound on how soon
    // the successor follows is taken from this answer, not from the report.
    let mut last_live = answered;
    let expired = loop {
        let sent = Instant::now();
        let now = h.store.get(&name).await.unwrap();
        match now {
            Some(i) if i.live && i.term == t1.token() => last_live = sent,
            _ => break Instant::now(),
        }
        assert!(
            sent <= answered + info.expires_in + h.timings.lease() + h.slack,
            "{}: the cut holder's lease was still live {:?} after its reported expiry",
            h.backend(),
            h.timings.lease() + h.slack
        );
        sleep(Duration::from_millis(5)).await;
    };
    let (t2, at) = waiting.await.unwrap();
    faults.switch.pass();
    let t2 = t2.unwrap();
    let earliest = asked + info.expires_in;
    let latest = expired + ROUND_TRIPS + h.slack;
    eprintln!(
        "{}: crash failover: successor {:?} after the store's expiry as reported ({:?} left when \
         read), {:?} after the last read that found it live",
        h.backend(),
        at.saturating_duration_since(earliest),
        info.expires_in,
        at.saturating_duration_since(last_live)
    );
    assert!(t2.token() > t1.token());
    // A store whose clock is coarser than the tolerance may end the lease up to one step early.
    let tolerance = EXPIRY_TOLERANCE.max(h.caps().clock_granularity);
    assert!(
        at + tolerance >= earliest,
        "{}: the successor held the name {:?} before the store's expiry of the crashed \
         holder's lease",
        h.backend(),
        earliest - at
    );
    assert!(
        at + tolerance >= last_live,
        "{}: the successor held the name before the store last answered that the crashed \
         holder's lease was live",
        h.backend()
    );
    assert!(
        at <= latest,
        "{}: the successor took {:?} after the store's expiry to take over",
        h.backend(),
        at.saturating_duration_since(expired)
    );
    t2.resign().await.unwrap();
    t1.lost().await;
    let _ = a.close().await;
}
