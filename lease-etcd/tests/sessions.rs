//! Sessions on a real etcd: the names claimed through one store (a holder token per claim, as
//! the coordinator mints them) hang on one etcd lease per TTL (its session), renewals of them
//! share keep-alives, and a name's term still ends on its own — released, forced out, past its own deadline, or with a release that failed — while the
//! session lives on; a session lost ends all its names. Needs `LEASE_TEST_ETCD_URL`; skips
//! loudly without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures::future::join_all;
use lease_conformance::{FaultMode, FaultProxy, env};
use lease_core::LeaseStore;
use lease_core::backend::HolderToken;
use lease_etcd::etcd_client::GetOptions;
use lease_etcd::{EtcdConfig, EtcdStore};

const TTL: Duration = Duration::from_secs(5);

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now())
}

fn config(test: &str) -> EtcdConfig {
    EtcdConfig::new().prefix(format!("lease-sessions-{test}-{:016x}/", rand_u64()))
}

async fn store(config: &EtcdConfig) -> Option<EtcdStore> {
    let url = env::server_url("etcd")?;
    Some(EtcdStore::connect(&url, config.clone()).await.unwrap())
}

/// A store through a fault proxy in front of the server, on `config`.
async fn proxied(config: EtcdConfig) -> Option<(EtcdStore, FaultProxy)> {
    let direct = store(&config).await?;
    let target = direct.server().split(',').next().unwrap().to_owned();
    let proxy = FaultProxy::start(target).await.unwrap();
    let store = EtcdStore::connect(&format!("etcd://{}", proxy.local_addr()), config)
        .await
        .unwrap();
    Some((store, proxy))
}

/// The etcd lease of every lease key under `config`'s prefix, by key.
async fn key_leases(store: &EtcdStore, config: &EtcdConfig) -> Vec<i64> {
    let mut client = store.client().clone();
    let resp = client
        .get(
            format!("{}l/", config.key_prefix()),
            Some(GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    resp.kvs().iter().map(|kv| kv.lease()).collect()
}

async fn key_exists(store: &EtcdStore, config: &EtcdConfig, name: &str) -> bool {
    let mut client = store.client().clone();
    let key = format!("{}l/{name}", config.key_prefix());
    !client.get(key, None).await.unwrap().kvs().is_empty()
}

#[tokio::test]
async fn many_names_share_one_session_and_one_keep_alive() {
    let config = config("many");
    let Some(store) = store(&config).await else {
        return;
    };
    // Long enough that no name reaches its own deadline while the 300 claims are made one
    // after the other, even on a starved machine (with both cores busy they took over 30 s).
    let ttl = Duration::from_secs(120);
    // A holder token per claim, as the coordinator mints them: all on the store's one session.
    let names: Vec<String> = (0..300).map(|i| format!("job-{i}")).collect();
    let holders: Vec<HolderToken> = names.iter().map(|_| HolderToken::mint()).collect();
    let mut terms = Vec::new();
    for (name, holder) in names.iter().zip(&holders) {
        let grant = store.claim(name, holder, "a", ttl).await.unwrap().unwrap();
        terms.push(grant.term);
    }
    let leases = key_leases(&store, &config).await;
    assert_eq!(leases.len(), names.len());
    let distinct: HashSet<i64> = leases.into_iter().collect();
    assert_eq!(
        distinct.len(),
        1,
        "every name hangs on the store's one session"
    );
    assert_eq!(store.sessions_opened(), 1);

    // All renewed at once: each answered with its own term, through a handful of keep-alives.
    let before = store.session_keep_alives();
    let renewed = join_all(
        names
            .iter()
            .zip(&holders)
            .map(|(n, h)| store.renew(n, h, ttl)),
    )
    .await;
    let flights = store.session_keep_alives() - before;
    for ((name, term), renewed) in names.iter().zip(&terms).zip(renewed) {
        let grant = renewed.unwrap().unwrap_or_else(|| panic!("{name} renewed"));
        assert_eq!(grant.term, *term, "{name} keeps its term");
    }
    println!("300 concurrent renewals: {flights} session keep-alives");
    assert!(flights <= 3, "300 renewals took {flights} keep-alives");
    // A renewal by another holder token of a name on the session is refused.
    assert!(
        store
            .renew(&names[0], &holders[1], ttl)
            .await
            .unwrap()
            .is_none()
    );

    // Another TTL gets a session of its own.
    let other = HolderToken::mint();
    store
        .claim("other", &other, "b", 2 * ttl)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.sessions_opened(), 2);
    let distinct: HashSet<i64> = key_leases(&store, &config).await.into_iter().collect();
    assert_eq!(distinct.len(), 2);
}

#[tokio::test]
async fn a_release_that_failed_does_not_leave_its_name_held_while_the_session_lives() {
    let config = config("release").op_timeout(Duration::from_secs(1));
    let Some((store, proxy)) = proxied(config.clone()).await else {
        return;
    };
    let direct = EtcdStore::connect(&env::server_url("etcd").unwrap(), config.clone())
        .await
        .unwrap();
    let (holder, sibling) = (HolderToken::mint(), HolderToken::mint());
    store.claim("a", &holder, "a", TTL).await.unwrap().unwrap();
    store.claim("b", &sibling, "a", TTL).await.unwrap().unwrap();

    proxy.set_mode(FaultMode::Cut);
    let failed = store.release("a", &holder).await;
    assert!(failed.is_err(), "the release cannot reach etcd: {failed:?}");
    proxy.set_mode(FaultMode::Pass);
    assert!(
        key_exists(&direct, &config, "a").await,
        "the failed release left the key"
    );

    // The holder keeps renewing its other name: the session lives on, and its keep-alive
    // deletes the key the release left.
    let mut renewed = None;
    for _ in 0..20 {
        match store.renew("b", &sibling, TTL).await {
            Ok(answer) => {
                renewed = answer;
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(renewed.is_some(), "b is still held");
    assert!(
        !key_exists(&direct, &config, "a").await,
        "the session's keep-alive deleted the released name's key"
    );
    let other = HolderToken::mint();
    assert!(
        direct.claim("a", &other, "b", TTL).await.unwrap().is_some(),
        "another holder claims the released name at once"
    );
}

#[tokio::test]
async fn a_term_past_its_own_deadline_ends_though_its_session_lives() {
    let config = config("deadline");
    let Some(store) = store(&config).await else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let (holder, sibling) = (HolderToken::mint(), HolderToken::mint());
    store.claim("a", &holder, "a", ttl).await.unwrap().unwrap();
    store.claim("b", &sibling, "a", ttl).await.unwrap().unwrap();
    // Only b is renewed, for twice a's TTL: every keep-alive renews the whole session.
    let until = Instant::now() + 2 * ttl;
    while Instant::now() < until {
        assert!(store.renew("b", &sibling, ttl).await.unwrap().is_some());
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    assert!(
        !key_exists(&store, &config, "a").await,
        "a's key went once its own deadline passed"
    );
    assert!(store.renew("a", &holder, ttl).await.unwrap().is_none());
    assert!(store.verify("a", &holder).await.unwrap().is_none());
    let other = HolderToken::mint();
    assert!(store.claim("a", &other, "b", ttl).await.unwrap().is_some());
    assert!(store.verify("b", &sibling).await.unwrap().is_some());
}

#[tokio::test]
async fn a_forced_release_ends_that_name_only() {
    let config = config("force");
    let Some(admin) = store(&config).await else {
        return;
    };
    let store = store(&config).await.unwrap();
    let (holder, sibling) = (HolderToken::mint(), HolderToken::mint());
    store.claim("a", &holder, "a", TTL).await.unwrap().unwrap();
    store.claim("b", &sibling, "a", TTL).await.unwrap().unwrap();
    assert!(admin.force_release("a").await.unwrap());
    assert!(store.renew("a", &holder, TTL).await.unwrap().is_none());
    assert!(store.renew("b", &sibling, TTL).await.unwrap().is_some());
    // Forced out, then taken by another: renewed by the old holder, still not its.
    let late = HolderToken::mint();
    store.claim("c", &late, "a", TTL).await.unwrap().unwrap();
    assert!(admin.force_release("c").await.unwrap());
    let other = HolderToken::mint();
    admin.claim("c", &other, "b", TTL).await.unwrap().unwrap();
    assert!(store.renew("c", &late, TTL).await.unwrap().is_none());
}

#[tokio::test]
async fn a_lost_session_ends_all_its_names_and_the_next_claim_opens_another() {
    let config = config("lost");
    let Some(store) = store(&config).await else {
        return;
    };
    let names = ["x", "y", "z"];
    let holders: Vec<HolderToken> = names.iter().map(|_| HolderToken::mint()).collect();
    for (name, holder) in names.iter().zip(&holders) {
        store.claim(name, holder, "a", TTL).await.unwrap().unwrap();
    }
    let session = key_leases(&store, &config).await[0];
    // The session ends (as when etcd lost it: its keep-alive now answers TTL 0).
    let mut client = store.client().clone();
    client.lease_revoke(session).await.unwrap();
    for (name, holder) in names.iter().zip(&holders) {
        assert!(
            store.renew(name, holder, TTL).await.unwrap().is_none(),
            "{name}"
        );
        assert!(
            store.verify(name, holder).await.unwrap().is_none(),
            "{name}"
        );
    }
    let again = HolderToken::mint();
    let grant = store.claim("x", &again, "a", TTL).await.unwrap();
    assert!(grant.is_some(), "the next claim lands on a new session");
    assert_eq!(store.sessions_opened(), 2);
    assert_ne!(key_leases(&store, &config).await, vec![session]);
    assert!(store.renew("x", &again, TTL).await.unwrap().is_some());
}

#[tokio::test]
async fn an_unrenewed_name_ends_at_its_own_deadline_not_at_the_next_keep_alive() {
    let config = config("sweep");
    let Some(observer) = store(&config).await else {
        return;
    };
    let store = store(&config).await.unwrap();
    let ttl = Duration::from_secs(2);
    let (holder, sibling) = (HolderToken::mint(), HolderToken::mint());
    let claimed = Instant::now();
    store.claim("a", &holder, "a", ttl).await.unwrap().unwrap();
    store.claim("b", &sibling, "a", ttl).await.unwrap().unwrap();
    // One renewal of b keeps the session alive well past a's deadline; then nothing flies.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(store.renew("b", &sibling, ttl).await.unwrap().is_some());
    // The session lives to at least 3.5 s after the claim (b's renewal at 1.5 s); a's key goes
    // a round trip after its deadline, 2 s (counted from its claim's answer).
    tokio::time::sleep((ttl + Duration::from_millis(600)).saturating_sub(claimed.elapsed())).await;
    assert!(
        !key_exists(&observer, &config, "a").await,
        "a's key went at its own deadline, though the session lives"
    );
    let other = HolderToken::mint();
    assert!(
        observer
            .claim("a", &other, "b", ttl)
            .await
            .unwrap()
            .is_some()
    );
    assert!(store.verify("b", &sibling).await.unwrap().is_some());
}
