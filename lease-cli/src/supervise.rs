//! Running CMD under a term: until it exits, or the lease is lost, forwarding stop signals.

use std::process::ExitStatus;
use std::time::Duration;

use lease::Term;
use rustix::process::{Pid, Signal};
use tokio::time::{Instant, MissedTickBehavior};

use crate::child::{Report, Watchdog, boot_now, descendants, signal_group};
use crate::exit::{CliError, Exit};
use crate::signals::{Caught, StopSignals, stop_self};

/// How CMD's run under a term ended. CMD and every descendant of it are gone in every case.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// CMD exited on its own (perhaps after a forwarded signal); the lease is still held.
    Exited {
        /// CMD's status.
        status: ExitStatus,
        /// The last stop signal forwarded to CMD, if any.
        interrupted: Option<Signal>,
        /// How long CMD ran.
        ran_for: Duration,
    },
    /// The lease was lost, or its local deadline passed; CMD was stopped (SIGTERM, then
    /// SIGKILL after the grace).
    Lost {
        /// Why the lease was lost.
        error: lease::Error,
        /// The last stop signal forwarded to CMD, if any.
        interrupted: Option<Signal>,
    },
}

/// Why the watch over CMD ended.
enum Ended {
    Exited(ExitStatus, Duration),
    Lost,
    /// The watchdog ended CMD at the local deadline it was last told.
    Deadline,
}

/// The local deadline of `term` as a point on the boot clock, `None` for a lease that never
/// expires. Read the clock first: the point is never later than the term's own deadline.
fn local_deadline(term: &Term) -> Option<Duration> {
    let now = boot_now();
    let left = term.deadline_in();
    (left != Duration::MAX).then(|| now + left)
}

/// Runs CMD (through the watchdog) while `term` lives, with LEASE_NAME, LEASE_TERM and
/// LEASE_INSTANCE set, and LEASE_PERMIT for a permit of a counted name.
///
/// The watchdog is told the term's local deadline before CMD starts and after every renewal,
/// and ends CMD and every descendant at that deadline on its own, even when `lease` is
/// stopped or dead. Stop signals received meanwhile are forwarded to CMD's group. SIGTSTP
/// (Ctrl-Z) stops CMD and all its descendants, then `lease` itself; on SIGCONT they continue
/// only while the term is live, and otherwise go the way of a loss. When CMD exits, or the
/// lease is lost, CMD's group and every descendant get SIGTERM and, after the grace, SIGKILL.
/// Returns only when none of them is left; the caller then resigns the term.
pub(crate) async fn supervise(
    term: &Term,
    watchdog: &mut Watchdog,
    signals: &mut StopSignals,
) -> Result<Outcome, CliError> {
    supervise_with(term, Vec::new(), watchdog, signals).await
}

/// [`supervise`], with `extra` added to CMD's environment (`lease cron`'s LEASE_INSTANT).
pub(crate) async fn supervise_with(
    term: &Term,
    extra: Vec<(&'static str, String)>,
    watchdog: &mut Watchdog,
    signals: &mut StopSignals,
) -> Result<Outcome, CliError> {
    let mut env = vec![
        ("LEASE_NAME", term.name().to_owned()),
        ("LEASE_TERM", term.token().to_string()),
        ("LEASE_INSTANCE", term.instance().to_owned()),
    ];
    env.extend(extra);
    if let Some(permit) = term.permit() {
        env.push(("LEASE_PERMIT", permit.to_string()));
    }
    let mut told = local_deadline(term);
    let pgid = watchdog.start(&env, told, term.timings().grace()).await?;
    let started = Instant::now();
    let mut interrupted = None;
    // Twice per renewal: the watchdog's deadline trails the term's by at most that.
    let mut check = tokio::time::interval((term.timings().renew_every() / 2).max(ms(5)));
    check.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let ended = loop {
        tokio::select! {
            biased;
            report = watchdog.report() => match report {
                Some(Report::Exited(status)) => break Ended::Exited(status, started.elapsed()),
                Some(Report::Deadline) => break Ended::Deadline,
                Some(_) => {}
                None => return Err(watchdog_died(pgid).await),
            },
            _ = term.lost() => break Ended::Lost,
            caught = signals.recv_or_suspend() => match caught {
                Caught::Stop(sig) => {
                    // Through the watchdog, which then sends the group no second SIGTERM
                    // when it ends the term: a program that takes a second one as "exit
                    // now" would cut its cleanup short.
                    if watchdog.forward(sig).await.is_err() {
                        return Err(watchdog_died(pgid).await);
                    }
                    interrupted = Some(sig);
                }
                Caught::Suspend => {
                    // CMD first, so nothing of it runs while `lease` cannot renew.
                    if watchdog.stop().await.is_err() {
                        return Err(watchdog_died(pgid).await);
                    }
                    stop_self();
                    // Continued: only a live term may let CMD go on.
                    if !term.is_live() {
                        break Ended::Lost;
                    }
                    if watchdog.cont().await.is_err() {
                        return Err(watchdog_died(pgid).await);
                    }
                }
            },
            _ = check.tick() => {
                // The keeper may wake late after a freeze: the clock decides.
                if !term.is_live() {
                    break Ended::Lost;
                }
                if let Some(at) = local_deadline(term)
                    && told.is_none_or(|t| at > t + ms(1))
                {
                    if watchdog.deadline(at).await.is_err() {
                        return Err(watchdog_died(pgid).await);
                    }
                    told = Some(at);
                }
            }
        }
    };
    // CMD and every descendant end before anything else happens (the release above all).
    if watchdog.end().await.is_err() {
        return Err(watchdog_died(pgid).await);
    }
    let mut status = match ended {
        Ended::Exited(status, _) => Some(status),
        Ended::Lost | Ended::Deadline => None,
    };
    loop {
        match watchdog.report().await {
            Some(Report::Exited(s)) => status = status.or(Some(s)),
            Some(Report::Gone) => break,
            Some(_) => {}
            None => return Err(watchdog_died(pgid).await),
        }
    }
    Ok(match ended {
        Ended::Exited(status, ran_for) => Outcome::Exited {
            status,
            interrupted,
            ran_for,
        },
        Ended::Lost => Outcome::Lost {
            error: term
                .check()
                .err()
                .unwrap_or_else(|| lease::Error::lost(term.name(), "lost")),
            interrupted,
        },
        Ended::Deadline => Outcome::Lost {
            error: term.check().err().unwrap_or_else(|| {
                lease::Error::lost(
                    term.name(),
                    "CMD reached the local deadline lease had last confirmed \
                     (was lease stopped or starved?)",
                )
            }),
            interrupted,
        },
    })
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The watchdog died (it was killed: it never exits on its own while a term runs). CMD's
/// descendants were re-parented to `lease`, a child subreaper: kill them all, and CMD's group,
/// and return only once none is left (the caller releases the name next; a process SIGKILL
/// cannot end at once, say one in uninterruptible sleep, keeps the term held meanwhile).
async fn watchdog_died(pgid: Pid) -> CliError {
    let me = rustix::process::getpid();
    let mut warn_at = Instant::now() + Duration::from_secs(2);
    loop {
        let _ = signal_group(pgid, Signal::KILL);
        let left = descendants(me);
        for pid in &left {
            let _ = rustix::process::kill_process(*pid, Signal::KILL);
        }
        // Reap what was adopted (the watchdog was this process's only child of its own).
        while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::NOHANG) {}
        if left.is_empty() {
            break;
        }
        if Instant::now() >= warn_at {
            tracing::error!(left = ?left, "descendants of CMD survive SIGKILL; the lease stays held until they are gone");
            warn_at = Instant::now() + Duration::from_secs(5);
        }
        tokio::time::sleep(ms(10)).await;
    }
    CliError::new(
        Exit::CannotStart,
        "lease's watchdog process died; CMD and every descendant of it were killed",
    )
}
