//! The scheduler's metric names (defined in [`crate::telemetry`], with the others), recorded
//! through the `metrics` facade, each labelled with the `job`. Round counters also carry `rerun`
//! (`"true"` / `"false"`).
//!
//! The instant and the term are in every round's log lines, not in metric labels: they change
//! every round and would make a new series each time.

pub use crate::telemetry::{
    INSTANTS_LATE, INSTANTS_MISSED, INSTANTS_SKIPPED, INSTANTS_SUPERSEDED, RERUNS,
    ROUNDS_CUT_SHORT, ROUNDS_FAILED, ROUNDS_FINISHED, ROUNDS_STARTED,
};

fn rerun_label(rerun: bool) -> &'static str {
    if rerun { "true" } else { "false" }
}

pub(crate) fn round(metric: &'static str, job: &str, rerun: bool) {
    metrics::counter!(metric, "job" => job.to_owned(), "rerun" => rerun_label(rerun)).increment(1);
}

pub(crate) fn job(metric: &'static str, job: &str, n: u64) {
    metrics::counter!(metric, "job" => job.to_owned()).increment(n);
}
