//! Helpers shared by the test files: the servers (through lease-conformance's policy: a
//! `LEASE_TEST_<BACKEND>_URL`, else one loud `SKIPPED` line, a failure when
//! `LEASE_TEST_REQUIRE` names the backend), unique names, the race tests' order check.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

/// A string unique to this call, starting with `tag`: table names, resource names, keys.
pub fn unique(tag: &str) -> String {
    let hex = lease_core::backend::HolderToken::mint().to_hex();
    format!("{tag}{}", &hex[..10])
}

/// How many writes each writer of a race test makes.
pub const RACE_WRITES: usize = 60;

/// Asserts the order in which the fence let writes through: `tokens`, in the order the writes
/// landed, never go down.
pub fn assert_never_back(tokens: &[u64]) {
    for pair in tokens.windows(2) {
        assert!(
            pair[0] <= pair[1],
            "a write under token {} landed after one under {}: {tokens:?}",
            pair[1],
            pair[0]
        );
    }
}

/// What [`race`] saw: how many of the zombie's writes the fence accepted before the successor's
/// first landed.
pub struct Race {
    /// The zombie's (token `low`) writes accepted.
    pub low_accepted: usize,
}

/// The race every resource's test runs: a zombie writes under `low` until [`RACE_WRITES`] of
/// its writes were refused; once 5 of them were accepted, its successor makes [`RACE_WRITES`]
/// writes under `high`. `write(token, i)` makes write `i` under `token` through the fence
/// under test. It fails the test when the fence accepts a `low` write sent after a `high` one
/// was answered, refuses with anything but a stale-token error, or refuses the successor.
/// The caller then checks the resource's own record of the order the writes landed in
/// ([`assert_never_back`]).
pub async fn race<W, F>(low: u64, high: u64, write: W) -> Race
where
    W: Fn(u64, usize) -> F + Clone + Send + 'static,
    F: std::future::Future<Output = Result<(), lease_fence::FenceError>> + Send + 'static,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let high_landed = Arc::new(AtomicBool::new(false));
    let low_accepted = Arc::new(AtomicUsize::new(0));
    let zombie = tokio::spawn({
        let write = write.clone();
        let (high_landed, low_accepted) = (high_landed.clone(), low_accepted.clone());
        async move {
            let mut refused = 0;
            for i in 0..100_000 {
                let after_high = high_landed.load(Ordering::SeqCst);
                match write(low, i).await {
                    Ok(()) => {
                        assert!(!after_high, "token {low} accepted after {high} had landed");
                        low_accepted.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => {
                        assert!(e.is_stale(), "{e}");
                        refused += 1;
                        if refused == RACE_WRITES {
                            return refused;
                        }
                    }
                }
            }
            refused
        }
    });
    let successor = tokio::spawn({
        let (high_landed, low_accepted) = (high_landed.clone(), low_accepted.clone());
        async move {
            while low_accepted.load(Ordering::SeqCst) < 5 {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            for i in 0..RACE_WRITES {
                write(high, i).await.unwrap();
                high_landed.store(true, Ordering::SeqCst);
            }
        }
    });
    successor.await.unwrap();
    assert_eq!(zombie.await.unwrap(), RACE_WRITES);
    Race {
        low_accepted: low_accepted.load(Ordering::SeqCst),
    }
}

/// Asserts that `e` is the fence's typed refusal of `offered` on `resource` whose fence holds
/// `fence`, and that it converts to `ErrorKind::Lost` (so a term's work steps down).
pub fn assert_refused(e: &lease_fence::FenceError, resource: &str, offered: u64, fence: u64) {
    let stale = e.stale().expect("a typed refusal");
    assert_eq!(
        (stale.resource(), stale.offered(), stale.fence()),
        (resource, offered, fence)
    );
    assert_eq!(e.kind(), lease_core::ErrorKind::Lost);
}
