//! Getting a lease: once, or campaigning until it is free.

use std::time::Duration;

use lease::{Coordinator, ErrorKind, Term, backend::LeaseStoreExt, coordinator::Target};
use rustix::process::Signal;

use crate::duration::human;
use crate::exit::{CliError, Exit};
use crate::mismatch::agreed;
use crate::signals::StopSignals;

/// How a campaign ended.
#[derive(Debug)]
pub(crate) enum Campaign {
    /// The lease is ours.
    Won(Term),
    /// A stop signal arrived first; nothing is held.
    Interrupted(Signal),
}

/// How often, at most, a `--wait` campaign warns that the store keeps failing.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Claims `target` (a name, or one permit of a counted name). Without `wait`, someone else
/// holding it (every permit of it) is an [`Exit::Held`] error. With
/// `wait`, it waits with `Coordinator::acquire` until it wins: woken by the store's hint of a
/// release (within milliseconds on stores that send hints), at the holder's expiry by the
/// store's clock, or at the campaign retry plus jitter where hints may be missing; a store
/// that is briefly unreachable is ridden out. A stop signal ends the campaign at once: a claim
/// in flight is finished on its own task and released if it won (the coordinator is closed,
/// which waits for it), so no claim is left behind unknown. A store that keeps failing is
/// warned about at most once a minute.
pub(crate) async fn acquire(
    coordinator: &Coordinator,
    target: &Target,
    wait: bool,
    signals: &mut StopSignals,
) -> Result<Campaign, CliError> {
    let limit = wait.then_some(Duration::MAX);
    acquire_within(coordinator, target, limit, signals).await
}

/// [`acquire`], waiting at most `limit` (`None`: not at all, `Duration::MAX`: until won). When
/// the limit passes with the name still held, the error is [`Exit::Held`], as without a wait;
/// when the store's last answer was a failure, it is that failure's.
pub(crate) async fn acquire_within(
    coordinator: &Coordinator,
    target: &Target,
    limit: Option<Duration>,
    signals: &mut StopSignals,
) -> Result<Campaign, CliError> {
    let name = target.name();
    let Some(limit) = limit else {
        let attempt = coordinator.try_acquire(target).await;
        if let Some(sig) = signals.pending().await {
            if let Ok(term) = attempt
                && let Err(e) = term.resign().await
            {
                tracing::warn!(error = %e, "release after an interrupted campaign failed");
            }
            return Ok(Campaign::Interrupted(sig));
        }
        return match attempt {
            Ok(term) => Ok(Campaign::Won(agreed(coordinator, target, term).await?)),
            Err(e) if e.is(ErrorKind::Held) => Err(held(coordinator, target).await),
            Err(e) => Err(CliError::from_lease(&e)),
        };
    };
    // One acquire for the whole wait: a new one would claim at once (and its predecessor once
    // more at its limit), so windows would cost claims; an idle waiter claims about once per
    // lease period (at the holder's expiry) or at a hint.
    let mut warned: Option<tokio::time::Instant> = None;
    let failed = |e: &lease::Error| {
        let now = tokio::time::Instant::now();
        if warned.is_none_or(|at| now.duration_since(at) >= WARN_EVERY) {
            tracing::warn!(error = %e, "cannot claim '{name}' for now; retrying");
            warned = Some(now);
        }
    };
    let attempt = tokio::select! {
        biased;
        attempt = coordinator.acquire_reporting(target, limit, failed) => attempt,
        sig = signals.recv() => {
            // The claim in flight, if any, finishes and is released; close waits for it.
            let _ = coordinator.close().await;
            return Ok(Campaign::Interrupted(sig));
        }
    };
    if let Some(sig) = signals.pending().await {
        if let Ok(term) = attempt
            && let Err(e) = term.resign().await
        {
            tracing::warn!(error = %e, "release after an interrupted campaign failed");
        }
        return Ok(Campaign::Interrupted(sig));
    }
    match attempt {
        Ok(term) => Ok(Campaign::Won(agreed(coordinator, target, term).await?)),
        // The limit passed behind a holder (a store that failed last is a failure's source).
        Err(e) if e.is(ErrorKind::Timeout) && std::error::Error::source(&e).is_none() => Err(
            CliError::new(Exit::Held, format!("{e}; CMD was not started")),
        ),
        Err(e) => Err(CliError::from_lease(&e)),
    }
}

/// The error for a name someone else holds, naming the holder when the store tells (for a
/// counted name: every permit's holder).
async fn held(coordinator: &Coordinator, target: &Target) -> CliError {
    let name = target.name();
    if let Some(n) = target.permits() {
        let holders = match coordinator.store().permits(name).await {
            Ok(permits) => {
                let live: Vec<String> = permits
                    .iter()
                    .filter(|p| p.live)
                    .map(|p| {
                        format!(
                            "{}: {} (term {}, expires in {})",
                            p.permit,
                            p.instance,
                            p.term,
                            human(p.expires_in)
                        )
                    })
                    .collect();
                let past = permits
                    .iter()
                    .filter(|p| p.live && p.permit >= n)
                    .map(|p| p.permit)
                    .max()
                    .map(|top| {
                        format!(
                            " (permit {top} is past --permits {n}: another caller gives \
                             --permits {} or more, and every caller must give the same)",
                            top + 1
                        )
                    })
                    .unwrap_or_default();
                format!(" by {}{past}", live.join(", "))
            }
            Err(_) => String::new(),
        };
        return CliError::new(
            Exit::Held,
            format!(
                "all {n} permits of lease '{name}' are held{holders}; CMD was not started; add \
                 --wait to wait for one"
            ),
        );
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use lease::Timings;
    use lease_conformance::faulty;
    use lease_local::MemoryStore;

    use super::*;

    /// An idle `--wait` contender behind a live holder costs about one claim per lease
    /// period: it wakes at the holder's expiry by the store's clock (or a hint), nothing else.
    #[tokio::test(start_paused = true)]
    async fn an_idle_wait_asks_about_once_per_lease_period() {
        const LEASE: Duration = Duration::from_secs(30);
        const WAITED: Duration = Duration::from_secs(300);
        let store = faulty(MemoryStore::new());
        let faults = store.hook().clone();
        let timings = Timings::from_lease(LEASE).unwrap();
        let a = Coordinator::builder(store.clone())
            .instance("a")
            .timings(timings)
            .build()
            .unwrap();
        let b = Coordinator::builder(store)
            .instance("b")
            .timings(timings)
            .build()
            .unwrap();
        let held = a.try_acquire("job").await.unwrap();
        let before = faults.counts();
        let waiting = tokio::spawn(async move {
            let mut signals = StopSignals::install().unwrap();
            acquire(&b, &"job".into(), true, &mut signals).await
        });
        tokio::time::sleep(WAITED).await;
        let spent = faults.counts();
        let claims = spent.claims - before.claims;
        let gets = spent.gets - before.gets;
        let periods = WAITED.as_secs() / LEASE.as_secs();
        println!("an idle --wait over {periods} lease periods: {claims} claims, {gets} gets");
        // One claim, then a read at each expiry it last read (a renewed holder is not claimed:
        // see lease-core's waiter): at most 1.5 asks a lease period behind a holder that renews
        // every third of a lease, and at least one (it follows the holder's expiry).
        assert!(
            claims <= 2,
            "{claims} claims: the idle waiter claimed a name it read as held"
        );
        assert!(
            gets + 1 >= periods,
            "{gets} reads in {periods} lease periods: the waiter stopped following the expiry"
        );
        assert!(
            (claims + gets) * 2 <= periods * 3 + 4,
            "{claims} claims and {gets} reads in {periods} lease periods of an idle wait"
        );
        held.resign().await.unwrap();
        let Campaign::Won(term) = waiting.await.unwrap().unwrap() else {
            panic!("interrupted")
        };
        assert!(term.token() > held.token());
    }
}
