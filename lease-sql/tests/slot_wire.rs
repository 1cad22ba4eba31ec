//! Scheduler slots on the wire: round trips per operation through the proxy, and the finish's
//! outcome in the corners the conformance cases do not reach, on every dialect.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lease_conformance::{FaultProxy, SchedulerStore};
use lease_core::backend::HolderToken;
use lease_core::backend::slots::{SlotClaim, SlotFinish, SlotRecord, SlotStore};
use lease_sql::SqlConfig;

const TTL: Duration = Duration::from_secs(5);

fn names(tag: &str) -> [String; 3] {
    let base = format!("{tag}-{:x}", support::rand_u64());
    ["a", "b", "c"].map(|n| format!("{base}-{n}"))
}

/// The server's clock, from a far-future instant refused as early (a read only: no record).
async fn server_now(s: &dyn SlotStore, probe: &str) -> i64 {
    match s
        .claim_slot(probe, &HolderToken::mint(), "probe", TTL, i64::MAX / 4)
        .await
        .unwrap()
    {
        SlotClaim::Early { now_ms } => now_ms,
        other => panic!("a far-future instant was not refused: {other:?}"),
    }
}

async fn claimed(s: &dyn SlotStore, name: &str, who: &HolderToken, at: i64) {
    let c = s.claim_slot(name, who, "w", TTL, at).await.unwrap();
    assert!(matches!(c, SlotClaim::Claimed { .. }), "{c:?}");
}

/// One round of every slot statement on `name`: a claim of a new record, a finish, a claim
/// over the record, the round cut short (force release), `unfinished`, the rerun, its finish.
async fn round(
    s: &dyn SchedulerStore,
    proxy: &FaultProxy,
    name: &str,
    all: &[String],
    now: i64,
) -> Vec<(&'static str, u64)> {
    let (a, b, r) = (
        HolderToken::mint(),
        HolderToken::mint(),
        HolderToken::mint(),
    );
    let (i1, i2) = (now - 9_000, now - 8_000);
    let mut counts = Vec::new();
    proxy.reset_stats();
    claimed(s, name, &a, i1).await;
    counts.push(("claim_slot (new record)", proxy.stats().round_trips));
    proxy.reset_stats();
    let f = s.finish_slot(name, &a, i1, None).await.unwrap();
    counts.push(("finish_slot", proxy.stats().round_trips));
    assert!(f.recorded && f.released && !f.passed_taken, "{f:?}");
    proxy.reset_stats();
    claimed(s, name, &b, i2).await;
    counts.push(("claim_slot", proxy.stats().round_trips));
    proxy.reset_stats();
    assert_eq!(
        s.claim_slot(name, &a, "w", TTL, i2 + 1).await.unwrap(),
        SlotClaim::Held
    );
    counts.push(("claim_slot of a held name", proxy.stats().round_trips));
    assert!(s.force_release(name).await.unwrap(), "cut short");
    proxy.reset_stats();
    let due = s.unfinished(all).await.unwrap();
    counts.push(("unfinished (3 names)", proxy.stats().round_trips));
    assert_eq!(due, vec![(name.to_owned(), i2)]);
    proxy.reset_stats();
    assert!(
        s.claim_rerun(name, &r, "w", TTL, i2)
            .await
            .unwrap()
            .is_some()
    );
    counts.push(("claim_rerun", proxy.stats().round_trips));
    proxy.reset_stats();
    let rec = s.last_slot(name).await.unwrap();
    counts.push(("last_slot", proxy.stats().round_trips));
    assert_eq!(
        rec,
        Some(SlotRecord {
            last_ms: Some(i2),
            unfinished_ms: Some(i2),
            rerun_ms: Some(i2)
        })
    );
    let f = s.finish_slot(name, &r, i2, None).await.unwrap();
    assert!(f.recorded && f.released, "{f:?}");
    counts
}

async fn count<S: SchedulerStore>(s: &S, proxy: &FaultProxy) -> Vec<(&'static str, u64)> {
    let all = names("slot-rt");
    let now = server_now(s, &all[2]).await;
    // Warm up: every statement prepared once on the store's one lease connection.
    round(s, proxy, &all[1], &all, now).await;
    round(s, proxy, &all[0], &all, now).await
}

fn assert_counts(backend: &str, counts: &[(&str, u64)]) {
    eprintln!("{backend} slot round trips: {counts:?}");
    let expected = [
        ("claim_slot (new record)", 2), // read, insert
        ("finish_slot", 1),
        ("claim_slot", 2),                // read, update with the term compared
        ("claim_slot of a held name", 1), // read only
        ("unfinished (3 names)", 1),
        ("claim_rerun", 1),
        ("last_slot", 1),
    ];
    assert_eq!(counts, expected, "{backend}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_slot_round_trips() {
    let Some((_, p)) = support::postgres_with(SqlConfig::default().lease_connections(1)).await
    else {
        return;
    };
    assert_counts("postgres", &count(&p.store, &p.proxy).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_slot_round_trips() {
    let Some((_, p)) = support::mysql_with(SqlConfig::default().lease_connections(1)).await else {
        return;
    };
    assert_counts("mysql", &count(&p.store, &p.proxy).await);
}

fn finish(recorded: bool, passed_taken: bool, released: bool) -> SlotFinish {
    SlotFinish {
        recorded,
        passed_taken,
        released,
    }
}

/// The finish's outcome where nothing or only part of the row changes, as the memory store
/// answers it.
async fn finish_corners(s: &dyn SchedulerStore) {
    let [x, y, z] = names("slot-corner");
    let now = server_now(s, &z).await;
    let (a, b) = (HolderToken::mint(), HolderToken::mint());
    let at = now - 5_000;

    // A second finish: recorded again (nothing left to change), not released again.
    claimed(s, &x, &a, at).await;
    assert_eq!(
        s.finish_slot(&x, &a, at, Some(now - 1_000)).await.unwrap(),
        finish(true, true, true)
    );
    assert_eq!(
        s.finish_slot(&x, &a, now - 1_000, Some(now - 500))
            .await
            .unwrap(),
        finish(true, false, false),
        "a finish after release takes nothing along"
    );
    assert_eq!(
        s.finish_slot(&x, &a, at, None).await.unwrap(),
        finish(false, false, false),
        "a later instant is on record"
    );

    // The holder finishes an instant that is not the last: released, nothing recorded, and
    // `passed` not taken even when it equals the last instant.
    claimed(s, &y, &a, at).await;
    assert_eq!(
        s.finish_slot(&y, &a, at - 1_000, Some(at)).await.unwrap(),
        finish(false, false, true)
    );
    let rec = s.last_slot(&y).await.unwrap().unwrap();
    assert_eq!((rec.last_ms, rec.unfinished_ms), (Some(at), Some(at)));

    // A late finish while the rerun runs under another holder: the end is recorded, the
    // rerun's lease untouched.
    let at2 = at + 1_000;
    claimed(s, &y, &a, at2).await;
    assert!(s.force_release(&y).await.unwrap());
    let g = s.claim_rerun(&y, &b, "b", TTL, at2).await.unwrap().unwrap();
    assert_eq!(
        s.finish_slot(&y, &a, at2, Some(now)).await.unwrap(),
        finish(true, false, false)
    );
    assert!(
        s.verify(&y, &b)
            .await
            .unwrap()
            .is_some_and(|v| v.term == g.term)
    );
    assert_eq!(
        s.last_slot(&y).await.unwrap().unwrap(),
        SlotRecord {
            last_ms: Some(at2),
            unfinished_ms: None,
            rerun_ms: Some(at2)
        }
    );
    assert_eq!(
        s.finish_slot(&y, &b, at2, None).await.unwrap(),
        finish(true, false, true)
    );

    // No record at all.
    assert_eq!(
        s.finish_slot(&z, &a, at, None).await.unwrap(),
        SlotFinish::default()
    );
    assert_eq!(s.claim_rerun(&z, &a, "a", TTL, at).await.unwrap(), None);
    assert_eq!(s.last_slot(&z).await.unwrap(), None);
    assert!(s.unfinished(&[]).await.unwrap().is_empty());

    // `unfinished` answers in the order asked, names with quotes, backslashes and
    // non-ASCII characters included.
    let odd = format!("{z}-\"q\\u0041 é日");
    claimed(s, &odd, &a, at).await;
    assert!(s.force_release(&odd).await.unwrap());
    let asked = vec![odd.clone(), x.clone(), odd.clone(), z.clone()];
    assert_eq!(
        s.unfinished(&asked).await.unwrap(),
        vec![(odd.clone(), at), (odd.clone(), at)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_finish_corners() {
    let Some((store, _)) = support::postgres().await else {
        return;
    };
    finish_corners(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_finish_corners() {
    let Some((store, _)) = support::mysql().await else {
        return;
    };
    finish_corners(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_finish_corners() {
    finish_corners(&support::sqlite().await).await;
}
