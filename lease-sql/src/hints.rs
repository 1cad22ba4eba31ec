//! Store hints ([`LeaseStore::changes`](lease_core::LeaseStore::changes)): what every
//! dialect's writes, PostgreSQL's listener and SQLite's poller notify.
//!
//! PostgreSQL and MySQL keep every topic on one [`Hub`] (PostgreSQL's listener feeds it through
//! [`lease_core::backend::listen`]). SQLite keeps one hub per topic instead: its poller reads
//! the rows of the topics somebody waits on, so the subscribed topics must be listable, and a
//! hub tells whether its topic still has a subscriber. Each of those entries carries the
//! poller's *mark* at the moment it was subscribed (the `data_version` it last read), so the
//! poller can tell whether anything was committed between a subscription and its first read of
//! the topic.
//!
//! A hint is never the basis of a decision: every path here may lose, duplicate or delay one.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use lease_core::backend::listen::Listener;
use lease_core::backend::notify::Hub;
use lease_core::backend::notify::{Topic, Wakeups};

/// What a watcher (SQLite's poller) reads of one subscribed topic: its entry's id (a topic
/// dropped and subscribed again gets a new one), the topic, and the mark it was subscribed at.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) type Subscribed = (u64, Topic, Option<Mark>);

/// A watcher's position when a topic was subscribed: the watcher's connection (a `data_version`
/// compares only with another read on the same connection) and the value read there.
pub(crate) type Mark = (u64, i64);

/// The hints of one store (PostgreSQL, MySQL) or of every store of this process on one SQLite
/// file and table.
pub(crate) struct Hints {
    kind: Kind,
    /// The store's own writes notify their topics directly: MySQL, and PostgreSQL and SQLite
    /// with hints off (with hints on, PostgreSQL's listener hears the store's own writes from
    /// the server and SQLite's poller sees them as any other connection's commit).
    pub(crate) local: bool,
}

enum Kind {
    /// Every topic on one hub, fed by the store's writes and (PostgreSQL) its listener, started
    /// on the first wait and ended with the hints.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    One {
        hub: Hub,
        listener: Mutex<Option<Listener>>,
    },
    /// One hub per topic (SQLite), for the poller.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    PerTopic(Mutex<State>),
}

#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
struct State {
    entries: HashMap<Topic, Entry>,
    next_id: u64,
    connected: bool,
    /// The watcher's latest mark (see [`Mark`]); `None` while it has none.
    mark: Option<Mark>,
    /// The poller task: aborted when the hints are dropped; `None` when none runs.
    task: Option<tokio::task::AbortHandle>,
}

#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
struct Entry {
    id: u64,
    hub: Hub,
    since: Option<Mark>,
}

impl Hints {
    /// Every topic on one hub, connected or not (see [`Wakeups::is_connected`]).
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) fn one(connected: bool, local: bool) -> Hints {
        let hub = Hub::new();
        hub.set_connected(connected);
        Hints {
            kind: Kind::One {
                hub,
                listener: Mutex::new(None),
            },
            local,
        }
    }

    /// One hub per topic (SQLite's), connected or not.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn per_topic(connected: bool, local: bool) -> Hints {
        Hints {
            kind: Kind::PerTopic(Mutex::new(State {
                entries: HashMap::new(),
                next_id: 0,
                connected,
                mark: None,
                task: None,
            })),
            local,
        }
    }

    /// The per-topic state; `None` for hints on one hub.
    fn state(&self) -> Option<MutexGuard<'_, State>> {
        match &self.kind {
            Kind::PerTopic(state) => Some(state.lock().unwrap_or_else(PoisonError::into_inner)),
            Kind::One { .. } => None,
        }
    }

    /// Subscribes to `topic`.
    pub(crate) fn subscribe(&self, topic: &Topic) -> Wakeups {
        let mut state = match &self.kind {
            Kind::One { hub, .. } => return hub.subscribe(topic),
            Kind::PerTopic(state) => state.lock().unwrap_or_else(PoisonError::into_inner),
        };
        if state.entries.len() >= 64 && !state.entries.contains_key(topic) {
            state.entries.retain(|_, e| e.hub.subscribed_topics() > 0);
        }
        // A topic nobody waits on any more starts afresh: a new id and the current mark.
        if state
            .entries
            .get(topic)
            .is_some_and(|e| e.hub.subscribed_topics() == 0)
        {
            state.entries.remove(topic);
        }
        let connected = state.connected;
        let mark = state.mark;
        let id = state.next_id;
        let entry = state.entries.entry(topic.clone()).or_insert_with(|| {
            let hub = Hub::new();
            hub.set_connected(connected);
            Entry {
                id,
                hub,
                since: mark,
            }
        });
        let wakeups = entry.hub.subscribe(topic);
        if entry.id == id {
            state.next_id += 1;
        }
        wakeups
    }

    /// Hints that `topic` may have changed.
    pub(crate) fn notify(&self, topic: &Topic) {
        match &self.kind {
            Kind::One { hub, .. } => hub.notify(topic),
            Kind::PerTopic(_) => {
                if let Some(e) = self.state().as_ref().and_then(|s| s.entries.get(topic)) {
                    e.hub.notify(topic);
                }
            }
        }
    }

    /// A change the store itself made: notified when [`local`](Self::local).
    pub(crate) fn wrote(&self, topic: &Topic) {
        if self.local {
            self.notify(topic);
        }
    }

    /// Says whether the hints cover every change (see [`Hub::set_connected`]): going back to
    /// connected notifies every topic.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn set_connected(&self, connected: bool) {
        let mut state = match &self.kind {
            Kind::One { hub, .. } => return hub.set_connected(connected),
            Kind::PerTopic(state) => state.lock().unwrap_or_else(PoisonError::into_inner),
        };
        if state.connected == connected {
            return;
        }
        state.connected = connected;
        for e in state.entries.values() {
            e.hub.set_connected(connected);
        }
    }

    /// Starts the listener of hints on one hub with `start` (given the hub) unless one runs.
    /// `start` is called under the lock, so two subscribers never start two listeners; when it
    /// fails (outside a tokio runtime) the next call tries again.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn ensure_listener(&self, start: impl FnOnce(&Hub) -> lease_core::Result<Listener>) {
        let Kind::One { hub, listener } = &self.kind else {
            return;
        };
        let mut listener = listener.lock().unwrap_or_else(PoisonError::into_inner);
        if listener.is_none() {
            match start(hub) {
                Ok(l) => *listener = Some(l),
                Err(e) => tracing::debug!(error = %e, "lease-sql hints: no listener"),
            }
        }
    }

    /// Ends the listener of hints on one hub, if one runs (the next
    /// [`ensure_listener`](Self::ensure_listener) starts a new one); the hints say they are
    /// disconnected until it listens.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn stop_listener(&self) {
        let Kind::One { hub, listener } = &self.kind else {
            return;
        };
        let mut listener = listener.lock().unwrap_or_else(PoisonError::into_inner);
        *listener = None;
        hub.set_connected(false);
    }

    /// Starts the poller of per-topic hints with `start` unless one runs. `start` is called
    /// under the lock, so two subscribers never start two pollers.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn ensure_watcher(&self, start: impl FnOnce() -> Option<tokio::task::AbortHandle>) {
        let Some(mut state) = self.state() else {
            return;
        };
        if state.task.as_ref().is_none_or(|t| t.is_finished()) {
            state.mark = None;
            state.task = start();
        }
    }

    /// The topics somebody waits on (forgetting those nobody does). When there are none and
    /// `stop` is set, the poller is marked stopped in the same step — a subscriber arriving
    /// after it starts a new one — and `None` is returned: the poller then ends. `None` too for
    /// hints on one hub.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn subscribed(&self, stop: bool) -> Option<Vec<Subscribed>> {
        let mut state = self.state()?;
        state.entries.retain(|_, e| e.hub.subscribed_topics() > 0);
        if state.entries.is_empty() && stop {
            state.task = None;
            state.mark = None;
            return None;
        }
        Some(
            state
                .entries
                .iter()
                .map(|(t, e)| (e.id, t.clone(), e.since))
                .collect(),
        )
    }

    /// Records the poller's latest mark, which topics subscribed from now on carry.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn set_mark(&self, mark: Option<Mark>) {
        if let Some(mut state) = self.state() {
            state.mark = mark;
        }
    }
}

impl Drop for Hints {
    fn drop(&mut self) {
        // A listener ends when dropped with the hints; a poller is aborted.
        if let Kind::PerTopic(state) = &mut self.kind {
            let state = state.get_mut().unwrap_or_else(PoisonError::into_inner);
            if let Some(task) = state.task.take() {
                task.abort();
            }
        }
    }
}

/// The payload of a hint for `topic` as PostgreSQL's statements write it (`lease:NAME`,
/// `group:GROUP`, `slots:JOB`), read back by [`topic_of`].
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) const LEASE_PREFIX: &str = "lease:";
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) const GROUP_PREFIX: &str = "group:";
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) const SLOTS_PREFIX: &str = "slots:";

/// What a hint's payload names: `None` for one that names no topic (`*`, sent for a name too
/// long for a payload, or a payload of another version), which wakes every topic.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn topic_of(payload: &str) -> Option<Topic> {
    if let Some(name) = payload.strip_prefix(LEASE_PREFIX) {
        Some(Topic::lease(name))
    } else if let Some(group) = payload.strip_prefix(GROUP_PREFIX) {
        Some(Topic::group(group))
    } else {
        payload.strip_prefix(SLOTS_PREFIX).map(Topic::slots)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::time::Duration;
    use tokio::time::timeout;

    #[test]
    fn payloads_name_their_topic() {
        assert_eq!(topic_of("lease:a:b"), Some(Topic::lease("a:b")));
        assert_eq!(topic_of("group:g"), Some(Topic::group("g")));
        assert_eq!(topic_of("slots:job"), Some(Topic::slots("job")));
        assert_eq!(topic_of("*"), None);
        assert_eq!(topic_of("other:x"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn subscribed_topics_are_listed_and_forgotten() {
        let hints = Hints::per_topic(true, true);
        hints.set_mark(Some((1, 7)));
        let mut a = hints.subscribe(&Topic::lease("a"));
        let b = hints.subscribe(&Topic::lease("b"));
        let listed = hints.subscribed(true).unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|(_, _, since)| *since == Some((1, 7))));
        drop(b);
        let listed = hints.subscribed(true).unwrap();
        assert_eq!(listed.len(), 1);
        hints.wrote(&Topic::lease("a"));
        timeout(Duration::from_secs(1), a.changed()).await.unwrap();
        hints.set_connected(false);
        timeout(Duration::from_secs(1), a.changed()).await.unwrap();
        assert!(!a.is_connected());
        let late = hints.subscribe(&Topic::lease("c"));
        assert!(
            !late.is_connected(),
            "a topic subscribed while down starts down"
        );
        drop((a, late));
        assert!(hints.subscribed(true).is_none());
        assert!(hints.subscribed(false).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_topic_subscribed_again_is_a_new_entry() {
        let hints = Hints::per_topic(true, false);
        let a = hints.subscribe(&Topic::lease("a"));
        let first = hints.subscribed(false).unwrap()[0].0;
        let again = hints.subscribe(&Topic::lease("a"));
        assert_eq!(
            hints.subscribed(false).unwrap()[0].0,
            first,
            "a live entry is kept"
        );
        drop((a, again));
        let _b = hints.subscribe(&Topic::lease("a"));
        let listed = hints.subscribed(false).unwrap();
        assert_ne!(listed[0].0, first);
    }
}
