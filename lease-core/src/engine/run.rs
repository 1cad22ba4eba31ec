//! Running work under a term: its own task, cancellation, step-down grace, fail action.

use std::any::Any;
use std::error::Error as StdError;
use std::future::Future;
use std::sync::Arc;

use tokio::task::{AbortHandle, JoinError, JoinHandle};
use tokio::time::timeout;
use tracing::{debug, warn};

use crate::engine::step_down::StepDownFailure;
use crate::engine::term::{Term, TermShared};
use crate::store::error::{BoxError, Error, ErrorKind, Result};
use crate::telemetry;

/// Marks a term as used by a run (so `Coordinator::close` leaves its release to the run) until
/// dropped. Dropped while still armed — the run's future was dropped before its work returned —
/// it ends the term as closed, so the work is told to stop; renewals go on, and the lease is
/// released once the work's task has ended and the last handle on the term is dropped (the
/// task keeps one: see [`spawn_supervised`]).
pub(crate) struct RunGuard {
    term: Term,
    /// What runs under the term, for the message when it is cancelled (e.g. "run of lease 'x'").
    what: &'static str,
    /// Cleared once the run has dealt with the end itself.
    pub(crate) armed: bool,
}

impl RunGuard {
    /// Marks `term` as used by a run, whatever its state. The caller must check
    /// [`Term::is_live`] after this and start no work if it is false: `close` ends a term
    /// before it looks for runs, so a run marked before that look keeps the release, and one
    /// marked after it sees the end. [`RunGuard::enter`] does both at once.
    pub(crate) fn new(term: &Term, what: &'static str) -> RunGuard {
        term.shared().add_run();
        RunGuard {
            term: term.clone(),
            what,
            armed: true,
        }
    }

    /// Marks `term` as used by a run if it is live; otherwise returns the error it ended with
    /// (`Closed` after a close or a resign, `Lost` after a loss or past its local deadline) and
    /// marks nothing: no work may start under it.
    pub(crate) fn enter(term: &Term, what: &'static str) -> Result<RunGuard> {
        if !term.shared().try_add_run() {
            return Err(term.check().err().unwrap_or_else(|| {
                Error::new(
                    ErrorKind::Closed,
                    format!("lease '{}' is being released", term.name()),
                )
            }));
        }
        Ok(RunGuard {
            term: term.clone(),
            what,
            armed: true,
        })
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let shared = self.term.shared();
        shared.leave_run();
        if self.armed {
            shared.end(Some(Error::new(
                ErrorKind::Closed,
                format!("{} '{}' was cancelled", self.what, shared.name),
            )));
        }
    }
}

/// Owned by the task that runs the work: a handle on the term, so the keeper renews until the
/// task has ended (whether or not the work keeps a handle itself, and whether or not the run
/// that spawned it is still there), and a run mark, so `close` never releases the term under
/// it.
pub(crate) struct WorkHold {
    term: Term,
}

impl WorkHold {
    pub(crate) fn new(term: &Term) -> WorkHold {
        term.shared().add_run();
        WorkHold { term: term.clone() }
    }
}

impl Drop for WorkHold {
    fn drop(&mut self) {
        self.term.shared().leave_run();
    }
}

/// How work under a term ended.
pub(crate) enum Ended<T> {
    /// The work's task ended: its output, or how it failed (a panic, a cancellation).
    Joined(std::result::Result<T, JoinError>),
    /// The lease was lost and the work did not return within the step-down grace: the fail
    /// action ran and the task was aborted. The error is the term's loss.
    Abandoned(Error),
}

/// Work under a term, started by [`spawn_supervised`].
pub(crate) struct Supervised<T> {
    name: String,
    watcher: JoinHandle<Ended<T>>,
}

impl<T> Supervised<T> {
    /// Waits for the work to end. Dropping this future (or the `Supervised`) leaves the work
    /// and its watcher running.
    pub(crate) async fn ended(self) -> Ended<T> {
        match self.watcher.await {
            Ok(ended) => ended,
            // Only the fail action can panic in the watcher; its drop aborted the work.
            Err(join) => {
                let why = if join.is_panic() {
                    format!(
                        "the fail action panicked: {}",
                        panic_message(join.into_panic().as_ref())
                    )
                } else {
                    "the step-down watcher was cancelled".to_owned()
                };
                Ended::Abandoned(Error::lost(&self.name, why))
            }
        }
    }
}

/// Starts `fut` under `term` with the step-down rules, at once (not when the result is first
/// polled).
///
/// The work runs on its own task of the coordinator's tracker, holding a [`WorkHold`]. A second
/// tracked task watches it: once the lease is lost, the work has the step-down grace to return;
/// past that, the fail action runs, the work's task is aborted, and the keeper is told to
/// release once that task is gone. Both tasks go on if the caller goes, so a dropped caller
/// never frees the name under running work, nor lets work under a lost lease run past the
/// grace unnoticed. Otherwise the term is left as it is: the caller resigns, finishes or drops
/// it. Used by [`Term::run`] and by each scheduler round.
pub(crate) fn spawn_supervised<Fut>(term: &Term, fut: Fut) -> Supervised<Fut::Output>
where
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let shared = term.shared().clone();
    let hold = WorkHold::new(term);
    let work = shared.coord.work.spawn(async move {
        let _hold = hold;
        fut.await
    });
    let watcher = shared.coord.work.spawn(watch(shared.clone(), work));
    Supervised {
        name: shared.name.clone(),
        watcher,
    }
}

/// [`spawn_supervised`], then waits for the work to end. The work starts when this is called;
/// dropping the returned future leaves the work and its watcher running, with the step-down
/// rules enforced.
pub(crate) async fn supervise<Fut>(term: &Term, fut: Fut) -> Ended<Fut::Output>
where
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    spawn_supervised(term, fut).ended().await
}

/// Aborts a task when dropped.
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The step-down watcher of one work task.
async fn watch<T: Send + 'static>(shared: Arc<TermShared>, mut task: JoinHandle<T>) -> Ended<T> {
    // If the watcher itself goes (a panicking fail action, a runtime shutting down), the work
    // goes with it: nothing else would enforce the grace.
    let _abort = AbortOnDrop(task.abort_handle());
    tokio::select! {
        biased;
        r = &mut task => {
            grace_used(&shared);
            return Ended::Joined(r);
        }
        _ = shared.lost.cancelled() => {}
    }
    match timeout(shared.timings.grace(), &mut task).await {
        Ok(joined) => {
            grace_used(&shared);
            Ended::Joined(joined)
        }
        Err(_) => {
            telemetry::grace_used(&shared.name, shared.timings.grace());
            let error = shared
                .end_error()
                .unwrap_or_else(|| Error::lost(&shared.name, "lost"));
            let failure = StepDownFailure {
                name: shared.name.clone(),
                term: shared.token,
                instance: shared.instance.clone(),
                error: error.clone(),
            };
            (shared.coord.fail_action)(&failure);
            task.abort();
            // Release in the background (the store may be what failed), and only once the
            // aborted task is gone: an abort takes effect at the work's next await point.
            // Whoever still holds a handle on the lost term does not hold up the release.
            let stopping = shared.clone();
            tokio::spawn(async move {
                let _gone = task.await;
                stopping.signal_stop();
            });
            Ended::Abandoned(error)
        }
    }
}

/// Records the grace the work used, when it returned after its term ended.
fn grace_used(shared: &TermShared) {
    if let Some(ended) = shared.ended_at() {
        telemetry::grace_used(&shared.name, ended.elapsed());
    }
}

/// `true` when an error of kind [`Lost`](ErrorKind::Lost) is in `err`'s chain of sources (the
/// error itself included).
pub(crate) fn reports_loss(err: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if e.downcast_ref::<Error>()
            .is_some_and(|e| e.is(ErrorKind::Lost))
        {
            return true;
        }
        next = e.source();
    }
    false
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
    ///   the process), the task is aborted, and `Lost` is returned; the lease is released once
    ///   the aborted task is gone, whatever other handles on the term are still held.
    /// - When `work` fails (an error or a panic) and the term turns out lost — an error of kind
    ///   `Lost` in the error's chain of sources (what a fenced write such as `begin_verified`
    ///   returns when the lease expired a moment before the keeper noticed), the term no longer
    ///   live, or the store, asked once, no longer holding the lease for this term — the term
    ///   ends as lost (counted and logged like any loss) and `Lost` is returned, with the
    ///   work's error as source.
    /// - A shutdown that is not a loss (the coordinator closing) waits for `work` to return,
    ///   renewing the lease meanwhile.
    /// - If this future is dropped, the term ends as closed, so the work is told to stop; the
    ///   lease is renewed until the work's task has ended, then released (once no other
    ///   handle on the term is left). The step-down grace and the fail action still apply.
    /// - The term is taken for the run, `work` called and its task started when `run` is
    ///   called, not when the returned future is first polled; the future waits for the end.
    ///   A term that has already ended (closed, resigned, lost, past its deadline) or is being
    ///   released starts no work: `work` is never called and the future returns the term's
    ///   error (`Closed` or `Lost`). So a `run` racing
    ///   [`Coordinator::close`](crate::Coordinator::close) either keeps the term for its work
    ///   (`close` then leaves the release to the run) or starts nothing.
    pub fn run<F, Fut, T, E>(self, work: F) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(Term) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Into<BoxError> + Send + 'static,
    {
        let started = RunGuard::enter(&self, "run of lease").map(|guard| {
            let fut = work(self.clone());
            (guard, spawn_supervised(&self, fut))
        });
        async move {
            let (mut guard, work) = started?;
            let ended = work.ended().await;
            guard.armed = false;
            drop(guard);
            self.conclude(ended).await
        }
    }

    /// [`Term::run`] with the work's future already made.
    #[allow(dead_code)] // for runs whose future is made before the term is at hand
    pub(crate) fn run_future<Fut, T, E>(self, fut: Fut) -> impl Future<Output = Result<T>> + Send
    where
        Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Into<BoxError> + Send + 'static,
    {
        self.run(|_| fut)
    }

    /// The end of a run whose work has ended: resign, or release in the background after a
    /// loss, and the result.
    async fn conclude<T, E>(self, ended: Ended<std::result::Result<T, E>>) -> Result<T>
    where
        E: Into<BoxError>,
    {
        let shared = self.shared().clone();
        let joined = match ended {
            Ended::Joined(joined) => joined.map(|r| r.map_err(Into::into)),
            Ended::Abandoned(error) => {
                // The task was aborted; the watcher has the release follow once it is gone.
                return Err(Error::lost(
                    &shared.name,
                    format_args!(
                        "{error}; the work did not return within the step-down grace of {:?}",
                        shared.timings.grace()
                    ),
                ));
            }
        };
        let failure: Option<String> = match &joined {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(join) if join.is_panic() => Some("the work panicked".to_owned()),
            Err(_) => None,
        };
        if let Some(what) = &failure
            && !self.is_lost()
        {
            let by_chain = matches!(&joined, Ok(Err(e)) if reports_loss(e.as_ref()));
            if let Some(why) = self.loss_after_failure(by_chain).await {
                shared.lose(
                    format_args!("{why} (the work failed: {what})"),
                    telemetry::LossCause::Work,
                );
            }
        }
        if self.is_lost() {
            // Release in the background: the store may be what failed.
            shared.signal_stop();
            let lost = self
                .err()
                .unwrap_or_else(|| Error::lost(&shared.name, "lost"));
            return Err(match joined {
                Ok(Err(e)) => lost.with_source(e),
                _ => lost,
            });
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

    /// After the work failed under a term not known lost: whether the term is lost after all,
    /// and why. `by_chain`: the work's error carries a `Lost`. Otherwise the term's local
    /// deadline, then the store (one `verify`, bounded by the attempt timeout and the
    /// deadline) decide; a store that does not answer leaves the term to its keeper.
    async fn loss_after_failure(&self, by_chain: bool) -> Option<String> {
        if by_chain {
            return Some("the work reports the lease lost".to_owned());
        }
        let shared = self.shared();
        if !shared.expires {
            return None;
        }
        // Not `is_live`: a term ended by a close or a resign is not lost.
        if self.deadline_in().is_zero() {
            return Some("the local deadline has passed".to_owned());
        }
        let bound = shared.timings.attempt_timeout().min(self.deadline_in());
        match timeout(bound, shared.verify()).await {
            Ok(Ok(None)) => Some("the store no longer holds the lease for this term".to_owned()),
            Ok(Ok(Some(_))) => None,
            Ok(Err(e)) => {
                debug!(name = %shared.name, error = %e, "could not check the lease after the work failed");
                None
            }
            Err(_) => None,
        }
    }
}
