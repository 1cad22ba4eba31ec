//! Store hints on the test server: the scripts' `PUBLISH` reaches another store's subscriber
//! connection, renewals publish nothing, a lease's claim and release publish only while some
//! store waits on the name (its waiters' mark), a killed subscriber reports itself disconnected
//! and comes back, and a store without a client to subscribe with says its hints are local.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use lease_conformance::hints::{self, HINT_BOUND, QUIET, connected, woken_within};
use lease_core::LeaseStore;
use lease_core::backend::HolderToken;
use lease_core::backend::notify::Topic;
use lease_redis::RedisStore;
use lease_redis::redis::aio::{ConnectionManager, MultiplexedConnection};
use lease_redis::redis::{
    AsyncConnectionConfig, Client, ProtocolVersion, PushInfo, PushKind, Value,
};
use tokio::sync::mpsc::UnboundedReceiver;

const TTL: Duration = Duration::from_secs(5);

/// Two stores on one key prefix (as two processes would be), both subscribed.
async fn pair() -> Option<(RedisStore, RedisStore)> {
    let url = common::url()?;
    let config = common::config().key_prefix(common::unique("hints-"));
    let a = common::direct(&url, config.clone()).await?;
    let b = common::direct(&url, config).await?;
    for store in [&a, &b] {
        connected(&mut store.changes(&Topic::lease("-")).unwrap()).await;
    }
    Some((a, b))
}

#[tokio::test]
async fn a_release_by_another_store_wakes_a_waiter_and_a_renewal_does_not() {
    let Some((a, b)) = pair().await else { return };
    hints::another_store_wakes_a_waiter(&a, &b, TTL, "redis").await;
}

// No member check (`hints::member_changes_wake_the_group`): `heartbeat.lua` and `leave.lua`
// publish nothing (`notify.lua` is joined only to the scripts that change hands), so a member
// joining or leaving wakes no group waiter — it failed "redis: a member joining woke nobody
// within 250ms".
#[tokio::test]
async fn partition_and_slot_changes_wake_their_topics() {
    let Some((a, b)) = pair().await else { return };
    hints::partition_changes_wake_the_group(&a, &b, TTL, "redis").await;
    hints::slot_changes_wake_the_slots_topic(&a, &b, TTL, "redis").await;
}

/// The store's subscriber connection, by the name it gave itself: its `CLIENT LIST` id.
async fn listener_id(raw: &mut MultiplexedConnection, name: &str) -> Option<String> {
    let list: String = lease_redis::redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(raw)
        .await
        .unwrap();
    list.lines()
        .find(|l| l.split(' ').any(|f| f == format!("name={name}")))
        .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_owned)
}

#[tokio::test]
async fn a_killed_subscriber_says_so_and_comes_back() {
    let Some((a, b)) = pair().await else { return };
    let url = common::url().unwrap();
    let mut raw = common::raw(&url).await;
    let name = a.listener_name().expect("connect opens a listener");
    assert!(name.starts_with("lease-hints-"), "{name}");
    let id = listener_id(&mut raw, &name)
        .await
        .expect("the listener is in CLIENT LIST");
    let mut w = a.changes(&Topic::lease("n")).unwrap();
    let killed: i64 = lease_redis::redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(&id)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(killed, 1);
    let started = Instant::now();
    woken_within(&mut w, Duration::from_secs(1))
        .await
        .expect("the cut woke the waiter");
    assert!(!w.is_connected(), "still connected after the cut");
    connected(&mut w).await;
    let back = started.elapsed();
    eprintln!("redis subscriber back {back:?} after CLIENT KILL");
    assert_ne!(
        listener_id(&mut raw, &name).await,
        Some(id),
        "the same connection"
    );
    // And hints flow again.
    let holder = HolderToken::mint();
    let _ = w.has_changed();
    woken_within(&mut w, Duration::from_millis(10)).await;
    b.claim("n", &holder, "b", TTL).await.unwrap().unwrap();
    woken_within(&mut w, HINT_BOUND)
        .await
        .expect("hints after the reconnect");
}

#[tokio::test]
async fn a_store_on_a_bare_connection_has_local_hints_until_given_a_client() {
    let Some(url) = common::url() else { return };
    let config = common::config().key_prefix(common::unique("hints-"));
    let client = Client::open(url.as_str()).unwrap();
    let manager = ConnectionManager::new_with_config(client.clone(), config.manager_config())
        .await
        .unwrap();
    let store = RedisStore::with_client(manager, config.clone()).unwrap();
    assert!(!store.capabilities().watch);
    assert_eq!(store.listener_name(), None);
    let mut w = store.changes(&Topic::lease("x")).unwrap();
    assert!(
        !w.is_connected(),
        "local hints must say they miss other processes"
    );
    let holder = HolderToken::mint();
    store.claim("x", &holder, "me", TTL).await.unwrap().unwrap();
    woken_within(&mut w, Duration::from_millis(10))
        .await
        .expect("the store's own claim is hinted in-process");
    assert!(store.release("x", &holder).await.unwrap());
    woken_within(&mut w, Duration::from_millis(10))
        .await
        .expect("the store's own release is hinted in-process");

    let store = store.with_listener(client).unwrap();
    assert!(store.capabilities().watch);
    connected(&mut w).await;
    let other = common::direct(&url, config).await.unwrap();
    other
        .claim("x", &holder, "other", TTL)
        .await
        .unwrap()
        .unwrap();
    woken_within(&mut w, HINT_BOUND)
        .await
        .expect("another store's claim");
}

#[tokio::test]
async fn the_subscriber_ends_with_the_last_clone_of_the_store() {
    let Some((a, _b)) = pair().await else { return };
    let url = common::url().unwrap();
    let mut raw = common::raw(&url).await;
    let name = a.listener_name().unwrap();
    assert!(listener_id(&mut raw, &name).await.is_some());
    let clone = a.clone();
    drop(a);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        listener_id(&mut raw, &name).await.is_some(),
        "a clone still lives"
    );
    drop(clone);
    let started = Instant::now();
    while listener_id(&mut raw, &name).await.is_some() {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the subscriber outlived the store"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_permit_claimed_or_released_by_another_store_wakes_the_names_waiters() {
    let Some((a, b)) = pair().await else { return };
    hints::another_store_wakes_a_permit_waiter(&a, &b, TTL, "redis").await;
}

/// A subscriber of our own on `<prefix>changes` (RESP3 pushes): what the scripts publish.
async fn tap(url: &str, prefix: &str) -> (MultiplexedConnection, UnboundedReceiver<PushInfo>) {
    let info = Client::open(url).unwrap().get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let client = Client::open(info.set_redis_settings(settings)).unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let config = AsyncConnectionConfig::new().set_push_sender(tx);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    conn.subscribe(format!("{prefix}changes")).await.unwrap();
    (conn, rx)
}

/// The hints `tap` hears within `within` (not the start-up check's `publish-check`).
async fn heard(tap: &mut UnboundedReceiver<PushInfo>, within: Duration) -> Vec<String> {
    let mut payloads = Vec::new();
    let until = tokio::time::Instant::now() + within;
    while let Ok(Some(push)) = tokio::time::timeout_at(until, tap.recv()).await {
        if push.kind == PushKind::Message
            && let [_, Value::BulkString(p)] = push.data.as_slice()
        {
            let payload = String::from_utf8_lossy(p).into_owned();
            if payload != "publish-check" {
                payloads.push(payload);
            }
        }
    }
    payloads
}

/// The claim+release cycle nobody waits for publishes nothing (it published twice per cycle,
/// delivered to every store's subscriber: the cost that held the store at 0.4× `rslock`); a
/// waiter on a name in one store makes another store's claim and release of it publish, and
/// its mark lives at most 15 s.
#[tokio::test]
async fn a_lease_publishes_its_changes_only_while_someone_waits_on_it() {
    let Some((a, b)) = pair().await else { return };
    let url = common::url().unwrap();
    let prefix = a.config().get_key_prefix().to_owned();
    let (_conn, mut tap) = tap(&url, &prefix).await;

    let h = HolderToken::mint();
    b.claim("quiet", &h, "b", TTL).await.unwrap().unwrap();
    assert!(b.release("quiet", &h).await.unwrap());
    let quiet = heard(&mut tap, QUIET).await;
    assert!(
        quiet.is_empty(),
        "a claim and release nobody waits for published {quiet:?}"
    );

    let mut w = a.changes(&Topic::lease("loud")).unwrap();
    connected(&mut w).await;
    let mut raw = common::raw(&url).await;
    let ttl: i64 = lease_redis::redis::cmd("PTTL")
        .arg(format!("{prefix}{{loud}}:waiting"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(
        (1..=15_000).contains(&ttl),
        "the waiter's mark has PTTL {ttl}"
    );
    let h = HolderToken::mint();
    b.claim("loud", &h, "b", TTL).await.unwrap().unwrap();
    woken_within(&mut w, HINT_BOUND)
        .await
        .expect("the claim of a name someone waits on woke the waiter");
    assert!(b.release("loud", &h).await.unwrap());
    woken_within(&mut w, HINT_BOUND)
        .await
        .expect("the release of a name someone waits on woke the waiter");
    let loud = heard(&mut tap, Duration::from_millis(100)).await;
    let hint = format!("lease {prefix}{{loud}}");
    assert_eq!(loud, vec![hint.clone(), hint], "what was published");
}
