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
        (
            "15",
            "a number needs a unit (ms, s, m or h); write e.g. 15s",
        ),
        ("0s", "longer than zero"),
        ("0ms", "longer than zero"),
        ("100ms", "minimum"),
        // Too long: it says shorter (it said "choose a longer --ttl").
        ("25h", "longer than lease's maximum of 24h00m"),
        ("25h", "choose a shorter --ttl"),
        // A fraction: it says so and how to write it (it said "a number needs a unit").
        ("1.5s", "fractions are not accepted; write 1500ms"),
        // Zero without a unit: it says zero is the fault (it said "a number needs a unit").
        ("0", "it must be longer than zero"),
    ] {
        let out = run_on(&store, &["run", "--ttl", ttl, "x", "--", "true"]);
        refused(&out, 66, &[says]);
        if ["25h", "1.5s", "0"].contains(&ttl) {
            for wrong in ["choose a longer", "a number needs a unit"] {
                assert!(
                    !stderr(&out).contains(wrong),
                    "--ttl {ttl}: {}",
                    stderr(&out)
                );
            }
        }
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

/// The messages that named the wrong fault: each says what is wrong now, with the right code.
#[test]
fn messages_name_the_real_fault() {
    let dir = TempDir::new("faults");
    let store = dir.sqlite();
    // NAME left out before `--`: `echo` would be the name and `hi` the command.
    refused(
        &run_on(&store, &["run", "--", "echo", "hi"]),
        64,
        &[
            "NAME is missing before `--`",
            "'echo' would be taken as the lease name",
            "lease run NAME -- echo hi",
        ],
    );
    refused(
        &run_on(&store, &["elect", "--ttl", "2s", "--", "sleep", "1"]),
        64,
        &["lease elect NAME -- sleep 1"],
    );
    // The same words with NAME given run.
    let out = run_on(&store, &["run", "n", "--", "echo", "hi"]);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "hi\n");

    // A file that exists but is not executable: it says so (not "no such executable file").
    let script = dir.file("job.sh");
    std::fs::write(&script, "echo hi\n").unwrap();
    let shown = script.display().to_string();
    refused(
        &run_on(&store, &["run", "x", "--", &shown]),
        71,
        &["the file is not executable", "chmod +x", "sh "],
    );
    refused(
        &run_on(&store, &["run", "x", "--", &format!("{shown}.missing")]),
        71,
        &["no such file"],
    );
    refused(
        &run_on(
            &store,
            &["run", "x", "--", &dir.path().display().to_string()],
        ),
        71,
        &["is a directory"],
    );

    // A SQLite file in a directory that does not exist: a bad URL (67), not an unreachable
    // server (69, "check host, port").
    let missing = dir.path().join("no-such-dir");
    let url = format!("sqlite://{}/x.db", missing.display());
    let out = run_on(&url, &["run", "x", "--", "true"]);
    refused(
        &out,
        67,
        &[
            &format!("the directory {} does not exist", missing.display()),
            "create it",
        ],
    );
    assert!(!stderr(&out).contains("port"), "{}", stderr(&out));
    refused(&run_on(&url, &["status", "x"]), 67, &["does not exist"]);
    assert!(!missing.exists(), "nothing was created");
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
    let help = run(&["help", "stores"]);
    assert_eq!(code(help.status), 0);
    let text = stdout(&help);
    assert!(
        text.contains(&format!("sqlite://{}", file.display())),
        "{text}"
    );
    assert!(
        text.contains("excludes only this user on this host"),
        "{text}"
    );
    let help = run(&["help", "exit-codes"]);
    assert_eq!(code(help.status), 0);
    let text = stdout(&help);
    for code_listed in [
        "64", "65", "66", "67", "68", "69", "70", "71", "72", "73", "74", "75", "76", "78",
    ] {
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
        assert!(text.contains("`lease help exit-codes`"), "{text}");
    }
}

/// Each subcommand's --help is its own text and options, and points to the shared topics
/// (`lease help stores`, `lease help exit-codes`) instead of repeating them.
#[test]
fn help_is_short_and_points_to_the_shared_topics() {
    let dir = TempDir::new("help");
    let store = dir.sqlite();
    let help = |args: &[&str]| {
        let out = run_on(&store, args);
        assert_eq!(code(out.status), 0, "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    let run = help(&["run", "--help"]);
    // Its own text and options (70 lines with the store and exit-code text, 55 without; the
    // global options of other parts of lease add some), then two lines of pointers.
    assert!(
        run.lines().count() <= 80,
        "{} lines:\n{run}",
        run.lines().count()
    );
    let trailer: Vec<&str> = run
        .lines()
        .skip_while(|l| !l.starts_with("Store: "))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(trailer.len(), 2, "after the options: {trailer:?}\n{run}");
    for sub in [
        "run", "elect", "status", "watch", "members", "owners", "release", "fence",
    ] {
        let text = help(&[sub, "--help"]);
        assert!(text.contains("`lease help exit-codes`"), "{sub}: {text}");
        // The exit-code table and the store details are not repeated.
        assert!(!text.contains("  73 "), "{sub}: {text}");
        assert!(!text.contains("appendfsync"), "{sub}: {text}");
        if sub != "fence" {
            assert!(text.contains("`lease help stores`"), "{sub}: {text}");
        }
        // `lease help SUBCOMMAND` is the same text.
        assert_eq!(help(&["help", sub]), text, "{sub}");
    }
    assert_eq!(
        help(&["help", "fence", "sql"]),
        help(&["fence", "sql", "--help"])
    );
    assert!(help(&["run", "--help"]).contains("--conflict-exit <N>"));
    let stores = help(&["help", "stores"]);
    assert!(stores.contains("appendfsync"), "{stores}");
    let codes = help(&["help", "exit-codes"]);
    assert!(codes.contains("SuccessExitStatus=72 143"), "{codes}");
    refused(
        &run_on(&store, &["help", "nonsense"]),
        64,
        &["no help for 'nonsense'", "stores, exit-codes", "run, elect"],
    );
}
