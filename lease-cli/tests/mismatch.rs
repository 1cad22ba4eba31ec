//! Callers of one name that disagree: `lease run NAME` beside `lease run --permits N NAME`, or
//! `--permits 2` beside `--permits 3`. The store keeps a plain lease and a name's permits apart,
//! so both would be granted; `lease` refuses the claim that disagrees with a live holder (exit
//! 64, a message naming both sides), releases it, and never starts its CMD. On SQLite always,
//! and on every server backend whose `LEASE_TEST_<BACKEND>_URL` is set.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use rustix::process::Signal;

const LIMIT: Duration = Duration::from_secs(60);

/// A `lease run ARGS… NAME` holding NAME (its CMD has written `started`), labelled `label`.
fn holder(store: &str, dir: &TempDir, label: &str, args: &[&str], name: &str) -> Talking {
    let started = dir.file(&format!("{label}.started"));
    let script = format!("touch '{}' && exec sleep 120", started.display());
    let mut all = vec!["run", "--instance", label];
    all.extend_from_slice(args);
    all.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    let holding = Talking::spawn(lease(store, &all));
    wait_for_file(&started, LIMIT);
    holding
}

/// Ends a holder with SIGTERM (forwarded to its CMD; the lease is then released).
fn stop(holding: Talking) {
    send(holding.id(), Signal::TERM);
    holding.finish(LIMIT);
}

/// A claim of NAME with ARGS that must be refused: exit 64, one `lease:` line saying every word
/// of `says`, and its CMD never ran.
fn refused(store: &str, dir: &TempDir, args: &[&str], name: &str, says: &[&str]) {
    let ran = dir.file("refused-cmd-ran");
    let touch = format!("touch '{}'", ran.display());
    let mut all = vec!["run", "--instance", "newcomer"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[name, "--", "sh", "-c", &touch]);
    let out = lease_output(store, &all, LIMIT);
    let err = stderr(&out);
    assert_eq!(code(out.status), 64, "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("lease: "), "{err}");
    for word in says {
        assert!(last.contains(word), "{err}\nshould say {word:?}");
    }
    assert!(!ran.exists(), "the refused caller's CMD ran: {err}");
}

/// The three disagreements, each refused, and after each the holders end cleanly.
fn mismatched_callers_are_refused(store: &str, dir: &TempDir) {
    // A plain holder; a counted newcomer.
    let name = unique_name("mixed");
    let plain = holder(store, dir, "plain-holder", &[], &name);
    refused(
        store,
        dir,
        &["--permits", "3"],
        &name,
        &[
            "held as a plain lease",
            "plain-holder",
            "--permits 3",
            "CMD was not started",
        ],
    );
    stop(plain);

    // A counted holder; a plain newcomer (with --wait: it is granted at once, then refused).
    let name = unique_name("mixed");
    let counted = holder(store, dir, "counted-holder", &["--permits", "2"], &name);
    refused(
        store,
        dir,
        &["--wait"],
        &name,
        &[
            "held as a counted lease",
            "permit 0 by counted-holder",
            "plain lease",
            "CMD was not started",
        ],
    );
    // The refused claim was released: a plain caller runs once the counted holder is gone.
    stop(counted);
    let out = lease_output(store, &["run", &name, "--", "true"], LIMIT);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));

    // Three holders with --permits 3; the first two leave, so permit 2 alone is live; a caller
    // with --permits 2 is granted permit 0 and then sees permit 2.
    let name = unique_name("counts");
    let first = holder(store, dir, "three-0", &["--permits", "3"], &name);
    let second = holder(store, dir, "three-1", &["--permits", "3"], &name);
    let third = holder(store, dir, "three-2", &["--permits", "3"], &name);
    stop(first);
    stop(second);
    refused(
        store,
        dir,
        &["--permits", "2"],
        &name,
        &[
            "permit 2 of",
            "three-2",
            "--permits 3 or more",
            "--permits 2",
            "permit 0 was released",
        ],
    );
    // Agreeing callers still run beside the holder.
    let out = lease_output(
        store,
        &["run", "--permits", "3", &name, "--", "true"],
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    stop(third);
}

#[test]
fn mismatched_callers_are_refused_on_sqlite() {
    let dir = TempDir::new("mismatch-sqlite");
    mismatched_callers_are_refused(&dir.sqlite(), &dir);
}

#[test]
fn mismatched_callers_are_refused_on_servers() {
    for (backend, url) in cli_servers() {
        let dir = TempDir::new(&format!("mismatch-{backend}"));
        mismatched_callers_are_refused(&url, &dir);
    }
}
