//! A term: one holding of a lease, with its fencing token, and the keeper that renews it.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::{Instant, timeout};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::clock::{Deadline, Stamp};
use crate::engine::context::CoordShared;
use crate::engine::renewer::Renewer;
use crate::store::error::{Error, ErrorKind, Result};
use crate::store::lease_store::LeaseStore;
use crate::store::lease_store::{permits_of, slots_of};
use crate::store::record::{Grant, HolderToken};
use crate::store::slots::SlotFinish;
use crate::telemetry::{self, LossCause};
use crate::timings::Timings;

/// One holding of a lease: from a successful claim until it is resigned, lost or closed.
///
/// A `Term` carries the **fencing token** ([`token`](Term::token)), which strictly increases
/// every time the name changes hands. Pass it to every downstream system that must refuse a
/// stale holder (`UPDATE … SET … WHERE fence < $token`).
///
/// While the term lives, a keeper task renews the lease every
/// [`renew_every`](Timings::renew_every). The term ends:
///
/// - with [`Lost`](ErrorKind::Lost) the moment a renewal reports the lease gone, or when no
///   renewal has succeeded within the local [`deadline`](Timings::deadline) of the start of the
///   last one that did — which is before the store lets anyone else claim;
/// - with [`Closed`](ErrorKind::Closed) when its coordinator closes;
/// - without an error when [`resign`](Term::resign)ed.
///
/// `Term` is a cheap handle; clones share one term. When the last clone is dropped, the keeper
/// stops and releases the lease in the background. The task running a [`run`](Term::run)'s
/// work holds a clone until it ends, so dropping the run (or every other clone) never frees
/// the name under running work. Renewals go on after
/// [`done`](Term::done) fires for a close, until the holder resigns or drops the term, so the
/// name is never freed while its work is still winding down.
#[derive(Clone)]
pub struct Term {
    handle: Arc<TermHandle>,
}

struct TermHandle {
    shared: Arc<TermShared>,
}

impl Drop for TermHandle {
    fn drop(&mut self) {
        self.shared.signal_stop();
    }
}

/// How the keeper gives the lease back once it has stopped renewing.
enum Ending {
    /// `release` (or `release_permit`, for a permit).
    Release,
    /// `finish_slot` on the term's own store, through its slots: records a scheduler round as
    /// run to its end and gives the name back. Performed in place of the release, after the
    /// last renewal, so no renewal can race the finish and find the lease gone just after the
    /// finish gave it back.
    FinishSlot {
        instant_ms: i64,
        passed_ms: Option<i64>,
    },
}

struct Status {
    /// Start of the last claim or renewal known to have succeeded.
    last_ok: Stamp,
    /// Start of the last renewal attempt (of the claim before the first), for the renewer.
    last_attempt: Stamp,
    /// The store answered that the lease is gone: nothing to release.
    store_says_gone: bool,
    /// Time left by the store's clock, as of `last_ok`'s answer.
    expires_in: Duration,
    /// The error the term ended with; `None` while live or when resigned.
    end: Option<Error>,
    /// When the term ended (its `done` fired), for the grace its work used.
    ended_at: Option<Stamp>,
    /// How the keeper gives the lease back; taken when it starts to.
    ending: Ending,
    /// Result of the release at the end, once done.
    released: Option<Result<bool>>,
    /// The answer of the finish, when the ending was `FinishSlot` and the store answered.
    finish: Option<Result<SlotFinish>>,
    /// How many runs (and the tasks of their work) are using this term. Changed only under
    /// this lock, together with the checks in `try_add_run` and `stop_if_unused`, so a run and
    /// `Coordinator::close` never both believe they own the release.
    runs: usize,
}

pub(crate) struct TermShared {
    pub(crate) name: String,
    /// The permit held, for a term of a counted name.
    pub(crate) permit: Option<u32>,
    pub(crate) token: u64,
    pub(crate) instance: String,
    pub(crate) holder: HolderToken,
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) timings: Timings,
    /// `false` for stores whose leases never expire: no renewals, no deadline.
    pub(crate) expires: bool,
    pub(crate) coord: Arc<CoordShared>,
    /// Fires when the term ends, for any reason.
    pub(crate) done: CancellationToken,
    /// Fires when the term is lost.
    pub(crate) lost: CancellationToken,
    /// Tells the keeper to stop renewing and release.
    pub(crate) stop: CancellationToken,
    /// Fires when the keeper has finished (released or given up).
    pub(crate) finished: CancellationToken,
    /// The coordinator's renewer, when it renews this term (coalesced renewals); `None` when
    /// the term's own keeper task does.
    renewer: Option<Arc<Renewer>>,
    status: Mutex<Status>,
}

impl TermShared {
    /// Renews what this term holds: its lease, or its permit.
    async fn renew(&self, ttl: Duration) -> Result<Option<Grant>> {
        match self.permit {
            None => self.store.renew(&self.name, &self.holder, ttl).await,
            Some(p) => {
                permits_of(&*self.store)?
                    .renew_permit(&self.name, p, &self.holder, ttl)
                    .await
            }
        }
    }

    /// Verifies what this term holds: its term and time left, `None` when the store no longer
    /// holds it for this holder (a permit is found by its holder token, and must be this one).
    pub(crate) async fn verify(&self) -> Result<Option<Grant>> {
        match self.permit {
            None => self.store.verify(&self.name, &self.holder).await,
            Some(p) => Ok(permits_of(&*self.store)?
                .verify_permit(&self.name, &self.holder)
                .await?
                .filter(|g| g.permit == p && g.grant.term == self.token)
                .map(|g| g.grant)),
        }
    }

    /// Gives back what this term holds, as its ending says: `Ok(true)` when it was still held
    /// and has been given back.
    async fn release(&self) -> Result<bool> {
        let ending = std::mem::replace(&mut self.status().ending, Ending::Release);
        if let Ending::FinishSlot {
            instant_ms,
            passed_ms,
        } = ending
        {
            let result = match slots_of(&*self.store) {
                Ok(slots) => {
                    slots
                        .finish_slot(&self.name, &self.holder, instant_ms, passed_ms)
                        .await
                }
                Err(e) => Err(e),
            };
            self.status().finish = Some(result.clone());
            return result.map(|f| f.released);
        }
        match self.permit {
            None => self.store.release(&self.name, &self.holder).await,
            Some(p) => {
                permits_of(&*self.store)?
                    .release_permit(&self.name, p, &self.holder)
                    .await
            }
        }
    }

    /// Tells whoever renews this term to stop and release it.
    pub(crate) fn signal_stop(&self) {
        self.stop.cancel();
        if let Some(renewer) = &self.renewer {
            renewer.stopped();
        }
    }

    /// Start of the last claim or renewal known to have succeeded.
    pub(crate) fn last_ok(&self) -> Stamp {
        self.status().last_ok
    }

    /// Start of the last renewal attempt (the claim's, before the first).
    pub(crate) fn last_attempt(&self) -> Stamp {
        self.status().last_attempt
    }

    /// A renewal attempt starts at `at`.
    pub(crate) fn attempted(&self, at: Stamp) {
        self.status().last_attempt = at;
    }

    /// A renewal sent at `start` succeeded with `grant`: the deadline now counts from `start`.
    /// Returns the time that was left before the old deadline.
    pub(crate) fn renewed(&self, start: Stamp, grant: Grant, deadline: Duration) -> Duration {
        let mut st = self.status();
        let left = st.last_ok.remaining(deadline);
        st.last_ok = start;
        st.expires_in = grant.expires_in;
        left
    }

    /// The store answered that the lease is gone: the release at the end is skipped.
    pub(crate) fn gone_from_store(&self) {
        self.status().store_says_gone = true;
    }

    fn status(&self) -> MutexGuard<'_, Status> {
        // A poisoned lock only means a panic elsewhere while it was held; the data is plain.
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the term with `err` (first reason wins, except that Lost overrides Closed).
    /// Returns `true` when this call is the one that marked the term lost.
    pub(crate) fn end(&self, err: Option<Error>) -> bool {
        let mut st = self.status();
        let lost = err.as_ref().is_some_and(|e| e.is(ErrorKind::Lost));
        let replace = if self.done.is_cancelled() {
            lost && !self.lost.is_cancelled()
        } else {
            true
        };
        if replace {
            st.end = err;
        }
        let first_end = st.ended_at.is_none();
        if first_end {
            st.ended_at = Some(Stamp::now());
        }
        drop(st);
        let newly_lost = lost && !self.lost.is_cancelled();
        if newly_lost {
            // Lost: this process no longer holds the term, whatever the keeper does next.
            telemetry::term_ended(&self.name, self.token);
            self.lost.cancel();
        }
        if first_end {
            self.coord.term_ended(&self.name, self.token);
        }
        if !self.done.is_cancelled() {
            self.done.cancel();
        }
        newly_lost
    }

    /// When the term ended; `None` while it is live.
    pub(crate) fn ended_at(&self) -> Option<Stamp> {
        self.status().ended_at
    }

    /// The error the term ended with; `None` while live or after a resign.
    pub(crate) fn end_error(&self) -> Option<Error> {
        self.status().end.clone()
    }

    /// Marks one more run (or work task) as using the term, unconditionally.
    pub(crate) fn add_run(&self) {
        self.status().runs += 1;
    }

    /// Marks one more run as using the term, unless the term has ended, its local deadline has
    /// passed, or its release has begun: then `false`, and nothing is marked. `close` ends a
    /// term before it looks at its runs (under the same lock), so a run either is seen by
    /// `close` — which then leaves the release to the run — or sees the end here and starts
    /// no work.
    pub(crate) fn try_add_run(&self) -> bool {
        let mut st = self.status();
        let ended = self.done.is_cancelled()
            || self.stop.is_cancelled()
            || (self.expires && Deadline::after(st.last_ok, self.timings.deadline()).has_passed());
        if !ended {
            st.runs += 1;
        }
        !ended
    }

    /// Unmarks one run (or work task).
    pub(crate) fn leave_run(&self) {
        let mut st = self.status();
        st.runs = st.runs.saturating_sub(1);
    }

    /// How many runs and work tasks are using the term.
    pub(crate) fn runs(&self) -> usize {
        self.status().runs
    }

    /// Tells the keeper to stop and release if no run is using the term; `false` (and nothing
    /// done) otherwise. Decided under the lock that `try_add_run` takes.
    pub(crate) fn stop_if_unused(&self) -> bool {
        let st = self.status();
        let unused = st.runs == 0;
        drop(st);
        if unused {
            self.signal_stop();
        }
        unused
    }

    /// Ends the term as lost, logged at warn and counted under `cause` (once per term).
    pub(crate) fn lose(&self, why: impl fmt::Display, cause: LossCause) {
        let err = Error::lost(&self.name, why);
        if self.end(Some(err.clone())) {
            warn!(name = %self.name, term = self.token, instance = %self.instance, "{err}");
            telemetry::lost(&self.name, cause);
        }
    }

    /// Stops the keeper and waits for its release.
    pub(crate) async fn stop_and_wait(&self) -> Result<bool> {
        self.signal_stop();
        self.finished.cancelled().await;
        self.status().released.clone().unwrap_or(Ok(false))
    }
}

impl Term {
    pub(crate) fn start(
        name: String,
        permit: Option<u32>,
        token: u64,
        holder: HolderToken,
        claimed_at: Stamp,
        grant: Grant,
        coord: Arc<CoordShared>,
    ) -> Term {
        let expires = coord.store.capabilities().expiry;
        // Plain leases go to the coordinator's renewer when it has one; permits keep their own
        // keeper.
        let renewer = match (&coord.renewer, permit) {
            (Some(renewer), None) if expires => Some(renewer.clone()),
            _ => None,
        };
        let shared = Arc::new(TermShared {
            name,
            permit,
            token,
            instance: coord.instance.clone(),
            holder,
            store: coord.store.clone(),
            timings: coord.timings,
            expires,
            coord,
            done: CancellationToken::new(),
            lost: CancellationToken::new(),
            stop: CancellationToken::new(),
            finished: CancellationToken::new(),
            renewer,
            status: Mutex::new(Status {
                last_ok: claimed_at,
                last_attempt: claimed_at,
                store_says_gone: false,
                expires_in: grant.expires_in,
                end: None,
                ended_at: None,
                ending: Ending::Release,
                released: None,
                finish: None,
                runs: 0,
            }),
        });
        telemetry::term_started(&shared.name, token);
        shared.coord.term_started(&shared.name, token, claimed_at);
        let span =
            info_span!("lease", name = %shared.name, term = token, instance = %shared.instance);
        match &shared.renewer {
            Some(renewer) => renewer.add(shared.clone()),
            None => {
                tokio::spawn(keep(shared.clone()).instrument(span));
            }
        }
        Term {
            handle: Arc::new(TermHandle { shared }),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<TermShared> {
        &self.handle.shared
    }

    /// The lease's name.
    pub fn name(&self) -> &str {
        &self.shared().name
    }

    /// The fencing token: strictly greater than every token issued for this name before (for
    /// a counted name: before, across all its permits).
    pub fn token(&self) -> u64 {
        self.shared().token
    }

    /// The permit held, for a term of a counted name ([`Permits`](crate::Permits)); `None`
    /// for a plain lease.
    pub fn permit(&self) -> Option<u32> {
        self.shared().permit
    }

    /// The instance label of this holder, as others see it.
    pub fn instance(&self) -> &str {
        &self.shared().instance
    }

    /// The holder token this term was claimed under. Stores use it to verify the lease inside
    /// a transaction; it is a capability, so do not share it.
    pub fn holder(&self) -> &HolderToken {
        &self.shared().holder
    }

    /// The timings this term is held with.
    pub fn timings(&self) -> Timings {
        self.shared().timings
    }

    /// Time left on the lease by the store's last report, less the local time since the start of
    /// the request that got it (a lower bound).
    pub fn expires_in(&self) -> Duration {
        let st = self.shared().status();
        st.expires_in.saturating_sub(st.last_ok.elapsed())
    }

    /// Time left before the local deadline ends the term unless a renewal succeeds.
    /// `Duration::MAX` on a store whose leases never expire.
    pub fn deadline_in(&self) -> Duration {
        let shared = self.shared();
        if !shared.expires {
            return Duration::MAX;
        }
        self.deadline().remaining()
    }

    /// The local deadline: the term ends unless a renewal succeeds before it.
    /// [`Deadline::never`] on a store whose leases never expire. A later renewal moves the
    /// deadline; read it again after each.
    pub fn deadline(&self) -> Deadline {
        let shared = self.shared();
        if !shared.expires {
            return Deadline::never();
        }
        Deadline::after(shared.status().last_ok, shared.timings.deadline())
    }

    /// `true` while the term has not ended and its local deadline has not passed. It reads the
    /// clock, so a process resumed after a suspend sees at once that its time ran out.
    pub fn is_live(&self) -> bool {
        !self.shared().done.is_cancelled() && !self.deadline_in().is_zero()
    }

    /// `Ok` while the term [`is_live`](Term::is_live); otherwise the error it ended with
    /// (Lost when the deadline has passed but the keeper has not yet woken).
    pub fn check(&self) -> Result<()> {
        if self.is_live() {
            return Ok(());
        }
        Err(self.err().unwrap_or_else(|| {
            if self.shared().done.is_cancelled() {
                Error::new(
                    ErrorKind::Closed,
                    format!("lease '{}' was resigned", self.name()),
                )
            } else {
                Error::lost(self.name(), "the local deadline has passed")
            }
        }))
    }

    /// Resolves when the term ends, for any reason.
    pub fn done(&self) -> WaitForCancellationFuture<'_> {
        self.shared().done.cancelled()
    }

    /// Resolves when the term is lost (not when it is resigned or closed).
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.shared().lost.cancelled()
    }

    /// `true` once the term was lost.
    pub fn is_lost(&self) -> bool {
        self.shared().lost.is_cancelled()
    }

    /// Why the term ended: `Lost` or `Closed`; `None` while it is live or after a resign.
    pub fn err(&self) -> Option<Error> {
        self.shared().status().end.clone()
    }

    /// Ends the term and releases the lease, so the next claim succeeds at once with a higher
    /// term. Waits for the release (bounded by the attempt timeout); a failed release leaves the
    /// lease to expire by its TTL and is reported here. Resigning twice is harmless.
    pub async fn resign(&self) -> Result<()> {
        let shared = self.shared();
        shared.end(None);
        shared.stop_and_wait().await.map(|_| ())
    }

    /// Resigns with `finish_slot` in place of the release: the keeper stops renewing, then
    /// records the scheduler round of `instant_ms` as run to its end on this term's own store
    /// and gives the name back. Returns the finish's answer; `None` when the keeper
    /// performed no finish (its release had begun already, or the store had said the lease
    /// is gone) or the finish did not answer within the attempt timeout.
    pub(crate) async fn resign_finishing(
        &self,
        instant_ms: i64,
        passed_ms: Option<i64>,
    ) -> Option<Result<SlotFinish>> {
        let shared = self.shared();
        shared.status().ending = Ending::FinishSlot {
            instant_ms,
            passed_ms,
        };
        let _ = self.resign().await;
        shared.status().finish.take()
    }
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term")
            .field("name", &self.name())
            .field("token", &self.token())
            .field("instance", &self.instance())
            .field("live", &self.is_live())
            .finish()
    }
}

/// The keeper: renews at the cadence until told to stop or the term is lost, then releases.
async fn keep(shared: Arc<TermShared>) {
    let t = shared.timings;
    let mut last_attempt = shared.status().last_ok;
    loop {
        if !shared.expires {
            break;
        }
        let last_ok = shared.status().last_ok;
        let deadline = Deadline::after(last_ok, t.deadline());
        let next = last_attempt.tokio_instant_after(t.renew_every());
        tokio::select! {
            biased;
            _ = shared.stop.cancelled() => break,
            _ = shared.lost.cancelled() => break,
            // Wakes at the renewal time, or at the deadline, also right after a resume from
            // suspend (tokio's timer alone would fire up to the time slept late).
            _ = deadline.reached_or(next) => {}
        }
        if deadline.has_passed() {
            shared.lose(
                format_args!(
                    "no renewal succeeded within the local deadline of {:?}",
                    t.deadline()
                ),
                LossCause::Deadline,
            );
            break;
        }
        if Instant::now() < next {
            continue;
        }
        let start = Stamp::now();
        last_attempt = start;
        let left = last_ok.remaining(t.deadline());
        let bound = t.attempt_timeout().min(left);
        let attempt = timeout(bound, shared.renew(t.lease()));
        let outcome = tokio::select! {
            biased;
            _ = shared.stop.cancelled() => break,
            r = attempt => r,
            // The attempt's timeout runs on tokio's clock; a suspend during the attempt must
            // still end the term at the deadline.
            () = deadline.reached() => {
                shared.lose(
                    format_args!(
                        "no renewal succeeded within the local deadline of {:?}",
                        t.deadline()
                    ),
                    LossCause::Deadline,
                );
                break;
            }
        };
        if outcome.is_ok() {
            telemetry::renew_answered(&shared.name, start.elapsed());
        }
        match outcome {
            Ok(Ok(Some(grant))) => {
                let mut st = shared.status();
                // Time left counts from the start of the request that got it.
                st.last_ok = start;
                st.expires_in = grant.expires_in;
                drop(st);
                telemetry::renewed(&shared.name, left);
                debug!(expires_in = ?grant.expires_in, "renewed");
            }
            Ok(Ok(None)) => {
                shared.gone_from_store();
                shared.lose(
                    "the store reports the lease is no longer held",
                    LossCause::Store,
                );
                break;
            }
            Ok(Err(e)) => {
                telemetry::renew_failed(&shared.name, false);
                warn!(error = %e, deadline_in = ?last_ok.remaining(t.deadline()), "renewal failed; retrying");
            }
            Err(_) => {
                telemetry::renew_failed(&shared.name, true);
                warn!(bound = ?bound, deadline_in = ?last_ok.remaining(t.deadline()), "renewal timed out; retrying");
            }
        }
    }
    finish(shared).await;
}

/// The end of a term's keeping, once it is lost or told to stop: waits for the stop (work under
/// a lost term may still be winding down), then releases, unless the store said the lease is
/// gone, and marks the term finished.
pub(crate) async fn finish(shared: Arc<TermShared>) {
    let t = shared.timings;
    shared.stop.cancelled().await;
    let store_says_gone = shared.status().store_says_gone;
    let released = if store_says_gone {
        Ok(false)
    } else {
        match timeout(t.attempt_timeout(), shared.release()).await {
            Ok(Ok(released)) => {
                info!(released, "lease released");
                Ok(released)
            }
            Ok(Err(e)) => {
                warn!(error = %e, "release failed; the lease expires by its TTL");
                Err(e)
            }
            Err(_) => {
                warn!("release timed out; the lease expires by its TTL");
                Err(Error::timeout("release", t.attempt_timeout()))
            }
        }
    };
    shared.end(None);
    // Only now has this process let go of the lease (or given it up to its TTL): the gauges
    // said held until here.
    telemetry::term_ended(&shared.name, shared.token);
    shared.status().released = Some(released);
    shared.finished.cancel();
}
