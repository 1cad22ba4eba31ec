//! Running work under a term: its own task, cancellation, step-down grace, fail action.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::timeout;
use tracing::{error, warn};

use crate::error::{BoxError, Error, ErrorKind, Result};
use crate::term::Term;

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

/// The default fail action: log at error level, then end the process with
/// [`FAIL_EXIT_CODE`]. Another process may hold the lease by now, and this one's work is still
/// running; ending the process is the only way left to stop it.
pub fn default_fail_action(failure: &StepDownFailure) {
    error!(
        name = %failure.name,
        term = failure.term,
        instance = %failure.instance,
        error = %failure.error,
        "work did not return within the step-down grace after the lease was lost; exiting"
    );
    std::process::exit(FAIL_EXIT_CODE);
}

/// Marks a term as used by a run (so `Coordinator::close` leaves its release to the run) until
/// dropped. Dropped while still armed — the run's future was dropped before its work returned —
/// it ends the term as closed, so the work is told to stop; the lease is released once the
/// work's last handle on the term is dropped.
pub(crate) struct RunGuard<'a> {
    term: &'a Term,
    /// What runs under the term, for the message when it is cancelled (e.g. "run of lease 'x'").
    what: &'static str,
    /// Cleared once the run has dealt with the end itself.
    pub(crate) armed: bool,
}

impl<'a> RunGuard<'a> {
    pub(crate) fn new(term: &'a Term, what: &'static str) -> RunGuard<'a> {
        term.shared().under_run.fetch_add(1, Ordering::SeqCst);
        RunGuard {
            term,
            what,
            armed: true,
        }
    }
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        let shared = self.term.shared();
        shared.under_run.fetch_sub(1, Ordering::SeqCst);
        if self.armed {
            shared.end(Some(Error::new(
                ErrorKind::Closed,
                format!("{} '{}' was cancelled", self.what, shared.name),
            )));
        }
    }
}

/// The message of a panic payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

impl Term {
    /// Runs `work` on its own task under this term, then resigns.
    ///
    /// `work` gets a clone of the term: it should stop when [`done`](Term::done) fires and use
    /// [`token`](Term::token) to fence its writes.
    ///
    /// - When `work` returns, the term is resigned (the lease released) and its result is
    ///   returned; an error becomes [`Work`](ErrorKind::Work) with the work's error as source.
    /// - A panic in `work` becomes [`Panicked`](ErrorKind::Panicked), carrying the panic
    ///   message; the lease is released.
    /// - Once the lease is **lost**, `work` has the step-down [`grace`](crate::Timings::grace)
    ///   to return. Past that, the coordinator's fail action fires (by default: log, then end
    ///   the process), the task is aborted, and `Lost` is returned.
    /// - A shutdown that is not a loss (the coordinator closing) waits for `work` to return,
    ///   renewing the lease meanwhile.
    /// - If this future is dropped, the term ends as closed, so the work is told to stop; the
    ///   lease is released when the work returns.
    pub async fn run<F, Fut, T, E>(self, work: F) -> Result<T>
    where
        F: FnOnce(Term) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Into<BoxError> + Send + 'static,
    {
        let fut = work(self.clone());
        self.run_future(fut).await
    }

    pub(crate) async fn run_future<Fut, T, E>(self, fut: Fut) -> Result<T>
    where
        Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Into<BoxError> + Send + 'static,
    {
        let shared = self.shared().clone();
        let mut guard = RunGuard::new(&self, "run of lease");
        let mut task = shared.coord.work.spawn(fut);
        let finished = tokio::select! {
            biased;
            r = &mut task => Some(r),
            _ = shared.lost.cancelled() => None,
        };
        let joined = match finished {
            Some(joined) => joined,
            None => match timeout(shared.timings.grace(), &mut task).await {
                Ok(joined) => joined,
                Err(_) => {
                    let error = self
                        .err()
                        .unwrap_or_else(|| Error::lost(&shared.name, "lost"));
                    let failure = StepDownFailure {
                        name: shared.name.clone(),
                        term: shared.token,
                        instance: shared.instance.clone(),
                        error: error.clone(),
                    };
                    (shared.coord.fail_action)(&failure);
                    task.abort();
                    guard.armed = false;
                    drop(guard);
                    // Release in the background: the store may be what failed.
                    shared.stop.cancel();
                    return Err(Error::lost(
                        &shared.name,
                        format_args!(
                            "{error}; the work did not return within the step-down grace of {:?}",
                            shared.timings.grace()
                        ),
                    ));
                }
            },
        };
        guard.armed = false;
        drop(guard);
        if self.is_lost() {
            // Release in the background: the store may be what failed.
            shared.stop.cancel();
            return Err(self
                .err()
                .unwrap_or_else(|| Error::lost(&shared.name, "lost")));
        }
        if let Err(e) = self.resign().await {
            warn!(name = %shared.name, error = %e, "release after the work returned failed");
        }
        match joined {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Error::new(
                ErrorKind::Work,
                format!(
                    "work under lease '{}' (term {}) failed",
                    shared.name, shared.token
                ),
            )
            .with_source(e)),
            Err(join) if join.is_panic() => {
                let msg = panic_message(join.into_panic().as_ref());
                Err(Error::new(
                    ErrorKind::Panicked,
                    format!(
                        "work under lease '{}' (term {}) panicked: {msg}",
                        shared.name, shared.token
                    ),
                ))
            }
            Err(_) => Err(Error::new(
                ErrorKind::Closed,
                format!("work under lease '{}' was cancelled", shared.name),
            )),
        }
    }
}
