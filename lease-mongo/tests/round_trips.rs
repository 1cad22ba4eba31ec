//! Each operation is one command and one round trip on a warm connection (a batch renewal of
//! partitions two), counted on the wire by the fault proxy and at the server by its own command
//! counters (`serverStatus` `metrics.commands.<command>.total`). Runs where
//! `LEASE_TEST_MONGODB_URL` names a server that nothing else uses meanwhile; prints the SKIPPED
//! line otherwise.
//!
//! The server's counters are process-wide, so the tests here take [`SERIAL`] for their whole
//! run: run in parallel, each would count the others' commands.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::future::Future;
use std::time::Duration;

use lease_conformance::FaultProxy;
use lease_core::backend::permits::PermitStore;
use lease_core::{
    LeaseStore,
    backend::{
        HolderToken,
        membership::MembershipStore,
        partitions::{BatchRenew, PartitionStore},
        slots::{SlotClaim, SlotStore},
    },
};
use lease_mongo::MongoStore;
use lease_mongo::mongodb::bson::{Bson, doc};

/// The partitions the batch case renews on the mongoeco emulator instead of 200.
const EMULATOR_BATCH: u32 = 20;

/// Held by each test for its whole run: the server's command counters see one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The server's count of `command` since it started.
async fn command_total(store: &MongoStore, command: &str) -> i64 {
    let status = store
        .client()
        .database("admin")
        .run_command(doc! { "serverStatus": 1 })
        .await
        .unwrap();
    let total = status
        .get_document("metrics")
        .and_then(|m| m.get_document("commands"))
        .ok()
        .and_then(|c| c.get_document(command).ok())
        .and_then(|c| c.get("total").cloned());
    match total {
        Some(Bson::Int64(n)) => n,
        Some(Bson::Int32(n)) => i64::from(n),
        None => 0,
        Some(other) => panic!("serverStatus gave {other:?} for {command}"),
    }
}

/// Runs `op` and returns its result with the proxy's round trips and the server's count of
/// `command` it took.
async fn count<T>(
    direct: &MongoStore,
    proxy: &FaultProxy,
    command: &str,
    op: impl Future<Output = T>,
) -> (T, u64, i64) {
    let before = command_total(direct, command).await;
    proxy.reset_stats();
    let out = op.await;
    let trips = proxy.stats().round_trips;
    let after = command_total(direct, command).await;
    (out, trips, after - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operation_is_one_command_and_one_round_trip() {
    let _serial = SERIAL.lock().await;
    let Some((direct, store, proxy)) = common::stores(true).await else {
        return;
    };
    let name = format!("rt{:08x}", rand_suffix());
    let a = HolderToken::mint();
    let ttl = Duration::from_secs(5);
    // Warm the proxied connection (handshake, authentication) and pass the start-up check
    // (which the store runs before its first claim), so neither is counted below.
    store.available().await.unwrap();
    store.get(&name).await.unwrap();

    let (g, trips, cmds) = count(
        &direct,
        &proxy,
        "findAndModify",
        store.claim(&name, &a, "a", ttl),
    )
    .await;
    assert_eq!(g.unwrap().unwrap().term, 1);
    assert_eq!((trips, cmds), (1, 1), "claim");

    let (g, trips, cmds) = count(
        &direct,
        &proxy,
        "findAndModify",
        store.claim(&name, &HolderToken::mint(), "b", ttl),
    )
    .await;
    assert_eq!(g.unwrap(), None, "a live lease was claimed");
    assert_eq!((trips, cmds), (1, 1), "claim of a held name");

    let (g, trips, cmds) = count(
        &direct,
        &proxy,
        "findAndModify",
        store.renew(&name, &a, ttl),
    )
    .await;
    assert_eq!(g.unwrap().unwrap().term, 1);
    assert_eq!((trips, cmds), (1, 1), "renew");

    let (g, trips, cmds) = count(&direct, &proxy, "aggregate", store.verify(&name, &a)).await;
    assert_eq!(g.unwrap().unwrap().term, 1);
    assert_eq!((trips, cmds), (1, 1), "verify");

    let (g, trips, cmds) = count(&direct, &proxy, "aggregate", store.get(&name)).await;
    assert!(g.unwrap().unwrap().live);
    assert_eq!((trips, cmds), (1, 1), "get");

    let (g, trips, cmds) = count(&direct, &proxy, "findAndModify", store.release(&name, &a)).await;
    assert!(g.unwrap());
    assert_eq!((trips, cmds), (1, 1), "release");

    let (g, trips, cmds) = count(
        &direct,
        &proxy,
        "findAndModify",
        store.claim(&name, &HolderToken::mint(), "c", ttl),
    )
    .await;
    assert_eq!(
        g.unwrap().unwrap().term,
        2,
        "the term continues after release"
    );
    assert_eq!((trips, cmds), (1, 1), "claim after release");

    let (g, trips, cmds) =
        count(&direct, &proxy, "findAndModify", store.force_release(&name)).await;
    assert!(g.unwrap());
    assert_eq!((trips, cmds), (1, 1), "force release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_permit_operation_is_one_command_and_one_round_trip() {
    let _serial = SERIAL.lock().await;
    let Some((direct, store, proxy)) = common::stores(true).await else {
        return;
    };
    let name = format!("rtp{:08x}", rand_suffix());
    let (a, b) = (HolderToken::mint(), HolderToken::mint());
    let ttl = Duration::from_secs(5);
    store.available().await.unwrap();
    store.get(&name).await.unwrap();

    let (g, trips, cmds) = count(
        &direct,
        &proxy,
        "findAndModify",
        store.claim_permit(&name, 1, &a, "a", ttl),
    )
    .await;
    let g = g.unwrap().unwrap();
    assert_eq!((g.permit, g.grant.term), (0, 1));
    assert_eq!((trips, cmds), (1, 1), "claim_permit");
    let (g, trips, cmds) = count(
        &direct,
        &proxy,
        "findAndModify",
        store.claim_permit(&name, 1, &b, "b", ttl),
    )
    .await;
    assert_eq!(g.unwrap(), None, "a second permit of 1 was granted");
    assert_eq!((trips, cmds), (1, 1), "claim_permit of a full name");
    let (g, trips, cmds) = count(
        &direct,
        &proxy,
        "findAndModify",
        store.renew_permit(&name, 0, &a, ttl),
    )
    .await;
    assert_eq!(g.unwrap().unwrap().term, 1);
    assert_eq!((trips, cmds), (1, 1), "renew_permit");
    let (g, trips, cmds) =
        count(&direct, &proxy, "aggregate", store.verify_permit(&name, &a)).await;
    assert_eq!(g.unwrap().unwrap().grant.term, 1);
    assert_eq!((trips, cmds), (1, 1), "verify_permit");
    let (g, trips, cmds) = count(&direct, &proxy, "aggregate", store.permits(&name)).await;
    assert_eq!(g.unwrap().len(), 1);
    assert_eq!((trips, cmds), (1, 1), "permits");
    let (g, trips, cmds) = count(
        &direct,
        &proxy,
        "findAndModify",
        store.release_permit(&name, 0, &a),
    )
    .await;
    assert!(g.unwrap());
    assert_eq!((trips, cmds), (1, 1), "release_permit");
}

/// Runs `op` and returns its result with the proxy's round trips and the server's counts of
/// `aggregate`, `findAndModify` and `find` it took.
async fn count_slot<T>(
    direct: &MongoStore,
    proxy: &FaultProxy,
    op: impl Future<Output = T>,
) -> (T, u64, [i64; 3]) {
    const COMMANDS: [&str; 3] = ["aggregate", "findAndModify", "find"];
    let mut before = [0; 3];
    for (i, c) in COMMANDS.iter().enumerate() {
        before[i] = command_total(direct, c).await;
    }
    proxy.reset_stats();
    let out = op.await;
    let trips = proxy.stats().round_trips;
    let mut took = [0; 3];
    for (i, c) in COMMANDS.iter().enumerate() {
        took[i] = command_total(direct, c).await - before[i];
    }
    (out, trips, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_operations_take_the_documented_commands() {
    let _serial = SERIAL.lock().await;
    let Some((direct, store, proxy)) = common::stores(true).await else {
        return;
    };
    let name = format!("slot-rt{:08x}", rand_suffix());
    let (a, b) = (HolderToken::mint(), HolderToken::mint());
    let ttl = Duration::from_secs(5);
    // Warm the proxied connection and pass the start-up check.
    store.available().await.unwrap();
    store.get(&name).await.unwrap();

    // [aggregate, findAndModify, find]
    let (c, trips, took) = count_slot(
        &direct,
        &proxy,
        store.claim_slot(&name, &a, "a", ttl, i64::MAX / 4),
    )
    .await;
    let SlotClaim::Early { now_ms } = c.unwrap() else {
        panic!("a far-future instant was not early");
    };
    assert_eq!(
        (trips, took),
        (1, [1, 0, 0]),
        "early slot claim: the read alone"
    );
    assert_eq!(
        store.last_slot(&name).await.unwrap(),
        None,
        "an early claim left a record"
    );

    let at = now_ms - 1_000;
    let (c, trips, took) =
        count_slot(&direct, &proxy, store.claim_slot(&name, &a, "a", ttl, at)).await;
    assert!(matches!(c.unwrap(), SlotClaim::Claimed { .. }));
    assert_eq!(
        (trips, took),
        (2, [1, 1, 0]),
        "slot claim: read, then write"
    );

    let (c, trips, took) = count_slot(
        &direct,
        &proxy,
        store.claim_slot(&name, &b, "b", ttl, at + 1),
    )
    .await;
    assert_eq!(c.unwrap(), SlotClaim::Held);
    assert_eq!((trips, took), (1, [1, 0, 0]), "slot claim of a held name");

    let (f, trips, took) =
        count_slot(&direct, &proxy, store.finish_slot(&name, &a, at, None)).await;
    let f = f.unwrap();
    assert!(f.recorded && f.released && !f.passed_taken, "{f:?}");
    assert_eq!((trips, took), (1, [0, 1, 0]), "slot finish");

    let (c, trips, took) =
        count_slot(&direct, &proxy, store.claim_slot(&name, &b, "b", ttl, at)).await;
    assert_eq!(c.unwrap(), SlotClaim::Taken { last_ms: at });
    assert_eq!(
        (trips, took),
        (1, [1, 0, 0]),
        "slot claim of a taken instant"
    );

    let names = vec![name.clone(), format!("{name}-none")];
    let (u, trips, took) = count_slot(&direct, &proxy, store.unfinished(&names)).await;
    assert!(u.unwrap().is_empty());
    assert_eq!((trips, took), (1, [1, 0, 0]), "unfinished");

    let (g, trips, took) =
        count_slot(&direct, &proxy, store.claim_rerun(&name, &b, "b", ttl, at)).await;
    assert_eq!(g.unwrap(), None, "a finished instant was rerun");
    assert_eq!((trips, took), (1, [0, 1, 0]), "slot rerun claim");

    let (r, trips, took) = count_slot(&direct, &proxy, store.last_slot(&name)).await;
    let r = r.unwrap().unwrap();
    assert_eq!(
        (r.last_ms, r.unfinished_ms, r.rerun_ms),
        (Some(at), None, None)
    );
    assert_eq!((trips, took), (1, [0, 0, 1]), "last slot");
}

/// Runs `op` and returns its result with the proxy's round trips and the server's counts of
/// `findAndModify`, `update` and `aggregate` it took.
/// `renew_many` of a batch is one `update` (a statement per name) and one `aggregate` (the
/// read-back): two round trips however many names; one when it renews none. Each name keeps its
/// own holder check: one held by another holder in the batch is answered `None` and not
/// extended. (With the trait's default loop it was one `findAndModify` per name.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_many_takes_two_commands_and_two_round_trips() {
    let _serial = SERIAL.lock().await;
    let Some((direct, store, proxy)) = common::stores(true).await else {
        return;
    };
    let prefix = format!("rtmany{:08x}", rand_suffix());
    let ttl = Duration::from_secs(5);
    store.available().await.unwrap();
    store.get(&prefix).await.unwrap();
    assert!(store.capabilities().renew_many);
    // As for the partitions: fewer names on the emulator, where 200 do not fit the proxied
    // store's 500 ms operation timeout.
    let n: usize = if common::emulated(&direct).await {
        EMULATOR_BATCH as usize
    } else {
        200
    };
    let (a, b) = (HolderToken::mint(), HolderToken::mint());
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    let mut terms = Vec::new();
    for name in &names {
        terms.push(
            direct
                .claim(name, &a, "a", ttl)
                .await
                .unwrap()
                .unwrap()
                .term,
        );
    }
    let other = format!("{prefix}-other");
    direct.claim(&other, &b, "b", ttl).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = direct.get(&other).await.unwrap().unwrap().expires_in;
    let mut items: Vec<lease_core::backend::RenewItem<'_>> = names
        .iter()
        .map(|name| lease_core::backend::RenewItem { name, holder: &a })
        .collect();
    items.push(lease_core::backend::RenewItem {
        name: &other,
        holder: &a,
    });
    let (answers, trips, took) = count_group(&direct, &proxy, store.renew_many(&items, ttl)).await;
    let answers = answers.unwrap();
    assert_eq!(answers.len(), n + 1);
    for (i, term) in terms.iter().enumerate() {
        let grant = answers[i]
            .as_ref()
            .unwrap()
            .expect("a held name is renewed");
        assert_eq!(grant.term, *term, "{}", names[i]);
    }
    assert_eq!(answers[n].as_ref().unwrap(), &None, "another holder's name");
    assert_eq!(
        (trips, took),
        (2, [0, 1, 1]),
        "renew_many of {} names: update, then the read-back",
        n + 1
    );
    let after = direct.get(&other).await.unwrap().unwrap().expires_in;
    assert!(after <= before, "another holder's lease was extended");

    let theirs = [lease_core::backend::RenewItem {
        name: &other,
        holder: &a,
    }];
    let (answers, trips, took) = count_group(&direct, &proxy, store.renew_many(&theirs, ttl)).await;
    assert_eq!(answers.unwrap()[0].as_ref().unwrap(), &None);
    assert_eq!(
        (trips, took),
        (1, [0, 1, 0]),
        "a renew_many that renews none"
    );
}

async fn count_group<T>(
    direct: &MongoStore,
    proxy: &FaultProxy,
    op: impl Future<Output = T>,
) -> (T, u64, [i64; 3]) {
    const COMMANDS: [&str; 3] = ["findAndModify", "update", "aggregate"];
    let mut before = [0; 3];
    for (i, c) in COMMANDS.iter().enumerate() {
        before[i] = command_total(direct, c).await;
    }
    proxy.reset_stats();
    let out = op.await;
    let trips = proxy.stats().round_trips;
    let mut took = [0; 3];
    for (i, c) in COMMANDS.iter().enumerate() {
        took[i] = command_total(direct, c).await - before[i];
    }
    (out, trips, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_and_membership_operations_take_the_documented_commands() {
    let _serial = SERIAL.lock().await;
    let Some((direct, store, proxy)) = common::stores(true).await else {
        return;
    };
    let group = format!("grp-rt{:08x}", rand_suffix());
    let (a, b) = ("node-a@0001", "node-b@0001");
    let ttl = Duration::from_secs(5);
    // Warm the proxied connection and pass the start-up check.
    store.available().await.unwrap();
    store.owners(&group).await.unwrap();
    assert_eq!(
        store.capabilities().batch_renew,
        BatchRenew::Fixed { round_trips: 2 }
    );

    // [findAndModify, update, aggregate]
    let (l, trips, took) =
        count_group(&direct, &proxy, store.acquire_partition(&group, 0, a, ttl)).await;
    assert_eq!(l.unwrap().unwrap().epoch, 1);
    assert_eq!((trips, took), (1, [1, 0, 0]), "partition acquire");

    let (l, trips, took) =
        count_group(&direct, &proxy, store.acquire_partition(&group, 0, b, ttl)).await;
    assert_eq!(l.unwrap(), None, "a live partition was taken");
    assert_eq!((trips, took), (1, [1, 0, 0]), "acquire of a held partition");

    // 200 partitions on a MongoDB server; on the emulator (one Python thread, one document at
    // a time) 200 do not fit the proxied store's 500 ms operation timeout: fewer, said loudly.
    let batch: u32 = if common::emulated(&direct).await {
        let line = format!(
            "\nSCALED mongodb partition_and_membership_operations_take_the_documented_commands: \
             {EMULATOR_BATCH} partitions instead of 200 on the mongoeco emulator (200 take longer \
             than the 500 ms operation timeout there); the counts of commands and round trips \
             asserted are the same\n"
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        EMULATOR_BATCH
    } else {
        200
    };
    for p in 1..batch {
        direct
            .acquire_partition(&group, p, a, ttl)
            .await
            .unwrap()
            .unwrap();
    }
    let all: Vec<u32> = (0..batch).collect();
    let (r, trips, took) = count_group(
        &direct,
        &proxy,
        store.renew_partitions(&group, &all, a, ttl),
    )
    .await;
    assert_eq!(r.unwrap().len(), batch as usize);
    assert_eq!(
        (trips, took),
        (2, [0, 1, 1]),
        "batch renewal of {batch} partitions: update, then the read-back"
    );

    let (r, trips, took) = count_group(
        &direct,
        &proxy,
        store.renew_partitions(&group, &all, b, ttl),
    )
    .await;
    assert!(r.unwrap().is_empty());
    assert_eq!(
        (trips, took),
        (1, [0, 1, 0]),
        "a renewal that renews nothing"
    );

    let (o, trips, took) = count_group(&direct, &proxy, store.owners(&group)).await;
    assert_eq!(o.unwrap().len(), batch as usize);
    assert_eq!(
        (trips, took),
        (1, [0, 0, 1]),
        "owners of {batch} partitions"
    );

    let (n, trips, took) =
        count_group(&direct, &proxy, store.release_partitions(&group, &all, a)).await;
    assert_eq!(n.unwrap(), batch as usize);
    assert_eq!(
        (trips, took),
        (1, [0, 1, 0]),
        "release of {batch} partitions"
    );
    assert_eq!(
        direct
            .acquire_partition(&group, 0, a, ttl)
            .await
            .unwrap()
            .unwrap()
            .epoch,
        2,
        "the epoch continues after release"
    );
    direct.release_partitions(&group, &[0], a).await.unwrap();

    let service = format!("svc-rt{:08x}", rand_suffix());
    let groups = vec![group.clone()];
    let (m, trips, took) = count_group(
        &direct,
        &proxy,
        store.heartbeat(&service, "n1", "10.0.0.1:7000", ttl, &groups),
    )
    .await;
    assert_eq!(m.unwrap().groups, groups);
    assert_eq!((trips, took), (1, [1, 0, 0]), "heartbeat (insert)");
    let (m, trips, took) = count_group(
        &direct,
        &proxy,
        store.heartbeat(&service, "n1", "10.0.0.2:7000", ttl, &[]),
    )
    .await;
    assert_eq!(m.unwrap().address, "10.0.0.2:7000");
    assert_eq!((trips, took), (1, [1, 0, 0]), "heartbeat (update)");

    let (m, trips, took) = count_group(&direct, &proxy, store.members(&service)).await;
    assert_eq!(m.unwrap().len(), 1);
    assert_eq!((trips, took), (1, [0, 0, 1]), "members");

    let (left, trips, took) = count_group(&direct, &proxy, store.leave(&service, "n1")).await;
    assert!(left.unwrap());
    assert_eq!((trips, took), (1, [0, 1, 0]), "leave");
    assert!(store.members(&service).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn available_passes_and_odd_names_and_labels_are_stored_as_given() {
    let _serial = SERIAL.lock().await;
    let Some((direct, _, _)) = common::stores(false).await else {
        return;
    };
    direct.available().await.unwrap();
    // A name that looks like an operator or a field path is stored as given.
    let name = format!("${:08x}.x", rand_suffix());
    let a = HolderToken::mint();
    let g = direct
        .claim(&name, &a, "$epoch", Duration::from_millis(600))
        .await
        .unwrap()
        .unwrap();
    let info = direct.get(&name).await.unwrap().unwrap();
    assert_eq!(
        (info.name.as_str(), info.instance.as_str(), info.term),
        (name.as_str(), "$epoch", g.term)
    );

    // Groups, owners, services, nodes, addresses and groups served alike.
    let group = format!("${:08x}.g", rand_suffix());
    let ttl = Duration::from_millis(600);
    let l = direct
        .acquire_partition(&group, u32::MAX, "$owner", ttl)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (l.partition, l.owner.as_str(), l.epoch),
        (u32::MAX, "$owner", 1)
    );
    let owners = direct.owners(&group).await.unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (owners[0].partition, owners[0].owner.as_str()),
        (u32::MAX, "$owner")
    );
    let groups = vec!["$epoch".to_owned(), group.clone()];
    let m = direct
        .heartbeat(&group, "$n", "$address", ttl, &groups)
        .await
        .unwrap();
    assert_eq!((m.address.as_str(), &m.groups), ("$address", &groups));
    let members = direct.members(&group).await.unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(
        (
            members[0].node.as_str(),
            members[0].address.as_str(),
            &members[0].groups
        ),
        ("$n", "$address", &groups)
    );
}

fn rand_suffix() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    nanos ^ std::process::id()
}
