//! flock's options for cron and systemd: `--conflict-exit N` (flock -E), `--wait-timeout D`
//! (flock -w) and `--quiet`, and the line that says the default store is this user's on this
//! host only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use common::*;
use rustix::process::Signal;

/// A `lease run NAME` on `store` whose CMD holds NAME until killed; returns once CMD runs.
fn hold(store: &str, dir: &TempDir, name: &str) -> Child {
    let holding = dir.file(&format!("{name}.holding"));
    let script = format!("touch '{}'; exec sleep 60", holding.display());
    let holder = lease(store, &["run", name, "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_for_file(&holding, Duration::from_secs(20));
    holder
}

fn let_go(holder: Child) {
    send(holder.id(), Signal::TERM);
    let out = finish(holder, Duration::from_secs(10));
    assert_eq!(code(out.status), 128 + 15, "{}", stderr(&out));
}

fn run_on(store: &str, args: &[&str]) -> Output {
    lease_output(store, args, Duration::from_secs(30))
}

#[test]
fn a_held_name_exits_with_the_conflict_code_and_quiet_says_nothing() {
    let dir = TempDir::new("conflict");
    let store = dir.sqlite();
    let ran = dir.file("ran");
    let touch = format!("touch '{}'", ran.display());
    let holder = hold(&store, &dir, "job");
    let loser = |opts: &[&str]| {
        let mut args = vec!["run"];
        args.extend_from_slice(opts);
        args.extend_from_slice(&["job", "--", "sh", "-c", &touch]);
        run_on(&store, &args)
    };

    // As before: 75 and one line.
    let out = loser(&[]);
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("lease's own exit code 75"),
        "{}",
        stderr(&out)
    );

    // flock -E: the chosen code, and the line says it was chosen.
    let out = loser(&["--conflict-exit", "3"]);
    assert_eq!(code(out.status), 3, "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is held by"), "{err}");
    assert!(
        err.contains("exit code 3, chosen by --conflict-exit for lease's own 75"),
        "{err}"
    );

    // A quiet loser: exit 0, nothing on stdout or stderr (cron mails nothing).
    let out = loser(&["--quiet", "--conflict-exit", "0"]);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    assert_eq!(stdout(&out), "");
    let out = loser(&["-q"]);
    assert_eq!(code(out.status), 75);
    assert_eq!(stderr(&out), "");

    // --conflict-exit 0 is not a licence to run: CMD never ran in any of them.
    assert!(!ran.exists());
    let_go(holder);

    // The options do not change a free name: CMD runs and its code is lease's.
    let out = run_on(
        &store,
        &[
            "run",
            "-q",
            "--conflict-exit",
            "9",
            "job",
            "--",
            "sh",
            "-c",
            "exit 4",
        ],
    );
    assert_eq!(code(out.status), 4, "{}", stderr(&out));
}

#[test]
fn wait_timeout_waits_at_most_that_long_then_exits_with_the_conflict_code() {
    let _timing = timing_lock();
    let dir = TempDir::new("wait-timeout");
    let store = dir.sqlite();
    let ran = dir.file("ran");
    let touch = format!("touch '{}'", ran.display());
    let holder = hold(&store, &dir, "job");
    let waited = |opts: &[&str]| {
        let mut args = vec!["run", "--ttl", "2s"];
        args.extend_from_slice(opts);
        args.extend_from_slice(&["job", "--", "sh", "-c", &touch]);
        let started = Instant::now();
        let out = run_on(&store, &args);
        (out, started.elapsed())
    };

    let (out, took) = waited(&["--wait-timeout", "1500ms"]);
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("was not acquired within 1.5s") && err.contains("CMD was not started"),
        "{err}"
    );
    assert!(
        took >= Duration::from_millis(1500),
        "gave up after {took:?}"
    );
    assert!(took < Duration::from_secs(15), "waited {took:?}");

    // With --conflict-exit, and quiet; --wait alongside changes nothing.
    let (out, took) = waited(&[
        "--wait",
        "--wait-timeout",
        "1s",
        "--conflict-exit",
        "0",
        "-q",
    ]);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    assert!(took >= Duration::from_secs(1), "gave up after {took:?}");
    assert!(!ran.exists());

    // A name that comes free within the timeout is taken: CMD runs.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        let_go(holder);
    });
    let (out, _) = waited(&["--wait-timeout", "20s", "--conflict-exit", "9"]);
    releaser.join().unwrap();
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(ran.exists());
}

#[test]
fn bad_conflict_options_are_usage_errors() {
    let dir = TempDir::new("conflict-usage");
    let store = dir.sqlite();
    for (opts, says) in [
        (
            &["--conflict-exit", "256"][..],
            "--conflict-exit 256: not an exit code",
        ),
        (
            &["--conflict-exit", "-1"][..],
            "give a whole number from 0 to 255",
        ),
        (
            &["--conflict-exit", "x"][..],
            "give a whole number from 0 to 255",
        ),
        (
            &["--wait", "--conflict-exit", "0"][..],
            "give --wait-timeout D to bound the wait, or drop --wait",
        ),
    ] {
        let mut args = vec!["run"];
        args.extend_from_slice(opts);
        args.extend_from_slice(&["job", "--", "true"]);
        let out = run_on(&store, &args);
        let err = stderr(&out);
        assert_eq!(code(out.status), 64, "{opts:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{opts:?}: {err}");
        assert!(err.contains("lease's own exit code 64"), "{err}");
    }
    let out = run_on(
        &store,
        &["run", "--wait-timeout", "1.5s", "job", "--", "true"],
    );
    assert_eq!(code(out.status), 66, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "--wait-timeout: bad duration '1.5s': fractions are not accepted; write 1500ms"
        ),
        "{}",
        stderr(&out)
    );
}

/// `lease` with no store chosen, under a private HOME.
fn on_default_store(home: &TempDir, args: &[&str]) -> Output {
    Command::new(LEASE)
        .args(args)
        .env_remove("LEASE_STORE")
        .env_remove("XDG_STATE_HOME")
        .env_remove("LEASE_LOG")
        .env("HOME", home.path())
        .output()
        .unwrap()
}

const NOTE: &str = "excludes only this user on this host";

#[test]
fn the_default_store_says_it_is_not_shared() {
    let home = TempDir::new("note-home");
    let file = home.path().join(".local/state/lease/leases.db");
    let out = on_default_store(&home, &["run", "job", "--", "true"]);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "lease: the default store sqlite://{} {NOTE}",
            file.display()
        )),
        "{err}"
    );
    assert!(err.contains("--store or LEASE_STORE"), "{err}");
    // The readers use it too and say so.
    let out = on_default_store(&home, &["status", "job"]);
    assert!(stderr(&out).contains(NOTE), "{}", stderr(&out));
    // A refused command line says only that: the note comes when the store is opened.
    let out = on_default_store(
        &home,
        &["run", "--conflict-exit", "300", "job", "--", "true"],
    );
    assert_eq!(code(out.status), 64);
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(!stderr(&out).contains(NOTE), "{}", stderr(&out));
    // --quiet leaves it out; so does a store that is named.
    let out = on_default_store(&home, &["run", "--quiet", "job", "--", "true"]);
    assert_eq!(stderr(&out), "");
    let dir = TempDir::new("note-named");
    let out = run_on(&dir.sqlite(), &["run", "job", "--", "true"]);
    assert_eq!(code(out.status), 0);
    assert_eq!(stderr(&out), "");
}

/// `lease elect --quiet` leaves out its lines on the way: a leader stopped by SIGTERM says
/// nothing, and exits with CMD's code.
#[test]
fn a_quiet_leader_says_nothing() {
    let dir = TempDir::new("quiet-elect");
    let store = dir.sqlite();
    let leading = dir.file("leading");
    let script = format!("touch '{}'; exec sleep 60", leading.display());
    let leader = lease(
        &store,
        &["elect", "--quiet", "job", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    wait_for_file(&leading, Duration::from_secs(20));
    send(leader.id(), Signal::TERM);
    let out = finish(leader, Duration::from_secs(10));
    assert_eq!(code(out.status), 128 + 15, "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
}
