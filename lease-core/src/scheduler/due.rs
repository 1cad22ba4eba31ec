//! The one-shot pass: [`Scheduler::run_due`](crate::Scheduler::run_due) runs the instants due now
//! once and returns what became of each, for callers started by cron or a systemd timer.

/// What [`Scheduler::run_due`](crate::Scheduler::run_due) did about one instant of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DueInstant {
    /// The job's name.
    pub job: String,
    /// The instant, in milliseconds since the Unix epoch.
    pub instant_ms: i64,
    /// What became of it on this replica.
    pub outcome: DueOutcome,
}

/// What became of a due instant on the replica that called
/// [`Scheduler::run_due`](crate::Scheduler::run_due).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DueOutcome {
    /// This replica claimed the instant and ran its round.
    Ran {
        /// The round's fencing token.
        token: u64,
        /// `true` for the one rerun of an instant whose first round was cut short.
        rerun: bool,
        /// `true` when a later instant of the schedule had come by the claim: a missed instant
        /// caught up within the window.
        late: bool,
        /// How the round ended.
        ended: RoundEnded,
        /// The instants the round overran, recorded as skipped cluster-wide.
        skipped: u64,
    },
    /// Another replica claimed the instant first (its round ran or is running), or a round
    /// took it along as skipped.
    Taken {
        /// The last instant on record.
        last_ms: i64,
    },
    /// The job's lease is held by the round of an earlier instant (still running, or cut short
    /// with its lease not yet expired). A round that runs on takes this instant along as
    /// skipped when it ends; otherwise a later pass runs it, within its window. The later
    /// instants of the pass are left alone too.
    Busy,
}

/// How a round this replica ran ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RoundEnded {
    /// The work returned `Ok`: the round is recorded as run to its end.
    Finished,
    /// The work failed (an error or a panic) while its lease was live: recorded as finished
    /// too; failures are not rerun.
    Failed,
    /// Cut short (the lease was lost, or the scheduler shut down) before the work completed:
    /// left unfinished, it runs again once, on whichever replica finds it first.
    CutShort,
    /// The work did not return within the step-down grace after the lease was lost: the fail
    /// action ran and the work was aborted.
    Abandoned,
}
