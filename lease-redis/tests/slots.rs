//! Redis-specific slot behaviour: the fields in the name's hash, exact instants over the whole
//! `i64` range, the term schemes, validation before I/O, and `unfinished` on a connection that
//! refuses cross-slot pipelines (as a Redis Cluster connection does).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lease_core::{
    ErrorKind, LeaseStore,
    backend::{
        HolderToken,
        slots::{SlotClaim, SlotStore},
    },
};
use lease_redis::redis::aio::{ConnectionLike, MultiplexedConnection};
use lease_redis::redis::{AsyncTypedCommands, Cmd, Pipeline, RedisFuture, ServerErrorKind, Value};
use lease_redis::{RedisStore, TermScheme};

const TTL: Duration = Duration::from_millis(600);

async fn server_ms(raw: &mut MultiplexedConnection) -> i64 {
    let (secs, micros): (i64, i64) = lease_redis::redis::cmd("TIME")
        .query_async(raw)
        .await
        .unwrap();
    secs * 1000 + micros / 1000
}

#[tokio::test]
async fn slot_instants_live_in_the_names_hash_without_a_key_ttl() {
    let Some(url) = common::url() else { return };
    let prefix = common::unique("sl");
    let Some(store) = common::direct(&url, common::config().key_prefix(&prefix)).await else {
        return;
    };
    let mut raw = common::raw(&url).await;
    let name = "nightly{eu}";
    let key = store.record_key(name).unwrap();
    let at = server_ms(&mut raw).await - 10_000;
    let h = HolderToken::mint();
    let SlotClaim::Claimed { grant, .. } = store.claim_slot(name, &h, "w", TTL, at).await.unwrap()
    else {
        panic!("a free instant was refused");
    };
    let fields: HashMap<String, String> = raw.hgetall(&key).await.unwrap();
    assert_eq!(fields.get("slot_ms"), Some(&at.to_string()));
    assert_eq!(fields.get("unfinished_ms"), Some(&at.to_string()));
    assert_eq!(fields.get("term"), Some(&grant.term.to_string()));
    assert!(!fields.contains_key("rerun_ms"), "{fields:?}");
    assert_eq!(fields.len(), 6, "{fields:?}");
    assert_eq!(raw.pttl(&key).await.unwrap(), -1, "a key TTL");
    // The lease is the name's ordinary lease: verify and get see it.
    assert_eq!(
        store.verify(name, &h).await.unwrap().map(|g| g.term),
        Some(grant.term)
    );
    let f = store.finish_slot(name, &h, at, None).await.unwrap();
    assert!(f.recorded && f.released && !f.passed_taken, "{f:?}");
    let fields: HashMap<String, String> = raw.hgetall(&key).await.unwrap();
    assert!(!fields.contains_key("unfinished_ms"), "{fields:?}");
    assert_eq!(raw.pttl(&key).await.unwrap(), -1, "a key TTL");
    assert!(!store.get(name).await.unwrap().unwrap().live);
    // Nothing else was written.
    let keys: Vec<String> = raw.keys(format!("{prefix}*")).await.unwrap();
    assert_eq!(keys, vec![key.clone()]);
    // A name claimed only as a plain lease has a record with no instants.
    let plain = "plain";
    store.claim(plain, &h, "w", TTL).await.unwrap().unwrap();
    let rec = store.last_slot(plain).await.unwrap().unwrap();
    assert_eq!(rec, lease_core::backend::slots::SlotRecord::default());
    let f = store.finish_slot(plain, &h, at, None).await.unwrap();
    assert!(!f.recorded && f.released, "{f:?}");
    let _: usize = raw.del(&key).await.unwrap();
    let _: usize = raw.del(store.record_key(plain).unwrap()).await.unwrap();
}

#[tokio::test]
async fn instants_are_exact_over_the_whole_i64_range() {
    let Some(url) = common::url() else { return };
    let Some(store) = common::direct(&url, common::config()).await else {
        return;
    };
    let name = format!("{}exact", common::unique("ex"));
    let h = HolderToken::mint();
    // Beyond 2^53 a Lua number could not tell these apart; the scripts compare decimal strings.
    let big = -(1_i64 << 53);
    for at in [i64::MIN, i64::MIN + 1, big - 2, big - 1, -10, -9, -1, 0, 1] {
        let c = store.claim_slot(&name, &h, "w", TTL, at).await.unwrap();
        assert!(matches!(c, SlotClaim::Claimed { .. }), "{at}: {c:?}");
        let rec = store.last_slot(&name).await.unwrap().unwrap();
        assert_eq!(rec.last_ms, Some(at));
        let f = store.finish_slot(&name, &h, at, None).await.unwrap();
        assert!(f.recorded, "{at}");
        assert_eq!(
            store.claim_slot(&name, &h, "w", TTL, at).await.unwrap(),
            SlotClaim::Taken { last_ms: at }
        );
    }
    for at in [(1_i64 << 53) + 1, i64::MAX - 1, i64::MAX] {
        let c = store.claim_slot(&name, &h, "w", TTL, at).await.unwrap();
        assert!(matches!(c, SlotClaim::Early { .. }), "{at}: {c:?}");
    }
    // passed is compared the same way: an equal instant is not taken along, a later one is.
    for (at, passed, taken) in [(2, 2, false), (3, 4, true)] {
        assert!(matches!(
            store.claim_slot(&name, &h, "w", TTL, at).await.unwrap(),
            SlotClaim::Claimed { .. }
        ));
        let f = store
            .finish_slot(&name, &h, at, Some(passed))
            .await
            .unwrap();
        assert_eq!((f.recorded, f.passed_taken), (true, taken), "{f:?}");
    }
    assert_eq!(
        store.claim_slot(&name, &h, "w", TTL, 4).await.unwrap(),
        SlotClaim::Taken { last_ms: 4 }
    );
    store.forget(&name, Duration::ZERO).await.unwrap();
}

#[tokio::test]
async fn slot_terms_follow_the_term_scheme() {
    let Some(url) = common::url() else { return };
    let prefix = common::unique("st");
    let mut raw = common::raw(&url).await;
    let Some(floored) = common::direct(
        &url,
        common::config()
            .key_prefix(&prefix)
            .term_scheme(TermScheme::ClockFloor),
    )
    .await
    else {
        return;
    };
    let server_us = u64::try_from(server_ms(&mut raw).await).unwrap() * 1000;
    let at = i64::try_from(server_us / 1000).unwrap() - 10_000;
    let h = HolderToken::mint();
    let SlotClaim::Claimed { grant, .. } =
        floored.claim_slot("job", &h, "w", TTL, at).await.unwrap()
    else {
        panic!("refused");
    };
    assert!(
        grant.term >= server_us && grant.term < (1 << 53),
        "{grant:?}"
    );
    assert!(floored.force_release("job").await.unwrap());
    let rerun = floored
        .claim_rerun("job", &h, "w", TTL, at)
        .await
        .unwrap()
        .unwrap();
    assert!(rerun.term > grant.term);
    let _: usize = raw.del(floored.record_key("job").unwrap()).await.unwrap();
}

#[tokio::test]
async fn slot_names_and_ttls_are_refused_before_any_io() {
    let store = common::store_without_server();
    let h = HolderToken::mint();
    let long = "n".repeat(lease_redis::MAX_NAME_BYTES + 1);
    for bad in [String::new(), long, "a\0b".to_owned()] {
        let errors = [
            store.claim_slot(&bad, &h, "a", TTL, 1).await.unwrap_err(),
            store.finish_slot(&bad, &h, 1, None).await.unwrap_err(),
            store.claim_rerun(&bad, &h, "a", TTL, 1).await.unwrap_err(),
            store.last_slot(&bad).await.unwrap_err(),
            store
                .unfinished(&["ok".to_owned(), bad.clone()])
                .await
                .unwrap_err(),
        ];
        for e in errors {
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad:?}: {e}");
        }
    }
    for ttl in [Duration::ZERO, Duration::from_secs(2 * 24 * 3600)] {
        let e = store.claim_slot("ok", &h, "a", ttl, 1).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{e}");
        let e = store.claim_rerun("ok", &h, "a", ttl, 1).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{e}");
    }
    let e = store.claim_slot("ok", &h, "", TTL, 1).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName, "{e}");
    // No names, no I/O.
    assert!(store.unfinished(&[]).await.unwrap().is_empty());
    let e = store.last_slot("ok").await.unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout),
        "{e}"
    );
}

/// A connection that refuses every pipeline of more than one command with `CROSSSLOT`, as the
/// `redis` crate's cluster connection does when the keys lie in different hash slots.
#[derive(Clone)]
struct ClusterLike {
    inner: MultiplexedConnection,
    refused: Arc<AtomicUsize>,
    singles: Arc<AtomicUsize>,
}

impl ConnectionLike for ClusterLike {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.singles.fetch_add(1, Ordering::Relaxed);
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        if pipeline.len() > 1 {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Box::pin(async {
                Err((
                    ServerErrorKind::CrossSlot.into(),
                    "Received crossed slots in pipeline",
                )
                    .into())
            });
        }
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[tokio::test]
async fn unfinished_falls_back_to_one_call_per_name_on_a_cluster_connection() {
    let Some(url) = common::url() else { return };
    let mut raw = common::raw(&url).await;
    let conn = ClusterLike {
        inner: common::raw(&url).await,
        refused: Arc::default(),
        singles: Arc::default(),
    };
    let store = RedisStore::with_client(conn.clone(), common::config()).unwrap();
    store.available().await.unwrap();
    let prefix = common::unique("cl");
    let names: Vec<String> = (0..5).map(|i| format!("{prefix}{i}")).collect();
    let at = server_ms(&mut raw).await - 10_000;
    let h = HolderToken::mint();
    for (i, name) in names.iter().enumerate() {
        let c = store
            .claim_slot(name, &h, "w", TTL, at - i as i64)
            .await
            .unwrap();
        assert!(matches!(c, SlotClaim::Claimed { .. }), "{c:?}");
        if i % 2 == 0 {
            assert!(store.force_release(name).await.unwrap()); // cut short
        } else {
            assert!(
                store
                    .finish_slot(name, &h, at - i as i64, None)
                    .await
                    .unwrap()
                    .recorded
            );
        }
    }
    let before = conn.singles.load(Ordering::Relaxed);
    let due = store.unfinished(&names).await.unwrap();
    assert_eq!(
        due,
        vec![
            (names[0].clone(), at),
            (names[2].clone(), at - 2),
            (names[4].clone(), at - 4)
        ]
    );
    assert_eq!(conn.refused.load(Ordering::Relaxed), 1);
    assert_eq!(conn.singles.load(Ordering::Relaxed) - before, names.len());
    // One name is one command, which any connection routes.
    let due = store.unfinished(&names[..1]).await.unwrap();
    assert_eq!(due, vec![(names[0].clone(), at)]);
    assert_eq!(conn.refused.load(Ordering::Relaxed), 1);
    for name in &names {
        let _: usize = raw.del(store.record_key(name).unwrap()).await.unwrap();
    }
}
