//! No start-up herd, in paused tokio time on the memory store: candidates of `run_elected`
//! started together spread their first claims (`first_claim_window`): at most 16 of 64 in the
//! first 100 ms (the old code sent 64); and a lone candidate still claims at once (within the
//! 16 ms floor of that window).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::backend::LeaseStoreExt;
use lease_core::layer::{Answer, Call, Hook, Intercept, Operation};
use lease_core::{Coordinator, LeaseStore, Term, Timings};
use lease_local::MemoryStore;
use tokio::time::{Instant, sleep};

/// When each claim reached the store.
#[derive(Debug, Default)]
struct Claims(Mutex<Vec<Instant>>);

impl Claims {
    /// How many claims reached the store within `window` of `start`.
    fn within(&self, start: Instant, window: Duration) -> usize {
        let at = self.0.lock().unwrap();
        at.iter().filter(|t| **t - start < window).count()
    }

    fn first(&self) -> Option<Instant> {
        self.0.lock().unwrap().iter().min().copied()
    }
}

impl Hook for Claims {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        if call.operation == Operation::Claim {
            self.0.lock().unwrap().push(Instant::now());
        }
        op
    }
}

/// `n` candidates, each its own coordinator on one counted memory store, all started at once
/// on `name`; the store and the coordinators.
fn candidates(n: usize) -> (Arc<Intercept<MemoryStore, Claims>>, Vec<Coordinator>) {
    let store = Arc::new(MemoryStore::new().with_hook(Claims::default()));
    let shared: Arc<dyn LeaseStore> = store.clone();
    let coordinators = (0..n)
        .map(|i| {
            Coordinator::builder(shared.clone())
                .instance(format!("node-{i}"))
                .timings(Timings::default())
                .build()
                .unwrap()
        })
        .collect::<Vec<_>>();
    for c in &coordinators {
        let c = c.clone();
        tokio::spawn(async move {
            c.run_elected("leader", |term: Term| async move {
                term.done().await;
                Ok::<(), std::io::Error>(())
            })
            .await
        });
    }
    (store, coordinators)
}

#[tokio::test(start_paused = true)]
async fn sixty_four_candidates_started_together_send_at_most_16_claims_in_100_ms() {
    let start = Instant::now();
    let (store, coordinators) = candidates(64);
    sleep(Duration::from_millis(100)).await;
    let claims = store.hook().within(start, Duration::from_millis(100));
    eprintln!("64 candidates: {claims} claims in the first 100 ms");
    assert!(claims >= 1, "nobody claimed the free name");
    assert!(
        claims <= 16,
        "64 candidates started together sent {claims} claims in the first 100 ms"
    );
    let leaders = coordinators
        .iter()
        .filter(|c| c.leadership("leader").borrow().held)
        .count();
    assert_eq!(leaders, 1, "one leader");
    for c in coordinators {
        c.close().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_lone_candidate_claims_at_once() {
    let start = Instant::now();
    let (store, coordinators) = candidates(1);
    sleep(Duration::from_millis(100)).await;
    let first = store.hook().first().expect("the lone candidate claimed");
    let after = first - start;
    // At once: within the 16 ms spread floor and a tick of tokio's millisecond timer.
    assert!(
        after <= Duration::from_millis(17),
        "the lone candidate's first claim came {after:?} after its start"
    );
    assert!(coordinators[0].leadership("leader").borrow().held);
    for c in coordinators {
        c.close().await.unwrap();
    }
}
