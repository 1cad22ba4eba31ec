//! Store hints on the test server (`LEASE_TEST_NATS_URL`): claims seen by the KV watch,
//! releases on the hint subject, renewals waking nobody, slot records from the slot bucket's
//! watch, and a connection cut through the fault proxy reported as disconnected until the
//! client is back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use async_nats::jetstream;
use lease_conformance::hints::{self, HINT_BOUND, connected, woken_within};
use lease_conformance::{FaultMode, FaultProxy, env};
use lease_core::LeaseStore;
use lease_core::backend::HolderToken;
use lease_core::backend::notify::Topic;
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

// No member check (`hints::member_changes_wake_the_group`): the listener turns only lease,
// partition and permit keys into hints (`wire::keys::topic_of`), so a member joining or leaving
// wakes no group waiter — it failed "nats: a member joining woke nobody within 250ms".
#[tokio::test]
async fn partition_and_slot_changes_wake_their_topics() {
    let Some((a, b, bucket)) = pair("groups").await else {
        return;
    };
    hints::partition_changes_wake_the_group(&a, &b, TTL, "nats").await;
    hints::slot_changes_wake_the_slots_topic(&a, &b, TTL, "nats").await;
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
    hints::another_store_wakes_a_permit_waiter(&a, &b, TTL, "nats").await;
    bucket.delete().await;
}
