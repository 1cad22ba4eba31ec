//! Getting a lease: once, or campaigning until it is free.

use lease_core::{Coordinator, ErrorKind, Term};
use rustix::process::Signal;

use crate::duration::human;
use crate::exit::{CliError, Exit};
use crate::signals::StopSignals;

/// How a campaign ended.
#[derive(Debug)]
pub(crate) enum Campaign {
    /// The lease is ours.
    Won(Term),
    /// A stop signal arrived first; nothing is held.
    Interrupted(Signal),
}

/// Claims `name`. Without `wait`, someone else holding it is an [`Exit::Held`] error. With
/// `wait`, it tries again every campaign retry plus jitter (lease-core's pacing) until it wins,
/// riding out a store that is briefly unreachable. A stop signal ends the campaign between
/// attempts (an attempt in flight is never abandoned, so no claim is left behind unknown).
pub(crate) async fn acquire(
    coordinator: &Coordinator,
    name: &str,
    wait: bool,
    signals: &mut StopSignals,
) -> Result<Campaign, CliError> {
    let mut failing = false;
    loop {
        let attempt = coordinator.try_acquire(name).await;
        if let Some(sig) = signals.pending().await {
            if let Ok(term) = attempt
                && let Err(e) = term.resign().await
            {
                tracing::warn!(error = %e, "release after an interrupted campaign failed");
            }
            return Ok(Campaign::Interrupted(sig));
        }
        match attempt {
            Ok(term) => return Ok(Campaign::Won(term)),
            Err(e) if e.is(ErrorKind::Held) => {
                if !wait {
                    return Err(held(coordinator, name).await);
                }
                failing = false;
            }
            Err(e) if wait && e.is_temporary() => {
                if !failing {
                    tracing::warn!(error = %e, "cannot claim '{name}' for now; retrying");
                }
                failing = true;
            }
            Err(e) => return Err(CliError::from_lease(&e)),
        }
        tokio::select! {
            sig = signals.recv() => return Ok(Campaign::Interrupted(sig)),
            _ = tokio::time::sleep(coordinator.timings().retry_delay()) => {}
        }
    }
}

/// The error for a name someone else holds, naming the holder when the store tells.
async fn held(coordinator: &Coordinator, name: &str) -> CliError {
    let holder = match coordinator.observer().holder(name).await {
        Ok(Some(info)) => format!(
            " by {} (term {}, expires in {})",
            info.instance,
            info.term,
            human(info.expires_in)
        ),
        _ => String::new(),
    };
    CliError::new(
        Exit::Held,
        format!("lease '{name}' is held{holder}; CMD was not started; add --wait to wait for it"),
    )
}
