//! A holder `lease run` frozen by SIGSTOP or SIGTSTP (Ctrl-Z) past its TTL: its CMD must be
//! gone before a second `lease run --wait` of the same name starts its own, on SQLite and on
//! PostgreSQL. Both CMDs write their own timestamps; the intervals must not overlap.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use rustix::process::Signal;

/// The wall-clock timestamps (ns) a CMD wrote to `log`, one a line.
fn stamps(log: &Path) -> Vec<i128> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Freezes the holder with `freeze` past its TTL while a second `lease run --wait` of the
/// same name takes over, then continues it: the holder's CMD (which ignores SIGTERM) must
/// have written its last timestamp before the successor's CMD wrote its first. `false` when
/// the run showed nothing (see below) and must be tried again.
fn frozen_holder_run(store: &str, dir: &TempDir, freeze: Signal) -> bool {
    let name = unique_name("frozen");
    let log_a = dir.file(&format!("{name}.a.log"));
    let log_b = dir.file(&format!("{name}.b.log"));
    // A: ignores SIGTERM and writes every 20 ms until killed.
    let a_script = format!(
        "trap '' TERM; while :; do date +%s%N >> '{}'; sleep 0.02; done",
        log_a.display()
    );
    // B: writes for about half a second, then exits 0.
    let b_script = format!(
        "i=0; while [ $i -lt 25 ]; do date +%s%N >> '{}'; sleep 0.02; i=$((i+1)); done",
        log_b.display()
    );
    let mut holder = lease(
        store,
        &["run", "--ttl", "1500ms", &name, "--", "sh", "-c", &a_script],
    )
    .spawn()
    .unwrap();
    if !wait_until(Duration::from_secs(10), || stamps(&log_a).len() >= 5) {
        let exited = holder.try_wait().unwrap();
        let _ = holder.kill();
        let out = holder.wait_with_output().unwrap();
        panic!(
            "the holder's CMD wrote {} timestamps in 10 s (5 expected); the holder {}; its \
             stderr: {}",
            stamps(&log_a).len(),
            match exited {
                Some(status) => format!("had exited: {status:?}"),
                None => "was still running".to_owned(),
            },
            stderr(&out)
        );
    }
    send(holder.id(), freeze);
    let frozen_at = now_ns();
    let successor = lease(
        store,
        &[
            "run", "--ttl", "1500ms", "--wait", &name, "--", "sh", "-c", &b_script,
        ],
    )
    .spawn()
    .unwrap();
    let out_b = finish(successor, Duration::from_secs(20));
    if code(out_b.status) == 69 && stderr(&out_b).contains("database is locked") {
        // The freeze caught the holder inside a SQLite transaction: the file stays locked
        // until the holder continues, so nobody can claim (or overlap) meanwhile, and this
        // run cannot show anything. Let the holder go and try again.
        send(holder.id(), Signal::CONT);
        let _ = finish(holder, Duration::from_secs(10));
        return false;
    }
    assert_eq!(code(out_b.status), 0, "successor: {}", stderr(&out_b));
    // Keep the holder frozen a little longer, then let it go on.
    std::thread::sleep(Duration::from_millis(300));
    send(holder.id(), Signal::CONT);
    let out_a = finish(holder, Duration::from_secs(10));

    let a = stamps(&log_a);
    let b = stamps(&log_b);
    assert!(!b.is_empty(), "the successor's CMD never wrote");
    let a_last = *a.iter().max().unwrap();
    let b_first = *b.iter().min().unwrap();
    assert!(
        a_last < b_first,
        "the frozen holder's CMD wrote {} ms after the successor's CMD started \
         (frozen at {} ms before that); holder: {}",
        (a_last - b_first) / 1_000_000,
        (b_first - frozen_at) / 1_000_000,
        stderr(&out_a)
    );
    assert_eq!(
        code(out_a.status),
        74,
        "the frozen holder lost its lease: {}",
        stderr(&out_a)
    );
    true
}

/// [`frozen_holder_run`] until a run shows something, at most three times.
fn a_frozen_holder_never_overlaps(store: &str, dir: &TempDir, freeze: Signal) {
    for _ in 0..3 {
        if frozen_holder_run(store, dir, freeze) {
            return;
        }
    }
    panic!("three freezes in a row caught the holder inside a SQLite transaction");
}

#[test]
fn sigstop_on_sqlite_never_overlaps() {
    let _serial = timing_lock();
    let dir = TempDir::new("frozen-stop");
    a_frozen_holder_never_overlaps(&dir.sqlite(), &dir, Signal::STOP);
}

#[test]
fn sigtstp_on_sqlite_never_overlaps() {
    let _serial = timing_lock();
    let dir = TempDir::new("frozen-tstp");
    a_frozen_holder_never_overlaps(&dir.sqlite(), &dir, Signal::TSTP);
}

#[test]
fn sigstop_on_postgres_never_overlaps() {
    let Some(url) = lease_conformance::env::server_url("postgres") else {
        return;
    };
    let _serial = timing_lock();
    let dir = TempDir::new("frozen-pg-stop");
    a_frozen_holder_never_overlaps(&url, &dir, Signal::STOP);
}

#[test]
fn sigtstp_on_postgres_never_overlaps() {
    let Some(url) = lease_conformance::env::server_url("postgres") else {
        return;
    };
    let _serial = timing_lock();
    let dir = TempDir::new("frozen-pg-tstp");
    a_frozen_holder_never_overlaps(&url, &dir, Signal::TSTP);
}

/// The state letter of process `pid` (`R`, `S`, `T`, `Z`…), `None` once it is gone.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// The children of `pid`, from `/proc/PID/task/*/children`.
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .flat_map(|task| {
            std::fs::read_to_string(task.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every descendant of `pid`.
fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut next = vec![pid];
    while let Some(p) = next.pop() {
        for child in children(p) {
            out.push(child);
            next.push(child);
        }
    }
    out
}

/// Ctrl-Z stops CMD with `lease`; SIGCONT before the deadline resumes both, and the run ends
/// normally.
///
/// Nothing here is guessed from how long things take: CMD's log is counted once `lease` and
/// every process of CMD (the descendants of the watchdog, `lease`'s child, which is not
/// stopped) are seen stopped; CMD writes until the test, having seen it write after SIGCONT,
/// lets it end. The lease is the default 15 s, so its deadline (10 s after the last renewal)
/// is not reached while the test waits on a busy machine: the point is a resume before the
/// deadline.
#[test]
fn sigtstp_stops_cmd_and_sigcont_resumes_it_while_the_term_lives() {
    let _serial = timing_lock();
    let dir = TempDir::new("tstp-resume");
    let store = dir.sqlite();
    let log = dir.file("cmd.log");
    let done = dir.file("done");
    let script = format!(
        "while [ ! -e '{}' ]; do date +%s%N >> '{}'; sleep 0.02; done",
        done.display(),
        log.display()
    );
    // A term of 60 s: what is tested is that CMD stops and resumes with lease while the term
    // lives, and the term must outlive the test's own observation of the stop. With the
    // default 15 s (a 10 s local deadline), both cores busy and a test build beside it, the
    // wait for every process to show as stopped plus the 400 ms pause outlasted the deadline
    // once, and lease rightly reported the term lost ("the local deadline has passed").
    let holder = lease(
        &store,
        &["run", "--ttl", "60s", "resume", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    assert!(wait_until(Duration::from_secs(10), || stamps(&log).len() >= 3));
    let lease_pid = i32::try_from(holder.id()).unwrap();
    send(holder.id(), Signal::TSTP);
    let stopped = |p: i32| matches!(state(p), None | Some('T' | 't' | 'Z' | 'X'));
    assert!(
        wait_until(Duration::from_secs(10), || {
            let watchdog = children(lease_pid);
            stopped(lease_pid)
                && watchdog.len() == 1
                && descendants(watchdog[0]).into_iter().all(stopped)
        }),
        "lease and CMD were not stopped by SIGTSTP"
    );
    let stopped_at = now_ns();
    let before = stamps(&log).len();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        stamps(&log).len(),
        before,
        "CMD wrote while lease was stopped by SIGTSTP"
    );
    send(holder.id(), Signal::CONT);
    let resumed = wait_until(Duration::from_secs(10), || {
        stamps(&log).into_iter().any(|t| t > stopped_at)
    });
    std::fs::write(&done, "").unwrap();
    let out = finish(holder, Duration::from_secs(10));
    assert!(resumed, "CMD never resumed after SIGCONT: {}", stderr(&out));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
}
