//! Scheduler slot cases, for stores whose capabilities say `slots: true`.

// Test support: a failed expectation panics, which is how a case reports it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use lease_core::backend::{
    HolderToken,
    slots::{SlotClaim, SlotStore},
};
use tokio::time::sleep;

use crate::{Harness, SchedulerStore};

fn slots(h: &Harness, case: &str) -> Option<Arc<dyn SchedulerStore>> {
    match (&h.slots, h.caps().slots) {
        (Some(s), true) => Some(s.clone()),
        (None, true) => panic!(
            "{}: the store says `slots: true` but its harness has no `with_slots`: {case} would \
             not run",
            h.backend()
        ),
        (Some(_), false) => panic!(
            "{}: the harness has `with_slots` but the store says `slots: false`",
            h.backend()
        ),
        (None, false) => {
            h.not_applicable(case, "the store has no scheduler slots");
            None
        }
    }
}

/// The slot store, when the case can cut a round short by letting its lease expire.
fn slots_expiring(h: &Harness, case: &str) -> Option<Arc<dyn SchedulerStore>> {
    if !h.caps().expiry {
        h.not_applicable(
            case,
            "leases on this store never expire, so no round is cut short",
        );
        return None;
    }
    slots(h, case)
}

fn mint() -> HolderToken {
    HolderToken::mint()
}

/// The server's clock, read by asking for an instant far in the future.
async fn server_now(s: &dyn SlotStore, h: &Harness) -> i64 {
    let probe = h.name("clock-probe");
    match s
        .claim_slot(&probe, &mint(), "probe", h.ttl, i64::MAX / 4)
        .await
        .unwrap()
    {
        SlotClaim::Early { now_ms } => now_ms,
        other => panic!(
            "{}: a far-future instant was not refused as early: {other:?}",
            h.backend()
        ),
    }
}

async fn claim(
    s: &dyn SlotStore,
    h: &Harness,
    name: &str,
    who: &HolderToken,
    at: i64,
) -> SlotClaim {
    s.claim_slot(name, who, "r", h.ttl, at).await.unwrap()
}

/// An instant is claimed only when the name is free, the instant later than the last on record
/// and not in the future by the server's clock.
pub async fn slot_claims_follow_the_rules(h: &Harness) {
    let Some(s) = slots(h, "slot_claims_follow_the_rules") else {
        return;
    };
    let s = s.as_ref();
    let name = h.name("slot-rules");
    let now = server_now(s, h).await;
    let i1 = now - 10_000;
    let (a, b) = (mint(), mint());
    assert_eq!(s.last_slot(&name).await.unwrap(), None, "never ran");
    let SlotClaim::Claimed { superseded_ms, .. } = claim(s, h, &name, &a, i1).await else {
        panic!("{}: a free instant was refused", h.backend());
    };
    assert_eq!(superseded_ms, None);
    assert_eq!(
        claim(s, h, &name, &b, i1 + 1).await,
        SlotClaim::Held,
        "lease held by the round"
    );
    let f = s.finish_slot(&name, &a, i1, None).await.unwrap();
    assert!(f.recorded && f.released && !f.passed_taken, "{f:?}");
    assert_eq!(
        claim(s, h, &name, &b, i1).await,
        SlotClaim::Taken { last_ms: i1 }
    );
    assert_eq!(
        claim(s, h, &name, &b, i1 - 1000).await,
        SlotClaim::Taken { last_ms: i1 }
    );
    match claim(s, h, &name, &b, now + 60_000).await {
        SlotClaim::Early { now_ms } => assert!(now_ms < now + 60_000),
        other => panic!(
            "{}: a future instant was not refused: {other:?}",
            h.backend()
        ),
    }
    assert!(matches!(
        claim(s, h, &name, &b, i1 + 1000).await,
        SlotClaim::Claimed { .. }
    ));
    let rec = s.last_slot(&name).await.unwrap().unwrap();
    assert_eq!(
        (rec.last_ms, rec.unfinished_ms),
        (Some(i1 + 1000), Some(i1 + 1000))
    );
}

/// When the previous instant's round never finished, the next claim reports it as given up,
/// and it never runs again.
pub async fn a_superseded_instant_is_reported(h: &Harness) {
    let Some(s) = slots_expiring(h, "a_superseded_instant_is_reported") else {
        return;
    };
    let s = s.as_ref();
    let name = h.name("superseded");
    let now = server_now(s, h).await;
    let (i1, i2) = (now - 20_000, now - 10_000);
    assert!(matches!(
        claim(s, h, &name, &mint(), i1).await,
        SlotClaim::Claimed { .. }
    ));
    sleep(h.ttl + h.slack).await; // cut short: never finished, lease expired
    let b = mint();
    let SlotClaim::Claimed { superseded_ms, .. } = claim(s, h, &name, &b, i2).await else {
        panic!("{}: the next instant was refused", h.backend());
    };
    assert_eq!(superseded_ms, Some(i1));
    s.finish_slot(&name, &b, i2, None).await.unwrap();
    assert!(
        s.unfinished(std::slice::from_ref(&name))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        s.claim_rerun(&name, &mint(), "r", h.ttl, i1).await.unwrap(),
        None
    );
}

/// A finish takes `passed` along as the last instant, so the instants the round overran stay
/// skipped; an instant the server's clock has not reached is not taken along.
pub async fn overrun_instants_are_skipped(h: &Harness) {
    let Some(s) = slots(h, "overrun_instants_are_skipped") else {
        return;
    };
    let s = s.as_ref();
    let name = h.name("overrun");
    let now = server_now(s, h).await;
    let a = mint();
    assert!(matches!(
        claim(s, h, &name, &a, now - 10_000).await,
        SlotClaim::Claimed { .. }
    ));
    let f = s
        .finish_slot(&name, &a, now - 10_000, Some(now - 2_000))
        .await
        .unwrap();
    assert!(f.recorded && f.passed_taken && f.released, "{f:?}");
    assert_eq!(
        claim(s, h, &name, &mint(), now - 5_000).await,
        SlotClaim::Taken {
            last_ms: now - 2_000
        }
    );

    let c = mint();
    assert!(matches!(
        claim(s, h, &name, &c, now - 1_000).await,
        SlotClaim::Claimed { .. }
    ));
    let f = s
        .finish_slot(&name, &c, now - 1_000, Some(now + 3_600_000))
        .await
        .unwrap();
    assert!(
        f.recorded && !f.passed_taken,
        "a future instant was taken along: {f:?}"
    );
    let rec = s.last_slot(&name).await.unwrap().unwrap();
    assert_eq!((rec.last_ms, rec.unfinished_ms), (Some(now - 1_000), None));
}

/// After the lease was lost, a finish still records the end unless a later instant was claimed,
/// and never takes `passed` along.
pub async fn finish_after_the_lease_was_lost(h: &Harness) {
    let Some(s) = slots_expiring(h, "finish_after_the_lease_was_lost") else {
        return;
    };
    let s = s.as_ref();
    let name = h.name("late-finish");
    let now = server_now(s, h).await;
    let a = mint();
    assert!(matches!(
        claim(s, h, &name, &a, now - 30_000).await,
        SlotClaim::Claimed { .. }
    ));
    sleep(h.ttl + h.slack).await;
    let f = s
        .finish_slot(&name, &a, now - 30_000, Some(now - 1_000))
        .await
        .unwrap();
    assert!(f.recorded && !f.passed_taken && !f.released, "{f:?}");
    let rec = s.last_slot(&name).await.unwrap().unwrap();
    assert_eq!((rec.last_ms, rec.unfinished_ms), (Some(now - 30_000), None));

    // A later instant claimed meanwhile: the late finish records nothing.
    assert!(matches!(
        claim(s, h, &name, &a, now - 20_000).await,
        SlotClaim::Claimed { .. }
    ));
    sleep(h.ttl + h.slack).await;
    let b = mint();
    let SlotClaim::Claimed { superseded_ms, .. } = claim(s, h, &name, &b, now - 10_000).await
    else {
        panic!("{}: the next instant was refused", h.backend());
    };
    assert_eq!(superseded_ms, Some(now - 20_000));
    let f = s.finish_slot(&name, &a, now - 20_000, None).await.unwrap();
    assert!(!f.recorded && !f.released, "{f:?}");
    let rec = s.last_slot(&name).await.unwrap().unwrap();
    assert_eq!(
        (rec.last_ms, rec.unfinished_ms),
        (Some(now - 10_000), Some(now - 10_000))
    );
}

/// `unfinished` answers for many jobs at once; an unfinished instant runs again once, and a
/// rerun cut short stays unfinished for good.
pub async fn unfinished_for_many_names_and_one_rerun(h: &Harness) {
    let Some(s) = slots_expiring(h, "unfinished_for_many_names_and_one_rerun") else {
        return;
    };
    let s = s.as_ref();
    let now = server_now(s, h).await;
    let at = now - 5_000;
    let [cut, done, live, never] =
        ["cut", "done", "live", "never"].map(|n| h.name(&format!("uf-{n}")));
    let a = mint();
    for n in [&cut, &done] {
        assert!(matches!(
            claim(s, h, n, &a, at).await,
            SlotClaim::Claimed { .. }
        ));
    }
    s.finish_slot(&done, &a, at, None).await.unwrap();
    sleep(h.ttl + h.slack).await;
    assert!(matches!(
        claim(s, h, &live, &a, at).await,
        SlotClaim::Claimed { .. }
    ));
    let names = vec![cut.clone(), done.clone(), live.clone(), never.clone()];
    assert_eq!(s.unfinished(&names).await.unwrap(), vec![(cut.clone(), at)]);

    let x = mint();
    let g = s
        .claim_rerun(&cut, &x, "x", h.ttl, at)
        .await
        .unwrap()
        .expect("one rerun");
    assert!(g.term >= 2);
    assert_eq!(
        s.claim_rerun(&cut, &mint(), "y", h.ttl, at).await.unwrap(),
        None,
        "two reruns"
    );
    assert!(
        s.unfinished(&names)
            .await
            .unwrap()
            .iter()
            .all(|(n, _)| n != &cut)
    );
    sleep(h.ttl + h.slack).await; // the rerun is cut short too
    assert!(
        s.unfinished(std::slice::from_ref(&cut))
            .await
            .unwrap()
            .is_empty(),
        "a second rerun offered"
    );
    assert_eq!(
        s.claim_rerun(&cut, &mint(), "z", h.ttl, at).await.unwrap(),
        None
    );
    let rec = s.last_slot(&cut).await.unwrap().unwrap();
    assert_eq!(
        (rec.unfinished_ms, rec.rerun_ms),
        (Some(at), Some(at)),
        "unfinished for good"
    );
}

/// N replicas race for each of M instants: each instant's round starts exactly once; one cut
/// short starts exactly once more.
pub async fn each_instant_starts_once_among_replicas(h: &Harness) {
    let Some(s) = slots_expiring(h, "each_instant_starts_once_among_replicas") else {
        return;
    };
    let name = h.name("replicas");
    let now = server_now(s.as_ref(), h).await;
    let instants: Vec<i64> = (0..5).map(|k| now - 50_000 + k * 1_000).collect();
    for (k, &at) in instants.iter().enumerate() {
        let mut tasks = Vec::new();
        for r in 0..6 {
            let s = s.clone();
            let name = name.clone();
            let ttl = h.ttl;
            tasks.push(tokio::spawn(async move {
                let who = mint();
                let c = s
                    .claim_slot(&name, &who, &format!("r{r}"), ttl, at)
                    .await
                    .unwrap();
                (who, c)
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            let (who, c) = t.await.unwrap();
            if let SlotClaim::Claimed { .. } = c {
                winners.push(who);
            }
        }
        assert_eq!(winners.len(), 1, "instant {k}: {} starts", winners.len());
        if k == 2 {
            sleep(h.ttl + h.slack).await; // cut short
            let mut tasks = Vec::new();
            for _ in 0..6 {
                let s = s.clone();
                let name = name.clone();
                let ttl = h.ttl;
                tasks.push(tokio::spawn(async move {
                    let who = mint();
                    let due = s.unfinished(std::slice::from_ref(&name)).await.unwrap();
                    match due.first() {
                        Some((_, at)) => s
                            .claim_rerun(&name, &who, "rr", ttl, *at)
                            .await
                            .unwrap()
                            .map(|_| who),
                        None => None,
                    }
                }));
            }
            let mut reruns = Vec::new();
            for t in tasks {
                reruns.extend(t.await.unwrap());
            }
            assert_eq!(reruns.len(), 1, "{} reruns", reruns.len());
            s.finish_slot(&name, &reruns[0], at, None).await.unwrap();
        } else {
            s.finish_slot(&name, &winners[0], at, None).await.unwrap();
        }
    }
    let rec = s.last_slot(&name).await.unwrap().unwrap();
    assert_eq!(
        (rec.last_ms, rec.unfinished_ms),
        (instants.last().copied(), None)
    );
}

/// Three replicas run one job every second through the [`Scheduler`](lease_core::scheduler):
/// every instant that runs, runs on exactly one replica, and the instants follow one another.
pub async fn scheduled_rounds_start_once_across_replicas(h: &Harness) {
    use lease_core::{Job, Scheduler};

    let Some(s) = slots(h, "scheduled_rounds_start_once_across_replicas") else {
        return;
    };
    let job = h.name("every-second");
    let starts: Arc<std::sync::Mutex<Vec<(i64, String)>>> = Arc::default();
    let mut replicas = Vec::new();
    for r in 0..3 {
        let starts = starts.clone();
        let who = format!("replica-{r}");
        let seen = who.clone();
        let scheduler = Scheduler::builder(s.clone())
            .instance(who)
            .timings(h.timings)
            .job(
                Job::every(&job, std::time::Duration::from_secs(1))
                    .unwrap()
                    .run(move |round| {
                        let starts = starts.clone();
                        let seen = seen.clone();
                        async move {
                            starts.lock().unwrap().push((round.instant_ms(), seen));
                            sleep(std::time::Duration::from_millis(100)).await;
                            Ok::<(), std::io::Error>(())
                        }
                    }),
            )
            .build()
            .unwrap();
        let running = scheduler.clone();
        replicas.push((scheduler, tokio::spawn(async move { running.run().await })));
    }
    sleep(std::time::Duration::from_millis(5_500)).await;
    for (scheduler, _) in &replicas {
        scheduler.shutdown().await.unwrap();
    }
    for (_, task) in replicas {
        task.await.unwrap().unwrap();
    }
    let mut starts = starts.lock().unwrap().clone();
    starts.sort();
    let instants: Vec<i64> = starts.iter().map(|(at, _)| *at).collect();
    let mut distinct = instants.clone();
    distinct.dedup();
    assert_eq!(
        instants,
        distinct,
        "{}: an instant ran twice: {starts:?}",
        h.backend()
    );
    assert!(
        instants.len() >= 3,
        "{}: only {} rounds in 5.5 s: {starts:?}",
        h.backend(),
        instants.len()
    );
    assert!(
        instants.windows(2).all(|w| w[1] - w[0] == 1_000),
        "{}: instants were skipped: {instants:?}",
        h.backend()
    );
}
