//! Clock skew: a contender whose own wall clock is hours off (run under `faketime`) neither steals
//! a live lease nor misjudges an expired one, because expiry is judged by the database's clock —
//! on SQLite, by the host's boot clock, which `faketime` cannot move.
//!
//! The test fails for an implementation that uses the process clock: three hours ahead, it would
//! see the live lease as long expired and take it; three hours behind, it would see the expired
//! lease as live and refuse it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease_conformance::env;
use lease_core::{LeaseStore, backend::HolderToken};

const PROBE: &str = env!("CARGO_BIN_EXE_lease-sql-skew-probe");

/// Runs the probe under `faketime` with its clock moved by `offset` (e.g. "+3h").
fn probe(offset: &str, url: &str, name: &str, action: &str) -> (i64, String) {
    probe_with(offset, true, url, name, action).0
}

/// As [`probe`]; with `fake_monotonic`, `faketime` moves libc's monotonic and boot clocks by
/// `offset` too. Also returns the probe's `boot` line (its boot clock as lease-sql reads it).
fn probe_with(
    offset: &str,
    dont_fake_monotonic: bool,
    url: &str,
    name: &str,
    action: &str,
) -> ((i64, String), Option<i64>) {
    let mut cmd = Command::new("faketime");
    cmd.args(["-f", offset, PROBE, url, name, "2000", action]);
    if dont_fake_monotonic {
        cmd.env("DONT_FAKE_MONOTONIC", "1");
    } else {
        cmd.env_remove("DONT_FAKE_MONOTONIC")
            .env_remove("FAKETIME_DONT_FAKE_MONOTONIC");
    }
    let out = cmd.output().expect("run faketime");
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
    let boot = text
        .lines()
        .find_map(|l| l.strip_prefix("boot "))
        .and_then(|c| c.parse().ok());
    ((clock, outcome), boot)
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

fn boot_ms() -> i64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// SQLite: a contender an hour ahead or behind — with `faketime` moving libc's monotonic and
/// boot clocks as well, or not — never takes a live lease, and the holder keeps it; once it has
/// expired, a contender an hour behind takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_contenders_with_skewed_clocks_never_take_a_live_lease() {
    if !faketime_present("sqlite") {
        return;
    }
    let url = support::sqlite_url();
    let store = lease_sql::SqliteStore::connect(&url, lease_sql::SqlConfig::default())
        .await
        .unwrap();
    let name = format!("skew-{:x}", support::rand_u64());
    let holder = HolderToken::mint();
    let ttl = Duration::from_secs(3);
    let g = store
        .claim(&name, &holder, "real-clock", ttl)
        .await
        .unwrap()
        .unwrap();
    for offset in ["+1h", "-1h"] {
        for dont_fake_monotonic in [true, false] {
            let case = format!("{offset}, monotonic faked: {}", !dont_fake_monotonic);
            let ((clock, outcome), boot) =
                probe_with(offset, dont_fake_monotonic, &url, &name, "claim");
            let shift = if offset.starts_with('+') { 3600 } else { -3600 };
            assert!(
                (clock - now() - shift).abs() < 120,
                "faketime did not move the clock ({case}): {clock}"
            );
            let boot = boot.expect("a boot line");
            assert!(
                (boot - boot_ms()).abs() < 60_000,
                "faketime moved the boot clock as lease-sql reads it ({case}): {boot} vs {}",
                boot_ms()
            );
            assert_eq!(
                outcome, "held",
                "sqlite: a contender {case} took a live lease"
            );
            let ((_, outcome), _) = probe_with(offset, dont_fake_monotonic, &url, &name, "get");
            assert_eq!(outcome, format!("live {}", g.term), "sqlite ({case})");
            // The holder's lease is still its own.
            let renewed = store.renew(&name, &holder, ttl).await.unwrap();
            assert_eq!(renewed.map(|r| r.term), Some(g.term), "sqlite ({case})");
        }
    }
    // Expired by the boot clock: a contender an hour behind sees it free and takes it.
    tokio::time::sleep(ttl + Duration::from_millis(300)).await;
    let (_, outcome) = probe("-1h", &url, &name, "get");
    assert_eq!(outcome, format!("expired {}", g.term), "sqlite");
    let (_, outcome) = probe("-1h", &url, &name, "claim");
    assert_eq!(
        outcome,
        format!("claimed {}", g.term + 1),
        "sqlite: a contender 1 h behind misjudged an expired lease"
    );
    assert!(store.renew(&name, &holder, ttl).await.unwrap().is_none());
}
