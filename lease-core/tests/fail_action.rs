//! The default fail action says why the process ends, on stderr, with no `tracing` subscriber
//! installed: a child process (this test binary, run again) holds a lease whose work ignores
//! the loss, the store takes the lease away, and the child must exit with code 70 and a line
//! on stderr that names the lease, the term and the instance.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use lease_core::coordinator::FAIL_EXIT_CODE;
use lease_core::{Coordinator, LeaseStore, Timings};
use lease_local::MemoryStore;

/// Set in the child's environment: run the scenario instead of spawning it.
const CHILD: &str = "LEASE_FAIL_ACTION_CHILD";
const TEST: &str = "a_process_killed_by_the_default_fail_action_says_why_on_stderr";

/// The child's scenario, in paused time: the work never looks at `done()`, the store ends the
/// lease (a force release), the keeper finds it lost at its next renewal, the grace runs out and
/// the default fail action ends the process. Returning from here is a failure (exit 101).
fn child() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let store = MemoryStore::new();
        let coordinator = Coordinator::builder(store.clone())
            .instance("child-7")
            .timings(Timings::from_lease(Duration::from_secs(3)).unwrap())
            .build()
            .unwrap();
        let term = coordinator.try_acquire("fail-action").await.unwrap();
        let taker = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            taker.force_release("fail-action").await.unwrap();
        });
        // Work that ignores `done()`: it never returns.
        let _ = term
            .run(|_term| async {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                #[allow(unreachable_code)]
                Ok::<(), std::io::Error>(())
            })
            .await;
    });
    panic!("the default fail action did not end the process");
}

#[test]
fn a_process_killed_by_the_default_fail_action_says_why_on_stderr() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env_remove("RUST_LOG")
        .output()
        .expect("run this test binary again as the child");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(FAIL_EXIT_CODE),
        "the child did not end with the fail action's code; stderr:\n{stderr}"
    );
    let line = stderr
        .lines()
        .find(|l| l.starts_with("lease: "))
        .unwrap_or_else(|| panic!("no line from the fail action on stderr:\n{stderr}"));
    for part in [
        "\"fail-action\"",
        "term 1",
        "\"child-7\"",
        "step-down grace",
        "exiting with code 70",
    ] {
        assert!(line.contains(part), "{part:?} missing from {line:?}");
    }
}
