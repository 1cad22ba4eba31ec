//! Counted leases from the command line: `lease run --permits 3 --wait` with 10 concurrent
//! contenders never runs more than 3 CMDs at once (judged from the CMDs' own timestamps) and
//! runs all 10, on every store whose capabilities say permits (SQLite always, the others when
//! their `LEASE_TEST_<BACKEND>_URL` is set); `lease status` shows every permit; bad `--permits`
//! values are refused with a usage error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

/// Exit code `wanted`, its last line on stderr announced as lease's own exit code saying every
/// word of `says` (a store may warn before it, as Redis without AOF does).
fn refused(out: &std::process::Output, wanted: i32, says: &[&str]) {
    let err = stderr(out);
    assert_eq!(code(out.status), wanted, "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("lease: ") && last.contains(&format!("lease's own exit code {wanted}")),
        "{err}"
    );
    for word in says {
        assert!(last.contains(word), "{err} should say {word:?}");
    }
}

#[test]
fn bad_permit_counts_are_usage_errors() {
    let dir = TempDir::new("permits-bad");
    let store = dir.sqlite();
    let run = |n: &str| {
        let flag = format!("--permits={n}");
        lease_output(
            &store,
            &["run", &flag, "pool", "--", "true"],
            Duration::from_secs(30),
        )
    };
    let zero = run("0");
    assert_eq!(
        stderr(&zero).lines().count(),
        1,
        "one line: {}",
        stderr(&zero)
    );
    refused(&zero, 64, &["--permits 0", "at least 1", "1 to 1024"]);
    refused(&run("1025"), 64, &["--permits 1025", "at most 1024"]);
    refused(&run("99999999999"), 64, &["more than 1024"]);
    refused(&run("-3"), 64, &["not a whole number"]);
    refused(&run("three"), 64, &["not a whole number"]);
}

/// `true` when `store` takes counted leases: a probe `lease run --permits 1` runs, or exits 78
/// saying the store has none (then a loud NOT APPLICABLE line, and `false`). The probe holds
/// the default 15 s lease: a 2 s one can be lost (exit 74) on a busy machine before `true`
/// has even started.
fn takes_permits(store: &str, backend: &str) -> bool {
    let probe = unique_name("probe");
    let out = lease_output(
        store,
        &["run", "--permits", "1", &probe, "--", "true"],
        Duration::from_secs(30),
    );
    if code(out.status) == 78 && stderr(&out).contains("does not support counted leases") {
        lease_conformance::env::not_applicable(
            backend,
            "ten_contenders_on_three_permits",
            "the store has no counted leases (capabilities().permits is false)",
        );
        return false;
    }
    assert_eq!(code(out.status), 0, "the probe failed: {}", stderr(&out));
    true
}

/// The most runs open at once, from (term, start, end) stamps.
fn most_at_once(runs: &[(u64, i128, i128)]) -> usize {
    let mut edges: Vec<(i128, i32)> = Vec::new();
    for &(_, start, end) in runs {
        edges.push((start, 1));
        edges.push((end, -1));
    }
    // At one instant an end counts before a start: touching runs do not overlap.
    edges.sort_unstable();
    let (mut open, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        open += step;
        most = most.max(open);
    }
    usize::try_from(most).unwrap_or(0)
}

/// 10 `lease run --permits 3 --wait` started together on `store`.
///
/// Each CMD logs its start, waits until a second CMD has started (at most 20 s), then runs
/// 0.6 s: the permits are used at once however slowly the contenders start, unless they
/// cannot be (then the first CMD ends alone after 20 s and `most >= 2` fails). The leases are
/// 15 s (the default, also the NATS bucket `status` reads): the runs hand the permits over by
/// release, nothing here is about the TTL, and a 2 s lease renewed by a `lease` starved of
/// CPU is lost (exit 74).
fn ten_contenders_on_three_permits(store: &str, backend: &str, dir: &TempDir) {
    if !takes_permits(store, backend) {
        return;
    }
    let name = unique_name("pool");
    let log = dir.file(&format!("{name}.log"));
    let cmd = logged(
        &log,
        &format!(
            "i=0; while [ $(grep -c '^start' '{}') -lt 2 ] && [ $i -lt 1000 ]; do \
             sleep 0.02; i=$((i+1)); done; sleep 0.6",
            log.display()
        ),
    );
    let mut args = vec![
        "run",
        "--ttl",
        "15s",
        "--permits",
        "3",
        "--wait",
        &name,
        "--",
    ];
    args.extend(cmd.iter().map(String::as_str));
    let children: Vec<_> = (0..10)
        .map(|_| lease(store, &args).spawn().unwrap())
        .collect();
    for child in children {
        let out = finish(child, Duration::from_secs(60));
        assert_eq!(code(out.status), 0, "{backend}: {}", stderr(&out));
    }
    let runs = runs(&log);
    let most = most_at_once(&runs);
    eprintln!(
        "{backend}: 10 contenders on 3 permits: {} runs, at most {most} at once",
        runs.len()
    );
    assert_eq!(runs.len(), 10, "{backend}: every contender ran: {runs:?}");
    assert!(most <= 3, "{backend}: {most} CMDs ran at once: {runs:?}");
    assert!(
        most >= 2,
        "{backend}: the permits were never used at once: {runs:?}"
    );
    let mut terms: Vec<u64> = runs.iter().map(|r| r.0).collect();
    terms.sort_unstable();
    terms.dedup();
    assert_eq!(
        terms.len(),
        10,
        "{backend}: a LEASE_TERM was repeated: {runs:?}"
    );
}

/// While 3 CMDs hold the permits, `lease status` shows each permit's holder, term and time
/// left, and `--json` lists them.
///
/// The holders use the 15 s lease `status` reads with: on NATS each lease duration has its own
/// bucket.
fn status_shows_every_permit(store: &str, backend: &str, dir: &TempDir) {
    if !takes_permits(store, backend) {
        return;
    }
    let name = unique_name("shown");
    let marks = dir.file(&format!("{name}.started"));
    let cmd = format!(
        "echo \"$LEASE_PERMIT $LEASE_TERM\" >> '{}'; sleep 4",
        marks.display()
    );
    let holders: Vec<_> = (0..3)
        .map(|i| {
            let label = format!("holder-{i}");
            lease(
                store,
                &[
                    "run",
                    "--ttl",
                    "15s",
                    "--permits",
                    "3",
                    "--wait",
                    "--instance",
                    &label,
                    &name,
                    "--",
                    "sh",
                    "-c",
                    &cmd,
                ],
            )
            .spawn()
            .unwrap()
        })
        .collect();
    let started = |p: &Path| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(20), || started(&marks) == 3),
        "{backend}: three holders did not start"
    );
    let out = lease_output(store, &["status", &name], Duration::from_secs(30));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("PERMIT"),
        "{table}"
    );
    assert_eq!(lines.len(), 4, "{backend}: a row per permit: {table}");
    for (i, line) in lines[1..].iter().enumerate() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[0], name, "{table}");
        assert_eq!(cols[1], i.to_string(), "{table}");
        assert!(cols[2].starts_with("holder-"), "{table}");
        assert!(cols[3].parse::<u64>().is_ok(), "{table}");
        assert!(cols[4].ends_with('s'), "{table}");
    }
    let out = lease_output(store, &["status", "--json", &name], Duration::from_secs(30));
    let json = stdout(&out);
    assert_eq!(json.matches("\"permit\":").count(), 3, "{json}");
    // The name is held, and so is each of its 3 permits.
    assert_eq!(json.matches("\"held\":true").count(), 4, "{json}");
    assert!(json.contains("\"permits_held\":3,"), "{json}");
    // A fourth contender without --wait is refused at once, naming the holders.
    let out = lease_output(
        store,
        &["run", "--permits", "3", &name, "--", "true"],
        Duration::from_secs(30),
    );
    refused(&out, 75, &["all 3 permits", "holder-"]);
    for child in holders {
        let out = finish(child, Duration::from_secs(30));
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
    }
}

/// `lease status --json` says a counted name is held while any of its permits is (the name's
/// `held`, not only the permit's), with how many are held; and not held once they end.
#[test]
fn status_json_says_a_counted_name_with_a_live_permit_is_held() {
    let dir = TempDir::new("permits-held");
    let store = dir.sqlite();
    let marks = dir.file("started");
    let cmd = format!("echo started > '{}'; exec sleep 60", marks.display());
    let holder = lease(
        &store,
        &[
            "run",
            "--ttl",
            "15s",
            "--permits",
            "2",
            "--instance",
            "a",
            "pool",
            "--",
            "sh",
            "-c",
            &cmd,
        ],
    )
    .spawn()
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || marks.exists()),
        "the holder did not start"
    );
    let out = lease_output(
        &store,
        &["status", "--json", "pool"],
        Duration::from_secs(30),
    );
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let json = stdout(&out);
    assert!(
        json.starts_with(
            r#"[{"name":"pool","held":true,"holder":null,"term":null,"expires_in_ms":null,"permits_held":1,"permits":[{"permit":0,"held":true,"holder":"a","term":1,"expires_in_ms":"#
        ),
        "{json}"
    );
    send(holder.id(), rustix::process::Signal::TERM);
    finish(holder, Duration::from_secs(30));
    let out = lease_output(
        &store,
        &["status", "--json", "pool"],
        Duration::from_secs(30),
    );
    let json = stdout(&out);
    assert!(
        json.starts_with(r#"[{"name":"pool","held":false,"holder":null,"#)
            && json.contains(r#""permits_held":0,"permits":[{"permit":0,"held":false,"#),
        "{json}"
    );
}

#[test]
fn ten_contenders_on_three_permits_on_sqlite() {
    let _serial = timing_lock();
    let dir = TempDir::new("permits-sqlite");
    ten_contenders_on_three_permits(&dir.sqlite(), "sqlite", &dir);
    status_shows_every_permit(&dir.sqlite(), "sqlite", &dir);
}

/// The same on every server backend whose test URL is set.
#[test]
fn ten_contenders_on_three_permits_on_servers() {
    for (backend, url) in cli_servers() {
        let _serial = timing_lock();
        let dir = TempDir::new(&format!("permits-{backend}"));
        ten_contenders_on_three_permits(&url, backend, &dir);
        status_shows_every_permit(&url, backend, &dir);
    }
}
