//! Hints that a name may have changed hands: what lets a waiter claim the moment a lease is
//! released instead of at its next retry.
//!
//! A store that can push changes (PostgreSQL `LISTEN`, Redis pub/sub, a NATS KV watch, an etcd
//! watch, one process's own releases) answers [`LeaseStore::changes`](crate::LeaseStore::changes)
//! with [`Wakeups`] for a [`Topic`]. **A hint is never the basis of a decision**: a woken
//! waiter claims as usual and the store's answer decides. A lost, late, duplicated or
//! reordered hint may cost time, never safety; hints for one topic coalesce, so a burst of
//! changes wakes a waiter once.
//!
//! While [`Wakeups::is_connected`] is `false` (the store's listener connection is down, or the
//! store only sees changes made through itself), a waiter must not rely on hints alone: it
//! keeps its polling pace as if it had none.
//!
//! ```
//! use lease_core::backend::notify::Hub;
//! use lease_core::backend::notify::Topic;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let hub = Hub::new();
//! let mut wakeups = hub.subscribe(&Topic::lease("jobs"));
//! hub.notify(&Topic::lease("other"));
//! hub.notify(&Topic::lease("jobs"));
//! hub.notify(&Topic::lease("jobs"));
//! wakeups.changed().await; // both hints for "jobs" wake it once
//! assert!(!wakeups.has_changed());
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

/// What a hint is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Topic {
    /// The lease on this name: released, claimed, or due to expire.
    Lease(String),
    /// A group's partitions or members changed (a partition released or taken, a member
    /// joined or left).
    Group(String),
    /// A scheduled job's slots changed (an instant claimed, finished or cut short).
    Slots(String),
}

impl Topic {
    /// The topic of the lease on `name`.
    pub fn lease(name: impl Into<String>) -> Topic {
        Topic::Lease(name.into())
    }

    /// The topic of `group`'s partitions and members.
    pub fn group(group: impl Into<String>) -> Topic {
        Topic::Group(group.into())
    }

    /// The topic of `job`'s scheduler slots.
    pub fn slots(job: impl Into<String>) -> Topic {
        Topic::Slots(job.into())
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Topic::Lease(n) => write!(f, "lease '{n}'"),
            Topic::Group(g) => write!(f, "group '{g}'"),
            Topic::Slots(j) => write!(f, "slots of '{j}'"),
        }
    }
}

/// A subscription to the hints for one [`Topic`], from [`Hub::subscribe`].
///
/// Dropping it unsubscribes. It is cheap: a waiter holds one for as long as it waits.
#[derive(Debug, Clone)]
pub struct Wakeups {
    hints: watch::Receiver<u64>,
    link: watch::Receiver<bool>,
}

impl Wakeups {
    /// Waits until a hint for the topic arrives after the last call returned (at once when one
    /// already has), or until the store's link goes down or comes back (see
    /// [`is_connected`](Self::is_connected)): either way, the topic may have changed unseen.
    ///
    /// When the store that issued it is dropped, this waits forever: wait on it next to a timer,
    /// never alone.
    pub async fn changed(&mut self) {
        tokio::select! {
            r = self.hints.changed() => {
                if r.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            r = self.link.changed() => {
                if r.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
        self.hints.borrow_and_update();
        self.link.borrow_and_update();
    }

    /// Marks every hint (and link change) received so far as seen, without waiting: the next
    /// [`changed`](Self::changed) returns only for a later one. Call it right before a store
    /// operation whose answer covers them.
    pub fn mark_seen(&mut self) {
        self.hints.borrow_and_update();
        self.link.borrow_and_update();
    }

    /// `true` when a hint (or a change of the link) arrived that [`changed`](Self::changed)
    /// has not returned for yet.
    pub fn has_changed(&self) -> bool {
        self.hints.has_changed().unwrap_or(false) || self.link.has_changed().unwrap_or(false)
    }

    /// `true` while the store sees every change of the topic, whoever makes it (its listener is
    /// connected). `false` while it does not — the listener is reconnecting, or the store only
    /// sees the changes made through itself: hints may then be missing, and a waiter keeps its
    /// polling pace.
    pub fn is_connected(&self) -> bool {
        *self.link.borrow()
    }
}

/// The implementer's side of [`Wakeups`]: a registry of subscribed topics that a store's
/// listener task (or its own release path) notifies.
///
/// One hint per topic is kept, not a queue: notifying a topic nobody waits on costs a map
/// lookup, and a thousand notifications before a waiter looks wake it once. Topics without
/// subscribers are forgotten.
///
/// A new hub is *connected* (see [`Wakeups::is_connected`]); a store whose hints cover only its
/// own operations, or whose listener is down, says so with
/// [`set_connected(false)`](Self::set_connected).
#[derive(Clone)]
pub struct Hub {
    inner: Arc<HubInner>,
}

struct HubInner {
    topics: Mutex<HashMap<Topic, watch::Sender<u64>>>,
    link: watch::Sender<bool>,
}

impl fmt::Debug for Hub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hub")
            .field("topics", &self.lock().len())
            .field("connected", &*self.inner.link.borrow())
            .finish()
    }
}

impl Default for Hub {
    fn default() -> Self {
        Hub::new()
    }
}

impl Hub {
    /// An empty, connected hub.
    pub fn new() -> Hub {
        Hub {
            inner: Arc::new(HubInner {
                topics: Mutex::new(HashMap::new()),
                link: watch::Sender::new(true),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Topic, watch::Sender<u64>>> {
        self.inner
            .topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Subscribes to `topic`'s hints.
    pub fn subscribe(&self, topic: &Topic) -> Wakeups {
        let mut topics = self.lock();
        // Forget the topics nobody waits on any more, at most as often as topics are added.
        if topics.len() >= 64 && !topics.contains_key(topic) {
            topics.retain(|_, tx| tx.receiver_count() > 0);
        }
        let hints = match topics.get(topic) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(0);
                topics.insert(topic.clone(), tx);
                rx
            }
        };
        Wakeups {
            hints,
            link: self.inner.link.subscribe(),
        }
    }

    /// Hints that `topic` may have changed. Cheap when nobody waits on it.
    pub fn notify(&self, topic: &Topic) {
        let mut topics = self.lock();
        if let Some(tx) = topics.get(topic) {
            if tx.receiver_count() == 0 {
                topics.remove(topic);
            } else {
                tx.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }

    /// Hints that every topic may have changed: after the listener reconnected, or when it may
    /// have missed messages.
    pub fn notify_all(&self) {
        let mut topics = self.lock();
        topics.retain(|_, tx| tx.receiver_count() > 0);
        for tx in topics.values() {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Says whether the store's hints cover every change of its topics. Every subscriber is
    /// woken when this changes; going from `false` to `true` also notifies every topic (what
    /// happened while the link was down is unknown).
    pub fn set_connected(&self, connected: bool) {
        let changed = self.inner.link.send_if_modified(|c| {
            let was = *c;
            *c = connected;
            was != connected
        });
        if changed && connected {
            self.notify_all();
        }
    }

    /// `true` when the hub's hints cover every change (see [`set_connected`](Self::set_connected)).
    pub fn is_connected(&self) -> bool {
        *self.inner.link.borrow()
    }

    /// `true` while someone holds a subscription to `topic` (a store that tells its server
    /// which topics are waited on asks this).
    pub fn is_subscribed(&self, topic: &Topic) -> bool {
        self.lock()
            .get(topic)
            .is_some_and(|tx| tx.receiver_count() > 0)
    }

    /// How many topics have live subscribers (for tests and metrics).
    pub fn subscribed_topics(&self) -> usize {
        self.lock()
            .values()
            .filter(|tx| tx.receiver_count() > 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::time::Duration;
    use tokio::time::timeout;

    #[tokio::test(start_paused = true)]
    async fn a_hint_wakes_only_its_topics_subscribers() {
        let hub = Hub::new();
        let mut a = hub.subscribe(&Topic::lease("a"));
        let mut b = hub.subscribe(&Topic::lease("b"));
        hub.notify(&Topic::lease("a"));
        timeout(Duration::from_secs(1), a.changed()).await.unwrap();
        assert!(
            timeout(Duration::from_secs(1), b.changed()).await.is_err(),
            "b was woken by a's hint"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn hints_coalesce_and_a_hint_before_the_wait_is_kept() {
        let hub = Hub::new();
        let mut a = hub.subscribe(&Topic::group("g"));
        for _ in 0..1000 {
            hub.notify(&Topic::group("g"));
        }
        assert!(a.has_changed());
        timeout(Duration::from_secs(1), a.changed()).await.unwrap();
        assert!(!a.has_changed());
        assert!(timeout(Duration::from_secs(1), a.changed()).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn the_link_going_down_and_up_wakes_everyone() {
        let hub = Hub::new();
        let mut a = hub.subscribe(&Topic::slots("job"));
        assert!(a.is_connected());
        hub.set_connected(false);
        timeout(Duration::from_secs(1), a.changed()).await.unwrap();
        assert!(!a.is_connected());
        hub.set_connected(false);
        assert!(!a.has_changed(), "an unchanged link wakes nobody");
        hub.set_connected(true);
        timeout(Duration::from_secs(1), a.changed()).await.unwrap();
        assert!(a.is_connected());
    }

    #[test]
    fn topics_without_subscribers_are_forgotten() {
        let hub = Hub::new();
        for i in 0..200 {
            let w = hub.subscribe(&Topic::lease(format!("n{i}")));
            drop(w);
        }
        assert!(hub.lock().len() <= 64, "{} topics kept", hub.lock().len());
        let _kept = hub.subscribe(&Topic::lease("kept"));
        hub.notify_all();
        assert_eq!(hub.subscribed_topics(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_hub_never_wakes_a_waiter() {
        let hub = Hub::new();
        let mut a = hub.subscribe(&Topic::lease("a"));
        drop(hub);
        assert!(timeout(Duration::from_secs(5), a.changed()).await.is_err());
    }
}
