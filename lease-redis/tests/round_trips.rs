//! One round trip per operation, counted twice: on the wire by the fault proxy, and by the
//! server itself in `INFO commandstats` (one `EVALSHA` per operation, no `EVAL`). The slot
//! operations too: `unfinished` for three names is one round trip carrying three `EVALSHA`s. So
//! are the partition and membership operations: a renewal or release of 1,000 partitions is one
//! `EVALSHA` carrying all of them. The permit operations of a counted name are one `EVALSHA`
//! each as well.
//!
//! One test only, so nothing else in this binary runs scripts while it counts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use lease_core::backend::permits::PermitStore;
use lease_core::{
    LeaseStore,
    backend::{
        HolderToken,
        membership::MembershipStore,
        partitions::PartitionStore,
        slots::{SlotClaim, SlotStore},
    },
};
use lease_redis::redis::aio::MultiplexedConnection;

/// `calls` per command from `INFO commandstats`.
async fn command_calls(raw: &mut MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = lease_redis::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(raw)
        .await
        .unwrap();
    let mut calls = HashMap::new();
    for line in info.lines() {
        let Some((cmd, stats)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        for field in stats.split(',') {
            if let Some(n) = field.strip_prefix("calls=") {
                calls.insert(cmd.to_owned(), n.parse().unwrap());
            }
        }
    }
    calls
}

fn delta(before: &HashMap<String, u64>, after: &HashMap<String, u64>, cmd: &str) -> u64 {
    after.get(cmd).copied().unwrap_or(0) - before.get(cmd).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_is_one_round_trip() {
    let Some(url) = common::url() else { return };
    let Some((store, proxy)) = common::proxied(&url, common::config()).await else {
        return;
    };
    let mut raw = common::raw(&url).await;
    let ttl = Duration::from_secs(5);
    let prefix = common::unique("rt");
    let holder = HolderToken::mint();

    // Warm the fresh connection once (and make sure the scripts are cached).
    let warm = format!("{prefix}warm");
    store
        .claim(&warm, &holder, "a", ttl)
        .await
        .unwrap()
        .unwrap();
    store.release(&warm, &holder).await.unwrap();

    let name = format!("{prefix}cycle");
    let before = command_calls(&mut raw).await;
    let mut trips = Vec::new();
    macro_rules! one {
        ($label:literal, $op:expr) => {{
            proxy.reset_stats();
            let out = $op.await.unwrap();
            trips.push(($label, proxy.stats().round_trips));
            out
        }};
    }
    let g = one!("claim", store.claim(&name, &holder, "a", ttl)).unwrap();
    assert_eq!(g.term, 1);
    assert!(one!("renew", store.renew(&name, &holder, ttl)).is_some());
    assert!(one!("verify", store.verify(&name, &holder)).is_some());
    assert!(one!("release", store.release(&name, &holder)));
    let after_cycle = command_calls(&mut raw).await;
    assert!(one!("get", store.get(&name)).is_some());
    let other = HolderToken::mint();
    assert!(one!("claim again", store.claim(&name, &other, "b", ttl)).is_some());
    assert!(one!("force_release", store.force_release(&name)));
    let after = command_calls(&mut raw).await;
    eprintln!("round trips per operation: {trips:?}");
    for (op, n) in &trips {
        assert_eq!(*n, 1, "{op} took {n} round trips");
    }
    // The server's own count: claim + renew + verify + release are four EVALSHAs, no EVAL.
    assert_eq!(
        delta(&before, &after_cycle, "evalsha"),
        4,
        "{after_cycle:?}"
    );
    assert_eq!(delta(&before, &after_cycle, "eval"), 0);
    assert_eq!(delta(&before, &after, "evalsha"), 7);
    assert_eq!(delta(&before, &after, "eval"), 0);

    // Slots: claim_slot, finish_slot, claim_rerun, last_slot are one EVALSHA each;
    // unfinished(3 names) is one pipeline of three EVALSHAs.
    let (secs, micros): (i64, i64) = lease_redis::redis::cmd("TIME")
        .query_async(&mut raw)
        .await
        .unwrap();
    let at = secs * 1000 + micros / 1000 - 60_000;
    let [job, done, never] = ["job", "done", "never"].map(|n| format!("{prefix}slot-{n}"));
    let other = HolderToken::mint();
    assert!(matches!(
        store
            .claim_slot(&done, &holder, "a", ttl, at)
            .await
            .unwrap(),
        SlotClaim::Claimed { .. }
    ));
    let before = command_calls(&mut raw).await;
    trips.clear();
    let claimed = one!("claim_slot", store.claim_slot(&job, &holder, "a", ttl, at));
    assert!(matches!(claimed, SlotClaim::Claimed { .. }), "{claimed:?}");
    let f = one!("finish_slot", store.finish_slot(&done, &holder, at, None));
    assert!(f.recorded && f.released, "{f:?}");
    // The round of `job` is cut short (its lease ended without a finish).
    assert!(store.force_release(&job).await.unwrap());
    let names = vec![job.clone(), done.clone(), never.clone()];
    let due = one!("unfinished(3 names)", store.unfinished(&names));
    assert_eq!(due, vec![(job.clone(), at)]);
    let g = one!("claim_rerun", store.claim_rerun(&job, &other, "b", ttl, at));
    assert_eq!(g.map(|g| g.term), Some(2));
    let rec = one!("last_slot", store.last_slot(&job)).unwrap();
    assert_eq!(
        (rec.last_ms, rec.unfinished_ms, rec.rerun_ms),
        (Some(at), Some(at), Some(at))
    );
    let after = command_calls(&mut raw).await;
    eprintln!("round trips per slot operation: {trips:?}");
    for (op, n) in &trips {
        assert_eq!(*n, 1, "{op} took {n} round trips");
    }
    // 1 + 1 + 3 + 1 + 1, and the force_release.
    assert_eq!(delta(&before, &after, "evalsha"), 8, "{after:?}");
    assert_eq!(delta(&before, &after, "eval"), 0);

    // Partitions and membership: one EVALSHA each, however many partitions.
    let group = format!("{prefix}group");
    let service = format!("{prefix}svc");
    let owner = "node-a@1";
    let all: Vec<u32> = (0..1000).collect();
    for p in &all[1..] {
        store
            .acquire_partition(&group, *p, owner, ttl)
            .await
            .unwrap()
            .unwrap();
    }
    let before = command_calls(&mut raw).await;
    trips.clear();
    let lease = one!(
        "acquire_partition",
        store.acquire_partition(&group, 0, owner, ttl)
    )
    .unwrap();
    assert_eq!(lease.epoch, 1);
    let renewed = one!(
        "renew_partitions(1,000)",
        store.renew_partitions(&group, &all, owner, ttl)
    );
    assert_eq!(renewed.len(), 1000);
    let owners = one!("owners", store.owners(&group));
    assert_eq!(owners.len(), 1000);
    let released = one!(
        "release_partitions(1,000)",
        store.release_partitions(&group, &all, owner)
    );
    assert_eq!(released, 1000);
    let groups = vec!["orders".to_owned()];
    let m = one!(
        "heartbeat",
        store.heartbeat(&service, "n1", "10.0.0.1:7000", ttl, &groups)
    );
    assert_eq!(m.groups, groups);
    let members = one!("members", store.members(&service));
    assert_eq!(members.len(), 1);
    assert!(one!("leave", store.leave(&service, "n1")));
    let after = command_calls(&mut raw).await;
    eprintln!("round trips per partition/membership operation: {trips:?}");
    for (op, n) in &trips {
        assert_eq!(*n, 1, "{op} took {n} round trips");
    }
    assert_eq!(delta(&before, &after, "evalsha"), 7, "{after:?}");
    assert_eq!(delta(&before, &after, "eval"), 0);
    // Counted leases: one EVALSHA each.
    let counted = format!("{prefix}counted");
    let before = command_calls(&mut raw).await;
    trips.clear();
    let g = one!(
        "claim_permit",
        store.claim_permit(&counted, 3, &holder, "a", ttl)
    )
    .unwrap();
    assert_eq!((g.permit, g.grant.term), (0, 1));
    let renewed = one!(
        "renew_permit",
        store.renew_permit(&counted, g.permit, &holder, ttl)
    );
    assert_eq!(renewed.map(|r| r.term), Some(1));
    assert!(one!("verify_permit", store.verify_permit(&counted, &holder)).is_some());
    assert_eq!(one!("permits", store.permits(&counted)).len(), 1);
    assert!(one!(
        "release_permit",
        store.release_permit(&counted, g.permit, &holder)
    ));
    let after = command_calls(&mut raw).await;
    eprintln!("round trips per permit operation: {trips:?}");
    for (op, n) in &trips {
        assert_eq!(*n, 1, "{op} took {n} round trips");
    }
    assert_eq!(delta(&before, &after, "evalsha"), 5, "{after:?}");
    assert_eq!(delta(&before, &after, "eval"), 0);
    // No I/O at all for empty batches.
    proxy.reset_stats();
    assert!(
        store
            .renew_partitions(&group, &[], owner, ttl)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.release_partitions(&group, &[], owner).await.unwrap(),
        0
    );
    assert_eq!(proxy.stats().round_trips, 0, "empty batches");
    assert!(store.forget_group(&group, Duration::ZERO).await.unwrap());

    // After SCRIPT FLUSH the first use of a script costs two: NOSCRIPT, then EVAL (which
    // caches it); the next use is one EVALSHA again.
    let _: () = lease_redis::redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    let before = command_calls(&mut raw).await;
    let cold = format!("{prefix}cold");
    proxy.reset_stats();
    assert!(
        store
            .claim(&cold, &holder, "a", ttl)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(proxy.stats().round_trips, 2, "cold claim");
    proxy.reset_stats();
    assert!(store.release(&cold, &holder).await.unwrap());
    assert_eq!(proxy.stats().round_trips, 2, "cold release");
    proxy.reset_stats();
    assert!(
        store
            .claim(&cold, &holder, "a", ttl)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(proxy.stats().round_trips, 1, "warm claim");
    // A cold unfinished: one pipeline of EVALSHAs answered NOSCRIPT, then one of EVALs.
    proxy.reset_stats();
    let due = store.unfinished(&names).await.unwrap();
    assert_eq!(due, vec![]);
    assert_eq!(proxy.stats().round_trips, 2, "cold unfinished");
    proxy.reset_stats();
    assert_eq!(store.unfinished(&names).await.unwrap(), vec![]);
    assert_eq!(proxy.stats().round_trips, 1, "warm unfinished");
    let after = command_calls(&mut raw).await;
    assert_eq!(delta(&before, &after, "eval"), 5);
    assert!(store.release(&cold, &holder).await.unwrap());
    // The two-key membership scripts fall back to EVAL the same way, and a cold batch renewal
    // is two round trips as well.
    proxy.reset_stats();
    store.heartbeat(&service, "n2", "", ttl, &[]).await.unwrap();
    assert_eq!(proxy.stats().round_trips, 2, "cold heartbeat");
    proxy.reset_stats();
    assert_eq!(store.members(&service).await.unwrap().len(), 1);
    assert_eq!(proxy.stats().round_trips, 2, "cold members");
    proxy.reset_stats();
    assert!(store.leave(&service, "n2").await.unwrap());
    assert_eq!(proxy.stats().round_trips, 2, "cold leave");
    store
        .acquire_partition(&group, 0, owner, ttl)
        .await
        .unwrap()
        .unwrap();
    proxy.reset_stats();
    let renewed = store
        .renew_partitions(&group, &all, owner, ttl)
        .await
        .unwrap();
    assert_eq!(renewed.len(), 1);
    assert_eq!(proxy.stats().round_trips, 2, "cold batch renewal");
    proxy.reset_stats();
    store
        .renew_partitions(&group, &all, owner, ttl)
        .await
        .unwrap();
    assert_eq!(proxy.stats().round_trips, 1, "warm batch renewal");
    assert_eq!(
        store.release_partitions(&group, &[0], owner).await.unwrap(),
        1
    );
    assert!(store.forget_group(&group, Duration::ZERO).await.unwrap());

    // available() loads every script, so even first uses are one round trip afterwards.
    let _: () = lease_redis::redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    store.available().await.unwrap();
    proxy.reset_stats();
    assert!(store.verify(&cold, &holder).await.unwrap().is_none());
    assert_eq!(proxy.stats().round_trips, 1, "verify after available()");
}
