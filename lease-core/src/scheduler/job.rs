//! Jobs, their catch-up policy, and the round a job's work is handed.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use tokio_util::sync::WaitForCancellationFuture;

use super::schedule::Schedule;
use crate::engine::term::Term;
use crate::store::error::{BoxError, Result};

pub(crate) type WorkFuture = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;
pub(crate) type Work = Arc<dyn Fn(Round) -> WorkFuture + Send + Sync>;

/// What a replica does at start-up about instants that passed while no replica ran the job.
///
/// The store's record tells the cases apart
/// ([`SlotStore::last_slot`](crate::backend::slots::SlotStore)): a job that **never ran** (no
/// instant ever claimed under its name) never catches up, under either policy: it starts with its
/// next instant. Otherwise the instant **missed** is the latest instant of the schedule at
/// start-up, when it is later than the last instant on record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CatchUp {
    /// Missed instants are skipped: the replica starts with the first instant at or after its
    /// start-up. The default.
    #[default]
    Skip,
    /// The latest missed instant runs once, at start-up (whichever replica claims it first);
    /// the earlier ones are skipped. For a daily report that must not miss a day when the
    /// cluster was down at its hour.
    RunLatestOnce,
}

/// A job: a name (its lease name), a [`Schedule`], a [`CatchUp`] policy and its work.
///
/// Made with [`Job::cron`], [`Job::every`] or [`Job::builder`], finished with
/// [`JobBuilder::run`]:
///
/// ```
/// use std::time::Duration;
/// use lease_core::Job;
/// use lease_core::scheduler::{CatchUp, Round, Tz};
///
/// let report = Job::cron("daily-report", "0 30 2 * * *", Tz::Europe__Berlin)?
///     .catch_up(CatchUp::RunLatestOnce)
///     .run(|round: Round| async move {
///         println!("report for {} under token {}", round.instant(), round.token());
///         Ok::<(), std::io::Error>(())
///     });
/// let heartbeat = Job::every("heartbeat", Duration::from_secs(10))?
///     .run(|_round: Round| async { Ok::<(), std::io::Error>(()) });
/// # let _ = (report, heartbeat);
/// # Ok::<(), lease_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Job {
    pub(crate) name: Arc<str>,
    pub(crate) schedule: Schedule,
    pub(crate) catch_up: CatchUp,
    pub(crate) work: Work,
}

/// A job without its work yet: set the policy, then [`run`](JobBuilder::run).
#[derive(Debug, Clone)]
#[must_use = "a job builder does nothing until `run` gives it its work"]
pub struct JobBuilder {
    name: String,
    schedule: Schedule,
    catch_up: CatchUp,
}

impl Job {
    /// A job named `name` (also its lease name) on `schedule`.
    pub fn builder(name: impl Into<String>, schedule: Schedule) -> JobBuilder {
        JobBuilder {
            name: name.into(),
            schedule,
            catch_up: CatchUp::default(),
        }
    }

    /// A job on a cron expression read in `tz`: see [`Schedule::cron`].
    pub fn cron(name: impl Into<String>, expr: &str, tz: Tz) -> Result<JobBuilder> {
        Ok(Job::builder(name, Schedule::cron(expr, tz)?))
    }

    /// A job every `period`, aligned to the Unix epoch: see [`Schedule::every`].
    pub fn every(name: impl Into<String>, period: Duration) -> Result<JobBuilder> {
        Ok(Job::builder(name, Schedule::every(period)?))
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The job's schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The job's catch-up policy.
    pub fn catch_up_policy(&self) -> CatchUp {
        self.catch_up
    }
}

impl JobBuilder {
    /// The catch-up policy at start-up (default: [`CatchUp::Skip`]).
    pub fn catch_up(mut self, policy: CatchUp) -> JobBuilder {
        self.catch_up = policy;
        self
    }

    /// The work of each round, and the finished job.
    ///
    /// `work` is called once per round with the [`Round`]; the future it returns runs on its
    /// own task under the round's lease. It should stop when [`Round::done`] fires and fence
    /// its writes with [`Round::token`].
    ///
    /// - `Ok(())`: the round ran to its end and is recorded as finished.
    /// - `Err(_)` or a panic while the lease is live: the round failed; it is logged, counted
    ///   and recorded as finished too (a rerun is for rounds cut short, not for failures).
    /// - `Err(_)` or a panic once the round's term has ended (lease lost, scheduler shut
    ///   down): the round was cut short; it is left unfinished and runs again once.
    pub fn run<F, Fut, E>(self, work: F) -> Job
    where
        F: Fn(Round) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let work: Work = Arc::new(move |round: Round| -> WorkFuture {
            let fut = work(round);
            Box::pin(async move { fut.await.map_err(Into::into) })
        });
        Job {
            name: Arc::from(self.name),
            schedule: self.schedule,
            catch_up: self.catch_up,
            work,
        }
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("schedule", &self.schedule)
            .field("catch_up", &self.catch_up)
            .finish_non_exhaustive()
    }
}

/// One round of a job: the instant it runs for, under a lease held for the round.
///
/// A cheap handle (clones share the term). The lease is renewed while the work runs — until
/// the work's future returns, whether or not it keeps the `Round` — and given back when it
/// returns; [`done`](Round::done) fires when the round must stop (lease lost, scheduler shut
/// down).
#[derive(Clone)]
pub struct Round {
    pub(crate) job: Arc<str>,
    pub(crate) instant_ms: i64,
    pub(crate) tz: Tz,
    pub(crate) rerun: bool,
    pub(crate) term: Term,
}

impl Round {
    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The instant this round runs for, in milliseconds since the Unix epoch. It names the
    /// round cluster-wide: a rerun carries the instant of the round it replaces.
    pub fn instant_ms(&self) -> i64 {
        self.instant_ms
    }

    /// The instant in UTC. (The Unix epoch for an instant outside chrono's range, which no
    /// schedule produces.)
    pub fn instant(&self) -> DateTime<Utc> {
        Schedule::to_utc(self.instant_ms).unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
    }

    /// The instant on the wall clock of the job's time zone (UTC for an interval job).
    pub fn local_instant(&self) -> DateTime<Tz> {
        self.instant().with_timezone(&self.tz)
    }

    /// The fencing token of the round's lease: strictly greater than every token issued for the
    /// job before. Pass it along with the round's writes.
    pub fn token(&self) -> u64 {
        self.term.token()
    }

    /// `true` when this round is the one rerun of an instant whose first round was cut short.
    pub fn is_rerun(&self) -> bool {
        self.rerun
    }

    /// The term the round runs under.
    pub fn term(&self) -> &Term {
        &self.term
    }

    /// Resolves when the round must stop: its lease was lost or the scheduler is shutting
    /// down. See [`Term::done`].
    pub fn done(&self) -> WaitForCancellationFuture<'_> {
        self.term.done()
    }

    /// `Ok` while the round's lease is live; otherwise why it ended (`Lost` or `Closed`), so
    /// work can stop with `round.check()?`. See [`Term::check`].
    pub fn check(&self) -> Result<()> {
        self.term.check()
    }
}

impl fmt::Debug for Round {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Round")
            .field("job", &self.job)
            .field("instant", &Schedule::format(self.instant_ms))
            .field("token", &self.token())
            .field("rerun", &self.rerun)
            .finish()
    }
}
