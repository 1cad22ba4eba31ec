//! What a store knows of its own claims ([`KnownLeases`]): the memory that lets renew and
//! release go without a read.

use std::collections::HashMap;
use std::time::Duration;

use lease_core::backend::{HolderToken, clock::Stamp};

/// How many claims a store remembers at most; past that it forgets those whose local time ran
/// out, then all (a forgotten claim costs a read on its next renewal or release, nothing else).
const MAX_KNOWN: usize = 10_000;

/// What this store knows of one of its own claims.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    /// The etcd lease the key hangs on.
    pub(crate) lease: i64,
    /// The term (the key's create revision); 0 while the claim's outcome is unknown.
    pub(crate) term: u64,
    /// The time the holder may count on from `since`: the requested TTL, or the server's
    /// when that is shorter.
    pub(crate) bound: Duration,
    /// Taken before the request that last started the etcd lease's TTL was sent.
    pub(crate) since: Stamp,
}

/// This store's own claims, by name and holder token: the memory that lets renew and release
/// go without a read, and that gives the time left by the local clock (never more than the
/// server's TTL from a moment before the server started it).
#[derive(Debug, Default)]
pub(crate) struct KnownLeases {
    by_name: HashMap<String, Vec<(HolderToken, Held)>>,
    len: usize,
}

impl KnownLeases {
    pub(crate) fn get(&self, name: &str, holder: &HolderToken) -> Option<Held> {
        self.by_name
            .get(name)?
            .iter()
            .find(|(h, _)| h == holder)
            .map(|&(_, held)| held)
    }

    /// The claim of `name` hung on etcd lease `lease`, whoever holds it.
    pub(crate) fn by_lease(&self, name: &str, lease: i64) -> Option<Held> {
        self.by_name
            .get(name)?
            .iter()
            .find(|(_, held)| held.lease == lease)
            .map(|&(_, held)| held)
    }

    pub(crate) fn insert(&mut self, name: &str, holder: &HolderToken, held: Held) {
        if self.len >= MAX_KNOWN {
            self.by_name.retain(|_, v| {
                v.retain(|(_, h)| !h.since.remaining(h.bound).is_zero());
                !v.is_empty()
            });
            self.len = self.by_name.values().map(Vec::len).sum();
            if self.len >= MAX_KNOWN {
                self.by_name.clear();
                self.len = 0;
            }
        }
        let entries = self.by_name.entry(name.to_owned()).or_default();
        match entries.iter_mut().find(|(h, _)| h == holder) {
            Some(entry) => entry.1 = held,
            None => {
                entries.push((holder.clone(), held));
                self.len += 1;
            }
        }
    }

    /// Forgets `holder`'s claim of `name` (only the one hung on `lease`, when given).
    pub(crate) fn remove(&mut self, name: &str, holder: &HolderToken, lease: Option<i64>) {
        if let Some(entries) = self.by_name.get_mut(name) {
            let before = entries.len();
            entries.retain(|(h, held)| !(h == holder && lease.is_none_or(|l| l == held.lease)));
            self.len -= before - entries.len();
            if entries.is_empty() {
                self.by_name.remove(name);
            }
        }
    }

    /// Forgets every claim of `name`.
    pub(crate) fn remove_name(&mut self, name: &str) {
        if let Some(entries) = self.by_name.remove(name) {
            self.len -= entries.len();
        }
    }
}
