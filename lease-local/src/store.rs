//! The in-memory store: its state, its clock and its constructors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lease_core::backend::notify::Hub;
use lease_core::backend::notify::Topic;
use tokio::time::Instant;

use crate::records::{Counted, MemberRecord, PartitionRecord, Record, Until};

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) leases: HashMap<String, Record>,
    pub(crate) polled: HashMap<String, (Vec<u8>, Instant)>,
    /// Partition leases by (group, partition).
    pub(crate) partitions: HashMap<(String, u32), PartitionRecord>,
    /// Member records by (service, node).
    pub(crate) members: HashMap<(String, String), MemberRecord>,
    pub(crate) permits: HashMap<String, Counted>,
}

/// An in-memory [`LeaseStore`](lease_core::LeaseStore) on tokio time: expiry is real, judged by
/// `tokio::time::Instant`, so it follows paused time in tests.
///
/// Clones share one store. Every operation takes one short lock and never awaits while holding
/// it; each is atomic and cancel safe.
///
/// It hints every change ([`LeaseStore::changes`](lease_core::LeaseStore::changes) answers, and
/// `capabilities().watch` is `true`): a lease's topic on each claim (slot claims and reruns
/// included), release, force release and slot finish that ended it; a group's topic on each
/// partition acquire that changed hands, each release that ended a partition, and each member
/// that joins (a heartbeat with no live record) or leaves; a job's slot topic on each slot
/// claim, rerun and finish. Expiry is not hinted (nothing happens at that instant): a waiter
/// wakes for it at the time left it read. All clones share one hub, so its hints cover every
/// change (always connected).
#[derive(Debug, Clone)]
pub struct MemoryStore {
    pub(crate) state: Arc<Mutex<State>>,
    pub(crate) hub: Hub,
    pub(crate) expiry: bool,
    pub(crate) clock: WallClock,
}

/// The store's wall clock for slot instants: the system clock when the store was made, moved on
/// by tokio's clock since, so it follows paused time in tests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WallClock {
    pub(crate) wall_ms: i64,
    pub(crate) at: Instant,
}

impl WallClock {
    pub(crate) fn new() -> WallClock {
        let wall_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        WallClock {
            wall_ms,
            at: Instant::now(),
        }
    }

    pub(crate) fn now_ms(&self) -> i64 {
        let since = i64::try_from(self.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.wall_ms.saturating_add(since)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store whose leases expire after their TTL.
    pub fn new() -> MemoryStore {
        MemoryStore {
            state: Arc::default(),
            hub: Hub::new(),
            expiry: true,
            clock: WallClock::new(),
        }
    }

    /// A store whose leases never expire: they end only on release (single-node mode).
    pub fn never_expiring() -> MemoryStore {
        MemoryStore {
            state: Arc::default(),
            hub: Hub::new(),
            expiry: false,
            clock: WallClock::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store's clock for slot instants, in milliseconds since the Unix epoch: the system
    /// clock at creation, moved on by tokio's clock (so it follows paused time).
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Hints `topic` to its waiters.
    pub(crate) fn notify(&self, topic: &Topic) {
        self.hub.notify(topic);
    }

    pub(crate) fn until(&self, now: Instant, ttl: Duration) -> Until {
        if self.expiry {
            Until::At(now + ttl)
        } else {
            Until::Never
        }
    }
}
