//! The shared conformance suite on Redis: one store connected straight to the server and a
//! second one, for the fault cases, through a `FaultProxy` (through which the suite also counts
//! the round trips of a batch renewal of 1,000 partitions).
//!
//! Needs `LEASE_TEST_REDIS_URL` (e.g. `redis://127.0.0.1:6379`); without it every case prints
//! the SKIPPED line, or fails when `LEASE_TEST_REQUIRE` lists `redis`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use lease_conformance::Harness;
use lease_core::LeaseStore;

async fn setup() -> Option<Harness> {
    let url = common::url()?;
    let store = common::direct(&url, common::config()).await?;
    store
        .available()
        .await
        .expect("the test server carries leases");
    let (faulty, proxy) = common::proxied(&url, common::config()).await?;
    // The fault path's store listens like the direct one (so both report the same
    // capabilities), straight to the server: the proxy then counts only the store's requests.
    let faulty = faulty
        .with_listener(lease_redis::redis::Client::open(url.as_str()).expect("test URL parses"))
        .expect("in a runtime");
    Some(
        Harness::new(Arc::new(store.clone()))
            .with_slots(Arc::new(store.clone()))
            .with_groups(Arc::new(store), Some(Arc::new(faulty.clone())))
            .with_faults(Arc::new(faulty), Arc::new(proxy)),
    )
}

lease_conformance::conformance_suite!(setup);
