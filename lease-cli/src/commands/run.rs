//! `lease run NAME [--ttl D] [--wait] [--permits N] -- CMD…`: CMD only while NAME (or one of
//! its N permits) is held.

use crate::campaign::{Campaign, acquire};
use crate::child::{CmdLine, Watchdog, exit_code};
use crate::cli::RunArgs;
use crate::commands::{interrupted, prepare, target};
use crate::exit::{CliError, Exit};
use crate::store_url::StoreUrl;
use crate::supervise::{Outcome, supervise};

/// Runs the `run` subcommand; `Ok` carries CMD's exit code.
pub(crate) async fn run(url: &StoreUrl, args: RunArgs) -> Result<u8, CliError> {
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
    let term = match acquire(
        &holding.coordinator,
        &target,
        args.wait,
        &mut holding.signals,
    )
    .await?
    {
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
