//! The polling leaser: leases over a minimal two-method store, for stores with nothing more
//! than a conditional put (memcached `add`, an RDBMS row, a file…).
//!
//! **It issues no fencing token.** A holder that stalls past its TTL cannot be told apart from a
//! live one by anything downstream; use [`Coordinator`](crate::Coordinator) over a
//! [`LeaseStore`](crate::LeaseStore) when work must be fenced.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::clock::{Deadline, Stamp};
use crate::store::error::{Error, Result};
use crate::store::validate::{validate_name, validate_ttl};

/// The minimal store the polling leaser needs.
#[async_trait]
pub trait PollingStore: Send + Sync + 'static {
    /// Creates the lease on `name` for `holder` for `ttl` when it is free or expired, or
    /// extends it when `holder` already has it. Returns whether this call created or extended
    /// it, and the holder of the lease after the call.
    async fn try_acquire(
        &self,
        name: &str,
        holder: &[u8],
        ttl: Duration,
    ) -> Result<(bool, Vec<u8>)>;

    /// Deletes the lease on `name` if `holder` has it.
    async fn release(&self, name: &str, holder: &[u8]) -> Result<()>;
}

/// What a [`PollingLease`] knows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PollingState {
    /// `true` while this holder has the lease.
    pub held: bool,
    /// Who has the lease, as of the last successful poll; `None` before it or when unknown.
    pub holder: Option<Vec<u8>>,
}

/// Polls a [`PollingStore`] to take and keep leases.
///
/// Every `poll_every` each lease calls `try_acquire` with its own holder, which takes a free
/// lease or bumps its own TTL, and learns who holds the name otherwise. A lease counts as held
/// until two thirds of the TTL have passed since the start of the last poll that confirmed it,
/// so it is given up locally before the store can hand it to someone else.
#[derive(Clone)]
pub struct PollingLeaser {
    store: Arc<dyn PollingStore>,
    ttl: Duration,
    poll_every: Duration,
}

impl fmt::Debug for PollingLeaser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PollingLeaser")
            .field("ttl", &self.ttl)
            .field("poll_every", &self.poll_every)
            .finish_non_exhaustive()
    }
}

impl PollingLeaser {
    /// A leaser over `store`. `poll_every` must be at most a third of `ttl`, so that a
    /// failed poll is retried before the lease is given up.
    pub fn new(
        store: impl PollingStore,
        ttl: Duration,
        poll_every: Duration,
    ) -> Result<PollingLeaser> {
        validate_ttl(ttl)?;
        if poll_every.is_zero() || poll_every > ttl / 3 {
            return Err(Error::invalid_timings(format!(
                "poll interval ≤ ttl / 3 does not hold: poll every {poll_every:?}, ttl {ttl:?}"
            )));
        }
        Ok(PollingLeaser {
            store: Arc::new(store),
            ttl,
            poll_every,
        })
    }

    /// How long a confirmation keeps the lease held: two thirds of the TTL, measured from the
    /// start of the poll that confirmed it.
    fn keep_for(&self) -> Duration {
        self.ttl * 2 / 3
    }

    /// Starts polling for `name` as `holder` (non-empty bytes that identify this holder).
    pub fn new_lease(&self, name: &str, holder: impl Into<Vec<u8>>) -> Result<PollingLease> {
        validate_name(name, crate::store::validate::DEFAULT_MAX_NAME_BYTES)?;
        let holder = holder.into();
        if holder.is_empty() {
            return Err(Error::invalid_name("polling lease holder is empty"));
        }
        let (tx, rx) = watch::channel(PollingState::default());
        let confirmed = Confirmed::default();
        let stop = CancellationToken::new();
        let task = tokio::spawn(poll(
            self.clone(),
            name.to_owned(),
            holder,
            tx,
            confirmed.clone(),
            stop.clone(),
        ));
        Ok(PollingLease {
            state: rx,
            confirmed,
            keep_for: self.keep_for(),
            stop,
            task: Some(task),
        })
    }
}

/// When a lease confirmed by a poll that started at `confirmed_at` is given up locally.
fn give_up_at(confirmed_at: &Stamp, keep_for: Duration) -> Deadline {
    Deadline::after(*confirmed_at, keep_for)
}

/// Publishes `next` when it differs from the current state.
fn publish(name: &str, tx: &watch::Sender<PollingState>, next: PollingState) {
    tx.send_if_modified(|cur| {
        if *cur != next {
            debug!(name, held = next.held, "polling lease changed");
            *cur = next;
            true
        } else {
            false
        }
    });
}

/// Gives the lease up locally: held is published as `false` first, then the confirmation is
/// forgotten (so [`PollingLease::is_held`] is never `true` in between).
fn give_up(name: &str, tx: &watch::Sender<PollingState>, confirmed: &Confirmed) {
    publish(
        name,
        tx,
        PollingState {
            held: false,
            holder: None,
        },
    );
    confirmed.set(None);
}

async fn poll(
    leaser: PollingLeaser,
    name: String,
    holder: Vec<u8>,
    tx: watch::Sender<PollingState>,
    confirmed: Confirmed,
    stop: CancellationToken,
) {
    let keep_for = leaser.keep_for();
    let mut last_ok: Option<Stamp> = None;
    let mut interval = tokio::time::interval(leaser.poll_every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    'polls: loop {
        // Wait for the next poll; give the lease up at its give-up instant meanwhile.
        loop {
            let deadline = last_ok.as_ref().map(|s| give_up_at(s, keep_for));
            tokio::select! {
                biased;
                _ = stop.cancelled() => break 'polls,
                _ = sleep_until_some(deadline) => {
                    give_up(&name, &tx, &confirmed);
                    last_ok = None;
                }
                _ = interval.tick() => break,
            }
        }
        let start = Stamp::now();
        let bound = leaser.poll_every;
        let call = timeout(bound, leaser.store.try_acquire(&name, &holder, leaser.ttl));
        tokio::pin!(call);
        // The poll may hang up to its bound: the give-up instant does not wait for it.
        let answer = loop {
            let deadline = last_ok.as_ref().map(|s| give_up_at(s, keep_for));
            tokio::select! {
                biased;
                _ = stop.cancelled() => break 'polls,
                r = &mut call => break r,
                _ = sleep_until_some(deadline) => {
                    give_up(&name, &tx, &confirmed);
                    last_ok = None;
                }
            }
        };
        match answer {
            Ok(Ok((_, current))) => {
                let held = current == holder && !give_up_at(&start, keep_for).has_passed();
                if held {
                    // The confirmation first, then `held`: a reader never pairs `held` with a
                    // later give-up instant than the truth.
                    confirmed.set(Some(start));
                    last_ok = Some(start);
                    publish(
                        &name,
                        &tx,
                        PollingState {
                            held: true,
                            holder: Some(current),
                        },
                    );
                } else {
                    // Someone else's, or ours but confirmed too late to count.
                    let other = (current != holder).then_some(current);
                    publish(
                        &name,
                        &tx,
                        PollingState {
                            held: false,
                            holder: other,
                        },
                    );
                    confirmed.set(None);
                    last_ok = None;
                }
            }
            Ok(Err(e)) => {
                warn!(name, error = %e, "polling lease: try_acquire failed");
            }
            Err(_) => {
                warn!(name, "polling lease: try_acquire timed out");
            }
        }
    }
    if tx.borrow().held {
        give_up(&name, &tx, &confirmed);
        let _ = timeout(leaser.poll_every, leaser.store.release(&name, &holder)).await;
    }
    confirmed.set(None);
    tx.send_replace(PollingState::default());
}

/// Waits for `deadline` (woken at once after a resume from suspend), or forever when there is
/// none.
async fn sleep_until_some(deadline: Option<Deadline>) {
    match deadline {
        Some(at) => at.reached().await,
        None => std::future::pending().await,
    }
}

/// The start of the last poll that confirmed the lease, shared by the poll task and the
/// [`PollingLease`], so that [`PollingLease::is_held`] reads the clock itself.
#[derive(Debug, Clone, Default)]
struct Confirmed(Arc<Mutex<Option<Stamp>>>);

impl Confirmed {
    fn set(&self, at: Option<Stamp>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = at;
    }

    fn get(&self) -> Option<Stamp> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One name polled by a [`PollingLeaser`]. Dropping it stops polling (without releasing);
/// [`close`](PollingLease::close) stops and releases.
#[derive(Debug)]
pub struct PollingLease {
    state: watch::Receiver<PollingState>,
    confirmed: Confirmed,
    keep_for: Duration,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl PollingLease {
    /// `true` while this holder has the lease: the last poll that confirmed it started less
    /// than two thirds of the TTL ago, by the local clock ([`Stamp`]: monotonic, and on Linux
    /// counting through a suspend).
    ///
    /// It reads the clock on every call, so it turns `false` at the give-up instant whatever
    /// the poll task is doing (a poll hanging on the store, a task starved of the runtime, a
    /// machine just resumed). The store can hand the lease to someone else only once the whole
    /// TTL has passed since the confirming poll reached it, so the third of the TTL in between
    /// is the margin for clock drift and for the poll's own travel time. There is no fencing
    /// token: work that must not overlap has to check `is_held()` before each step and keep
    /// each step well within that margin.
    pub fn is_held(&self) -> bool {
        self.state.borrow().held
            && self
                .confirmed
                .get()
                .is_some_and(|at| !give_up_at(&at, self.keep_for).has_passed())
    }

    /// Who holds the lease, as of the last successful poll.
    pub fn holder(&self) -> Option<Vec<u8>> {
        self.state.borrow().holder.clone()
    }

    /// A receiver notified on every change of [`PollingState`]. `held` turns `false` there when
    /// the give-up instant's timer fires (on tokio's clock, so after a machine suspend it fires
    /// late); [`is_held`](Self::is_held) reads the clock and is right at once.
    pub fn changes(&self) -> watch::Receiver<PollingState> {
        self.state.clone()
    }

    /// Stops polling and releases the lease if held.
    pub async fn close(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for PollingLease {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
