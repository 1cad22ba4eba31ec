//! The suite against stores whose clocks are coarse or wrong: deliberately broken stores (leases
//! that end earlier than the store's declared clock granularity allows, a non-holder's renewal
//! that extends the lease, capability flags that claim what the store does not do) fail the
//! case that checks it, every run; a correct store whose clock ticks in whole seconds, and says
//! so (`clock_granularity: 1 s`), passes the whole suite.
//!
//! Each store here is lease-local's memory store behind a wrapper that shortens the TTL it
//! passes on (so the lease really ends early, by the inner store's clock) and reports what the
//! wrapped store's clock would report.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lease_conformance::{Harness, cases, panic_of};
use lease_core::backend::{Capabilities, Grant, HolderToken, LeaseInfo, async_trait, check};
use lease_core::{LeaseStore, Result, Timings};
use lease_local::MemoryStore;
use tokio::time::Instant;

/// The clock a wrapped store judges expiry by.
#[derive(Debug, Clone, Copy)]
enum Clock {
    /// Exact, but every lease ends `early` before its TTL.
    Exact { early: Duration },
    /// Ticks in whole seconds, as memcached's does: a lease of `ttl` ends at the tick
    /// `ceil(ttl)` seconds after the tick of the request (up to 1 s early), less `early`.
    WholeSeconds { early: Duration },
}

/// The phase of the whole-second clock: the first time it is read.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

#[derive(Debug)]
struct Wrapped {
    inner: MemoryStore,
    clock: Clock,
    /// What the store declares.
    granularity: Duration,
    /// A renewal by a non-holder extends the holder's lease (and answers `None`).
    non_holder_extends: bool,
    /// Capabilities as a careless implementer wrote them: `permits` and `watch` claimed,
    /// neither implemented.
    claims_too_much: bool,
    holders: Mutex<HashMap<String, HolderToken>>,
}

impl Wrapped {
    fn new(clock: Clock, granularity: Duration) -> Wrapped {
        Wrapped {
            inner: MemoryStore::new(),
            clock,
            granularity,
            non_holder_extends: false,
            claims_too_much: false,
            holders: Mutex::default(),
        }
    }

    /// The TTL the inner store gets, so the lease ends when this store's clock says.
    fn effective(&self, ttl: Duration) -> Duration {
        let end = match self.clock {
            Clock::Exact { early } => ttl.saturating_sub(early),
            Clock::WholeSeconds { early } => {
                let now = Instant::now();
                let tick = (now - epoch()).as_secs();
                let expiry = epoch() + Duration::from_secs(tick + ttl.as_secs_f64().ceil() as u64);
                (expiry - now).saturating_sub(early)
            }
        };
        // Whole milliseconds, rounded up; at least the shortest TTL the inner store takes.
        Duration::from_millis(end.as_nanos().div_ceil(1_000_000) as u64)
            .max(lease_core::backend::MIN_TTL)
    }

    /// The time left this store's clock reports: whole seconds, rounded down, on the
    /// whole-second clock; the full TTL less what passed on the early exact clock (a lie that
    /// hides the early end).
    fn report(&self, left: Duration, live: bool) -> Duration {
        if !live {
            return Duration::ZERO;
        }
        match self.clock {
            Clock::Exact { early } => left + early,
            Clock::WholeSeconds { .. } => Duration::from_secs(left.as_secs()),
        }
    }

    fn grant(&self, g: Option<Grant>) -> Option<Grant> {
        g.map(|g| Grant {
            term: g.term,
            expires_in: self.report(g.expires_in, true),
        })
    }
}

#[async_trait]
impl LeaseStore for Wrapped {
    fn backend(&self) -> &'static str {
        match self.clock {
            Clock::Exact { .. } => "early-memory",
            Clock::WholeSeconds { .. } => "whole-second-memory",
        }
    }

    fn capabilities(&self) -> Capabilities {
        let caps = Capabilities {
            consecutive_terms: true,
            keeps_ended_records: true,
            clock_granularity: self.granularity,
            ..lease_core::backend::derived_capabilities(self)
        };
        if self.claims_too_much {
            // Copied from the inner store: claims permits and hints this wrapper lacks.
            Capabilities {
                clock_granularity: self.granularity,
                ..self.inner.capabilities()
            }
        } else {
            caps
        }
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::claim(self, name, instance, ttl)?;
        let g = self
            .inner
            .claim(name, holder, instance, self.effective(ttl))
            .await?;
        if g.is_some() {
            let mut holders = self.holders.lock().unwrap();
            holders.insert(name.to_owned(), holder.clone());
        }
        Ok(self.grant(g))
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::renew(self, name, ttl)?;
        let effective = self.effective(ttl);
        if self.non_holder_extends {
            let real = self.holders.lock().unwrap().get(name).cloned();
            if let Some(real) = real.filter(|r| r != holder) {
                self.inner.renew(name, &real, effective).await?;
                return Ok(None);
            }
        }
        let g = self.inner.renew(name, holder, effective).await?;
        Ok(self.grant(g))
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.inner.release(name, holder).await
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        let g = self.inner.verify(name, holder).await?;
        Ok(self.grant(g))
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        let info = self.inner.get(name).await?;
        Ok(info.map(|i| LeaseInfo {
            expires_in: self.report(i.expires_in, i.live),
            ..i
        }))
    }
}

/// A harness over `store`, with the TTL and timings a whole-second clock needs: a 3 s lease
/// for the store-level cases (probed "not before" up to 2 s), and coordinator timings that
/// keep back a 1 s clock step (`deadline + grace + 1 s ≤ lease − 1 %`).
fn harness(store: Wrapped) -> Harness {
    let coarse = store.granularity >= Duration::from_secs(1);
    let h = Harness::new(Arc::new(store));
    if !coarse {
        return h;
    }
    let timings = Timings::builder()
        .lease(Duration::from_secs(4))
        .renew_every(Duration::from_millis(500))
        .deadline(Duration::from_secs(2))
        .attempt_timeout(Duration::from_millis(800))
        .grace(Duration::from_millis(500))
        .retry(Duration::from_millis(300))
        .jitter(Duration::from_millis(50))
        .build()
        .expect("timings for a whole-second store");
    h.with_ttl(Duration::from_secs(3))
        .with_timings(timings)
        // Lateness: a whole-second clock may end a lease up to a second past its TTL when the
        // TTL is not whole, and the tick is read late by the test's measurement.
        .with_slack(Duration::from_millis(1100))
}

/// A correct store whose clock ticks in whole seconds, declaring it: the whole suite.
mod whole_second {
    use super::*;

    async fn setup() -> Option<Harness> {
        Some(harness(Wrapped::new(
            Clock::WholeSeconds {
                early: Duration::ZERO,
            },
            Duration::from_secs(1),
        )))
    }

    lease_conformance::conformance_suite!(setup);
}

/// Runs the "not before" case `runs` times over a fresh store from `make`, and returns the
/// panic message of each run (empty when the run passed).
async fn not_before_runs(runs: usize, make: impl Fn() -> Wrapped) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..runs {
        let h = harness(make());
        out.push(
            panic_of(async move {
                cases::unrenewed_lease_is_claimable_after_ttl_and_not_before(&h).await
            })
            .await,
        );
    }
    out
}

fn assert_every_run_fails(what: &str, panics: &[String]) {
    for (i, p) in panics.iter().enumerate() {
        assert!(
            p.contains("the lease ended early"),
            "{what}: run {i} was not caught: {p:?}"
        );
    }
}

/// A store whose leases end 1 s early while it declares the default 1 ms clock: caught every
/// run (it passed 53 of 53 cases when "not before" was probed only up to `ttl − slack`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_whose_leases_end_a_second_early_fails_every_run() {
    let panics = not_before_runs(5, || {
        Wrapped::new(
            Clock::Exact {
                early: Duration::from_secs(1),
            },
            Duration::from_millis(1),
        )
    })
    .await;
    assert_every_run_fails("1 s early, 1 ms declared", &panics);
}

/// A store whose leases end 150 ms early (of 600 ms) while it declares 1 ms: caught every run.
/// (At 60 ms early the probes, which come closer together down to every 5 ms, caught 24 of 25
/// runs with both cores busy: a probe's sleep overshot the whole 59 ms window once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_whose_leases_end_150_ms_early_fails_every_run() {
    let panics = not_before_runs(5, || {
        Wrapped::new(
            Clock::Exact {
                early: Duration::from_millis(150),
            },
            Duration::from_millis(1),
        )
    })
    .await;
    assert_every_run_fails("150 ms early, 1 ms declared", &panics);
}

/// A whole-second store that declares 1 s but ends leases 1.5 s early (beyond its clock
/// step): caught every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_second_store_a_step_and_a_half_early_fails_every_run() {
    let panics = not_before_runs(5, || {
        Wrapped::new(
            Clock::WholeSeconds {
                early: Duration::from_millis(1500),
            },
            Duration::from_secs(1),
        )
    })
    .await;
    assert_every_run_fails("whole seconds, 1.5 s early, 1 s declared", &panics);
}

/// The same correct whole-second store that the `whole_second` suite runs passes the "not
/// before" case 5 runs in a row (so the broken stores above fail for being early, not for
/// being coarse).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_whole_second_store_passes_every_run() {
    let panics = not_before_runs(5, || {
        Wrapped::new(
            Clock::WholeSeconds {
                early: Duration::ZERO,
            },
            Duration::from_secs(1),
        )
    })
    .await;
    assert!(panics.iter().all(String::is_empty), "{panics:?}");
}

/// A non-holder's renewal that extends the holder's lease is caught, on an exact clock and on
/// a whole-second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_holders_renewal_that_extends_the_lease_fails() {
    for (clock, granularity) in [
        (
            Clock::Exact {
                early: Duration::ZERO,
            },
            Duration::from_millis(1),
        ),
        (
            Clock::WholeSeconds {
                early: Duration::ZERO,
            },
            Duration::from_secs(1),
        ),
    ] {
        let mut store = Wrapped::new(clock, granularity);
        store.non_holder_extends = true;
        let h = harness(store);
        let p =
            panic_of(
                async move { cases::renew_by_a_non_holder_fails_and_changes_nothing(&h).await },
            )
            .await;
        assert!(
            p.contains("a non-holder's renewal extended the lease"),
            "{clock:?}: {p:?}"
        );
    }
}

/// A store whose capabilities claim counted leases and hints it does not implement gets a
/// failure that names the flag and the accessor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_that_claim_too_much_are_named() {
    let mut store = Wrapped::new(
        Clock::Exact {
            early: Duration::ZERO,
        },
        Duration::from_millis(1),
    );
    store.claims_too_much = true;
    let h = harness(store);
    let p = panic_of({
        let h = h.clone();
        async move { cases::capabilities_agree_with_what_the_store_does(&h).await }
    })
    .await;
    assert!(
        p.contains("capabilities().permits is true but permit_store() answers None"),
        "{p:?}"
    );
    let p = panic_of({
        let h = h.clone();
        async move { cases::permit_claims_take_the_lowest_free_permit_up_to_n(&h).await }
    })
    .await;
    assert!(
        p.contains("capabilities().permits is true but permit_store() answers None"),
        "{p:?}"
    );
    let p = panic_of(async move { cases::a_release_wakes_a_waiter_at_once(&h).await }).await;
    assert!(
        p.contains("capabilities().watch is true but changes() answers None"),
        "{p:?}"
    );
}
