//! The memory of a store object's own last writes, per lease name and per `(group, partition)`:
//! what lets renew and release compare-and-set without reading first.

use std::collections::HashMap;
use std::hash::Hash;
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use lease_core::backend::HolderToken;

/// The last write this store object made per lease name.
pub(crate) type KnownLeases = Recent<String, Known>;

/// A write remembered by when it was sent.
pub(crate) trait Sent {
    /// When the write was sent.
    fn sent_at(&self) -> Instant;
}

/// A map of this store object's own recent writes, bounded by age rather than by count.
///
/// Entries are only a shortcut (a write compares-and-sets against the remembered revision
/// instead of reading first; a missing or stale entry costs a read, never a wrong answer), so
/// what to keep is a matter of cost. An entry written longer than a lease ago belongs to a
/// lease that has expired or that another store object renews: when the map reaches its sweep
/// mark, those go, and the mark moves to twice what is left (never below the floor). Entries
/// of leases this store still renews are never dropped: a process holding 100,000 names keeps
/// its one round trip per renewal (a count bound that cleared the map made every renewal past
/// it read first), and a sweep costs O(entries) once per doubling, not per write.
#[derive(Debug)]
pub(crate) struct Recent<K, V> {
    map: HashMap<K, V>,
    floor: usize,
    sweep_at: usize,
}

impl<K: Eq + Hash, V: Sent> Recent<K, V> {
    /// An empty map that first sweeps at `floor` entries.
    pub(crate) fn new(floor: usize) -> Recent<K, V> {
        Recent {
            map: HashMap::new(),
            floor,
            sweep_at: floor,
        }
    }

    /// Remembers `value` for `key`; at the sweep mark, first drops every entry sent `ttl` or
    /// more ago.
    pub(crate) fn remember(&mut self, key: K, value: V, ttl: Duration) {
        if self.map.len() >= self.sweep_at && !self.map.contains_key(&key) {
            self.map.retain(|_, v| v.sent_at().elapsed() < ttl);
            self.sweep_at = self.floor.max(self.map.len().saturating_mul(2));
        }
        self.map.insert(key, value);
    }
}

impl<K, V> Deref for Recent<K, V> {
    type Target = HashMap<K, V>;

    fn deref(&self) -> &HashMap<K, V> {
        &self.map
    }
}

impl<K, V> DerefMut for Recent<K, V> {
    fn deref_mut(&mut self) -> &mut HashMap<K, V> {
        &mut self.map
    }
}

/// A write this store made: the revision it got and what it wrote.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) holder: HolderToken,
    pub(crate) revision: u64,
    pub(crate) term: u64,
    pub(crate) instance: String,
    /// A job's lease (`job1`), claimed for a scheduler slot.
    pub(crate) job: bool,
    /// When the write was sent: the server stamped the message later than this.
    pub(crate) sent_at: Instant,
}

/// The last write this store object made per `(group, partition)`.
pub(crate) type KnownPartitions = Recent<(String, u32), KnownPartition>;

/// A partition write this store made: the owner, the revision it got, the epoch it carries.
#[derive(Debug, Clone)]
pub(crate) struct KnownPartition {
    pub(crate) owner: String,
    pub(crate) revision: u64,
    pub(crate) epoch: u64,
    /// When the write was sent: the server stamped the message later than this.
    pub(crate) sent_at: Instant,
}

impl Sent for Known {
    fn sent_at(&self) -> Instant {
        self.sent_at
    }
}

impl Sent for KnownPartition {
    fn sent_at(&self) -> Instant {
        self.sent_at
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    struct At(Instant);

    impl Sent for At {
        fn sent_at(&self) -> Instant {
            self.0
        }
    }

    const TTL: Duration = Duration::from_secs(15);

    /// A process that holds more names than the floor keeps every one of them (each renewal
    /// stays one compare-and-set), where a count bound that cleared the map forgot them all.
    #[test]
    fn live_writes_past_the_floor_are_all_kept() {
        let mut recent = Recent::new(16);
        for i in 0..1_000 {
            recent.remember(i, At(Instant::now()), TTL);
        }
        assert_eq!(recent.len(), 1_000);
        assert!(recent.sweep_at <= 2 * 1_000, "{}", recent.sweep_at);
    }

    /// Writes older than a lease go at the next sweep; the mark follows what is left.
    #[test]
    fn writes_older_than_a_lease_are_swept() {
        let old = Instant::now().checked_sub(TTL * 2).unwrap();
        let mut recent = Recent::new(16);
        for i in 0..16 {
            recent.remember(i, At(old), TTL);
        }
        assert_eq!(recent.len(), 16);
        recent.remember(100, At(Instant::now()), TTL);
        assert_eq!(recent.len(), 1, "the 16 stale writes stay");
        assert_eq!(recent.sweep_at, 16, "the mark never goes below the floor");
        // Overwriting a remembered key never sweeps.
        recent.sweep_at = 1;
        recent.remember(100, At(Instant::now()), TTL);
        assert_eq!(recent.len(), 1);
    }
}
