//! The conformance suite against a real memcached: the `LeaseStore` suite and the
//! `PollingStore` suite, with the TTLs and timings a whole-second clock needs. The server comes
//! from `LEASE_TEST_MEMCACHED_URL` (e.g. `memcached://127.0.0.1:11211`, which `ci/start-services.sh`
//! starts with `-M`); without it every case skips loudly, and fails when `LEASE_TEST_REQUIRE`
//! lists `memcached`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use lease_conformance::polling::PollingHarness;
use lease_conformance::{Harness, env};
use lease_core::{LeaseStore, Timings};
use lease_example_memcached::{CLOCK_GRANULARITY, MemcachedStore};

/// The store at `LEASE_TEST_MEMCACHED_URL`, checked; `None` after a loud skip.
async fn store() -> Option<MemcachedStore> {
    let url = env::server_url("memcached")?;
    let store = match MemcachedStore::new(&url) {
        Ok(store) => store,
        Err(e) => {
            env::skip("memcached", &format!("{url}: {e}"));
            return None;
        }
    };
    if let Err(e) = store.available().await {
        env::skip(
            "memcached",
            &format!("the server at {url} cannot carry leases: {e}"),
        );
        return None;
    }
    Some(store)
}

/// The `LeaseStore` suite: a 3 s store-level TTL (probed "not before" up to 2 s, taken within
/// 2.5 s of slack after it: an item stored for `ceil(ttl) + 1` seconds ends up to a second past
/// the TTL, plus the test's own lag); coordinator timings that keep back the 1 s clock step.
mod lease_store {
    use super::*;

    async fn setup() -> Option<Harness> {
        let store = store().await?;
        let timings = Timings::builder()
            .lease(Duration::from_secs(6))
            .renew_every(Duration::from_millis(500))
            .deadline(Duration::from_secs(3))
            .attempt_timeout(Duration::from_millis(1200))
            .grace(Duration::from_millis(800))
            .retry(Duration::from_millis(300))
            .jitter(Duration::from_millis(50))
            .build()
            .expect("timings for a whole-second store");
        timings
            .check_clock_granularity(CLOCK_GRANULARITY)
            .expect("the timings keep back memcached's clock step");
        Some(
            Harness::new(Arc::new(store))
                .with_ttl(Duration::from_secs(3))
                .with_timings(timings)
                .with_slack(Duration::from_millis(2500)),
        )
    }

    lease_conformance::conformance_suite!(setup);
}

/// The `PollingStore` suite, with the same clock and a 4 s TTL.
mod polling_store {
    use super::*;

    async fn setup() -> Option<PollingHarness> {
        let store = store().await?;
        Some(
            PollingHarness::new(Arc::new(store))
                .with_backend("memcached")
                // A polling leaser gives a lease up two thirds of a TTL after confirming it:
                // that must come before the store may free it, a second short of the TTL.
                .with_ttl(Duration::from_secs(4))
                .with_slack(Duration::from_millis(2500))
                .with_clock_granularity(CLOCK_GRANULARITY),
        )
    }

    lease_conformance::polling_suite!(setup);
}
