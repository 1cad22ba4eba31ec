//! NATS-specific behaviour of the store, against a real server (`LEASE_TEST_NATS_URL`): the
//! bucket and its checks, name escaping, terms as stream sequences, bad input refused before
//! any I/O, and errors that name the server; partition and member keys beside the leases; the
//! slot bucket, its checks, and job leases that are terms only once their slot record names
//! them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use async_nats::jetstream;
use lease_conformance::{FaultProxy, env};
use lease_core::{
    ErrorKind, LeaseStore,
    backend::{
        HolderToken,
        membership::MembershipStore,
        partitions::PartitionStore,
        slots::{SlotClaim, SlotStore},
    },
};
use lease_nats::{NatsConfig, NatsStore, TtlMismatch, slot_bucket_for};

const TTL: Duration = Duration::from_millis(600);

/// A raw JetStream context on the test server, or `None` (skipped).
async fn server() -> Option<(String, jetstream::Context)> {
    let url = env::server_url("nats")?;
    match async_nats::connect(&url).await {
        Ok(client) => Some((url, jetstream::new(client))),
        Err(e) => {
            env::skip("nats", &format!("cannot connect to {url}: {e}"));
            None
        }
    }
}

/// A bucket name no other test uses.
fn private_bucket(what: &str) -> String {
    format!("lease_test_{what}_{:08x}", rand::random::<u32>())
}

async fn drop_bucket(js: &jetstream::Context, bucket: &str) {
    let _ = js.delete_stream(format!("KV_{bucket}")).await;
    let _ = js
        .delete_stream(format!("KV_{}", slot_bucket_for(bucket)))
        .await;
}

/// The server's clock in ms, read as the conformance suite does: a far-future instant is early.
async fn server_now(store: &NatsStore) -> i64 {
    match store
        .claim_slot(
            "clock-probe",
            &HolderToken::mint(),
            "probe",
            TTL,
            i64::MAX / 4,
        )
        .await
        .unwrap()
    {
        SlotClaim::Early { now_ms } => now_ms,
        other => panic!("a far-future instant was not early: {other:?}"),
    }
}

#[tokio::test]
async fn slot_records_outlive_the_lease_in_a_bucket_with_no_max_age() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("slots");
    let config = NatsConfig::new(TTL).bucket(&bucket);
    let store = NatsStore::connect(&url, config.clone()).await.unwrap();
    assert!(store.capabilities().slots);
    assert_eq!(store.slot_bucket(), format!("{bucket}_slots"));
    let slots = js
        .get_stream(format!("KV_{bucket}_slots"))
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    assert_eq!(slots.max_age, Duration::ZERO, "no max age");
    assert_eq!(slots.max_messages_per_subject, 1);

    let now = server_now(&store).await;
    let at = now - 1_000;
    let a = HolderToken::mint();
    assert!(matches!(
        store.claim_slot("job", &a, "a", TTL, at).await.unwrap(),
        SlotClaim::Claimed { .. }
    ));
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(store.get("job").await.unwrap(), None, "the lease expired");
    let rec = store.last_slot("job").await.unwrap().unwrap();
    assert_eq!((rec.last_ms, rec.unfinished_ms), (Some(at), Some(at)));
    // Another process reads the same record: the instant stays taken.
    let again = NatsStore::connect(&url, config).await.unwrap();
    assert_eq!(
        again
            .claim_slot("job", &HolderToken::mint(), "b", TTL, at)
            .await
            .unwrap(),
        SlotClaim::Taken { last_ms: at }
    );
    assert_eq!(
        again.unfinished(&["job".to_string()]).await.unwrap(),
        vec![("job".to_string(), at)]
    );
    drop_bucket(&js, &bucket).await;
}

#[tokio::test]
async fn a_job_lease_its_record_does_not_name_is_no_term() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("jobterm");
    let store = NatsStore::connect(&url, NatsConfig::new(TTL).bucket(&bucket))
        .await
        .unwrap();
    let now = server_now(&store).await;
    // A job's lease whose slot record write never landed (as after a claim whose record write
    // was lost), written by hand.
    let kv = js.get_key_value(&bucket).await.unwrap();
    let stale = HolderToken::mint();
    kv.create("job", format!("job1;{};0;lost", stale.to_hex()).into())
        .await
        .unwrap();
    assert_eq!(
        store.verify("job", &stale).await.unwrap(),
        None,
        "a read-back must not turn it into a round"
    );
    assert!(
        store.get("job").await.unwrap().unwrap().live,
        "it blocks the name"
    );
    assert_eq!(
        store
            .claim_slot("job", &HolderToken::mint(), "b", TTL, now - 1_000)
            .await
            .unwrap(),
        SlotClaim::Held
    );
    tokio::time::sleep(TTL * 3).await;
    let b = HolderToken::mint();
    let SlotClaim::Claimed { grant, .. } = store
        .claim_slot("job", &b, "b", TTL, now - 1_000)
        .await
        .unwrap()
    else {
        panic!("the instant was not claimed once the stray lease expired");
    };
    assert_eq!(
        store.verify("job", &b).await.unwrap().map(|g| g.term),
        Some(grant.term),
        "a claim the record names is a term"
    );
    assert_eq!(
        store.renew("job", &b, TTL).await.unwrap().map(|g| g.term),
        Some(grant.term)
    );
    assert_eq!(
        store.verify("job", &b).await.unwrap().map(|g| g.term),
        Some(grant.term),
        "still, after a renewal"
    );
    drop_bucket(&js, &bucket).await;
}

#[tokio::test]
async fn slot_bucket_checks_refuse_a_max_age_and_name_a_missing_bucket() {
    let Some((url, js)) = server().await else {
        return;
    };
    // A slot bucket with a max age would drop the records: refused, naming it.
    let aging = private_bucket("slotage");
    let aging_slots = slot_bucket_for(&aging);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: format!("KV_{aging_slots}"),
        subjects: vec![format!("$KV.{aging_slots}.>")],
        max_messages_per_subject: 1,
        max_age: Duration::from_secs(3600),
        ..Default::default()
    })
    .await
    .unwrap();
    let e = NatsStore::connect(&url, NatsConfig::new(TTL).bucket(&aging))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("max age") && e.to_string().contains(&aging_slots),
        "{e}"
    );
    drop_bucket(&js, &aging).await;

    // Creation off and the slot bucket missing: the store opens, leases work, and each slot
    // operation fails naming the bucket to create.
    let bare = private_bucket("noslots");
    NatsStore::connect(&url, NatsConfig::new(TTL).bucket(&bare))
        .await
        .unwrap();
    js.delete_stream(format!("KV_{}", slot_bucket_for(&bare)))
        .await
        .unwrap();
    let store = NatsStore::connect(
        &url,
        NatsConfig::new(TTL).bucket(&bare).create_bucket(false),
    )
    .await
    .unwrap();
    store.available().await.unwrap();
    let h = HolderToken::mint();
    assert!(store.claim("plain", &h, "a", TTL).await.unwrap().is_some());
    let e = store.last_slot("job").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend);
    assert!(
        e.to_string().contains(&slot_bucket_for(&bare)) && e.to_string().contains("does not exist"),
        "{e}"
    );
    let e = store.claim_slot("job", &h, "a", TTL, 0).await.unwrap_err();
    assert!(e.to_string().contains("create_bucket"), "{e}");
    drop_bucket(&js, &bare).await;

    // A slot bucket of one's own choosing.
    let named = private_bucket("named");
    let custom = private_bucket("custom_slots");
    let store = NatsStore::connect(
        &url,
        NatsConfig::new(TTL).bucket(&named).slot_bucket(&custom),
    )
    .await
    .unwrap();
    assert_eq!(store.slot_bucket(), custom);
    assert!(js.get_stream(format!("KV_{custom}")).await.is_ok());
    drop_bucket(&js, &named).await;
    let _ = js.delete_stream(format!("KV_{custom}")).await;
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_named() {
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = NatsStore::connect(&format!("nats://127.0.0.1:{port}"), NatsConfig::new(TTL))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_temporary());
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");

    let e = NatsStore::connect("nats://admin:hunter2@[::1", NatsConfig::new(TTL))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(!e.is_temporary(), "a bad URL does not heal by itself");
    assert!(!e.to_string().contains("hunter2"), "{e}");
}

/// What the shared conformance case `bad_input_is_refused_before_any_io` does not cover: this
/// store's one fixed lease duration, refused for every other TTL, and names it cannot hold
/// beyond the empty and the over-long one, all before any I/O.
#[tokio::test]
async fn other_ttls_and_unkeepable_names_are_refused_before_any_io() {
    let Some((url, _js)) = server().await else {
        return;
    };
    let direct = NatsStore::connect(&url, NatsConfig::new(TTL))
        .await
        .unwrap();
    let proxy = FaultProxy::start(direct.server().to_owned()).await.unwrap();
    let store = NatsStore::connect(
        &format!("nats://{}", proxy.local_addr()),
        NatsConfig::new(TTL),
    )
    .await
    .unwrap();
    let caps = store.capabilities();
    assert_eq!(caps.fixed_ttl, Some(TTL));
    assert_eq!(caps.max_name_bytes, lease_nats::MAX_NAME_BYTES);
    let h = HolderToken::mint();
    proxy.reset_stats();
    for bad in ["é".repeat(128), "a\0b".into(), "a\nb".into()] {
        let errs = [
            store.claim(&bad, &h, "a", TTL).await.unwrap_err(),
            store.renew(&bad, &h, TTL).await.unwrap_err(),
            store.release(&bad, &h).await.unwrap_err(),
            store.verify(&bad, &h).await.unwrap_err(),
            store.get(&bad).await.unwrap_err(),
            store.force_release(&bad).await.unwrap_err(),
        ];
        for e in errs {
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad:?}: {e}");
        }
    }
    // The store keeps one lease duration: the bucket's max age, for leases, partitions and
    // members alike.
    for ttl in [TTL / 2, TTL * 2, Duration::ZERO] {
        let e = store.claim("ok", &h, "a", ttl).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{ttl:?}: {e}");
        let e = store.renew("ok", &h, ttl).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{ttl:?}: {e}");
    }
    for ttl in [TTL / 2, TTL * 2] {
        let e = store.acquire_partition("g", 0, "o", ttl).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{e}");
        let e = store
            .renew_partitions("g", &[0], "o", ttl)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{e}");
        let e = store.heartbeat("s", "n", "a", ttl, &[]).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{e}");
    }
    let e = store.members("a\nb").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName, "{e}");
    let stats = proxy.stats();
    assert_eq!(
        (stats.bytes_client_to_server, stats.round_trips),
        (0, 0),
        "bad input reached the server"
    );
}

#[tokio::test]
async fn any_printable_name_is_escaped_into_its_own_key() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("names");
    let store = NatsStore::connect(&url, NatsConfig::new(TTL).bucket(&bucket))
        .await
        .unwrap();
    let prefix = format!("{:08x}", rand::random::<u32>());
    let names: Vec<String> = [
        "a.b",
        "a..b",
        ".",
        "a.",
        "*",
        ">",
        "a b",
        "=2E",
        "=",
        "jöb",
        "jo\u{308}b",
        "Job",
        "job",
        "x/y/z",
        "\u{1F512}",
    ]
    .iter()
    .map(|n| format!("{prefix}{n}"))
    .collect();
    let mut terms = Vec::new();
    for n in &names {
        let g = store
            .claim(n, &HolderToken::mint(), "i", TTL)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{n:?} shares a key with another name"));
        terms.push(g.term);
        assert_eq!(store.get(n).await.unwrap().unwrap().name, *n);
    }
    terms.dedup();
    assert_eq!(terms.len(), names.len());
    // The longest name, all multi-byte characters: three key characters per byte.
    let longest = format!(
        "{prefix}{}",
        "ü".repeat((lease_nats::MAX_NAME_BYTES - 8) / 2)
    );
    assert!(longest.len() <= lease_nats::MAX_NAME_BYTES);
    let h = HolderToken::mint();
    assert!(store.claim(&longest, &h, "i", TTL).await.unwrap().is_some());
    assert!(store.verify(&longest, &h).await.unwrap().is_some());
    // Readable where it can be: the key of `<prefix>a.b` is `<prefix>a=2Eb`.
    let kv = js.get_key_value(&bucket).await.unwrap();
    assert!(kv.entry(format!("{prefix}a=2Eb")).await.unwrap().is_some());
    drop_bucket(&js, &bucket).await;
}

#[tokio::test]
async fn terms_are_claim_sequences_and_strictly_increase() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("terms");
    let store = NatsStore::connect(&url, NatsConfig::new(TTL).bucket(&bucket))
        .await
        .unwrap();
    let kv = js.get_key_value(&bucket).await.unwrap();
    let a = HolderToken::mint();
    let t1 = store.claim("n", &a, "a", TTL).await.unwrap().unwrap().term;
    assert_eq!(
        kv.entry("n").await.unwrap().unwrap().revision,
        t1,
        "term = claim's sequence"
    );
    // A renewal writes a new revision and keeps the term.
    let r = store.renew("n", &a, TTL).await.unwrap().unwrap();
    assert_eq!(r.term, t1);
    assert!(kv.entry("n").await.unwrap().unwrap().revision > t1);
    assert_eq!(store.verify("n", &a).await.unwrap().unwrap().term, t1);
    assert_eq!(store.get("n").await.unwrap().unwrap().term, t1);
    // Release, then expiry: every change of hands gets a higher term.
    assert!(store.release("n", &a).await.unwrap());
    assert_eq!(
        store.get("n").await.unwrap(),
        None,
        "a released lease leaves no key"
    );
    let b = HolderToken::mint();
    let t2 = store.claim("n", &b, "b", TTL).await.unwrap().unwrap().term;
    assert!(t2 > t1, "{t2} after {t1}");
    tokio::time::sleep(TTL + Duration::from_millis(150)).await;
    assert_eq!(
        store.get("n").await.unwrap(),
        None,
        "the server removed the expired key"
    );
    assert_eq!(store.renew("n", &b, TTL).await.unwrap(), None);
    let t3 = store
        .claim("n", &HolderToken::mint(), "c", TTL)
        .await
        .unwrap()
        .unwrap()
        .term;
    assert!(t3 > t2, "{t3} after {t2}");
    drop_bucket(&js, &bucket).await;
}

#[tokio::test]
async fn a_recreated_bucket_restarts_the_sequence() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("recreated");
    let config = NatsConfig::new(TTL).bucket(&bucket);
    let store = NatsStore::connect(&url, config.clone()).await.unwrap();
    for n in ["a", "b", "c"] {
        store
            .claim(n, &HolderToken::mint(), "i", TTL)
            .await
            .unwrap();
    }
    let before = store.get("c").await.unwrap().unwrap().term;
    assert_eq!(before, 3);
    drop_bucket(&js, &bucket).await;
    let store = NatsStore::connect(&url, config).await.unwrap();
    let after = store
        .claim("c", &HolderToken::mint(), "i", TTL)
        .await
        .unwrap()
        .unwrap()
        .term;
    assert_eq!(
        after, 1,
        "documented: terms restart with a re-created bucket"
    );
    drop_bucket(&js, &bucket).await;
}

#[tokio::test]
async fn bucket_checks_refuse_or_adopt_another_max_age() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("mismatch");
    let created = NatsStore::connect(&url, NatsConfig::new(TTL).bucket(&bucket))
        .await
        .unwrap();
    assert_eq!(created.ttl(), TTL);
    created.available().await.unwrap();

    let other = Duration::from_millis(900);
    let e = NatsStore::connect(&url, NatsConfig::new(other).bucket(&bucket))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{e}");
    assert!(
        e.to_string().contains("600ms") && e.to_string().contains("900ms"),
        "names both durations: {e}"
    );
    let adopted = NatsStore::connect(
        &url,
        NatsConfig::new(other)
            .bucket(&bucket)
            .on_ttl_mismatch(TtlMismatch::Adopt),
    )
    .await
    .unwrap();
    assert_eq!(adopted.ttl(), TTL);
    assert_eq!(adopted.capabilities().fixed_ttl, Some(TTL));
    assert_eq!(adopted.timings().unwrap().lease(), TTL);
    let c = lease_core::Coordinator::builder(adopted.clone())
        .timings(adopted.timings().unwrap())
        .build()
        .unwrap();
    c.close().await.unwrap();

    // A missing bucket with creation off is an error that says what to do.
    let missing = private_bucket("missing");
    let e = NatsStore::connect(
        &url,
        NatsConfig::new(TTL).bucket(&missing).create_bucket(false),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    assert!(js.get_stream(format!("KV_{missing}")).await.is_err());

    // A bucket that keeps history cannot carry leases.
    let history = private_bucket("history");
    // (made by hand: async-nats cannot read nats-server 2.9's account info for create_key_value)
    js.create_stream(async_nats::jetstream::stream::Config {
        name: format!("KV_{history}"),
        subjects: vec![format!("$KV.{history}.>")],
        max_messages_per_subject: 5,
        max_age: TTL,
        ..Default::default()
    })
    .await
    .unwrap();
    let e = NatsStore::connect(&url, NatsConfig::new(TTL).bucket(&history))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("history of 1"), "{e}");

    // `available` notices a bucket deleted under a running store.
    drop_bucket(&js, &bucket).await;
    assert!(created.available().await.is_err());
    drop_bucket(&js, &history).await;
}

#[tokio::test]
async fn another_store_object_renews_and_releases_by_reading_first() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("cold");
    let config = NatsConfig::new(TTL).bucket(&bucket);
    let one = NatsStore::connect(&url, config.clone()).await.unwrap();
    let two = NatsStore::connect(&url, config).await.unwrap();
    let a = HolderToken::mint();
    let g = one.claim("n", &a, "a", TTL).await.unwrap().unwrap();
    // `two` never wrote this lease: it reads the key, then compares-and-sets.
    assert_eq!(two.renew("n", &a, TTL).await.unwrap().unwrap().term, g.term);
    // `one` remembers an older revision now: its renewal misses, reads, and succeeds.
    assert_eq!(one.renew("n", &a, TTL).await.unwrap().unwrap().term, g.term);
    assert_eq!(
        two.renew("n", &HolderToken::mint(), TTL).await.unwrap(),
        None
    );
    assert!(!two.release("n", &HolderToken::mint()).await.unwrap());
    assert!(two.release("n", &a).await.unwrap());
    assert!(!one.release("n", &a).await.unwrap(), "already released");
    assert_eq!(one.renew("n", &a, TTL).await.unwrap(), None);
    drop_bucket(&js, &bucket).await;
}

#[tokio::test]
async fn a_foreign_value_blocks_the_name_until_force_released() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("foreign");
    let store = NatsStore::connect(&url, NatsConfig::new(TTL).bucket(&bucket))
        .await
        .unwrap();
    let kv = js.get_key_value(&bucket).await.unwrap();
    kv.put("n", "not a lease".into()).await.unwrap();
    let a = HolderToken::mint();
    assert_eq!(store.claim("n", &a, "a", TTL).await.unwrap(), None);
    let e = store.get("n").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend);
    assert!(e.to_string().contains(&bucket), "{e}");
    assert_eq!(store.verify("n", &a).await.unwrap(), None);
    assert!(store.force_release("n").await.unwrap());
    assert!(store.claim("n", &a, "a", TTL).await.unwrap().is_some());
    drop_bucket(&js, &bucket).await;
}

#[tokio::test]
async fn time_left_is_never_overstated() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("left");
    let config = NatsConfig::new(TTL).bucket(&bucket);
    let writer = NatsStore::connect(&url, config.clone()).await.unwrap();
    let reader = NatsStore::connect(&url, config).await.unwrap();
    let a = HolderToken::mint();
    let start = std::time::Instant::now();
    let g = writer.claim("n", &a, "a", TTL).await.unwrap().unwrap();
    assert!(g.expires_in <= TTL);
    tokio::time::sleep(TTL / 3).await;
    // The writer measures from when it sent the claim; another store estimates from the
    // server's timestamp and this host's clock (the same clock here).
    for store in [&writer, &reader] {
        let left = store.get("n").await.unwrap().unwrap().expires_in;
        assert!(
            left + start.elapsed() <= TTL + Duration::from_millis(20),
            "{left:?}"
        );
        assert!(
            left + Duration::from_millis(300) >= TTL - start.elapsed(),
            "{left:?}"
        );
    }
    drop_bucket(&js, &bucket).await;
}

#[tokio::test]
async fn partitions_members_and_leases_share_a_bucket_without_colliding() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("groups");
    let store = NatsStore::connect(&url, NatsConfig::new(TTL).bucket(&bucket))
        .await
        .unwrap();
    let h = HolderToken::mint();
    // A lease named like a partition key, and groups whose names hold dots and wildcards.
    for name in ["part.g.0", "member.s.n"] {
        assert!(store.claim(name, &h, "a", TTL).await.unwrap().is_some());
    }
    for group in ["g", "g.0", "g.>", "*"] {
        let l = store.acquire_partition(group, 0, "o", TTL).await.unwrap();
        assert!(l.is_some(), "{group}");
    }
    for group in ["g", "g.0", "g.>", "*"] {
        let owners = store.owners(group).await.unwrap();
        assert_eq!(owners.len(), 1, "{group}: {owners:?}");
    }
    assert!(store.owners("g.1").await.unwrap().is_empty());
    // Nodes with any printable name, listed by node id in byte order.
    let nodes = ["b", "a.b", "a b", "A", "\u{e9}", "a>"];
    for node in nodes {
        store.heartbeat("s", node, "x", TTL, &[]).await.unwrap();
    }
    store.heartbeat("s.x", "z", "", TTL, &[]).await.unwrap();
    let listed: Vec<String> = store
        .members("s")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.node)
        .collect();
    let mut sorted: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    sorted.sort();
    assert_eq!(listed, sorted);
    assert_eq!(store.members("s.x").await.unwrap().len(), 1);
    for name in ["part.g.0", "member.s.n"] {
        assert!(store.get(name).await.unwrap().is_some(), "{name}");
    }
    drop_bucket(&js, &bucket).await;
}

#[tokio::test]
async fn one_winner_among_concurrent_partition_acquirers() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("race");
    let config = NatsConfig::new(TTL).bucket(&bucket);
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(NatsStore::connect(&url, config.clone()).await.unwrap());
    }
    for round in 0..10u32 {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..16 {
            let store = stores[i % stores.len()].clone();
            tasks.spawn(async move {
                store
                    .acquire_partition("g", round, &format!("owner-{i}"), TTL)
                    .await
                    .unwrap()
            });
        }
        let mut winners = Vec::new();
        while let Some(got) = tasks.join_next().await {
            if let Some(l) = got.unwrap() {
                winners.push(l);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let owners = stores[0].owners("g").await.unwrap();
        let this = owners.iter().find(|l| l.partition == round).unwrap();
        assert_eq!(
            (&this.owner, this.epoch),
            (&winners[0].owner, winners[0].epoch)
        );
    }
    drop_bucket(&js, &bucket).await;
}

#[tokio::test]
async fn epochs_are_acquire_sequences_and_survive_expiry() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("epochs");
    let config = NatsConfig::new(TTL).bucket(&bucket);
    let one = NatsStore::connect(&url, config.clone()).await.unwrap();
    let two = NatsStore::connect(&url, config).await.unwrap();
    let first = one
        .acquire_partition("g", 3, "a", TTL)
        .await
        .unwrap()
        .unwrap();
    // Renewals through either store object keep the epoch.
    for store in [&two, &one, &two] {
        let renewed = store.renew_partitions("g", &[3], "a", TTL).await.unwrap();
        assert_eq!(renewed.len(), 1);
        assert_eq!(renewed[0].epoch, first.epoch);
    }
    assert_eq!(
        one.acquire_partition("g", 3, "a", TTL)
            .await
            .unwrap()
            .unwrap()
            .epoch,
        first.epoch,
        "re-acquire of the own live lease keeps the epoch"
    );
    // Expiry by max age deletes the key; the next epoch is still higher.
    tokio::time::sleep(TTL + Duration::from_millis(150)).await;
    assert!(one.owners("g").await.unwrap().is_empty());
    assert!(
        one.renew_partitions("g", &[3], "a", TTL)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(one.release_partitions("g", &[3], "a").await.unwrap(), 0);
    let back = one
        .acquire_partition("g", 3, "a", TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(back.epoch > first.epoch);

    // A delete marker another tool left is no lease: acquire writes over it, a new epoch.
    let kv = js.get_key_value(&bucket).await.unwrap();
    kv.delete("part.g.4").await.unwrap();
    let over = two
        .acquire_partition("g", 4, "b", TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(over.epoch > back.epoch);
    // A value this store did not write is reported, not taken over.
    kv.put("part.g.5", "not a partition".into()).await.unwrap();
    let e = two.acquire_partition("g", 5, "b", TTL).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    assert!(e.to_string().contains("part.g.5"), "{e}");
    assert_eq!(
        two.owners("g").await.unwrap_err().kind(),
        ErrorKind::Backend
    );
    drop_bucket(&js, &bucket).await;
}

#[tokio::test]
async fn a_member_expires_by_max_age_and_a_heartbeat_keeps_it() {
    let Some((url, js)) = server().await else {
        return;
    };
    let bucket = private_bucket("members");
    let config = NatsConfig::new(TTL).bucket(&bucket);
    let one = NatsStore::connect(&url, config.clone()).await.unwrap();
    let two = NatsStore::connect(&url, config).await.unwrap();
    let groups = vec!["orders".to_string(), "mail".to_string()];
    let m = one
        .heartbeat("svc", "n1", "10.0.0.1:7000", TTL, &groups)
        .await
        .unwrap();
    assert!(m.expires_in <= TTL);
    one.heartbeat("svc", "n2", "", TTL, &[]).await.unwrap();
    let seen = two.members("svc").await.unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].groups, groups);
    assert!(seen[0].expires_in <= TTL);
    for _ in 0..4 {
        tokio::time::sleep(TTL / 3).await;
        two.heartbeat("svc", "n2", "", TTL, &[]).await.unwrap();
    }
    let nodes: Vec<String> = one
        .members("svc")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.node)
        .collect();
    assert_eq!(nodes, ["n2"]);
    assert!(!one.leave("svc", "n1").await.unwrap(), "n1 had expired");
    assert!(one.leave("svc", "n2").await.unwrap());
    assert!(two.members("svc").await.unwrap().is_empty());
    drop_bucket(&js, &bucket).await;
}
