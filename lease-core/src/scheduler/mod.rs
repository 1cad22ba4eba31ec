//! The cluster scheduler: each instant of a job runs once across the cluster.
//!
//! Every replica of a service builds the same [`Scheduler`](crate::Scheduler) over one store
//! with scheduler slots (a [`SlotStore`](crate::backend::slots::SlotStore), reached through
//! [`LeaseStore::slot_store`](crate::LeaseStore::slot_store)) and runs it. For each [`Job`]
//! and each instant of its [`Schedule`](crate::Schedule):
//!
//! 1. At the instant (by the scheduler's [`WallClock`]), every replica claims it with
//!    [`SlotStore::claim_slot`](crate::backend::slots::SlotStore::claim_slot). The store decides,
//!    by its own clock: one replica wins and holds the job's lease for the round; the others leave
//!    the instant to it (`Taken`: this instant or a later one is on record, or `Held` by the round
//!    of this instant). A replica whose clock runs fast is told `Early`, waits the difference and
//!    asks again. When the lease is `Held` by the round of an **earlier** instant, the replica
//!    claims again once that lease has ended (it asks the store when): a round still running takes
//!    the instant along when it finishes (an overrun, step 3), so the claim finds it taken; a round
//!    cut short with its lease still live (its replica died) does not, and once its lease has
//!    expired the instant either runs **late**, once, logged and counted
//!    ([`telemetry::INSTANTS_LATE`]; its claim supersedes the round cut short), or — when that
//!    round's rerun is claimed first — is taken along as skipped by the rerun's finish. When the
//!    next instant comes first, the replica moves on to it; the instants a dead round's lease held
//!    the job through are then counted as **missed** ([`telemetry::INSTANTS_MISSED`]) by the claim
//!    that supersedes that round, or taken along as skipped by its rerun. No instant is passed over
//!    without a record or a count.
//! 2. The winner runs the job's work under the lease with [`Term::run`](crate::Term::run)'s
//!    rules: the lease is renewed meanwhile, until the work returns, whether or not the work
//!    keeps its [`Round`]; once it is lost, [`Round::done`] fires and the work has the
//!    step-down grace to return, then the fail action runs.
//! 3. When the work returns,
//!    [`SlotStore::finish_slot`](crate::backend::slots::SlotStore::finish_slot) records the round
//!    as run to its end and gives the lease back, taking along `passed`: the last instant of the
//!    schedule that has come by then. Instants a round **overran** are thereby skipped
//!    cluster-wide, recorded, logged and counted ([`telemetry::INSTANTS_SKIPPED`]). When the finish
//!    cannot take them along (the lease was gone by then, or the store's clock has not reached
//!    them), the latest of them is claimed next, late, and those before it are counted as missed.
//!
//! **A round cut short** — the process died, the scheduler shut down, the lease was lost — is left
//! unfinished. Every replica looks for unfinished rounds of all its jobs in one call
//! ([`SlotStore::unfinished`](crate::backend::slots::SlotStore::unfinished), every
//! [`rerun_check`](SchedulerBuilder::rerun_check)) and claims them with
//! [`SlotStore::claim_rerun`](crate::backend::slots::SlotStore::claim_rerun): the round runs again
//! **once**, on whichever replica finds it first, with [`Round::is_rerun`] set. A rerun cut short
//! again stays unfinished for good, and when a later instant is claimed before the rerun, the
//! unfinished one is **superseded**: logged and counted, never run.
//!
//! **Catch-up** at start-up is per job ([`CatchUp`]): skip the instants missed while no replica
//! ran, or run the latest of them once. The store's record tells a job that never ran (no
//! catch-up) from one that missed instants.
//!
//! **One-shot**: a process started by cron or a systemd timer every period calls
//! [`Scheduler::run_due`](crate::Scheduler::run_due) instead of `run`: one pass that runs the
//! instants due now (each missed one within a window, oldest first, and the reruns of rounds cut
//! short within it), each once across the cluster, and returns what became of each
//! ([`DueInstant`]).
//!
//! Every round's log lines (target `lease_core::scheduler`, level info; cut-short, failed and
//! superseded rounds at warn) carry the job, the instant, the term (fencing token) and whether
//! it is a rerun; the work runs inside a `round` span with the same fields. Counters in
//! [`telemetry`] are labelled with the job (and `rerun`).
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::time::Duration;
//!
//! use lease_core::{Job, Scheduler};
//! use lease_core::scheduler::{CatchUp, Round, TokioClock, Tz};
//! use lease_core::Timings;
//! use lease_local::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> lease_core::Result<()> {
//! let store = MemoryStore::new();
//! let rounds = Arc::new(AtomicUsize::new(0));
//! let counted = rounds.clone();
//! let scheduler = Scheduler::builder(store.clone())
//!     .instance("worker-1")
//!     .timings(Timings::from_lease(Duration::from_secs(6))?)
//!     .clock(TokioClock::starting_at(store.now_ms())) // tests: follow paused time
//!     .job(
//!         Job::every("heartbeat", Duration::from_secs(10))?.run(move |round: Round| {
//!             let counted = counted.clone();
//!             async move {
//!                 // Fence downstream writes with round.token(); stop when round.done() fires.
//!                 counted.fetch_add(1, Ordering::SeqCst);
//!                 Ok::<(), std::io::Error>(())
//!             }
//!         }),
//!     )
//!     .job(
//!         Job::cron("nightly-report", "0 30 2 * * *", Tz::Europe__Berlin)?
//!             .catch_up(CatchUp::RunLatestOnce)
//!             .run(|round: Round| async move {
//!                 println!("report for {} (local {})", round.instant(), round.local_instant());
//!                 Ok::<(), std::io::Error>(())
//!             }),
//!     )
//!     .build()?;
//!
//! let running = tokio::spawn({
//!     let scheduler = scheduler.clone();
//!     async move { scheduler.run().await }
//! });
//! tokio::time::sleep(Duration::from_secs(60)).await;
//! scheduler.shutdown().await?; // tells rounds in flight to stop, and waits for them
//! running.await.expect("the scheduler's task")?;
//! assert!(rounds.load(Ordering::SeqCst) >= 6); // one every 10 s, aligned to the epoch
//! # Ok(()) }
//! ```
//!
//! # Time
//!
//! Instants are milliseconds since the Unix epoch; the store compares them with its own clock. Cron
//! expressions are read in a named IANA time zone; how daylight-saving changes are handled (skipped
//! and repeated local times) is in [`Schedule`](crate::Schedule)'s docs. Intervals are aligned to
//! the Unix epoch, so all replicas compute the same instants.
//!
//! The scheduler reads the time from a [`WallClock`]: the [`SystemClock`] by default; a
//! [`TokioClock`] in tests in paused tokio time.

mod clock;
mod due;
mod engine;
pub(crate) mod handle;
pub(crate) mod job;
mod round;
pub(crate) mod schedule;
pub mod telemetry;

pub use chrono;
pub use chrono_tz;
pub use chrono_tz::Tz;
pub use clock::{SystemClock, TokioClock, WallClock};
pub use due::{DueInstant, DueOutcome, RoundEnded};
pub(crate) use job::Job;
pub use job::{CatchUp, JobBuilder, Round};

pub use handle::SchedulerBuilder;
