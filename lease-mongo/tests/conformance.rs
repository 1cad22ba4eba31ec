//! The shared conformance suite on MongoDB: runs wherever `LEASE_TEST_MONGODB_URL` names a
//! server (4.2+), and prints `SKIPPED mongodb: …` otherwise (a failure when
//! `LEASE_TEST_REQUIRE` lists `mongodb`).
//!
//! On the mongoeco wire emulator CI runs (ci/mongo-emulator/; one Python thread), the cases
//! run one at a time, and the cases it is too slow for print one
//! `NOT RUN mongodb <case>: <why>` line each ([`EMULATOR_SKIPS`]).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use lease_conformance::Harness;

/// The emulator answers one command at a time: its cases take this lock for their whole run, so
/// one case's load never eats another's timeouts.
static EMULATOR_SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The cases the emulator cannot run, and why. Each runs on a real MongoDB server.
const EMULATOR_SKIPS: [(&str, &str); 2] = [
    (
        "batch_renewal_of_1000_partitions_takes_fixed_round_trips",
        "the emulator renews partitions one document at a time in one Python thread: 1,000 \
         take longer than the fault path's 500 ms operation timeout (a real server does it in \
         one update)",
    ),
    (
        "three_nodes_rebalance_without_overlap",
        "three group workers' heartbeats, acquires and renewals through the emulator's one \
         Python thread do not settle within the case's 2 s bound",
    ),
];

async fn setup() -> Option<Harness> {
    let (direct, proxied, proxy) = common::stores(false).await?;
    let mut harness = Harness::new(Arc::new(direct.clone()));
    if common::emulated(&direct).await {
        harness = harness.holding(EMULATOR_SERIAL.lock().await);
        for (case, why) in EMULATOR_SKIPS {
            harness = harness.skipping(case, format!("on the mongoeco emulator, {why}"));
        }
    }
    Some(
        harness
            .with_faults(Arc::new(proxied.clone()), Arc::new(proxy))
            .with_slots(Arc::new(direct.clone()))
            // The proxied store goes through the fault path's TCP proxy, which counts the
            // round trips of a batch renewal.
            .with_groups(Arc::new(direct), Some(Arc::new(proxied))),
    )
}

lease_conformance::conformance_suite!(setup);
