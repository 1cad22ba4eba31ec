//! The cluster scheduler on lease-local's `MemoryStore`, in paused tokio time: hours of
//! schedule in milliseconds of real time. (The schedule's own rules, daylight-saving changes
//! included, are unit-tested in `src/scheduler/schedule.rs` without a store.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lease_core::layer::{Answer, Call, Hook, Intercept};
use lease_core::scheduler::telemetry;
use lease_core::{
    ErrorKind, LeaseStore, Result, Timings,
    backend::{HolderToken, LeaseStoreExt, slots::SlotStore},
    coordinator::StepDownFailure,
};
use lease_core::{
    Job, Scheduler,
    scheduler::{CatchUp, JobBuilder, Round, SchedulerBuilder, TokioClock, WallClock},
};
use lease_local::MemoryStore;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

const S: Duration = Duration::from_secs(1);

/// A replica's link to the shared store, which a "kill" cuts: once cut, every later operation
/// hangs before it reaches the store, as for a dead process (no renewal, no release, no finish
/// ever lands). Change hints pass through unchanged.
#[derive(Debug, Clone, Default)]
struct Cut(Arc<AtomicBool>);

impl Cut {
    fn cut(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

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

/// The shared store through a link of its own.
type Link = Intercept<MemoryStore, Cut>;

fn link(store: &MemoryStore) -> Link {
    store.clone().with_hook(Cut::default())
}

// ---------------------------------------------------------------------------------------------
// Metrics: one recorder for the whole test binary; each test uses its own job names.

#[derive(Clone, Default)]
struct Rec(Arc<Mutex<HashMap<String, Arc<AtomicU64>>>>);

impl Rec {
    fn cell(&self, key: &Key) -> Arc<AtomicU64> {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let id = format!("{}{{{}}}", key.name(), labels.join(","));
        self.0.lock().unwrap().entry(id).or_default().clone()
    }

    /// The counter `metric` with exactly these labels (sorted by key), 0 when never touched.
    fn read(&self, metric: &str, labels: &str) -> u64 {
        let id = format!("{metric}{{{labels}}}");
        self.0
            .lock()
            .unwrap()
            .get(&id)
            .map_or(0, |c| c.load(Ordering::SeqCst))
    }
}

impl Recorder for Rec {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn rec() -> &'static Rec {
    static REC: OnceLock<Rec> = OnceLock::new();
    REC.get_or_init(|| {
        let rec = Rec::default();
        metrics::set_global_recorder(rec.clone()).unwrap();
        rec
    })
}

// ---------------------------------------------------------------------------------------------
// Rounds started, as the jobs' work records them.

#[derive(Debug, Clone)]
struct Start {
    who: String,
    job: String,
    instant_ms: i64,
    token: u64,
    rerun: bool,
    /// The wall clock when the work started.
    at_ms: i64,
}

#[derive(Clone, Default)]
struct Starts(Arc<Mutex<Vec<Start>>>);

impl Starts {
    fn of(&self, job: &str) -> Vec<Start> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.job == job)
            .cloned()
            .collect()
    }

    /// How many rounds started per instant.
    fn per_instant(&self, job: &str) -> BTreeMap<i64, usize> {
        let mut out = BTreeMap::new();
        for s in self.of(job) {
            *out.entry(s.instant_ms).or_default() += 1;
        }
        out
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

type Hold = Arc<dyn Fn(&Round) -> Duration + Send + Sync>;

/// The job's work: record the start, then hold the round for `hold(round)`, or give up with an
/// error when the round is told to stop.
fn recording(
    builder: JobBuilder,
    who: &str,
    starts: &Starts,
    clock: TokioClock,
    hold: Hold,
) -> Job {
    let who = who.to_owned();
    let starts = starts.clone();
    builder.run(move |round: Round| {
        starts.0.lock().unwrap().push(Start {
            who: who.clone(),
            job: round.job().to_owned(),
            instant_ms: round.instant_ms(),
            token: round.token(),
            rerun: round.is_rerun(),
            at_ms: clock.now_ms(),
        });
        let d = hold(&round);
        async move {
            tokio::select! {
                _ = round.done() => Err(std::io::Error::other("told to stop")),
                _ = sleep(d) => Ok(()),
            }
        }
    })
}

fn hold(d: Duration) -> Hold {
    Arc::new(move |_: &Round| d)
}

#[derive(Clone, Default)]
struct Failures(Arc<Mutex<Vec<StepDownFailure>>>);

/// The builder every test's scheduler starts from: instance `who`, default timings, `clock`,
/// the fail actions recorded in `failures`, `jobs`.
fn builder(
    store: impl LeaseStore + SlotStore,
    clock: TokioClock,
    who: &str,
    failures: &Failures,
    jobs: Vec<Job>,
) -> SchedulerBuilder {
    let f = failures.clone();
    Scheduler::builder(store)
        .instance(who)
        .timings(Timings::default())
        .clock(clock)
        .fail_action(move |failure| f.0.lock().unwrap().push(failure.clone()))
        .jobs(jobs)
}

fn scheduler(
    store: impl LeaseStore + SlotStore,
    clock: TokioClock,
    who: &str,
    failures: &Failures,
    jobs: Vec<Job>,
) -> Scheduler {
    builder(store, clock, who, failures, jobs).build().unwrap()
}

/// [`scheduler`] whose rerun check runs once at the start and then not for an hour: a test of
/// the job loop alone, where a rerun of a round cut short would race the loop for the job's
/// lease (both are right; the test could not tell which it sees).
fn scheduler_without_reruns(
    store: impl LeaseStore + SlotStore,
    clock: TokioClock,
    who: &str,
    failures: &Failures,
    jobs: Vec<Job>,
) -> Scheduler {
    builder(store, clock, who, failures, jobs)
        .rerun_check(3600 * S)
        .build()
        .unwrap()
}

fn start(s: &Scheduler) -> JoinHandle<Result<()>> {
    let s = s.clone();
    tokio::spawn(async move { s.run().await })
}

/// The schedule's instants in `(after, until]` for an interval of `period`.
fn every(period: Duration, after: i64, until: i64) -> Vec<i64> {
    let p = i64::try_from(period.as_millis()).unwrap();
    let mut t = (after.div_euclid(p) + 1) * p;
    let mut out = Vec::new();
    while t <= until {
        out.push(t);
        t += p;
    }
    out
}

/// The first multiple of `period` strictly after `ms`.
fn next_multiple(ms: i64, period: Duration) -> i64 {
    let p = i64::try_from(period.as_millis()).unwrap();
    (ms.div_euclid(p) + 1) * p
}

/// Sleeps until `clock` reads `ms`.
async fn sleep_until_ms(clock: &TokioClock, ms: i64) {
    let now = clock.now_ms();
    if ms > now {
        sleep(Duration::from_millis(u64::try_from(ms - now).unwrap())).await;
    }
}

/// A job every minute on a cron expression in UTC.
fn minutely(name: &str) -> JobBuilder {
    Job::cron(name, "0 * * * * *", lease_core::scheduler::Tz::UTC).unwrap()
}

fn all_once(per_instant: &BTreeMap<i64, usize>) -> bool {
    per_instant.values().all(|n| *n == 1)
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn an_interval_job_claims_each_instant_once_at_its_time() {
    let t0 = Instant::now();
    let rec = rec();
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let begin = clock.now_ms();
    let job = recording(
        Job::every("cadence", 10 * S).unwrap(),
        "a",
        &starts,
        clock,
        hold(2 * S),
    );
    let s = scheduler(store.clone(), clock, "a", &Failures::default(), vec![job]);
    let task = start(&s);
    let end = next_multiple(begin, 10 * S) + 295_000;
    sleep_until_ms(&clock, end).await;
    s.shutdown().await.unwrap();
    task.await.unwrap().unwrap();

    let got = starts.of("cadence");
    let expected = every(10 * S, begin, end);
    assert_eq!(expected.len(), 30);
    assert_eq!(
        got.iter().map(|s| s.instant_ms).collect::<Vec<_>>(),
        expected,
        "every instant of the epoch-aligned interval, in order, once"
    );
    for s in &got {
        assert_eq!(s.instant_ms % 10_000, 0);
        assert!(!s.rerun);
        // Claimed at the instant, not later (paused time: to the millisecond).
        assert!(
            s.at_ms >= s.instant_ms && s.at_ms - s.instant_ms <= 5,
            "{s:?}"
        );
    }
    assert!(got.windows(2).all(|w| w[1].token > w[0].token));
    let record = store.last_slot("cadence").await.unwrap().unwrap();
    assert_eq!(record.last_ms, expected.last().copied());
    assert_eq!(record.unfinished_ms, None);
    assert_eq!(
        rec.read(telemetry::ROUNDS_FINISHED, "job=cadence,rerun=false"),
        30
    );
    eprintln!("paused time: {:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn three_replicas_start_each_instant_exactly_once() {
    let t0 = Instant::now();
    let rec = rec();
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let failures = Failures::default();
    let begin = clock.now_ms();
    let replicas: Vec<Scheduler> = ["a", "b", "c"]
        .iter()
        .map(|who| {
            let jobs = vec![
                recording(
                    Job::every("fast", 5 * S).unwrap(),
                    who,
                    &starts,
                    clock,
                    hold(2 * S),
                ),
                recording(minutely("minutely"), who, &starts, clock, hold(20 * S)),
            ];
            scheduler(store.clone(), clock, who, &failures, jobs)
        })
        .collect();
    let tasks: Vec<_> = replicas.iter().map(start).collect();
    // Ten minutes, ending when no round is in flight (a round cut short by the shutdown would
    // rightly run again on a replica still up).
    let end = next_multiple(begin + 570_000, 60 * S) + 33_000;
    sleep_until_ms(&clock, end).await;
    for r in &replicas {
        r.shutdown().await.unwrap();
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }

    let fast = starts.per_instant("fast");
    assert_eq!(
        fast.keys().copied().collect::<Vec<_>>(),
        every(5 * S, begin, end),
        "no instant missed"
    );
    assert!(
        all_once(&fast),
        "each instant started exactly once: {fast:?}"
    );
    let minutely = starts.per_instant("minutely");
    assert_eq!(
        minutely.keys().copied().collect::<Vec<_>>(),
        every(60 * S, begin, end)
    );
    assert!(all_once(&minutely), "{minutely:?}");
    // Counted once cluster-wide: the three replicas' counters add up to the instants.
    let started = rec.read(telemetry::ROUNDS_STARTED, "job=fast,rerun=false");
    assert_eq!(started, u64::try_from(fast.len()).unwrap());
    assert_eq!(rec.read(telemetry::INSTANTS_LATE, "job=fast"), 0);
    assert_eq!(rec.read(telemetry::INSTANTS_LATE, "job=minutely"), 0);
    assert!(starts.of("fast").iter().all(|s| !s.rerun));
    assert!(failures.0.lock().unwrap().is_empty());
    let mut by_who: BTreeMap<String, usize> = BTreeMap::new();
    for s in starts.of("fast").iter().chain(starts.of("minutely").iter()) {
        *by_who.entry(s.who.clone()).or_default() += 1;
    }
    eprintln!(
        "{} rounds over 3 replicas: {by_who:?}; paused time: {:?}",
        starts.len(),
        t0.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_round_cut_short_by_a_dead_replica_reruns_once_elsewhere() {
    let t0 = Instant::now();
    let rec = rec();
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let failures = Failures::default();
    let names = ["a", "b", "c"];
    let links: Vec<Link> = names.iter().map(|_| link(&store)).collect();
    let replicas: Vec<Scheduler> = names
        .iter()
        .zip(&links)
        .map(|(who, link)| {
            let job = recording(
                Job::every("report", 60 * S).unwrap(),
                who,
                &starts,
                clock,
                hold(5 * S),
            );
            scheduler(link.clone(), clock, who, &failures, vec![job])
        })
        .collect();
    let mut tasks: Vec<Option<JoinHandle<Result<()>>>> =
        replicas.iter().map(|r| Some(start(r))).collect();

    // Wait for the second round to start, then kill its replica a second into it.
    while starts.len() < 2 {
        sleep(S / 10).await;
    }
    sleep(S).await;
    let victim_start = starts.of("report")[1].clone();
    let victim = names.iter().position(|n| *n == victim_start.who).unwrap();
    links[victim].hook().cut();
    tasks[victim].take().unwrap().abort();
    let killed_at = clock.now_ms();

    // Five more instants; stop when no round is in flight.
    sleep_until_ms(&clock, victim_start.instant_ms + 330_000).await;
    for (i, r) in replicas.iter().enumerate() {
        if i != victim {
            r.shutdown().await.unwrap();
        }
    }
    for t in tasks.into_iter().flatten() {
        t.await.unwrap().unwrap();
    }

    let report = starts.of("report");
    let of_killed: Vec<&Start> = report
        .iter()
        .filter(|s| s.instant_ms == victim_start.instant_ms)
        .collect();
    assert_eq!(
        of_killed.len(),
        2,
        "the killed round ran again, once: {report:#?}"
    );
    let rerun = of_killed[1];
    assert!(rerun.rerun && !of_killed[0].rerun);
    assert_ne!(rerun.who, victim_start.who, "rerun elsewhere");
    assert!(rerun.token > victim_start.token);
    // Found once the dead replica's lease expired (15 s after its last renewal), within a
    // rerun check or two.
    let waited = rerun.at_ms - killed_at;
    assert!(
        (13_000..=20_000).contains(&waited),
        "rerun {waited} ms after the kill"
    );
    let per = starts.per_instant("report");
    assert!(
        per.iter()
            .all(|(t, n)| *n == 1 || *t == victim_start.instant_ms),
        "every other instant exactly once: {per:?}"
    );
    assert_eq!(per.len(), 2 + 5, "no instant missed: {per:?}");
    for s in report
        .iter()
        .filter(|s| s.instant_ms != victim_start.instant_ms)
    {
        assert!(!s.rerun, "{s:?}");
        assert!(s.who != victim_start.who || s.at_ms < killed_at, "{s:?}");
    }
    let record = store.last_slot("report").await.unwrap().unwrap();
    assert_eq!(record.unfinished_ms, None);
    assert_eq!(record.rerun_ms, Some(victim_start.instant_ms));
    assert_eq!(rec.read(telemetry::RERUNS, "job=report"), 1);
    assert_eq!(
        rec.read(telemetry::ROUNDS_STARTED, "job=report,rerun=true"),
        1
    );
    assert!(failures.0.lock().unwrap().is_empty());
    eprintln!(
        "killed {} mid-round of {}; rerun by {} {waited} ms later; paused time: {:?}",
        victim_start.who,
        victim_start.instant_ms,
        rerun.who,
        t0.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_superseded_instant_is_reported_and_never_runs() {
    let t0 = Instant::now();
    let rec = rec();
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let failures = Failures::default();
    let links = [link(&store), link(&store)];
    // No rerun check within the test: the next instant's claim comes first.
    let replicas: Vec<Scheduler> = ["a", "b"]
        .iter()
        .zip(&links)
        .map(|(who, link)| {
            let f = failures.clone();
            Scheduler::builder(link.clone())
                .instance(*who)
                .clock(clock)
                .rerun_check(Duration::from_secs(3600))
                .fail_action(move |x| f.0.lock().unwrap().push(x.clone()))
                .job(recording(
                    Job::every("superseded", 20 * S).unwrap(),
                    who,
                    &starts,
                    clock,
                    hold(3 * S),
                ))
                .build()
                .unwrap()
        })
        .collect();
    let mut tasks: Vec<_> = replicas.iter().map(|r| Some(start(r))).collect();
    while starts.len() < 1 {
        sleep(S / 10).await;
    }
    let first = starts.of("superseded")[0].clone();
    let victim = usize::from(first.who != "a");
    links[victim].hook().cut();
    tasks[victim].take().unwrap().abort();
    sleep_until_ms(&clock, first.instant_ms + 110_000).await;
    replicas[1 - victim].shutdown().await.unwrap();
    for t in tasks.into_iter().flatten() {
        t.await.unwrap().unwrap();
    }

    let per = starts.per_instant("superseded");
    assert!(all_once(&per), "{per:?}");
    assert_eq!(per.len(), 6, "{per:?}");
    // The killed round's lease expired 15 s in; 5 s later the next instant's claim found it
    // unfinished and not rerun (no rerun check ran meanwhile), and gave it up.
    assert_eq!(
        rec.read(telemetry::INSTANTS_SUPERSEDED, "job=superseded"),
        1
    );
    assert_eq!(rec.read(telemetry::RERUNS, "job=superseded"), 0);
    let record = store.last_slot("superseded").await.unwrap().unwrap();
    assert_eq!(record.unfinished_ms, None);
    assert_eq!(record.rerun_ms, None);
    eprintln!("paused time: {:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn overrun_instants_are_skipped_cluster_wide_and_recorded() {
    let t0 = Instant::now();
    let rec = rec();
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let failures = Failures::default();
    let begin = clock.now_ms();
    let first_instant = every(10 * S, begin, begin + 10_000)[0];
    // The first round takes 25 s: it overruns the next two instants.
    let long_first: Hold = Arc::new(move |r: &Round| {
        if r.instant_ms() == first_instant {
            25 * S
        } else {
            S
        }
    });
    let replicas: Vec<Scheduler> = ["a", "b"]
        .iter()
        .map(|who| {
            let job = recording(
                Job::every("overrun", 10 * S).unwrap(),
                who,
                &starts,
                clock,
                long_first.clone(),
            );
            scheduler(store.clone(), clock, who, &failures, vec![job])
        })
        .collect();
    let tasks: Vec<_> = replicas.iter().map(start).collect();

    // Just after the long round ended: the two instants it overran are on record as skipped.
    let until = first_instant + 26_000 - clock.now_ms();
    sleep(Duration::from_millis(u64::try_from(until).unwrap())).await;
    let record = store.last_slot("overrun").await.unwrap().unwrap();
    assert_eq!(record.last_ms, Some(first_instant + 20_000));
    assert_eq!(record.unfinished_ms, None);
    assert_eq!(rec.read(telemetry::INSTANTS_SKIPPED, "job=overrun"), 2);

    sleep(60 * S).await;
    for r in &replicas {
        r.shutdown().await.unwrap();
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let per = starts.per_instant("overrun");
    let got: Vec<i64> = per.keys().map(|t| t - first_instant).collect();
    assert_eq!(
        got,
        [0, 30_000, 40_000, 50_000, 60_000, 70_000, 80_000],
        "+10 s and +20 s were overrun by the first round and skipped by both replicas"
    );
    assert!(all_once(&per));
    assert_eq!(rec.read(telemetry::INSTANTS_SKIPPED, "job=overrun"), 2);
    // The other replica waited for the long round to end instead of claiming late.
    assert_eq!(rec.read(telemetry::INSTANTS_LATE, "job=overrun"), 0);
    assert_eq!(rec.read(telemetry::INSTANTS_MISSED, "job=overrun"), 0);
    eprintln!("paused time: {:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn catch_up_skips_or_runs_the_latest_missed_instant_once() {
    let t0 = Instant::now();
    let rec = rec();
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let failures = Failures::default();
    let minute = 60 * S;
    let generation = |who: &str, jobs: &[(&str, CatchUp)]| {
        let jobs = jobs
            .iter()
            .map(|(name, policy)| {
                recording(
                    Job::every(*name, minute).unwrap().catch_up(*policy),
                    who,
                    &starts,
                    clock,
                    hold(S),
                )
            })
            .collect();
        scheduler(store.clone(), clock, who, &failures, jobs)
    };
    let n = next_multiple(clock.now_ms(), minute);

    // A first generation runs two jobs for three instants; then the cluster is down.
    let old = generation(
        "old",
        &[("cu-skip", CatchUp::Skip), ("cu-latest", CatchUp::Skip)],
    );
    let task = start(&old);
    sleep_until_ms(&clock, n + 150_000).await;
    old.shutdown().await.unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(starts.len(), 6);
    let names: Vec<String> = ["cu-skip", "cu-latest", "cu-new"].map(String::from).into();
    assert!(store.unfinished(&names).await.unwrap().is_empty());

    // Down through six instants (n + 3 min … n + 8 min); a new generation starts at n + 8.5 min,
    // with a third job that never ran.
    sleep_until_ms(&clock, n + 510_000).await;
    let restart = clock.now_ms();
    let new = generation(
        "new",
        &[
            ("cu-skip", CatchUp::Skip),
            ("cu-latest", CatchUp::RunLatestOnce),
            ("cu-new", CatchUp::RunLatestOnce),
        ],
    );
    let task = start(&new);
    sleep_until_ms(&clock, n + 630_000).await;
    new.shutdown().await.unwrap();
    task.await.unwrap().unwrap();

    let after = |job: &str| -> Vec<Start> {
        starts
            .of(job)
            .into_iter()
            .filter(|s| s.who == "new")
            .collect()
    };
    let upcoming = vec![n + 540_000, n + 600_000];
    // Skip: the first round is the first instant after the restart.
    let skip: Vec<i64> = after("cu-skip").iter().map(|s| s.instant_ms).collect();
    assert_eq!(skip, upcoming);
    // RunLatestOnce: the latest missed instant (n + 8 min) runs once, at start-up; the five
    // before it are skipped; then the schedule goes on.
    let latest = after("cu-latest");
    assert_eq!(latest[0].instant_ms, n + 480_000);
    assert_eq!(latest[0].at_ms, restart, "claimed at start-up");
    assert_eq!(
        latest[1..].iter().map(|s| s.instant_ms).collect::<Vec<_>>(),
        upcoming
    );
    // A job that never ran has nothing to catch up, whatever its policy.
    let fresh: Vec<i64> = after("cu-new").iter().map(|s| s.instant_ms).collect();
    assert_eq!(fresh, upcoming);
    assert_eq!(rec.read(telemetry::INSTANTS_SKIPPED, "job=cu-latest"), 0);
    eprintln!("paused time: {:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_round_in_flight() {
    let t0 = Instant::now();
    let rec = rec();
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let wrapped_up = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let job = {
        let wrapped_up = wrapped_up.clone();
        let started = started.clone();
        Job::every("graceful", 10 * S)
            .unwrap()
            .run(move |round: Round| {
                let wrapped_up = wrapped_up.clone();
                let started = started.clone();
                async move {
                    started.store(true, Ordering::SeqCst);
                    tokio::select! {
                        _ = round.done() => {
                            // Told to stop: a second to leave things tidy, and done.
                            sleep(S).await;
                        }
                        _ = sleep(8 * S) => {}
                    }
                    wrapped_up.store(true, Ordering::SeqCst);
                    Ok::<(), std::io::Error>(())
                }
            })
    };
    let s = scheduler(store.clone(), clock, "a", &Failures::default(), vec![job]);
    let task = start(&s);
    while !started.load(Ordering::SeqCst) {
        sleep(S / 10).await;
    }
    sleep(2 * S).await;
    let asked = Instant::now();
    s.shutdown().await.unwrap();
    let took = asked.elapsed();
    assert!(
        wrapped_up.load(Ordering::SeqCst),
        "shutdown returned before the round"
    );
    assert!(took >= S && took < S + S / 10, "{took:?}");
    task.await.unwrap().unwrap();
    // The round returned Ok: it is recorded as run to its end, and the lease is free.
    let record = store.last_slot("graceful").await.unwrap().unwrap();
    assert_eq!(record.unfinished_ms, None);
    assert_eq!(
        rec.read(telemetry::ROUNDS_FINISHED, "job=graceful,rerun=false"),
        1
    );
    assert_eq!(
        rec.read(telemetry::ROUNDS_CUT_SHORT, "job=graceful,rerun=false"),
        0
    );
    assert!(!store.get("graceful").await.unwrap().unwrap().live);
    // A scheduler runs once.
    assert_eq!(s.run().await.unwrap_err().kind(), ErrorKind::Closed);
    eprintln!("shutdown took {took:?}; paused time: {:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_round_that_gives_up_at_shutdown_reruns_once_elsewhere() {
    let t0 = Instant::now();
    let rec = rec();
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let failures = Failures::default();
    let a = scheduler(
        store.clone(),
        clock,
        "a",
        &failures,
        vec![recording(
            Job::every("handover", 60 * S).unwrap(),
            "a",
            &starts,
            clock,
            hold(10 * S),
        )],
    );
    let task_a = start(&a);
    while starts.len() < 1 {
        sleep(S / 10).await;
    }
    let cut = starts.of("handover")[0].clone();
    sleep(2 * S).await;
    // The work gives up when told to stop: the round is cut short and left unfinished.
    a.shutdown().await.unwrap();
    task_a.await.unwrap().unwrap();
    assert_eq!(
        store.unfinished(&["handover".to_owned()]).await.unwrap(),
        vec![("handover".to_owned(), cut.instant_ms)]
    );

    let b = scheduler(
        store.clone(),
        clock,
        "b",
        &failures,
        vec![recording(
            Job::every("handover", 60 * S).unwrap(),
            "b",
            &starts,
            clock,
            hold(10 * S),
        )],
    );
    let task_b = start(&b);
    sleep(90 * S).await;
    b.shutdown().await.unwrap();
    task_b.await.unwrap().unwrap();
    let runs = starts.of("handover");
    assert_eq!(runs.len(), 3, "{runs:#?}");
    assert_eq!(
        (runs[1].who.as_str(), runs[1].instant_ms, runs[1].rerun),
        ("b", cut.instant_ms, true)
    );
    assert_eq!(runs[2].instant_ms, cut.instant_ms + 60_000);
    assert!(!runs[2].rerun);
    assert_eq!(
        rec.read(telemetry::ROUNDS_CUT_SHORT, "job=handover,rerun=false"),
        1
    );
    eprintln!("paused time: {:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn job_names_are_checked_when_built() {
    let store = MemoryStore::new();
    let job = || {
        Job::every("twice", S)
            .unwrap()
            .run(|_: Round| async { Ok::<(), std::io::Error>(()) })
    };
    let e = Scheduler::builder(store.clone())
        .job(job())
        .job(job())
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);
    let e = Scheduler::builder(store)
        .job(
            Job::every("", S)
                .unwrap()
                .run(|_: Round| async { Ok::<(), std::io::Error>(()) }),
        )
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);
}

#[tokio::test(start_paused = true)]
async fn shutdown_works_on_the_task_that_polls_run() {
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let s = scheduler(
        store.clone(),
        clock,
        "a",
        &Failures::default(),
        vec![recording(
            Job::every("one-task", 10 * S).unwrap(),
            "a",
            &starts,
            clock,
            hold(3 * S),
        )],
    );
    let end = next_multiple(clock.now_ms(), 10 * S) + 25_000;
    let run = s.run();
    tokio::pin!(run);
    tokio::select! {
        r = &mut run => panic!("run returned before shutdown: {r:?}"),
        _ = sleep_until_ms(&clock, end) => {
            s.shutdown().await.unwrap();
            run.await.unwrap();
        }
    }
    assert_eq!(starts.len(), 3);
}

// ---------------------------------------------------------------------------------------------
// Work that does not keep its round (its lease stays held until the work returns), and
// instants held by a crashed round's lease (run once that lease ends; those it outlasted are
// counted as missed).

#[derive(Debug, Clone)]
struct End {
    who: String,
    instant_ms: i64,
    token: u64,
    /// The wall clock when the work returned.
    at_ms: i64,
}

#[derive(Clone, Default)]
struct Ends(Arc<Mutex<Vec<End>>>);

impl Ends {
    fn of(&self, job: &str, starts: &Starts) -> Vec<End> {
        let tokens: Vec<u64> = starts.of(job).iter().map(|s| s.token).collect();
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| tokens.contains(&e.token))
            .cloned()
            .collect()
    }
}

/// The job's work: record the start, take what it needs from its `Round` and drop it at once,
/// then run for `hold(round)` whatever happens (it never looks at the round again), and record
/// its end.
fn detached(
    builder: JobBuilder,
    who: &str,
    starts: &Starts,
    ends: &Ends,
    clock: TokioClock,
    hold: Hold,
) -> Job {
    let who = who.to_owned();
    let starts = starts.clone();
    let ends = ends.clone();
    builder.run(move |round: Round| {
        let start = Start {
            who: who.clone(),
            job: round.job().to_owned(),
            instant_ms: round.instant_ms(),
            token: round.token(),
            rerun: round.is_rerun(),
            at_ms: clock.now_ms(),
        };
        starts.0.lock().unwrap().push(start.clone());
        let d = hold(&round);
        drop(round);
        let ends = ends.clone();
        async move {
            sleep(d).await;
            ends.0.lock().unwrap().push(End {
                who: start.who,
                instant_ms: start.instant_ms,
                token: start.token,
                at_ms: clock.now_ms(),
            });
            Ok::<(), std::io::Error>(())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_round_whose_work_dropped_its_round_is_not_rerun_while_it_runs() {
    let t0 = Instant::now();
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let ends = Ends::default();
    let failures = Failures::default();
    // The first round runs 40 s, far past its lease's TTL (15 s); a rerun takes a second.
    let long_first: Hold = Arc::new(|r: &Round| if r.is_rerun() { S } else { 40 * S });
    let replicas: Vec<Scheduler> = ["a", "b"]
        .iter()
        .map(|who| {
            let job = detached(
                Job::every("detached", 300 * S).unwrap(),
                who,
                &starts,
                &ends,
                clock,
                long_first.clone(),
            );
            scheduler(store.clone(), clock, who, &failures, vec![job])
        })
        .collect();
    let mut tasks: Vec<Option<JoinHandle<Result<()>>>> =
        replicas.iter().map(|r| Some(start(r))).collect();
    while starts.len() < 1 {
        sleep(S / 10).await;
    }
    let first = starts.of("detached")[0].clone();
    let winner = usize::from(first.who != "a");
    sleep(S).await;
    // The winner's `run` future is dropped while its round's work runs on; the other replica
    // looks for rounds to rerun every 2–2.5 s.
    let task = tasks[winner].take().unwrap();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    for _ in 0..30 {
        sleep(S).await;
        if ends.of("detached", &starts).is_empty() {
            let info = store.get("detached").await.unwrap().unwrap();
            assert!(
                info.live && info.term == first.token,
                "the lease of a round whose work still runs must stay held: {info:?}; \
                 starts {:#?}",
                starts.of("detached")
            );
        }
    }
    sleep(30 * S).await;
    replicas[1 - winner].shutdown().await.unwrap();
    for t in tasks.into_iter().flatten() {
        t.await.unwrap().unwrap();
    }

    let runs = starts.of("detached");
    let done = ends.of("detached", &starts);
    let first_end = done.iter().find(|e| e.token == first.token).unwrap();
    assert_eq!(
        (first_end.who.as_str(), first_end.instant_ms),
        (first.who.as_str(), first.instant_ms)
    );
    assert_eq!(first_end.at_ms - first.at_ms, 40_000);
    for s in runs.iter().filter(|s| s.instant_ms == first.instant_ms) {
        assert!(
            s.token == first.token || s.at_ms >= first_end.at_ms,
            "instant {} started again at {} while its first round ran until {}: {runs:#?}",
            first.instant_ms,
            s.at_ms,
            first_end.at_ms
        );
    }
    // Once the work returned, its lease was released, and the round (cut short: its `run` was
    // dropped) ran again once, on the other replica.
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert!(runs[1].rerun && runs[1].who != first.who && runs[1].instant_ms == first.instant_ms);
    assert!(
        runs[1].at_ms - first_end.at_ms <= 3_000,
        "{runs:#?} {first_end:?}"
    );
    assert!(failures.0.lock().unwrap().is_empty());
    eprintln!("paused time: {:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn dropping_run_leaves_the_instant_unclaimable_until_the_work_returns() {
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let ends = Ends::default();
    let s = scheduler(
        store.clone(),
        clock,
        "a",
        &Failures::default(),
        vec![detached(
            Job::every("orphaned", 120 * S).unwrap(),
            "a",
            &starts,
            &ends,
            clock,
            hold(60 * S),
        )],
    );
    let task = start(&s);
    while starts.len() < 1 {
        sleep(S / 10).await;
    }
    let round = starts.of("orphaned")[0].clone();
    sleep(S).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let names = ["orphaned".to_owned()];
    let ttl = Timings::default().lease();
    // Well past the lease's TTL, while the work still runs: the lease is held (renewed), the
    // instant is neither unfinished (for a rerun) nor claimable.
    for at in [2 * S, 20 * S, 50 * S] {
        if at == 20 * S {
            // A shutdown now does not release it either: the work has not returned within the
            // grace, so the lease stays held until it does.
            let e = s.shutdown().await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        }
        sleep_until_ms(&clock, round.at_ms + i64::try_from(at.as_millis()).unwrap()).await;
        assert!(ends.0.lock().unwrap().is_empty());
        let info = store.get("orphaned").await.unwrap().unwrap();
        assert!(info.live, "{at:?} in: {info:?}");
        assert_eq!(info.term, round.token);
        assert_eq!(store.unfinished(&names).await.unwrap(), vec![]);
        let rerun = store
            .claim_rerun(
                "orphaned",
                &HolderToken::mint(),
                "probe",
                ttl,
                round.instant_ms,
            )
            .await
            .unwrap();
        assert!(rerun.is_none(), "{at:?} in: a rerun was granted: {rerun:?}");
    }
    // Once the work returns, the lease is released and the round, cut short, awaits its rerun.
    sleep_until_ms(&clock, round.at_ms + 60_100).await;
    assert_eq!(ends.0.lock().unwrap().len(), 1);
    assert!(!store.get("orphaned").await.unwrap().unwrap().live);
    assert_eq!(
        store.unfinished(&names).await.unwrap(),
        vec![("orphaned".to_owned(), round.instant_ms)]
    );
}

/// Two replicas on links; the one that wins the first round of `job` is killed a second into
/// it (its lease stays live in the store until its TTL passes). Rerun checks are off, so what
/// happens to the instants after is the job loop's doing. Returns the first round and the
/// survivor's instance.
async fn kill_the_first_round(
    store: &MemoryStore,
    clock: TokioClock,
    starts: &Starts,
    failures: &Failures,
    job: impl Fn(&str) -> Job,
    run_for: Duration,
) -> (Start, String) {
    let links = [link(store), link(store)];
    let replicas: Vec<Scheduler> = ["a", "b"]
        .iter()
        .zip(&links)
        .map(|(who, link)| {
            let f = failures.clone();
            Scheduler::builder(link.clone())
                .instance(*who)
                .clock(clock)
                .rerun_check(Duration::from_secs(3600))
                .fail_action(move |x| f.0.lock().unwrap().push(x.clone()))
                .job(job(who))
                .build()
                .unwrap()
        })
        .collect();
    let mut tasks: Vec<_> = replicas.iter().map(|r| Some(start(r))).collect();
    while starts.len() < 1 {
        sleep(S / 10).await;
    }
    sleep(S).await;
    let first = starts.0.lock().unwrap()[0].clone();
    let victim = usize::from(first.who != "a");
    links[victim].hook().cut();
    tasks[victim].take().unwrap().abort();
    sleep_until_ms(
        &clock,
        first.instant_ms + i64::try_from(run_for.as_millis()).unwrap(),
    )
    .await;
    replicas[1 - victim].shutdown().await.unwrap();
    for t in tasks.into_iter().flatten() {
        let _ = t.await.unwrap();
    }
    (first, ["a", "b"][1 - victim].to_owned())
}

#[tokio::test(start_paused = true)]
async fn an_instant_held_by_a_crashed_rounds_lease_runs_once_the_lease_ends() {
    let rec = rec();
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let failures = Failures::default();
    // Every 10 s; the killed round's lease (15 s) is still live at the next instant.
    let job = |who: &str| {
        recording(
            Job::every("held-late", 10 * S).unwrap(),
            who,
            &starts,
            clock,
            hold(2 * S),
        )
    };
    let (first, survivor) =
        kill_the_first_round(&store, clock, &starts, &failures, job, 55 * S).await;

    let runs = starts.of("held-late");
    let per = starts.per_instant("held-late");
    assert_eq!(
        per.keys().copied().collect::<Vec<_>>(),
        every(10 * S, first.instant_ms - 1, first.instant_ms + 55_000),
        "no instant lost: {runs:#?}"
    );
    assert!(all_once(&per), "{per:?}");
    // The next instant ran once the dead lease had expired (15 s after the claim), on the
    // survivor, late and counted; the dead round was superseded by it (no rerun check ran).
    let late = runs
        .iter()
        .find(|s| s.instant_ms == first.instant_ms + 10_000)
        .unwrap();
    assert_eq!(late.who, survivor);
    assert!(
        (first.instant_ms + 15_000..=first.instant_ms + 15_100).contains(&late.at_ms),
        "{late:?}"
    );
    assert_eq!(rec.read(telemetry::INSTANTS_LATE, "job=held-late"), 1);
    assert_eq!(rec.read(telemetry::INSTANTS_SUPERSEDED, "job=held-late"), 1);
    assert_eq!(rec.read(telemetry::INSTANTS_MISSED, "job=held-late"), 0);
    // Every other instant on time.
    for s in runs.iter().filter(|s| s.instant_ms != late.instant_ms) {
        assert!(s.at_ms - s.instant_ms <= 5, "{s:?}");
    }
    let record = store.last_slot("held-late").await.unwrap().unwrap();
    assert_eq!(record.unfinished_ms, None);
}

#[tokio::test(start_paused = true)]
async fn instants_a_crashed_rounds_lease_held_through_are_counted_as_missed() {
    let rec = rec();
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let failures = Failures::default();
    // Every 4 s; the killed round's lease (15 s) covers the next three instants (+4 s, +8 s,
    // +12 s): the last of them runs late, the two before it are missed and counted. The first
    // round takes 3 s (it is killed a second in), the others half a second.
    let first_round = Arc::new(AtomicBool::new(true));
    let short_after_first: Hold = Arc::new(move |_: &Round| {
        if first_round.swap(false, Ordering::SeqCst) {
            3 * S
        } else {
            S / 2
        }
    });
    let job = |who: &str| {
        recording(
            Job::every("held-missed", 4 * S).unwrap(),
            who,
            &starts,
            clock,
            short_after_first.clone(),
        )
    };
    let (first, survivor) =
        kill_the_first_round(&store, clock, &starts, &failures, job, 30 * S).await;

    let runs = starts.of("held-missed");
    let got: Vec<i64> = starts
        .per_instant("held-missed")
        .keys()
        .map(|t| t - first.instant_ms)
        .collect();
    assert_eq!(
        got,
        [0, 12_000, 16_000, 20_000, 24_000, 28_000],
        "{runs:#?}"
    );
    assert!(all_once(&starts.per_instant("held-missed")));
    let late = runs
        .iter()
        .find(|s| s.instant_ms == first.instant_ms + 12_000)
        .unwrap();
    assert_eq!(late.who, survivor);
    assert!(
        (first.instant_ms + 15_000..=first.instant_ms + 15_100).contains(&late.at_ms),
        "{late:?}"
    );
    assert_eq!(rec.read(telemetry::INSTANTS_MISSED, "job=held-missed"), 2);
    assert_eq!(rec.read(telemetry::INSTANTS_LATE, "job=held-missed"), 1);
    assert_eq!(
        rec.read(telemetry::INSTANTS_SUPERSEDED, "job=held-missed"),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn an_overrun_the_round_could_not_record_is_claimed_late_and_counted() {
    let rec = rec();
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let first_round = Arc::new(AtomicBool::new(true));
    // The first round runs 25 s, overrunning the next two instants, unless told to stop: then
    // it takes a second to wrap up and returns Ok (within the step-down grace).
    let job = {
        let starts = starts.clone();
        Job::every("unrecorded", 10 * S)
            .unwrap()
            .run(move |round: Round| {
                starts.0.lock().unwrap().push(Start {
                    who: "a".to_owned(),
                    job: round.job().to_owned(),
                    instant_ms: round.instant_ms(),
                    token: round.token(),
                    rerun: round.is_rerun(),
                    at_ms: clock.now_ms(),
                });
                let long = first_round.swap(false, Ordering::SeqCst);
                async move {
                    if long {
                        tokio::select! {
                            _ = round.done() => sleep(S).await,
                            _ = sleep(25 * S) => {}
                        }
                    } else {
                        sleep(S).await;
                    }
                    Ok::<(), std::io::Error>(())
                }
            })
    };
    let failures = Failures::default();
    let f = failures.clone();
    // No rerun check within the test: the freed lease would let the unfinished round run again
    // at once, beside its work winding down (as any lost lease allows).
    let s = Scheduler::builder(store.clone())
        .instance("a")
        .clock(clock)
        .rerun_check(Duration::from_secs(3600))
        .fail_action(move |x| f.0.lock().unwrap().push(x.clone()))
        .job(job)
        .build()
        .unwrap();
    let task = start(&s);
    while starts.len() < 1 {
        sleep(S / 10).await;
    }
    let first = starts.of("unrecorded")[0].clone();
    // 21 s in, past two instants, the lease is taken away (an operator's force release): the
    // round's next renewal finds it gone, the work wraps up, and its finish can record the
    // round's end but not its overrun.
    sleep_until_ms(&clock, first.instant_ms + 21_000).await;
    assert!(store.force_release("unrecorded").await.unwrap());
    sleep_until_ms(&clock, first.instant_ms + 55_000).await;
    s.shutdown().await.unwrap();
    task.await.unwrap().unwrap();

    let runs = starts.of("unrecorded");
    let got: Vec<(i64, i64)> = runs
        .iter()
        .map(|r| (r.instant_ms - first.instant_ms, r.at_ms - first.instant_ms))
        .collect();
    // +10 s never ran (counted as missed); +20 s ran late, right after the round ended.
    assert_eq!(
        got,
        [
            (0, 0),
            (20_000, 23_000),
            (30_000, 30_000),
            (40_000, 40_000),
            (50_000, 50_000)
        ],
        "{runs:#?}"
    );
    assert_eq!(rec.read(telemetry::INSTANTS_MISSED, "job=unrecorded"), 1);
    assert_eq!(rec.read(telemetry::INSTANTS_LATE, "job=unrecorded"), 1);
    assert_eq!(rec.read(telemetry::INSTANTS_SKIPPED, "job=unrecorded"), 0);
    assert_eq!(
        rec.read(telemetry::ROUNDS_FINISHED, "job=unrecorded,rerun=false"),
        5
    );
    assert!(failures.0.lock().unwrap().is_empty());
}

/// Records when it is dropped: the end of a work future, returned or aborted.
struct DropClock(Arc<Mutex<Option<Instant>>>);

impl Drop for DropClock {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(Instant::now());
    }
}

/// A round's lease is lost while its work ignores the stop, and `Scheduler::run`'s future is
/// dropped right after the loss: the step-down rules must not go with it. The fail action
/// still fires when the grace has passed since the loss, and the work's task is aborted then.
#[tokio::test(start_paused = true)]
async fn dropping_run_after_a_rounds_loss_still_fails_and_aborts_its_work_at_the_grace() {
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let started = Arc::new(AtomicBool::new(false));
    // When the work was told to stop, and the kind of the term's end then.
    type Told = Mutex<Option<(Instant, Option<ErrorKind>)>>;
    let told: Arc<Told> = Arc::default();
    let gone: Arc<Mutex<Option<Instant>>> = Arc::default();
    let finished = Arc::new(AtomicBool::new(false));
    let job = {
        let (started, told, gone, finished) = (
            started.clone(),
            told.clone(),
            gone.clone(),
            finished.clone(),
        );
        Job::every("stubborn", 300 * S)
            .unwrap()
            .run(move |round: Round| {
                let (started, told, gone, finished) = (
                    started.clone(),
                    told.clone(),
                    gone.clone(),
                    finished.clone(),
                );
                async move {
                    let _gone = DropClock(gone);
                    started.store(true, Ordering::SeqCst);
                    round.done().await;
                    *told.lock().unwrap() =
                        Some((Instant::now(), round.term().err().map(|e| e.kind())));
                    // Told to stop, it goes on as if nothing happened.
                    sleep(3600 * S).await;
                    finished.store(true, Ordering::SeqCst);
                    Ok::<(), std::io::Error>(())
                }
            })
    };
    let failures: Arc<Mutex<Vec<(Instant, StepDownFailure)>>> = Arc::default();
    let f = failures.clone();
    let s = Scheduler::builder(store.clone())
        .instance("a")
        .clock(clock)
        .rerun_check(Duration::from_secs(3600))
        .fail_action(move |x| f.lock().unwrap().push((Instant::now(), x.clone())))
        .job(job)
        .build()
        .unwrap();
    let task = start(&s);
    while !started.load(Ordering::SeqCst) {
        sleep(S / 10).await;
    }
    sleep(S).await;
    // An operator's force release: the round's next renewal finds the lease gone.
    assert!(store.force_release("stubborn").await.unwrap());
    let lost_at = loop {
        if let Some((at, kind)) = *told.lock().unwrap() {
            assert_eq!(kind, Some(ErrorKind::Lost));
            break at;
        }
        tokio::task::yield_now().await;
        sleep(Duration::from_millis(1)).await;
    };
    // Within the grace, `run`'s future goes (its task is aborted): the round's future with it.
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let grace = Timings::default().grace();
    assert!(Instant::now() < lost_at + grace);
    sleep(grace + 5 * S).await;
    let failures = failures.lock().unwrap().clone();
    assert_eq!(
        failures.len(),
        1,
        "the fail action must run once the grace has passed since the loss, though `run` was \
         dropped: {failures:?}"
    );
    assert_eq!(failures[0].0 - lost_at, grace, "at the loss + the grace");
    assert_eq!(failures[0].1.name, "stubborn");
    assert_eq!(failures[0].1.error.kind(), ErrorKind::Lost);
    assert_eq!(
        *gone.lock().unwrap(),
        Some(lost_at + grace),
        "the work's task is aborted right after the fail action"
    );
    sleep(7200 * S).await;
    assert!(!finished.load(Ordering::SeqCst), "the work was aborted");
    s.shutdown().await.unwrap();
}

/// Replica `a` runs the round of the first instant past the next one (it holds 60 s); replica
/// `b` claims the next instant, finds it held by that earlier round and naps. Two seconds into
/// the nap an administrator force-releases the job's lease (the round is cut short, its
/// instants not recorded). Returns the rounds of that next instant, and the wall-clock time of
/// the release.
async fn next_instant_after_a_release(b_hints: lease_conformance::HintMode) -> (Vec<Start>, i64) {
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let starts = Starts::default();
    let failures = Failures::default();
    let job = |who: &str| {
        recording(
            Job::every("hinted", 10 * S).unwrap(),
            who,
            &starts,
            clock,
            hold(60 * S),
        )
    };
    // A rerun of a's round, cut short by the release, may take the job's lease in the
    // milliseconds before b's hinted claim (seen once in ~130 runs): right, but not what this
    // test looks at.
    let a = scheduler_without_reruns(store.clone(), clock, "a", &failures, vec![job("a")]);
    let a_task = start(&a);
    while starts.len() < 1 {
        sleep(S / 10).await;
    }
    let first = starts.0.lock().unwrap()[0].clone();
    let b_store = lease_conformance::faulty(store.clone());
    b_store.hook().set_hint_mode(b_hints);
    let b = scheduler_without_reruns(b_store, clock, "b", &failures, vec![job("b")]);
    let b_task = start(&b);
    let next = first.instant_ms + 10_000;
    let release_at = next + 2_000;
    sleep_until_ms(&clock, release_at).await;
    assert!(store.force_release("hinted").await.unwrap());
    sleep_until_ms(&clock, next + 9_000).await;
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
    let _ = b_task.await.unwrap();
    let _ = a_task.await.unwrap();
    let runs: Vec<Start> = starts
        .of("hinted")
        .into_iter()
        .filter(|s| s.instant_ms == next || s.rerun)
        .collect();
    (runs, release_at)
}

/// The scheduler's wake-on-hint: a replica waiting on an instant held by an earlier round's
/// lease claims it within milliseconds of that lease's release (the job's lease hint, then a
/// jitter of at most 20 ms), not at its nap's end (the next instant, 8 s later, when it moves
/// on and the instant is lost). With b's hints cut the same release is not seen for seconds:
/// the check tells hints from naps.
#[tokio::test(start_paused = true)]
async fn a_replica_waiting_on_an_earlier_rounds_lease_wakes_at_its_release() {
    use lease_conformance::HintMode;
    let (runs, released) = next_instant_after_a_release(HintMode::Pass).await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].who, "b", "{runs:#?}");
    let after = runs[0].at_ms - released;
    println!("with hints: b ran the held instant {after} ms after the release");
    assert!((0..=50).contains(&after), "{after} ms after the release");

    let (cut, released) = next_instant_after_a_release(HintMode::Cut).await;
    let soon: Vec<&Start> = cut.iter().filter(|s| s.at_ms - released <= 1_000).collect();
    println!(
        "hints cut: the held instant ran {:?} ms after the release",
        cut.iter().map(|s| s.at_ms - released).collect::<Vec<_>>()
    );
    assert!(soon.is_empty(), "with hints cut: {cut:#?}");
}
