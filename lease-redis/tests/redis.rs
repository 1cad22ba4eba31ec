//! Redis-specific behaviour: connection errors, validation before I/O, the key layout, the
//! durability check, the term schemes, clean-up, bounds on stalled or cut connections.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use lease_conformance::FaultMode;
use lease_core::backend::notify::Topic;
use lease_core::backend::permits::PermitStore;
use lease_core::{ErrorKind, LeaseStore, backend::HolderToken};
use lease_redis::redis::aio::{ConnectionManager, MultiplexedConnection};
use lease_redis::redis::{AsyncTypedCommands, Client};
use lease_redis::{RedisConfig, RedisStore, TermScheme};

const TTL: Duration = Duration::from_millis(600);

/// Held by every test that changes the test server's configuration or depends on it, so that
/// none sees another's change. Each restores what it changed before it releases the lock.
static SERVER_CONFIG: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One `CONFIG GET` value of the test server.
async fn server_config(raw: &mut MultiplexedConnection, param: &str) -> String {
    let v: Vec<String> = lease_redis::redis::cmd("CONFIG")
        .arg("GET")
        .arg(param)
        .query_async(raw)
        .await
        .unwrap();
    v.get(1).cloned().unwrap_or_default()
}

/// `CONFIG SET param value` on the test server.
async fn set_server_config(raw: &mut MultiplexedConnection, param: &str, value: &str) {
    let _: () = lease_redis::redis::cmd("CONFIG")
        .arg("SET")
        .arg(param)
        .arg(value)
        .query_async(raw)
        .await
        .unwrap_or_else(|e| panic!("CONFIG SET {param} {value}: {e}"));
}

fn full_text(e: &lease_core::Error) -> String {
    format!("{e} / {e:?}")
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_naming_host_and_port_but_no_password() {
    let started = Instant::now();
    let e = RedisStore::connect("redis://lease:s3cret@127.0.0.1:1/0", RedisConfig::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_temporary());
    assert_eq!(e.server(), Some("127.0.0.1:1"), "{e}");
    assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
    assert!(!full_text(&e).contains("s3cret"), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_malformed_url_is_refused_naming_the_host_but_no_password() {
    for url in [
        "redis://lease:s3cret@cache-1:notaport/0",
        "redis://lease:s3/cret@cache-1:notaport",
    ] {
        let e = RedisStore::connect(url, RedisConfig::new())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(!e.is_temporary());
        assert!(e.message().contains("cache-1"), "{e}");
        assert!(!full_text(&e).contains("s3"), "{e:?}");
    }
    let e = RedisStore::connect(
        "redis://127.0.0.1:1",
        RedisConfig::new().key_prefix("bad{prefix}:"),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);
}

#[tokio::test]
async fn bad_names_and_ttls_are_refused_before_any_io() {
    let store = common::store_without_server();
    let h = HolderToken::mint();
    let max = store.capabilities().max_name_bytes;
    assert_eq!(max, lease_redis::MAX_NAME_BYTES);
    for bad in [String::new(), "n".repeat(max + 1), "a\0b".to_owned()] {
        let errors = [
            store.claim(&bad, &h, "a", TTL).await.unwrap_err(),
            store.renew(&bad, &h, TTL).await.unwrap_err(),
            store.release(&bad, &h).await.unwrap_err(),
            store.verify(&bad, &h).await.unwrap_err(),
            store.get(&bad).await.unwrap_err(),
            store.force_release(&bad).await.unwrap_err(),
            store.forget(&bad, TTL).await.unwrap_err(),
            store.record_key(&bad).unwrap_err(),
        ];
        for e in errors {
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad:?}: {e}");
        }
    }
    for ttl in [Duration::ZERO, Duration::from_secs(2 * 24 * 3600)] {
        let e = store.claim("ok", &h, "a", ttl).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{e}");
        let e = store.renew("ok", &h, ttl).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{e}");
    }
    let e = store.claim("ok", &h, "", TTL).await.unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::InvalidName,
        "empty instance label: {e}"
    );
    // The same store does reach for the server with a good name, and names it.
    let e = store.get("ok").await.unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout),
        "{e}"
    );
    assert_eq!(e.server(), Some("127.0.0.1:1"), "{e}");
    assert_eq!(
        e.operation(),
        Some(lease_core::layer::Operation::Get),
        "{e}"
    );
    assert_eq!(e.name(), Some("ok"), "{e}");
}

#[tokio::test]
async fn available_reports_the_durability_risk_unless_accepted() {
    let Some(url) = common::url() else { return };
    let _config = SERVER_CONFIG.lock().await;
    let mut raw = common::raw(&url).await;
    let appendonly: Vec<String> = lease_redis::redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query_async(&mut raw)
        .await
        .unwrap();
    let policy: Vec<String> = lease_redis::redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(&mut raw)
        .await
        .unwrap();
    let fsync = server_config(&mut raw, "appendfsync").await;
    let durable = appendonly.get(1).map(String::as_str) == Some("yes")
        && fsync == "always"
        && !policy.get(1).is_some_and(|p| p.starts_with("allkeys-"));

    let Some(strict) = common::direct(&url, RedisConfig::new()).await else {
        return;
    };
    match strict.available().await {
        Ok(()) => assert!(durable, "a volatile server passed the check"),
        Err(e) => {
            assert!(!durable, "a durable server failed the check: {e}");
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
            assert!(!e.is_temporary());
            assert!(e.message().contains("allow_volatile"), "{e}");
            assert!(e.message().contains("appendonly"), "{e}");
        }
    }
    let accepting = common::direct(&url, RedisConfig::new().allow_volatile(true))
        .await
        .unwrap();
    accepting.available().await.unwrap();
    let floored = common::direct(&url, RedisConfig::new().term_scheme(TermScheme::ClockFloor))
        .await
        .unwrap();
    floored.available().await.unwrap();
}

/// A new ACL user with password `pw`, every key, and `rules` (e.g. `+@all -config`): its name
/// and `url` with its credentials. [`drop_acl_user`] removes it.
async fn acl_user(url: &str, tag: &str, rules: &[&str]) -> (String, String) {
    let user = common::unique(tag).trim_end_matches('-').to_owned();
    let mut raw = common::raw(url).await;
    let _: () = lease_redis::redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg(rules)
        .query_async(&mut raw)
        .await
        .unwrap();
    let with_user = url.replacen("redis://", &format!("redis://{user}:pw@"), 1);
    (user, with_user)
}

async fn drop_acl_user(url: &str, user: &str) {
    let mut raw = common::raw(url).await;
    let _: i64 = lease_redis::redis::cmd("ACL")
        .arg("DELUSER")
        .arg(user)
        .query_async(&mut raw)
        .await
        .unwrap();
}

#[tokio::test]
async fn available_says_when_durability_cannot_be_checked() {
    let Some(url) = common::url() else { return };
    // A user that may run the scripts but not CONFIG, as on many managed services.
    let (user, restricted) = acl_user(&url, "lease-test-", &["+@all", "-config"]).await;
    let strict = common::direct(&restricted, RedisConfig::new())
        .await
        .unwrap();
    let refused = strict.available().await;
    let accepting = common::direct(&restricted, RedisConfig::new().allow_volatile(true))
        .await
        .unwrap();
    let accepted = accepting.available().await;
    drop_acl_user(&url, &user).await;

    let e = refused.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(e.message().contains("cannot be checked"), "{e}");
    assert!(!full_text(&e).contains(":pw"), "{e:?}");
    accepted.unwrap();
}

#[tokio::test]
async fn one_hash_per_name_under_its_own_hash_tag_and_no_key_ttl() {
    let Some(url) = common::url() else { return };
    let prefix = common::unique("lk");
    let Some(store) = common::direct(&url, common::config().key_prefix(&prefix)).await else {
        return;
    };
    let mut raw = common::raw(&url).await;
    let name = "orders{eu}%7D";
    let key = store.record_key(name).unwrap();
    assert_eq!(key, format!("{prefix}{{orders%7Beu%7D%257D}}"));
    let h = HolderToken::mint();
    let g = store
        .claim(name, &h, "worker-1", TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        raw.key_type(&key).await.unwrap(),
        lease_redis::redis::ValueType::Hash
    );
    let fields: std::collections::HashMap<String, String> = raw.hgetall(&key).await.unwrap();
    assert_eq!(fields.get("holder"), Some(&h.to_hex()));
    assert_eq!(fields.get("instance").map(String::as_str), Some("worker-1"));
    assert_eq!(fields.get("term"), Some(&g.term.to_string()));
    assert!(fields.contains_key("expires_at_ms"));
    assert_eq!(fields.len(), 4, "{fields:?}");
    assert_eq!(
        raw.pttl(&key).await.unwrap(),
        -1,
        "the record has a key TTL"
    );
    store.renew(name, &h, TTL).await.unwrap().unwrap();
    assert!(store.release(name, &h).await.unwrap());
    assert_eq!(
        raw.pttl(&key).await.unwrap(),
        -1,
        "the record has a key TTL"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let info = store.get(name).await.unwrap().unwrap();
    assert_eq!((info.term, info.live), (g.term, false));
    // Nothing else was written.
    let keys: Vec<String> = raw.keys(format!("{prefix}*")).await.unwrap();
    assert_eq!(keys, vec![key.clone()]);
    let _: usize = raw.del(&key).await.unwrap();
}

#[tokio::test]
async fn counter_terms_restart_after_a_lost_record_and_clock_floor_terms_do_not() {
    let Some(url) = common::url() else { return };
    let prefix = common::unique("tl");
    let mut raw = common::raw(&url).await;
    let name = "job";

    // Counter: +1 per claim, back to 1 once the record is gone (what a restart without AOF
    // does to every name): the hazard the docs and available() warn about.
    let Some(counter) = common::direct(&url, common::config().key_prefix(&prefix)).await else {
        return;
    };
    let key = counter.record_key(name).unwrap();
    let a = HolderToken::mint();
    assert_eq!(
        counter
            .claim(name, &a, "a", TTL)
            .await
            .unwrap()
            .unwrap()
            .term,
        1
    );
    assert!(counter.release(name, &a).await.unwrap());
    assert_eq!(
        counter
            .claim(name, &a, "a", TTL)
            .await
            .unwrap()
            .unwrap()
            .term,
        2
    );
    let _: usize = raw.del(&key).await.unwrap();
    assert_eq!(
        counter
            .claim(name, &a, "a", TTL)
            .await
            .unwrap()
            .unwrap()
            .term,
        1
    );
    let _: usize = raw.del(&key).await.unwrap();

    // Clock floor: terms at least the server's clock in microseconds, still increasing after
    // the record is lost.
    let floored = common::direct(
        &url,
        common::config()
            .key_prefix(&prefix)
            .term_scheme(TermScheme::ClockFloor),
    )
    .await
    .unwrap();
    let (secs, micros): (u64, u64) = lease_redis::redis::cmd("TIME")
        .query_async(&mut raw)
        .await
        .unwrap();
    let server_us = secs * 1_000_000 + micros;
    let t1 = floored
        .claim(name, &a, "a", TTL)
        .await
        .unwrap()
        .unwrap()
        .term;
    assert!(t1 >= server_us && t1 < (1 << 53), "{t1} vs {server_us}");
    assert!(floored.claim(name, &a, "a", TTL).await.unwrap().is_none());
    assert!(floored.release(name, &a).await.unwrap());
    let t2 = floored
        .claim(name, &a, "a", TTL)
        .await
        .unwrap()
        .unwrap()
        .term;
    assert!(t2 > t1);
    assert_eq!(floored.verify(name, &a).await.unwrap().unwrap().term, t2);
    let _: usize = raw.del(&key).await.unwrap();
    let t3 = floored
        .claim(name, &a, "a", TTL)
        .await
        .unwrap()
        .unwrap()
        .term;
    assert!(t3 > t2, "a lost record brought the term back: {t3} <= {t2}");
    let info = floored.get(name).await.unwrap().unwrap();
    assert_eq!(info.term, t3);
    let _: usize = raw.del(&key).await.unwrap();
}

#[tokio::test]
async fn forget_and_purge_remove_only_leases_that_ended_long_enough_ago() {
    let Some(url) = common::url() else { return };
    let prefix = common::unique("pg");
    let Some(store) = common::direct(&url, common::config().key_prefix(&prefix)).await else {
        return;
    };
    let (live, released, expired) = ("live", "released{x}", "expired");
    let h = HolderToken::mint();
    store.claim(live, &h, "a", TTL).await.unwrap().unwrap();
    store.claim(released, &h, "a", TTL).await.unwrap().unwrap();
    assert!(store.release(released, &h).await.unwrap());
    store
        .claim(expired, &h, "a", Duration::from_millis(30))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;

    assert!(
        store
            .purge_expired(Duration::from_secs(60))
            .await
            .unwrap()
            .is_empty()
    );
    let mut purged = store.purge_expired(Duration::ZERO).await.unwrap();
    purged.sort();
    assert_eq!(purged, vec![expired.to_owned(), released.to_owned()]);
    assert_eq!(store.get(released).await.unwrap(), None);
    assert_eq!(store.get(expired).await.unwrap(), None);
    assert!(store.get(live).await.unwrap().unwrap().live);

    assert!(
        !store.forget(live, Duration::ZERO).await.unwrap(),
        "a live lease was forgotten"
    );
    assert!(store.release(live, &h).await.unwrap());
    assert!(!store.forget(live, Duration::from_secs(60)).await.unwrap());
    assert!(store.forget(live, Duration::ZERO).await.unwrap());
    assert_eq!(store.get(live).await.unwrap(), None);
    assert!(!store.forget("never-claimed", Duration::ZERO).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_and_cut_connections_give_bounded_temporary_errors_then_recover() {
    let Some(url) = common::url() else { return };
    let bound = Duration::from_millis(300);
    let config = common::config().operation_timeout(Some(bound));
    let Some((store, proxy)) = common::proxied(&url, config).await else {
        return;
    };
    let name = format!("{}stall", common::unique("st"));
    let h = HolderToken::mint();
    store
        .claim(&name, &h, "a", TTL * 10)
        .await
        .unwrap()
        .unwrap();

    proxy.set_mode(FaultMode::Stall);
    let started = Instant::now();
    let e = store.verify(&name, &h).await.unwrap_err();
    let took = started.elapsed();
    // Sent, no answer within the bound: Timeout (outcome unknown), never Unavailable.
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.is_temporary(), "{e}");
    assert!(took < bound * 3, "a stalled verify took {took:?}");
    assert_eq!(
        e.server(),
        Some(proxy.local_addr().to_string().as_str()),
        "{e}"
    );
    assert_eq!(
        e.operation(),
        Some(lease_core::layer::Operation::Verify),
        "{e}"
    );

    proxy.set_mode(FaultMode::Cut);
    let started = Instant::now();
    let e = store.verify(&name, &h).await.unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Timeout | ErrorKind::Unavailable),
        "{e}"
    );
    assert!(e.is_temporary(), "{e}");
    assert!(started.elapsed() < bound * 3, "{:?}", started.elapsed());

    proxy.set_mode(FaultMode::Pass);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match store.verify(&name, &h).await {
            Ok(Some(g)) => {
                assert_eq!(g.term, 1);
                break;
            }
            Ok(None) => panic!("the lease was lost"),
            Err(e) if Instant::now() < deadline => {
                assert!(e.is_temporary(), "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the store did not recover: {e}"),
        }
    }
    assert!(store.release(&name, &h).await.unwrap());
}

#[tokio::test]
async fn a_foreign_value_under_the_prefix_is_a_permanent_backend_error() {
    let Some(url) = common::url() else { return };
    let prefix = common::unique("wt");
    let Some(store) = common::direct(&url, common::config().key_prefix(&prefix)).await else {
        return;
    };
    let mut raw = common::raw(&url).await;
    let key = store.record_key("x").unwrap();
    raw.set(&key, "not a lease").await.unwrap();
    let e = store
        .claim("x", &HolderToken::mint(), "a", TTL)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    assert!(!e.is_temporary(), "{e}");
    assert!(e.message().contains("prefix"), "{e}");
    let _: usize = raw.del(&key).await.unwrap();
}

#[tokio::test]
async fn the_store_runs_on_any_async_connection() {
    let Some(url) = common::url() else { return };
    let conn: MultiplexedConnection = common::raw(&url).await;
    let store = RedisStore::with_client(conn, common::config()).unwrap();
    let name = format!("{}mux", common::unique("mx"));
    let h = HolderToken::mint();
    let g = store.claim(&name, &h, "a", TTL).await.unwrap().unwrap();
    assert_eq!(store.verify(&name, &h).await.unwrap().unwrap().term, g.term);
    assert!(store.release(&name, &h).await.unwrap());
    assert!(format!("{store:?}").contains("RedisStore"));
}

/// Runs `checks` (in a task of its own) with the test server's parameters set as `set` says,
/// then restores them, even when a check panicked, and only then passes the panic on.
async fn with_server_config<T: Send + 'static>(
    raw: &mut MultiplexedConnection,
    set: &[(&str, &str)],
    checks: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let mut saved = Vec::new();
    for (param, _) in set {
        saved.push((*param, server_config(raw, param).await));
    }
    for (param, value) in set {
        set_server_config(raw, param, value).await;
    }
    let result = tokio::spawn(checks).await;
    for (param, value) in saved.iter().rev() {
        set_server_config(raw, param, value).await;
    }
    match result {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// AOF synced once a second (Redis's default) can lose the last second of claims on a host crash,
/// so a `Counter` term could repeat: refused unless accepted by `allow_fsync_everysec` (or
/// `allow_volatile`), or the terms are clock-floored.
#[tokio::test]
async fn available_refuses_appendfsync_everysec_unless_accepted() {
    let Some(url) = common::url() else { return };
    let _config = SERVER_CONFIG.lock().await;
    let mut raw = common::raw(&url).await;
    if server_config(&mut raw, "maxmemory-policy")
        .await
        .starts_with("allkeys-")
    {
        panic!("the test server evicts keys (maxmemory-policy allkeys-*); use noeviction");
    }
    let u = url.clone();
    with_server_config(
        &mut raw,
        &[("appendonly", "yes"), ("appendfsync", "everysec")],
        async move {
            let store = |config: RedisConfig| {
                let u = u.clone();
                async move { common::direct(&u, config).await.unwrap() }
            };
            let e = store(RedisConfig::new())
                .await
                .available()
                .await
                .expect_err("appendfsync everysec passed the durability check");
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
            assert!(!e.is_temporary(), "{e}");
            assert!(e.message().contains("appendfsync is everysec"), "{e}");
            assert!(e.message().contains("allow_fsync_everysec"), "{e}");
            assert!(!e.message().contains("appendonly is off"), "{e}");
            for accepted in [
                RedisConfig::new().allow_fsync_everysec(true),
                RedisConfig::new().allow_volatile(true),
                RedisConfig::new().term_scheme(TermScheme::ClockFloor),
            ] {
                store(accepted.clone())
                    .await
                    .available()
                    .await
                    .unwrap_or_else(|e| panic!("{accepted:?}: {e}"));
            }
        },
    )
    .await;
    let u = url.clone();
    with_server_config(
        &mut raw,
        &[("appendonly", "yes"), ("appendfsync", "no")],
        async move {
            let e = common::direct(&u, RedisConfig::new().allow_fsync_everysec(true))
                .await
                .unwrap()
                .available()
                .await
                .expect_err("appendfsync no passed the durability check");
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
            assert!(e.message().contains("appendfsync is no"), "{e}");
        },
    )
    .await;
    let u = url.clone();
    with_server_config(
        &mut raw,
        &[("appendonly", "yes"), ("appendfsync", "always")],
        async move {
            common::direct(&u, RedisConfig::new())
                .await
                .unwrap()
                .available()
                .await
                .expect("AOF synced on every write is durable");
        },
    )
    .await;
}

/// A store on a `ConnectionManager` of its own, built with `with_client` (no I/O, no check).
async fn built_with_client(url: &str, config: RedisConfig) -> RedisStore {
    let client = Client::open(url).unwrap();
    let manager = ConnectionManager::new_with_config(client, config.manager_config())
        .await
        .unwrap();
    RedisStore::with_client(manager, config).unwrap()
}

/// A store built with `with_client` on a server without AOF, on which nobody calls `available()`,
/// still refuses to hand out terms: the store runs its start-up check before its first claim,
/// acquire or heartbeat, so a coordinator, a group worker and a scheduler over it refuse to start;
/// `allow_volatile` lets them.
#[tokio::test]
async fn a_store_built_with_client_checks_the_server_before_its_first_claim() {
    use lease_core::{
        Coordinator, GroupWorker, Timings,
        backend::{membership::MembershipStore, partitions::PartitionStore, slots::SlotStore},
    };
    let Some(url) = common::url() else { return };
    let _config = SERVER_CONFIG.lock().await;
    let mut raw = common::raw(&url).await;
    let u = url.clone();
    with_server_config(&mut raw, &[("appendonly", "no")], async move {
        let prefix = common::unique("chk");
        let strict = built_with_client(&u, RedisConfig::new().key_prefix(prefix.clone())).await;
        let h = HolderToken::mint();
        let refused = |what: &str, e: lease_core::Error| {
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{what}: {e}");
            assert!(e.message().contains("appendonly is off"), "{what}: {e}");
            assert!(e.message().contains("allow_volatile"), "{what}: {e}");
        };
        refused(
            "claim",
            strict.claim("job", &h, "a", TTL).await.unwrap_err(),
        );
        refused(
            "claim_slot",
            strict
                .claim_slot("job", &h, "a", TTL, 1_000)
                .await
                .unwrap_err(),
        );
        refused(
            "acquire_partition",
            strict
                .acquire_partition("grp", 0, "o@1", TTL)
                .await
                .unwrap_err(),
        );
        refused(
            "heartbeat",
            strict
                .heartbeat("svc", "n", "", TTL, &[])
                .await
                .unwrap_err(),
        );
        let timings = Timings::from_lease(Duration::from_secs(3)).unwrap();
        let coordinator = Coordinator::builder(strict.clone())
            .instance("a")
            .timings(timings)
            .build()
            .unwrap();
        refused(
            "coordinator",
            coordinator.try_acquire("job").await.unwrap_err(),
        );
        refused(
            "group worker",
            GroupWorker::builder(strict.clone(), "grp", 4)
                .timings(timings)
                .start()
                .await
                .unwrap_err(),
        );
        // Nothing was written under the prefix.
        let mut raw = common::raw(&u).await;
        let keys: Vec<String> = lease_redis::redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(keys.is_empty(), "written despite the refusal: {keys:?}");

        // Opting in explicitly: the same paths work.
        let accepting = built_with_client(
            &u,
            RedisConfig::new().key_prefix(prefix).allow_volatile(true),
        )
        .await;
        let coordinator = Coordinator::builder(accepting.clone())
            .instance("a")
            .timings(timings)
            .build()
            .unwrap();
        let term = coordinator.try_acquire("job").await.unwrap();
        term.resign().await.unwrap();
        let worker = GroupWorker::builder(accepting, "grp", 4)
            .timings(timings)
            .start()
            .await
            .unwrap();
        worker.leave().await.unwrap();
    })
    .await;
}

/// The application's own commands convert with the store's verdict (`lease_err`): a command
/// against a key of another type is permanent and carries no hint about the lease scripts; a
/// server that cannot be reached is `Unavailable`, temporary.
#[tokio::test]
async fn the_applications_redis_errors_convert_with_the_stores_verdict() {
    use lease_redis::RedisResultExt;
    let Some(url) = common::url() else {
        return;
    };
    let mut raw = common::raw(&url).await;
    let key = format!("{}k", common::unique("app-errors-"));
    let _: () = lease_redis::redis::cmd("SET")
        .arg(&key)
        .arg("x")
        .query_async(&mut raw)
        .await
        .unwrap();
    let e = lease_redis::redis::cmd("LPUSH")
        .arg(&key)
        .arg("y")
        .query_async::<i64>(&mut raw)
        .await
        .lease_err("queue the job")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    assert!(!e.is_temporary(), "{e}");
    assert!(e.message().starts_with("queue the job: "), "{e}");
    assert!(!e.message().contains("prefix"), "no lease hint: {e}");
    assert!(std::error::Error::source(&e).is_some());
    let _: () = lease_redis::redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();

    let e = Client::open("redis://127.0.0.1:1")
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .map(drop)
        .lease_err("connect for the jobs")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_temporary(), "{e}");
}

/// A user who may not publish (Redis 7's default for new users is `acl-pubsub-default
/// resetchannels`) can still claim, renew and release names and permits: the hint a script
/// publishes after its write is a hint, and a refused `PUBLISH` must not turn a write that took
/// effect into an error (Redis keeps a script's writes before an error: the caller would be
/// told "failed" about a lease or permit it holds, under a token nobody uses, until its TTL).
#[tokio::test]
async fn a_user_who_may_not_publish_still_claims_and_releases() {
    let Some(url) = common::url() else { return };
    let (user, restricted) = acl_user(&url, "lease-nopub-", &["resetchannels", "+@all"]).await;
    let outcome = async {
        let store = common::direct(&restricted, common::config())
            .await
            .ok_or("no store")?;
        let name = common::unique("nopub");
        let h = HolderToken::mint();
        store
            .claim(&name, &h, "w", TTL)
            .await
            .map_err(|e| format!("claim: {e}"))?
            .ok_or("claim of a free name refused")?;
        store
            .renew(&name, &h, TTL)
            .await
            .map_err(|e| format!("renew: {e}"))?
            .ok_or("renewal refused")?;
        if !store
            .release(&name, &h)
            .await
            .map_err(|e| format!("release: {e}"))?
        {
            return Err("release ended nothing".to_owned());
        }
        let counted = common::unique("nopub-counted");
        let p = store
            .claim_permit(&counted, 2, &h, "w", TTL)
            .await
            .map_err(|e| format!("claim_permit: {e}"))?
            .ok_or("permit claim refused")?;
        if !store
            .release_permit(&counted, p.permit, &h)
            .await
            .map_err(|e| format!("release_permit: {e}"))?
        {
            return Err("permit release ended nothing".to_owned());
        }
        let left = store
            .permits(&counted)
            .await
            .map_err(|e| format!("permits: {e}"))?;
        if left.iter().any(|i| i.live) {
            return Err(format!("permits left held: {left:?}"));
        }
        let hints = store
            .changes(&Topic::lease(&name))
            .ok_or("the store gives no hints")?;
        if hints.is_connected() {
            return Err("the hints of a store that cannot publish say connected".to_owned());
        }
        Ok::<(), String>(())
    }
    .await;
    drop_acl_user(&url, &user).await;
    outcome.unwrap();
}

/// With `replica_acks`, every operation's pipeline publishes on `<prefix>replica-sync` after
/// its script: a user who may not publish is refused at the start-up check, before the first
/// claim, with `Unsupported` naming the channel, and the refused claim writes nothing. Passed at
/// start-up, each claim would take effect and then fail on the refused `PUBLISH` with a
/// permanent `Backend` error (the name held, by a token nobody knew, until its TTL).
#[tokio::test]
async fn with_replica_acks_a_user_who_may_not_publish_is_refused_at_start_up() {
    let Some(url) = common::url() else { return };
    let (user, restricted) = acl_user(&url, "lease-nopub-acks-", &["resetchannels", "+@all"]).await;
    let outcome = async {
        let config = common::config()
            .key_prefix(common::unique("nopub-acks-"))
            .replica_acks(1, Duration::from_millis(50));
        let store = common::direct(&restricted, config)
            .await
            .ok_or("no store")?;
        let name = "n";
        let claim = store.claim(name, &HolderToken::mint(), "w", TTL).await;
        let key = store.record_key(name).map_err(|e| e.to_string())?;
        let mut raw = common::raw(&url).await;
        let written: i64 = lease_redis::redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .map_err(|e| format!("EXISTS: {e}"))?;
        match claim {
            Err(e)
                if e.kind() == ErrorKind::Unsupported && e.message().contains("replica-sync") => {}
            other => return Err(format!("the claim answered {other:?}")),
        }
        if written != 0 {
            return Err("the refused claim wrote the record".to_owned());
        }
        let e = store.available().await.err().ok_or("available() passed")?;
        if e.kind() != ErrorKind::Unsupported {
            return Err(format!("available(): {e}"));
        }
        Ok::<(), String>(())
    }
    .await;
    drop_acl_user(&url, &user).await;
    outcome.unwrap();
}

/// A user who may subscribe but not publish (`-publish`; channel rights alike): its store finds
/// out at its start-up check and says its hints are disconnected — its claims and releases
/// reach no other process's subscriber, and where the processes share the user, theirs reach
/// none here — so its waiters keep their polling pace; it still claims and releases. A
/// subscription made again later (the subscriber killed) does not turn the hints connected.
/// Hints that said connected from the subscription on would make a waiter of this store wait
/// on hints another process of the same user never sends (5 s for a release whose waiter's
/// retry is 0.8 s).
#[tokio::test]
async fn a_store_that_may_not_publish_says_its_hints_are_disconnected() {
    let Some(url) = common::url() else { return };
    let (user, restricted) = acl_user(
        &url,
        "lease-subonly-",
        &["allchannels", "+@all", "-publish"],
    )
    .await;
    let prefix = common::unique("subonly-");
    let outcome = async {
        let config = common::config().key_prefix(&prefix);
        let store = common::direct(&restricted, config)
            .await
            .ok_or("no store")?;
        let name = "n";
        let mut w = store
            .changes(&Topic::lease(name))
            .ok_or("the store gives no hints")?;
        // Subscribing is allowed: the hints say connected until the check.
        let until = Instant::now() + Duration::from_secs(10);
        while !w.is_connected() {
            if Instant::now() > until {
                return Err("the subscriber did not subscribe within 10 s".to_owned());
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), w.changed()).await;
        }
        store
            .available()
            .await
            .map_err(|e| format!("available: {e}"))?;
        if w.is_connected() {
            return Err(
                "after the check, the hints of a store that may not publish say connected"
                    .to_owned(),
            );
        }
        let h = HolderToken::mint();
        store
            .claim(name, &h, "w", TTL)
            .await
            .map_err(|e| format!("claim: {e}"))?
            .ok_or("claim of a free name refused")?;
        if !store
            .release(name, &h)
            .await
            .map_err(|e| format!("release: {e}"))?
        {
            return Err("release ended nothing".to_owned());
        }

        // The subscriber is killed and subscribes again: still disconnected. A hint that
        // arrives after the kill (published by a user who may) came through the new
        // subscription, which is then up and past the point where it would say connected.
        let mut raw = common::raw(&url).await;
        let _: i64 = lease_redis::redis::cmd("CLIENT")
            .arg("KILL")
            .arg("USER")
            .arg(&user)
            .query_async(&mut raw)
            .await
            .map_err(|e| format!("CLIENT KILL: {e}"))?;
        let key = store.record_key(name).map_err(|e| e.to_string())?;
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            w.mark_seen();
            let _: i64 = lease_redis::redis::cmd("PUBLISH")
                .arg(format!("{prefix}changes"))
                .arg(format!("lease {key}"))
                .query_async(&mut raw)
                .await
                .map_err(|e| format!("PUBLISH: {e}"))?;
            if tokio::time::timeout(Duration::from_millis(200), w.changed())
                .await
                .is_ok()
            {
                break;
            }
            if Instant::now() > until {
                return Err("no hint through a new subscription within 10 s".to_owned());
            }
        }
        if w.is_connected() {
            return Err("the subscription made again says connected".to_owned());
        }
        Ok::<(), String>(())
    }
    .await;
    drop_acl_user(&url, &user).await;
    outcome.unwrap();
}
