//! The polling leaser: leases over a minimal two-method store, for stores with nothing more
//! than a conditional put (memcached `add`, an RDBMS row, a file…).
//!
//! **It issues no fencing token.** A holder that stalls past its TTL cannot be told apart from a
//! live one by anything downstream; use [`Coordinator`](crate::Coordinator) over a
//! [`LeaseStore`](crate::LeaseStore) when work must be fenced.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::validate::{validate_name, validate_ttl};

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

    /// Starts polling for `name` as `holder` (non-empty bytes that identify this holder).
    pub fn new_lease(&self, name: &str, holder: impl Into<Vec<u8>>) -> Result<PollingLease> {
        validate_name(name, crate::validate::DEFAULT_MAX_NAME_BYTES)?;
        let holder = holder.into();
        if holder.is_empty() {
            return Err(Error::invalid_name("polling lease holder is empty"));
        }
        let (tx, rx) = watch::channel(PollingState::default());
        let stop = CancellationToken::new();
        let task = tokio::spawn(poll(
            self.clone(),
            name.to_owned(),
            holder,
            tx,
            stop.clone(),
        ));
        Ok(PollingLease {
            state: rx,
            stop,
            task: Some(task),
        })
    }
}

async fn poll(
    leaser: PollingLeaser,
    name: String,
    holder: Vec<u8>,
    tx: watch::Sender<PollingState>,
    stop: CancellationToken,
) {
    let keep_for = leaser.ttl * 2 / 3;
    let mut last_ok: Option<Stamp> = None;
    let mut interval = tokio::time::interval(leaser.poll_every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            _ = interval.tick() => {}
        }
        let start = Stamp::now();
        let bound = leaser.poll_every;
        let answer = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            r = timeout(bound, leaser.store.try_acquire(&name, &holder, leaser.ttl)) => r,
        };
        let next = match answer {
            Ok(Ok((_, current))) => {
                let held = current == holder;
                last_ok = held.then_some(start);
                PollingState {
                    held,
                    holder: Some(current),
                }
            }
            Ok(Err(e)) => {
                warn!(name, error = %e, "polling lease: try_acquire failed");
                tx.borrow().clone()
            }
            Err(_) => {
                warn!(name, "polling lease: try_acquire timed out");
                tx.borrow().clone()
            }
        };
        let next = match last_ok {
            Some(s) if s.elapsed() >= keep_for => PollingState {
                held: false,
                holder: None,
            },
            _ => next,
        };
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
    if tx.borrow().held {
        let _ = timeout(leaser.poll_every, leaser.store.release(&name, &holder)).await;
    }
    tx.send_replace(PollingState::default());
}

/// One name polled by a [`PollingLeaser`]. Dropping it stops polling (without releasing);
/// [`close`](PollingLease::close) stops and releases.
#[derive(Debug)]
pub struct PollingLease {
    state: watch::Receiver<PollingState>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl PollingLease {
    /// `true` while this holder has the lease.
    pub fn is_held(&self) -> bool {
        self.state.borrow().held
    }

    /// Who holds the lease, as of the last successful poll.
    pub fn holder(&self) -> Option<Vec<u8>> {
        self.state.borrow().holder.clone()
    }

    /// A receiver notified on every change of [`PollingState`].
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
