//! Redis-specific partition and membership behaviour: the key layout (one hash per group; a hash
//! and a sorted set per service; no key TTL), epochs under both term schemes (and after a lost
//! group), batches of the largest size, pruning of expired members, `forget_group`, malformed
//! records, and validation before any I/O.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use lease_core::{
    ErrorKind, LeaseStore,
    backend::{
        membership::MembershipStore,
        partitions::{MAX_PARTITIONS_PER_CALL, PartitionStore},
    },
};
use lease_redis::TermScheme;
use lease_redis::redis::aio::MultiplexedConnection;
use lease_redis::redis::{AsyncTypedCommands, ValueType};

const TTL: Duration = Duration::from_millis(600);
const LONG: Duration = Duration::from_secs(30);

async fn server_us(raw: &mut MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = lease_redis::redis::cmd("TIME")
        .query_async(raw)
        .await
        .unwrap();
    secs * 1_000_000 + micros
}

#[tokio::test]
async fn partitions_live_in_one_hash_per_group_without_a_key_ttl() {
    let Some(url) = common::url() else { return };
    let prefix = common::unique("gk");
    let Some(store) = common::direct(&url, common::config().key_prefix(&prefix)).await else {
        return;
    };
    let mut raw = common::raw(&url).await;
    let group = "orders{eu}";
    let key = store.partitions_key(group).unwrap();
    assert_eq!(key, format!("{prefix}{{orders%7Beu%7D}}:partitions"));
    let owner = "node-a@0123456789abcdef";
    let l3 = store
        .acquire_partition(group, 3, owner, TTL)
        .await
        .unwrap()
        .unwrap();
    store
        .acquire_partition(group, 7, "node b@1", TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(l3.epoch, 1);
    assert_eq!(raw.key_type(&key).await.unwrap(), ValueType::Hash);
    let fields: HashMap<String, String> = raw.hgetall(&key).await.unwrap();
    assert_eq!(fields.len(), 2, "{fields:?}");
    let (epoch, rest) = fields["3"].split_once(' ').unwrap();
    let (expires_at_ms, stored_owner) = rest.split_once(' ').unwrap();
    assert_eq!((epoch, stored_owner), ("1", owner));
    let server_ms = server_us(&mut raw).await / 1000;
    let expires_at_ms: u64 = expires_at_ms.parse().unwrap();
    assert!(
        expires_at_ms > server_ms && expires_at_ms <= server_ms + 600,
        "{expires_at_ms} vs {server_ms}"
    );
    // An owner holding spaces is kept whole.
    assert!(fields["7"].ends_with(" node b@1"), "{fields:?}");
    assert_eq!(raw.pttl(&key).await.unwrap(), -1, "a key TTL");

    // Release keeps the record and its epoch; so does expiry.
    assert_eq!(
        store.release_partitions(group, &[3], owner).await.unwrap(),
        1
    );
    let after: String = raw.hget(&key, "3").await.unwrap().unwrap();
    assert!(after.starts_with("1 "), "{after}");
    assert!(after.ends_with(&format!(" {owner}")), "{after}");
    tokio::time::sleep(TTL + Duration::from_millis(100)).await;
    assert!(store.owners(group).await.unwrap().is_empty());
    assert_eq!(raw.hlen(&key).await.unwrap(), 2);
    assert_eq!(raw.pttl(&key).await.unwrap(), -1, "a key TTL");
    let back = store
        .acquire_partition(group, 7, "node b@1", TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.epoch, 2, "the epoch continues after expiry");

    // Membership: a hash of records and a sorted set of expiries, no key TTL either.
    let (records, expiries) = store.membership_keys("billing").unwrap();
    assert_eq!(records, format!("{prefix}{{billing}}:members"));
    assert_eq!(expiries, format!("{prefix}{{billing}}:members:expiry"));
    let groups = vec!["orders{eu}".to_owned(), "mail".to_owned()];
    store
        .heartbeat("billing", "n1", "10.0.0.1:7000", TTL, &groups)
        .await
        .unwrap();
    assert_eq!(raw.key_type(&records).await.unwrap(), ValueType::Hash);
    assert_eq!(raw.key_type(&expiries).await.unwrap(), ValueType::ZSet);
    let value: String = raw.hget(&records, "n1").await.unwrap().unwrap();
    assert_eq!(value, "10.0.0.1:7000\norders{eu}\nmail");
    let score: f64 = raw.zscore(&expiries, "n1").await.unwrap().unwrap();
    let server_ms = (server_us(&mut raw).await / 1000) as f64;
    assert!(score > server_ms && score <= server_ms + 600.0, "{score}");
    assert_eq!(raw.pttl(&records).await.unwrap(), -1, "a key TTL");
    assert_eq!(raw.pttl(&expiries).await.unwrap(), -1, "a key TTL");
    let mut keys: Vec<String> = raw.keys(format!("{prefix}*")).await.unwrap();
    keys.sort();
    let mut expected = vec![key.clone(), records.clone(), expiries.clone()];
    expected.sort();
    assert_eq!(keys, expected, "nothing else was written");
    // Leaving deletes the record: the service's keys are gone with their last member.
    assert!(store.leave("billing", "n1").await.unwrap());
    assert!(!store.leave("billing", "n1").await.unwrap());
    let keys: Vec<String> = raw.keys(format!("{prefix}*")).await.unwrap();
    assert_eq!(keys, vec![key.clone()]);
    // Group keys are no lease records: purge_expired never sees them.
    assert!(
        store
            .purge_expired(Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(raw.hlen(&key).await.unwrap(), 2);
    let _: usize = raw.del(&key).await.unwrap();
}

#[tokio::test]
async fn epochs_follow_the_term_scheme_and_clock_floor_epochs_survive_a_lost_group() {
    let Some(url) = common::url() else { return };
    let prefix = common::unique("ge");
    let mut raw = common::raw(&url).await;
    let group = "jobs";
    let (a, b) = ("node-a@1", "node-b@1");

    // Counter: 1, kept while held, +1 per change of hands; back to 1 once the group's hash is
    // gone (what a restart without AOF does): the hazard available() warns about.
    let Some(counter) = common::direct(&url, common::config().key_prefix(&prefix)).await else {
        return;
    };
    let key = counter.partitions_key(group).unwrap();
    let epoch = |l: Option<lease_core::backend::partitions::PartitionLease>| l.unwrap().epoch;
    assert_eq!(
        epoch(counter.acquire_partition(group, 0, a, TTL).await.unwrap()),
        1
    );
    assert_eq!(
        epoch(counter.acquire_partition(group, 0, a, TTL).await.unwrap()),
        1
    );
    assert_eq!(counter.release_partitions(group, &[0], a).await.unwrap(), 1);
    assert_eq!(
        epoch(counter.acquire_partition(group, 0, b, TTL).await.unwrap()),
        2
    );
    let _: usize = raw.del(&key).await.unwrap();
    assert_eq!(
        epoch(counter.acquire_partition(group, 0, b, TTL).await.unwrap()),
        1
    );
    let _: usize = raw.del(&key).await.unwrap();

    // Clock floor: epochs at least the server's clock in microseconds, kept while held, still
    // increasing after the group's hash is lost.
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
    assert!(!floored.capabilities().consecutive_terms);
    let now_us = server_us(&mut raw).await;
    let e1 = epoch(floored.acquire_partition(group, 0, a, TTL).await.unwrap());
    assert!(e1 >= now_us && e1 < (1 << 53), "{e1} vs {now_us}");
    assert_eq!(
        epoch(floored.acquire_partition(group, 0, a, TTL).await.unwrap()),
        e1,
        "kept while held"
    );
    let renewed = floored.renew_partitions(group, &[0], a, TTL).await.unwrap();
    assert_eq!(renewed[0].epoch, e1);
    assert_eq!(floored.owners(group).await.unwrap()[0].epoch, e1);
    assert_eq!(floored.release_partitions(group, &[0], a).await.unwrap(), 1);
    let e2 = epoch(floored.acquire_partition(group, 0, b, TTL).await.unwrap());
    assert!(e2 > e1);
    let _: usize = raw.del(&key).await.unwrap();
    let e3 = epoch(floored.acquire_partition(group, 0, b, TTL).await.unwrap());
    assert!(e3 > e2, "a lost group brought the epoch back: {e3} <= {e2}");
    let _: usize = raw.del(&key).await.unwrap();
}

#[tokio::test]
async fn a_batch_of_the_largest_size_is_one_script() {
    let Some(url) = common::url() else { return };
    let prefix = common::unique("gb");
    let Some(store) = common::direct(&url, common::config().key_prefix(&prefix)).await else {
        return;
    };
    let group = "big";
    let owner = "node-a@1";
    let max = u32::try_from(MAX_PARTITIONS_PER_CALL).unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for start in (0..max).step_by(500) {
        let store = store.clone();
        tasks.spawn(async move {
            for p in start..start + 500 {
                let got = store.acquire_partition(group, p, owner, LONG).await;
                assert!(matches!(got, Ok(Some(_))), "{p}: {got:?}");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    // Another owner's lease in the middle stays as it is.
    store
        .release_partitions(group, &[5000], owner)
        .await
        .unwrap();
    store
        .acquire_partition(group, 5000, "node-b@1", LONG)
        .await
        .unwrap()
        .unwrap();
    let all: Vec<u32> = (0..max).collect();
    let renewed = store
        .renew_partitions(group, &all, owner, LONG)
        .await
        .unwrap();
    assert_eq!(renewed.len(), MAX_PARTITIONS_PER_CALL - 1);
    assert!(renewed.iter().all(|l| l.partition != 5000 && l.epoch == 1));
    // Duplicates count once, whichever order.
    let mut twice: Vec<u32> = (0..max / 2).rev().collect();
    twice.extend(0..max / 2);
    let renewed = store
        .renew_partitions(group, &twice, owner, LONG)
        .await
        .unwrap();
    assert_eq!(renewed.len(), MAX_PARTITIONS_PER_CALL / 2);
    let owners = store.owners(group).await.unwrap();
    assert_eq!(owners.len(), MAX_PARTITIONS_PER_CALL);
    assert!(owners.windows(2).all(|w| w[0].partition < w[1].partition));
    assert_eq!(owners[5000].owner, "node-b@1");
    assert_eq!(
        store.release_partitions(group, &all, owner).await.unwrap(),
        MAX_PARTITIONS_PER_CALL - 1
    );
    assert_eq!(store.owners(group).await.unwrap().len(), 1);
    assert_eq!(
        store
            .release_partitions(group, &[5000], "node-b@1")
            .await
            .unwrap(),
        1
    );
    assert!(store.forget_group(group, Duration::ZERO).await.unwrap());
}

#[tokio::test]
async fn heartbeats_prune_expired_members_and_members_reads_only_live_ones() {
    let Some(url) = common::url() else { return };
    let prefix = common::unique("gm");
    let Some(store) = common::direct(&url, common::config().key_prefix(&prefix)).await else {
        return;
    };
    let mut raw = common::raw(&url).await;
    let (records, expiries) = store.membership_keys("svc").unwrap();
    // A TTL long enough that none expires while the others are still being written (the other
    // tests of this file load the server meanwhile).
    let short = Duration::from_secs(1);
    for n in 0..150 {
        store
            .heartbeat("svc", &format!("gone-{n:03}"), "", short, &[])
            .await
            .unwrap();
    }
    store
        .heartbeat("svc", "stays", "x", LONG, &[])
        .await
        .unwrap();
    assert_eq!(raw.hlen(&records).await.unwrap(), 151);
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    assert_eq!(
        raw.hlen(&records).await.unwrap(),
        151,
        "members() writes nothing"
    );
    let members = store.members("svc").await.unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].node, "stays");
    assert_eq!(
        raw.hlen(&records).await.unwrap(),
        151,
        "members() writes nothing"
    );
    // Each heartbeat drops up to 100 expired records.
    store
        .heartbeat("svc", "stays", "x", LONG, &[])
        .await
        .unwrap();
    assert_eq!(raw.hlen(&records).await.unwrap(), 51);
    assert_eq!(raw.zcard(&expiries).await.unwrap(), 51);
    store
        .heartbeat("svc", "stays", "x", LONG, &[])
        .await
        .unwrap();
    assert_eq!(raw.hlen(&records).await.unwrap(), 1);
    assert_eq!(raw.zcard(&expiries).await.unwrap(), 1);
    // A member that expired and comes back is live again.
    store
        .heartbeat("svc", "back", "", Duration::from_millis(100), &[])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!store.leave("svc", "back").await.unwrap(), "it had expired");
    store
        .heartbeat("svc", "back", "y", LONG, &[])
        .await
        .unwrap();
    let nodes: Vec<String> = store
        .members("svc")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.node)
        .collect();
    assert_eq!(nodes, ["back", "stays"]);
    // Node ids sort by bytes.
    store.heartbeat("svc", "Zed", "", LONG, &[]).await.unwrap();
    store.heartbeat("svc", "été", "", LONG, &[]).await.unwrap();
    let nodes: Vec<String> = store
        .members("svc")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.node)
        .collect();
    assert_eq!(nodes, ["Zed", "back", "stays", "été"]);
    for n in ["back", "stays", "Zed", "été"] {
        assert!(store.leave("svc", n).await.unwrap());
    }
    assert!(!raw.exists(&records).await.unwrap());
    assert!(!raw.exists(&expiries).await.unwrap());
}

#[tokio::test]
async fn forget_group_deletes_only_groups_that_ended_long_enough_ago() {
    let Some(url) = common::url() else { return };
    let prefix = common::unique("gf");
    let Some(store) = common::direct(&url, common::config().key_prefix(&prefix)).await else {
        return;
    };
    let mut raw = common::raw(&url).await;
    let key = store.partitions_key("g").unwrap();
    assert!(
        !store.forget_group("g", Duration::ZERO).await.unwrap(),
        "no such group"
    );
    store
        .acquire_partition("g", 0, "a@1", TTL)
        .await
        .unwrap()
        .unwrap();
    store
        .acquire_partition("g", 1, "a@1", TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !store.forget_group("g", Duration::ZERO).await.unwrap(),
        "live"
    );
    assert_eq!(store.release_partitions("g", &[0], "a@1").await.unwrap(), 1);
    assert!(
        !store.forget_group("g", Duration::ZERO).await.unwrap(),
        "one still live"
    );
    assert_eq!(store.release_partitions("g", &[1], "a@1").await.unwrap(), 1);
    assert!(
        !store
            .forget_group("g", Duration::from_secs(60))
            .await
            .unwrap(),
        "ended too recently"
    );
    assert!(raw.exists(&key).await.unwrap());
    assert!(store.forget_group("g", Duration::ZERO).await.unwrap());
    assert!(!raw.exists(&key).await.unwrap());
}

#[tokio::test]
async fn a_malformed_partition_record_fails_the_call_and_changes_nothing() {
    let Some(url) = common::url() else { return };
    let prefix = common::unique("gc");
    let Some(store) = common::direct(&url, common::config().key_prefix(&prefix)).await else {
        return;
    };
    let mut raw = common::raw(&url).await;
    let key = store.partitions_key("g").unwrap();
    store
        .acquire_partition("g", 1, "a@1", TTL)
        .await
        .unwrap()
        .unwrap();
    let before: String = raw.hget(&key, "1").await.unwrap().unwrap();
    let _: usize = raw.hset(&key, "5", "not a lease").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let errors = [
        store
            .renew_partitions("g", &[1, 5], "a@1", TTL)
            .await
            .unwrap_err(),
        store
            .release_partitions("g", &[1, 5], "a@1")
            .await
            .unwrap_err(),
        store.owners("g").await.unwrap_err(),
        store
            .acquire_partition("g", 5, "a@1", TTL)
            .await
            .unwrap_err(),
    ];
    for e in errors {
        assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
        assert!(!e.is_temporary(), "{e}");
        assert!(format!("{e:?}").contains("LEASECORRUPT"), "{e:?}");
    }
    let after: String = raw.hget(&key, "1").await.unwrap().unwrap();
    assert_eq!(after, before, "partition 1 was written before the error");
    // A value of another type under the key is refused as well.
    let _: usize = raw.del(&key).await.unwrap();
    let _: () = raw.set(&key, "x").await.unwrap();
    let e = store.owners("g").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    assert!(e.message().contains("prefix of its own"), "{e}");
    let _: usize = raw.del(&key).await.unwrap();
}

#[tokio::test]
async fn group_and_member_inputs_are_refused_before_any_io() {
    let store = common::store_without_server();
    let long = "n".repeat(lease_redis::MAX_NAME_BYTES + 1);
    for bad in [String::new(), long, "a\0b".to_owned()] {
        let errors = [
            store
                .acquire_partition(&bad, 0, "o", TTL)
                .await
                .unwrap_err(),
            store
                .renew_partitions(&bad, &[0], "o", TTL)
                .await
                .unwrap_err(),
            store.release_partitions(&bad, &[0], "o").await.unwrap_err(),
            store.owners(&bad).await.unwrap_err(),
            store.forget_group(&bad, TTL).await.unwrap_err(),
            store.partitions_key(&bad).unwrap_err(),
            store.heartbeat(&bad, "n", "", TTL, &[]).await.unwrap_err(),
            store.members(&bad).await.unwrap_err(),
            store.leave(&bad, "n").await.unwrap_err(),
            store.membership_keys(&bad).unwrap_err(),
            store
                .acquire_partition("g", 0, &bad, TTL)
                .await
                .unwrap_err(),
            store.heartbeat("s", &bad, "", TTL, &[]).await.unwrap_err(),
            store
                .heartbeat("s", "n", "", TTL, std::slice::from_ref(&bad))
                .await
                .unwrap_err(),
        ];
        for e in errors {
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad:?}: {e}");
        }
    }
    for ttl in [Duration::ZERO, Duration::from_secs(2 * 24 * 3600)] {
        let e = store.acquire_partition("g", 0, "o", ttl).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{e}");
        let e = store
            .renew_partitions("g", &[0], "o", ttl)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{e}");
        let e = store.heartbeat("s", "n", "", ttl, &[]).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings, "{e}");
    }
    let huge = vec![0; MAX_PARTITIONS_PER_CALL + 1];
    let e = store
        .renew_partitions("g", &huge, "o", TTL)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let e = store
        .heartbeat("s", "n", "a\nb", TTL, &[])
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // Empty batches do no I/O at all, so they succeed even without a server.
    assert!(
        store
            .renew_partitions("g", &[], "o", TTL)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.release_partitions("g", &[], "o").await.unwrap(), 0);
    // The same store does reach for the server with good arguments, and names it.
    let e = store.owners("g").await.unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout),
        "{e}"
    );
    assert_eq!(e.server(), Some("127.0.0.1:1"), "{e}");
    assert_eq!(
        e.operation(),
        Some(lease_core::layer::Operation::Owners),
        "{e}"
    );
    assert_eq!(e.name(), Some("g"), "{e}");
}
