//! Reading who holds a name, without taking part.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Deadline, Stamp};
use crate::engine::wait::Waiter;
use crate::store::error::Result;
use crate::store::lease_store::{LeaseStore, shared};
use crate::store::notify::Topic;
use crate::store::record::LeaseInfo;
use crate::store::store_ext::LeaseStoreExt;
use crate::timings::Timings;

/// Tells who holds a name, by the store's clock, without claiming anything.
///
/// ```
/// # async fn demo(store: impl lease_core::LeaseStore) -> lease_core::Result<()> {
/// let observer = lease_core::Observer::new(store);
/// if let Some(holder) = observer.holder("nightly-report").await? {
///     println!("{} holds term {} for {:?}", holder.instance, holder.term, holder.expires_in);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Observer {
    store: Arc<dyn LeaseStore>,
    timings: Timings,
}

impl Observer {
    /// An observer over `store`, taken as [`Coordinator::builder`](crate::Coordinator::builder)
    /// takes it: the store itself, or a shared one (`Arc<S>` is a store too).
    pub fn new(store: impl LeaseStore) -> Observer {
        Self::from_arc(shared(store))
    }

    /// An observer over a shared store; [`new`](Observer::new) takes one too.
    pub fn from_arc(store: Arc<dyn LeaseStore>) -> Observer {
        Observer {
            store,
            timings: Timings::default(),
        }
    }

    /// The timings a [`watch`](Observer::watch) paces itself by: it polls at their
    /// [`retry_delay`](Timings::retry_delay) where the store's hints may be missing, reads at
    /// least once per their [`lease`](Timings::lease) whatever the hints say, and bounds each
    /// read by their attempt timeout (default: [`Timings::default`]; a
    /// coordinator's [`observer`](crate::Coordinator::observer) has the coordinator's).
    pub fn with_timings(mut self, timings: Timings) -> Observer {
        self.timings = timings;
        self
    }

    /// `true` when someone holds `name` live.
    pub async fn held(&self, name: &str) -> Result<bool> {
        Ok(self.holder(name).await?.is_some())
    }

    /// The live holder of `name`: instance, term and time left; `None` when nobody holds it.
    pub async fn holder(&self, name: &str) -> Result<Option<LeaseInfo>> {
        Ok(self.get(name).await?.filter(|info| info.live))
    }

    /// Everything the store keeps about `name`, live or not (the last term survives release and
    /// expiry); `None` when the name was never claimed.
    pub async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.store.validate_name(name)?;
        self.store.get(name).await
    }
}

/// A change of a name's holder, as [`HolderWatch::next`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HolderChange {
    /// `instance` holds the name live under `term` (reported too for the holder found by the
    /// watch's first look).
    Claimed {
        /// The holder's instance label.
        instance: String,
        /// Its term (fencing token).
        term: u64,
        /// Its time left by the store's clock, when read.
        expires_in: Duration,
    },
    /// The holding of `term` ended before its lease ran out, as last read: a release (or an
    /// administrator's force release).
    Released {
        /// The term that ended.
        term: u64,
    },
    /// The holding of `term` ended by expiry: the store's clock passed its expiry with no
    /// renewal (the holder crashed, hung or was cut off) — a vacancy.
    Expired {
        /// The term that ended.
        term: u64,
    },
}

/// A watch of one name's holder: [`next`](HolderWatch::next) returns each change, from the
/// store's hints with a poll fallback. Made by [`Observer::watch`].
///
/// # What it guarantees, and what it does not
///
/// - Every change it reports was read from the store ([`LeaseStore::get`], by the store's
///   clock); a hint only makes it read sooner.
/// - **Changes between two reads are coalesced.** A holder that released and was succeeded
///   before the next read shows as one `Released`/`Expired` of the old term and one `Claimed`
///   of the new; a holder that came and went between two reads is not seen at all. So it
///   tells who holds the name now, and that terms ended, not every term there was.
/// - `Released` and `Expired` are told apart by when the end was seen: before the holder's
///   expiry as last read (a release), or after it (an expiry). A release in the last moments
///   before an expiry may be reported as `Expired`; the term is right either way.
/// - It reads when a hint arrives; when the holder's lease as last read runs out; every
///   [`retry_delay`](Timings::retry_delay) of the observer's timings where the store has no
///   hints or says they may be missing; and in any case at least once per lease of those
///   timings ([`Waiter::longest_wait`]: the lease, plus at most 21 ms). On a
///   store whose hints report connected but are lost on the way, a change is seen late (at the
///   holder's expiry as last read, or one lease of the observer's timings after the last
///   read, whichever comes first), never wrongly and never not at all: a watch of a free name
///   sees a claim within one lease even when no hint reaches it.
#[derive(Debug)]
pub struct HolderWatch {
    name: String,
    waiter: Waiter,
    /// The live holder at the last read, and when its lease runs out as read then.
    last: Option<(String, u64, Deadline)>,
    looked: bool,
    pending: VecDeque<HolderChange>,
}

impl Observer {
    /// A watch of `name`'s holder (see [`HolderWatch`]): subscribes to the store's hints now;
    /// the first [`next`](HolderWatch::next) reads the name and reports its holder, if any.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::{Coordinator, Timings};
    /// use lease_core::coordinator::HolderChange;
    /// use lease_local::MemoryStore;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> lease_core::Result<()> {
    /// let store = MemoryStore::new();
    /// let timings = Timings::from_lease(Duration::from_secs(3))?;
    /// let a = Coordinator::builder(store.clone()).instance("a").timings(timings).build()?;
    /// let mut watch = a.observer().watch("compactor")?;
    ///
    /// let term = a.try_acquire("compactor").await?;
    /// let claimed = watch.next().await?;
    /// assert!(matches!(claimed, HolderChange::Claimed { ref instance, .. } if instance == "a"));
    /// term.resign().await?;
    /// assert_eq!(watch.next().await?, HolderChange::Released { term: term.token() });
    /// # Ok(()) }
    /// ```
    pub fn watch(&self, name: &str) -> Result<HolderWatch> {
        self.store.validate_name(name)?;
        Ok(HolderWatch {
            name: name.to_owned(),
            waiter: Waiter::new(self.store.clone(), Topic::lease(name), self.timings),
            last: None,
            looked: false,
            pending: VecDeque::new(),
        })
    }
}

impl HolderWatch {
    /// The name watched.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The live holder at the last read: instance and term; `None` when nobody held the name
    /// live then (or before the first read).
    pub fn holder(&self) -> Option<(&str, u64)> {
        self.last.as_ref().map(|(i, t, _)| (i.as_str(), *t))
    }

    /// The next change of the holder. Waits for as long as nothing changes. A failed read
    /// returns its error; the next call waits the retry pace and reads again.
    ///
    /// Cancel safe: a change is removed from the watch only when returned, and a dropped call
    /// loses at most a read in flight (the next call reads again).
    pub async fn next(&mut self) -> Result<HolderChange> {
        loop {
            if let Some(change) = self.pending.pop_front() {
                return Ok(change);
            }
            if self.looked {
                self.waiter.wait(Deadline::never()).await;
            }
            self.looked = true;
            let info = self.waiter.look().await?;
            self.compare(info, Stamp::now());
        }
    }

    /// Queues what changed between the last read and `info`, read at `at`.
    fn compare(&mut self, info: Option<LeaseInfo>, at: Stamp) {
        let live = info.filter(|i| i.live);
        let same = match (&self.last, &live) {
            (Some((_, term, _)), Some(now)) => *term == now.term,
            _ => false,
        };
        if same {
            if let (Some(last), Some(now)) = (&mut self.last, &live) {
                last.2 = Deadline::after(at, now.expires_in);
            }
            return;
        }
        if let Some((_, term, ends)) = self.last.take() {
            self.pending.push_back(if ends.has_passed() {
                HolderChange::Expired { term }
            } else {
                HolderChange::Released { term }
            });
        }
        if let Some(now) = live {
            self.last = Some((
                now.instance.clone(),
                now.term,
                Deadline::after(at, now.expires_in),
            ));
            self.pending.push_back(HolderChange::Claimed {
                instance: now.instance,
                term: now.term,
                expires_in: now.expires_in,
            });
        }
    }
}
