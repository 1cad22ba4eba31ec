//! The shared conformance suite on MongoDB: runs wherever `LEASE_TEST_MONGODB_URL` names a
//! server (4.2+), and prints `SKIPPED mongodb: …` otherwise (a failure when
//! `LEASE_TEST_REQUIRE` lists `mongodb`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use lease_conformance::Harness;

async fn setup() -> Option<Harness> {
    let (direct, proxied, proxy) = common::stores(false).await?;
    Some(
        Harness::new(Arc::new(direct.clone()))
            .with_faults(Arc::new(proxied.clone()), Arc::new(proxy))
            .with_slots(Arc::new(direct.clone()))
            // The proxied store goes through the fault path's TCP proxy, which counts the
            // round trips of a batch renewal.
            .with_groups(Arc::new(direct), Some(Arc::new(proxied))),
    )
}

lease_conformance::conformance_suite!(setup);
