//! Each operation is one command and one round trip on a warm connection, counted on the wire
//! by the fault proxy and at the server by its own command counters (`serverStatus`
//! `metrics.commands.<command>.total`). Runs where `LEASE_TEST_MONGODB_URL` names a server
//! that nothing else uses meanwhile; prints the SKIPPED line otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::future::Future;
use std::time::Duration;

use lease_conformance::FaultProxy;
use lease_core::{HolderToken, LeaseStore};
use lease_mongo::MongoStore;
use lease_mongo::mongodb::bson::{Bson, doc};

/// The server's count of `command` since it started.
async fn command_total(store: &MongoStore, command: &str) -> i64 {
    let status = store
        .client()
        .database("admin")
        .run_command(doc! { "serverStatus": 1 })
        .await
        .unwrap();
    let total = status
        .get_document("metrics")
        .and_then(|m| m.get_document("commands"))
        .ok()
        .and_then(|c| c.get_document(command).ok())
        .and_then(|c| c.get("total").cloned());
    match total {
        Some(Bson::Int64(n)) => n,
        Some(Bson::Int32(n)) => i64::from(n),
        None => 0,
        Some(other) => panic!("serverStatus gave {other:?} for {command}"),
    }
}

/// Runs `op` and returns its result with the proxy's round trips and the server's count of
/// `command` it took.
async fn count<T>(
    direct: &MongoStore,
    proxy: &FaultProxy,
    command: &str,
    op: impl Future<Output = T>,
) -> (T, u64, i64) {
    let before = command_total(direct, command).await;
    proxy.reset_stats();
    let out = op.await;
    let trips = proxy.stats().round_trips;
    let after = command_total(direct, command).await;
    (out, trips, after - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operation_is_one_command_and_one_round_trip() {
    let Some((direct, store, proxy)) = common::stores(true).await else {
        return;
    };
    let name = format!("rt{:08x}", rand_suffix());
    let a = HolderToken::mint();
    let ttl = Duration::from_secs(5);
    // Warm the proxied connection (handshake, authentication).
    store.get(&name).await.unwrap();

    let (g, trips, cmds) = count(
        &direct,
        &proxy,
        "findAndModify",
        store.claim(&name, &a, "a", ttl),
    )
    .await;
    assert_eq!(g.unwrap().unwrap().term, 1);
    assert_eq!((trips, cmds), (1, 1), "claim");

    let (g, trips, cmds) = count(
        &direct,
        &proxy,
        "findAndModify",
        store.claim(&name, &HolderToken::mint(), "b", ttl),
    )
    .await;
    assert_eq!(g.unwrap(), None, "a live lease was claimed");
    assert_eq!((trips, cmds), (1, 1), "claim of a held name");

    let (g, trips, cmds) = count(
        &direct,
        &proxy,
        "findAndModify",
        store.renew(&name, &a, ttl),
    )
    .await;
    assert_eq!(g.unwrap().unwrap().term, 1);
    assert_eq!((trips, cmds), (1, 1), "renew");

    let (g, trips, cmds) = count(&direct, &proxy, "aggregate", store.verify(&name, &a)).await;
    assert_eq!(g.unwrap().unwrap().term, 1);
    assert_eq!((trips, cmds), (1, 1), "verify");

    let (g, trips, cmds) = count(&direct, &proxy, "aggregate", store.get(&name)).await;
    assert!(g.unwrap().unwrap().live);
    assert_eq!((trips, cmds), (1, 1), "get");

    let (g, trips, cmds) = count(&direct, &proxy, "findAndModify", store.release(&name, &a)).await;
    assert!(g.unwrap());
    assert_eq!((trips, cmds), (1, 1), "release");

    let (g, trips, cmds) = count(
        &direct,
        &proxy,
        "findAndModify",
        store.claim(&name, &HolderToken::mint(), "c", ttl),
    )
    .await;
    assert_eq!(
        g.unwrap().unwrap().term,
        2,
        "the term continues after release"
    );
    assert_eq!((trips, cmds), (1, 1), "claim after release");

    let (g, trips, cmds) =
        count(&direct, &proxy, "findAndModify", store.force_release(&name)).await;
    assert!(g.unwrap());
    assert_eq!((trips, cmds), (1, 1), "force release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn available_passes_and_odd_names_and_labels_are_stored_as_given() {
    let Some((direct, _, _)) = common::stores(false).await else {
        return;
    };
    direct.available().await.unwrap();
    // A name that looks like an operator or a field path is stored as given.
    let name = format!("${:08x}.x", rand_suffix());
    let a = HolderToken::mint();
    let g = direct
        .claim(&name, &a, "$epoch", Duration::from_millis(600))
        .await
        .unwrap()
        .unwrap();
    let info = direct.get(&name).await.unwrap().unwrap();
    assert_eq!(
        (info.name.as_str(), info.instance.as_str(), info.term),
        (name.as_str(), "$epoch", g.term)
    );
}

fn rand_suffix() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    nanos ^ std::process::id()
}
