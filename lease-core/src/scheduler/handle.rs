//! The scheduler's handle and its builder.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::error;

use super::engine::{self, IDLE, Inner, RAN, RUNNING};
use super::{DueInstant, Job, SystemClock, WallClock};
use crate::engine::coordinator::Coordinator;
use crate::engine::step_down::{FailAction, StepDownFailure, default_fail_action};
use crate::store::error::{Error, ErrorKind, Result};
use crate::store::lease_store::{LeaseStore, shared};
use crate::store::store_ext::LeaseStoreExt;
use crate::timings::Timings;

/// Runs jobs on schedules so that each instant runs once across the cluster: see the [module
/// docs](super).
///
/// A cheap handle: clones share one scheduler. [`run`](Scheduler::run) drives it;
/// [`shutdown`](Scheduler::shutdown) stops it from anywhere.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

/// Builds a [`Scheduler`].
#[must_use = "a builder does nothing until `build`"]
pub struct SchedulerBuilder {
    store: Arc<dyn LeaseStore>,
    instance: Option<String>,
    timings: Timings,
    fail_action: FailAction,
    clock: Arc<dyn WallClock>,
    rerun_check: Option<Duration>,
    jobs: Vec<Job>,
}

impl Scheduler {
    /// A builder over `store`: the store itself, or a shared one (an `Arc<dyn LeaseStore>` is
    /// taken as it is; `Arc<S>` is a store too). The store must have scheduler slots
    /// ([`LeaseStore::slot_store`]): [`build`](SchedulerBuilder::build) refuses one without.
    pub fn builder(store: impl LeaseStore) -> SchedulerBuilder {
        SchedulerBuilder {
            store: shared(store),
            instance: None,
            timings: Timings::default(),
            fail_action: Arc::new(default_fail_action),
            clock: Arc::new(SystemClock),
            rerun_check: None,
            jobs: Vec::new(),
        }
    }

    /// Runs the scheduler until [`shutdown`](Scheduler::shutdown): every job's loop, and the
    /// search for rounds to rerun.
    ///
    /// Returns `Ok(())` once shut down and every round in flight on this replica has ended.
    /// Store failures are logged and retried; an error is returned only for what retrying
    /// cannot fix (a name or duration the store refuses, `Unsupported`), after the other jobs
    /// have been stopped. A scheduler runs once: a second call returns a
    /// [`Closed`](ErrorKind::Closed) error.
    ///
    /// If this future is dropped, the rounds in flight are told to stop (their terms end as closed)
    /// and stay unfinished: they run again once elsewhere. Each round's lease is renewed until its
    /// work returns — whether or not the work kept its [`Round`](super::Round) — and released only
    /// then, so no replica reruns a round while its work still runs. (Work that never returns
    /// therefore holds its job's name for as long as the process lives.)
    pub async fn run(&self) -> Result<()> {
        let inner = &self.inner;
        if inner
            .state
            .compare_exchange(IDLE, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Err(Error::new(
                ErrorKind::Closed,
                "this scheduler is running or has run already; build a new one",
            ));
        }
        let _exit = ExitGuard(inner);
        if inner.stopping.is_cancelled() {
            return Ok(());
        }
        // A JoinSet, so dropping `run` aborts the loops; tracked, so `shutdown` can wait for
        // them while nobody polls `run`.
        let mut loops = JoinSet::new();
        for job in &inner.jobs {
            let job_loop = engine::job_loop(inner.clone(), job.clone());
            loops.spawn(inner.loops.track_future(job_loop));
        }
        loops.spawn(inner.loops.track_future(engine::rerun_loop(inner.clone())));
        let mut first_error = None;
        while let Some(joined) = loops.join_next().await {
            let outcome = joined.unwrap_or_else(|e| {
                Err(Error::new(
                    ErrorKind::Panicked,
                    format!("a scheduler loop failed: {e}"),
                ))
            });
            if let Err(e) = outcome {
                error!(error = %e, "the scheduler cannot go on; stopping every job");
                if first_error.is_none() {
                    inner.stopping.cancel();
                    if let Err(close) = inner.coordinator.close().await {
                        error!(error = %close, "stopping the rounds in flight");
                    }
                    first_error = Some(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// One pass for callers started by cron or a systemd timer: runs each job's instants due
    /// now, each once across the cluster, and returns what became of each; then the caller
    /// exits (or calls again next period).
    ///
    /// For each job, in order:
    ///
    /// 1. a round cut short whose instant came within `window` is rerun once, if no replica has
    ///    claimed its rerun (as the rerun check of [`run`](Scheduler::run) does);
    /// 2. the instants of the schedule that came within `window` (at or after now − `window`,
    ///    at or before now) and are later than the last instant on record are claimed, oldest
    ///    first, and run here when this replica wins ([`DueOutcome::Ran`](super::DueOutcome);
    ///    `late` when a later instant had come by then: a missed instant caught up). A job that
    ///    never ran has only its latest instant due (if within `window`): it catches nothing up,
    ///    as with [`CatchUp`](super::CatchUp). At most 1,000 instants per job and pass.
    ///
    /// An instant another replica claimed first is [`Taken`](super::DueOutcome::Taken) (when the
    /// latest instant within `window` is on record already, the pass claims nothing and reports
    /// it so); one the
    /// job's lease is held through by the round of an earlier instant is
    /// [`Busy`](super::DueOutcome::Busy), and the pass leaves that job (a round still running
    /// takes the instant along as skipped when it ends, the next pass runs it otherwise). The
    /// pass never waits for another replica's round; it waits only while the store's clock has
    /// not reached an instant. A round's overrun past the next due instant of the pass is not
    /// taken along: that instant is claimed next; an overrun past the last one is skipped and
    /// counted as in `run`.
    ///
    /// Instants older than `window`, never claimed, are left alone: no replica runs them.
    /// A zero `window` runs an instant only when the pass starts on its very millisecond: give
    /// the delay the caller may start with (cron's, a timer's `RandomizedDelaySec=` and
    /// `AccuracySec=`), or more to catch up missed instants.
    ///
    /// Store failures are retried twice; then the error is returned (as are the errors `run`
    /// returns). [`shutdown`](Scheduler::shutdown) from another task stops the pass: a round in
    /// flight is told to stop, the rest is not claimed, and the pass returns what it did. Do
    /// not call it while [`run`](Scheduler::run) runs on the same scheduler (it would claim
    /// alongside `run`'s loops; the store keeps each instant once all the same).
    pub async fn run_due(&self, window: Duration) -> Result<Vec<DueInstant>> {
        if self.inner.stopping.is_cancelled() {
            return Err(Error::new(
                ErrorKind::Closed,
                "this scheduler has been shut down; build a new one",
            ));
        }
        engine::run_due(&self.inner, window).await
    }

    /// Stops the scheduler: no new instant is claimed; every round in flight is told to stop
    /// ([`Round::done`](super::Round::done) fires) and gets up to the step-down grace to return,
    /// its lease renewed meanwhile; rounds that return are finished (a round whose work returns
    /// `Ok` counts as run to its end; one that gives up is left for its rerun elsewhere). Then
    /// waits for every job's loop to end; [`run`](Scheduler::run) then returns as soon as it is
    /// polled (so `select! { r = &mut run => …, _ = signal => { s.shutdown().await?; run.await? }
    /// }` works on one task).
    ///
    /// Returns a [`Timeout`](ErrorKind::Timeout) error when some work has not returned within
    /// the grace: its lease stays held until it does, and `run` returns after it.
    pub async fn shutdown(&self) -> Result<()> {
        let inner = &self.inner;
        inner.stopping.cancel();
        inner.coordinator.close().await?;
        inner.loops.close();
        inner.loops.wait().await;
        Ok(())
    }

    /// `true` once [`shutdown`](Scheduler::shutdown) has been called (or `run` failed).
    pub fn is_shut_down(&self) -> bool {
        self.inner.stopping.is_cancelled()
    }

    /// This replica's instance label.
    pub fn instance(&self) -> &str {
        self.inner.coordinator.instance()
    }

    /// The timings rounds are held with.
    pub fn timings(&self) -> Timings {
        self.inner.coordinator.timings()
    }

    /// The jobs.
    pub fn jobs(&self) -> &[Job] {
        &self.inner.jobs
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn LeaseStore> {
        &self.inner.store
    }
}

/// Marks `run` as returned, even when its future is dropped.
struct ExitGuard<'a>(&'a Inner);

impl Drop for ExitGuard<'_> {
    fn drop(&mut self) {
        self.0.state.store(RAN, Ordering::SeqCst);
    }
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("store", &self.inner.store)
            .field("instance", &self.instance())
            .field("timings", &self.timings())
            .field("jobs", &self.inner.jobs)
            .field("shut_down", &self.is_shut_down())
            .finish()
    }
}

impl SchedulerBuilder {
    /// The label others see as this replica's instance (default: host name, process id and a
    /// random suffix, as for a [`Coordinator`]).
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }

    /// The timings each round's lease is held with (default: [`Timings::default`]). The
    /// step-down grace is how long a round's work has to return once its lease is lost or the
    /// scheduler shuts down.
    pub fn timings(mut self, timings: Timings) -> Self {
        self.timings = timings;
        self
    }

    /// What to do when a round's work does not return within the step-down grace after its
    /// lease was lost (default: log, then end the process, as [`Coordinator`]). Tests record it
    /// instead.
    pub fn fail_action(
        mut self,
        action: impl Fn(&StepDownFailure) + Send + Sync + 'static,
    ) -> Self {
        self.fail_action = Arc::new(action);
        self
    }

    /// The wall clock that says when an instant has come (default: [`SystemClock`]; in
    /// paused-time tests a [`TokioClock`](super::TokioClock)).
    pub fn clock(mut self, clock: impl WallClock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// How often this replica looks for rounds cut short, for all its jobs in one call
    /// (default: the timings' campaign [`retry`](Timings::retry) plus jitter, 2–2.5 s by
    /// default). A round cut short by a dead process is found once its lease has expired.
    pub fn rerun_check(mut self, every: Duration) -> Self {
        self.rerun_check = Some(every.max(Duration::from_millis(1)));
        self
    }

    /// Adds a job.
    pub fn job(mut self, job: Job) -> Self {
        self.jobs.push(job);
        self
    }

    /// Adds jobs.
    pub fn jobs(mut self, jobs: impl IntoIterator<Item = Job>) -> Self {
        self.jobs.extend(jobs);
        self
    }

    /// Checks the store, the instance label, the timings and the job names, and builds.
    ///
    /// Fails with [`Unsupported`](ErrorKind::Unsupported) when the store has no scheduler slots
    /// ([`LeaseStore::slot_store`] answers `None`), [`InvalidName`](ErrorKind::InvalidName) for a
    /// job name the store cannot hold or one given twice, and as [`Coordinator`]'s builder
    /// otherwise.
    pub fn build(self) -> Result<Scheduler> {
        if self.store.slot_store().is_none() {
            return Err(Error::unsupported(format!(
                "the {} store has no scheduler slots, which the scheduler needs; choose a store \
                 whose capabilities say `slots`",
                self.store.backend()
            )));
        }
        let mut seen = HashSet::new();
        for job in &self.jobs {
            self.store.validate_name(&job.name)?;
            if !seen.insert(job.name.clone()) {
                return Err(Error::invalid_name(format!(
                    "job '{}' is given twice; job names are lease names and must be unique",
                    job.name
                )));
            }
        }
        // The coordinator runs on the store itself; slot claims and finishes take their own
        // path through it (`Coordinator::claim_slot`, `Term::resign_finishing`).
        let fail_action = self.fail_action;
        let mut coordinator = Coordinator::builder(Arc::clone(&self.store))
            .timings(self.timings)
            .fail_action(move |failure| fail_action(failure));
        if let Some(instance) = self.instance {
            coordinator = coordinator.instance(instance);
        }
        let coordinator = coordinator.build()?;
        Ok(Scheduler {
            inner: Arc::new(Inner {
                store: self.store,
                coordinator,
                jobs: self.jobs,
                clock: self.clock,
                rerun_check: self.rerun_check,
                stopping: CancellationToken::new(),
                state: AtomicU8::new(IDLE),
                loops: TaskTracker::new(),
            }),
        })
    }
}

impl fmt::Debug for SchedulerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerBuilder")
            .field("store", &self.store)
            .field("instance", &self.instance)
            .field("timings", &self.timings)
            .field("jobs", &self.jobs)
            .finish_non_exhaustive()
    }
}
