//! The etcd fence on the real server (`LEASE_TEST_ETCD_URL`, `etcd://host:port[,host:port…]`;
//! unset prints one `SKIPPED` line, a failure when `LEASE_TEST_REQUIRE` names etcd): a zombie
//! whose successor has written is refused and changes nothing; one term writes twice; a higher
//! term raises the fence; with the check broken the zombie's write gets through; two racing
//! writers never land a lower token after a higher one.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

mod common;

use common::{RACE_WRITES, assert_never_back, assert_refused, race, unique};
use etcd_client::{Client, GetOptions, SortOrder, SortTarget, TxnOp};
use lease_conformance::env;
use lease_core::ErrorKind;
use lease_fence::etcd::EtcdFence;

async fn client() -> Option<Client> {
    let url = env::server_url("etcd")?;
    let endpoints: Vec<String> = url
        .trim_start_matches("etcd://")
        .split('/')
        .next()
        .unwrap_or_default()
        .split(',')
        .map(str::to_owned)
        .collect();
    match Client::connect(endpoints, None).await {
        Ok(c) => Some(c),
        Err(e) => {
            env::skip("etcd", &format!("cannot connect to {url}: {e}"));
            None
        }
    }
}

async fn value(c: &mut Client, key: &str) -> Option<String> {
    let answer = c.get(key, None).await.unwrap();
    answer
        .kvs()
        .first()
        .map(|kv| String::from_utf8(kv.value().to_vec()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_after_its_successor_is_refused_and_changes_nothing() {
    let Some(mut c) = client().await else { return };
    let fence = EtcdFence::new();
    let resource = unique("orders/");
    let key = unique("lease-fence-test/data/");
    fence
        .put(&mut c, &resource, 5, key.clone(), "first")
        .await
        .unwrap();
    fence
        .put(&mut c, &resource, 6, key.clone(), "successor")
        .await
        .unwrap();
    let e = fence
        .put(&mut c, &resource, 5, key.clone(), "zombie")
        .await
        .unwrap_err();
    assert_refused(&e, &resource, 5, 6);
    assert_eq!(value(&mut c, &key).await.as_deref(), Some("successor"));
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(6));
    // A delete under the stale token is refused too.
    let e = fence
        .write(&mut c, &resource, 4, vec![TxnOp::delete(key.clone(), None)])
        .await
        .unwrap_err();
    assert!(e.is_stale());
    assert_eq!(value(&mut c, &key).await.as_deref(), Some("successor"));
    c.delete(key, None).await.unwrap();
    c.delete(fence.key(&resource), None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_term_writes_twice_and_a_higher_one_raises_the_fence() {
    let Some(mut c) = client().await else { return };
    let fence = EtcdFence::with_prefix(&unique("lease-fence-test/fences-")).unwrap();
    let resource = unique("report/");
    let (a, b) = (unique("lease-fence-test/a/"), unique("lease-fence-test/b/"));
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), None);
    fence
        .put(&mut c, &resource, 3, a.clone(), "1")
        .await
        .unwrap();
    fence
        .put(&mut c, &resource, 3, a.clone(), "2")
        .await
        .unwrap();
    assert_eq!(value(&mut c, &a).await.as_deref(), Some("2"));
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(3));

    // Several operations, one transaction; their responses come back in order.
    let answers = fence
        .write(
            &mut c,
            &resource,
            9,
            vec![
                TxnOp::put(b.clone(), "x", None),
                TxnOp::delete(a.clone(), None),
            ],
        )
        .await
        .unwrap();
    assert_eq!(answers.len(), 2);
    assert_eq!(value(&mut c, &a).await, None);
    assert_eq!(value(&mut c, &b).await.as_deref(), Some("x"));
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(9));
    assert!(
        fence
            .put(&mut c, &resource, 3, b.clone(), "y")
            .await
            .unwrap_err()
            .is_stale()
    );
    assert_eq!(value(&mut c, &b).await.as_deref(), Some("x"));

    // Tokens past 2^53 and up to u64::MAX order exactly.
    let big = unique("big/");
    fence
        .put(&mut c, &big, u64::MAX - 1, b.clone(), "big")
        .await
        .unwrap();
    let e = fence
        .put(&mut c, &big, 1 << 60, b.clone(), "z")
        .await
        .unwrap_err();
    assert_eq!(e.stale().map(|s| s.fence()), Some(u64::MAX - 1));
    fence
        .put(&mut c, &big, u64::MAX, b.clone(), "max")
        .await
        .unwrap();

    // Bad input, before any I/O.
    let e = fence
        .put(&mut c, &resource, 0, b.clone(), "z")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = fence.put(&mut c, "", 1, b.clone(), "z").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);
    let e = fence.write(&mut c, &resource, 9, vec![]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    for k in [&b, &fence.key(&resource), &fence.key(&big)] {
        c.delete(k.as_str(), None).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_check_broken_the_zombie_gets_through() {
    let Some(mut c) = client().await else { return };
    let fence = EtcdFence::new();
    let resource = unique("orders/");
    let key = unique("lease-fence-test/data/");
    fence
        .put(&mut c, &resource, 6, key.clone(), "successor")
        .await
        .unwrap();
    let broken = fence.clone().break_check_for_tests();
    broken
        .put(&mut c, &resource, 5, key.clone(), "zombie")
        .await
        .unwrap();
    assert_eq!(
        value(&mut c, &key).await.as_deref(),
        Some("zombie"),
        "the broken fence let the zombie write"
    );
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(5));
    c.delete(key, None).await.unwrap();
    c.delete(fence.key(&resource), None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_racing_writers_never_land_a_lower_token_after_a_higher_one() {
    let Some(c) = client().await else { return };
    let fence = EtcdFence::new();
    let resource = unique("log/");
    // Each accepted write puts a key of its own under this prefix, holding its token; etcd's
    // create revisions give the order in which they landed.
    let log = unique("lease-fence-test/log/");
    let (low, high) = (10_u64, 11_u64);
    let race = race(low, high, {
        let (c, fence, resource, log) = (c.clone(), fence.clone(), resource.clone(), log.clone());
        move |token: u64, i| {
            let (mut c, fence, resource) = (c.clone(), fence.clone(), resource.clone());
            let put = TxnOp::put(format!("{log}{token}-{i}"), token.to_string(), None);
            async move {
                fence
                    .write(&mut c, &resource, token, vec![put])
                    .await
                    .map(drop)
            }
        }
    })
    .await;

    let mut c = c;
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let answer = c.get(log.as_str(), Some(options)).await.unwrap();
    let tokens: Vec<u64> = answer
        .kvs()
        .iter()
        .map(|kv| std::str::from_utf8(kv.value()).unwrap().parse().unwrap())
        .collect();
    assert_never_back(&tokens);
    assert_eq!(tokens.iter().filter(|t| **t == high).count(), RACE_WRITES);
    assert_eq!(
        tokens.iter().filter(|t| **t == low).count(),
        race.low_accepted
    );
    assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(high));
    c.delete(
        log.as_str(),
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .unwrap();
    c.delete(fence.key(&resource), None).await.unwrap();
}
