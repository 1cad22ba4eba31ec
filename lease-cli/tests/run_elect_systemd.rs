//! The systemd units of lease-cli/examples/systemd for `lease run` and `lease elect`: checked by
//! `systemd-analyze verify` where it is installed, and a `systemctl stop` (SIGTERM to `lease`
//! alone, as `KillMode=mixed` sends it) of every role ends with a code their
//! `SuccessExitStatus=` counts as success. (Their fields and ExecStart's arguments are checked
//! against lease's own parser by the unit tests of lease-cli's `units` module.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use rustix::process::Signal;

/// The example units this file checks.
const UNITS: [&str; 2] = ["lease-run@.service", "lease-elect@.service"];

fn unit_path(unit: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/systemd")
        .join(unit)
}

/// The values of `key=` in `unit`'s text.
fn values(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim().to_owned())
        .collect()
}

/// The codes of the unit's `SuccessExitStatus=`.
fn success_codes(unit: &str) -> Vec<i32> {
    let text = std::fs::read_to_string(unit_path(unit)).unwrap();
    let lines = values(&text, "SuccessExitStatus");
    assert_eq!(lines.len(), 1, "{unit}: one SuccessExitStatus= line");
    lines[0]
        .split_whitespace()
        .map(|c| c.parse().unwrap())
        .collect()
}

#[test]
fn systemd_analyze_verify_accepts_the_units() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        println!(
            "SKIPPED: systemd-analyze is not installed; the units' fields are checked by the unit tests"
        );
        return;
    };
    assert!(version.status.success());
    let dir = TempDir::new("units");
    for unit in UNITS {
        // verify wants ExecStart's program to exist: the lease under test stands in for it.
        let text = std::fs::read_to_string(unit_path(unit))
            .unwrap()
            .replace("/usr/local/bin/lease", LEASE);
        let copy = dir.file(unit);
        std::fs::write(&copy, text).unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&copy)
            .output()
            .unwrap();
        // A bad value or an unknown key is only a warning: any output is a failure here.
        assert!(
            out.status.success() && out.stderr.is_empty() && out.stdout.is_empty(),
            "{unit}: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
}

/// A `lease` whose stderr is read as it runs, with the log line of a claim that finds the name
/// held (so the test knows it waits).
fn talking(store: &str, args: &[&str]) -> Talking {
    let mut cmd = lease(store, args);
    cmd.env("LEASE_LOG", LOG_HELD);
    Talking::spawn(cmd)
}

#[test]
fn systemctl_stop_of_every_role_ends_with_a_success_code_of_the_units() {
    let _timing = timing_lock();
    let dir = TempDir::new("stop-codes");
    let store = dir.sqlite();
    let leading = dir.file("leading");
    let running = dir.file("running");
    let lead = format!("touch '{}'; exec sleep 60", leading.display());
    let run = format!("touch '{}'; exec sleep 60", running.display());

    let mut leader = talking(&store, &["elect", "svc", "--", "sh", "-c", &lead]);
    wait_for_file(&leading, Duration::from_secs(20));
    leader.wait_for("leader for 'svc'", Duration::from_secs(10));
    let mut follower = talking(&store, &["elect", "svc", "--", "sh", "-c", &lead]);
    follower.wait_for(HELD_LINE, Duration::from_secs(20));
    let mut waiting = talking(&store, &["run", "--wait", "svc", "--", "sh", "-c", &run]);
    waiting.wait_for(HELD_LINE, Duration::from_secs(20));
    let other = dir.file("job-running");
    let job = format!("touch '{}'; exec sleep 60", other.display());
    let holder = talking(&store, &["run", "job", "--", "sh", "-c", &job]);
    wait_for_file(&other, Duration::from_secs(20));

    // Followers first, so that none takes over when the leader goes.
    let mut codes = Vec::new();
    for (role, p) in [
        ("elect follower", follower),
        ("run --wait", waiting),
        ("run holding", holder),
        ("elect leader", leader),
    ] {
        send(p.id(), Signal::TERM);
        let out = p.finish(Duration::from_secs(15));
        codes.push((role, code(out.status), stderr(&out)));
    }
    let want = [
        ("elect follower", 72),
        ("run --wait", 72),
        ("run holding", 128 + 15),
        ("elect leader", 128 + 15),
    ];
    for ((role, got, err), (_, wanted)) in codes.iter().zip(want) {
        assert_eq!(*got, wanted, "{role}: {err}");
    }
    assert!(!running.exists(), "the waiting run never ran CMD");
    for unit in UNITS {
        let success = success_codes(unit);
        for (role, got, _) in &codes {
            assert!(
                success.contains(got),
                "{unit}: SuccessExitStatus={success:?} misses {got}, the code of a stopped {role}"
            );
        }
    }
}
