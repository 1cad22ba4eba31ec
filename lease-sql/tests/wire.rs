//! Round trips counted on the wire, and renewals under a saturated application pool.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lease_conformance::FaultProxy;
use lease_core::{Coordinator, LeaseStore, Timings, backend::HolderToken};
use lease_sql::SqlConfig;

/// Each operation's round trips through the proxy, on a warm connection.
async fn count(store: &impl LeaseStore, proxy: &FaultProxy) -> Vec<(&'static str, u64)> {
    let name = format!("rt-{:x}", support::rand_u64());
    let ttl = Duration::from_secs(5);
    let warm = HolderToken::mint();
    // Warm up: every statement prepared once on the store's one lease connection.
    store.claim(&name, &warm, "w", ttl).await.unwrap().unwrap();
    store.renew(&name, &warm, ttl).await.unwrap().unwrap();
    store.verify(&name, &warm).await.unwrap().unwrap();
    store.get(&name).await.unwrap().unwrap();
    assert!(store.release(&name, &warm).await.unwrap());

    let h = HolderToken::mint();
    let mut counts = Vec::new();
    proxy.reset_stats();
    assert!(store.claim(&name, &h, "a", ttl).await.unwrap().is_some());
    counts.push(("claim", proxy.stats().round_trips));
    proxy.reset_stats();
    assert!(store.renew(&name, &h, ttl).await.unwrap().is_some());
    counts.push(("renew", proxy.stats().round_trips));
    proxy.reset_stats();
    assert!(store.verify(&name, &h).await.unwrap().is_some());
    counts.push(("verify", proxy.stats().round_trips));
    proxy.reset_stats();
    assert!(store.release(&name, &h).await.unwrap());
    counts.push(("release", proxy.stats().round_trips));
    proxy.reset_stats();
    assert!(store.claim(&name, &h, "held", ttl).await.unwrap().is_some());
    assert!(
        store
            .claim(&name, &HolderToken::mint(), "b", ttl)
            .await
            .unwrap()
            .is_none()
    );
    counts.push(("claim of a held name", proxy.stats().round_trips));
    // A name the store cannot hold never reaches the wire.
    proxy.reset_stats();
    assert!(store.claim(&"n".repeat(256), &h, "a", ttl).await.is_err());
    counts.push(("too-long name", proxy.stats().round_trips));
    counts
}

fn assert_counts(backend: &str, counts: &[(&str, u64)]) {
    eprintln!("{backend} round trips: {counts:?}");
    let expected = [
        ("claim", 1),
        ("renew", 1),
        ("verify", 1),
        ("release", 1),
        ("claim of a held name", 2), // two claims
        ("too-long name", 0),
    ];
    assert_eq!(counts, expected, "{backend}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_each_operation_is_one_round_trip() {
    let Some((_, p)) = support::postgres_with(SqlConfig::default().lease_connections(1)).await
    else {
        return;
    };
    assert_counts("postgres", &count(&p.store, &p.proxy).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_each_operation_is_one_round_trip() {
    let Some((_, p)) = support::mysql_with(SqlConfig::default().lease_connections(1)).await else {
        return;
    };
    assert_counts("mysql", &count(&p.store, &p.proxy).await);
}

/// The application's pool is exhausted by a long transaction; the lease is claimed and kept
/// regardless, because lease operations run on the store's own connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_do_not_starve_behind_a_saturated_application_pool() {
    let Some(url) = lease_conformance::env::server_url("postgres") else {
        return;
    };
    let app = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        // Long enough for the start-up checks' connection to come back to the pool (sqlx pings
        // it on return) on a loaded machine; the saturation check below uses its own bound.
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url)
        .await
        .unwrap();
    let store = lease_sql::PostgresStore::new(app.clone()).await.unwrap();
    let mut busy = app.begin().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *busy).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), app.acquire())
            .await
            .is_err(),
        "the application pool is saturated"
    );

    let lease = Duration::from_millis(1500);
    let c = Coordinator::builder(store)
        .instance("a")
        .timings(Timings::from_lease(lease).unwrap())
        .build()
        .unwrap();
    let name = format!("saturated-{:x}", support::rand_u64());
    let term = c.try_acquire(&name).await.unwrap();
    tokio::time::sleep(lease * 4).await;
    assert!(
        term.is_live(),
        "lost behind a saturated pool: {:?}",
        term.err()
    );
    assert!(
        term.expires_in() > lease / 2,
        "renewals kept the lease fresh"
    );
    busy.rollback().await.unwrap();
    c.close().await.unwrap();
}
