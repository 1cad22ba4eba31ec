//! Running one round under its term, with `run`'s step-down rules, then finishing it.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};
use tracing::{Instrument, debug, info, info_span, warn};

use super::clock::WallClock;
use super::due::RoundEnded;
use super::job::{Job, Round, WorkFuture};
use super::schedule::Schedule;
use super::telemetry;
use crate::engine::run::{Ended, RunGuard, panic_message, supervise};
use crate::engine::term::Term;
use crate::store::error::{BoxError, Error, Result};
use crate::store::lease_store::{LeaseStore, slots_of};
use crate::store::slots::SlotFinish;

/// How the work ended.
enum Verdict {
    /// Ran to its end: `Some(error)` when it failed while its lease was live.
    Finished(Option<String>),
    /// Cut short: the term ended (lost, shut down) before the work completed.
    CutShort(String),
    /// The work did not return within the step-down grace after the lease was lost: the fail
    /// action ran and the task was aborted.
    Abandoned(Error),
}

/// What a round needs of its scheduler: the store that records its finish (the one its term
/// was claimed on), and the wall clock its overrun is read from.
pub(crate) struct RoundEnv<'a> {
    pub(crate) store: &'a dyn LeaseStore,
    pub(crate) clock: &'a dyn WallClock,
}

/// Where the job's loop goes on after a round.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RoundEnd {
    /// The job's next instant is the first one after this: the latest instant of the schedule
    /// that has come by the round's end (at least the round's own), so the instants the round
    /// overran are skipped; or just before that latest instant, when the round could not
    /// record its overrun, so that instant is claimed next.
    pub(crate) cursor: i64,
    /// The next instant is claimed late: the round held the job through it without recording
    /// it.
    pub(crate) next_late: bool,
    /// How the round ended.
    pub(crate) ended: RoundEnded,
    /// The instants the round overran and recorded as skipped.
    pub(crate) skipped: u64,
}

/// Runs the round of `instant_ms` under `term` and finishes it; see [`RoundEnd`] for what it
/// returns. `passed_before`: the instants the finish may take along as overrun end before it
/// (the next instant a one-shot pass means to claim itself); `None`: no limit.
pub(crate) async fn run_round(
    s: &RoundEnv<'_>,
    job: &Job,
    instant_ms: i64,
    term: Term,
    rerun: bool,
    passed_before: Option<i64>,
) -> RoundEnd {
    let name: &str = &job.name;
    let token = term.token();
    let instant = Schedule::format(instant_ms);
    let mut guard = RunGuard::new(&term, "round of job");
    if !term.is_live() {
        // Shut down between the claim and now: the round never started.
        guard.armed = false;
        let _ = term.resign().await;
        warn!(job = name, %instant, term = token, rerun, "round cut short before it started: the scheduler is shutting down");
        telemetry::round(telemetry::ROUNDS_CUT_SHORT, name, rerun);
        return RoundEnd {
            cursor: instant_ms,
            next_late: false,
            ended: RoundEnded::CutShort,
            skipped: 0,
        };
    }
    info!(job = name, %instant, instant_ms, term = token, rerun, instance = %term.instance(), "round started");
    telemetry::round(telemetry::ROUNDS_STARTED, name, rerun);
    if rerun {
        telemetry::job(telemetry::RERUNS, name, 1);
    }
    let started = Instant::now();
    let round = Round {
        job: job.name.clone(),
        instant_ms,
        tz: job.schedule.time_zone(),
        rerun,
        term: term.clone(),
    };
    let span = info_span!("round", job = name, instant = %instant, term = token, rerun);
    let fut: WorkFuture = match std::panic::catch_unwind(AssertUnwindSafe(|| (job.work)(round))) {
        Ok(fut) => Box::pin(fut.instrument(span)),
        Err(payload) => {
            let msg = panic_message(payload.as_ref());
            Box::pin(async move { Err(BoxError::from(format!("work panicked: {msg}"))) })
        }
    };
    let verdict = execute(&term, fut).await;
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let now_ms = s.clock.now_ms();
    let until_ms = passed_before.map_or(now_ms, |b| now_ms.min(b.saturating_sub(1)));
    let passed_ms = job
        .schedule
        .latest_at_or_before(until_ms)
        .filter(|p| *p > instant_ms);
    let mut end = RoundEnd {
        cursor: passed_ms.unwrap_or(instant_ms),
        next_late: false,
        ended: RoundEnded::CutShort,
        skipped: 0,
    };
    match verdict {
        Verdict::Finished(error) => {
            let failed = error.is_some();
            end.ended = if failed {
                RoundEnded::Failed
            } else {
                RoundEnded::Finished
            };
            let finish = finish(s, &term, instant_ms, passed_ms).await;
            guard.armed = false;
            drop(guard);
            match &error {
                None => {
                    info!(job = name, %instant, term = token, rerun, elapsed_ms, "round finished")
                }
                Some(e) => {
                    warn!(job = name, %instant, term = token, rerun, elapsed_ms, error = %e, "round failed; recorded as finished (failures are not rerun)")
                }
            }
            match finish {
                Ok(f) => {
                    telemetry::round(telemetry::ROUNDS_FINISHED, name, rerun);
                    if failed {
                        telemetry::round(telemetry::ROUNDS_FAILED, name, rerun);
                    }
                    if !f.recorded {
                        warn!(job = name, %instant, term = token, rerun, "the round's end was not recorded: its lease was lost and a later instant has been claimed");
                    }
                    match passed_ms {
                        Some(passed) if f.passed_taken => {
                            let n = job.schedule.count_between(instant_ms, passed, 1_000_000);
                            telemetry::job(telemetry::INSTANTS_SKIPPED, name, n);
                            end.skipped = n;
                            info!(job = name, %instant, term = token, rerun, skipped = n, through = %Schedule::format(passed), "round overran {n} instant(s); they are skipped");
                        }
                        Some(passed) if f.recorded => {
                            // Still the last instant on record: nobody claimed the instants
                            // this round overran, and they are not recorded as skipped. The
                            // latest is claimed next (late); those before it never ran.
                            let missed = job.schedule.count_between(
                                instant_ms,
                                passed.saturating_sub(1),
                                1_000_000,
                            );
                            if missed > 0 {
                                telemetry::job(telemetry::INSTANTS_MISSED, name, missed);
                                warn!(job = name, %instant, term = token, rerun, missed, through = %Schedule::format(passed), "round overran {missed} instant(s) but could not record them as skipped (its lease was lost, or the store's clock has not reached them); they never ran");
                            }
                            debug!(job = name, %instant, term = token, rerun, passed = %Schedule::format(passed), "overrun not recorded; claiming the latest instant that has come");
                            end.cursor = passed.saturating_sub(1);
                            end.next_late = true;
                        }
                        Some(passed) => {
                            debug!(job = name, %instant, term = token, rerun, passed = %Schedule::format(passed), "overrun instants not recorded: a later instant has been claimed meanwhile");
                        }
                        None => {}
                    }
                }
                Err(e) => {
                    warn!(job = name, %instant, term = token, rerun, error = %e, "could not record the round's end; the instant stays unfinished and may run once more");
                }
            }
        }
        Verdict::CutShort(why) => {
            guard.armed = false;
            let _ = term.resign().await;
            drop(guard);
            telemetry::round(telemetry::ROUNDS_CUT_SHORT, name, rerun);
            if rerun {
                warn!(job = name, %instant, term = token, rerun, elapsed_ms, reason = %why, "rerun cut short; the instant stays unfinished for good");
            } else {
                warn!(job = name, %instant, term = token, rerun, elapsed_ms, reason = %why, "round cut short; it runs again once, on whichever replica finds it first");
            }
        }
        Verdict::Abandoned(e) => {
            end.ended = RoundEnded::Abandoned;
            guard.armed = false;
            drop(guard);
            telemetry::round(telemetry::ROUNDS_CUT_SHORT, name, rerun);
            warn!(job = name, %instant, term = token, rerun, elapsed_ms, error = %e, "round abandoned: its work did not return within the step-down grace after the lease was lost");
        }
    }
    end
}

/// `Term::run`'s rules for one round, by the same supervisor ([`supervise`]): the work on its
/// own task (tracked for close) holding the term, the step-down grace once the lease is lost,
/// the fail action and the abort past it, all enforced by a watcher task, so dropping this
/// future (with `Scheduler::run`'s) neither frees the name under running work nor lets work
/// under a lost lease outlive the grace. The term is left held (unless abandoned) so the
/// finish can run under it.
async fn execute(term: &Term, fut: WorkFuture) -> Verdict {
    let joined = match supervise(term, fut).await {
        Ended::Joined(joined) => joined,
        Ended::Abandoned(error) => return Verdict::Abandoned(error),
    };
    // Work that gave up because its term ended was cut short; work that says it completed
    // ran to its end, even if the lease was lost meanwhile (the store decides what is kept).
    let ended = !term.is_live();
    let failure = match joined {
        Ok(Ok(())) => return Verdict::Finished(None),
        Ok(Err(e)) => e.to_string(),
        Err(join) if join.is_panic() => {
            format!(
                "work panicked: {}",
                panic_message(join.into_panic().as_ref())
            )
        }
        Err(_) => return Verdict::CutShort("the work's task was cancelled".to_owned()),
    };
    if ended {
        let why = term
            .err()
            .map_or_else(|| "the term ended".to_owned(), |e| e.to_string());
        Verdict::CutShort(format!("{why}; the work returned: {failure}"))
    } else {
        Verdict::Finished(Some(failure))
    }
}

/// Finishes the round: the term's keeper performs `finish_slot` in place of its release, once
/// it has stopped renewing (so no renewal can find the lease gone just after the finish gave it
/// back); if that did not answer, the finish is tried again directly, while the lease can still
/// be ours.
async fn finish(
    s: &RoundEnv<'_>,
    term: &Term,
    instant_ms: i64,
    passed_ms: Option<i64>,
) -> Result<SlotFinish> {
    let holder = term.holder().clone();
    let mut result = term.resign_finishing(instant_ms, passed_ms).await;
    let t = term.timings();
    let mut attempts = 0;
    loop {
        match result {
            Some(Ok(f)) => return Ok(f),
            Some(Err(e)) if !e.is_temporary() => return Err(e),
            _ if attempts >= 3 => {
                return Err(result.and_then(Result::err).unwrap_or_else(|| {
                    Error::timeout("finish of the round", t.attempt_timeout())
                }));
            }
            _ => {}
        }
        if attempts > 0 {
            sleep(t.renew_every().min(Duration::from_secs(1))).await;
        }
        attempts += 1;
        let name = term.name();
        result = Some(
            match timeout(t.attempt_timeout(), async {
                slots_of(s.store)?
                    .finish_slot(name, &holder, instant_ms, passed_ms)
                    .await
            })
            .await
            {
                Ok(r) => r,
                Err(_) => Err(Error::timeout("finish of the round", t.attempt_timeout())),
            },
        );
    }
}
