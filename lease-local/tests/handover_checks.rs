//! The hand-over cases can fail: each is run here over a memory store with a hook that breaks
//! what the case checks, and must panic with the case's own message.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_conformance::{Harness, HintMode, cases, faulty, panic_of};
use lease_core::backend::Grant;
use lease_core::backend::LeaseInfo;
use lease_core::backend::LeaseStoreExt;
use lease_core::layer::{Answer, Call, Hook, Operation, answer_as, peek};
use lease_local::MemoryStore;

/// Answers every claim "granted", with a fresh term, without asking the store.
#[derive(Debug, Default)]
struct ForgeClaims(AtomicU64);

impl Hook for ForgeClaims {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        if call.operation == Operation::Claim {
            let term = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            let grant = Grant {
                term,
                expires_in: call.ttl.unwrap_or(Duration::from_secs(1)),
            };
            if let Some(answer) = answer_as::<T, _>(Some(grant)) {
                return Box::pin(async move { Ok(answer) });
            }
        }
        op
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chaos_case_fails_when_claims_are_forged() {
    let store = MemoryStore::new().with_hook(ForgeClaims::default());
    let h = Harness::new(Arc::new(store));
    let msg =
        panic_of(async move { cases::lost_or_duplicated_hints_never_break_exclusivity(&h).await })
            .await;
    assert!(
        // The checker's overlap, or a contender's refused fenced write (its task's panic).
        msg.contains("overlap")
            || msg.contains("fenced write refused")
            || msg.contains("contender task"),
        "the chaos case passed over forged claims: {msg:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wake_case_fails_when_a_store_that_says_watch_sends_no_hints() {
    // The fault hook reports the memory store's capabilities (watch: true) but cuts its hints.
    let mute = faulty(MemoryStore::new());
    mute.hook().set_hint_mode(HintMode::Cut);
    let h = Harness::new(Arc::new(mute));
    let msg = panic_of(async move { cases::a_release_wakes_a_waiter_at_once(&h).await }).await;
    assert!(
        msg.contains("did not wake the waiter"),
        "the wake case passed without hints: {msg:?}"
    );
}

/// Holds back every claim of instance "b" for a while before it reaches the store.
#[derive(Debug)]
struct SlowClaimsOfB(Duration);

impl Hook for SlowClaimsOfB {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        if call.operation == Operation::Claim && call.who == Some("b") {
            let pause = self.0;
            return Box::pin(async move {
                tokio::time::sleep(pause).await;
                op.await
            });
        }
        op
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_polling_case_fails_when_the_waiter_is_slow() {
    let inner = MemoryStore::new();
    let slow = inner
        .clone()
        .with_hook(SlowClaimsOfB(Duration::from_millis(900)));
    // The case's waiter is b over a fault hook around the harness's store.
    let h = Harness::new(Arc::new(slow));
    let msg = panic_of(async move {
        cases::without_hints_a_waiter_still_takes_over_within_the_retry(&h).await
    })
    .await;
    assert!(
        // Each claim held back longer than the attempt timeout: the waiter never takes over
        // in time (or, were it shorter, too late for the bound).
        msg.contains("more than the retry pace allows") || msg.contains("was not acquired within"),
        "the polling case passed with a slow waiter: {msg:?}"
    );
}

/// A store whose clock runs ahead, once armed: every read answers a live lease as run out, and
/// claims of instance "b" that the store refused are answered as granted. (A waiter reads the
/// holder before it claims at the holder's expiry, so an early grant alone never reaches it.)
#[derive(Debug)]
struct EarlyGrantsForB {
    armed_after: tokio::time::Instant,
}

impl Hook for EarlyGrantsForB {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        if tokio::time::Instant::now() < self.armed_after {
            return op;
        }
        if call.operation == Operation::Get {
            return Box::pin(async move {
                let answer = op.await?;
                if let Some(Some(info)) = peek::<T, Option<LeaseInfo>>(&answer)
                    && info.live
                {
                    let ended = LeaseInfo {
                        live: false,
                        expires_in: Duration::ZERO,
                        ..info.clone()
                    };
                    if let Some(forged) = answer_as::<T, _>(Some(ended)) {
                        return Ok(forged);
                    }
                }
                Ok(answer)
            });
        }
        if call.operation != Operation::Claim || call.who != Some("b") {
            return op;
        }
        let ttl = call.ttl.unwrap_or(Duration::from_secs(1));
        Box::pin(async move {
            let answer = op.await?;
            if peek::<T, Option<Grant>>(&answer) == Some(&None) {
                let grant = Grant {
                    term: 1_000,
                    expires_in: ttl,
                };
                if let Some(forged) = answer_as::<T, _>(Some(grant)) {
                    return Ok(forged);
                }
            }
            Ok(answer)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failover_case_fails_when_the_successor_gets_in_before_the_expiry() {
    let inner = MemoryStore::new();
    let early = inner.clone().with_hook(EarlyGrantsForB {
        armed_after: tokio::time::Instant::now() + Duration::from_millis(600),
    });
    let path = faulty(inner);
    let h = Harness::new(Arc::new(early))
        .with_faults(Arc::new(path.clone()), Arc::new(path.hook().clone()));
    let msg = panic_of(async move {
        cases::a_crashed_holder_is_succeeded_at_the_stores_expiry_not_before(&h).await
    })
    .await;
    assert!(
        msg.contains("before the store's expiry"),
        "the failover case passed with a successor let in early: {msg:?}"
    );
}
