//! The NATS KV fence on the real server (`LEASE_TEST_NATS_URL`; unset prints one `SKIPPED`
//! line, a failure when `LEASE_TEST_REQUIRE` names nats): a zombie whose successor has written
//! is refused and changes nothing; one term writes twice; a higher term raises the fence; with
//! the check broken the zombie's put gets through; two racing writers never land a lower token
//! after a higher one.
//!
//! Each test makes a bucket of its own. async-nats 0.51 cannot read nats-server 2.9's account
//! info, so `create_key_value` fails there; `lease_fence::nats::create_bucket` creates the
//! bucket's stream directly (the project's known workaround, as lease-nats does), then opens
//! it with `get_key_value`.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

mod common;

use std::sync::Arc;

use async_nats::jetstream::{self, kv::Store};
use common::{RACE_WRITES, assert_never_back, assert_refused, race, unique};
use lease_conformance::env;
use lease_core::ErrorKind;
use lease_fence::nats::NatsFence;

/// A bucket of the test's own, and its JetStream context (to delete it after).
async fn bucket() -> Option<(Store, jetstream::Context, String)> {
    let url = env::server_url("nats")?;
    let client = match async_nats::connect(url.as_str()).await {
        Ok(c) => c,
        Err(e) => {
            env::skip("nats", &format!("cannot connect to {url}: {e}"));
            return None;
        }
    };
    let js = jetstream::new(client);
    let name = unique("fence_");
    let kv = lease_fence::nats::create_bucket(&js, &name).await.unwrap();
    Some((kv, js, name))
}

async fn drop_bucket(js: &jetstream::Context, name: &str) {
    let _ = js.delete_stream(format!("KV_{name}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_after_its_successor_is_refused_and_changes_nothing() {
    let Some((kv, js, name)) = bucket().await else {
        return;
    };
    let fence = NatsFence::new();
    fence.put(&kv, "orders.7", 5, "first").await.unwrap();
    let revision = fence.put(&kv, "orders.7", 6, "successor").await.unwrap();
    let e = fence.put(&kv, "orders.7", 5, "zombie").await.unwrap_err();
    assert_refused(&e, "orders.7", 5, 6);
    let (token, value) = fence.get(&kv, "orders.7").await.unwrap().unwrap();
    assert_eq!((token, &value[..]), (6, &b"successor"[..]));
    assert_eq!(
        kv.entry("orders.7").await.unwrap().unwrap().revision,
        revision
    );
    drop_bucket(&js, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_term_writes_twice_and_a_higher_one_raises_the_fence() {
    let Some((kv, js, name)) = bucket().await else {
        return;
    };
    let fence = NatsFence::new();
    assert_eq!(fence.get(&kv, "r").await.unwrap(), None);
    fence.put(&kv, "r", 3, "a").await.unwrap();
    fence.put(&kv, "r", 3, "b").await.unwrap();
    assert_eq!(
        fence
            .get(&kv, "r")
            .await
            .unwrap()
            .map(|(t, v)| (t, v.to_vec())),
        Some((3, b"b".to_vec()))
    );
    fence.put(&kv, "r", 9, "").await.unwrap();
    assert!(fence.put(&kv, "r", 3, "c").await.unwrap_err().is_stale());
    assert_eq!(
        fence
            .get(&kv, "r")
            .await
            .unwrap()
            .map(|(t, v)| (t, v.len())),
        Some((9, 0))
    );
    fence.put(&kv, "r", u64::MAX, "max").await.unwrap();
    assert!(
        fence
            .put(&kv, "r", u64::MAX - 1, "x")
            .await
            .unwrap_err()
            .is_stale()
    );

    // Bad input before any I/O; a key that some other writer filled is reported.
    assert_eq!(
        fence.put(&kv, "r", 0, "x").await.unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        fence.put(&kv, "", 1, "x").await.unwrap_err().kind(),
        ErrorKind::InvalidName
    );
    kv.put("foreign", "plain".into()).await.unwrap();
    let e = fence.put(&kv, "foreign", 1, "x").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    assert_eq!(kv.get("foreign").await.unwrap().unwrap(), "plain");
    drop_bucket(&js, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_check_broken_the_zombie_gets_through() {
    let Some((kv, js, name)) = bucket().await else {
        return;
    };
    let fence = NatsFence::new();
    fence.put(&kv, "orders.7", 6, "successor").await.unwrap();
    let broken = fence.clone().break_check_for_tests();
    broken.put(&kv, "orders.7", 5, "zombie").await.unwrap();
    let (token, value) = fence.get(&kv, "orders.7").await.unwrap().unwrap();
    assert_eq!(
        (token, &value[..]),
        (5, &b"zombie"[..]),
        "the broken fence let the zombie write"
    );
    drop_bucket(&js, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_racing_writers_never_land_a_lower_token_after_a_higher_one() {
    let Some((kv, js, name)) = bucket().await else {
        return;
    };
    let fence = NatsFence::new();
    let (low, high) = (10_u64, 11_u64);
    // Every accepted put's revision and token: in revision order, the order they landed.
    let landed = Arc::new(std::sync::Mutex::new(Vec::new()));
    race(low, high, {
        let (kv, fence, landed) = (kv.clone(), fence.clone(), landed.clone());
        move |token: u64, _| {
            let (kv, fence, landed) = (kv.clone(), fence.clone(), landed.clone());
            async move {
                let revision = fence.put(&kv, "log", token, token.to_string()).await?;
                landed.lock().unwrap().push((revision, token));
                Ok(())
            }
        }
    })
    .await;

    let mut landed = landed.lock().unwrap().clone();
    landed.sort_unstable();
    let tokens: Vec<u64> = landed.iter().map(|(_, t)| *t).collect();
    assert_never_back(&tokens);
    assert_eq!(tokens.iter().filter(|t| **t == high).count(), RACE_WRITES);
    assert_eq!(
        fence.get(&kv, "log").await.unwrap().map(|(t, _)| t),
        Some(high)
    );
    drop_bucket(&js, &name).await;
}

/// `create_bucket` opens a bucket that exists with its configuration (a second process starting
/// beside the first), and refuses a name NATS cannot take, before any I/O.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_bucket_is_idempotent_and_refuses_bad_names() {
    let Some((kv, js, name)) = bucket().await else {
        return;
    };
    NatsFence::new().put(&kv, "k", 3, "kept").await.unwrap();
    let again = lease_fence::nats::create_bucket(&js, &name).await.unwrap();
    let (token, value) = NatsFence::new().get(&again, "k").await.unwrap().unwrap();
    assert_eq!(
        (token, &value[..]),
        (3, &b"kept"[..]),
        "the second open kept the data"
    );
    for bad in ["", "a.b", "a b", "a>"] {
        let e = lease_fence::nats::create_bucket(&js, bad)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}: {e}");
        assert!(e.to_string().contains("letters, digits"), "{e}");
    }
    drop_bucket(&js, &name).await;
}
