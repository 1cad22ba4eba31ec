//! Only one CMD at a time: two `lease run` on one SQLite file, on PostgreSQL and on MySQL, and four
//! `lease run --wait` one after another with strictly increasing LEASE_TERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;

/// Two `lease run` started together on `store`: without --wait exactly one runs CMD and the
/// other exits 75 at once; with --wait both run, one after the other, terms increasing.
///
/// Without --wait the CMD that runs does not end before the other `lease` has exited (it waits
/// for a file the test writes then), so the other's claim always meets a held name, however
/// slowly either starts. The leases are the default 15 s: nothing here is about the TTL, and a
/// 2 s lease renewed by a `lease` starved of CPU is lost (exit 74).
fn two_runs_exclude(store: &str, dir: &TempDir) {
    let name = unique_name("two");
    let log = dir.file(&format!("{name}.log"));
    let go = dir.file(&format!("{name}.go"));
    let cmd = logged(
        &log,
        &format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display()),
    );
    let mut args = vec!["run", "--ttl", "15s", &name, "--"];
    args.extend(cmd.iter().map(String::as_str));

    let mut a = lease(store, &args).spawn().unwrap();
    let mut b = lease(store, &args).spawn().unwrap();
    // One of them exits (refused) while the other's CMD runs; if both ran, neither would.
    wait_until(Duration::from_secs(20), || {
        a.try_wait().unwrap().is_some() || b.try_wait().unwrap().is_some()
    });
    std::fs::write(&go, "").unwrap();
    let (a, b) = (
        finish(a, Duration::from_secs(20)),
        finish(b, Duration::from_secs(20)),
    );
    let mut codes = [code(a.status), code(b.status)];
    codes.sort_unstable();
    assert_eq!(codes, [0, 75], "a: {} b: {}", stderr(&a), stderr(&b));
    let refused = if code(a.status) == 75 { &a } else { &b };
    let err = stderr(refused);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("is held by") && err.contains("lease's own exit code 75"),
        "{err}"
    );
    assert_eq!(
        runs(&log).len(),
        1,
        "exactly one CMD ran: {:?}",
        events(&log)
    );

    // With --wait both run, one at a time.
    let cmd = logged(&log, "sleep 1");
    let mut args = vec!["run", "--ttl", "15s", "--wait", &name, "--"];
    args.extend(cmd.iter().map(String::as_str));
    let a = lease(store, &args).spawn().unwrap();
    let b = lease(store, &args).spawn().unwrap();
    for out in [
        finish(a, Duration::from_secs(30)),
        finish(b, Duration::from_secs(30)),
    ] {
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
    }
    let runs = runs(&log);
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert_one_at_a_time(&runs);
}

#[test]
fn two_runs_on_one_sqlite_file_never_overlap() {
    let _serial = timing_lock();
    let dir = TempDir::new("sqlite-two");
    two_runs_exclude(&dir.sqlite(), &dir);
}

#[test]
fn two_runs_on_postgres_never_overlap() {
    let Some(url) = lease_conformance::env::server_url("postgres") else {
        return;
    };
    let _serial = timing_lock();
    let dir = TempDir::new("pg-two");
    two_runs_exclude(&url, &dir);
}

#[test]
fn two_runs_on_mysql_never_overlap() {
    let Some(url) = lease_conformance::env::server_url("mysql") else {
        return;
    };
    let _serial = timing_lock();
    let dir = TempDir::new("mysql-two");
    two_runs_exclude(&url, &dir);
}

/// The leases are the default 15 s: the turns are handed over by release, not by the TTL,
/// and a 2 s lease renewed by a `lease` starved of CPU is lost (exit 74).
#[test]
fn four_waiting_runs_take_turns_with_increasing_terms() {
    let _serial = timing_lock();
    let dir = TempDir::new("four");
    let store = dir.sqlite();
    let log = dir.file("runs.log");
    let cmd = logged(&log, "sleep 0.3");
    let mut args = vec!["run", "--ttl", "15s", "--wait", "turns", "--"];
    args.extend(cmd.iter().map(String::as_str));
    let children: Vec<_> = (0..4)
        .map(|_| lease(&store, &args).spawn().unwrap())
        .collect();
    for child in children {
        let out = finish(child, Duration::from_secs(60));
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    }
    let runs = runs(&log);
    assert_eq!(runs.len(), 4, "{runs:?}");
    assert_one_at_a_time(&runs);
}
