//! The hint state one store shares with its clones: the hub its waiters subscribe to, the
//! listener feeding it, and what decides whether it may say it is connected (a live
//! subscription, and the right to publish).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lease_core::backend::listen::{Link, Listener};
use lease_core::backend::notify::Hub;

/// How often the subscriber connection pings the server: a link that died without a reset is
/// found at the first ping after it, within the operation timeout (5 s).
pub(crate) const PING_EVERY: Duration = Duration::from_secs(5);

/// The hints of one store (shared by its clones): the hub, and the listener feeding it.
#[derive(Debug)]
pub(crate) struct Hints {
    pub(crate) hub: Hub,
    listener: Mutex<Option<(Listener, String)>>,
    /// Whether the hub may say it is connected, shared with the listener's sessions.
    pub(crate) link: Arc<Mutex<LinkState>>,
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
