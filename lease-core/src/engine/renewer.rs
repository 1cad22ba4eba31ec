//! Coalesced renewals: one renewer per coordinator renews every plain lease it holds with
//! [`LeaseStore::renew_many`], one batch per renew period, instead of one task and one round
//! trip per term.
//!
//! Each term keeps its own deadline, exactly as the per-term keeper keeps it:
//!
//! - a term's deadline counts from the **start** of the batch that renewed it (the stamp is
//!   taken before the request is sent);
//! - an answer `None` for a name ends exactly that term (lost, the store said so);
//! - an error, an unknown outcome or a timeout moves no deadline: the next tick sends again;
//! - a batch is bounded by the attempt timeout, and while it is in flight each of its terms
//!   is lost at its own deadline (the batch goes on for the others), so a slow batch never
//!   keeps a term past its deadline; batches are split at [`MAX_RENEWALS_PER_CALL`], oldest
//!   deadline first;
//! - a term is renewed at most one renew period after its last attempt; terms whose last
//!   attempt is at least a quarter period old ride along with a due batch, so the terms of a
//!   coordinator settle on one batch per period.
//!
//! Releases stay per term: when a term is told to stop (resign, the last handle dropped, a
//! close) or is lost, the renewer drops it and a short task gives the lease back, as the
//! per-term keeper does once it stops.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, timeout};
use tracing::{Instrument, debug, info_span, warn};

use crate::clock::{Deadline, Stamp};
use crate::engine::term::{TermShared, finish};
use crate::store::error::Result;
use crate::store::lease_store::LeaseStore;
use crate::store::record::{Grant, MAX_RENEWALS_PER_CALL, RenewItem};
use crate::telemetry::{self, LossCause};
use crate::timings::Timings;

/// The renewer of one coordinator's plain leases on its store.
pub(crate) struct Renewer {
    store: Arc<dyn LeaseStore>,
    timings: Timings,
    state: Mutex<State>,
    /// Woken when a term joins or is told to stop.
    wake: Notify,
}

#[derive(Default)]
struct State {
    terms: Vec<Arc<TermShared>>,
    /// Whether the renewer's task runs; it ends when it holds no term, and the next term
    /// starts it again.
    running: bool,
}

impl Renewer {
    pub(crate) fn new(store: Arc<dyn LeaseStore>, timings: Timings) -> Renewer {
        Renewer {
            store,
            timings,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere while it was held; the data is plain.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Renews `term` from now on, with the others.
    pub(crate) fn add(self: &Arc<Self>, term: Arc<TermShared>) {
        let start = {
            let mut st = self.state();
            st.terms.push(term);
            !std::mem::replace(&mut st.running, true)
        };
        if start {
            let renewer = self.clone();
            tokio::spawn(renewer.run().instrument(info_span!("lease renewer")));
        } else {
            self.wake.notify_one();
        }
    }

    /// A term was told to stop: the renewer drops it and releases it now, not at its next tick.
    pub(crate) fn stopped(&self) {
        self.wake.notify_one();
    }

    /// The terms that still need renewing; the others (stopped, lost, past their deadline) are
    /// dropped, and each gets its release task. `None` when none is left: the task then ends.
    fn sweep(&self) -> Option<Vec<Arc<TermShared>>> {
        let deadline = self.timings.deadline();
        let mut st = self.state();
        let mut gone = Vec::new();
        st.terms.retain(|term| {
            if !term.stop.is_cancelled()
                && !term.lost.is_cancelled()
                && Deadline::after(term.last_ok(), deadline).has_passed()
            {
                term.lose(
                    format_args!("no renewal succeeded within the local deadline of {deadline:?}"),
                    LossCause::Deadline,
                );
            }
            let keep = !term.stop.is_cancelled() && !term.lost.is_cancelled();
            if !keep {
                gone.push(term.clone());
            }
            keep
        });
        if st.terms.is_empty() {
            st.running = false;
        }
        let left = (!st.terms.is_empty()).then(|| st.terms.clone());
        drop(st);
        for term in gone {
            let span = info_span!("lease", name = %term.name, term = term.token, instance = %term.instance);
            tokio::spawn(finish(term).instrument(span));
        }
        left
    }

    async fn run(self: Arc<Self>) {
        let t = self.timings;
        let every = t.renew_every();
        loop {
            let Some(terms) = self.sweep() else {
                return;
            };
            // When the first term is due, or the first deadline passes.
            let mut next = None::<Instant>;
            let mut first_deadline = Deadline::never();
            for term in &terms {
                let due = term.last_attempt().tokio_instant_after(every);
                next = Some(next.map_or(due, |n| n.min(due)));
                first_deadline = first_deadline.min(Deadline::after(term.last_ok(), t.deadline()));
            }
            let Some(next) = next else { continue };
            if Instant::now() < next {
                tokio::select! {
                    biased;
                    () = self.wake.notified() => continue,
                    _ = first_deadline.reached_or(next) => continue,
                }
            }
            // Due: every term whose last attempt is a quarter period old or more.
            let mut batch: Vec<Arc<TermShared>> = terms
                .into_iter()
                .filter(|term| term.last_attempt().elapsed() >= every / 4)
                .collect();
            // Oldest deadline first, so a split batch serves first the terms with least time.
            batch.sort_by_key(|term| term.last_ok().remaining(t.deadline()));
            for chunk in batch.chunks(MAX_RENEWALS_PER_CALL) {
                self.renew_chunk(chunk).await;
            }
        }
    }

    /// One batch: sent at once and bounded by the attempt timeout. While it is in flight, each
    /// term of it whose own deadline passes is lost then and there, without cutting the batch
    /// short for the others (a batch cut at its oldest term's deadline would leave every term
    /// of it unrenewed whenever the store is slower than that term's time left).
    async fn renew_chunk(&self, chunk: &[Arc<TermShared>]) {
        let t = self.timings;
        let deadline_of = |term: &TermShared| Deadline::after(term.last_ok(), t.deadline());
        let chunk: Vec<Arc<TermShared>> = chunk
            .iter()
            .filter(|term| !deadline_of(term).has_passed())
            .cloned()
            .collect();
        if chunk.is_empty() {
            // The sweep ends them at the next turn.
            return;
        }
        let items: Vec<RenewItem<'_>> = chunk
            .iter()
            .map(|term| RenewItem {
                name: &term.name,
                holder: &term.holder,
            })
            .collect();
        let bound = t.attempt_timeout();
        // Every deadline this batch moves counts from here: before the request is sent.
        let start = Stamp::now();
        for term in &chunk {
            term.attempted(start);
        }
        let attempt = timeout(bound, self.store.renew_many(&items, t.lease()));
        tokio::pin!(attempt);
        let outcome = loop {
            // The first deadline among the terms of the batch still live; the timers run on
            // the boot clock, so a suspend during the batch still ends each term on time.
            let next = chunk
                .iter()
                .filter(|term| !term.lost.is_cancelled())
                .map(|term| deadline_of(term))
                .fold(Deadline::never(), Deadline::min);
            tokio::select! {
                biased;
                r = &mut attempt => break r,
                () = next.reached() => {
                    for term in &chunk {
                        if !term.lost.is_cancelled() && deadline_of(term).has_passed() {
                            term.lose(
                                format_args!(
                                    "no renewal succeeded within the local deadline of {:?}",
                                    t.deadline()
                                ),
                                LossCause::Deadline,
                            );
                        }
                    }
                }
            }
        };
        let chunk = &chunk[..];
        let deadline = chunk
            .iter()
            .map(|term| deadline_of(term))
            .fold(Deadline::never(), Deadline::min);
        let took = start.elapsed();
        #[cfg(any(test, feature = "test-util"))]
        let start = if testing::stamps_at_answer() {
            Stamp::now()
        } else {
            start
        };
        match outcome {
            Ok(Ok(answers)) if answers.len() == chunk.len() => {
                self.answered(chunk, answers, start, took);
            }
            Ok(Ok(answers)) => {
                for term in chunk {
                    telemetry::renew_failed(&term.name, false);
                }
                warn!(
                    sent = chunk.len(),
                    answered = answers.len(),
                    "the store answered a renewal batch with the wrong number of answers; \
                     no deadline moved, retrying"
                );
            }
            Ok(Err(e)) => {
                for term in chunk {
                    telemetry::renew_failed(&term.name, false);
                }
                warn!(error = %e, leases = chunk.len(), deadline_in = ?deadline.remaining(), "renewal batch failed; retrying");
            }
            Err(_) => {
                for term in chunk {
                    telemetry::renew_failed(&term.name, true);
                }
                warn!(bound = ?bound, leases = chunk.len(), deadline_in = ?deadline.remaining(), "renewal batch timed out; retrying");
            }
        }
    }

    /// A batch's answers, one per term in order.
    fn answered(
        &self,
        chunk: &[Arc<TermShared>],
        answers: Vec<Result<Option<Grant>>>,
        start: Stamp,
        took: Duration,
    ) {
        let t = self.timings;
        let mut failed = 0usize;
        let mut first_error = None;
        let mut lost = false;
        for (term, answer) in chunk.iter().zip(answers) {
            telemetry::renew_answered(&term.name, took);
            if term.lost.is_cancelled() {
                // Ended at its deadline while the batch was in flight: lost stays lost.
                continue;
            }
            match answer {
                Ok(Some(grant)) => {
                    let left = term.renewed(start, grant, t.deadline());
                    telemetry::renewed(&term.name, left);
                }
                Ok(None) => {
                    term.gone_from_store();
                    term.lose(
                        "the store reports the lease is no longer held",
                        LossCause::Store,
                    );
                    lost = true;
                }
                Err(e) => {
                    telemetry::renew_failed(&term.name, false);
                    failed += 1;
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            warn!(error = %e, failed, leases = chunk.len(), "renewals of a batch failed; retrying them");
        } else {
            debug!(leases = chunk.len(), ?took, "renewal batch answered");
        }
        if lost {
            self.wake.notify_one();
        }
    }
}

/// The break switch of the renewer's tests (feature `test-util`).
#[cfg(any(test, feature = "test-util"))]
pub(crate) mod testing {
    use std::cell::Cell;

    thread_local! {
        static STAMP_AT_ANSWER: Cell<bool> = const { Cell::new(false) };
    }

    /// Deliberately broken: deadlines count from a batch's answer instead of its start.
    pub fn stamp_batches_at_answer(on: bool) {
        STAMP_AT_ANSWER.with(|s| s.set(on));
    }

    pub(super) fn stamps_at_answer() -> bool {
        STAMP_AT_ANSWER.with(Cell::get)
    }
}
