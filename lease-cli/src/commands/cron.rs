//! `lease cron NAME (--schedule EXPR [--tz ZONE] | --every D) [--catch-up D] [--once] -- CMD…`:
//! CMD once per instant of a schedule across every host that runs the same command, by the
//! library's [`Scheduler`] and the store's scheduler slots.
//!
//! Two forms share everything but the loop: the daemon ([`Scheduler::run`], after one catch-up
//! pass) and `--once` ([`Scheduler::run_due`]: one pass, then exit). Each round runs CMD under
//! the same supervision as `lease run` ([`supervise_with`]), with the instant in its
//! environment; each instant this process dealt with is logged as one record line (level info,
//! shown with `LEASE_LOG=info`), and a failed CMD at warn.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease::scheduler::{
    CatchUp, DueInstant, DueOutcome, Round, RoundEnded, SystemClock, Tz, WallClock,
};
use lease::{Job, LeaseStore, Schedule, Scheduler};

use crate::child::{CmdLine, Watchdog, exit_code};
use crate::cli::CronArgs;
use crate::commands::{check_name, interrupted, precheck_name, timings};
use crate::duration::parse_duration;
use crate::exit::{CliError, Exit};
use crate::open_store;
use crate::signals::StopSignals;
use crate::store_url::StoreUrl;
use crate::supervise::{Outcome, supervise_with};

/// The long help of `lease cron`.
pub(crate) const CRON_ABOUT: &str = "Run CMD once per instant of a schedule across all hosts \
    that run the same command: a cluster-wide cron.\n\n\
    Every host runs the same `lease cron NAME …` on one shared store. For each instant of the \
    schedule (--schedule, a cron expression read in --tz, default UTC; or --every D, at the \
    multiples of D since the Unix epoch) one host claims the instant in the store and runs CMD; \
    the others leave it. Each instant runs at most once across the cluster (twice only when its \
    first round is cut short: see below), however many hosts start at once or late. NAME is a \
    lease name: CMD runs under NAME's lease, with the same supervision as `lease run`, and gets \
    LEASE_NAME, LEASE_TERM (the fencing token), LEASE_INSTANCE, LEASE_INSTANT (the instant, \
    RFC 3339 in UTC, e.g. 2026-12-07T03:00:00.000Z), LEASE_INSTANT_MS (milliseconds since the \
    epoch) and LEASE_RERUN (1 for a rerun, else 0).\n\n\
    Two forms. Without --once lease runs as a daemon (a systemd service): it runs each instant \
    as it comes, until SIGINT/SIGTERM/SIGHUP (then it exits 0; a round in flight is stopped and \
    runs again once elsewhere). With --once lease makes one pass and exits (a crontab line or \
    a systemd timer calls it every period): it runs the instants due now that no host has run, \
    then exits.\n\n\
    Catch-up: an instant no host has run still runs when it came at most --catch-up ago \
    (default 5m): a host that starts late, or whose timer fires late, runs it then, once; \
    missed instants older than that never run. The daemon makes such a pass when it starts. \
    With --once the window must cover the delay the caller starts with (cron's, a timer's \
    RandomizedDelaySec= and AccuracySec=); make it the period (e.g. 24h) so that a host that was \
    down at the instant runs it when it is back (like systemd's Persistent=, but once across \
    the cluster). A job that never ran catches up nothing but its latest instant.\n\n\
    A round cut short (its lease lost, lease killed or stopped) runs again once, on whichever \
    host finds it first (the daemon looks every few seconds; --once at its next pass, within \
    --catch-up). A round that fails (CMD exits non-zero) is not rerun. Instants a round \
    overruns are skipped, recorded and counted; with --once, an instant whose job is still \
    running elsewhere is left to that round.\n\n\
    Each instant a lease process dealt with is logged as one line, at level info (shown with \
    LEASE_LOG=info): 'ran here' with the host (instance), term, exit code and rerun; with \
    --once also 'taken' (another host ran it; its last holder) and 'busy' (an earlier round \
    still holds the job). A round whose CMD fails is logged at warn (shown by default), with its exit code. Hosts that find the \
    instant taken are quiet: nothing on stderr.\n\n\
    Exit codes of --once: 0 when nothing failed here: each due instant ran here with CMD \
    exiting 0, or another host ran it (or is running it), or nothing was due; CMD's code \
    (128+N for signal N) when a CMD run here failed (the first that failed); 74 when a round \
    here lost its lease (CMD was stopped; it runs again once elsewhere); 72 when stopped by a \
    signal before any CMD ran; lease's other codes as for `lease run`. The daemon exits 0 when \
    stopped by a signal, and with lease's own code when it cannot go on (a bad store, a name \
    the store refuses).\n\n\
    Bad input: a cron expression that does not parse or never matches, an unknown --tz, or \
    --tz with --every exits 64; a zero or unparsable --every or --catch-up exits 66; each \
    with a message saying what to write instead. The store must keep scheduler slots \
    (every store lease supports does).";

/// How CMD's run for one round ended, as the round's work saw it.
#[derive(Debug, Clone)]
enum CmdEnd {
    /// CMD exited with this code (128+N for signal N).
    Exited(u8),
    /// The lease was lost; CMD was stopped.
    Lost(String),
    /// CMD could not be started or supervised.
    NotRun(CliError),
}

/// What the rounds of this process share: CMD, its watchdog (started at the first round), and
/// how each round's CMD ended, by term.
struct Ctx {
    cmd: CmdLine,
    watchdog: tokio::sync::Mutex<Option<Watchdog>>,
    ends: Mutex<HashMap<u64, CmdEnd>>,
}

impl Ctx {
    fn end_of(&self, token: u64) -> Option<CmdEnd> {
        self.ends
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&token)
            .cloned()
    }
}

/// Runs the `cron` subcommand.
pub(crate) async fn cron(url: &StoreUrl, args: CronArgs) -> Result<u8, CliError> {
    let cmd = CmdLine::new(args.cmd.clone())?;
    precheck_name(&args.name)?;
    let schedule = schedule(&args)?;
    let window = positive("--catch-up", &args.catch_up)?;
    let timings = timings(&args.hold.ttl)?;
    if let Some(instance) = &args.hold.instance {
        lease::backend::validate_instance(instance)
            .map_err(|e| CliError::lease_with(Exit::BadName, &e))?;
    }
    let mut signals = StopSignals::install()?;
    let store: Arc<dyn LeaseStore> = tokio::select! {
        store = open_store::open(url, timings.lease()) => store?,
        sig = signals.recv() => return Err(interrupted(sig, "while opening the store")),
    };
    check_name(store.as_ref(), &args.name)?;
    let ctx = Arc::new(Ctx {
        cmd,
        watchdog: tokio::sync::Mutex::new(None),
        ends: Mutex::new(HashMap::new()),
    });
    let work_ctx = ctx.clone();
    let instants = schedule.clone();
    let job = Job::builder(job_name(&args.name), schedule)
        // Catch-up is the window's pass, made before the loops start.
        .catch_up(CatchUp::Skip)
        .run(move |round: Round| round_work(work_ctx.clone(), round));
    let mut builder = Scheduler::builder(store.clone())
        .timings(timings)
        // The round's work stops CMD itself on loss; the engine's own fail action is never
        // reached.
        .fail_action(|failure| {
            tracing::error!(name = %failure.name, term = failure.term, "work under a lost lease did not return within the grace");
        })
        .job(job);
    if let Some(instance) = &args.hold.instance {
        builder = builder.instance(instance.clone());
    }
    let scheduler = builder.build().map_err(|e| CliError::from_lease(&e))?;
    loop {
        let latest_before = instants.latest_at_or_before(SystemClock.now_ms());
        let (due, stopped) = pass(&scheduler, window, &mut signals).await;
        let due = due.map_err(|e| CliError::from_lease(&e))?;
        let verdict = report(&scheduler, &*store, &ctx, &due).await;
        if args.once {
            return match (verdict, stopped) {
                (Some(v), _) => v,
                (None, Some(sig)) => Err(interrupted(sig, "during the pass")),
                (None, None) => Ok(0),
            };
        }
        if stopped.is_some() {
            return Ok(0);
        }
        // The daemon's loop starts with the first instant after its start; an instant that
        // came while the pass ran (its round can take a while) is the next pass's, so none
        // falls between the pass and the loop.
        if instants.latest_at_or_before(SystemClock.now_ms()) == latest_before {
            break;
        }
    }
    daemon(&scheduler, &mut signals).await
}

/// One pass over the due instants ([`Scheduler::run_due`]); a stop signal meanwhile shuts the
/// scheduler down (a round in flight is told to stop) and the pass ends with what it did.
async fn pass(
    scheduler: &Scheduler,
    window: Duration,
    signals: &mut StopSignals,
) -> (
    lease::Result<Vec<DueInstant>>,
    Option<rustix::process::Signal>,
) {
    let due = scheduler.run_due(window);
    tokio::pin!(due);
    tokio::select! {
        result = &mut due => (result, None),
        sig = signals.recv() => {
            let (shut, result) = tokio::join!(scheduler.shutdown(), &mut due);
            if let Err(e) = shut {
                tracing::warn!(error = %e, "stopping the round in flight");
            }
            (result, Some(sig))
        }
    }
}

/// The daemon: the scheduler's loops until a stop signal.
async fn daemon(scheduler: &Scheduler, signals: &mut StopSignals) -> Result<u8, CliError> {
    let run = scheduler.run();
    tokio::pin!(run);
    let result = tokio::select! {
        result = &mut run => result,
        sig = signals.recv() => {
            tracing::info!(signal = crate::signals::name(sig), "stopping");
            let (shut, result) = tokio::join!(scheduler.shutdown(), &mut run);
            if let Err(e) = shut {
                tracing::warn!(error = %e, "stopping the round in flight");
            }
            result
        }
    };
    result.map(|()| 0).map_err(|e| CliError::from_lease(&e))
}

/// Logs the record of each instant of a pass, and picks the pass's exit: `None` when nothing
/// failed here.
async fn report(
    scheduler: &Scheduler,
    store: &dyn LeaseStore,
    ctx: &Ctx,
    due: &[DueInstant],
) -> Option<Result<u8, CliError>> {
    let mut verdict = None;
    for d in due {
        let instant = Schedule::format(d.instant_ms);
        match &d.outcome {
            DueOutcome::Ran {
                token,
                ended,
                skipped,
                ..
            } => {
                let failed = match (ctx.end_of(*token), ended) {
                    (Some(CmdEnd::Exited(0)), _) => None,
                    (Some(CmdEnd::Exited(code)), _) => Some(Ok(code)),
                    (Some(CmdEnd::Lost(why)), _) => Some(Err(CliError::new(
                        Exit::Lost,
                        format!(
                            "{why}; CMD (term {token}, instant {instant}) was stopped; the \
                             instant runs again once, on the next pass of any host"
                        ),
                    ))),
                    (Some(CmdEnd::NotRun(e)), _) => Some(Err(e)),
                    (None, RoundEnded::Finished) => None,
                    (None, _) => Some(Err(CliError::new(
                        Exit::Lost,
                        format!(
                            "the round of instant {instant} (term {token}) was cut short before \
                             CMD ran; it runs again once, on the next pass of any host"
                        ),
                    ))),
                };
                if *skipped > 0 {
                    tracing::info!(job = %d.job, %instant, instant_ms = d.instant_ms, skipped, "the round overran later instants; they are skipped");
                }
                if verdict.is_none() {
                    verdict = failed;
                }
            }
            DueOutcome::Taken { .. } => {
                if tracing::enabled!(tracing::Level::INFO) {
                    let holder = store
                        .get(&d.job)
                        .await
                        .ok()
                        .flatten()
                        .map_or_else(|| "-".to_owned(), |info| info.instance);
                    tracing::info!(job = %d.job, %instant, host = %scheduler.instance(), last_holder = %holder, "cron record: taken (another host ran it or runs it)");
                }
            }
            DueOutcome::Busy => {
                tracing::info!(job = %d.job, %instant, host = %scheduler.instance(), "cron record: busy (the round of an earlier instant holds the job; it is left to that round or a later pass)");
            }
            _ => {}
        }
    }
    verdict
}

/// The job's name in the store: NAME. (With the test feature `break-cron-claim-for-tests`, a
/// name of this process's own, so its claims never meet the other hosts'.)
fn job_name(name: &str) -> String {
    if cfg!(feature = "break-cron-claim-for-tests") {
        format!("{name}-{}", std::process::id())
    } else {
        name.to_owned()
    }
}

/// The schedule of `--schedule`/`--tz` or `--every`.
fn schedule(args: &CronArgs) -> Result<Schedule, CliError> {
    if args.tz.is_some() && args.schedule.is_none() {
        return Err(CliError::new(
            Exit::Usage,
            "--tz applies to --schedule only: the instants of --every are multiples of it since \
             the Unix epoch, in no time zone; drop --tz, or give --schedule",
        ));
    }
    if let Some(expr) = &args.schedule {
        let tz = match &args.tz {
            None => Tz::UTC,
            Some(zone) => zone.trim().parse::<Tz>().map_err(|_| {
                CliError::new(
                    Exit::Usage,
                    format!(
                        "--tz '{zone}' is not a known time zone; give an IANA name such as \
                         Europe/Berlin, America/New_York or UTC"
                    ),
                )
            })?,
        };
        return Schedule::cron(expr, tz).map_err(|e| {
            CliError::new(
                Exit::Usage,
                format!(
                    "--schedule: {e}; write 5 fields (minute hour day-of-month month \
                     day-of-week, e.g. '0 3 * * *'), 6 with seconds first, or @hourly, @daily"
                ),
            )
        });
    }
    let Some(every) = &args.every else {
        return Err(CliError::new(
            Exit::Usage,
            "give --schedule EXPR or --every DURATION",
        ));
    };
    let period = positive("--every", every)?;
    Schedule::every(period)
        .map_err(|e| CliError::new(Exit::BadDuration, format!("--every {every}: {e}")))
}

/// A positive duration given to `flag`.
fn positive(flag: &str, text: &str) -> Result<Duration, CliError> {
    parse_duration(text).map_err(|_| {
        CliError::new(
            Exit::BadDuration,
            format!(
                "{flag} '{text}' is not a positive duration; write e.g. 2s, 500ms, 5m, 1h or \
                 24h"
            ),
        )
    })
}

/// One round: CMD under the round's term, with the instant in its environment; logs its
/// record. `Ok` when CMD exited 0; an error otherwise (the round failed, or, once its term has
/// ended, was cut short and runs again once).
async fn round_work(ctx: Arc<Ctx>, round: Round) -> Result<(), String> {
    let term = round.term().clone();
    let token = term.token();
    let instant = Schedule::format(round.instant_ms());
    let end = run_cmd(&ctx, &round).await;
    ctx.ends
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(token, end.clone());
    let (job, host, rerun) = (round.job(), term.instance(), round.is_rerun());
    match end {
        CmdEnd::Exited(0) => {
            tracing::info!(%job, %instant, %host, term = token, rerun, exit = 0, "cron record: ran here");
            Ok(())
        }
        CmdEnd::Exited(code) => {
            // The scheduler warns of the failed round (shown by default).
            tracing::info!(%job, %instant, %host, term = token, rerun, exit = code, "cron record: ran here");
            Err(format!("CMD exited with code {code}"))
        }
        CmdEnd::Lost(why) => {
            tracing::info!(%job, %instant, %host, term = token, rerun, "cron record: cut short ({why})");
            Err(why)
        }
        CmdEnd::NotRun(e) => {
            tracing::info!(%job, %instant, %host, term = token, rerun, "cron record: CMD not run ({e})");
            Err(e.to_string())
        }
    }
}

/// Runs CMD for `round` under its term through this process's watchdog (started at the first
/// round, started again if it died).
async fn run_cmd(ctx: &Ctx, round: &Round) -> CmdEnd {
    let term = round.term();
    let mut slot = ctx.watchdog.lock().await;
    if slot.is_none() {
        match Watchdog::spawn(&ctx.cmd).await {
            Ok(w) => *slot = Some(w),
            Err(e) => return CmdEnd::NotRun(e),
        }
    }
    let Some(watchdog) = slot.as_mut() else {
        return CmdEnd::NotRun(CliError::new(Exit::CannotStart, "no watchdog"));
    };
    let mut signals = match StopSignals::install() {
        Ok(s) => s,
        Err(e) => return CmdEnd::NotRun(e),
    };
    let env = vec![
        ("LEASE_INSTANT", Schedule::format(round.instant_ms())),
        ("LEASE_INSTANT_MS", round.instant_ms().to_string()),
        (
            "LEASE_RERUN",
            if round.is_rerun() { "1" } else { "0" }.to_owned(),
        ),
    ];
    match supervise_with(term, env, watchdog, &mut signals).await {
        Ok(Outcome::Exited {
            status,
            interrupted,
            ..
        }) => {
            let code = exit_code(status);
            if code != 0 && interrupted.is_some() {
                // Stopped by the signal that also shuts the scheduler down: let the term end
                // first, so the round counts as cut short (it runs again once elsewhere).
                let _ = tokio::time::timeout(term.timings().grace(), round.done()).await;
            }
            CmdEnd::Exited(code)
        }
        Ok(Outcome::Lost { error, .. }) => CmdEnd::Lost(error.to_string()),
        Err(e) => {
            // The watchdog died: start a new one for the next round.
            *slot = None;
            CmdEnd::NotRun(e)
        }
    }
}
