//! The Redis fence on the real server (`LEASE_TEST_REDIS_URL`; unset prints one `SKIPPED`
//! line, a failure when `LEASE_TEST_REQUIRE` names redis): a zombie whose successor has written
//! is refused and changes nothing; one term writes twice; a higher term raises the fence; with
//! the check broken the zombie's write gets through; two racing writers never land a lower
//! token after a higher one; a failing command leaves the fence as it was.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

mod common;

use common::{RACE_WRITES, assert_never_back, assert_refused, race, unique};
use lease_conformance::env;
use lease_core::ErrorKind;
use lease_fence::redis::RedisFence;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

async fn conn() -> Option<MultiplexedConnection> {
    let url = env::server_url("redis")?;
    let client = redis::Client::open(url.as_str()).unwrap();
    match client.get_multiplexed_async_connection().await {
        Ok(c) => Some(c),
        Err(e) => {
            env::skip("redis", &format!("cannot connect to {url}: {e}"));
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_after_its_successor_is_refused_and_changes_nothing() {
    let Some(mut c) = conn().await else { return };
    let fence = RedisFence::new();
    let resource = unique("orders/");
    let key = unique("fenced:");
    fence
        .set(&mut c, &resource, 5, &key, "first")
        .await
        .unwrap();
    fence
        .set(&mut c, &resource, 6, &key, "successor")
        .await
        .unwrap();

    let e = fence
        .set(&mut c, &resource, 5, &key, "zombie")
        .await
        .unwrap_err();
    assert_refused(&e, &resource, 5, 6);
    assert!(!e.is_temporary());
    assert_eq!(c.get::<_, String>(&key).await.unwrap(), "successor");
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(6));

    // Every shorthand is refused the same way, and changes nothing.
    let hash = unique("hash:");
    let stream = unique("stream:");
    assert!(
        fence
            .hset(&mut c, &resource, 4, &hash, "f", "v")
            .await
            .unwrap_err()
            .is_stale()
    );
    assert!(
        fence
            .del(&mut c, &resource, 4, &key)
            .await
            .unwrap_err()
            .is_stale()
    );
    assert!(
        fence
            .xadd(&mut c, &resource, 4, &stream, &[("f", "v")])
            .await
            .unwrap_err()
            .is_stale()
    );
    let exists: (bool, bool, bool) = redis::pipe()
        .exists(&hash)
        .exists(&key)
        .exists(&stream)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(exists, (false, true, false));
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(6));
    let _: () = c.del(&[&key, &fence.key(&resource)]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_term_writes_twice_and_a_higher_one_raises_the_fence() {
    let Some(mut c) = conn().await else { return };
    let fence = RedisFence::with_prefix(&unique("fence-test:")).unwrap();
    let resource = unique("report/");
    let (hash, stream, key) = (unique("h:"), unique("s:"), unique("k:"));
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), None);
    assert_eq!(
        fence
            .hset(&mut c, &resource, 3, &hash, "a", 1)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        fence
            .hset(&mut c, &resource, 3, &hash, "a", 2)
            .await
            .unwrap(),
        0
    );
    assert_eq!(c.hget::<_, _, i64>(&hash, "a").await.unwrap(), 2);
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(3));

    let id = fence
        .xadd(&mut c, &resource, 9, &stream, &[("n", "1")])
        .await
        .unwrap();
    assert!(id.contains('-'), "{id}");
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(9));
    fence.set(&mut c, &resource, 9, &key, "x").await.unwrap();
    assert_eq!(fence.del(&mut c, &resource, 9, &key).await.unwrap(), 1);
    assert!(
        fence
            .hset(&mut c, &resource, 3, &hash, "a", 3)
            .await
            .unwrap_err()
            .is_stale()
    );
    assert_eq!(c.hget::<_, _, i64>(&hash, "a").await.unwrap(), 2);

    // The general form: any one command, its reply as asked.
    let mut incr = redis::cmd("INCRBY");
    incr.arg(&key).arg(5);
    assert_eq!(
        fence
            .write::<_, i64>(&mut c, &resource, 9, &incr)
            .await
            .unwrap(),
        5
    );

    // Tokens beyond 2^53 order exactly (compared as decimal strings, not Lua doubles).
    let big = unique("big/");
    let top = (1_u64 << 53) + 2;
    fence.set(&mut c, &big, top, &key, "top").await.unwrap();
    let e = fence
        .set(&mut c, &big, top - 1, &key, "below")
        .await
        .unwrap_err();
    assert_eq!(e.stale().map(|s| s.fence()), Some(top));
    fence
        .set(&mut c, &big, u64::MAX, &key, "max")
        .await
        .unwrap();
    assert_eq!(fence.token(&mut c, &big).await.unwrap(), Some(u64::MAX));
    let _: () = c
        .del(&[
            &hash,
            &stream,
            &key,
            &fence.key(&resource),
            &fence.key(&big),
        ])
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_check_broken_the_zombie_gets_through() {
    let Some(mut c) = conn().await else { return };
    let fence = RedisFence::new();
    let resource = unique("orders/");
    let key = unique("fenced:");
    fence
        .set(&mut c, &resource, 6, &key, "successor")
        .await
        .unwrap();
    let broken = fence.clone().break_check_for_tests();
    broken
        .set(&mut c, &resource, 5, &key, "zombie")
        .await
        .unwrap();
    assert_eq!(
        c.get::<_, String>(&key).await.unwrap(),
        "zombie",
        "the broken fence let the zombie write"
    );
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(5));
    let _: () = c.del(&[&key, &fence.key(&resource)]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_racing_writers_never_land_a_lower_token_after_a_higher_one() {
    let Some(c) = conn().await else { return };
    let fence = RedisFence::new();
    let resource = unique("log/");
    let list = unique("list:");
    let (low, high) = (10_u64, 11_u64);
    let race = race(low, high, {
        let (c, fence, resource, list) = (c.clone(), fence.clone(), resource.clone(), list.clone());
        move |token: u64, _| {
            let (mut c, fence, resource) = (c.clone(), fence.clone(), resource.clone());
            let mut cmd = redis::cmd("RPUSH");
            cmd.arg(&list).arg(token);
            async move {
                fence
                    .write::<_, i64>(&mut c, &resource, token, &cmd)
                    .await
                    .map(drop)
            }
        }
    })
    .await;

    let mut c = c;
    let tokens: Vec<u64> = c.lrange(&list, 0, -1).await.unwrap();
    assert_never_back(&tokens);
    assert_eq!(tokens.iter().filter(|t| **t == high).count(), RACE_WRITES);
    assert_eq!(
        tokens.iter().filter(|t| **t == low).count(),
        race.low_accepted
    );
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(high));
    let _: () = c.del(&[&list, &fence.key(&resource)]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_command_and_bad_input_leave_the_fence_as_it_was() {
    let Some(mut c) = conn().await else { return };
    let fence = RedisFence::new();
    let resource = unique("typed/");
    let key = unique("string:");
    fence.set(&mut c, &resource, 2, &key, "text").await.unwrap();
    // HSET on a string: WRONGTYPE, the command's own error; the fence stays at 2.
    let e = fence
        .hset(&mut c, &resource, 7, &key, "f", "v")
        .await
        .unwrap_err();
    assert!(!e.is_stale());
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(2));

    let e = fence
        .set(&mut c, &resource, 0, &key, "x")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = fence.set(&mut c, "", 1, &key, "x").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);
    let e = fence
        .set(&mut c, &"r".repeat(256), 1, &key, "x")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);
    let e = fence
        .xadd::<_, &str, &str>(&mut c, &resource, 2, &key, &[])
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(RedisFence::with_prefix(&"p".repeat(300)).is_err());

    // A fence key that holds something else is reported, not taken for a token.
    let foreign = unique("foreign/");
    let _: () = c.set(fence.key(&foreign), "not a token").await.unwrap();
    let e = fence.set(&mut c, &foreign, 1, &key, "x").await.unwrap_err();
    assert!(!e.is_stale());
    assert!(
        e.to_string().contains("LEASEFENCECORRUPT")
            || format!("{e:?}").contains("LEASEFENCECORRUPT"),
        "{e:?}"
    );
    assert_eq!(c.get::<_, String>(&key).await.unwrap(), "text");
    let _: () = c
        .del(&[&key, &fence.key(&resource), &fence.key(&foreign)])
        .await
        .unwrap();
}
