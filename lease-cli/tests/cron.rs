//! `lease cron`: each instant of a schedule once across hosts, as real `lease` processes on
//! real stores (SQLite, and PostgreSQL and Redis when their URLs are set).
//!
//! To see the checks fail: `cargo test -p lease-cli --features break-cron-claim-for-tests
//! --test cron` builds `lease` with each process claiming under a name of its own, so the
//! hosts' claims never meet.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{
    LEASE, TempDir, code, finish, lease, lease_output, send, stderr, unique, unique_name,
    wait_until,
};

/// The period of the held-out check's schedule, and its catch-up window.
const PERIOD_MS: i64 = 2500;
const WINDOW: &str = "5s";
/// The instants of the held-out check, the ones no host calls for, and the one of those that
/// is older than the window by the next call and so never runs.
const INSTANTS: i64 = 20;
const DOWN: [i64; 3] = [8, 14, 15];
const NEVER: i64 = 14;
/// `lease`'s default log filter, plus its own records (level info).
const RECORDS: &str = "error,lease=info,lease_core=warn,lease_sql=warn,lease_redis=warn";

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn sleep_until_ms(at: i64) {
    let left = at - now_ms();
    if left > 0 {
        std::thread::sleep(Duration::from_millis(u64::try_from(left).unwrap()));
    }
}

/// A small deterministic generator for the hosts' start delays.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// CMD of the checks: appends `instant host rerun wall-ms` to `log`.
fn appender(log: &Path) -> String {
    format!(
        "echo \"$LEASE_INSTANT_MS $LEASE_INSTANCE $LEASE_RERUN $(date +%s%3N)\" >> '{}'",
        log.display()
    )
}

/// The lines of `log`: (instant, host, rerun, wall ms).
fn records(log: &Path) -> Vec<(i64, String, String, i64)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 4, "a line of CMD's log: {l:?}");
            (
                w[0].parse().unwrap(),
                w[1].to_owned(),
                w[2].to_owned(),
                w[3].parse().unwrap(),
            )
        })
        .collect()
}

/// The held-out check: three hosts (processes with distinct `--instance`) call the one-shot
/// form for each of 20 instants of an interval schedule, each call starting up to 2 s after
/// the instant (period 2.5 s). Nobody calls for instant 8: the first call for 9 (0.3 s after
/// it, window 5 s: 8 stays within it for a process that takes up to 2.2 s to reach the store)
/// runs 8 late, then 9. Nobody calls for 14 and 15: at 16, 15 is within the window (run late,
/// once) and 14 (5 s before 16) is not: it never runs. Every other instant runs exactly once — or, when a
/// round overran it (a loaded machine: the round's claim, CMD's start and the finish took
/// longer than the period), was skipped, as the winner's record says (`skipped=N`): never
/// twice, never silently dropped. Every call exits 0 and warns of nothing (the calls log at
/// info, for the records: without that the losers print nothing, see
/// `the_record_says_who_ran_the_instant_and_how_it_ended`). A call for the last instant that
/// starts late may run the one after it: instants past the 20th are not counted.
fn three_hosts(store: &str) {
    let dir = TempDir::new("cron-hosts");
    let log = dir.file("runs.log");
    let name = unique_name("cron");
    let cmd = appender(&log);
    let period = PERIOD_MS.to_string() + "ms";
    let first = (now_ms() + 1500).div_euclid(PERIOD_MS) * PERIOD_MS + PERIOD_MS;
    let mut rng = Lcg(unique());
    // (start, host, instant index)
    let mut calls: Vec<(i64, usize, i64)> = Vec::new();
    for k in 0..INSTANTS {
        if DOWN.contains(&k) {
            continue;
        }
        let instant = first + k * PERIOD_MS;
        for host in 0..3 {
            let delay = if host == 0 && DOWN.contains(&(k - 1)) {
                // The first host back: within the window of the instant it missed.
                300
            } else if DOWN.contains(&(k + 1)) {
                // Done before the next instant, which nobody is to call for.
                i64::try_from(rng.below(500)).unwrap()
            } else {
                i64::try_from(rng.below(2000)).unwrap()
            };
            calls.push((instant + delay, host, k));
        }
    }
    calls.sort_unstable();
    let started = Instant::now();
    let mut running: Vec<(usize, i64, Child)> = Vec::new();
    for (at, host, k) in &calls {
        sleep_until_ms(*at);
        let instance = format!("host-{host}");
        let child = lease(
            store,
            &[
                "cron",
                &name,
                "--every",
                &period,
                "--catch-up",
                WINDOW,
                "--once",
                "--instance",
                &instance,
                "--",
                "sh",
                "-c",
                &cmd,
            ],
        )
        .env("LEASE_LOG", RECORDS)
        .spawn()
        .unwrap();
        running.push((*host, *k, child));
    }
    // Instants a round overran, as the winners' records say.
    let mut skipped: Vec<i64> = Vec::new();
    for (host, k, child) in running {
        let out = finish(child, Duration::from_secs(30));
        let err = stderr(&out);
        assert_eq!(
            code(out.status),
            0,
            "host-{host}'s call for instant {k}: {err}"
        );
        assert!(
            !err.contains("WARN") && !err.contains("ERROR"),
            "host-{host}'s call for instant {k} must be quiet: {err}"
        );
        for line in err.lines().filter(|l| l.contains("they are skipped")) {
            let field = |key: &str| -> i64 {
                let at = line.find(&format!("{key}=")).unwrap() + key.len() + 1;
                line[at..]
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            let (from, n) = (field("instant_ms"), field("skipped"));
            skipped.extend((1..=n).map(|j| from + j * PERIOD_MS));
        }
    }
    let recs = records(&log);
    let mut per: BTreeMap<i64, usize> = BTreeMap::new();
    let end = first + INSTANTS * PERIOD_MS;
    for (instant, _, rerun, _) in &recs {
        assert_eq!(rerun, "0", "no round was cut short: {recs:?}");
        if *instant < end {
            *per.entry(*instant).or_default() += 1;
        } else {
            assert_eq!(*instant, end, "{recs:?}");
        }
    }
    assert!(
        per.values().all(|n| *n == 1),
        "each instant exactly once: {per:?}"
    );
    assert!(
        skipped.iter().all(|i| !per.contains_key(i)),
        "an instant recorded as skipped also ran: {skipped:?} {per:?}"
    );
    let expected: Vec<i64> = (0..INSTANTS)
        .filter(|k| *k != NEVER)
        .map(|k| first + k * PERIOD_MS)
        .filter(|i| !skipped.contains(i))
        .collect();
    assert_eq!(
        per.keys().copied().collect::<Vec<_>>(),
        expected,
        "every instant but {NEVER} (older than the window when a host came back) runs: {per:?}"
    );
    // The missed instants ran late, once a host was back (unless skipped by an overrun).
    for missed in [8, 15] {
        let instant = first + missed * PERIOD_MS;
        let Some((_, host, _, at)) = recs.iter().find(|r| r.0 == instant) else {
            assert!(skipped.contains(&instant), "{missed} never ran: {recs:?}");
            continue;
        };
        assert!(
            *at >= instant + PERIOD_MS,
            "instant {missed} ran at {at} by {host}, before the next call"
        );
    }
    eprintln!(
        "{} calls by 3 hosts for {INSTANTS} instants on {}: {} runs, {} skipped by an overrun, \
         in {:?}",
        calls.len(),
        store.split(':').next().unwrap_or(store),
        recs.len(),
        skipped.len(),
        started.elapsed()
    );
}

/// The held-out check on SQLite, PostgreSQL and Redis at once (one thread per store, so the
/// three take the time of one). A server whose URL is not set is skipped with one `SKIPPED`
/// line (a failure under `LEASE_TEST_REQUIRE`). Redis as a lease store needs an opt-in unless
/// it runs with AOF on every write; the safe one is clock-floor terms (a lost record cannot make
/// a term repeat).
#[test]
fn three_hosts_run_each_instant_once_on_sqlite_postgres_and_redis() {
    let dir = TempDir::new("cron-sqlite");
    let mut stores = vec![("sqlite", dir.sqlite())];
    if let Some(url) = lease_conformance::env::server_url("postgres") {
        stores.push(("postgres", url));
    }
    if let Some(url) = lease_conformance::env::server_url("redis") {
        let sep = if url.contains('?') { '&' } else { '?' };
        stores.push(("redis", format!("{url}{sep}terms=clock_floor")));
    }
    let checks: Vec<_> = stores
        .into_iter()
        .map(|(backend, url)| (backend, std::thread::spawn(move || three_hosts(&url))))
        .collect();
    let failed: Vec<&str> = checks
        .into_iter()
        .filter_map(|(backend, check)| check.join().is_err().then_some(backend))
        .collect();
    assert!(
        failed.is_empty(),
        "the held-out check failed on {failed:?} (see above)"
    );
}

/// `lease cron … --once` on `store` with CMD `sh -c script`, and `extra` options.
fn once(store: &str, name: &str, extra: &[&str], script: &str) -> Command {
    let mut args = vec!["cron", name];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--once", "--", "sh", "-c", script]);
    lease(store, &args)
}

/// The record lines: the winner's says which host ran the instant and how CMD ended (and CMD's
/// code is the exit code); the loser is quiet, and with LEASE_LOG=info says the instant was
/// taken and by whom.
#[test]
fn the_record_says_who_ran_the_instant_and_how_it_ended() {
    let dir = TempDir::new("cron-record");
    let store = dir.sqlite();
    let name = unique_name("cron-record");
    let hourly = ["--every", "1h", "--catch-up", "2h", "--instance", "host-a"];
    let out = once(&store, &name, &hourly, "exit 3")
        .env("LEASE_LOG", "info")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(out.status), 3, "CMD's code: {err}");
    assert!(
        err.contains("cron record: ran here")
            && err.contains("host=host-a")
            && err.contains("exit=3"),
        "{err}"
    );
    // Without LEASE_LOG the failure is still one warning line.
    let other = unique_name("cron-record");
    let out = once(&store, &other, &hourly, "exit 4").output().unwrap();
    assert_eq!(code(out.status), 4);
    let err = stderr(&out);
    assert!(
        err.contains("round failed") && err.contains("CMD exited with code 4"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // The loser: quiet, exit 0 (a failed instant is not rerun).
    let loser = ["--every", "1h", "--catch-up", "2h", "--instance", "host-b"];
    let out = once(&store, &name, &loser, "exit 5").output().unwrap();
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    let out = once(&store, &name, &loser, "exit 5")
        .env("LEASE_LOG", "info")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(out.status), 0, "{err}");
    assert!(
        err.contains("cron record: taken") && err.contains("last_holder=host-a"),
        "{err}"
    );
}

/// A round cut short (lease killed with SIGKILL while CMD ran) runs again once, with
/// LEASE_RERUN=1, at the next pass after its lease expired; then never again.
#[test]
fn a_round_cut_short_runs_again_once_at_the_next_pass() {
    let dir = TempDir::new("cron-rerun");
    let store = dir.sqlite();
    let log = dir.file("runs.log");
    let name = unique_name("cron-rerun");
    let script = format!("{}; [ \"$LEASE_RERUN\" = 1 ] || sleep 30", appender(&log));
    let opts = ["--every", "1h", "--catch-up", "2h", "--ttl", "1s"];
    let first = once(&store, &name, &opts, &script).spawn().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || !records(&log).is_empty()),
        "CMD never started"
    );
    send(first.id(), rustix::process::Signal::KILL);
    let _ = finish(first, Duration::from_secs(5));
    // The dead round's lease runs out by its TTL.
    std::thread::sleep(Duration::from_millis(1500));
    let out = once(&store, &name, &opts, &script).output().unwrap();
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let out = once(&store, &name, &opts, &script).output().unwrap();
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let recs = records(&log);
    let reruns: Vec<&str> = recs.iter().map(|r| r.2.as_str()).collect();
    assert_eq!(
        reruns,
        ["0", "1"],
        "the first round, then its one rerun: {recs:?}"
    );
    assert_eq!(recs[0].0, recs[1].0, "the same instant: {recs:?}");
}

/// Two daemons on one store run each instant of an every-2-seconds schedule once, none missed,
/// and exit 0 on SIGTERM.
#[test]
fn two_daemons_run_each_instant_once_and_exit_0_on_sigterm() {
    let dir = TempDir::new("cron-daemons");
    let store = dir.sqlite();
    let log = dir.file("runs.log");
    let name = unique_name("cron-daemon");
    let cmd = appender(&log);
    let daemons: Vec<Child> = ["host-a", "host-b"]
        .iter()
        .map(|host| {
            lease(
                &store,
                &[
                    "cron",
                    &name,
                    "--every",
                    "2s",
                    "--instance",
                    host,
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
    assert!(
        wait_until(Duration::from_secs(20), || records(&log).len() >= 4),
        "the daemons ran {:?}",
        records(&log)
    );
    for d in &daemons {
        send(d.id(), rustix::process::Signal::TERM);
    }
    for d in daemons {
        let out = finish(d, Duration::from_secs(10));
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
    }
    let recs = records(&log);
    let mut per: BTreeMap<i64, usize> = BTreeMap::new();
    for r in &recs {
        *per.entry(r.0).or_default() += 1;
    }
    assert!(per.values().all(|n| *n == 1), "each instant once: {recs:?}");
    let instants: Vec<i64> = per.keys().copied().collect();
    assert!(
        instants.windows(2).all(|w| w[1] - w[0] == 2000),
        "no instant missed: {instants:?}"
    );
}

/// Bad input: each refused with lease's own code and a message that says what to write.
#[test]
fn bad_schedules_zones_and_intervals_are_refused_with_clear_messages() {
    let dir = TempDir::new("cron-bad");
    let store = dir.sqlite();
    let cases: [(&[&str], i32, &[&str]); 7] = [
        (
            &["--schedule", "61 * * * *"],
            64,
            &[
                "--schedule",
                "cron expression '61 * * * *' is invalid",
                "5 fields",
            ],
        ),
        (
            &["--schedule", "not cron"],
            64,
            &["--schedule", "is invalid", "e.g. '0 3 * * *'"],
        ),
        (
            &["--schedule", "0 0 30 2 *"],
            64,
            &["never matches an instant", "5 fields"],
        ),
        (
            &["--schedule", "0 3 * * *", "--tz", "Europe/Berln"],
            64,
            &[
                "--tz 'Europe/Berln' is not a known time zone",
                "Europe/Berlin",
            ],
        ),
        (
            &["--every", "0s"],
            66,
            &["--every '0s' is not a positive duration", "write e.g. 2s"],
        ),
        (
            &["--every", "1s", "--catch-up", "soon"],
            66,
            &["--catch-up 'soon' is not a positive duration"],
        ),
        (
            &["--tz", "UTC", "--every", "1s"],
            64,
            &["--tz applies to --schedule only"],
        ),
    ];
    for (args, want, says) in cases {
        let mut all = vec!["cron", "job"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--once", "--", "true"]);
        let out = lease_output(&store, &all, Duration::from_secs(10));
        let err = stderr(&out);
        assert_eq!(code(out.status), want, "{args:?}: {err}");
        for s in says {
            assert!(err.contains(s), "{args:?} must say {s:?}: {err}");
        }
    }
    // Neither --schedule nor --every: a usage error naming both.
    let out = lease_output(
        &store,
        &["cron", "job", "--once", "--", "true"],
        Duration::from_secs(10),
    );
    assert_eq!(code(out.status), 64);
    let err = stderr(&out);
    assert!(
        err.contains("--schedule") && err.contains("--every"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// The README's examples, as shipped in lease-cli/examples/.

fn examples() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// A script standing in for the examples' job: appends its instant to `log`.
fn stand_in(dir: &TempDir, log: &Path) -> std::path::PathBuf {
    let script = dir.file("job.sh");
    std::fs::write(&script, format!("#!/bin/sh\n{}\n", appender(log))).unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    script
}

/// Runs `line` with `sh -c`, `lease` first in PATH, on `store`.
fn shell(line: &str, store: &str) -> Output {
    let bin = Path::new(LEASE).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("sh")
        .args(["-c", line])
        .env("PATH", path)
        .env("LEASE_STORE", store)
        .env_remove("LEASE_LOG")
        .output()
        .unwrap()
}

/// Each job line of the example crontab runs as cron would run it (its command by `sh -c`):
/// quiet, exit 0; with its window widened to a day so its latest instant is due, it runs CMD
/// once, and a second call (another host) does not run it again.
#[test]
fn the_example_crontab_lines_run() {
    let text = std::fs::read_to_string(examples().join("cron/crontab")).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter(|l| !l.split_whitespace().next().unwrap().contains('='))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    for line in lines {
        let dir = TempDir::new("cron-crontab");
        let store = dir.sqlite();
        let log = dir.file("runs.log");
        let job = stand_in(&dir, &log);
        // The five time fields, then the command.
        let command = line
            .split_whitespace()
            .skip(5)
            .collect::<Vec<_>>()
            .join(" ");
        assert!(command.starts_with("lease cron "), "{line}");
        let program = command.rsplit(' ').next().unwrap();
        let command = command.replace(program, &job.display().to_string());
        let out = shell(&command, &store);
        assert_eq!(code(out.status), 0, "{line}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{line}");
        let before = records(&log).len();
        assert!(before <= 1, "{line}: {:?}", records(&log));
        let wide = regex_free_replace_window(&command, "24h");
        for _ in 0..2 {
            let out = shell(&wide, &store);
            assert_eq!(code(out.status), 0, "{wide}: {}", stderr(&out));
            assert_eq!(stderr(&out), "", "{wide}");
        }
        // Once each (a new instant may come between the calls: it runs once too).
        let recs = records(&log);
        let mut per: BTreeMap<i64, usize> = BTreeMap::new();
        for r in &recs {
            *per.entry(r.0).or_default() += 1;
        }
        assert!(
            !per.is_empty() && per.values().all(|n| *n == 1),
            "{wide}: {recs:?}"
        );
    }
}

/// `command` with its `--catch-up` value replaced by `window`.
fn regex_free_replace_window(command: &str, window: &str) -> String {
    let words: Vec<&str> = command.split(' ').collect();
    let at = words.iter().position(|w| *w == "--catch-up").unwrap();
    let mut out: Vec<&str> = words.clone();
    out[at + 1] = window;
    out.join(" ")
}

/// The words of a systemd `ExecStart=` (single-quoted words kept whole, as systemd does).
fn exec_words(unit: &str) -> Vec<String> {
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// The value of `key=` in `unit`.
fn field<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    unit.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::trim)
}

/// The example systemd units: checked by `systemd-analyze verify` where it exists (with the
/// binaries' paths pointed at this build and a stand-in job), else by their parsed fields; then
/// the one-shot service's ExecStart runs the night's instant once (a day's window covers it),
/// and the daemon's starts and exits 0 on SIGTERM (what `systemctl stop` sends it, KillMode=mixed).
#[test]
fn the_example_systemd_units_verify_and_run() {
    let dir = TempDir::new("cron-systemd");
    let log = dir.file("runs.log");
    let job = stand_in(&dir, &log);
    let names = [
        "nightly-report.service",
        "nightly-report.timer",
        "nightly-report-daemon.service",
    ];
    let mut units = BTreeMap::new();
    for name in names {
        let text = std::fs::read_to_string(examples().join("systemd").join(name)).unwrap();
        let text = text
            .replace("/usr/local/bin/lease", LEASE)
            .replace("/usr/local/bin/nightly-report", &job.display().to_string());
        std::fs::write(dir.file(name), &text).unwrap();
        units.insert(name, text);
    }
    let timer = &units["nightly-report.timer"];
    let service = &units["nightly-report.service"];
    let daemon = &units["nightly-report-daemon.service"];
    // The fields the README's advice rests on, whatever checks the files.
    assert_eq!(
        field(timer, "OnCalendar"),
        Some("*-*-* 03:00:00 Europe/Berlin")
    );
    assert_eq!(field(timer, "Persistent"), Some("true"));
    assert_eq!(field(service, "Type"), Some("oneshot"));
    assert_eq!(field(daemon, "KillMode"), Some("mixed"));
    for unit in [service, daemon] {
        let words = exec_words(unit);
        let at = words.iter().position(|w| w == "--schedule").unwrap();
        assert_eq!(words[at + 1], "0 3 * * *", "the timer's time: {words:?}");
        let tz = words.iter().position(|w| w == "--tz").unwrap();
        assert_eq!(words[tz + 1], "Europe/Berlin");
    }
    let analyze = Path::new("/usr/bin/systemd-analyze");
    if analyze.exists() {
        let out = Command::new(analyze)
            .arg("verify")
            .args(names.iter().map(|n| dir.file(n)))
            .output()
            .unwrap();
        let err = stderr(&out);
        assert!(out.status.success(), "systemd-analyze verify: {err}");
        for name in names {
            assert!(
                !err.contains(name),
                "systemd-analyze warns about {name}: {err}"
            );
        }
    } else {
        eprintln!("systemd-analyze not found: the units are checked by their fields only");
        for (name, text) in &units {
            let kind = if name.ends_with(".timer") {
                "[Timer]"
            } else {
                "[Service]"
            };
            assert!(text.contains("[Unit]") && text.contains(kind), "{name}");
            assert!(field(text, "Description").is_some(), "{name}");
        }
    }
    // The one-shot service, as the timer starts it: the night's instant once, then not again.
    let store = dir.sqlite();
    for _ in 0..2 {
        let words = exec_words(service);
        let out = lease_with_store(&words, &store).output().unwrap();
        assert_eq!(code(out.status), 0, "{words:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "");
    }
    let recs = records(&log);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(
        recs[0].0,
        lease_cron_latest_berlin_3am(),
        "the latest 03:00 in Berlin: {recs:?}"
    );
    // The daemon: runs until SIGTERM, then exits 0.
    let words = exec_words(daemon);
    let child = lease_with_store(&words, &store).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert!(!common::is_dead(i32::try_from(child.id()).unwrap()));
    send(child.id(), rustix::process::Signal::TERM);
    let out = finish(child, Duration::from_secs(10));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
}

/// `words` (an ExecStart: the binary, then its arguments) on `store`, output captured.
fn lease_with_store(words: &[String], store: &str) -> Command {
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..])
        .env("LEASE_STORE", store)
        .env_remove("LEASE_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd
}

/// The latest 03:00 in Europe/Berlin, in milliseconds, by `date` (GNU).
fn lease_cron_latest_berlin_3am() -> i64 {
    let out = Command::new("sh")
        .args([
            "-c",
            "t=$(TZ=Europe/Berlin date -d 'today 03:00' +%s); \
             if [ \"$t\" -gt \"$(date +%s)\" ]; then t=$(TZ=Europe/Berlin date -d 'yesterday 03:00' +%s); fi; \
             echo $t",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse::<i64>()
        .unwrap()
        * 1000
}
