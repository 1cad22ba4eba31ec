//! The scheduler's claim of an instant goes through the coordinator's claim attempt: an answer
//! lost after the store applied the claim is read back and adopted (the instant runs once), and
//! the term's ending runs `finish_slot` only once renewals have stopped (no renewal follows the
//! finish).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::layer::{Answer, Call, Hook, Operation};
use lease_core::{
    Job, Scheduler,
    scheduler::{Round, TokioClock, WallClock},
};
use lease_core::{
    Timings,
    backend::{LeaseStoreExt, slots::SlotStore},
};
use lease_local::MemoryStore;
use tokio::time::sleep;

const S: Duration = Duration::from_secs(1);

/// Delays the answer of the first `claim_slot` past the attempt timeout (after it took effect),
/// and holds the answer of each `finish_slot` for `finish_hold` after it took effect; records
/// the operations in order.
#[derive(Debug, Clone, Default)]
struct Script(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    lost_first_claim: AtomicBool,
    finish_hold: Duration,
    ops: Mutex<Vec<Operation>>,
}

impl Hook for Script {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        Box::pin(async move {
            let me = &self.0;
            me.ops.lock().unwrap().push(call.operation);
            let answer = op.await;
            if call.operation == Operation::ClaimSlot
                && !me.lost_first_claim.swap(true, Ordering::SeqCst)
            {
                sleep(Timings::default().attempt_timeout() + S).await;
            }
            if call.operation == Operation::FinishSlot {
                sleep(me.finish_hold).await;
            }
            answer
        })
    }
}

fn job(starts: &Arc<Mutex<Vec<i64>>>) -> Job {
    let starts = starts.clone();
    Job::every("j", 60 * S).unwrap().run(move |round: Round| {
        starts.lock().unwrap().push(round.instant_ms());
        async move {
            sleep(S).await;
            Ok::<(), std::io::Error>(())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_slot_claim_whose_answer_is_lost_is_read_back_and_adopted() {
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let script = Script::default();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s = Scheduler::builder(store.clone().with_hook(script.clone()))
        .clock(clock)
        .rerun_check(3600 * S)
        .jobs([job(&starts)])
        .build()
        .unwrap();
    let begin = clock.now_ms();
    let first = (begin / 60_000 + 1) * 60_000;
    let run = {
        let s = s.clone();
        tokio::spawn(async move { s.run().await })
    };
    sleep(Duration::from_millis(u64::try_from(first - begin).unwrap()) + 30 * S).await;
    s.shutdown().await.unwrap();
    run.await.unwrap().unwrap();
    assert!(script.0.lost_first_claim.load(Ordering::SeqCst));
    assert_eq!(
        *starts.lock().unwrap(),
        vec![first],
        "the first instant ran, adopted by the read-back"
    );
    let record = store.last_slot("j").await.unwrap().unwrap();
    assert_eq!(record.unfinished_ms, None, "and was finished");
}

#[tokio::test(start_paused = true)]
async fn no_renewal_is_sent_once_the_finish_has_begun() {
    let store = MemoryStore::new();
    let clock = TokioClock::starting_at(store.now_ms());
    let t = Timings::default();
    let script = Script(Arc::new(Inner {
        lost_first_claim: AtomicBool::new(true),
        finish_hold: t
            .attempt_timeout()
            .saturating_sub(Duration::from_millis(1))
            .min(t.renew_every() * 2),
        ..Inner::default()
    }));
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s = Scheduler::builder(store.clone().with_hook(script.clone()))
        .clock(clock)
        .rerun_check(3600 * S)
        .jobs([job(&starts)])
        .build()
        .unwrap();
    let begin = clock.now_ms();
    let first = (begin / 60_000 + 1) * 60_000;
    let run = {
        let s = s.clone();
        tokio::spawn(async move { s.run().await })
    };
    sleep(Duration::from_millis(u64::try_from(first - begin).unwrap()) + 50 * S).await;
    s.shutdown().await.unwrap();
    run.await.unwrap().unwrap();
    let ops = script.0.ops.lock().unwrap().clone();
    let at = ops
        .iter()
        .position(|o| *o == Operation::FinishSlot)
        .expect("a finish");
    assert!(
        !ops[at..].contains(&Operation::Renew),
        "a renewal after the finish began: {ops:?}"
    );
    assert_eq!(*starts.lock().unwrap(), vec![first]);
}
