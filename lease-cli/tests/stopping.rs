//! Stopping CMD: signals forwarded to its group, the lease lost (via `release --force`), and
//! what CMD leaves behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use rustix::process::Signal;

#[test]
fn sigterm_is_forwarded_and_the_lease_released_after_cmd_exits() {
    let dir = TempDir::new("sigterm");
    let store = dir.sqlite();
    let log = dir.file("cmd.log");
    let script = format!(
        "trap 'echo got-term >> {log}; exit 3' TERM; echo ready >> {log}; \
         while :; do sleep 0.05; done",
        log = log.display()
    );
    let holder = lease(&store, &["run", "sig", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|s| s.contains("ready"))
    }));
    send(holder.id(), Signal::TERM);
    let out = finish(holder, Duration::from_secs(10));
    assert_eq!(code(out.status), 3, "CMD's own code: {}", stderr(&out));
    assert!(
        !stderr(&out).contains("lease:"),
        "CMD's exit is not lease's: {}",
        stderr(&out)
    );
    assert!(std::fs::read_to_string(&log).unwrap().contains("got-term"));
    // Released, not left to expire: the next run gets it at once.
    let next = lease_output(
        &store,
        &["run", "sig", "--", "true"],
        Duration::from_secs(10),
    );
    assert_eq!(code(next.status), 0, "{}", stderr(&next));
}

/// The waiter is signalled once it is known to wait: the holder's CMD has started (so the
/// name is held), and the waiter has logged that its claim found the name held.
#[test]
fn a_signal_while_waiting_exits_72_without_running_cmd() {
    let dir = TempDir::new("sigint");
    let store = dir.sqlite();
    let marker = dir.file("ran");
    let holding = dir.file("holding");
    let hold = format!("touch '{}'; exec sleep 60", holding.display());
    let holder = lease(&store, &["run", "busy", "--", "sh", "-c", &hold])
        .spawn()
        .unwrap();
    wait_for_file(&holding, Duration::from_secs(20));
    let touch = format!("touch '{}'", marker.display());
    let mut waiter = lease(&store, &["run", "--wait", "busy", "--", "sh", "-c", &touch]);
    waiter.env("LEASE_LOG", LOG_HELD);
    let mut waiter = Talking::spawn(waiter);
    waiter.wait_for(HELD_LINE, Duration::from_secs(20));
    send(waiter.id(), Signal::INT);
    let out = waiter.finish(Duration::from_secs(10));
    assert_eq!(code(out.status), 72, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("stopped by SIGINT while waiting for 'busy'")
            && stderr(&out).contains("lease's own exit code 72"),
        "{}",
        stderr(&out)
    );
    assert!(!marker.exists());
    send(holder.id(), Signal::TERM);
    let out = finish(holder, Duration::from_secs(10));
    assert_eq!(code(out.status), 128 + 15, "{}", stderr(&out));
}

#[test]
fn a_forced_release_stops_cmd_with_74_and_the_next_term_is_higher() {
    let _serial = timing_lock();
    let dir = TempDir::new("force");
    let store = dir.sqlite();
    let pid_file = dir.file("cmd.pid");
    let script = format!(
        "echo $LEASE_TERM > '{0}.term'; echo $$ > '{0}'; exec sleep 30",
        pid_file.display()
    );
    let holder = lease(
        &store,
        &["run", "--ttl", "2s", "forced", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    let cmd_pid = read_pid(&pid_file);
    let term: u64 = std::fs::read_to_string(format!("{}.term", pid_file.display()))
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let refused = lease_output(&store, &["release", "forced"], Duration::from_secs(10));
    assert_eq!(code(refused.status), 64, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--force"), "{}", stderr(&refused));

    let forced = lease_output(
        &store,
        &["release", "forced", "--force"],
        Duration::from_secs(10),
    );
    assert_eq!(code(forced.status), 0, "{}", stderr(&forced));
    assert!(stdout(&forced).contains("released"), "{}", stdout(&forced));

    // The holder learns at its next renewal (every 267 ms) and stops CMD within the grace.
    let out = finish(holder, Duration::from_secs(5));
    assert_eq!(code(out.status), 74, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("lease's own exit code 74"),
        "{}",
        stderr(&out)
    );
    assert!(is_dead(cmd_pid));

    let next = lease_output(
        &store,
        &["run", "forced", "--", "sh", "-c", "echo $LEASE_TERM"],
        Duration::from_secs(10),
    );
    assert_eq!(code(next.status), 0, "{}", stderr(&next));
    assert_eq!(stdout(&next).trim(), (term + 1).to_string());
}

#[test]
fn what_cmd_leaves_running_is_ended_before_the_release() {
    let dir = TempDir::new("leftover");
    let store = dir.sqlite();
    let child_file = dir.file("child.pid");
    let script = format!("sleep 60 & echo $! > '{}'", child_file.display());
    let out = lease_output(
        &store,
        &["run", "leftover", "--", "sh", "-c", &script],
        Duration::from_secs(20),
    );
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(is_dead(read_pid(&child_file)));
}

/// The holder's CMD runs until the test has read the status and stops it (it slept 3 s, which a
/// busy machine could outlast before the table was read).
#[test]
fn status_shows_the_holder_term_and_time_left() {
    let dir = TempDir::new("status");
    let store = dir.sqlite();
    let holder = lease(
        &store,
        &[
            "run",
            "--instance",
            "worker-7",
            "shown",
            "--",
            "sleep",
            "60",
        ],
    )
    .spawn()
    .unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        let out = lease_output(&store, &["status", "shown"], Duration::from_secs(10));
        stdout(&out).contains("worker-7")
    }));
    let out = lease_output(
        &store,
        &["status", "shown", "never"],
        Duration::from_secs(10),
    );
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("EXPIRES IN"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("shown") && lines[1].contains("worker-7"),
        "{table}"
    );
    assert!(lines[2].starts_with("never"), "{table}");

    let out = lease_output(
        &store,
        &["status", "--json", "shown"],
        Duration::from_secs(10),
    );
    let json = stdout(&out);
    assert!(json.contains("\"holder\":\"worker-7\""), "{json}");
    assert!(json.contains("\"held\":true"), "{json}");
    assert!(
        json_u64(&json, "expires_in_ms").is_some_and(|ms| ms <= 15_000),
        "{json}"
    );
    send(holder.id(), Signal::TERM);
    finish(holder, Duration::from_secs(10));
}
