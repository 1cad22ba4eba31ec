//! `lease run NAME [--ttl D] [--wait | --wait-timeout D] [--conflict-exit N] [--quiet]
//! [--permits N] -- CMD…`: CMD only while NAME (or one of its N permits) is held.

use std::time::Duration;

use crate::campaign::{Campaign, acquire_within};
use crate::child::{CmdLine, Watchdog, exit_code};
use crate::cli::RunArgs;
use crate::commands::{interrupted, prepare, target};
use crate::duration::parse_duration;
use crate::exit::{CliError, Exit};
use crate::store_url::StoreUrl;
use crate::supervise::{Outcome, supervise};

/// Runs the `run` subcommand; `Ok` carries CMD's exit code.
pub(crate) async fn run(url: &StoreUrl, args: RunArgs) -> Result<u8, CliError> {
    let conflict = Conflict::from_args(&args)?;
    let cmd = CmdLine::new(args.cmd)?;
    let target = target(&args.name, args.permits.as_deref())?;
    let mut holding = prepare(url, &args.name, &args.hold).await?;
    if target.permits().is_some() && !holding.coordinator.store().capabilities().permits {
        return Err(CliError::new(
            Exit::StoreRefused,
            format!(
                "the {} store does not support counted leases (--permits); use a store that \
                 does, or run without --permits",
                holding.coordinator.store().backend()
            ),
        ));
    }
    let mut watchdog = Watchdog::spawn(&cmd).await?;
    let campaign = acquire_within(
        &holding.coordinator,
        &target,
        conflict.wait,
        &mut holding.signals,
    )
    .await;
    let term = match campaign.map_err(|e| conflict.apply(e))? {
        Campaign::Won(term) => term,
        Campaign::Interrupted(sig) => {
            return Err(interrupted(
                sig,
                &format!("while waiting for '{}'", args.name),
            ));
        }
    };
    let outcome = supervise(&term, &mut watchdog, &mut holding.signals).await;
    // CMD's group is gone (or the error says why not): the lease can go.
    if let Err(e) = term.resign().await
        && !term.is_lost()
    {
        tracing::warn!(error = %e, "release failed; the lease expires by its TTL");
    }
    match outcome? {
        Outcome::Exited { status, .. } => Ok(exit_code(status)),
        Outcome::Lost { error, .. } => Err(CliError::new(
            Exit::Lost,
            format!(
                "{error}; CMD '{}' (term {}) was stopped",
                cmd.program().to_string_lossy(),
                term.token()
            ),
        )),
    }
}

/// How `run` waits for NAME and ends when it does not get it: `--wait`, `--wait-timeout`,
/// `--conflict-exit` and `--quiet`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Conflict {
    /// How long to wait for NAME: `None` not at all, `Duration::MAX` until it is free.
    pub(crate) wait: Option<Duration>,
    /// The exit code when NAME stays held, instead of [`Exit::Held`]'s.
    pub(crate) code: Option<u8>,
    /// Print nothing when NAME stays held.
    pub(crate) quiet: bool,
}

impl Conflict {
    /// Checks the options: `--conflict-exit` takes 0 to 255 and needs an end to the wait (no
    /// `--wait`, or `--wait-timeout`); `--wait-timeout` takes a duration.
    pub(crate) fn from_args(args: &RunArgs) -> Result<Conflict, CliError> {
        let wait = match &args.wait_timeout {
            Some(text) => Some(parse_duration(text).map_err(|e| e.prefixed("--wait-timeout"))?),
            None => args.wait.then_some(Duration::MAX),
        };
        let code = match &args.conflict_exit {
            None => None,
            Some(text) => {
                let n: u8 = text.trim().parse().map_err(|_| {
                    CliError::new(
                        Exit::Usage,
                        format!(
                            "--conflict-exit {text}: not an exit code; give a whole number from \
                             0 to 255"
                        ),
                    )
                })?;
                if wait == Some(Duration::MAX) {
                    return Err(CliError::new(
                        Exit::Usage,
                        "--conflict-exit with --wait is never used: lease waits until NAME is \
                         free; give --wait-timeout D to bound the wait, or drop --wait",
                    ));
                }
                Some(n)
            }
        };
        Ok(Conflict {
            wait,
            code,
            quiet: args.quiet,
        })
    }

    /// A campaign's error as `run` ends with it: NAME held gets the chosen code and, with
    /// `--quiet`, no line.
    pub(crate) fn apply(&self, e: CliError) -> CliError {
        if e.exit() != Exit::Held {
            return e;
        }
        let e = e.quiet(self.quiet);
        match self.code {
            Some(code) => e.with_code(code),
            None => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::FromArgMatches;

    fn conflict(words: &[&str]) -> Result<Conflict, CliError> {
        let mut argv = vec!["lease", "run"];
        argv.extend_from_slice(words);
        argv.extend_from_slice(&["job", "--", "true"]);
        let m = crate::cli::command().try_get_matches_from(argv).unwrap();
        match Cli::from_arg_matches(&m).unwrap().command {
            Command::Run(args) => Conflict::from_args(&args),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options_are_checked() {
        let c = conflict(&[]).unwrap();
        assert_eq!((c.wait, c.code, c.quiet), (None, None, false));
        let c = conflict(&["--wait"]).unwrap();
        assert_eq!(c.wait, Some(Duration::MAX));
        let c = conflict(&["--wait-timeout", "2m", "--conflict-exit", "0", "-q"]).unwrap();
        assert_eq!(c.wait, Some(Duration::from_secs(120)));
        assert_eq!(c.code, Some(0));
        assert!(c.quiet);
        assert_eq!(
            conflict(&["--conflict-exit", "255"]).unwrap().code,
            Some(255)
        );
        for bad in ["256", "-1", "x", ""] {
            let e = conflict(&["--conflict-exit", bad]).unwrap_err();
            assert_eq!(e.exit(), Exit::Usage, "{bad}");
            assert!(e.message().contains("0 to 255"), "{}", e.message());
        }
        let e = conflict(&["--wait", "--conflict-exit", "3"]).unwrap_err();
        assert_eq!(e.exit(), Exit::Usage);
        assert!(e.message().contains("--wait-timeout"), "{}", e.message());
        let e = conflict(&["--wait-timeout", "soon"]).unwrap_err();
        assert_eq!(e.exit(), Exit::BadDuration);
        assert!(
            e.message().starts_with("--wait-timeout: "),
            "{}",
            e.message()
        );
    }

    #[test]
    fn only_a_conflict_takes_the_chosen_code() {
        let c = Conflict {
            wait: None,
            code: Some(0),
            quiet: true,
        };
        let held = c.apply(CliError::new(Exit::Held, "held"));
        assert_eq!(held.code(), 0);
        assert!(held.is_quiet());
        let other = c.apply(CliError::new(Exit::Unavailable, "down"));
        assert_eq!(other.code(), 69);
        assert!(!other.is_quiet());
    }
}
