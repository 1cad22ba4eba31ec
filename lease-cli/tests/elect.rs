//! `lease elect`: leaders take turns, one at a time, with increasing terms; a failing CMD is
//! restarted with a growing pause.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use rustix::process::Signal;

#[test]
fn two_candidates_lead_one_at_a_time() {
    let _serial = timing_lock();
    let dir = TempDir::new("elect");
    let store = dir.sqlite();
    let log = dir.file("runs.log");
    let cmd = logged(&log, "sleep 0.3");
    let mut args = vec!["elect", "--ttl", "2s", "leader", "--"];
    args.extend(cmd.iter().map(String::as_str));
    let a = lease(&store, &args).spawn().unwrap();
    let b = lease(&store, &args).spawn().unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || events(&log)
            .iter()
            .filter(|e| !e.start)
            .count()
            >= 4),
        "{:?}",
        events(&log)
    );
    for child in [&a, &b] {
        send(child.id(), Signal::TERM);
    }
    let mut said = String::new();
    for child in [a, b] {
        let out = finish(child, Duration::from_secs(10));
        said.push_str(&stderr(&out));
        // Standing by (72, lease's own) or stopped while leading (CMD's 143, or 0 when CMD
        // had just finished).
        assert!(
            [0, 72, 143].contains(&code(out.status)),
            "{:?}: {}",
            out.status,
            stderr(&out)
        );
    }
    assert!(said.contains("lease: leader for 'leader'"), "{said}");
    let ev = events(&log);
    let finished: Vec<_> = runs_ended(&ev);
    assert!(finished.len() >= 4, "{ev:?}");
    assert_one_at_a_time(&finished);
}

/// The runs that ended, as (term, start, end), in order of start.
fn runs_ended(ev: &[Event]) -> Vec<(u64, i128, i128)> {
    let mut out: Vec<_> = ev
        .iter()
        .filter(|e| e.start)
        .filter_map(|s| {
            ev.iter()
                .find(|e| !e.start && e.term == s.term)
                .map(|e| (s.term, s.ns, e.ns))
        })
        .collect();
    out.sort_by_key(|r| r.1);
    out
}

/// The runs are counted over the 3 s from the first run's own timestamp: however late
/// `lease elect` starts on a busy machine, or however late the test wakes to stop it, the
/// window is the same.
#[test]
fn a_failing_cmd_backs_off() {
    let _serial = timing_lock();
    let dir = TempDir::new("backoff");
    let store = dir.sqlite();
    let log = dir.file("runs.log");
    let script = format!("echo \"run $(date +%s%N)\" >> '{}'; exit 1", log.display());
    let child = lease(
        &store,
        &["elect", "--ttl", "2s", "failing", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    let stamps = || -> Vec<i128> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("run ")?.trim().parse().ok())
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(20), || !stamps().is_empty()),
        "CMD never ran"
    );
    let first = stamps()[0];
    let window = Duration::from_secs(3).as_nanos() as i128;
    assert!(wait_until(Duration::from_secs(20), || now_ns() >= first + window));
    send(child.id(), Signal::TERM);
    let out = finish(child, Duration::from_secs(10));
    assert_eq!(code(out.status), 72, "{}", stderr(&out));
    let runs = stamps().iter().filter(|&&t| t < first + window).count();
    // Without back-off: a run every 267–333 ms, about 10 in 3 s. With it: pauses of
    // retry + 2×, 4×, 8× retry: runs at about 0, 0.8, 2.2 s.
    assert!((2..=4).contains(&runs), "{runs} runs in 3 s");
    assert!(stderr(&out).contains("backing off"), "{}", stderr(&out));
}
