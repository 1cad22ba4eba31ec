//! Campaigning until a name is won: [`Coordinator::acquire`], and the loop
//! [`Coordinator::run_elected`] campaigns with.

use std::time::Duration;

use tokio::sync::oneshot;

use crate::clock::{Deadline, Stamp};
use crate::engine::coordinator::Coordinator;
use crate::engine::term::Term;
use crate::engine::wait::{Holder, Seen, Waiter, Wake};
use crate::store::error::{Error, ErrorKind, Result};
use crate::store::notify::Topic;
use crate::store::record::LeaseInfo;
use crate::store::store_ext::LeaseStoreExt;
use crate::store::target::Target;
use crate::timings::Timings;

/// The narrowest window over which [`Coordinator::run_elected`] spreads its first claim of a
/// name it found free (see [`first_claim_window`]): 16 ms, 16 ticks of tokio's millisecond
/// timer, so candidates of one process started together fall on different ticks.
pub const FIRST_CLAIM_SPREAD_MIN: Duration = Duration::from_millis(16);

/// The first-claim window of [`Coordinator::run_elected`] in round trips of its first read:
/// 32, so that of candidates started together, about one in 16 asks again before the first
/// claim among them is seen by the others (a claim being about two round trips: the read
/// that finds the name free and the claim).
pub const FIRST_CLAIM_SPREAD_ROUND_TRIPS: u32 = 32;

/// The window over which [`Coordinator::run_elected`] spreads its first claim, given the round
/// trip of its first read of the name (on the boot clock): [`FIRST_CLAIM_SPREAD_ROUND_TRIPS`]
/// round trips, at least [`FIRST_CLAIM_SPREAD_MIN`], at most the timings'
/// [`jitter`](Timings::jitter) (so timings without jitter claim at once, as before).
///
/// ```
/// use std::time::Duration;
/// use lease_core::Timings;
/// use lease_core::coordinator::first_claim_window;
///
/// let t = Timings::from_lease(Duration::from_secs(15)).unwrap();
/// // A 0.2 ms round trip: the floor.
/// assert_eq!(first_claim_window(&t, Duration::from_micros(200)), Duration::from_millis(16));
/// // A 2 ms round trip (a remote store): 64 ms.
/// assert_eq!(first_claim_window(&t, Duration::from_millis(2)), Duration::from_millis(64));
/// // No jitter in the timings: no spread.
/// let flat = t.to_builder().jitter(Duration::ZERO).build().unwrap();
/// assert_eq!(first_claim_window(&flat, Duration::from_millis(2)), Duration::ZERO);
/// ```
pub fn first_claim_window(timings: &Timings, round_trip: Duration) -> Duration {
    round_trip
        .saturating_mul(FIRST_CLAIM_SPREAD_ROUND_TRIPS)
        .max(FIRST_CLAIM_SPREAD_MIN)
        .min(timings.jitter())
}

impl Coordinator {
    /// Claims `name`, waiting up to `timeout` for it to be free.
    ///
    /// The first claim is sent at once. While someone else holds the name, the coordinator waits as
    /// described in [`wait`](crate::backend::wait): until the holder's lease runs out by the
    /// store's clock (read with one `get` after a "held" answer), or until the store hints that the
    /// name changed hands (a release wakes the waiter within a few milliseconds on stores whose
    /// [`capabilities`](crate::LeaseStore::capabilities) say `watch`), or — where hints are missing
    /// or may be — at the retry pace ([`Timings::retry_delay`](crate::Timings::retry_delay)), and
    /// in any case at least once per lease of the coordinator's timings (a hint lost on a link that
    /// says it is connected costs at most that; see
    /// [`Waiter::longest_wait`](crate::backend::wait::Waiter::longest_wait)). Every wake-up is only
    /// a reason to claim again: the store's answer decides, so a hint or a local clock can cost
    /// time, never an overlap. Temporary errors (an unreachable store) are ridden out at the retry
    /// pace.
    ///
    /// Returns the new [`Term`]; an error of kind [`Timeout`](ErrorKind::Timeout) when the
    /// name was not won within `timeout` (the message names the name, the wait and the last
    /// holder seen; with `Duration::ZERO` it claims once); [`Closed`](ErrorKind::Closed) once
    /// the coordinator closes; and at once the errors no wait can cure (an invalid name, an
    /// unsupported store).
    ///
    /// Cancel safe: each claim runs on a task of its own, so dropping this future never leaves
    /// a claim behind unknown. A claim that was in flight still finishes (with the read-back
    /// of an unknown outcome that [`try_acquire`](Coordinator::try_acquire) does), and a term
    /// it won is released at once. [`close`](Coordinator::close) waits (up to the grace) for
    /// such a claim too, so a process that drops a waiting `acquire` and closes the
    /// coordinator before exiting leaves nothing held.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::{Coordinator, ErrorKind, Timings};
    /// use lease_local::MemoryStore;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> lease_core::Result<()> {
    /// let store = MemoryStore::new();
    /// let timings = Timings::from_lease(Duration::from_secs(3))?;
    /// let a = Coordinator::builder(store.clone()).instance("a").timings(timings).build()?;
    /// let b = Coordinator::builder(store).instance("b").timings(timings).build()?;
    ///
    /// let first = a.acquire("compactor", Duration::ZERO).await?;
    /// let err = b.acquire("compactor", Duration::from_secs(1)).await.unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Timeout);
    ///
    /// let waiting = tokio::spawn(async move { b.acquire("compactor", Duration::from_secs(60)).await });
    /// tokio::time::sleep(Duration::from_secs(5)).await;
    /// first.resign().await?; // the memory store hints the release: b wakes at once
    /// let next = waiting.await.unwrap()?;
    /// assert!(next.token() > first.token());
    /// # Ok(()) }
    /// ```
    ///
    /// Takes a name or a [`Permits`](crate::Permits): for a counted name it waits for one
    /// permit, woken by the same hints (any release of a permit of the name) and, without
    /// them, at the earliest expiry among the live permits.
    pub async fn acquire(&self, target: impl Into<Target>, timeout: Duration) -> Result<Term> {
        self.acquire_reporting(target, timeout, |_| {}).await
    }

    /// [`acquire`](Coordinator::acquire), telling `failed` of each temporary failure of an
    /// attempt on the way (the wait goes on after each): for a caller that waits long, e.g.
    /// with `Duration::MAX`, and wants to say that the store keeps failing without cutting
    /// the wait into windows (each new `acquire` claims at once, so windows cost claims).
    pub async fn acquire_reporting(
        &self,
        target: impl Into<Target>,
        timeout: Duration,
        mut failed: impl FnMut(&Error),
    ) -> Result<Term> {
        let target = target.into();
        let name = target.name();
        let started = Deadline::in_(timeout);
        let mut waiter = self.waiter(&target)?;
        let mut last_holder: Option<LeaseInfo> = None;
        let mut last_error: Option<Error> = None;
        let won = self
            .campaign(&target, started, &mut waiter, |seen| match seen {
                Seen::Held(Holder::Live(info)) => {
                    last_holder = Some(info.clone());
                    last_error = None;
                }
                Seen::Held(_) => last_error = None,
                Seen::Failed(e) => {
                    failed(e);
                    last_error = Some(e.clone());
                }
            })
            .await;
        match won? {
            Some(term) => Ok(term),
            None => Err(acquire_timeout(name, timeout, last_holder, last_error)),
        }
    }

    /// A waiter for `name`'s hints, subscribed now (before the first claim).
    pub(crate) fn waiter(&self, target: &Target) -> Result<Waiter> {
        if self.is_closed() {
            return Err(Error::closed());
        }
        let name = target.name();
        self.store().validate_name(name)?;
        let waiter = Waiter::new(self.store().clone(), Topic::lease(name), self.timings());
        Ok(match target.permits() {
            None => waiter,
            Some(n) => waiter.counted(n),
        })
    }

    /// Claims `name` until won (`Some`), `limit` passes (`None`), the coordinator closes
    /// (`Closed`), or an error no wait cures. `seen` hears of every "held" answer and
    /// temporary failure.
    pub(crate) async fn campaign(
        &self,
        target: &Target,
        limit: Deadline,
        waiter: &mut Waiter,
        mut seen: impl FnMut(Seen<'_>),
    ) -> Result<Option<Term>> {
        loop {
            waiter.before_attempt();
            match self.attempt(target).await {
                Ok(term) => return Ok(Some(term)),
                Err(e) if e.is(ErrorKind::Held) => {
                    let holder = waiter.after_held().await;
                    seen(Seen::Held(&holder));
                }
                Err(e) if e.is(ErrorKind::Closed) => return Err(e),
                Err(e) if e.is_temporary() => {
                    waiter.failed();
                    seen(Seen::Failed(&e));
                }
                Err(e) => return Err(e),
            }
            if limit.has_passed() {
                return Ok(None);
            }
            let closing = self.closing();
            let wake = loop {
                let wake = tokio::select! {
                    biased;
                    () = closing.cancelled() => return Err(Error::closed()),
                    wake = waiter.wait(limit) => wake,
                };
                if wake != Wake::Expiry {
                    break wake;
                }
                // Woken at the holder's expiry as last read: read before claiming. A holder
                // that renewed meanwhile (the usual case behind a live holder) costs this one
                // read and a new wait until its new expiry, not a refused claim and a read; a
                // holder that ran out (or a read that fails) is claimed at once.
                match waiter.look().await {
                    Ok(Some(info)) if info.live => {
                        seen(Seen::Held(&Holder::Live(info)));
                        if limit.has_passed() {
                            return Ok(None);
                        }
                    }
                    _ => break wake,
                }
            };
            if wake == Wake::Limit {
                // One last claim at the limit: the name may have come free just now.
                waiter.before_attempt();
                return match self.attempt(target).await {
                    Ok(term) => Ok(Some(term)),
                    Err(e) if e.is(ErrorKind::Held) => Ok(None),
                    Err(e) if e.is(ErrorKind::Closed) => Err(e),
                    Err(e) if e.is_temporary() => {
                        seen(Seen::Failed(&e));
                        Ok(None)
                    }
                    Err(e) => Err(e),
                };
            }
        }
    }

    /// Before [`run_elected`](Coordinator::run_elected)'s first claim: no start-up herd.
    ///
    /// It reads the name first (one `get`, timed on the boot clock). Free at that first read,
    /// it pauses for a random share of [`first_claim_window`] (at least
    /// [`FIRST_CLAIM_SPREAD_MIN`], about [`FIRST_CLAIM_SPREAD_ROUND_TRIPS`] round trips of that
    /// read) and reads again; free then, it returns and the campaign claims. Held at either
    /// read, it claims nothing yet: it waits once as a campaign waits after a "held" answer
    /// (the holder's expiry by the store's clock, a hint, the retry pace where hints may be
    /// missing) and returns, so the campaign claims at that wake-up (a hand-over after a
    /// release hint is not slowed by the spread). Candidates started together thus read at once but
    /// claim one after another: the first claim lands before most others read again, and they
    /// see it held. A lone candidate claims within the window (16 ms on a local store) plus two
    /// reads. A failed read returns at once: the campaign's claim meets the same error and
    /// rides it out at the retry pace. `seen` hears of each live holder read.
    pub(crate) async fn before_first_claim(
        &self,
        waiter: &mut Waiter,
        mut seen: impl FnMut(&Holder),
    ) -> Result<()> {
        let t = self.timings();
        let mut first = true;
        loop {
            let sent = Stamp::now();
            let read = waiter.look().await;
            let round_trip = sent.elapsed();
            let closing = self.closing();
            match read {
                Ok(Some(info)) if info.live => {
                    seen(&Holder::Live(info));
                    tokio::select! {
                        biased;
                        () = closing.cancelled() => return Err(Error::closed()),
                        _ = waiter.wait(Deadline::never()) => return Ok(()),
                    }
                }
                Ok(_) if first => {
                    first = false;
                    let window = first_claim_window(&t, round_trip);
                    if window.is_zero() {
                        return Ok(());
                    }
                    let pause = window.mul_f64(rand::random::<f64>());
                    tokio::select! {
                        biased;
                        () = closing.cancelled() => return Err(Error::closed()),
                        () = tokio::time::sleep(pause) => {}
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    /// One [`try_acquire`](Coordinator::try_acquire) on a task of its own, so that dropping
    /// the caller never abandons a claim in flight: the task finishes it (reading back an
    /// unknown outcome), and releases a term nobody is left to take.
    async fn attempt(&self, target: &Target) -> Result<Term> {
        let (tx, rx) = oneshot::channel();
        let me = self.clone();
        let owned = target.clone();
        let name = target.name();
        // Tracked with the work, so `close` waits for a claim in flight (one that wins after
        // the close is resigned by `adopt`).
        let tracker = self.tracker().clone();
        tracker.spawn(async move {
            let won = me.claim_once(&owned).await;
            if let Err(Ok(term)) = tx.send(won) {
                // The waiter went away while the claim was in flight.
                let _ = term.resign().await;
            }
        });
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(Error::new(
                ErrorKind::Panicked,
                format!("the claim of '{name}' panicked"),
            )),
        }
    }
}

/// The error of an [`acquire`](Coordinator::acquire) that ran out of time.
fn acquire_timeout(
    name: &str,
    waited: Duration,
    holder: Option<LeaseInfo>,
    failure: Option<Error>,
) -> Error {
    let why = match (&holder, &failure) {
        (_, Some(e)) => format!("the last attempt failed: {e}"),
        (Some(h), None) => format!(
            "it was held by {} (term {}, {:?} left by the store's clock) when last read",
            h.instance, h.term, h.expires_in
        ),
        (None, None) => "another holder had it".to_owned(),
    };
    let e = Error::new(
        ErrorKind::Timeout,
        format!(
            "lease '{name}' was not acquired within {waited:?}: {why}; wait longer, or find \
             the holder (`lease status {name}`)"
        ),
    );
    match failure {
        Some(f) => e.with_source(f),
        None => e,
    }
}
