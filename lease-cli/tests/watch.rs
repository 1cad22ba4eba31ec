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
    json: bool,
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
        let json = args.contains(&"--json");
        Watch { child, lines, json }
    }

    /// The next line, within `limit`, and how long it took; its times are checked (see
    /// [`untimed`] and [`untimed_json`]) and taken out.
    fn next(&self, limit: Duration) -> (String, Duration) {
        let asked = Instant::now();
        match self.lines.recv_timeout(limit) {
            Ok(line) if self.json => (untimed_json(&line), asked.elapsed()),
            Ok(line) => (untimed(&line), asked.elapsed()),
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

/// Milliseconds since the epoch of an RFC 3339 UTC time as `lease watch` prints it
/// (`2026-12-07T13:45:01.123Z`); panics on anything else.
fn epoch_ms(time: &str) -> i64 {
    let b = time.as_bytes();
    assert!(
        b.len() == 24
            && time.ends_with('Z')
            && [4, 7].iter().all(|&i| b[i] == b'-')
            && b[10] == b'T'
            && [13, 16].iter().all(|&i| b[i] == b':')
            && b[19] == b'.',
        "not an RFC 3339 UTC time with milliseconds: {time:?}"
    );
    let n = |r: std::ops::Range<usize>| -> i64 { time[r].parse().unwrap() };
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 24 + n(11..13)) * 60 + n(14..16)) * 60_000 + n(17..19) * 1000 + n(20..23)
}

/// Now on this host's wall clock, in milliseconds since the epoch.
fn now_ms() -> i64 {
    i64::try_from(now_ns() / 1_000_000).unwrap()
}

/// Checks that `time` is an RFC 3339 UTC time within 10 s of now.
fn assert_recent(time: &str, line: &str) -> i64 {
    let at = epoch_ms(time);
    assert!((at - now_ms()).abs() < 10_000, "{time} is not now: {line}");
    at
}

/// A text line of the watch without its leading time, which is checked (RFC 3339, now); a
/// claim's expiry time ("expires in D at T") is checked to lie after it, within the lease.
fn untimed(line: &str) -> String {
    let (time, rest) = line
        .split_once(' ')
        .unwrap_or_else(|| panic!("no time in {line:?}"));
    let at = assert_recent(time, line);
    if let Some((_, tail)) = rest.split_once(" at ") {
        let expiry = epoch_ms(&tail[..24]);
        assert!(
            expiry > at && expiry <= at + 15_000,
            "expiry {} not within the lease after {time}: {line}",
            &tail[..24]
        );
        return rest.replacen(&format!(" at {}", &tail[..24]), "", 1);
    }
    rest.to_owned()
}

/// A JSON line of the watch without its `"time"` (first, checked as in [`untimed`]) and its
/// `"expires_at"` (null, or for a claim the time plus `expires_in_ms`).
fn untimed_json(line: &str) -> String {
    let rest = line
        .strip_prefix(r#"{"time":""#)
        .unwrap_or_else(|| panic!("no time first in {line}"));
    let at = assert_recent(&rest[..24], line);
    let rest = rest[24..]
        .strip_prefix(r#"","#)
        .unwrap_or_else(|| panic!("{line}"));
    let out = format!("{{{rest}");
    if out.contains(r#","expires_at":null"#) {
        return out.replacen(r#","expires_at":null"#, "", 1);
    }
    let (_, tail) = out
        .split_once(r#","expires_at":""#)
        .unwrap_or_else(|| panic!("no expires_at in {line}"));
    let expiry = epoch_ms(&tail[..24]);
    let left = i64::try_from(json_u64(line, "expires_in_ms").unwrap()).unwrap();
    assert!(
        expiry - at == left || expiry - at == left + 1,
        "expires_at is not time + expires_in_ms: {line}"
    );
    out.replacen(&format!(r#","expires_at":"{}""#, &tail[..24]), "", 1)
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
