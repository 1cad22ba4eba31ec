//! What can be tested with no MongoDB server: connection failures name the host and never the
//! password, bad names and TTLs (and groups, owners, nodes, addresses, batches) are refused
//! before any I/O, and every call is bounded. The command documents themselves are checked in
//! the crate's unit tests (`src/wire/tests/`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use lease_core::backend::LeaseStoreExt;
use lease_core::layer::Operation;
use lease_core::{
    ErrorKind, LeaseStore,
    backend::{
        HolderToken,
        membership::MembershipStore,
        partitions::{BatchRenew, PartitionStore},
        slots::SlotStore,
    },
};
use lease_mongo::{MAX_NAME_BYTES, MongoConfig, MongoStore};
use mongodb::Client;

const SECRET: &str = "s3cretPa55";

/// A store on a client for a port where nothing listens.
async fn refused_store(server_selection_ms: u64, op_timeout: Duration) -> MongoStore {
    let url = format!(
        "mongodb://app:{SECRET}@127.0.0.1:1/?serverSelectionTimeoutMS={server_selection_ms}\
         &connectTimeoutMS=200"
    );
    let client = Client::with_uri_str(&url).await.unwrap();
    MongoStore::with_client(
        client,
        MongoConfig::new("app")
            .server_label("127.0.0.1:1")
            .op_timeout(op_timeout),
    )
    .unwrap()
}

fn assert_no_secret(e: &lease_core::Error) {
    let shown = format!("{e} {e:?}");
    assert!(!shown.contains(SECRET), "the password leaked: {shown}");
}

#[tokio::test]
async fn connect_to_a_refused_port_is_unavailable_naming_the_host() {
    let started = Instant::now();
    let url = format!(
        "mongodb://app:{SECRET}@127.0.0.1:1/app?serverSelectionTimeoutMS=300&connectTimeoutMS=300"
    );
    let e = MongoStore::connect(&url, MongoConfig::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_temporary(), "{e}");
    assert_eq!(e.server(), Some("127.0.0.1:1"), "{e}");
    assert_no_secret(&e);
    assert!(std::error::Error::source(&e).is_some());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn connect_without_a_selection_timeout_gives_up_within_the_op_timeout() {
    let started = Instant::now();
    let config = MongoConfig::new("app").op_timeout(Duration::from_millis(800));
    let e = MongoStore::connect("mongodb://127.0.0.1:1/", config)
        .await
        .unwrap_err();
    // Server selection was set to half the operation timeout: unreachable, not a timeout.
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert_eq!(e.server(), Some("127.0.0.1:1"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_bad_url_is_refused_naming_the_host_and_not_the_password() {
    let e = MongoStore::connect(
        &format!("mongodb://app:{SECRET}@db1.invalid:notaport/"),
        MongoConfig::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(!e.is_temporary(), "a bad URL does not get better: {e}");
    assert!(e.message().contains("db1.invalid:notaport"), "{e}");
    assert_no_secret(&e);

    let e = MongoStore::connect("postgres://127.0.0.1/app", MongoConfig::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(!e.is_temporary(), "{e}");

    // A database name MongoDB cannot hold, from the URL.
    let e = MongoStore::connect(
        "mongodb://127.0.0.1:1/a.b?serverSelectionTimeoutMS=100",
        MongoConfig::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName, "{e}");
}

#[tokio::test]
async fn every_operation_on_an_unreachable_server_is_unavailable_naming_it() {
    let store = refused_store(200, Duration::from_secs(5)).await;
    let a = HolderToken::mint();
    let ttl = Duration::from_millis(600);
    let errors = [
        ("claim", store.claim("n", &a, "a", ttl).await.unwrap_err()),
        ("renew", store.renew("n", &a, ttl).await.unwrap_err()),
        ("release", store.release("n", &a).await.unwrap_err()),
        ("verify", store.verify("n", &a).await.unwrap_err()),
        ("get", store.get("n").await.unwrap_err()),
        ("force release", store.force_release("n").await.unwrap_err()),
        ("available", store.available().await.unwrap_err()),
        (
            "slot claim",
            store
                .claim_slot("n", &a, "a", ttl, 1_000)
                .await
                .unwrap_err(),
        ),
        (
            "slot finish",
            store.finish_slot("n", &a, 1_000, None).await.unwrap_err(),
        ),
        (
            "unfinished",
            store.unfinished(&["n".to_owned()]).await.unwrap_err(),
        ),
        (
            "slot rerun",
            store
                .claim_rerun("n", &a, "a", ttl, 1_000)
                .await
                .unwrap_err(),
        ),
        ("last slot", store.last_slot("n").await.unwrap_err()),
        (
            "partition acquire",
            store
                .acquire_partition("g", 0, "o@1", ttl)
                .await
                .unwrap_err(),
        ),
        (
            "partition renewal",
            store
                .renew_partitions("g", &[0, 1], "o@1", ttl)
                .await
                .unwrap_err(),
        ),
        (
            "partition release",
            store
                .release_partitions("g", &[0], "o@1")
                .await
                .unwrap_err(),
        ),
        ("partition owners", store.owners("g").await.unwrap_err()),
        (
            "heartbeat",
            store
                .heartbeat("s", "n1", "10.0.0.1:7000", ttl, &["g".to_owned()])
                .await
                .unwrap_err(),
        ),
        ("members", store.members("s").await.unwrap_err()),
        ("leave", store.leave("s", "n1").await.unwrap_err()),
    ];
    for (op, e) in errors {
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{op}: {e}");
        assert!(e.is_temporary(), "{op}: {e}");
        assert_eq!(e.server(), Some("127.0.0.1:1"), "{op}: {e}");
        assert_no_secret(&e);
    }
}

#[tokio::test]
async fn bad_names_instances_and_ttls_are_refused_before_any_io() {
    // Server selection would take 10 s: an answer within milliseconds means no I/O was tried.
    let store = refused_store(10_000, Duration::from_secs(20)).await;
    let a = HolderToken::mint();
    let ttl = Duration::from_millis(600);
    let too_long = "n".repeat(MAX_NAME_BYTES + 1);
    let started = Instant::now();
    for bad in ["", too_long.as_str(), "a\0b", "a\nb"] {
        let results = [
            store.claim(bad, &a, "a", ttl).await.err(),
            store.renew(bad, &a, ttl).await.err(),
            store.release(bad, &a).await.err(),
            store.verify(bad, &a).await.err(),
            store.get(bad).await.err(),
            store.force_release(bad).await.err(),
            store.claim_slot(bad, &a, "a", ttl, 1_000).await.err(),
            store.finish_slot(bad, &a, 1_000, Some(2_000)).await.err(),
            store
                .unfinished(&["ok".to_owned(), bad.to_owned()])
                .await
                .err(),
            store.claim_rerun(bad, &a, "a", ttl, 1_000).await.err(),
            store.last_slot(bad).await.err(),
        ];
        for e in results {
            let e = e.expect("a bad name was accepted");
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad:?}: {e}");
        }
    }
    for label in ["", "a\nb"] {
        let e = store.claim("n", &a, label, ttl).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName, "{label:?}: {e}");
        let e = store.claim_slot("n", &a, label, ttl, 1).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName, "{label:?}: {e}");
        let e = store.claim_rerun("n", &a, label, ttl, 1).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName, "{label:?}: {e}");
    }
    // No names: nothing to ask.
    assert!(store.unfinished(&[]).await.unwrap().is_empty());
    // Partitions and membership: groups, services, owners, nodes and groups served.
    for bad in ["", too_long.as_str(), "a\0b", "a\nb"] {
        let results = [
            store.acquire_partition(bad, 0, "o", ttl).await.err(),
            store.acquire_partition("g", 0, bad, ttl).await.err(),
            store.renew_partitions(bad, &[0], "o", ttl).await.err(),
            store.renew_partitions("g", &[0], bad, ttl).await.err(),
            store.release_partitions(bad, &[0], "o").await.err(),
            store.release_partitions("g", &[0], bad).await.err(),
            store.owners(bad).await.err(),
            store.heartbeat(bad, "n", "a", ttl, &[]).await.err(),
            store.heartbeat("s", bad, "a", ttl, &[]).await.err(),
            store
                .heartbeat("s", "n", "a", ttl, &["ok".to_owned(), bad.to_owned()])
                .await
                .err(),
            store.members(bad).await.err(),
            store.leave(bad, "n").await.err(),
            store.leave("s", bad).await.err(),
        ];
        for e in results {
            let e = e.expect("a bad group, service, owner or node was accepted");
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad:?}: {e}");
        }
    }
    let huge = vec![0_u32; lease_core::backend::partitions::MAX_PARTITIONS_PER_CALL + 1];
    let e = store
        .renew_partitions("g", &huge, "o", ttl)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let e = store.release_partitions("g", &huge, "o").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    for address in ["a\nb".to_owned(), "a".repeat(256)] {
        let e = store
            .heartbeat("s", "n", &address, ttl, &[])
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{address:?}: {e}");
    }
    let many: Vec<String> = (0..65).map(|i| format!("g{i}")).collect();
    let e = store
        .heartbeat("s", "n", "a", ttl, &many)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // Empty batches: nothing to ask.
    assert!(
        store
            .renew_partitions("g", &[], "o", ttl)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.release_partitions("g", &[], "o").await.unwrap(), 0);
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(500),
        lease_core::backend::MAX_TTL + Duration::from_secs(1),
    ] {
        let e = store.claim("n", &a, "a", ttl).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{ttl:?}: {e}");
        let e = store.renew("n", &a, ttl).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{ttl:?}: {e}");
        let e = store.claim_slot("n", &a, "a", ttl, 1).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{ttl:?}: {e}");
        let e = store.claim_rerun("n", &a, "a", ttl, 1).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{ttl:?}: {e}");
        let e = store.acquire_partition("g", 0, "o", ttl).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{ttl:?}: {e}");
        let e = store
            .renew_partitions("g", &[0], "o", ttl)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{ttl:?}: {e}");
        let e = store.heartbeat("s", "n", "a", ttl, &[]).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{ttl:?}: {e}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "validation waited on the network: {:?}",
        started.elapsed()
    );
    assert_eq!(store.capabilities().max_name_bytes, 1024);
    assert!(store.validate_name(&"n".repeat(MAX_NAME_BYTES)).is_ok());
}

#[tokio::test]
async fn a_server_that_never_answers_is_bounded_by_the_op_timeout() {
    // A listener that accepts and stays silent: the driver's handshake never completes.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let client = Client::with_uri_str(format!(
        "mongodb://{addr}/?directConnection=true&serverSelectionTimeoutMS=30000\
         &connectTimeoutMS=30000"
    ))
    .await
    .unwrap();
    let store = MongoStore::with_client(
        client,
        MongoConfig::new("app")
            .server_label(addr.to_string())
            .op_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let started = Instant::now();
    let e = store
        .claim("n", &HolderToken::mint(), "a", Duration::from_millis(600))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.is_temporary());
    assert_eq!(e.server(), Some(addr.to_string().as_str()), "{e}");
    assert!(e.message().contains("outcome is unknown"), "{e}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
    // A batch renewal's first command is bounded the same way; the second is never sent.
    let started = Instant::now();
    let e = store
        .renew_partitions("g", &[0, 1, 2], "o@1", Duration::from_millis(600))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert_eq!(e.operation(), Some(Operation::RenewPartitions), "{e}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
    for e in [
        store
            .acquire_partition("g", 0, "o@1", Duration::from_millis(600))
            .await
            .unwrap_err(),
        store.members("s").await.unwrap_err(),
        store.leave("s", "n").await.unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        assert_eq!(e.server(), Some(addr.to_string().as_str()), "{e}");
    }
    hold.abort();
}

#[tokio::test]
async fn configuration_is_checked_and_capabilities_are_declared() {
    let client = Client::with_uri_str("mongodb://127.0.0.1:1/")
        .await
        .unwrap();
    let e = MongoStore::with_client(client.clone(), MongoConfig::new("bad.name")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);
    let e = MongoStore::with_client(client.clone(), MongoConfig::new("app").collection("a$b"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);

    let store = MongoStore::with_client(client, MongoConfig::new("app")).unwrap();
    assert_eq!(store.backend(), "mongodb");
    let caps = store.capabilities();
    assert!(
        caps.expiry
            && caps.consecutive_terms
            && caps.keeps_ended_records
            && caps.force_release
            && caps.slots
    );
    assert!(caps.partitions && caps.membership && !caps.watch);
    assert_eq!(
        store.capabilities().batch_renew,
        BatchRenew::Fixed { round_trips: 2 }
    );
    assert_eq!(caps.fixed_ttl, None);
    assert_eq!(store.config().collection_name(), "leases");
    assert_eq!(
        store.config().partition_collection_name(),
        "leases_partitions"
    );
    assert_eq!(store.config().member_collection_name(), "leases_members");
    let shown = format!("{store:?}");
    assert!(shown.contains("leases") && shown.contains("app"), "{shown}");
    assert!(
        shown.contains("leases_partitions") && shown.contains("leases_members"),
        "{shown}"
    );
}

/// A store built with `with_client` (no I/O) runs its start-up check before its first claim,
/// acquire or heartbeat, whether or not `available()` was called: the operation's error is the
/// check's.
#[tokio::test]
async fn a_store_built_with_client_runs_its_start_up_check_before_the_first_claim() {
    let store = refused_store(200, Duration::from_secs(5)).await;
    let a = HolderToken::mint();
    let ttl = Duration::from_millis(600);
    let errors = [
        ("claim", store.claim("n", &a, "a", ttl).await.unwrap_err()),
        (
            "slot claim",
            store
                .claim_slot("n", &a, "a", ttl, 1_000)
                .await
                .unwrap_err(),
        ),
        (
            "slot rerun",
            store
                .claim_rerun("n", &a, "a", ttl, 1_000)
                .await
                .unwrap_err(),
        ),
        (
            "partition acquire",
            store
                .acquire_partition("g", 0, "o@1", ttl)
                .await
                .unwrap_err(),
        ),
        (
            "heartbeat",
            store.heartbeat("s", "n1", "", ttl, &[]).await.unwrap_err(),
        ),
    ];
    for (op, e) in errors {
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{op}: {e}");
        assert!(
            e.message().contains("availability check"),
            "{op} ran without the start-up check: {e}"
        );
        assert_eq!(e.operation(), Some(Operation::Available), "{op}: {e}");
    }
    // Reads hand out nothing and are not held back.
    let e = store.get("n").await.unwrap_err();
    assert!(!e.message().contains("availability check"), "{e}");
    assert_eq!(e.operation(), Some(Operation::Get), "{e}");
}
