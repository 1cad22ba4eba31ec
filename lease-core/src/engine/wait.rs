//! Waiting for a held name, in one place: at the holder's expiry by the store's clock, at a
//! store's hint, or at the retry pace when hints may be missing.
//!
//! Every waiter of the workspace — [`Coordinator::acquire`](crate::Coordinator::acquire),
//! [`Coordinator::run_elected`](crate::Coordinator::run_elected), the
//! [`Observer::watch`](crate::Observer::watch) of a name, the group worker and the scheduler —
//! sleeps through a [`Waiter`]. The rules it keeps:
//!
//! - **The store decides.** A waiter never concludes from a hint or from a local clock that a
//!   name is free: it wakes and asks the store again (a claim, or a read). Waking early costs
//!   one answer saying "held"; it can never make two holders overlap.
//! - **Expiry-aware.** After a "held" answer the waiter reads the holder's time left by the
//!   store's clock ([`LeaseStore::get`], one round trip) and sleeps until then, plus a margin
//!   and a small random jitter. A holder that crashed is therefore succeeded about one round
//!   trip after the store's expiry, and never before it. An idle waiter behind a holder that
//!   keeps renewing asks about once per lease period. A store that still answers "held" at
//!   the expiry it reported, with nothing left (a record that outlives its expiry for a
//!   while), is asked again after a pause that doubles from [`EXPIRY_MARGIN`] up to the retry,
//!   never in a tight loop.
//! - **Hints wake it.** It subscribes to the store's hints for its [`Topic`]
//!   ([`LeaseStore::changes`]) before its first attempt, so a release between the attempt and
//!   the wait is not missed, and wakes on one after a random jitter of at most
//!   [`HINT_JITTER`] (so one release that wakes N waiters spreads their N attempts). Hints
//!   that arrived before an attempt or a read started are taken as covered by its answer
//!   ([`Waiter::before_attempt`]): a waiter woken by a release does not wake again for the
//!   claim of the waiter that won.
//! - **Polling where hints may be missing.** While the store has no hints (`changes` answers
//!   `None`) or says they may be incomplete ([`Wakeups::is_connected`] is `false`), the waiter
//!   also wakes at the retry pace ([`Timings::retry_delay`]), as every waiter did before hints.
//! - **At least once a lease, whatever the hints say.** A link that reports connected may
//!   still lose hints (a connection that died without a reset and is not yet found out, a
//!   writer that cannot publish), so no wait lasts longer than [`Waiter::longest_wait`]: one
//!   lease of the waiter's timings, plus the [`EXPIRY_MARGIN`] and hint jitter a wake at a
//!   holder's expiry has. A waiter behind a holder whose lease (as last read) runs out within
//!   that asks at the expiry as before, so this costs nothing while the holder's leases are no
//!   longer than the waiter's; a waiter that knows no expiry (a free name, a watch) or one
//!   behind a longer lease asks once per lease. A hint lost on a link that says connected
//!   therefore costs at most one lease, never a wait without end.
//!
//! Every deadline is a [`Deadline`] on the boot clock (see [`clock`](crate::clock)).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::timeout;
use tracing::debug;

use crate::clock::{Deadline, Stamp};
use crate::store::error::{Error, Result};
use crate::store::lease_store::{LeaseStore, permits_of};
use crate::store::notify::{Topic, Wakeups};
use crate::store::record::LeaseInfo;
use crate::timings::{STORE_CLOCK_GRANULARITY, Timings};

/// The most a waiter waits, at random, after a hint before it asks the store (less when the
/// timings' [`jitter`](Timings::jitter) is smaller).
pub const HINT_JITTER: Duration = Duration::from_millis(20);

/// Added to a holder's time left before a waiter asks again, on top of the jitter: the store's
/// clock granularity, so the first attempt after the expiry is not answered "held" for a
/// truncated millisecond.
pub const EXPIRY_MARGIN: Duration = STORE_CLOCK_GRANULARITY;

/// Why [`Waiter::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wake {
    /// A hint arrived (or the store's hint link went down or came back): the topic may have
    /// changed.
    Hint,
    /// The holder's lease, as last read, has run out by now (plus margin and jitter).
    Expiry,
    /// The retry pace: hints may be missing (none from this store, or its link is down), or
    /// the last attempt failed; or the [`longest_wait`](Waiter::longest_wait) passed with
    /// nothing else waking the waiter.
    Poll,
    /// The caller's limit passed first.
    Limit,
}

/// What [`Waiter::after_held`] read of the holder.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Holder {
    /// Not read: the holder's expiry as last read is still ahead, or the read failed.
    Unread,
    /// Read, and nobody holds the name live any more (released since the attempt).
    Vacant,
    /// Read: this holder holds the name live.
    Live(LeaseInfo),
}

/// What a campaign saw on the way, for the caller's logs, metrics and leadership watch.
pub(crate) enum Seen<'a> {
    /// An attempt was answered "held"; what the waiter read of the holder.
    Held(&'a Holder),
    /// An attempt failed with a temporary error; the campaign goes on.
    Failed(&'a Error),
}

/// One waiter's state: its subscription to the store's hints, the holder's expiry as last read,
/// and its pacing. See the [module docs](self).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lease_core::backend::clock::Deadline;
/// use lease_core::backend::notify::Topic;
/// use lease_core::backend::wait::{Wake, Waiter};
/// use lease_core::{LeaseStore, Timings};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> lease_core::Result<()> {
/// let store: Arc<dyn LeaseStore> = Arc::new(lease_local::MemoryStore::new());
/// let timings = Timings::from_lease(Duration::from_secs(3))?;
/// let mut waiter = Waiter::new(store, Topic::lease("jobs"), timings);
/// waiter.before_attempt();
/// // ... an attempt answered "held" ...
/// waiter.look().await?;
/// // Nobody holds "jobs": no expiry to wait for, so only a hint, the limit, or (if no hint
/// // came) one lease of the timings wakes it.
/// let wake = waiter.wait(Deadline::in_(Duration::from_secs(1))).await;
/// assert_eq!(wake, Wake::Limit);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Waiter {
    store: Arc<dyn LeaseStore>,
    topic: Topic,
    hints: Option<Wakeups>,
    timings: Timings,
    /// When to ask again because the holder's lease, as last read, has run out.
    due: Option<Deadline>,
    /// Wake at the retry pace on the next wait (the last attempt failed).
    failing: bool,
    /// A read found the name free right after a "held" answer, this many times in a row.
    free_after_held: u32,
    /// Reads in a row, each after waking at the holder's expiry, that found the holder still
    /// live with no more time left than the pause before them: a record that outlives its
    /// expiry (see [`overdue_pause`](Self::overdue_pause)).
    overdue: u32,
    last_wake: Option<Wake>,
    /// For a counted name: its permit count; the holder read is then the live permit that
    /// expires first, and the name is free while fewer than this many are live.
    permits: Option<u32>,
}

impl Waiter {
    /// A waiter for `topic` over `store`, subscribed to its hints at once (subscribe before the
    /// first attempt, so that a change between the attempt and the wait wakes it).
    pub fn new(store: Arc<dyn LeaseStore>, topic: Topic, timings: Timings) -> Waiter {
        let hints = store.changes(&topic);
        Waiter {
            store,
            topic,
            hints,
            timings,
            due: None,
            failing: false,
            free_after_held: 0,
            overdue: 0,
            last_wake: None,
            permits: None,
        }
    }

    /// This waiter, for one of `permits` permits of its name: after a "held" answer it reads the
    /// name's permits ([`PermitStore::permits`](crate::backend::permits::PermitStore::permits), one
    /// round trip) and sleeps until the first of them expires; a read that finds fewer than
    /// `permits` live sees the name free.
    pub fn counted(mut self, permits: u32) -> Waiter {
        self.permits = Some(permits);
        self
    }

    /// The topic waited on.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }

    /// `true` while the store's hints cover every change of the topic (it answers hints and
    /// its link is up): the waiter then does not poll at the retry pace.
    pub fn hinted(&self) -> bool {
        self.hints.as_ref().is_some_and(Wakeups::is_connected)
    }

    /// Marks every hint received so far as seen: call it right before an attempt or a read
    /// whose answer covers them (it starts after they were sent), so they wake nobody again.
    pub fn before_attempt(&mut self) {
        if let Some(h) = &mut self.hints {
            h.mark_seen();
        }
    }

    /// Says the last attempt failed (an error, not "held"): the next [`wait`](Self::wait) wakes
    /// at the retry pace at the latest.
    pub fn failed(&mut self) {
        self.failing = true;
    }

    /// Reads the name's record (one [`get`](LeaseStore::get), bounded by the attempt timeout)
    /// and remembers when a live holder's lease runs out by the store's clock. Hints received
    /// before the read are marked seen. Only for a [`Topic::Lease`] (for other topics there
    /// is no record to read, and this answers `Ok(None)` without I/O).
    pub async fn look(&mut self) -> Result<Option<LeaseInfo>> {
        let Topic::Lease(name) = &self.topic else {
            return Ok(None);
        };
        let name = name.clone();
        self.before_attempt();
        let t = self.timings;
        let read = match timeout(t.attempt_timeout(), self.read(&name)).await {
            Ok(r) => r,
            Err(_) => Err(Error::timeout(
                format_args!("reading the holder of '{name}'"),
                t.attempt_timeout(),
            )),
        };
        let answered = Stamp::now();
        match read {
            Ok(info) => {
                self.failing = false;
                self.set_due(answered, info.as_ref());
                Ok(info)
            }
            Err(e) => {
                self.due = None;
                self.failing = true;
                Err(e)
            }
        }
    }

    /// What [`look`](Waiter::look) reads: the name's lease, or, for a counted name, the live
    /// permit that expires first while all of them are live (else `None`: one is free).
    async fn read(&self, name: &str) -> Result<Option<LeaseInfo>> {
        let Some(count) = self.permits else {
            return self.store.get(name).await;
        };
        let permits = permits_of(&*self.store)?.permits(name).await?;
        let live: Vec<_> = permits.into_iter().filter(|p| p.live).collect();
        if live.len() < usize::try_from(count).unwrap_or(usize::MAX) {
            return Ok(None);
        }
        Ok(live
            .into_iter()
            .min_by_key(|p| p.expires_in)
            .map(|p| LeaseInfo {
                name: name.to_owned(),
                instance: p.instance,
                term: p.term,
                live: true,
                expires_in: p.expires_in,
            }))
    }

    /// After an attempt answered "held": reads the holder with [`look`](Self::look), unless the
    /// waiter woke at the retry pace with the holder's expiry, as last read, still ahead (a
    /// poll only asks whether the holder released; its lease cannot have run out yet). A
    /// failed read is logged at debug level and makes the next wait poll at the retry pace.
    pub async fn after_held(&mut self) -> Holder {
        let poll_with_due =
            self.last_wake == Some(Wake::Poll) && self.due.is_some_and(|d| !d.has_passed());
        if poll_with_due {
            return Holder::Unread;
        }
        match self.look().await {
            Ok(Some(info)) if info.live => {
                self.free_after_held = 0;
                Holder::Live(info)
            }
            Ok(_) => {
                // Released between the claim and the read: ask again at once, but never twice
                // in a row without a pause (a store answering "held" for a free name, such as
                // a row locked for a moment, must not make the waiter spin).
                self.free_after_held = self.free_after_held.saturating_add(1);
                if self.free_after_held > 1 {
                    self.failing = true;
                } else {
                    self.due = Some(Deadline::in_(self.jitter()));
                }
                Holder::Vacant
            }
            Err(e) => {
                debug!(topic = %self.topic, error = %e, "could not read the holder after a held answer; polling");
                Holder::Unread
            }
        }
    }

    /// Remembers the expiry of `info` as read at `answered` (no expiry when it is not live).
    fn set_due(&mut self, answered: Stamp, info: Option<&LeaseInfo>) {
        self.due = match info {
            Some(i) if i.live && i.expires_in != Duration::MAX => {
                let mut left = i.expires_in;
                if self.last_wake == Some(Wake::Expiry) && left <= self.overdue_pause() {
                    // Woken at the expiry the store reported, and the store still says live
                    // with (almost) nothing left: its record outlives its expiry for a while
                    // (NATS removes an entry at its max age on a server timer). Ask again after
                    // a pause that doubles, up to the retry, not every millisecond.
                    self.overdue = self.overdue.saturating_add(1);
                    left = left.max(self.overdue_pause());
                } else {
                    self.overdue = 0;
                }
                Some(Deadline::after(
                    answered,
                    left.saturating_add(EXPIRY_MARGIN)
                        .saturating_add(self.jitter()),
                ))
            }
            // A lease that never expires: only a hint, the retry pace or the longest wait wakes
            // the waiter. Nobody holds it: likewise (a claim is hinted).
            _ => {
                self.overdue = 0;
                None
            }
        };
        if info.is_some_and(|i| i.live) {
            self.free_after_held = 0;
        }
    }

    /// Sets the expiry to wait for from a known time left (e.g. a slot's lease), read at
    /// `answered`.
    pub fn expires_in(&mut self, answered: Stamp, left: Duration) {
        self.due = Some(Deadline::after(
            answered,
            left.saturating_add(EXPIRY_MARGIN)
                .saturating_add(self.jitter()),
        ));
    }

    /// Forgets the expiry last read (the next wait wakes only at a hint, the retry pace or the
    /// limit).
    pub fn clear_expiry(&mut self) {
        self.due = None;
    }

    /// The pause before asking again a store that still said "live, nothing left" after the
    /// holder's expiry, `overdue` times in a row: [`EXPIRY_MARGIN`] doubled each time, at most
    /// the timings' [`retry`](Timings::retry).
    fn overdue_pause(&self) -> Duration {
        EXPIRY_MARGIN
            .saturating_mul(1u32 << self.overdue.min(20))
            .min(self.timings.retry())
    }

    /// A random share of the hint jitter.
    fn jitter(&self) -> Duration {
        hint_jitter(&self.timings)
    }

    /// The longest one [`wait`](Self::wait) lasts whatever the hints say (then it returns
    /// [`Wake::Poll`], and the caller asks the store): the timings' lease, plus the
    /// [`EXPIRY_MARGIN`] and the most hint jitter that waking at an expiry adds. A holder's
    /// expiry read with at most one lease left is therefore never cut short by it.
    pub fn longest_wait(&self) -> Duration {
        self.timings
            .lease()
            .saturating_add(EXPIRY_MARGIN)
            .saturating_add(self.timings.jitter().min(HINT_JITTER))
    }

    /// `true` when this wait must also wake at the retry pace.
    fn polling(&self) -> bool {
        self.failing || !self.hinted() || self.free_after_held > 1
    }

    /// Sleeps until the next attempt is due: a hint (then a random jitter of at most
    /// [`HINT_JITTER`]), the holder's expiry as last read, the retry pace when hints may be
    /// missing or the last attempt failed, the [`longest_wait`](Self::longest_wait), or
    /// `limit`, whichever comes first.
    ///
    /// With no expiry known and hints connected, a hint wakes it (a name nobody holds changes
    /// hands only by a claim, which the store hints), and the longest wait if the hint is lost.
    pub async fn wait(&mut self, limit: Deadline) -> Wake {
        let wake = self.sleep(limit).await;
        self.last_wake = Some(wake);
        if wake != Wake::Poll {
            self.failing = false;
        }
        wake
    }

    async fn sleep(&mut self, limit: Deadline) -> Wake {
        let poll = self
            .polling()
            .then(|| Deadline::in_(self.timings.retry_delay()));
        // Hints that say connected may still be lost: never wait past the longest wait.
        let bound = Deadline::in_(self.longest_wait());
        // What wakes it without a hint, and why.
        let mut until = (limit, Wake::Limit);
        for (d, why) in [
            (self.due, Wake::Expiry),
            (poll, Wake::Poll),
            (Some(bound), Wake::Poll),
        ] {
            if let Some(d) = d
                && d.remaining() < until.0.remaining()
            {
                until = (d, why);
            }
        }
        let hinted = match &mut self.hints {
            Some(h) => {
                tokio::select! {
                    biased;
                    () = until.0.reached() => false,
                    () = h.changed() => true,
                }
            }
            None => {
                until.0.reached().await;
                false
            }
        };
        if !hinted {
            if until.1 == Wake::Expiry {
                self.due = None;
            }
            return until.1;
        }
        let spread = Deadline::in_(self.jitter()).min(limit);
        spread.reached().await;
        if limit.has_passed() {
            return Wake::Limit;
        }
        Wake::Hint
    }
}

/// A random pause after a hint, before asking the store: at most [`HINT_JITTER`], and at most
/// the timings' [`jitter`](Timings::jitter).
pub(crate) fn hint_jitter(timings: &Timings) -> Duration {
    timings
        .jitter()
        .min(HINT_JITTER)
        .mul_f64(rand::random::<f64>())
}

/// Resolves at the next hint of `hints` (or change of their link); never without hints. For
/// loops that race hints against timers of their own (the group worker, the scheduler).
pub(crate) async fn next_hint(hints: &mut Option<Wakeups>) {
    match hints {
        Some(h) => h.changed().await,
        None => std::future::pending().await,
    }
}
