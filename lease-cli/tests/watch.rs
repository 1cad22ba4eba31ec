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

/// `lease run --ttl TTL NAME -- sleep SECS`, spawned.
fn hold(store: &str, name: &str, ttl: &str, secs: &str) -> Child {
    lease(store, &["run", "--ttl", ttl, name, "--", "sleep", secs])
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

    // A holder that ends: claimed, then released promptly after its CMD ends. Its lease is
    // the default 15 s: a 2 s one renewed by a `lease` starved of CPU is lost, and would show
    // as expired.
    let holder = hold(&store, "job", "15s", "0.5");
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
    let mut holder = hold(&store, "job", "2s", "60");
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
    // "b" is held before the watch starts: it shows as claimed, not free. The leases are 15 s:
    // both end by release, and a 2 s lease renewed by a `lease` starved of CPU is lost (and
    // would show as expired).
    let b = hold(&store, "b", "15s", "60");
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
    let a = hold(&store, "a", "15s", "0.3");
    let (line, _) = w.next(limit);
    assert!(
        line.starts_with(r#"{"name":"a","event":"claimed","holder":""#)
            && json_u64(&line, "term") == Some(1)
            && json_u64(&line, "expires_in_ms").is_some_and(|ms| ms <= 15_000),
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

/// `lease run --permits 2 --ttl 15s --instance LABEL NAME -- sleep 60`, spawned.
fn hold_permit(store: &str, name: &str, label: &str) -> Child {
    lease(
        store,
        &[
            "run",
            "--ttl",
            "15s",
            "--permits",
            "2",
            "--instance",
            label,
            name,
            "--",
            "sleep",
            "60",
        ],
    )
    .spawn()
    .unwrap()
}

/// A counted name is not "free" while its permits are held: the watch reports each permit's
/// holder (the one found by its first read too), each end, and how many permits are held, in
/// text and in JSON. The holders end by SIGTERM, after their claim was seen, on a 15 s lease:
/// nothing depends on how fast the machine is.
#[test]
fn watch_follows_the_permits_of_a_counted_name() {
    let _serial = timing_lock();
    let dir = TempDir::new("watch-permits");
    let store = dir.sqlite();
    let limit = Duration::from_secs(20);
    let a = hold_permit(&store, "pool", "a");
    assert!(
        wait_until(limit, || {
            let out = lease_output(&store, &["status", "--json", "pool"], limit);
            stdout(&out).contains(r#"{"permit":0,"held":true,"holder":"a","term":1,"#)
        }),
        "the first holder never took permit 0"
    );
    let text = Watch::start(&store, &["pool"]);
    let json = Watch::start(&store, &["--json", "pool"]);
    let (line, _) = text.next(limit);
    assert!(
        line.starts_with("pool: permit 0 claimed by a (term 1, expires in ")
            && line.ends_with("); 1 permit held"),
        "{line}"
    );
    let (line, _) = json.next(limit);
    assert!(
        line.starts_with(
            r#"{"name":"pool","permit":0,"event":"claimed","holder":"a","term":1,"expires_in_ms":"#
        ) && line.ends_with(r#","permits_held":1}"#),
        "{line}"
    );

    let b = hold_permit(&store, "pool", "b");
    let (line, _) = text.next(limit);
    assert!(
        line.starts_with("pool: permit 1 claimed by b (term 2, expires in ")
            && line.ends_with("); 2 permits held"),
        "{line}"
    );
    let (line, _) = json.next(limit);
    assert!(
        line.starts_with(r#"{"name":"pool","permit":1,"event":"claimed","holder":"b","term":2,"#)
            && line.ends_with(r#","permits_held":2}"#),
        "{line}"
    );
    send(b.id(), Signal::TERM);
    finish(b, limit);
    assert_eq!(
        text.next(limit).0,
        "pool: permit 1 released (term 2); 1 permit held"
    );
    assert_eq!(
        json.next(limit).0,
        r#"{"name":"pool","permit":1,"event":"released","holder":null,"term":2,"expires_in_ms":null,"permits_held":1}"#
    );
    send(a.id(), Signal::TERM);
    finish(a, limit);
    assert_eq!(
        text.next(limit).0,
        "pool: permit 0 released (term 1); 0 permits held"
    );
    assert_eq!(
        json.next(limit).0,
        r#"{"name":"pool","permit":0,"event":"released","holder":null,"term":1,"expires_in_ms":null,"permits_held":0}"#
    );
    text.stop();
    json.stop();
}
