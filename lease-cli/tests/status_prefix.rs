//! `lease status --prefix P`: every name under P, in byte order, in the table and JSON formats
//! of `status NAME…`, and no name outside P even where P holds characters that are wildcards in
//! some store's query language; on SQLite, and on every server backend whose
//! `LEASE_TEST_<BACKEND>_URL` is set (skipped loudly otherwise). Bad prefixes and a prefix with
//! NAMEs are refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use common::*;

/// The characters after the unique part of each prefix: wildcards of SQL `LIKE` (`%`, `_`), of
/// Redis's glob (`*`, `?`, `[`) and a NATS subject separator (`.`).
const SPECIALS: &str = "/%_*?[.";

/// `lease run NAME -- …` in the background, holding NAME until stopped, as `instance`
/// (`permits`: a counted name's permit instead); returns once its CMD has started.
fn hold(store: &str, name: &str, instance: &str, permits: bool, dir: &TempDir) -> Child {
    let mark = dir.file(&format!("{instance}.started"));
    let cmd = format!("echo started > '{}'; exec sleep 120", mark.display());
    let mut args = vec!["run", "--ttl", "15s", "--instance", instance];
    if permits {
        args.extend(["--permits", "2"]);
    }
    args.extend([name, "--", "sh", "-c", &cmd]);
    let child = lease(store, &args).spawn().unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || Path::new(&mark).exists()),
        "{instance} did not start holding {name}"
    );
    child
}

fn status(store: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["status"];
    all.extend(args);
    lease_output(store, &all, Duration::from_secs(60))
}

/// The names under a prefix with wildcard characters show, in byte order, with their holders;
/// a name that differs in one of those characters does not; JSON lists the same names.
/// `keeps_ended`: the store keeps a released lease's record (not etcd or NATS).
fn names_under_a_prefix(store: &str, backend: &str, keeps_ended: bool) {
    let dir = TempDir::new(&format!("prefix-{backend}"));
    let base = unique_name("pfx");
    let p = format!("{base}{SPECIALS}");
    let (held, pool, done) = (format!("{p}held"), format!("{p}pool"), format!("{p}done"));
    // `%` as a literal, not a wildcard: this one is not under `p`.
    let outside = format!("{base}/X_*?[.held");
    let mut holders = vec![
        hold(store, &held, "holder-a", false, &dir),
        hold(store, &pool, "holder-b", true, &dir),
        hold(store, &outside, "holder-x", false, &dir),
    ];
    let out = lease_output(
        store,
        &["run", &done, "--", "true"],
        Duration::from_secs(60),
    );
    assert_eq!(code(out.status), 0, "{backend}: {}", stderr(&out));

    let out = status(store, &["--prefix", &p]);
    assert_eq!(code(out.status), 0, "{backend}: {}", stderr(&out));
    let table = stdout(&out);
    eprintln!("{backend}: lease status --prefix {p:?}:\n{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("PERMIT"),
        "{backend}: {table}"
    );
    let shown: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or_default())
        .collect();
    let mut expected = Vec::new();
    if keeps_ended {
        expected.push(done.as_str());
    }
    expected.extend([held.as_str(), pool.as_str()]);
    assert_eq!(
        shown, expected,
        "{backend}: the names under {p:?}, in byte order, one row each (a name outside the \
         prefix shows as an extra row):\n{table}"
    );
    let row = |name: &str| lines[1..].iter().find(|l| l.starts_with(name)).unwrap();
    let held_row: Vec<&str> = row(&held).split_whitespace().collect();
    assert_eq!(held_row[1..3], ["-", "holder-a"], "{backend}: {table}");
    let pool_row: Vec<&str> = row(&pool).split_whitespace().collect();
    assert_eq!(pool_row[1..3], ["0", "holder-b"], "{backend}: {table}");
    if keeps_ended {
        let done_row: Vec<&str> = row(&done).split_whitespace().collect();
        assert_eq!(done_row[2], "-", "{backend}: {done} is not held: {table}");
    }

    let out = status(store, &["--json", "--prefix", &p]);
    assert_eq!(code(out.status), 0, "{backend}: {}", stderr(&out));
    let json = stdout(&out);
    let at = |name: &str| json.find(&format!("{{\"name\":\"{name}\","));
    let places: Vec<Option<usize>> = expected.iter().map(|n| at(n)).collect();
    assert!(
        places.iter().all(Option::is_some) && places.windows(2).all(|w| w[0] < w[1]),
        "{backend}: the JSON lists {expected:?} in order: {json}"
    );
    assert_eq!(
        json.matches("{\"name\":").count(),
        expected.len(),
        "{backend}: one object per name: {json}"
    );
    assert!(!json.contains("X_*"), "{backend}: {json}");
    assert!(
        json.contains("\"holder\":\"holder-a\""),
        "{backend}: {json}"
    );

    // The prefix `base/` shows the outside name too: the listing is not empty by accident.
    let out = status(store, &["--prefix", &format!("{base}/")]);
    assert!(
        stdout(&out).contains(&outside),
        "{backend}: {}",
        stdout(&out)
    );

    for child in holders.drain(..) {
        send(child.id(), rustix::process::Signal::TERM);
        finish(child, Duration::from_secs(30));
    }
}

#[test]
fn status_prefix_on_sqlite() {
    let _serial = timing_lock();
    let dir = TempDir::new("prefix-sqlite-store");
    names_under_a_prefix(&dir.sqlite(), "sqlite", true);
}

/// The same on every server backend whose test URL is set.
#[test]
fn status_prefix_on_servers() {
    for (backend, url) in cli_servers() {
        let _serial = timing_lock();
        names_under_a_prefix(&url, backend, !matches!(backend, "nats" | "etcd"));
    }
}

/// A prefix with a control character is refused before the store is opened (exit 65, naming
/// --prefix); a prefix with NAMEs, or neither, is a usage error (exit 64). The empty prefix
/// lists every name.
#[test]
fn bad_prefixes_are_refused_and_the_empty_prefix_lists_all() {
    let dir = TempDir::new("prefix-bad");
    let store = dir.sqlite();
    let out = status(&store, &["--prefix", "a\u{1}b"]);
    assert_eq!(code(out.status), 65, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--prefix \"a\\u0001b\": holds the control character"),
        "{}",
        stderr(&out)
    );
    let out = status(&store, &["--prefix", "a", "job"]);
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
    let out = status(&store, &[]);
    assert_eq!(code(out.status), 64, "{}", stderr(&out));

    for name in ["b", "a"] {
        let out = lease_output(
            &store,
            &["run", name, "--", "true"],
            Duration::from_secs(60),
        );
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
    }
    let out = status(&store, &["--prefix", ""]);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let names: Vec<String> = stdout(&out)
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(names, ["a", "b"], "{}", stdout(&out));
}
