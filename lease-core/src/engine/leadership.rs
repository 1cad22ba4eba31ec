//! A coordinator's own leadership state per name, on a watch channel: what a readiness
//! endpoint or an admin page reads, outside the work's closure.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Stamp;
use crate::store::record::LeaseInfo;

/// One coordinator's view of one lease name: whether it holds it, under which term and since
/// when; while it does not, who does, as its last campaign saw. Read it with
/// [`Coordinator::leadership`](crate::Coordinator::leadership).
///
/// `held` is the coordinator's own state, never a guess: it turns `true` when a claim is won
/// and `false` the moment the term ends — lost, closed, resigned, or its work told to stop —
/// which is when work under it must stop. (The lease itself may still be renewed for a moment
/// while the work winds down, and is released after; the
/// [`lease_held`](crate::telemetry::HELD) gauge follows the lease, this follows the right to
/// act.) The holder seen while following is a hint for display: read when a campaign first
/// finds the name held, and again once that holder's lease, as read, would have run out, so it
/// may be up to a lease old.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Leadership {
    /// The lease's name.
    pub name: String,
    /// `true` while this coordinator holds a live term of the name.
    pub held: bool,
    /// This coordinator's term while `held`; otherwise the term of the holder the last campaign
    /// saw, `None` when nobody held the name live then, or no campaign has looked.
    pub term: Option<u64>,
    /// While `held`: when the claim that won the term was sent, on the local clock
    /// (`since.elapsed()` is how long this coordinator has led).
    pub since: Option<Stamp>,
    /// The holder's instance label: this coordinator's own while `held`; otherwise the holder
    /// the last campaign saw.
    pub holder: Option<String>,
    /// While following: the time the holder had left by the store's clock when the last
    /// campaign looked.
    pub holder_expires_in: Option<Duration>,
}

impl Leadership {
    fn none(name: &str) -> Leadership {
        Leadership {
            name: name.to_owned(),
            held: false,
            term: None,
            since: None,
            holder: None,
            holder_expires_in: None,
        }
    }
}

/// The watch channels of one coordinator, one per name asked for or claimed.
#[derive(Default)]
pub(crate) struct Board {
    channels: Mutex<HashMap<String, watch::Sender<Leadership>>>,
}

impl Board {
    /// A receiver of `name`'s state, its channel made when missing.
    pub(crate) fn subscribe(&self, name: &str) -> watch::Receiver<Leadership> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels
            .entry(name.to_owned())
            .or_insert_with(|| watch::Sender::new(Leadership::none(name)))
            .subscribe()
    }

    /// Changes `name`'s state with `change` (which says whether it changed anything), its
    /// channel made when missing.
    fn update(&self, name: &str, change: impl FnOnce(&mut Leadership) -> bool) {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels
            .entry(name.to_owned())
            .or_insert_with(|| watch::Sender::new(Leadership::none(name)))
            .send_if_modified(change);
    }

    /// This coordinator won term `token` of `name` with a claim sent at `since`.
    pub(crate) fn won(&self, name: &str, token: u64, instance: &str, since: Stamp) {
        self.update(name, |l| {
            l.held = true;
            l.term = Some(token);
            l.since = Some(since);
            l.holder = Some(instance.to_owned());
            l.holder_expires_in = None;
            true
        });
    }

    /// Term `token` of `name` ended. A stale end (of a term already replaced) changes nothing.
    pub(crate) fn ended(&self, name: &str, token: u64) {
        self.update(name, |l| {
            if !(l.held && l.term == Some(token)) {
                return false;
            }
            *l = Leadership::none(name);
            true
        });
    }

    /// A campaign found `name` held; `holder` is what the store said then (`None`: nobody
    /// live by the time it was read). Ignored while this coordinator holds the name.
    pub(crate) fn following(&self, name: &str, holder: Option<&LeaseInfo>) {
        self.update(name, |l| {
            if l.held {
                return false;
            }
            let before = (l.term, l.holder.clone(), l.holder_expires_in);
            l.term = holder.map(|h| h.term);
            l.holder = holder.map(|h| h.instance.clone());
            l.holder_expires_in = holder.map(|h| h.expires_in);
            before != (l.term, l.holder.clone(), l.holder_expires_in)
        });
    }
}
