//! Store hints on a real etcd: another store's claim, release and expiry wake a waiter within
//! a bound, a renewal does not; partitions and members wake their group; the watch stays up
//! past its progress checks; a watch cut through the fault proxy says so and comes back.
//! Needs `LEASE_TEST_ETCD_URL`; skips loudly without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use lease_conformance::hints::{self, HINT_BOUND, QUIET, connected, woken_within};
use lease_conformance::{FaultMode, FaultProxy, env};
use lease_core::LeaseStore;
use lease_core::backend::HolderToken;
use lease_core::backend::notify::Topic;
use lease_etcd::{EtcdConfig, EtcdStore};

const TTL: Duration = Duration::from_secs(30);

fn config() -> EtcdConfig {
    EtcdConfig::new().prefix(format!("lease-hints-{:016x}/", rand_u64()))
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now())
}

/// Two stores on one prefix, as two processes would have them.
async fn pair() -> Option<(EtcdStore, EtcdStore, String)> {
    let url = env::server_url("etcd")?;
    let config = config();
    let a = EtcdStore::connect(&url, config.clone()).await.unwrap();
    let b = EtcdStore::connect(&url, config).await.unwrap();
    Some((a, b, url))
}

/// A store connected through a fault proxy to the first endpoint of `url`.
async fn proxied(url: &str, config: EtcdConfig) -> (EtcdStore, FaultProxy) {
    let target = url
        .trim_start_matches("etcd://")
        .trim_start_matches("http://")
        .split(',')
        .next()
        .unwrap()
        .to_owned();
    let proxy = FaultProxy::start(target).await.unwrap();
    let store = EtcdStore::connect(&format!("etcd://{}", proxy.local_addr()), config)
        .await
        .unwrap();
    (store, proxy)
}

#[tokio::test]
async fn a_release_by_another_store_wakes_a_waiter_and_a_renewal_does_not() {
    let Some((a, b, _)) = pair().await else {
        return;
    };
    hints::another_store_wakes_a_waiter(&a, &b, TTL, "etcd").await;

    // A renewal asking a longer TTL moves the key onto a new etcd lease: a put, no hint.
    let mut w = a.changes(&Topic::lease("job")).unwrap();
    connected(&mut w).await;
    let holder = HolderToken::mint();
    b.claim("job", &holder, "b", TTL).await.unwrap().unwrap();
    woken_within(&mut w, HINT_BOUND)
        .await
        .expect("the claim woke nobody");
    b.renew("job", &holder, TTL * 2).await.unwrap().unwrap();
    assert_eq!(
        woken_within(&mut w, QUIET).await,
        None,
        "a renewal onto a new etcd lease woke the waiter"
    );
    assert!(b.release("job", &holder).await.unwrap());
}

#[tokio::test]
async fn an_expiry_wakes_a_waiter() {
    let Some((a, b, _)) = pair().await else {
        return;
    };
    let mut w = a.changes(&Topic::lease("short")).unwrap();
    connected(&mut w).await;
    // etcd's shortest TTL (2 s with its default settings), never renewed.
    let ttl = Duration::from_secs(2);
    b.claim("short", &HolderToken::mint(), "b", ttl)
        .await
        .unwrap()
        .unwrap();
    woken_within(&mut w, HINT_BOUND).await.expect("claim");
    let started = Instant::now();
    // etcd deletes the key within its 500 ms expiry sweep after the TTL (rounded up).
    woken_within(&mut w, ttl + Duration::from_secs(2))
        .await
        .expect("the expiry woke nobody");
    assert!(
        started.elapsed() + Duration::from_millis(100) >= ttl,
        "woken {:?} after a {ttl:?} claim, before its expiry",
        started.elapsed()
    );
    assert!(a.get("short").await.unwrap().is_none());
}

#[tokio::test]
async fn partition_and_member_changes_wake_their_group() {
    let Some((a, b, _)) = pair().await else {
        return;
    };
    hints::partition_changes_wake_the_group(&a, &b, TTL, "etcd").await;
    hints::member_changes_wake_the_group(&a, &b, TTL, "etcd").await;
}

#[tokio::test]
async fn the_watch_stays_up_past_its_progress_checks() {
    let Some(url) = env::server_url("etcd") else {
        return;
    };
    // An operation timeout shorter than the watch's life: the watch is no request it bounds.
    let config = config().op_timeout(Duration::from_secs(1));
    let a = EtcdStore::connect(&url, config.clone()).await.unwrap();
    let b = EtcdStore::connect(&url, config).await.unwrap();
    let mut w = a.changes(&Topic::lease("n")).unwrap();
    connected(&mut w).await;
    // Two progress checks (every 5 s): a watch whose requests went unanswered would drop at
    // the second.
    let until = Instant::now() + Duration::from_secs(11);
    while Instant::now() < until {
        let _ = tokio::time::timeout(Duration::from_millis(100), w.changed()).await;
        assert!(w.is_connected(), "the watch dropped while idle");
    }
    let holder = HolderToken::mint();
    b.claim("n", &holder, "b", TTL).await.unwrap().unwrap();
    woken_within(&mut w, HINT_BOUND)
        .await
        .expect("no hint after 11 s of watching");
}

#[tokio::test]
async fn a_cut_watch_says_so_and_comes_back() {
    let Some(url) = env::server_url("etcd") else {
        return;
    };
    let config = config();
    let (a, proxy) = proxied(&url, config.clone()).await;
    let b = EtcdStore::connect(&url, config).await.unwrap();
    let mut w = a.changes(&Topic::lease("n")).unwrap();
    connected(&mut w).await;

    proxy.set_mode(FaultMode::Cut);
    let started = Instant::now();
    while w.is_connected() {
        assert!(
            started.elapsed() < Duration::from_secs(11),
            "still connected 11 s after the cut"
        );
        let _ = tokio::time::timeout(Duration::from_millis(50), w.changed()).await;
    }
    eprintln!(
        "etcd watch disconnected {:?} after the cut",
        started.elapsed()
    );
    proxy.set_mode(FaultMode::Pass);
    let passed = Instant::now();
    let until = Instant::now() + Duration::from_secs(10);
    while !w.is_connected() {
        assert!(
            Instant::now() < until,
            "the watch did not come back within 10 s"
        );
        let _ = tokio::time::timeout(Duration::from_millis(50), w.changed()).await;
    }
    eprintln!(
        "etcd watch back {:?} after the proxy passed again",
        passed.elapsed()
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
}

#[tokio::test]
async fn a_watch_client_of_its_own_serves_a_proxied_store() {
    let Some(url) = env::server_url("etcd") else {
        return;
    };
    let config = config();
    let direct = EtcdStore::connect(&url, config.clone()).await.unwrap();
    let (a, proxy) = proxied(&url, config.clone()).await;
    let a = a.with_watch_client(direct.client().clone());
    let b = EtcdStore::connect(&url, config).await.unwrap();
    let mut w = a.changes(&Topic::lease("n")).unwrap();
    connected(&mut w).await;
    proxy.reset_stats();
    let holder = HolderToken::mint();
    b.claim("n", &holder, "b", TTL).await.unwrap().unwrap();
    woken_within(&mut w, HINT_BOUND)
        .await
        .expect("claim hinted");
    // The event reached the watch, not through the proxy: nothing came back that way.
    assert_eq!(
        proxy.stats().bytes_server_to_client,
        0,
        "the watch went through the proxy: {}",
        proxy.stats()
    );
}

#[tokio::test]
async fn a_permit_claimed_or_released_by_another_store_wakes_the_names_waiters() {
    let Some((a, b, _)) = pair().await else {
        return;
    };
    hints::another_store_wakes_a_permit_waiter(&a, &b, TTL, "etcd").await;
}
