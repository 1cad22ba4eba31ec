//! Tests on a real etcd (`LEASE_TEST_ETCD_URL`; they skip loudly without it) that need the
//! store's insides: a test switch that revokes the next etcd leases granted at once (an etcd
//! lease that ended before the request hanging a key on it landed), and `fit` called with a
//! keep-alive's proof that is too old.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use lease_conformance::env;
use lease_core::backend::permits::PermitStore;
use lease_core::backend::{HolderToken, clock::Stamp};
use lease_core::layer::Operation;
use lease_core::{Coordinator, LeaseStore, Timings};

use crate::leases::GONE_TRIES;
use crate::{EtcdConfig, EtcdStore};

async fn store() -> Option<EtcdStore> {
    let url = env::server_url("etcd")?;
    let prefix = format!("lease-unit-{:016x}/", rand_u64());
    Some(
        EtcdStore::connect(&url, EtcdConfig::new().prefix(prefix))
            .await
            .unwrap(),
    )
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now())
}

/// The next `n` etcd leases `store` grants are revoked before the store uses them.
fn revoke_grants(store: &EtcdStore, n: usize) {
    store.inner.revoke_grants.store(n, Ordering::SeqCst);
}

#[tokio::test]
async fn a_claim_whose_etcd_lease_ended_before_it_landed_claims_on_a_new_one() {
    let Some(store) = store().await else {
        return;
    };
    let ttl = Duration::from_secs(5);
    revoke_grants(&store, 1);
    let holder = HolderToken::mint();
    let grant = store
        .claim("job", &holder, "a", ttl)
        .await
        .expect("a claim whose etcd lease ended is made again on a new one")
        .expect("the name is free");
    assert_eq!(store.inner.revoke_grants.load(Ordering::SeqCst), 0);
    assert_eq!(
        store.verify("job", &holder).await.unwrap().map(|g| g.term),
        Some(grant.term)
    );

    // Every etcd lease gone: a temporary error, nothing claimed.
    let other = HolderToken::mint();
    revoke_grants(&store, GONE_TRIES);
    let e = store.claim("job2", &other, "a", ttl).await.unwrap_err();
    assert!(e.is_temporary(), "a permanent error: {e}");
    assert!(store.get("job2").await.unwrap().is_none());

    // A counted claim decides again on a new etcd lease.
    revoke_grants(&store, 2);
    let permit = store
        .claim_permit("pool", 3, &other, "a", ttl)
        .await
        .expect("a counted claim whose etcd lease ended is made again on a new one")
        .expect("the name has free permits");
    assert_eq!(permit.permit, 0);
}

#[tokio::test]
async fn a_waiting_acquire_outlasts_etcd_leases_that_end_before_its_claim_lands() {
    let Some(store) = store().await else {
        return;
    };
    let other = EtcdStore::connect(
        &env::server_url("etcd").unwrap(),
        EtcdConfig::new().prefix(store.inner.prefix.clone()),
    )
    .await
    .unwrap();
    let timings = Timings::from_lease(Duration::from_secs(6)).unwrap();
    let a = Coordinator::builder(other)
        .instance("a")
        .timings(timings)
        .build()
        .unwrap();
    let b = Coordinator::builder(store.clone())
        .instance("b")
        .timings(timings)
        .build()
        .unwrap();
    let first = a.acquire("job", Duration::ZERO).await.unwrap();
    let waiting = tokio::spawn(async move { b.acquire("job", Duration::from_secs(60)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // More than one claim's worth: the first claim after the release answers a temporary
    // error, the next claims on a new etcd lease.
    revoke_grants(&store, GONE_TRIES + 1);
    first.resign().await.unwrap();
    let next = waiting
        .await
        .unwrap()
        .expect("the waiting acquire ended on an etcd lease that ended");
    assert!(next.token() > first.token());
    next.resign().await.unwrap();
}

#[tokio::test]
async fn a_move_onto_a_longer_etcd_lease_that_may_have_landed_after_the_old_one_ran_out_is_taken_back()
 {
    let Some(store) = store().await else {
        return;
    };
    let site = store.site(Operation::Renew, "job");
    let holder = HolderToken::mint();
    let short = Duration::from_secs(1);
    store
        .claim("job", &holder, "a", short)
        .await
        .unwrap()
        .unwrap();
    let lease = crate::store::lock(&store.inner.known)
        .get("job", &holder)
        .unwrap()
        .lease;
    // A keep-alive's proof that is older than the TTL it gave, while the etcd lease is kept
    // alive all along (so the move finds the key on it).
    let proof = Stamp::now();
    let granted = store.keep_alive(site, lease).await.unwrap().unwrap();
    while proof.elapsed() < granted + Duration::from_millis(50) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        store.keep_alive(site, lease).await.unwrap().unwrap();
    }
    let key = store.key("job");
    let fitted = store
        .fit(site, &key, lease, granted, proof, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        fitted.map(|(l, ..)| l == lease),
        None,
        "a move not shown to land while the old etcd lease was live was kept"
    );
    assert!(
        store.get("job").await.unwrap().is_none(),
        "the key moved after the proof ran out was left"
    );
}

#[tokio::test]
async fn a_renewal_whose_longer_etcd_lease_ended_before_the_move_landed_answers_a_temporary_error()
{
    let Some(store) = store().await else {
        return;
    };
    let holder = HolderToken::mint();
    let grant = store
        .claim("job", &holder, "a", Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    revoke_grants(&store, 1);
    let e = store
        .renew("job", &holder, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(e.is_temporary(), "a permanent error: {e}");
    // Nothing was written: the next renewal moves the key, its term kept.
    let renewed = store
        .renew("job", &holder, Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the lease is still held");
    assert_eq!(renewed.term, grant.term);
}

/// Polls until etcd says lease `id` is gone (the old lease of a key that moved is revoked in
/// the background).
async fn until_gone(store: &EtcdStore, id: i64) {
    let site = store.site(Operation::Members, "svc");
    let since = Instant::now();
    while store.time_left(site, id).await.unwrap().is_some() {
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "etcd lease {id} never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A member read while its heartbeat moved it onto a new etcd lease (and the old one was
/// revoked between the listing's range read and its question about the lease) is listed: the
/// old lease's "gone" said nothing about the member. Before `live` followed moved keys, such a
/// member was left out of `members` — a live node missing from the other workers' views, and
/// the assignment came apart without a fault.
#[tokio::test]
async fn a_member_that_moved_onto_a_new_etcd_lease_while_it_was_listed_is_listed() {
    use lease_core::backend::membership::MembershipStore;
    let Some(store) = store().await else {
        return;
    };
    let ttl = Duration::from_secs(5);
    let groups = vec!["g".to_owned()];
    store
        .heartbeat("svc", "n1", "addr", ttl, &groups)
        .await
        .unwrap();
    let site = store.site(Operation::Members, "svc");
    let prefix = crate::wire::keys::members(&store.inner.prefix, "svc");
    let read = store.range(site, &prefix).await.unwrap();
    assert_eq!(read.len(), 1);
    let old = read[0].lease();
    // The next heartbeat: the key moves onto a new etcd lease, the old one is revoked.
    store
        .heartbeat("svc", "n1", "addr", ttl, &groups)
        .await
        .unwrap();
    until_gone(&store, old).await;
    let listed = store.live(site, read).await.unwrap();
    assert_eq!(listed.len(), 1, "a live member that moved was left out");
    assert_ne!(listed[0].0.lease(), old);
    assert!(listed[0].1 > Duration::ZERO);

    // A member that left is not followed anywhere.
    let read = store.range(site, &prefix).await.unwrap();
    store.leave("svc", "n1").await.unwrap();
    until_gone(&store, read[0].lease()).await;
    assert!(store.live(site, read).await.unwrap().is_empty());
}

/// A read-back of a holding whose key a renewal moved onto a longer etcd lease, after the old
/// one was revoked, finds the holding — its holder's, its term — and nobody else's.
#[tokio::test]
async fn a_read_back_follows_a_holding_moved_onto_a_longer_etcd_lease() {
    let Some(store) = store().await else {
        return;
    };
    let holder = HolderToken::mint();
    let grant = store
        .claim("job", &holder, "a", Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    let site = store.site(Operation::Verify, "job");
    let read = store
        .get_key(site, &store.key("job"))
        .await
        .unwrap()
        .unwrap();
    let renewed = store
        .renew("job", &holder, Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(renewed.term, grant.term);
    let now = store
        .get_key(site, &store.key("job"))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(
        now.lease(),
        read.lease(),
        "the renewal did not move the key"
    );
    until_gone(&store, read.lease()).await;
    assert!(
        store
            .held_time_left(site, &read, &holder)
            .await
            .unwrap()
            .is_some_and(|left| left > Duration::from_secs(1)),
        "the moved holding was read back as gone"
    );
    assert_eq!(
        store
            .held_time_left(site, &read, &HolderToken::mint())
            .await
            .unwrap(),
        None,
        "another holder's read-back adopted the holding"
    );
}
