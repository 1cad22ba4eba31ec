//! Running CMD under a term: until it exits, or the lease is lost, forwarding stop signals.

use std::process::ExitStatus;
use std::time::Duration;

use lease_core::Term;
use rustix::process::Signal;
use tokio::time::{Instant, timeout};

use crate::child::{CmdLine, Running, Watchdog, end_group, group_alive, kill_group, signal_group};
use crate::exit::{CliError, Exit};
use crate::signals::StopSignals;

/// How CMD's run under a term ended. CMD's whole process group is gone in every case.
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
    /// The lease was lost; CMD was stopped (SIGTERM, then SIGKILL after the grace).
    Lost {
        /// Why the lease was lost.
        error: lease_core::Error,
        /// The last stop signal forwarded to CMD, if any.
        interrupted: Option<Signal>,
    },
}

/// Runs `cmd` while `term` lives, with LEASE_NAME, LEASE_TERM and LEASE_INSTANCE set.
///
/// Stop signals received meanwhile are forwarded to CMD's group. When CMD exits, what remains
/// of its group gets SIGTERM and, after the grace, SIGKILL. When the lease is lost, the group
/// gets SIGTERM and, once the grace has passed since the loss, SIGKILL. Returns only when the
/// group is gone (or survived SIGKILL, which is reported). The caller resigns the term.
pub(crate) async fn supervise(
    term: &Term,
    cmd: &CmdLine,
    watchdog: &mut Watchdog,
    signals: &mut StopSignals,
) -> Result<Outcome, CliError> {
    let env = [
        ("LEASE_NAME", term.name().to_owned()),
        ("LEASE_TERM", term.token().to_string()),
        ("LEASE_INSTANCE", term.instance().to_owned()),
    ];
    let grace = term.timings().grace();
    let mut running = Running::start(cmd, &env)?;
    let pgid = running.pgid();
    if let Err(e) = watchdog.arm(pgid).await {
        kill_group(pgid).await;
        let _ = running.wait().await;
        return Err(CliError::new(
            Exit::CannotStart,
            format!("cannot hand CMD to lease's watchdog ({e}); CMD was stopped"),
        ));
    }
    let started = Instant::now();
    let mut interrupted = None;
    let outcome = loop {
        tokio::select! {
            biased;
            status = running.wait() => {
                let status = status.map_err(|e| CliError::new(
                    Exit::CannotStart,
                    format!("cannot wait for CMD: {e}"),
                ))?;
                let ran_for = started.elapsed();
                end_group(pgid, grace).await;
                break Outcome::Exited { status, interrupted, ran_for };
            }
            _ = term.lost() => {
                let stop_by = Instant::now() + grace;
                let _ = signal_group(pgid, Signal::TERM);
                if timeout(grace, running.wait()).await.is_ok() {
                    end_group(pgid, stop_by.saturating_duration_since(Instant::now())).await;
                } else {
                    kill_group(pgid).await;
                    let _ = running.wait().await;
                }
                let error = term
                    .err()
                    .unwrap_or_else(|| lease_core::Error::lost(term.name(), "lost"));
                break Outcome::Lost { error, interrupted };
            }
            sig = signals.recv() => {
                let _ = signal_group(pgid, sig);
                interrupted = Some(sig);
            }
        }
    };
    if group_alive(pgid) {
        tracing::error!(pgid = ?pgid, "CMD's process group survived SIGKILL; the watchdog stays armed");
    } else if let Err(e) = watchdog.disarm().await {
        tracing::warn!(error = %e, "lease's watchdog is gone");
    }
    Ok(outcome)
}
