//! Clock skew: a contender whose own wall clock is hours off (run under `faketime`) neither steals
//! a live lease nor misjudges an expired one, because expiry is judged by the database's clock.
//!
//! The test fails for an implementation that uses the process clock: three hours ahead, it would
//! see the live lease as long expired and take it; three hours behind, it would see the expired
//! lease as live and refuse it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease_conformance::env;
use lease_core::{HolderToken, LeaseStore};

const PROBE: &str = env!("CARGO_BIN_EXE_lease-sql-skew-probe");

/// Runs the probe under `faketime` with its clock moved by `offset` (e.g. "+3h").
fn probe(offset: &str, url: &str, name: &str, action: &str) -> (i64, String) {
    let out = Command::new("faketime")
        .args(["-f", offset, PROBE, url, name, "2000", action])
        .env("DONT_FAKE_MONOTONIC", "1")
        .output()
        .expect("run faketime");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let clock = text
        .lines()
        .find_map(|l| l.strip_prefix("clock "))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no clock line: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let outcome = text.lines().last().unwrap_or_default().to_owned();
    (clock, outcome)
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn faketime_present(backend: &str) -> bool {
    let ok = Command::new("faketime")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        env::skip(
            backend,
            "faketime is not installed (ci/start-services.sh installs it)",
        );
    }
    ok
}

async fn skew(backend: &str, url: &str, store: &dyn LeaseStore) {
    if !faketime_present(backend) {
        return;
    }
    let name = format!("skew-{:x}", support::rand_u64());
    let g = store
        .claim(
            &name,
            &HolderToken::mint(),
            "real-clock",
            Duration::from_secs(2),
        )
        .await
        .unwrap()
        .unwrap();

    // Three hours ahead, while the lease is live: it must not take it.
    let (clock, outcome) = probe("+3h", url, &name, "claim");
    assert!(
        (clock - now() - 3 * 3600).abs() < 120,
        "faketime did not move the clock: {clock}"
    );
    assert_eq!(
        outcome, "held",
        "{backend}: a contender 3 h ahead stole a live lease"
    );
    let (_, outcome) = probe("+3h", url, &name, "get");
    assert_eq!(outcome, format!("live {}", g.term), "{backend}");

    // Once the lease has expired by the database's clock, three hours behind must see it free.
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let (clock, outcome) = probe("-3h", url, &name, "get");
    assert!(
        (clock - now() + 3 * 3600).abs() < 120,
        "faketime did not move the clock: {clock}"
    );
    assert_eq!(outcome, format!("expired {}", g.term), "{backend}");
    let (_, outcome) = probe("-3h", url, &name, "claim");
    assert_eq!(
        outcome,
        format!("claimed {}", g.term + 1),
        "{backend}: a contender 3 h behind misjudged an expired lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_contenders_with_skewed_clocks_follow_the_database_clock() {
    let Some((store, _)) = support::postgres().await else {
        return;
    };
    let url = env::server_url("postgres").unwrap();
    skew("postgres", &url, &store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_contenders_with_skewed_clocks_follow_the_database_clock() {
    let Some((store, _)) = support::mysql().await else {
        return;
    };
    let url = env::server_url("mysql").unwrap();
    skew("mysql", &url, &store).await;
}
