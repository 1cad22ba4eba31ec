//! `lease::open` on every compiled backend: the store it returns answers as the backend's own
//! store (backend name, capabilities, `available()`), carries leases, and answers the
//! operations its backend lacks with `Unsupported`, as its capabilities say. Server backends
//! read `LEASE_TEST_<BACKEND>_URL` and print one SKIPPED line without it.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unused_imports)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease::backend::HolderToken;
use lease::{
    Backend, ErrorKind, LeaseStore, OpenOptions, Store, UrlError,
    backend::{
        LeaseStoreExt, membership::MembershipStore, partitions::PartitionStore, slots::SlotStore,
    },
};
use lease_conformance::env::server_url;

fn unique(what: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("facade-{what}-{}-{nanos}", std::process::id())
}

/// The checks every opened store must pass; `own` is the backend's store opened directly.
async fn check(store: &Store, backend: Backend, own: &dyn LeaseStore) {
    assert_eq!(store.url_backend(), backend);
    assert_eq!(store.backend(), own.backend());
    let caps = store.capabilities();
    assert_eq!(caps, own.capabilities(), "{backend}");
    store.available().await.unwrap();
    own.available().await.unwrap();

    let name = unique("lease");
    let ttl = caps.fixed_ttl.unwrap_or(Duration::from_secs(5));
    store.validate_name(&name).unwrap();
    store.validate_ttl(ttl).unwrap();
    let holder = HolderToken::mint();
    let grant = store
        .claim(&name, &holder, "facade", ttl)
        .await
        .unwrap()
        .expect("a fresh name is free");
    let seen = store.verify(&name, &holder).await.unwrap();
    assert_eq!(seen.map(|g| g.term), Some(grant.term));
    assert!(store.renew(&name, &holder, ttl).await.unwrap().is_some());
    assert_eq!(
        store.get(&name).await.unwrap().map(|i| i.term),
        Some(grant.term)
    );
    let forced = store.force_release(&name).await;
    if caps.force_release {
        assert!(forced.unwrap(), "{backend}");
    } else {
        assert_eq!(forced.unwrap_err().kind(), ErrorKind::Unsupported);
        assert!(store.release(&name, &holder).await.unwrap());
    }

    let group = unique("group");
    let owner = format!("node-a@{:016x}", 7);
    assert_eq!(
        store.partition_store().is_some(),
        caps.partitions,
        "{backend}"
    );
    assert_eq!(
        store.membership_store().is_some(),
        caps.membership,
        "{backend}"
    );
    assert_eq!(store.slot_store().is_some(), caps.slots, "{backend}");
    assert_eq!(store.permit_store().is_some(), caps.permits, "{backend}");
    if let Some(partitions) = store.partition_store() {
        let p = partitions
            .acquire_partition(&group, 0, &owner, ttl)
            .await
            .unwrap();
        assert!(p.is_some());
        assert_eq!(partitions.owners(&group).await.unwrap().len(), 1);
        assert_eq!(
            partitions
                .renew_partitions(&group, &[0], &owner, ttl)
                .await
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            partitions
                .release_partitions(&group, &[0], &owner)
                .await
                .unwrap(),
            1
        );
    }
    if let Some(membership) = store.membership_store() {
        let service = unique("svc");
        membership
            .heartbeat(&service, "node-a", "10.0.0.1:80", ttl, &[])
            .await
            .unwrap();
        assert_eq!(membership.members(&service).await.unwrap().len(), 1);
        assert!(membership.leave(&service, "node-a").await.unwrap());
    }
    if backend == Backend::Etcd {
        // etcd keeps no scheduler slots (its API has no server clock to judge an instant by):
        // the facade's store has no slot store, as its capabilities say, and a scheduler on it
        // is refused with Unsupported.
        assert!(!caps.slots, "{backend}");
        assert!(store.slot_store().is_none(), "{backend}");
        let e = lease::Scheduler::builder(store.clone())
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    } else {
        // Every other backend keeps scheduler slots (NATS in its slot bucket).
        assert!(caps.slots, "{backend}");
        let slots = store.slot_store().expect("a store with slots");
        assert_eq!(slots.last_slot(&unique("job")).await.unwrap(), None);
    }
}

#[test]
fn bad_urls_are_refused_before_any_io() {
    let options = OpenOptions::new();
    for (url, says) in [
        ("no-scheme-here", "no scheme"),
        ("ftp://example/x", "'ftp' is not supported"),
        ("postgres://u:s3cr3t@db:notaport/x", "bad port"),
        (
            "redis://u:s3cr3t@h:6379?allow_volatile=maybe",
            "allow_volatile",
        ),
        ("nats://u:s3cr3t@h:4222?colour=blue", "colour"),
    ] {
        let e = lease::check_url(url, &options).unwrap_err();
        let backend = url
            .split_once("://")
            .and_then(|(s, _)| Backend::from_scheme(s));
        if backend.is_some_and(|b| !b.is_compiled()) {
            assert!(e.message().contains("not compiled in"), "{e}");
            continue;
        }
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{url}: {e}");
        assert!(UrlError::of(&e).is_some(), "{url}");
        assert!(e.message().contains(says), "{url}: {e}");
        assert!(!format!("{e} {e:?}").contains("s3cr3t"), "{e:?}");
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_url_parameter_and_an_option_must_agree() {
    let file = std::env::temp_dir().join(format!("{}.db", unique("agree")));
    let url = format!("sqlite://{}?table=facade_jobs", file.display());
    let e = lease::open(&url, &OpenOptions::new().sql_table("other"))
        .await
        .unwrap_err();
    assert!(
        matches!(UrlError::of(&e), Some(UrlError::Conflict { name, .. }) if name == "table"),
        "{e}"
    );
    assert!(!file.exists(), "refused before any I/O");
    let store = lease::open(&url, &OpenOptions::new().sql_table("facade_jobs"))
        .await
        .unwrap();
    let Some(sqlite) = store.downcast_ref::<lease::sql::SqliteStore>() else {
        panic!("{store:?}")
    };
    assert_eq!(sqlite.config().table_name(), "facade_jobs");
    drop(store);
    let _ = std::fs::remove_file(&file);
}

/// `hints=off` in the URL, or `OpenOptions::hints(false)`, reach the SQL store's config; the
/// default is on. Each store's waiters then hear from it whether hints may be missing.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sql_hints_can_be_turned_off() {
    use lease::backend::notify::Topic;
    let file = std::env::temp_dir().join(format!("{}.db", unique("hints")));
    let plain = format!("sqlite://{}", file.display());
    for (url, options, on) in [
        (plain.clone(), OpenOptions::new(), true),
        (format!("{plain}?hints=off"), OpenOptions::new(), false),
        (format!("{plain}?hints=on"), OpenOptions::new(), true),
        (plain.clone(), OpenOptions::new().hints(false), false),
        (
            format!("{plain}?hints=off"),
            OpenOptions::new().hints(false),
            false,
        ),
    ] {
        let store = lease::open(&url, &options).await.unwrap();
        let Some(sqlite) = store.downcast_ref::<lease::sql::SqliteStore>() else {
            panic!("{store:?}")
        };
        assert_eq!(sqlite.config().hints_enabled(), on, "{url} {options:?}");
        let w = store.changes(&Topic::lease("facade-hints")).unwrap();
        assert_eq!(w.is_connected(), on, "{url} {options:?}");
    }
    let e = lease::open(
        &format!("{plain}?hints=off"),
        &OpenOptions::new().hints(true),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(UrlError::of(&e), Some(UrlError::Conflict { name, .. }) if name == "hints"),
        "{e}"
    );
    let e = lease::open(&format!("{plain}?hints=sometimes"), &OpenOptions::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        matches!(UrlError::of(&e), Some(UrlError::BadParameter { name, .. }) if name == "hints"),
        "{e}"
    );
    let _ = std::fs::remove_file(&file);
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite() {
    let file = std::env::temp_dir().join(format!("{}.db", unique("sqlite")));
    let url = format!("sqlite://{}", file.display());
    let store = lease::open(&url, &OpenOptions::new()).await.unwrap();
    let own = lease::sql::SqliteStore::connect(&url, lease::sql::SqlConfig::default())
        .await
        .unwrap();
    check(&store, Backend::Sqlite, &own).await;
    drop(store);
    let _ = std::fs::remove_file(&file);
}

#[cfg(feature = "memory")]
#[tokio::test]
async fn memory() {
    let store = lease::open("memory://", &OpenOptions::new()).await.unwrap();
    check(&store, Backend::Memory, &lease::memory::MemoryStore::new()).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres() {
    let Some(url) = server_url("postgres") else {
        return;
    };
    let store = lease::open(&url, &OpenOptions::new()).await.unwrap();
    let own = lease::sql::PostgresStore::connect(&url, lease::sql::SqlConfig::default())
        .await
        .unwrap();
    check(&store, Backend::Postgres, &own).await;
    let Some(pg) = store.downcast_ref::<lease::sql::PostgresStore>() else {
        panic!("{store:?}")
    };
    assert!(pg.config().hints_enabled());
    let sep = if url.contains('?') { '&' } else { '?' };
    let off = lease::open(&format!("{url}{sep}hints=off"), &OpenOptions::new())
        .await
        .unwrap();
    let Some(pg) = off.downcast_ref::<lease::sql::PostgresStore>() else {
        panic!("{off:?}")
    };
    assert!(
        !pg.config().hints_enabled(),
        "hints=off did not reach the store"
    );
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql() {
    let Some(url) = server_url("mysql") else {
        return;
    };
    let store = lease::open(&url, &OpenOptions::new()).await.unwrap();
    let own = lease::sql::MySqlStore::connect(&url, lease::sql::SqlConfig::default())
        .await
        .unwrap();
    check(&store, Backend::MySql, &own).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn an_unreachable_server_is_unavailable_without_its_password() {
    let e = lease::open("postgres://u:s3cr3t@127.0.0.1:1/db", &OpenOptions::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(UrlError::of(&e).is_none());
    assert!(!format!("{e} {e:?}").contains("s3cr3t"), "{e:?}");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis() {
    let Some(url) = server_url("redis") else {
        return;
    };
    // Whether the test server keeps its records or not, the facade answers as lease-redis does:
    // refused (with the parameters that accept it named) or opened.
    match lease::open(&url, &OpenOptions::new()).await {
        Ok(store) => assert_eq!(store.url_backend(), Backend::Redis),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
            assert!(e.message().contains("?allow_volatile=1"), "{e}");
            // Said once: lease-redis's reason is in the message, not repeated as a source.
            let shown = e.to_string();
            assert_eq!(
                shown.matches("may lose lease records").count(),
                1,
                "{shown}"
            );
        }
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    let store = lease::open(&format!("{url}{sep}allow_volatile=1"), &OpenOptions::new())
        .await
        .unwrap();
    let own = lease::redis::RedisStore::connect(
        &url,
        lease::redis::RedisConfig::new().allow_volatile(true),
    )
    .await
    .unwrap();
    check(&store, Backend::Redis, &own).await;
}

#[cfg(feature = "nats")]
#[tokio::test]
async fn nats() {
    let Some(url) = server_url("nats") else {
        return;
    };
    let lease = Duration::from_millis(4321);
    let store = lease::open(&url, &OpenOptions::new().lease(lease))
        .await
        .unwrap();
    let own = lease::nats::NatsStore::connect(&url, lease::nats::NatsConfig::new(lease))
        .await
        .unwrap();
    assert_eq!(store.capabilities().fixed_ttl, Some(lease));
    check(&store, Backend::Nats, &own).await;
    // A bucket named in the URL is taken whatever its max age.
    let sep = if url.contains('?') { '&' } else { '?' };
    let adopted = lease::open(
        &format!("{url}{sep}bucket={}", own.bucket()),
        &OpenOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(adopted.capabilities().fixed_ttl, Some(lease));
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd() {
    let Some(url) = server_url("etcd") else {
        return;
    };
    let url = url.replacen("http://", "etcd://", 1);
    let store = lease::open(&format!("{url}?prefix=facade/"), &OpenOptions::new())
        .await
        .unwrap();
    let own =
        lease::etcd::EtcdStore::connect(&url, lease::etcd::EtcdConfig::new().prefix("facade/"))
            .await
            .unwrap();
    check(&store, Backend::Etcd, &own).await;
    let e = lease::open(&format!("{url}?colour=blue"), &OpenOptions::new())
        .await
        .unwrap_err();
    assert!(e.message().contains("prefix=PREFIX"), "{e}");
}

#[cfg(feature = "mongodb")]
#[tokio::test]
async fn mongodb() {
    let Some(url) = server_url("mongodb") else {
        return;
    };
    let store = lease::open(&url, &OpenOptions::new()).await.unwrap();
    let own = lease::mongodb::MongoStore::connect(&url, lease::mongodb::MongoConfig::default())
        .await
        .unwrap();
    check(&store, Backend::MongoDb, &own).await;
}
