//! The scheduler's metric names, recorded through the `metrics` facade, each labelled with the
//! `job`. Round counters also carry `rerun` (`"true"` / `"false"`).
//!
//! The instant and the term are in every round's log lines, not in metric labels: they change
//! every round and would make a new series each time.

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

fn rerun_label(rerun: bool) -> &'static str {
    if rerun { "true" } else { "false" }
}

pub(crate) fn round(metric: &'static str, job: &str, rerun: bool) {
    metrics::counter!(metric, "job" => job.to_owned(), "rerun" => rerun_label(rerun)).increment(1);
}

pub(crate) fn job(metric: &'static str, job: &str, n: u64) {
    metrics::counter!(metric, "job" => job.to_owned()).increment(n);
}
