//! A lapse on a real etcd counts as a lapse whenever etcd's expiry sweep deletes the key.
//!
//! An etcd lease whose TTL ran out keeps its keys until etcd's sweep revokes it (every 500 ms,
//! later on a busy server). An owner that lets a partition lapse and comes back in that window
//! must still get a higher epoch, and a holder's renewal must not revive its lapsed lease or
//! permit. Each case waits until the etcd lease has run out for sure — its TTL counted from
//! before the call that granted it answered — then comes back at once: what it asserts holds
//! however early or late the sweep runs; how often the key was still there is printed.
//! Needs `LEASE_TEST_ETCD_URL`; skips loudly without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::future::join_all;
use lease_conformance::env;
use lease_core::backend::permits::PermitStore;
use lease_core::backend::{HolderToken, partitions::owner_id};
use lease_core::{LeaseStore, backend::partitions::PartitionStore};
use lease_etcd::etcd_client::GetOptions;
use lease_etcd::{EtcdConfig, EtcdStore};

/// The TTL a holder lets lapse; etcd keeps it as 1 s, or raises it to its minimum.
const TTL: Duration = Duration::from_secs(1);

/// How long after its etcd lease ran out a holder comes back.
const BACK_AFTER: Duration = Duration::from_millis(20);

/// Rounds per path: the sweep falls at another moment of the lapse each round.
const ROUNDS: u32 = 5;

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now())
}

/// Two stores on one fresh prefix, as two processes would have them, and the prefix.
async fn stores() -> Option<(EtcdStore, EtcdStore, String)> {
    let url = env::server_url("etcd")?;
    let prefix = format!("lease-lapses-{:016x}/", rand_u64());
    let config = EtcdConfig::new().prefix(prefix.clone());
    let a = EtcdStore::connect(&url, config.clone()).await.unwrap();
    let b = EtcdStore::connect(&url, config).await.unwrap();
    Some((a, b, prefix))
}

/// The etcd lease `key` hangs on and the TTL etcd granted it; `None` when the key is gone.
async fn etcd_lease(store: &EtcdStore, key: &[u8]) -> Option<(i64, Duration)> {
    let mut client = store.client().clone();
    let kv = client.get(key, None).await.unwrap().kvs().first()?.clone();
    let ttl = client
        .lease_time_to_live(kv.lease(), None)
        .await
        .unwrap()
        .granted_ttl();
    Some((kv.lease(), Duration::from_secs(u64::try_from(ttl).unwrap())))
}

/// Whether `key` exists.
async fn exists(store: &EtcdStore, key: &[u8]) -> bool {
    let mut client = store.client().clone();
    let options = GetOptions::new().with_count_only();
    client.get(key, Some(options)).await.unwrap().count() > 0
}

/// Sleeps until the etcd lease `key` hangs on — granted or last kept alive before `answered`
/// — has run out for sure, and `BACK_AFTER` more. Answers the lease.
async fn lapse(store: &EtcdStore, key: &[u8], answered: Instant) -> i64 {
    let (lease, granted) = etcd_lease(store, key)
        .await
        .expect("the key is there while its lease is live");
    tokio::time::sleep_until((answered + granted + BACK_AFTER).into()).await;
    lease
}

/// The ways an owner comes back to its partition.
#[derive(Debug, Clone, Copy)]
enum Back {
    /// Through the same store object, with the same TTL (the session it had).
    SameSession,
    /// Through the same store object, with another TTL (another session: a move).
    AnotherTtl,
    /// Through another store object (a move).
    AnotherStore,
}

const PATHS: [Back; 3] = [Back::SameSession, Back::AnotherTtl, Back::AnotherStore];

/// Acquires a partition, lets it lapse, comes back `how`: the epochs before and after, and
/// whether the key was still there just before the return.
async fn lapse_and_return(
    a: &EtcdStore,
    b: &EtcdStore,
    prefix: &str,
    partition: u32,
    how: Back,
) -> (u64, u64, bool) {
    let owner = owner_id("node");
    let first = a
        .acquire_partition("g", partition, &owner, TTL)
        .await
        .unwrap()
        .expect("a free partition");
    let answered = Instant::now();
    let key = format!("{prefix}p/g\0{partition:010}").into_bytes();
    lapse(a, &key, answered).await;
    let unswept = exists(a, &key).await;
    let (store, ttl) = match how {
        Back::SameSession => (a, TTL),
        Back::AnotherTtl => (a, TTL * 3),
        Back::AnotherStore => (b, TTL),
    };
    let again = store
        .acquire_partition("g", partition, &owner, ttl)
        .await
        .unwrap()
        .expect("nobody else holds the partition");
    (first.epoch, again.epoch, unswept)
}

#[tokio::test]
async fn an_owner_back_after_a_lapse_gets_a_higher_epoch_on_every_path() {
    let Some((a, b, prefix)) = stores().await else {
        return;
    };
    let mut unswept = [0; PATHS.len()];
    for round in 0..ROUNDS {
        let backs = join_all(PATHS.iter().enumerate().map(|(i, &how)| {
            let partition = round * 10 + u32::try_from(i).unwrap();
            lapse_and_return(&a, &b, &prefix, partition, how)
        }))
        .await;
        for (i, (first, again, was_there)) in backs.into_iter().enumerate() {
            unswept[i] += u32::from(was_there);
            assert!(
                again > first,
                "{:?}, round {round}: the owner came back {BACK_AFTER:?} after its partition \
                 lapsed and kept epoch {first} (now {again}); the key was {} when it came back",
                PATHS[i],
                if was_there {
                    "still there (not swept yet)"
                } else {
                    "gone"
                },
            );
        }
    }
    eprintln!(
        "came back before etcd's sweep deleted the key, of {ROUNDS} rounds: {}",
        PATHS
            .iter()
            .zip(unswept)
            .map(|(how, n)| format!("{how:?} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

#[tokio::test]
async fn a_renewal_onto_a_longer_etcd_lease_never_revives_a_lapsed_lease_or_permit() {
    let Some((a, b, prefix)) = stores().await else {
        return;
    };
    let mut unswept = [0, 0];
    for round in 0..ROUNDS {
        let name = format!("job-{round}");
        let holder = HolderToken::mint();
        let permit_holder = HolderToken::mint();
        let (lease, permit) = tokio::join!(
            async {
                let grant = a.claim(&name, &holder, "a", TTL).await.unwrap().unwrap();
                let key = format!("{prefix}l/{name}").into_bytes();
                lapse(&a, &key, Instant::now()).await;
                let was_there = exists(&a, &key).await;
                // Renewed through a store that did not make the claim too (a read first).
                let renewed = a.renew(&name, &holder, TTL * 3).await.unwrap();
                let other = b.renew(&name, &holder, TTL * 3).await.unwrap();
                (grant.term, renewed, other, was_there)
            },
            async {
                let grant = a
                    .claim_permit(&name, 2, &permit_holder, "a", TTL)
                    .await
                    .unwrap()
                    .unwrap();
                let key = format!("{prefix}c/{name}\0{:010}", grant.permit).into_bytes();
                lapse(&a, &key, Instant::now()).await;
                let was_there = exists(&a, &key).await;
                let renewed = a
                    .renew_permit(&name, grant.permit, &permit_holder, TTL * 3)
                    .await
                    .unwrap();
                (grant.grant.term, renewed, was_there)
            }
        );
        let (term, renewed, other, was_there) = lease;
        unswept[0] += u32::from(was_there);
        assert_eq!(
            (renewed, other),
            (None, None),
            "round {round}: the lease of term {term} was renewed after it lapsed"
        );
        let (term, renewed, was_there) = permit;
        unswept[1] += u32::from(was_there);
        assert_eq!(
            renewed, None,
            "round {round}: the permit of term {term} was renewed after it lapsed"
        );
    }
    eprintln!(
        "renewed before etcd's sweep deleted the key, of {ROUNDS} rounds: lease {}, permit {}",
        unswept[0], unswept[1]
    );
}
