//! Store hints on the test server (`LEASE_TEST_NATS_URL`): claims seen by the KV watch,
//! releases on the hint subject, renewals waking nobody, slot records from the slot bucket's
//! watch, and a connection cut through the fault proxy reported as disconnected until the
//! client is back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use async_nats::jetstream;
use lease_conformance::hints::{self, HINT_BOUND, connected, woken_within};
use lease_conformance::{FaultMode, FaultProxy, env};
use lease_core::backend::{HolderToken, SlotClaim};
use lease_core::notify::Topic;
use lease_core::{LeaseStore, PartitionStore, SlotStore};
use lease_nats::{NatsConfig, NatsStore, slot_bucket_for};

const TTL: Duration = Duration::from_secs(5);

/// A bucket no other test uses, and two stores on it (as two processes would be), both
/// listening.
async fn pair(what: &str) -> Option<(NatsStore, NatsStore, Bucket)> {
    let url = env::server_url("nats")?;
    let bucket = format!("lease_hints_{what}_{:08x}", rand::random::<u32>());
    let config = NatsConfig::new(TTL).bucket(bucket.clone());
    let a = match NatsStore::connect(&url, config.clone()).await {
        Ok(s) => s,
        Err(e) => {
            env::skip("nats", &format!("cannot connect to {url}: {e}"));
            return None;
        }
    };
    let b = NatsStore::connect(&url, config).await.unwrap();
    for s in [&a, &b] {
        connected(&mut s.changes(&Topic::lease("-")).unwrap()).await;
    }
    let js = jetstream::new(async_nats::connect(&url).await.unwrap());
    Some((a, b, Bucket { js, name: bucket }))
}

/// Deletes the test's buckets when dropped.
struct Bucket {
    js: jetstream::Context,
    name: String,
}

impl Bucket {
    async fn delete(self) {
        let _ = self.js.delete_stream(format!("KV_{}", self.name)).await;
        let _ = self
            .js
            .delete_stream(format!("KV_{}", slot_bucket_for(&self.name)))
            .await;
    }
}

#[tokio::test]
async fn a_release_by_another_store_wakes_a_waiter_and_a_renewal_does_not() {
    let Some((a, b, bucket)) = pair("lease").await else {
        return;
    };
    hints::another_store_wakes_a_waiter(&a, &b, TTL, "nats").await;
    bucket.delete().await;
}

#[tokio::test]
async fn partition_and_slot_changes_wake_their_topics() {
    let Some((a, b, bucket)) = pair("groups").await else {
        return;
    };
    let mut group = a.changes(&Topic::group("g.1")).unwrap();
    let lease = b
        .acquire_partition("g.1", 3, "node-b", TTL)
        .await
        .unwrap()
        .unwrap();
    woken_within(&mut group, HINT_BOUND)
        .await
        .expect("acquire hinted");
    let again = b
        .acquire_partition("g.1", 3, "node-b", TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.epoch, lease.epoch);
    b.renew_partitions("g.1", &[3], "node-b", TTL)
        .await
        .unwrap();
    assert_eq!(
        woken_within(&mut group, Duration::from_millis(300)).await,
        None,
        "the owner's own re-acquire or renewal woke the waiter"
    );
    assert_eq!(
        b.release_partitions("g.1", &[3], "node-b").await.unwrap(),
        1
    );
    woken_within(&mut group, HINT_BOUND)
        .await
        .expect("release hinted");

    let mut slots = a.changes(&Topic::slots("cron")).unwrap();
    let holder = HolderToken::mint();
    let now_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let instant = now_ms - 60_000;
    let claimed = b
        .claim_slot("cron", &holder, "b", TTL, instant)
        .await
        .unwrap();
    assert!(matches!(claimed, SlotClaim::Claimed { .. }), "{claimed:?}");
    woken_within(&mut slots, HINT_BOUND)
        .await
        .expect("slot claim hinted");
    let finished = b.finish_slot("cron", &holder, instant, None).await.unwrap();
    assert!(finished.recorded);
    woken_within(&mut slots, HINT_BOUND)
        .await
        .expect("slot finish hinted");
    bucket.delete().await;
}

#[tokio::test]
async fn a_cut_connection_says_so_and_the_hints_come_back() {
    let Some(url) = env::server_url("nats") else {
        return;
    };
    let target = url.trim_start_matches("nats://").to_owned();
    let proxy = FaultProxy::start(target).await.unwrap();
    let bucket = format!("lease_hints_cut_{:08x}", rand::random::<u32>());
    let config = NatsConfig::new(TTL).bucket(bucket.clone());
    let a = NatsStore::connect(&format!("nats://{}", proxy.local_addr()), config.clone())
        .await
        .unwrap();
    let b = NatsStore::connect(&url, config).await.unwrap();
    let mut w = a.changes(&Topic::lease("n")).unwrap();
    connected(&mut w).await;

    proxy.set_mode(FaultMode::Cut);
    let started = Instant::now();
    while w.is_connected() {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "still connected 2 s after the cut"
        );
        let _ = tokio::time::timeout(Duration::from_millis(50), w.changed()).await;
    }
    eprintln!(
        "nats listener disconnected {:?} after the cut",
        started.elapsed()
    );
    proxy.set_mode(FaultMode::Pass);
    let cut_off = Instant::now();
    connected(&mut w).await;
    eprintln!(
        "nats listener back {:?} after the proxy passed again",
        cut_off.elapsed()
    );
    while woken_within(&mut w, Duration::from_millis(20))
        .await
        .is_some()
    {}
    let holder = HolderToken::mint();
    b.claim("n", &holder, "b", TTL).await.unwrap().unwrap();
    woken_within(&mut w, HINT_BOUND)
        .await
        .expect("claims hinted after the reconnect");
    assert!(b.release("n", &holder).await.unwrap());
    woken_within(&mut w, HINT_BOUND)
        .await
        .expect("releases hinted after the reconnect");
    let js = jetstream::new(async_nats::connect(&url).await.unwrap());
    Bucket { js, name: bucket }.delete().await;
}

#[tokio::test]
async fn a_permit_claimed_or_released_by_another_store_wakes_the_names_waiters() {
    let Some((a, b, bucket)) = pair("permit").await else {
        return;
    };
    let mut w = a.changes(&Topic::lease("counted")).unwrap();
    let holder = HolderToken::mint();
    let g = b
        .claim_permit("counted", 2, &holder, "b", TTL)
        .await
        .unwrap()
        .unwrap();
    woken_within(&mut w, HINT_BOUND)
        .await
        .expect("permit claim hinted");
    b.renew_permit("counted", g.permit, &holder, TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        woken_within(&mut w, Duration::from_millis(300)).await,
        None,
        "a permit renewal woke the waiter"
    );
    assert!(
        b.release_permit("counted", g.permit, &holder)
            .await
            .unwrap()
    );
    woken_within(&mut w, HINT_BOUND)
        .await
        .expect("permit release hinted");
    bucket.delete().await;
}
