//! The metrics of terms, campaigns and group workers, recorded through the `metrics` facade;
//! and [`redact`], which keeps passwords out of what a program logs.
//! Install any `metrics` recorder (e.g. `metrics-exporter-prometheus`) to collect them; without
//! one they cost next to nothing. The scheduler's are defined here too and recorded by
//! [`scheduler::telemetry`](crate::scheduler::telemetry), which re-exports them.
//!
//! [`METRICS`] lists every metric of the workspace — its name, kind, unit, labels and meaning —
//! and is the one source of truth: [`describe`] gives each its HELP text and unit from it, and
//! the README's table of metrics is checked against it by a test.
//!
//! Labels carry the lease's `name`, the `group` or the scheduler's `job`, and a small fixed set
//! of causes or outcomes; never a term, an instance or a partition, which would make a new
//! series every time they change. The instance is the scraping target's own label.
//!
//! # Gauges are true at every instant
//!
//! [`HELD`] is 1 from the claim until the release is answered (or the term is lost), not only
//! while the work runs: during a close or a resign the work winds down under a renewed lease,
//! and the gauge stays 1 until the store has let go. [`TERM`] moves with it. A term whose
//! release failed or timed out counts as ended when the release gave up: the lease then expires
//! by its TTL, unrenewed. These gauges are kept per process: with several coordinators in one
//! process, [`HELD`] counts the terms of the name held by all of them.

pub mod redact;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// Gauge: 1 while this process holds the lease `name` in the store — from the claim until the
/// release is answered or the term is lost — else 0.
pub const HELD: &str = "lease_held";
/// Gauge: the fencing token of the term of `name` this process holds; 0 while it holds none.
pub const TERM: &str = "lease_term";
/// Counter: successful claims, by `name`.
pub const CLAIMS: &str = "lease_claims_total";
/// Counter: terms lost, by `name` and `cause`: `deadline` (no renewal succeeded within the
/// local deadline), `store` (a renewal found the lease gone), `work` (the work reported the
/// loss, or the store no longer held the lease when the work failed).
pub const LOSSES: &str = "lease_losses_total";
/// Counter: renewals that failed, by `name` and `cause` (`error`: the store answered with an
/// error; `timeout`: no answer within the attempt timeout). The lease may still be held: the
/// keeper retries until the local deadline.
pub const RENEW_FAILURES: &str = "lease_renew_failures_total";
/// Histogram, seconds: how long each renewal took, from its start to the store's answer
/// (successful or failed; timeouts are counted in [`RENEW_FAILURES`] instead), by `name`.
pub const RENEW_SECONDS: &str = "lease_renew_seconds";
/// Histogram, seconds: at each successful renewal, the time that was left before the term's
/// local deadline when it was sent — how close the term came to ending. Healthy: about
/// `deadline − renew_every`; lower after failed renewals. By `name`.
pub const RENEW_TIME_LEFT: &str = "lease_renew_time_left_seconds";
/// Histogram, seconds: the step-down grace the work used — from the end of its term (a loss,
/// a close, a resign while it runs) until its work returned; the whole grace when it did not
/// return in time (the fail action then ran). By `name`.
pub const GRACE_USED: &str = "lease_grace_used_seconds";
/// Counter: campaigns of `run_elected`, by `name` and `outcome`: `claimed` (this node became
/// the leader), `held` (someone else leads), `error` (the store failed; retried).
pub const CAMPAIGNS: &str = "lease_campaigns_total";
/// Counter: `run_elected` loops that ended, by `name` and `reason` (`closed` when the
/// coordinator closed; otherwise the error's kind, e.g. `work`, `panicked`, `invalid_name`).
pub const ELECTIONS_ENDED: &str = "lease_elections_ended_total";
/// Counter: work under `run_elected` that failed (an error or a panic) while its term was live,
/// by `name`; each is a step-down (or, under `OnWorkError::Return`, the end of the election).
pub const WORK_FAILURES: &str = "lease_work_failures_total";

/// Gauge: the partitions in this process's published assignments of `group`.
pub const GROUP_PARTITIONS_HELD: &str = "lease_group_partitions_held";
/// Counter: partitions acquired by this process's workers, by `group`.
pub const GROUP_ACQUIRED: &str = "lease_group_partitions_acquired_total";
/// Counter: partitions that left an assignment of this process, by `group` and `reason`:
/// `rebalance` (given up to another member), `leave` (the worker left), `lost` (no renewal
/// within the deadline, or the store no longer had it).
pub const GROUP_HANDOVERS: &str = "lease_group_handovers_total";
/// Histogram, seconds: from the tick at which a worker saw the member list change until it held
/// exactly its share with nothing left draining, by `group`.
pub const GROUP_REBALANCE_SECONDS: &str = "lease_group_rebalance_seconds";

// The scheduler's (recorded by `scheduler::telemetry`, which re-exports them).

/// Counter: rounds started on this replica, by `job` and `rerun`.
pub const ROUNDS_STARTED: &str = "lease_scheduler_rounds_started_total";
/// Counter: rounds that ran to their end and were recorded as finished (their work returned
/// `Ok`, or failed while its lease was live), by `job` and `rerun`.
pub const ROUNDS_FINISHED: &str = "lease_scheduler_rounds_finished_total";
/// Counter: finished rounds whose work returned an error or panicked, by `job` and `rerun`.
pub const ROUNDS_FAILED: &str = "lease_scheduler_rounds_failed_total";
/// Counter: rounds cut short (lease lost, shutdown, work cancelled), left unfinished for their
/// one rerun, by `job` and `rerun`.
pub const ROUNDS_CUT_SHORT: &str = "lease_scheduler_rounds_cut_short_total";
/// Counter: instants skipped because a round of this replica overran them (recorded in the
/// store with the round's finish), by `job`.
pub const INSTANTS_SKIPPED: &str = "lease_scheduler_instants_skipped_total";
/// Counter: unfinished instants given up because a later instant was claimed before their
/// rerun, as reported to this replica's claims, by `job`.
pub const INSTANTS_SUPERSEDED: &str = "lease_scheduler_instants_superseded_total";
/// Counter: reruns of unfinished instants claimed by this replica, by `job`.
pub const RERUNS: &str = "lease_scheduler_reruns_total";
/// Counter: instants this replica claimed late, by `job`: when they came, the job's lease was
/// held by the round of an earlier instant, and that round ended without taking them along (it
/// was cut short, e.g. its replica died with its lease still live), so they ran once that lease
/// had ended.
pub const INSTANTS_LATE: &str = "lease_scheduler_instants_late_total";
/// Counter: instants that never ran and were not recorded as skipped, by `job`: the lease of a
/// round held the job's name through them (and through a later instant too, which is claimed
/// late instead), and the round ended without recording them — it was cut short (e.g. its
/// replica died with its lease still live), or its lease was gone when it finished. Counted
/// once cluster-wide: by the replica whose claim of a later instant superseded a round cut
/// short, or by the replica whose round finished without recording its overrun.
pub const INSTANTS_MISSED: &str = "lease_scheduler_instants_missed_total";

/// What kind of metric a [`MetricDoc`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up (a Prometheus counter; its name ends in `_total`).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A distribution of observations.
    Histogram,
}

impl MetricKind {
    /// `counter`, `gauge` or `histogram`.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// One metric: its name, kind, unit, labels and meaning. See [`METRICS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricDoc {
    /// The metric's name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// The unit: `seconds`, or `count` for counters and plain numbers (a token, a number of
    /// partitions, 0 or 1).
    pub unit: &'static str,
    /// The label keys every series of it carries.
    pub labels: &'static [&'static str],
    /// What it means, one sentence: its HELP text.
    pub help: &'static str,
}

const fn doc(
    name: &'static str,
    kind: MetricKind,
    unit: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricDoc {
    MetricDoc {
        name,
        kind,
        unit,
        labels,
        help,
    }
}

use MetricKind::{Counter, Gauge, Histogram};

const SECONDS: &str = "seconds";
const COUNT: &str = "count";

/// Every metric the workspace records, in the README's order.
pub const METRICS: &[MetricDoc] = &[
    doc(
        HELD,
        Gauge,
        COUNT,
        &["name"],
        "1 while this process holds the lease in the store (claim to answered release, or loss), else 0",
    ),
    doc(
        TERM,
        Gauge,
        COUNT,
        &["name"],
        "fencing token of the term this process holds; 0 while it holds none",
    ),
    doc(CLAIMS, Counter, COUNT, &["name"], "successful claims"),
    doc(
        LOSSES,
        Counter,
        COUNT,
        &["name", "cause"],
        "terms lost; cause: deadline, store or work",
    ),
    doc(
        RENEW_FAILURES,
        Counter,
        COUNT,
        &["name", "cause"],
        "renewals that failed (the term goes on until its local deadline); cause: error or timeout",
    ),
    doc(
        RENEW_SECONDS,
        Histogram,
        SECONDS,
        &["name"],
        "time from a renewal's start to the store's answer",
    ),
    doc(
        RENEW_TIME_LEFT,
        Histogram,
        SECONDS,
        &["name"],
        "time left before the local deadline when a renewal that succeeded was sent",
    ),
    doc(
        GRACE_USED,
        Histogram,
        SECONDS,
        &["name"],
        "time from a term's end until its work returned (the whole grace when it did not)",
    ),
    doc(
        CAMPAIGNS,
        Counter,
        COUNT,
        &["name", "outcome"],
        "run_elected campaigns; outcome: claimed, held or error",
    ),
    doc(
        ELECTIONS_ENDED,
        Counter,
        COUNT,
        &["name", "reason"],
        "run_elected loops that ended; reason: closed or the error's kind",
    ),
    doc(
        WORK_FAILURES,
        Counter,
        COUNT,
        &["name"],
        "run_elected work that failed while its term was live (a step-down)",
    ),
    doc(
        GROUP_PARTITIONS_HELD,
        Gauge,
        COUNT,
        &["group"],
        "partitions in this process's published assignments",
    ),
    doc(
        GROUP_ACQUIRED,
        Counter,
        COUNT,
        &["group"],
        "partitions acquired",
    ),
    doc(
        GROUP_HANDOVERS,
        Counter,
        COUNT,
        &["group", "reason"],
        "partitions that left an assignment; reason: rebalance, leave or lost",
    ),
    doc(
        GROUP_REBALANCE_SECONDS,
        Histogram,
        SECONDS,
        &["group"],
        "time from a member-list change until the worker held exactly its share, nothing draining",
    ),
    doc(
        ROUNDS_STARTED,
        Counter,
        COUNT,
        &["job", "rerun"],
        "scheduler rounds started (instants run)",
    ),
    doc(
        ROUNDS_FINISHED,
        Counter,
        COUNT,
        &["job", "rerun"],
        "scheduler rounds run to their end and recorded as finished",
    ),
    doc(
        ROUNDS_FAILED,
        Counter,
        COUNT,
        &["job", "rerun"],
        "finished scheduler rounds whose work failed or panicked",
    ),
    doc(
        ROUNDS_CUT_SHORT,
        Counter,
        COUNT,
        &["job", "rerun"],
        "scheduler rounds cut short (lease lost, shutdown), left for their one rerun",
    ),
    doc(
        RERUNS,
        Counter,
        COUNT,
        &["job"],
        "reruns of unfinished instants claimed",
    ),
    doc(
        INSTANTS_SKIPPED,
        Counter,
        COUNT,
        &["job"],
        "instants skipped because a round overran them",
    ),
    doc(
        INSTANTS_SUPERSEDED,
        Counter,
        COUNT,
        &["job"],
        "unfinished instants given up because a later instant was claimed first",
    ),
    doc(
        INSTANTS_LATE,
        Counter,
        COUNT,
        &["job"],
        "instants claimed late, after a dead round's lease ended",
    ),
    doc(
        INSTANTS_MISSED,
        Counter,
        COUNT,
        &["job"],
        "instants that never ran and were not recorded as skipped",
    ),
];

/// Gives every metric of [`METRICS`] its HELP text and unit on the installed recorder. Call it
/// once after installing the recorder; coordinators, group workers and schedulers also call it
/// when they are built, so it only needs calling when the recorder comes later. Calling it
/// again is harmless.
pub fn describe() {
    for m in METRICS {
        let unit = if m.unit == SECONDS {
            metrics::Unit::Seconds
        } else {
            metrics::Unit::Count
        };
        match m.kind {
            Counter => metrics::describe_counter!(m.name, unit, m.help),
            Gauge => metrics::describe_gauge!(m.name, unit, m.help),
            Histogram => metrics::describe_histogram!(m.name, unit, m.help),
        }
    }
}

/// The README's table of metrics, as Markdown: what the test compares the README with.
#[doc(hidden)]
pub fn markdown_table() -> String {
    let mut out =
        String::from("| metric | kind | unit | labels | meaning |\n|---|---|---|---|---|\n");
    for m in METRICS {
        let labels: Vec<String> = m.labels.iter().map(|l| format!("`{l}`")).collect();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            m.name,
            m.kind.as_str(),
            m.unit,
            labels.join(", "),
            m.help
        ));
    }
    out
}

/// Describes once per process, from the builders; [`describe`] is the public way.
pub(crate) fn describe_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(describe);
}

/// The live terms of this process, per name: what [`HELD`] and [`TERM`] report.
static LIVE: Mutex<BTreeMap<String, Vec<u64>>> = Mutex::new(BTreeMap::new());

/// Updates the live terms of `name` with `change` and sets both gauges from the result, under
/// one lock, so the gauges move in the order the terms did.
fn live_terms(name: &str, change: impl FnOnce(&mut Vec<u64>)) {
    let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    let tokens = live.entry(name.to_owned()).or_default();
    change(tokens);
    let (count, max) = (tokens.len(), tokens.iter().copied().max().unwrap_or(0));
    if tokens.is_empty() {
        live.remove(name);
    }
    metrics::gauge!(HELD, "name" => name.to_owned()).set(count as f64);
    metrics::gauge!(TERM, "name" => name.to_owned()).set(max as f64);
}

/// Publishes the gauges of `name` as they are (0 when no term is held), so a node that only
/// campaigns shows `lease_held 0` rather than no series.
pub(crate) fn campaigning(name: &str) {
    live_terms(name, |_| {});
}

/// A term of `name` was claimed.
pub(crate) fn term_started(name: &str, token: u64) {
    metrics::counter!(CLAIMS, "name" => name.to_owned()).increment(1);
    live_terms(name, |t| t.push(token));
}

/// A term of `name` is no longer held: released, lost, or given up to its TTL.
pub(crate) fn term_ended(name: &str, token: u64) {
    live_terms(name, |t| {
        if let Some(i) = t.iter().position(|&x| x == token) {
            t.swap_remove(i);
        }
    });
}

/// Why a term was lost, for [`LOSSES`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum LossCause {
    Deadline,
    Store,
    Work,
}

pub(crate) fn lost(name: &str, cause: LossCause) {
    let cause = match cause {
        LossCause::Deadline => "deadline",
        LossCause::Store => "store",
        LossCause::Work => "work",
    };
    metrics::counter!(LOSSES, "name" => name.to_owned(), "cause" => cause).increment(1);
}

/// A renewal failed: `timed_out` when it had no answer.
pub(crate) fn renew_failed(name: &str, timed_out: bool) {
    let cause = if timed_out { "timeout" } else { "error" };
    metrics::counter!(RENEW_FAILURES, "name" => name.to_owned(), "cause" => cause).increment(1);
}

/// A renewal was answered after `took`.
pub(crate) fn renew_answered(name: &str, took: Duration) {
    metrics::histogram!(RENEW_SECONDS, "name" => name.to_owned()).record(took.as_secs_f64());
}

/// A renewal succeeded, sent with `left` before the local deadline.
pub(crate) fn renewed(name: &str, left: Duration) {
    metrics::histogram!(RENEW_TIME_LEFT, "name" => name.to_owned()).record(left.as_secs_f64());
}

pub(crate) fn grace_used(name: &str, used: Duration) {
    metrics::histogram!(GRACE_USED, "name" => name.to_owned()).record(used.as_secs_f64());
}

/// The outcome of one campaign, for [`CAMPAIGNS`].
pub(crate) fn campaign(name: &str, outcome: &'static str) {
    metrics::counter!(CAMPAIGNS, "name" => name.to_owned(), "outcome" => outcome).increment(1);
}

pub(crate) fn election_ended(name: &str, reason: &'static str) {
    metrics::counter!(ELECTIONS_ENDED, "name" => name.to_owned(), "reason" => reason).increment(1);
}

pub(crate) fn work_failed(name: &str) {
    metrics::counter!(WORK_FAILURES, "name" => name.to_owned()).increment(1);
}

/// A worker's published assignment of `group` went from `before` to `after` partitions.
pub(crate) fn group_held(group: &str, before: usize, after: usize) {
    if before == after {
        return;
    }
    let gauge = metrics::gauge!(GROUP_PARTITIONS_HELD, "group" => group.to_owned());
    if after >= before {
        gauge.increment((after - before) as f64);
    } else {
        gauge.decrement((before - after) as f64);
    }
}

pub(crate) fn group_acquired(group: &str, n: usize) {
    metrics::counter!(GROUP_ACQUIRED, "group" => group.to_owned()).increment(n as u64);
}

pub(crate) fn group_handed_over(group: &str, reason: &'static str, n: usize) {
    metrics::counter!(GROUP_HANDOVERS, "group" => group.to_owned(), "reason" => reason)
        .increment(n as u64);
}

pub(crate) fn group_rebalanced(group: &str, took: Duration) {
    metrics::histogram!(GROUP_REBALANCE_SECONDS, "group" => group.to_owned())
        .record(took.as_secs_f64());
}
