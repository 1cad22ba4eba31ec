//! How [`conformance_suite!`](crate::conformance_suite) runs its cases and counts them: each case
//! on a runtime of this crate's (so the caller needs no `tokio` of its own), bounded by
//! [`CASE_TIME_LIMIT`], and its outcome recorded; a last test of the
//! suite, `zz_conformance_summary`, waits for the others and prints one summary that counts
//! the cases that ran in full, did not apply (in whole or in part), were not run on this server
//! or failed.
//!
//! The summary and every "does not apply" line go straight to the process's stderr, past the
//! test harness's capture, so they show in plain `cargo test` output: libtest has no way to
//! mark a test ignored once it has started, so a case that returns early still counts as
//! "passed" in libtest's own line, and this summary is where the difference shows.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::CASE_TIME_LIMIT;

/// What one case of a suite did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseOutcome {
    /// It ran in full.
    Ran,
    /// It returned early, in whole or in part, because the store lacks what it tests: the
    /// notes say what did not apply and why.
    NotApplicable(Vec<String>),
    /// The harness marked it as one this server cannot run ([`Harness::skipping`](crate::Harness::skipping)).
    NotRun(String),
    /// The setup found no server (and said so with a `SKIPPED` line).
    NoServer,
    /// It panicked or overran its time limit.
    Failed,
}

/// The outcomes of one suite (one `conformance_suite!` call), shared by its tests. Made by the
/// macro; not for direct use.
#[derive(Debug)]
pub struct SuiteRecord {
    in_flight: AtomicUsize,
    outcomes: Mutex<Vec<(&'static str, Option<&'static str>, CaseOutcome)>>,
}

impl SuiteRecord {
    /// An empty record.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> SuiteRecord {
        SuiteRecord {
            in_flight: AtomicUsize::new(0),
            outcomes: Mutex::new(Vec::new()),
        }
    }

    fn push(&self, case: &'static str, backend: Option<&'static str>, outcome: CaseOutcome) {
        self.outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((case, backend, outcome));
    }
}

/// Counts a case as in flight until dropped; records `Failed` when dropped by a panic.
struct InFlight<'a> {
    record: &'a SuiteRecord,
    case: &'static str,
    done: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.record.push(self.case, None, CaseOutcome::Failed);
        }
        self.record.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs one case's `body` (its setup and the case; it answers the backend's name and the
/// outcome) on a two-worker runtime, within [`CASE_TIME_LIMIT`], and records the outcome.
///
/// # Panics
///
/// When the case panics (its failure) or overruns the limit, or no runtime can be built.
#[doc(hidden)]
pub fn run_case<F>(record: &'static SuiteRecord, case: &'static str, body: F)
where
    F: Future<Output = (Option<&'static str>, CaseOutcome)>,
{
    record.in_flight.fetch_add(1, Ordering::SeqCst);
    let mut guard = InFlight {
        record,
        case,
        done: false,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("{case}: cannot build the case's tokio runtime: {e}"),
    };
    let limit = CASE_TIME_LIMIT;
    let ran = runtime.block_on(async { tokio::time::timeout(limit, body).await });
    match ran {
        Ok((backend, outcome)) => {
            guard.done = true;
            record.push(case, backend, outcome);
        }
        Err(_) => panic!("{case} did not finish within {limit:?}"),
    }
}

/// How long the summary waits for no case to be in flight before it starts counting: the
/// suite's other tests were all started before it (libtest starts them in name order, and the
/// summary's name sorts last), but a thread may not have entered its case yet.
const SETTLE: Duration = Duration::from_millis(500);

/// Waits until none of the suite's `total` cases has been in flight for half a second, then prints the summary line on the process's stderr, past
/// the test harness's capture:
///
/// ```text
/// CONFORMANCE SUMMARY memory (conformance::memory): 56 cases: 45 ran in full, 10 did not apply (in whole or in part), 1 not run on this server, 0 failed, 0 without a server
///   did not apply: force_release_ends_a_live_lease_and_keeps_the_term: force_release: the store does not support it
/// ```
///
/// A filtered run (`cargo test renew`) counts only the cases it ran.
#[doc(hidden)]
pub fn summarize(record: &'static SuiteRecord, suite: &str, total: usize) {
    // Every case is bounded by its time limit, so the suite goes quiet in the end.
    let mut idle_since: Option<Instant> = None;
    loop {
        if record.in_flight.load(Ordering::SeqCst) == 0 {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= SETTLE {
                break;
            }
        } else {
            idle_since = None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let outcomes = record
        .outcomes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let _ = std::io::stderr()
        .lock()
        .write_all(summary(suite, total, &outcomes).as_bytes());
}

/// The summary text of `outcomes`.
fn summary(
    suite: &str,
    total: usize,
    outcomes: &[(&'static str, Option<&'static str>, CaseOutcome)],
) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut lines = Vec::new();
    let mut backend = None;
    for (case, b, outcome) in outcomes {
        backend = backend.or(*b);
        let key = match outcome {
            CaseOutcome::Ran => "ran",
            CaseOutcome::NotApplicable(notes) => {
                // A note names the part that did not apply; the whole case needs no repeat.
                let prefix = format!("{case}: ");
                let notes: Vec<&str> = notes
                    .iter()
                    .map(|n| n.strip_prefix(&prefix).unwrap_or(n))
                    .collect();
                lines.push(format!("  did not apply: {case}: {}", notes.join("; ")));
                "not_applicable"
            }
            CaseOutcome::NotRun(why) => {
                lines.push(format!("  not run on this server: {case}: {why}"));
                "not_run"
            }
            CaseOutcome::NoServer => "no_server",
            CaseOutcome::Failed => {
                lines.push(format!("  FAILED: {case}"));
                "failed"
            }
        };
        *counts.entry(key).or_default() += 1;
    }
    lines.sort();
    let n = |k: &str| counts.get(k).copied().unwrap_or(0);
    let ran = outcomes.len();
    let of = if ran == total {
        format!("{total} cases")
    } else {
        format!("{ran} of {total} cases (filtered)")
    };
    let mut text = format!(
        "\nCONFORMANCE SUMMARY {} ({suite}): {of}: {} ran in full, {} did not apply (in whole or \
         in part), {} not run on this server, {} failed, {} without a server\n",
        backend.unwrap_or("?"),
        n("ran"),
        n("not_applicable"),
        n("not_run"),
        n("failed"),
        n("no_server"),
    );
    for line in lines {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_every_kind_of_outcome() {
        let outcomes = vec![
            ("a", Some("memory"), CaseOutcome::Ran),
            (
                "b",
                Some("memory"),
                CaseOutcome::NotApplicable(vec!["b: no slots".into()]),
            ),
            ("c", None, CaseOutcome::Failed),
            ("d", Some("memory"), CaseOutcome::NotRun("emulator".into())),
        ];
        let text = summary("t::memory", 5, &outcomes);
        assert!(
            text.contains(
                "CONFORMANCE SUMMARY memory (t::memory): 4 of 5 cases (filtered): 1 ran in full, \
                 1 did not apply (in whole or in part), 1 not run on this server, 1 failed, 0 \
                 without a server"
            ),
            "{text}"
        );
        assert!(text.contains("  did not apply: b: no slots\n"), "{text}");
        assert!(text.contains("  FAILED: c\n"), "{text}");
    }
}
