//! Metric names, recorded through the `metrics` facade. Install any `metrics` recorder to
//! collect them; without one they cost next to nothing.

/// Gauge: 1 while this process holds the lease named by the `name` label, 0 after.
pub const HELD: &str = "lease_held";
/// Counter: successful claims, by `name`.
pub const CLAIMS: &str = "lease_claims_total";
/// Counter: renewals that failed or timed out (the lease may still be held), by `name`.
pub const RENEW_FAILURES: &str = "lease_renew_failures_total";
/// Counter: leases lost, by `name`.
pub const LOSSES: &str = "lease_losses_total";

/// Counter: `run_elected` loops that ended, by `name` and `reason` (`closed` when the
/// coordinator closed; otherwise the error's kind, e.g. `work`, `panicked`, `invalid_name`).
pub const ELECTIONS_ENDED: &str = "lease_elections_ended_total";
/// Counter: work under `run_elected` that failed (an error or a panic) while its term was live,
/// by `name`; each is a step-down (or, under `OnWorkError::Return`, the end of the election).
pub const WORK_FAILURES: &str = "lease_work_failures_total";

pub(crate) fn held(name: &str, held: bool) {
    metrics::gauge!(HELD, "name" => name.to_owned()).set(if held { 1.0 } else { 0.0 });
}

pub(crate) fn claimed(name: &str) {
    metrics::counter!(CLAIMS, "name" => name.to_owned()).increment(1);
}

pub(crate) fn renew_failed(name: &str) {
    metrics::counter!(RENEW_FAILURES, "name" => name.to_owned()).increment(1);
}

pub(crate) fn lost(name: &str) {
    metrics::counter!(LOSSES, "name" => name.to_owned()).increment(1);
}

pub(crate) fn election_ended(name: &str, reason: &'static str) {
    metrics::counter!(ELECTIONS_ENDED, "name" => name.to_owned(), "reason" => reason).increment(1);
}

pub(crate) fn work_failed(name: &str) {
    metrics::counter!(WORK_FAILURES, "name" => name.to_owned()).increment(1);
}
