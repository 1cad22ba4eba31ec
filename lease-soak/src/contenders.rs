//! The contenders: each campaigns for one lease through `Coordinator::run_elected` and, under
//! every term it wins, runs a few fenced critical sections recorded in the shared [`History`].
//!
//! A section is entered only while the term is live with at least [`SECTION_GUARD`] left before
//! its local deadline, and lasts at most [`SECTION_MAX`]: a section never outlives the local
//! deadline, and the deadline comes at least `lease − deadline` (a third of the lease) before
//! the store lets anyone else claim. So the checker sees exactly the intervals the lease must
//! keep apart, with a margin far larger than the sections.
//!
//! How many sections a term runs is drawn from the seed and the term: most terms are short
//! (the holder resigns and the name changes hands at once), some run for a second or two, so
//! that renewals run and faults hit holders.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_conformance::History;
use lease_core::{Coordinator, ErrorKind, LeaseStore, Term, Timings};
use tokio::task::JoinHandle;

use crate::schedule::Rng;

/// The longest critical section.
pub(crate) const SECTION_MAX: Duration = Duration::from_millis(20);
/// No section starts with less than this left before the term's local deadline.
pub(crate) const SECTION_GUARD: Duration = Duration::from_millis(100);

/// No contender holds the lease.
const NO_HOLDER: usize = usize::MAX;

/// What every contender of one backend records into.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    /// The history checker.
    pub(crate) history: History,
    /// Terms won (the work started).
    pub(crate) terms_won: Arc<AtomicU64>,
    /// Terms whose work stopped because the term was lost or about to be.
    pub(crate) terms_lost: Arc<AtomicU64>,
    /// Step-down failures: work under a lost term that did not return within the grace.
    pub(crate) step_down_failures: Arc<Mutex<Vec<String>>>,
    /// The contender whose work runs under a term now, or [`NO_HOLDER`].
    holder: Arc<AtomicUsize>,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            history: History::new(),
            terms_won: Arc::default(),
            terms_lost: Arc::default(),
            step_down_failures: Arc::default(),
            holder: Arc::new(AtomicUsize::new(NO_HOLDER)),
        }
    }
}

impl Record {
    /// The contender whose work runs under a term now, if any.
    pub(crate) fn holder(&self) -> Option<usize> {
        Some(self.holder.load(Ordering::SeqCst)).filter(|&h| h != NO_HOLDER)
    }

    /// The step-down failures so far.
    pub(crate) fn failures(&self) -> Vec<String> {
        self.step_down_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// One contender: its coordinator and the task running `run_elected`.
pub(crate) struct Contender {
    label: String,
    coordinator: Coordinator,
    task: JoinHandle<lease_core::Result<()>>,
}

impl Contender {
    /// Starts contender `index` campaigning for `name` on `store`.
    pub(crate) fn spawn(
        index: usize,
        store: Arc<dyn LeaseStore>,
        timings: Timings,
        name: &str,
        seed: u64,
        record: &Record,
    ) -> lease_core::Result<Contender> {
        let label = format!("contender-{index}");
        let failures = Arc::clone(&record.step_down_failures);
        let coordinator = Coordinator::builder_arc(store)
            .instance(label.clone())
            .timings(timings)
            .fail_action(move |f| {
                failures
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(format!(
                        "{} term {} of '{}': {}",
                        f.instance, f.term, f.name, f.error
                    ));
            })
            .build()?;
        let c = coordinator.clone();
        let name = name.to_owned();
        let record = record.clone();
        let task = tokio::spawn(async move {
            c.run_elected(&name, move |term: Term| {
                let rng = Rng::new(seed, &format!("{}/term-{}", term.instance(), term.token()));
                work(index, term, rng, record.clone())
            })
            .await
        });
        Ok(Contender {
            label,
            coordinator,
            task,
        })
    }

    /// Closes the coordinator (work is told to stop, leases released) and waits for
    /// `run_elected` to return, up to `within`; any error is returned as a message.
    pub(crate) async fn stop(self, within: Duration) -> Result<(), String> {
        let closed = self.coordinator.close().await;
        let joined = tokio::time::timeout(within, self.task).await;
        let label = &self.label;
        match joined {
            Err(_) => Err(format!(
                "{label}: run_elected did not return within {within:?}"
            )),
            Ok(Err(e)) => Err(format!("{label}: task failed: {e}")),
            Ok(Ok(Err(e))) => Err(format!("{label}: run_elected returned an error: {e}")),
            Ok(Ok(Ok(()))) => closed.map_err(|e| format!("{label}: close: {e}")),
        }
    }
}

/// The work under one term.
async fn work(index: usize, term: Term, mut rng: Rng, record: Record) -> Result<(), Infallible> {
    record.terms_won.fetch_add(1, Ordering::Relaxed);
    record.holder.store(index, Ordering::SeqCst);
    let who = term.instance().to_owned();
    let sections = if rng.chance(30) {
        rng.between(40, 150)
    } else {
        rng.between(1, 10)
    };
    let max_ms = u64::try_from(SECTION_MAX.as_millis()).unwrap_or(20);
    // Bounded: at most `sections` turns.
    for _ in 0..sections {
        if term.check().is_err() || term.deadline_in() < SECTION_GUARD {
            let lost = match term.check() {
                Err(e) => e.is(ErrorKind::Lost),
                // Live, but too close to its deadline: renewals are failing.
                Ok(()) => true,
            };
            if lost {
                record.terms_lost.fetch_add(1, Ordering::Relaxed);
            }
            break;
        }
        let section = record.history.enter(&who, term.token());
        // The history counts a refused write; nothing else to do with it here.
        let _accepted = section.fenced_write();
        tokio::time::sleep(Duration::from_millis(rng.between(2, max_ms))).await;
        section.exit();
        let gap = Duration::from_millis(rng.between(1, 10));
        tokio::select! {
            biased;
            _ = term.done() => {}
            _ = tokio::time::sleep(gap) => {}
        }
    }
    let _ = record
        .holder
        .compare_exchange(index, NO_HOLDER, Ordering::SeqCst, Ordering::SeqCst);
    Ok(())
}
