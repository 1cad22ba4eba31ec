//! `lease watch NAME… [--json]`: one line per change of a holder (claimed, released, expired),
//! read from the store while other `lease` processes take and drop the names.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use rustix::process::Signal;

/// A running `lease watch`, its stdout read line by line on a thread of its own.
struct Watch {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Watch {
    fn start(store: &str, args: &[&str]) -> Watch {
        let mut all = vec!["watch"];
        all.extend_from_slice(args);
        let mut child = lease(store, &all).spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Watch { child, lines }
    }

    /// The next line, within `limit`, and how long it took.
    fn next(&self, limit: Duration) -> (String, Duration) {
        let asked = Instant::now();
        match self.lines.recv_timeout(limit) {
            Ok(line) => (line, asked.elapsed()),
            Err(e) => panic!("no line from lease watch within {limit:?}: {e}"),
        }
    }

    /// No line within `quiet`.
    fn assert_quiet(&self, quiet: Duration) {
        if let Ok(line) = self.lines.recv_timeout(quiet) {
            panic!("unexpected line from lease watch: {line}");
        }
    }

    /// SIGTERM ends it with code 0 and nothing on stderr.
    fn stop(self) {
        send(self.child.id(), Signal::TERM);
        let out = finish(self.child, Duration::from_secs(10));
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
        assert!(stderr(&out).trim().is_empty(), "{}", stderr(&out));
    }
}

/// `lease run --ttl 2s NAME -- sleep SECS`, spawned.
fn hold(store: &str, name: &str, secs: &str) -> Child {
    lease(store, &["run", "--ttl", "2s", name, "--", "sleep", secs])
        .spawn()
        .unwrap()
}

#[test]
fn watch_prints_a_line_per_claim_release_and_expiry() {
    let _serial = timing_lock();
    let dir = TempDir::new("watch");
    let store = dir.sqlite();
    let w = Watch::start(&store, &["job"]);
    let limit = Duration::from_secs(10);
    assert_eq!(w.next(limit).0, "job: free");

    // A holder that ends: claimed, then released promptly after its CMD ends.
    let holder = hold(&store, "job", "0.5");
    let (claimed, _) = w.next(limit);
    assert!(
        claimed.starts_with("job: claimed by ") && claimed.contains("(term 1, expires in "),
        "{claimed}"
    );
    let out = finish(holder, limit);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let (released, after) = w.next(limit);
    assert_eq!(released, "job: released (term 1)");
    eprintln!("released line {after:?} after the holder exited");
    assert!(
        after < Duration::from_secs(1),
        "released seen {after:?} late"
    );
    w.assert_quiet(Duration::from_millis(300));

    // A holder killed with -9: no release; the vacancy is reported at the store's expiry.
    let mut holder = hold(&store, "job", "60");
    let (claimed, _) = w.next(limit);
    assert!(claimed.contains("(term 2, "), "{claimed}");
    let killed = Instant::now();
    holder.kill().unwrap();
    holder.wait().unwrap();
    let (expired, _) = w.next(limit);
    let after = killed.elapsed();
    assert_eq!(
        expired,
        "job: expired (term 2): the holder stopped renewing"
    );
    eprintln!("expired line {after:?} after kill -9 (TTL 2 s)");
    assert!(
        after >= TTL - RENEW - Duration::from_millis(50),
        "expiry reported {after:?} after the kill: before the lease ran out"
    );
    assert!(after <= TTL + Duration::from_secs(1), "{after:?}");
    w.stop();
}

#[test]
fn watch_json_prints_one_object_per_line_for_each_name() {
    let _serial = timing_lock();
    let dir = TempDir::new("watch-json");
    let store = dir.sqlite();
    // "b" is held before the watch starts: it shows as claimed, not free.
    let b = hold(&store, "b", "60");
    assert!(wait_until(Duration::from_secs(10), || {
        let out = lease_output(&store, &["status", "--json", "b"], Duration::from_secs(10));
        json_u64(&stdout(&out), "term") == Some(1)
    }));
    let w = Watch::start(&store, &["--json", "a", "b"]);
    let limit = Duration::from_secs(10);
    let mut first = [w.next(limit).0, w.next(limit).0];
    first.sort();
    assert_eq!(
        first[0],
        r#"{"name":"a","event":"free","holder":null,"term":null,"expires_in_ms":null}"#
    );
    assert!(
        first[1].starts_with(r#"{"name":"b","event":"claimed","holder":""#)
            && first[1].contains(r#","term":1,"expires_in_ms":"#)
            && first[1].ends_with('}'),
        "{}",
        first[1]
    );
    let a = hold(&store, "a", "0.3");
    let (line, _) = w.next(limit);
    assert!(
        line.starts_with(r#"{"name":"a","event":"claimed","holder":""#)
            && json_u64(&line, "term") == Some(1)
            && json_u64(&line, "expires_in_ms").is_some_and(|ms| ms <= 2000),
        "{line}"
    );
    finish(a, limit);
    assert_eq!(
        w.next(limit).0,
        r#"{"name":"a","event":"released","holder":null,"term":1,"expires_in_ms":null}"#
    );
    send(b.id(), Signal::TERM);
    finish(b, limit);
    assert_eq!(
        w.next(limit).0,
        r#"{"name":"b","event":"released","holder":null,"term":1,"expires_in_ms":null}"#
    );
    w.stop();
}
