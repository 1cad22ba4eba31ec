//! One round trip per operation, counted twice: on the wire by the fault proxy, and by the
//! server itself in `INFO commandstats` (one `EVALSHA` per operation, no `EVAL`).
//!
//! One test only, so nothing else in this binary runs scripts while it counts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use lease_core::{HolderToken, LeaseStore};
use lease_redis::redis::aio::MultiplexedConnection;

/// `calls` per command from `INFO commandstats`.
async fn command_calls(raw: &mut MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = lease_redis::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(raw)
        .await
        .unwrap();
    let mut calls = HashMap::new();
    for line in info.lines() {
        let Some((cmd, stats)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        for field in stats.split(',') {
            if let Some(n) = field.strip_prefix("calls=") {
                calls.insert(cmd.to_owned(), n.parse().unwrap());
            }
        }
    }
    calls
}

fn delta(before: &HashMap<String, u64>, after: &HashMap<String, u64>, cmd: &str) -> u64 {
    after.get(cmd).copied().unwrap_or(0) - before.get(cmd).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_is_one_round_trip() {
    let Some(url) = common::url() else { return };
    let Some((store, proxy)) = common::proxied(&url, common::config()).await else {
        return;
    };
    let mut raw = common::raw(&url).await;
    let ttl = Duration::from_secs(5);
    let prefix = common::unique("rt");
    let holder = HolderToken::mint();

    // Warm the fresh connection once (and make sure the scripts are cached).
    let warm = format!("{prefix}warm");
    store
        .claim(&warm, &holder, "a", ttl)
        .await
        .unwrap()
        .unwrap();
    store.release(&warm, &holder).await.unwrap();

    let name = format!("{prefix}cycle");
    let before = command_calls(&mut raw).await;
    let mut trips = Vec::new();
    macro_rules! one {
        ($label:literal, $op:expr) => {{
            proxy.reset_stats();
            let out = $op.await.unwrap();
            trips.push(($label, proxy.stats().round_trips));
            out
        }};
    }
    let g = one!("claim", store.claim(&name, &holder, "a", ttl)).unwrap();
    assert_eq!(g.term, 1);
    assert!(one!("renew", store.renew(&name, &holder, ttl)).is_some());
    assert!(one!("verify", store.verify(&name, &holder)).is_some());
    assert!(one!("release", store.release(&name, &holder)));
    let after_cycle = command_calls(&mut raw).await;
    assert!(one!("get", store.get(&name)).is_some());
    let other = HolderToken::mint();
    assert!(one!("claim again", store.claim(&name, &other, "b", ttl)).is_some());
    assert!(one!("force_release", store.force_release(&name)));
    let after = command_calls(&mut raw).await;
    eprintln!("round trips per operation: {trips:?}");
    for (op, n) in &trips {
        assert_eq!(*n, 1, "{op} took {n} round trips");
    }
    // The server's own count: claim + renew + verify + release are four EVALSHAs, no EVAL.
    assert_eq!(
        delta(&before, &after_cycle, "evalsha"),
        4,
        "{after_cycle:?}"
    );
    assert_eq!(delta(&before, &after_cycle, "eval"), 0);
    assert_eq!(delta(&before, &after, "evalsha"), 7);
    assert_eq!(delta(&before, &after, "eval"), 0);

    // After SCRIPT FLUSH the first use of a script costs two: NOSCRIPT, then EVAL (which
    // caches it); the next use is one EVALSHA again.
    let _: () = lease_redis::redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    let before = command_calls(&mut raw).await;
    let cold = format!("{prefix}cold");
    proxy.reset_stats();
    assert!(
        store
            .claim(&cold, &holder, "a", ttl)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(proxy.stats().round_trips, 2, "cold claim");
    proxy.reset_stats();
    assert!(store.release(&cold, &holder).await.unwrap());
    assert_eq!(proxy.stats().round_trips, 2, "cold release");
    proxy.reset_stats();
    assert!(
        store
            .claim(&cold, &holder, "a", ttl)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(proxy.stats().round_trips, 1, "warm claim");
    let after = command_calls(&mut raw).await;
    assert_eq!(delta(&before, &after, "eval"), 2);
    assert!(store.release(&cold, &holder).await.unwrap());

    // available() loads every script, so even first uses are one round trip afterwards.
    let _: () = lease_redis::redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    store.available().await.unwrap();
    proxy.reset_stats();
    assert!(store.verify(&cold, &holder).await.unwrap().is_none());
    assert_eq!(proxy.stats().round_trips, 1, "verify after available()");
}
