//! The scheduler's one-shot pass (`Scheduler::run_due`) on lease-local's `MemoryStore`, in
//! paused tokio time: replicas started by cron or a timer, each making one pass per period.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::layer::{Answer, Call, Hook};
use lease_core::scheduler::{DueInstant, DueOutcome, Round, RoundEnded, TokioClock, WallClock};
use lease_core::{ErrorKind, Job, LeaseStore, Scheduler, backend::LeaseStoreExt};
use lease_local::MemoryStore;
use tokio::time::sleep;

const S: Duration = Duration::from_secs(1);
const PERIOD: Duration = Duration::from_secs(10);

/// A replica's link to the shared store; once cut, every operation hangs, as for a dead
/// process.
#[derive(Debug, Clone, Default)]
struct Cut(Arc<AtomicBool>);

impl Hook for Cut {
    fn around<'a, T: Send + 'static>(
        &'a self,
        _call: Call<'a>,
        op: Answer<'a, T>,
    ) -> Answer<'a, T> {
        Box::pin(async move {
            if self.0.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            op.await
        })
    }
}

/// The rounds started: (replica, instant, rerun).
#[derive(Clone, Default)]
struct Starts(Arc<Mutex<Vec<(String, i64, bool)>>>);

impl Starts {
    fn per_instant(&self) -> BTreeMap<i64, usize> {
        let mut out = BTreeMap::new();
        for (_, instant, _) in self.0.lock().unwrap().iter() {
            *out.entry(*instant).or_default() += 1;
        }
        out
    }
}

/// A replica whose job "due" (every 10 s) records its start and holds the round for `hold`.
fn replica(
    store: impl LeaseStore,
    clock: TokioClock,
    who: &str,
    starts: &Starts,
    hold: Duration,
) -> Scheduler {
    let starts = starts.clone();
    let me = who.to_owned();
    let job = Job::every("due", PERIOD).unwrap().run(move |round: Round| {
        starts
            .0
            .lock()
            .unwrap()
            .push((me.clone(), round.instant_ms(), round.is_rerun()));
        async move {
            tokio::select! {
                _ = round.done() => Err(std::io::Error::other("told to stop")),
                _ = sleep(hold) => Ok(()),
            }
        }
    });
    Scheduler::builder(store)
        .instance(who)
        .clock(clock)
        .fail_action(|_| {})
        .job(job)
        .build()
        .unwrap()
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap()
}

/// The first multiple of the period strictly after `now`.
fn next_instant(now: i64) -> i64 {
    (now.div_euclid(ms(PERIOD)) + 1) * ms(PERIOD)
}

async fn sleep_until_ms(clock: &TokioClock, at: i64) {
    let now = clock.now_ms();
    if at > now {
        sleep(Duration::from_millis(u64::try_from(at - now).unwrap())).await;
    }
}

/// A round this replica ran: (rerun, late, how it ended, instants skipped).
type Ran = (bool, bool, RoundEnded, u64);

fn ran(d: &DueInstant) -> Option<Ran> {
    match d.outcome {
        DueOutcome::Ran {
            rerun,
            late,
            ended,
            skipped,
            ..
        } => Some((rerun, late, ended, skipped)),
        _ => None,
    }
}

/// Three replicas pass at each instant 0.1 s, 0.7 s and 1.9 s after it (whoever first): each
/// instant runs once. Nobody passes at instant 4: the first pass at instant 5 runs it late,
/// then 5. Nobody passes at 7 and 8: at 9 (window 15 s) 8 is caught up, 7 is too old and never
/// runs. The first pass of all (the job never ran) catches nothing up.
#[tokio::test(start_paused = true)]
async fn passes_run_each_due_instant_once_and_catch_up_within_the_window() {
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let replicas: Vec<Scheduler> = ["a", "b", "c"]
        .iter()
        .map(|who| replica(store.clone(), clock, who, &starts, S))
        .collect();
    let window = 15 * S;
    // The job's first instant comes a period after another one nobody ran.
    let i0 = next_instant(clock.now_ms()) + ms(PERIOD);
    let mut outcomes: Vec<(usize, DueInstant)> = Vec::new();
    for k in 0..10 {
        if [4, 7, 8].contains(&k) {
            continue;
        }
        let instant = i0 + k * ms(PERIOD);
        let mut tasks = Vec::new();
        for (n, offset) in [100, 700, 1900].into_iter().enumerate() {
            let who = (n + usize::try_from(k).unwrap()) % 3;
            let s = replicas[who].clone();
            tasks.push(tokio::spawn(async move {
                sleep_until_ms(&clock, instant + offset).await;
                (n, s.run_due(window).await.unwrap())
            }));
        }
        for t in tasks {
            let (n, due) = t.await.unwrap();
            outcomes.extend(due.into_iter().map(|d| (n, d)));
        }
    }
    let expected: Vec<i64> = [0, 1, 2, 3, 4, 5, 6, 8, 9]
        .iter()
        .map(|k| i0 + k * ms(PERIOD))
        .collect();
    let per = starts.per_instant();
    assert_eq!(per.keys().copied().collect::<Vec<_>>(), expected, "{per:?}");
    assert!(per.values().all(|n| *n == 1), "each instant once: {per:?}");
    // The late ones ran late, on the first pass after them; nothing was rerun.
    let late: Vec<i64> = outcomes
        .iter()
        .filter(|(_, d)| ran(d).is_some_and(|r| r.1))
        .map(|(_, d)| d.instant_ms)
        .collect();
    assert_eq!(late, [i0 + 4 * ms(PERIOD), i0 + 8 * ms(PERIOD)]);
    assert!(outcomes.iter().all(|(_, d)| ran(d).is_none_or(|r| !r.0)));
    for (_, d) in &outcomes {
        if let Some(r) = ran(d) {
            assert_eq!(r.2, RoundEnded::Finished, "{d:?}");
            assert_eq!(r.3, 0, "no overrun: {d:?}");
        }
    }
    // Every pass's instants are accounted for: ran here, taken or busy.
    // The two later passes of each period found its instant taken, or the first pass still
    // catching up (busy).
    let others = outcomes
        .iter()
        .filter(|(_, d)| matches!(d.outcome, DueOutcome::Taken { .. } | DueOutcome::Busy))
        .count();
    assert_eq!(others, 2 * 7, "{outcomes:?}");
    assert_eq!(outcomes.len(), 9 + 2 * 7, "{outcomes:?}");
    // Passes by the first replica of each period: the first ran.
    assert!(
        outcomes
            .iter()
            .filter(|(n, _)| *n == 0)
            .all(|(_, d)| ran(d).is_some()),
        "{outcomes:?}"
    );
}

/// A round cut short by a dead replica is rerun once by the first pass after its lease has
/// expired, before the instants due since (which run late, each once).
#[tokio::test(start_paused = true)]
async fn a_round_cut_short_is_rerun_once_by_the_next_pass() {
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let cut = Cut::default();
    let dead = replica(
        store.clone().with_hook(cut.clone()),
        clock,
        "dead",
        &starts,
        60 * S,
    );
    let b = replica(store.clone(), clock, "b", &starts, S);
    let window = 30 * S;
    let i0 = next_instant(clock.now_ms());
    sleep_until_ms(&clock, i0 + 100).await;
    let task = tokio::spawn(async move { dead.run_due(window).await });
    sleep(S).await;
    cut.0.store(true, Ordering::SeqCst);
    task.abort();
    // The dead round's lease (15 s) is live at the next instant: that instant is busy.
    sleep_until_ms(&clock, i0 + ms(PERIOD) + 500).await;
    let due = b.run_due(window).await.unwrap();
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].outcome, DueOutcome::Busy);
    // Past its expiry: the rerun, then the two instants since, late and on time.
    sleep_until_ms(&clock, i0 + 2 * ms(PERIOD) + 500).await;
    let due = b.run_due(window).await.unwrap();
    let got: Vec<(i64, Option<Ran>)> = due.iter().map(|d| (d.instant_ms, ran(d))).collect();
    assert_eq!(
        got,
        [
            (i0, Some((true, false, RoundEnded::Finished, 0))),
            (
                i0 + ms(PERIOD),
                Some((false, true, RoundEnded::Finished, 0))
            ),
            (
                i0 + 2 * ms(PERIOD),
                Some((false, false, RoundEnded::Finished, 0))
            ),
        ]
    );
    // Once: the next pass finds the instant taken, and nothing to rerun.
    let again = b.run_due(window).await.unwrap();
    assert_eq!(again.len(), 1, "{again:?}");
    assert!(
        matches!(again[0].outcome, DueOutcome::Taken { .. }),
        "{again:?}"
    );
    let per = starts.per_instant();
    assert_eq!(
        per.get(&i0),
        Some(&2),
        "the first round and its one rerun: {per:?}"
    );
    assert_eq!(per.values().sum::<usize>(), 4);
}

/// A round that overruns the next instant: the pass at that instant finds it busy, and the
/// round's finish skips it (counted in the round's outcome); no pass runs it later.
#[tokio::test(start_paused = true)]
async fn an_overrun_instant_is_busy_then_skipped() {
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let long = replica(store.clone(), clock, "long", &starts, 15 * S);
    let b = replica(store.clone(), clock, "b", &starts, S);
    let window = 6 * S;
    let i0 = next_instant(clock.now_ms());
    sleep_until_ms(&clock, i0 + 100).await;
    let task = tokio::spawn(async move { long.run_due(window).await.unwrap() });
    sleep_until_ms(&clock, i0 + ms(PERIOD) + 500).await;
    let busy = b.run_due(window).await.unwrap();
    assert_eq!(busy.len(), 1, "{busy:?}");
    assert_eq!(busy[0].outcome, DueOutcome::Busy);
    let due = task.await.unwrap();
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(ran(&due[0]), Some((false, false, RoundEnded::Finished, 1)));
    let after = b.run_due(window).await.unwrap();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(
        after[0].outcome,
        DueOutcome::Taken {
            last_ms: i0 + ms(PERIOD)
        },
        "the overrun instant was skipped: on record, never run"
    );
    assert_eq!(starts.per_instant().len(), 1);
}

/// No instant within the window: nothing runs. After shutdown: a `Closed` error.
#[tokio::test(start_paused = true)]
async fn nothing_is_due_outside_the_window_and_a_shut_down_scheduler_refuses() {
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let a = replica(store.clone(), clock, "a", &starts, S);
    let i0 = next_instant(clock.now_ms());
    sleep_until_ms(&clock, i0 + 3000).await;
    assert!(a.run_due(2 * S).await.unwrap().is_empty());
    assert_eq!(starts.per_instant().len(), 0);
    let due = a.run_due(4 * S).await.unwrap();
    assert!(ran(&due[0]).is_some(), "{due:?}");
    a.shutdown().await.unwrap();
    let e = a.run_due(4 * S).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Closed);
}
