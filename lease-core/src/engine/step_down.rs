//! What happens when work under a lost lease does not stop in time: the [`FailAction`] and
//! its default, which ends the process.

use std::io::Write;
use std::sync::Arc;

use tracing::error;

use crate::store::error::Error;

/// The exit code of the default fail action (70, `EX_SOFTWARE`).
pub const FAIL_EXIT_CODE: i32 = 70;

/// What the fail action is told: work under a lost lease did not return within the grace.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StepDownFailure {
    /// The lease's name.
    pub name: String,
    /// The term that was lost.
    pub term: u64,
    /// This holder's instance label.
    pub instance: String,
    /// Why the term was lost.
    pub error: Error,
}

/// Called when work under a lost lease has not returned within the step-down grace.
pub type FailAction = Arc<dyn Fn(&StepDownFailure) + Send + Sync>;

/// The default fail action: say why on stderr, log at error level, then end the process with
/// [`FAIL_EXIT_CODE`]. Another process may hold the lease by now, and this one's work is still
/// running; ending the process is the only way left to stop it.
///
/// The line on stderr is written whatever the program does with `tracing` (no subscriber, or
/// one that writes elsewhere), so the process never dies without saying why:
///
/// ```text
/// lease: work under lease "jobs" (term 7, instance "worker-1") did not return within the
/// step-down grace after the lease was lost (lost: ...); exiting with code 70
/// ```
pub fn default_fail_action(failure: &StepDownFailure) {
    let line = fail_message(failure);
    // Straight to the file descriptor: a failed write (stderr closed) must not stop the exit.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
    error!(
        name = %failure.name,
        term = failure.term,
        instance = %failure.instance,
        error = %failure.error,
        "work did not return within the step-down grace after the lease was lost; exiting"
    );
    std::process::exit(FAIL_EXIT_CODE);
}

/// The line [`default_fail_action`] writes to stderr before it ends the process.
pub(crate) fn fail_message(failure: &StepDownFailure) -> String {
    format!(
        "lease: work under lease {:?} (term {}, instance {:?}) did not return within the \
         step-down grace after the lease was lost ({}); exiting with code {FAIL_EXIT_CODE}",
        failure.name, failure.term, failure.instance, failure.error
    )
}
