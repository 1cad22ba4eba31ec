//! `lease elect NAME -- CMD…`: a leader-only daemon.

use std::time::Duration;

use crate::campaign::{Campaign, acquire};
use crate::child::{CmdLine, Watchdog, describe, exit_code};
use crate::cli::ElectArgs;
use crate::commands::{interrupted, prepare};
use crate::duration::human;
use crate::exit::{CliError, Exit};
use crate::redact::eprintln_scrubbed;
use crate::store_url::StoreUrl;
use crate::supervise::{Outcome, supervise};

/// The longest pause after CMD failures in a row; a run this long also resets the count.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The extra pause before campaigning again after `failures` failures of CMD in a row:
/// the campaign retry doubled per failure, at most [`MAX_BACKOFF`].
pub(crate) fn backoff(retry: Duration, failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32 << failures.min(16);
    retry.saturating_mul(factor).min(MAX_BACKOFF)
}

/// Runs the `elect` subcommand. It ends only on a stop signal (`Ok` with CMD's exit code when
/// CMD was running, [`Exit::Interrupted`] otherwise) or on an error no retry can fix.
pub(crate) async fn elect(url: &StoreUrl, args: ElectArgs) -> Result<u8, CliError> {
    let cmd = CmdLine::new(args.cmd)?;
    let name = args.name;
    // `--quiet` leaves out the lines on the way; errors are still printed.
    let say = |line: &str| {
        if !args.quiet {
            eprintln_scrubbed(line);
        }
    };
    let mut holding = prepare(url, &name, &args.hold).await?;
    let mut watchdog = Watchdog::spawn(&cmd).await?;
    let retry = holding.coordinator.timings().retry();
    let mut failures = 0u32;
    loop {
        let term = match acquire(
            &holding.coordinator,
            &name.as_str().into(),
            true,
            &mut holding.signals,
        )
        .await?
        {
            Campaign::Won(term) => term,
            Campaign::Interrupted(sig) => {
                return Err(interrupted(sig, &format!("while campaigning for '{name}'")));
            }
        };
        say(&format!(
            "lease: leader for '{name}' (term {}); starting CMD",
            term.token()
        ));
        let outcome = supervise(&term, &mut watchdog, &mut holding.signals).await;
        if let Err(e) = term.resign().await
            && !term.is_lost()
        {
            tracing::warn!(error = %e, "release failed; the lease expires by its TTL");
        }
        let pause = match outcome? {
            Outcome::Exited {
                status,
                interrupted: Some(_),
                ..
            } => return Ok(exit_code(status)),
            Outcome::Lost {
                error,
                interrupted: Some(_),
            } => {
                return Err(CliError::new(
                    Exit::Lost,
                    format!("{error}; CMD was stopped"),
                ));
            }
            Outcome::Exited {
                status, ran_for, ..
            } => {
                if status.success() || ran_for >= MAX_BACKOFF {
                    failures = u32::from(!status.success());
                } else {
                    failures = failures.saturating_add(1);
                }
                let extra = backoff(retry, failures);
                let why = if failures == 0 {
                    String::new()
                } else {
                    format!(
                        "; {failures} failure(s) in a row, backing off {}",
                        human(extra)
                    )
                };
                say(&format!(
                    "lease: CMD exited with {} after {}; released '{name}'{why}",
                    describe(status),
                    human(ran_for)
                ));
                extra
            }
            Outcome::Lost { error, .. } => {
                eprintln_scrubbed(&format!(
                    "lease: {error}; CMD was stopped; campaigning again"
                ));
                Duration::ZERO
            }
        };
        // Never campaign again at once: others get their turn (lease-core's pacing).
        let pause = holding.coordinator.timings().retry_delay() + pause;
        tokio::select! {
            sig = holding.signals.recv() => {
                return Err(interrupted(sig, &format!("while waiting to campaign for '{name}'")));
            }
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let r = Duration::from_secs(2);
        assert_eq!(backoff(r, 0), Duration::ZERO);
        assert_eq!(backoff(r, 1), Duration::from_secs(4));
        assert_eq!(backoff(r, 2), Duration::from_secs(8));
        assert_eq!(backoff(r, 10), MAX_BACKOFF);
        assert_eq!(backoff(r, u32::MAX), MAX_BACKOFF);
    }
}
