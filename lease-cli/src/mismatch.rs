//! Callers of one name that disagree on what it is: a plain lease here and a counted one there,
//! or counted with different permit counts.
//!
//! The store keeps a name's plain lease and its permits apart, so `lease run job` and
//! `lease run --permits 3 job` would both be granted at once; and permits past a caller's own
//! count are invisible to its claim, so `--permits 2` and `--permits 3` would let three run where
//! the first caller promised two. Neither is a store fault: the callers disagree. `lease`
//! refuses such a claim before CMD starts, with a message naming both sides.
//!
//! The check runs **after** the claim, against what the store says is live: the claim is made
//! first and then the other kind (or the permits past the count) is read, so of two mismatched
//! callers that claim at the same moment at least one sees the other (each wrote before it
//! read, and the store orders the four operations); both may see each other and both step back.
//! A refused claim is released at once. What it cannot see: a caller with a *larger* count
//! while every permit it holds is below this caller's count (their claims look the same as this
//! count's); the caller with the smaller count is refused once a permit past it is live.

use lease::{Coordinator, ErrorKind, Term, backend::LeaseStoreExt, coordinator::Target};

use crate::duration::human;
use crate::exit::{CliError, Exit};

/// What a live record of the other kind says about its caller.
fn plain_holder(name: &str, info: &lease::backend::LeaseInfo) -> String {
    format!(
        "'{name}' is held as a plain lease (without --permits) by {} (term {}, expires in {})",
        info.instance,
        info.term,
        human(info.expires_in)
    )
}

/// Refuses `term` (releasing it) when the store shows a live holder of `target`'s name that
/// disagrees with it on kind or count; `Ok(term)` otherwise. A store that cannot be read for
/// the check does not stop the claim (the check is about agreement between callers, not
/// exclusion, which the claim already holds): a warning says the check was skipped.
pub(crate) async fn agreed(
    coordinator: &Coordinator,
    target: &Target,
    term: Term,
) -> Result<Term, CliError> {
    match disagreement(coordinator, target, &term).await {
        Ok(None) => Ok(term),
        Ok(Some(why)) => {
            if let Err(e) = term.resign().await {
                tracing::warn!(error = %e, "release of a refused claim failed; it expires by its TTL");
            }
            Err(CliError::new(Exit::Usage, why))
        }
        Err(e) => {
            tracing::warn!(
                error = %e,
                "cannot read '{}' to check that its callers agree on --permits; going on",
                target.name()
            );
            Ok(term)
        }
    }
}

/// The message refusing `term`, or `None` when every live holder agrees with `target`.
async fn disagreement(
    coordinator: &Coordinator,
    target: &Target,
    term: &Term,
) -> lease::Result<Option<String>> {
    let store = coordinator.store();
    let name = target.name();
    match (target.permits(), term.permit()) {
        (Some(count), Some(mine)) => {
            if let Some(info) = store.get(name).await?.filter(|info| info.live) {
                return Ok(Some(format!(
                    "{}, while this caller took permit {mine} with --permits {count}; every \
                     caller of a name must use the same --permits (or none): permit {mine} was \
                     released and CMD was not started",
                    plain_holder(name, &info)
                )));
            }
            let permits = store.permits(name).await?;
            if let Some(beyond) = permits.iter().find(|p| p.live && p.permit >= count) {
                return Ok(Some(format!(
                    "permit {} of '{name}' is held by {} (term {}, expires in {}), so another \
                     caller uses --permits {} or more, while this caller gives --permits \
                     {count}; every caller of a name must use the same --permits: permit {mine} \
                     was released and CMD was not started",
                    beyond.permit,
                    beyond.instance,
                    beyond.term,
                    human(beyond.expires_in),
                    beyond.permit + 1
                )));
            }
            Ok(None)
        }
        _ => {
            if !store.capabilities().permits {
                return Ok(None);
            }
            let permits = match store.permits(name).await {
                Ok(permits) => permits,
                Err(e) if e.is(ErrorKind::Unsupported) => return Ok(None),
                Err(e) => return Err(e),
            };
            let live: Vec<String> = permits
                .iter()
                .filter(|p| p.live)
                .map(|p| format!("permit {} by {} (term {})", p.permit, p.instance, p.term))
                .collect();
            if live.is_empty() {
                return Ok(None);
            }
            Ok(Some(format!(
                "'{name}' is held as a counted lease (with --permits): {}, while this caller \
                 claimed it as a plain lease (term {}); every caller of a name must use the \
                 same --permits (or none): the lease was released and CMD was not started",
                live.join(", "),
                term.token()
            )))
        }
    }
}
