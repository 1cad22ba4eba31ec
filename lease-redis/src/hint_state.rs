//! The hint state one store shares with its clones: the hub its waiters subscribe to, the
//! listener feeding it, what decides whether it may say it is connected (a live
//! subscription, and the right to publish), and the names whose waiters' marks its subscriber
//! keeps set ([`Marks`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use lease_core::backend::listen::{Link, Listener};
use lease_core::backend::notify::Hub;

/// How often the subscriber connection pings the server: a link that died without a reset is
/// found at the first ping after it, within the operation timeout (5 s).
pub(crate) const PING_EVERY: Duration = Duration::from_secs(5);

/// How long a name's waiters' mark (`<prefix>{<name>}:waiting`) lives after it was last set:
/// three of the subscriber's refreshes (one per [`PING_EVERY`]), so a mark outlives a slow
/// refresh and is gone within 15 s of its last waiter.
pub(crate) const MARK_TTL: Duration = Duration::from_secs(15);

/// The lease names this store's waiters wait on (shared by its clones): its subscriber
/// connection sets each one's waiters' mark at once, and again every [`PING_EVERY`] while
/// anyone still waits on it, so the lease scripts of every process publish their hint for it
/// (`scripts/waited.lua`); a name nobody waits on costs no `PUBLISH`.
#[derive(Debug, Default)]
pub(crate) struct Marks {
    names: Mutex<MarkSet>,
    /// Woken when a name is added, so the subscriber marks it at once.
    pub(crate) added: Notify,
}

#[derive(Debug, Default)]
struct MarkSet {
    /// Every name marked, until a refresh finds nobody waiting on it.
    all: HashSet<String>,
    /// The names added since the subscriber last marked.
    new: Vec<String>,
}

impl Marks {
    /// A waiter on `name` subscribed: its mark is set at once (when the subscriber is up; else
    /// when it has subscribed) and kept while anyone waits on `name`.
    pub(crate) fn add(&self, name: &str) {
        let mut m = locked(&self.names);
        if m.all.insert(name.to_owned()) {
            m.new.push(name.to_owned());
            drop(m);
            self.added.notify_one();
        }
    }

    /// The names added since the last call (or refresh), to mark at once.
    pub(crate) fn take_new(&self) -> Vec<String> {
        std::mem::take(&mut locked(&self.names).new)
    }

    /// Every name someone still waits on (by `waited`), to mark again; the others are
    /// forgotten (their marks run out).
    pub(crate) fn refresh(&self, waited: impl Fn(&str) -> bool) -> Vec<String> {
        let mut m = locked(&self.names);
        m.all.retain(|n| waited(n));
        m.new.clear();
        m.all.iter().cloned().collect()
    }
}

/// The hints of one store (shared by its clones): the hub, and the listener feeding it.
#[derive(Debug)]
pub(crate) struct Hints {
    pub(crate) hub: Hub,
    listener: Mutex<Option<(Listener, String)>>,
    /// Whether the hub may say it is connected, shared with the listener's sessions.
    pub(crate) link: Arc<Mutex<LinkState>>,
    /// The names whose waiters' marks the listener's sessions keep set.
    pub(crate) marks: Arc<Marks>,
}

/// What decides whether a store's hints are connected: its subscriber, and its right to
/// publish. Changed under one lock, so that a subscription coming up and a refused `PUBLISH`
/// found at the same time leave the hub disconnected.
#[derive(Debug)]
pub(crate) struct LinkState {
    /// How many of the listener's sessions have subscribed and not ended yet (a replaced
    /// listener's may end after its successor's has subscribed).
    subscribed: u32,
    /// The store's user may `PUBLISH` on the channel, as far as its start-up check found
    /// (`true` until it found otherwise).
    publishes: bool,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Hints {
    /// Hints with no listener yet: only the store's own changes, disconnected.
    pub(crate) fn local() -> Hints {
        let hub = Hub::new();
        hub.set_connected(false);
        Hints {
            hub,
            listener: Mutex::new(None),
            link: Arc::new(Mutex::new(LinkState {
                subscribed: 0,
                publishes: true,
            })),
            marks: Arc::new(Marks::default()),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<(Listener, String)>> {
        locked(&self.listener)
    }

    /// Records whether the store's user may publish on the channel: when it may not, the hints
    /// say they are disconnected (its changes reach no other process's subscriber, and in a
    /// deployment whose processes share the user, theirs reach none here), and `true` when it
    /// did not know that before. When it may again, they say connected while subscribed.
    pub(crate) fn set_publishes(&self, publishes: bool) -> bool {
        let mut link = locked(&self.link);
        let news = link.publishes != publishes;
        link.publishes = publishes;
        if news {
            self.hub.set_connected(publishes && link.subscribed > 0);
        }
        news
    }
}

/// A session's subscription, as [`LinkState`] knows it: up from [`Subscribed::up`] until
/// dropped (the session ended).
pub(crate) struct Subscribed(Arc<Mutex<LinkState>>);

impl Subscribed {
    /// The session has subscribed: the hints turn connected, unless the store may not publish.
    pub(crate) fn up(state: &Arc<Mutex<LinkState>>, link: &Link) -> Subscribed {
        let mut s = locked(state);
        s.subscribed = s.subscribed.saturating_add(1);
        if s.publishes {
            link.up();
        }
        Subscribed(state.clone())
    }
}

impl Drop for Subscribed {
    fn drop(&mut self) {
        let mut s = locked(&self.0);
        s.subscribed = s.subscribed.saturating_sub(1);
    }
}
