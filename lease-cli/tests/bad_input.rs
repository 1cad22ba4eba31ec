//! Bad input: one line on stderr that says what to fix, a distinct exit code each, and never a
//! password. Also the default store and the help.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::*;

const SECRET: &str = "s3cr3t-pw";

/// Asserts `out` ended with `lease`'s own `code`: one line, announced as lease's, holding
/// every word of `says`, and no password.
fn refused(out: &Output, code_wanted: i32, says: &[&str]) {
    let err = stderr(out);
    assert_eq!(code(out.status), code_wanted, "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("lease: "), "{err}");
    assert!(
        err.contains(&format!("lease's own exit code {code_wanted}")),
        "{err}"
    );
    for word in says {
        assert!(err.contains(word), "{err} should say {word:?}");
    }
    assert!(!err.contains(SECRET), "password shown: {err}");
    assert!(!stdout(out).contains(SECRET));
}

fn run_on(store: &str, args: &[&str]) -> Output {
    lease_output(store, args, Duration::from_secs(30))
}

#[test]
fn bad_names() {
    let dir = TempDir::new("names");
    let store = dir.sqlite();
    refused(&run_on(&store, &["run", "", "--", "true"]), 65, &["empty"]);
    let long = "n".repeat(300);
    refused(
        &run_on(&store, &["run", &long, "--", "true"]),
        65,
        &["300 bytes", "255"],
    );
    refused(
        &run_on(&store, &["status", "a\u{7}b"]),
        65,
        &["control character"],
    );
    refused(
        &run_on(&store, &["run", "--instance", "", "x", "--", "true"]),
        65,
        &["instance"],
    );
}

#[test]
fn bad_service_and_group_names() {
    let dir = TempDir::new("group-names");
    let store = dir.sqlite();
    for json in [&[][..], &["--json"][..]] {
        let with = |cmd: &'static str, name: &str| {
            let mut args = vec![cmd];
            args.extend_from_slice(json);
            args.push(name);
            run_on(&store, &args.iter().map(|a| &**a).collect::<Vec<_>>())
        };
        refused(
            &with("members", ""),
            65,
            &["service name is empty", "give a non-empty name"],
        );
        refused(
            &with("owners", ""),
            65,
            &["group name is empty", "give a non-empty name"],
        );
        refused(
            &with("members", "a\u{7}b"),
            65,
            &["service name", "control character", "printable"],
        );
        let long = "g".repeat(300);
        refused(
            &with("owners", &long),
            65,
            &["group name is 300 bytes long", "at most 255"],
        );
        // Nothing was printed but the one line.
        assert_eq!(stdout(&with("members", "")), "");
    }
    // A missing or extra argument is clap's usage error.
    for args in [&["members"][..], &["owners"][..], &["owners", "a", "b"][..]] {
        let out = run_on(&store, args);
        assert_eq!(code(out.status), 64, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("lease's own exit code 64"));
    }
}

#[test]
fn bad_durations() {
    let dir = TempDir::new("durations");
    let store = dir.sqlite();
    for (ttl, says) in [
        ("abc", "bad duration 'abc'"),
        ("15", "unit"),
        ("0s", "longer than zero"),
        ("0ms", "longer than zero"),
        ("100ms", "minimum"),
        ("25h", "exceeds the maximum"),
    ] {
        refused(
            &run_on(&store, &["run", "--ttl", ttl, "x", "--", "true"]),
            66,
            &[says],
        );
    }
    refused(
        &run_on(&store, &["elect", "--ttl", "0s", "x", "--", "true"]),
        66,
        &["longer than zero"],
    );
}

#[test]
fn bad_and_unsupported_urls() {
    let bad = format!("postgres://user:{SECRET}@db.example:notaport/x");
    refused(&run_on(&bad, &["status", "x"]), 67, &["port", "user:***@"]);
    refused(
        &run_on("no-scheme-here", &["status", "x"]),
        67,
        &["no scheme"],
    );
    let bad = format!("user:{SECRET}@db.example");
    refused(&run_on(&bad, &["status", "x"]), 67, &["no scheme"]);
    refused(
        &run_on("ftp://example/x", &["status", "x"]),
        68,
        &["'ftp' is not supported"],
    );
    let nats = format!("nats://user:{SECRET}@127.0.0.1:4222?colour=blue");
    refused(
        &run_on(&nats, &["status", "x"]),
        67,
        &["unknown NATS option", "user:***@"],
    );
}

#[test]
fn unreachable_stores() {
    let pg = format!("postgres://user:{SECRET}@127.0.0.1:1/db");
    refused(
        &run_on(&pg, &["status", "x"]),
        69,
        &["127.0.0.1:1", "user:***@"],
    );
    let nats = format!("nats://user:{SECRET}@127.0.0.1:1");
    refused(
        &run_on(&nats, &["status", "x"]),
        69,
        &["127.0.0.1:1", "user:***@"],
    );
    let redis = format!("redis://:{SECRET}@127.0.0.1:1");
    refused(
        &run_on(&redis, &["run", "x", "--", "true"]),
        69,
        &["127.0.0.1:1"],
    );
    // A password passed as `--store` rather than in the environment is kept out as well.
    let out = Command::new(LEASE)
        .args(["--store", &pg, "release", "x", "--force"])
        .env_remove("LEASE_STORE")
        .output()
        .unwrap();
    refused(&out, 69, &["user:***@"]);
}

#[test]
fn bad_commands() {
    let dir = TempDir::new("commands");
    let store = dir.sqlite();
    refused(
        &run_on(&store, &["run", "x", "--", "no-such-program-here"]),
        71,
        &["not found"],
    );
    // clap's usage errors: several lines, then lease's own announcement.
    let out = run_on(&store, &["run", "x"]);
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("lease's own exit code 64"));
    let out = run_on(&store, &["status"]);
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
    let out = run_on(&store, &["frobnicate"]);
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
}

#[test]
fn the_default_store_is_one_per_user_file_created_when_missing() {
    let home = TempDir::new("home");
    let state = home.path().join("state");
    let run = |args: &[&str]| {
        Command::new(LEASE)
            .args(args)
            .env_remove("LEASE_STORE")
            .env("HOME", home.path())
            .env("XDG_STATE_HOME", &state)
            .output()
            .unwrap()
    };
    let file = state.join("lease/leases.db");
    let help = run(&["--help"]);
    assert_eq!(code(help.status), 0);
    let text = stdout(&help);
    assert!(
        text.contains(&format!("sqlite://{}", file.display())),
        "{text}"
    );
    for code_listed in ["64", "65", "66", "67", "68", "69", "71", "72", "74", "75"] {
        assert!(text.contains(&format!("  {code_listed} ")), "{text}");
    }
    assert!(!file.exists());
    let out = run(&["run", "default-store", "--", "true"]);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(
        file.exists(),
        "the default store's file and directories are created"
    );

    // Without XDG_STATE_HOME: under ~/.local/state.
    let out = Command::new(LEASE)
        .args(["run", "default-store", "--", "true"])
        .env_remove("LEASE_STORE")
        .env_remove("XDG_STATE_HOME")
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(home.path().join(".local/state/lease/leases.db").exists());
}

#[test]
fn help_never_shows_the_store_password() {
    let pg = format!("postgres://user:{SECRET}@127.0.0.1:5432/db");
    for args in [
        &["--help"][..],
        &["run", "--help"][..],
        &["run"][..],
        &["members", "--help"][..],
        &["owners", "--help"][..],
    ] {
        let out = lease(&pg, args).output().unwrap();
        assert!(!stdout(&out).contains(SECRET), "{}", stdout(&out));
        assert!(!stderr(&out).contains(SECRET), "{}", stderr(&out));
    }
    // The table formats and the exit codes are documented in the commands' help.
    for (cmd, header) in [
        ("members", "NODE    ADDRESS        GROUPS       EXPIRES IN"),
        (
            "owners",
            "PARTITION  OWNER                    EPOCH  EXPIRES IN",
        ),
    ] {
        let out = lease(&pg, &[cmd, "--help"]).output().unwrap();
        assert_eq!(code(out.status), 0);
        let text = stdout(&out);
        assert!(text.contains(header), "{text}");
        assert!(text.contains("--json"), "{text}");
        assert!(text.contains("  65 "), "{text}");
    }
}
