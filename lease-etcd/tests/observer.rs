//! What an observer on a real etcd reports of another store's lease. etcd answers the time
//! left on an etcd lease in whole seconds rounded down; a watch must still tell a release in a
//! lease's last second from an expiry, and still call an expiry an expiry. Needs
//! `LEASE_TEST_ETCD_URL`; skips loudly without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use lease_conformance::env;
use lease_conformance::hints::{HINT_BOUND, connected, woken_within};
use lease_core::backend::HolderToken;
use lease_core::backend::notify::Topic;
use lease_core::{Coordinator, LeaseStore, Timings, coordinator::HolderChange};
use lease_etcd::{EtcdConfig, EtcdStore};

/// The holder's TTL (etcd keeps 3 s).
const TTL: Duration = Duration::from_secs(3);

/// How long before the earliest moment etcd can expire the lease the holder releases: within
/// the lease's last second, after the whole seconds etcd answers at the claim ran out.
const BEFORE_EXPIRY: Duration = Duration::from_millis(900);

/// Rounds that must be judged, and rounds tried at most (a round whose release was seen after
/// the earliest expiry cannot be judged: the machine was too slow for it).
const JUDGED: u32 = 3;
const ROUNDS: u32 = 10;

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now())
}

#[tokio::test]
async fn a_release_in_the_last_second_of_another_stores_lease_is_reported_released() {
    let Some(url) = env::server_url("etcd") else {
        return;
    };
    let config = EtcdConfig::new().prefix(format!("lease-observer-{:016x}/", rand_u64()));
    let holder_store = EtcdStore::connect(&url, config.clone()).await.unwrap();
    let store = EtcdStore::connect(&url, config).await.unwrap();
    let observer = Coordinator::builder(store.clone())
        .instance("observer")
        .timings(Timings::from_lease(Duration::from_secs(6)).unwrap())
        .build()
        .unwrap()
        .observer();
    let mut judged = 0;
    for round in 0..ROUNDS {
        let name = format!("job-{round}");
        let mut hints = store.changes(&Topic::lease(&name)).unwrap();
        connected(&mut hints).await;
        let mut watch = observer.watch(&name).unwrap();
        let holder = HolderToken::mint();
        let sent = Instant::now();
        let grant = holder_store
            .claim(&name, &holder, "a", TTL)
            .await
            .unwrap()
            .unwrap();
        woken_within(&mut hints, HINT_BOUND)
            .await
            .expect("the claim was hinted");
        let claimed = watch.next().await.unwrap();
        assert!(
            matches!(claimed, HolderChange::Claimed { term, .. } if term == grant.term),
            "{claimed:?}"
        );
        // etcd counts the TTL from the grant, after `sent`: it cannot expire before this.
        let earliest_expiry = sent + TTL;
        tokio::time::sleep_until((earliest_expiry - BEFORE_EXPIRY).into()).await;
        assert!(holder_store.release(&name, &holder).await.unwrap());
        let change = watch.next().await.unwrap();
        if Instant::now() >= earliest_expiry {
            eprintln!("round {round}: the release was seen after the earliest expiry; not judged");
            continue;
        }
        assert_eq!(
            change,
            HolderChange::Released { term: grant.term },
            "round {round}: a release {BEFORE_EXPIRY:?} before the earliest expiry, seen \
             before it, was reported as {change:?}"
        );
        judged += 1;
        if judged == JUDGED {
            return;
        }
    }
    panic!("only {judged} of {ROUNDS} rounds could be judged: each release was seen too late");
}

#[tokio::test]
async fn an_expiry_of_another_stores_lease_is_reported_expired() {
    let Some(url) = env::server_url("etcd") else {
        return;
    };
    let prefix = format!("lease-observer-{:016x}/", rand_u64());
    let config = EtcdConfig::new().prefix(prefix.clone());
    let holder_store = EtcdStore::connect(&url, config.clone()).await.unwrap();
    let store = EtcdStore::connect(&url, config).await.unwrap();
    let observer = Coordinator::builder(store.clone())
        .instance("observer")
        .timings(Timings::from_lease(Duration::from_secs(6)).unwrap())
        .build()
        .unwrap()
        .observer();
    let ttl = Duration::from_secs(1);
    let mut judged = 0;
    for round in 0..ROUNDS {
        let name = format!("job-{round}");
        let mut hints = store.changes(&Topic::lease(&name)).unwrap();
        connected(&mut hints).await;
        let mut watch = observer.watch(&name).unwrap();
        let grant = holder_store
            .claim(&name, &HolderToken::mint(), "a", ttl)
            .await
            .unwrap()
            .unwrap();
        woken_within(&mut hints, HINT_BOUND)
            .await
            .expect("the claim was hinted");
        // The observer's store saw the claim's put by now, after the grant: etcd's TTL (as
        // granted: `ttl`, or the server's minimum) runs out before this plus the TTL.
        let hinted = Instant::now();
        let claimed = watch.next().await.unwrap();
        assert!(
            matches!(claimed, HolderChange::Claimed { term, .. } if term == grant.term),
            "{claimed:?}"
        );
        let granted = {
            let mut client = store.client().clone();
            let key = format!("{prefix}l/{name}").into_bytes();
            let kv = client.get(key, None).await.unwrap().kvs()[0].clone();
            let ttl = client.lease_time_to_live(kv.lease(), None).await.unwrap();
            Duration::from_secs(u64::try_from(ttl.granted_ttl()).unwrap())
        };
        // Never renewed: it expires.
        let change = watch.next().await.unwrap();
        if Instant::now() < hinted + granted {
            eprintln!("round {round}: the expiry was seen before it surely happened; not judged");
            continue;
        }
        assert_eq!(
            change,
            HolderChange::Expired { term: grant.term },
            "round {round}: an expiry was reported as {change:?}"
        );
        judged += 1;
        if judged == JUDGED {
            return;
        }
    }
    panic!("only {judged} of {ROUNDS} rounds could be judged");
}
