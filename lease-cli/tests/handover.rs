//! Handing a lease over: after kill -9 of the holder's `lease` (its CMD dies at once, the
//! waiter starts after the TTL counted from the last renewal, not before) and after a normal
//! exit of the holder's CMD (the waiter starts promptly).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

const MS: i128 = 1_000_000;

#[test]
fn kill_9_of_the_holder_kills_its_cmd_and_the_waiter_starts_after_the_ttl() {
    let _serial = timing_lock();
    let dir = TempDir::new("kill9");
    let store = dir.sqlite();
    let log = dir.file("runs.log");
    let (pid_file, grandchild_file) = (dir.file("cmd.pid"), dir.file("grandchild.pid"));
    let holder_cmd = logged(
        &log,
        &format!(
            "echo $$ > '{}'; sleep 60 & echo $! > '{}'; wait",
            pid_file.display(),
            grandchild_file.display()
        ),
    );
    let mut args = vec!["run", "--ttl", "2s", "k9", "--"];
    args.extend(holder_cmd.iter().map(String::as_str));
    let mut holder = lease(&store, &args).spawn().unwrap();
    let (cmd_pid, grandchild) = (read_pid(&pid_file), read_pid(&grandchild_file));

    let waiter_cmd = logged(&log, "true");
    let mut args = vec!["run", "--ttl", "2s", "--wait", "k9", "--"];
    args.extend(waiter_cmd.iter().map(String::as_str));
    let mut waiter = lease(&store, &args);
    waiter.env("LEASE_LOG", LOG_HELD);
    let mut waiter = Talking::spawn(waiter);
    // The kill comes once the waiter is waiting: its claim has found k9 held.
    waiter.wait_for(HELD_LINE, Duration::from_secs(10));

    // The store's own word on the expiry, just before the kill: the lease expires no earlier
    // than asked + expires_in (a renewal between now and the kill only moves it later).
    let asked = now_ns();
    let status = lease_output(&store, &["status", "--json", "k9"], Duration::from_secs(10));
    let expires_in = json_u64(&stdout(&status), "expires_in_ms").expect("k9 is held");
    let killed = now_ns();
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();

    assert!(
        wait_until(Duration::from_millis(500), || is_dead(cmd_pid)
            && is_dead(grandchild)),
        "CMD ({cmd_pid}) and its child ({grandchild}) must die with their lease"
    );
    let dead_after = (now_ns() - killed) / MS;

    let out = waiter.finish(Duration::from_secs(15));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let ev = events(&log);
    let starts: Vec<_> = ev.iter().filter(|e| e.start).collect();
    assert_eq!(starts.len(), 2, "{ev:?}");
    let (first, second) = (starts[0], starts[1]);
    assert_eq!(second.term, first.term + 1, "{ev:?}");
    let earliest = asked + i128::from(expires_in) * MS;
    let latest = killed + (TTL + RETRY + JITTER + Duration::from_secs(1)).as_nanos() as i128;
    eprintln!(
        "CMD dead {dead_after} ms after kill -9; waiter started {} ms after the kill, {} ms \
         after the store's expiry",
        (second.ns - killed) / MS,
        (second.ns - earliest) / MS
    );
    // 5 ms: the store keeps milliseconds, `date` and this clock are read apart.
    assert!(
        second.ns >= earliest - 5 * MS,
        "the waiter started {} ms before the lease expired",
        (earliest - second.ns) / MS
    );
    assert!(
        second.ns >= killed + (TTL - RENEW).as_nanos() as i128 - 5 * MS,
        "the waiter started only {} ms after the kill",
        (second.ns - killed) / MS
    );
    assert!(
        second.ns <= latest,
        "the waiter started {} ms after the kill",
        (second.ns - killed) / MS
    );
}

/// A holder CMD that ends once `go` exists.
fn until_exists(go: &Path) -> String {
    format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display())
}

/// `lease run --wait ARGS…`, spawned with stderr read, once it is known to wait: its claim
/// found the name held. Then `go` is written, which ends the holder's CMD: the handover is
/// timed from a waiter that was waiting, not from one still starting.
fn waiting(store: &str, args: &[&str], go: &Path) -> Talking {
    let mut waiter = lease(store, args);
    waiter.env("LEASE_LOG", LOG_HELD);
    let mut waiter = Talking::spawn(waiter);
    waiter.wait_for(HELD_LINE, Duration::from_secs(10));
    std::fs::write(go, "").unwrap();
    waiter
}

#[test]
fn a_normal_exit_hands_over_promptly() {
    let _serial = timing_lock();
    let dir = TempDir::new("prompt");
    let store = dir.sqlite();
    let log = dir.file("runs.log");
    let go = dir.file("go");
    let holder_cmd = logged(&log, &until_exists(&go));
    // The holder's lease is 15 s: its CMD now runs until the waiter is known to wait, which
    // takes as long as the machine is busy, and a 2 s lease renewed by a starved `lease` is
    // lost. The waiter's stays 2 s: its retry (RETRY) is what the bound below allows for.
    let mut args = vec!["run", "--ttl", "15s", "prompt", "--"];
    args.extend(holder_cmd.iter().map(String::as_str));
    let holder = lease(&store, &args).spawn().unwrap();
    assert!(wait_until(Duration::from_secs(10), || !events(&log).is_empty()));

    let waiter_cmd = logged(&log, "true");
    let mut args = vec!["run", "--ttl", "2s", "--wait", "prompt", "--"];
    args.extend(waiter_cmd.iter().map(String::as_str));
    let waiter = waiting(&store, &args, &go);

    for out in [
        finish(holder, Duration::from_secs(10)),
        waiter.finish(Duration::from_secs(10)),
    ] {
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
    }
    let runs = runs(&log);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_one_at_a_time(&runs);
    let gap = runs[1].1 - runs[0].2;
    eprintln!(
        "the waiter started {} ms after the holder's CMD ended",
        gap / MS
    );
    assert!(
        gap < (RETRY + Duration::from_secs(1)).as_nanos() as i128,
        "the waiter started {} ms after the holder's CMD ended",
        gap / MS
    );
}

/// With a 60 s TTL the campaign retry is 8 s: a waiter that starts within a second of the
/// holder's exit was woken by the store's hint (SQLite across processes: its change check),
/// not by polling.
#[test]
fn a_waiter_is_woken_by_the_release_not_by_its_retry() {
    let _serial = timing_lock();
    let dir = TempDir::new("hinted");
    let store = dir.sqlite();
    let mut gaps = Vec::new();
    for i in 0..3 {
        let name = format!("hinted-{i}");
        let log = dir.file(&format!("runs-{i}.log"));
        let go = dir.file(&format!("go-{i}"));
        let holder_cmd = logged(&log, &until_exists(&go));
        let mut args = vec!["run", "--ttl", "60s", &name, "--"];
        args.extend(holder_cmd.iter().map(String::as_str));
        let holder = lease(&store, &args).spawn().unwrap();
        assert!(wait_until(Duration::from_secs(10), || !events(&log).is_empty()));
        let waiter_cmd = logged(&log, "true");
        let mut args = vec!["run", "--ttl", "60s", "--wait", &name, "--"];
        args.extend(waiter_cmd.iter().map(String::as_str));
        let waiter = waiting(&store, &args, &go);
        for out in [
            finish(holder, Duration::from_secs(20)),
            waiter.finish(Duration::from_secs(20)),
        ] {
            assert_eq!(code(out.status), 0, "{}", stderr(&out));
        }
        let runs = runs(&log);
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert_one_at_a_time(&runs);
        gaps.push((runs[1].1 - runs[0].2) / MS);
    }
    eprintln!("holder's CMD end → waiter's CMD start, TTL 60 s (retry 8 s): {gaps:?} ms");
    for gap in gaps {
        assert!(
            gap < 1_000,
            "the waiter started {gap} ms after the holder's CMD ended: not woken by the release"
        );
    }
}
