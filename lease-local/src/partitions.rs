//! The partition leases of the in-memory store.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use lease_core::backend::async_trait;
use lease_core::backend::check::{self, Batch};
use lease_core::backend::notify::Topic;
use lease_core::{
    Result,
    backend::partitions::{PartitionLease, PartitionStore},
};
use tokio::time::Instant;

use crate::records::*;
use crate::store::*;

#[async_trait]
impl PartitionStore for MemoryStore {
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<PartitionLease>> {
        check::acquire_partition(self, group, owner, ttl)?;
        let now = Instant::now();
        let until = self.until(now, ttl);
        let mut st = self.lock();
        let key = (group.to_owned(), partition);
        let (epoch, changed_hands) = match st.partitions.get(&key) {
            Some(r) if r.live(now) && r.owner == owner => (r.epoch, false),
            Some(r) if r.live(now) => return Ok(None),
            Some(r) => (r.epoch + 1, true),
            None => (1, true),
        };
        let rec = PartitionRecord {
            owner: owner.to_owned(),
            epoch,
            until,
        };
        let lease = rec.lease(partition, now);
        st.partitions.insert(key, rec);
        drop(st);
        if changed_hands {
            self.notify(&Topic::group(group));
        }
        Ok(Some(lease))
    }

    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<PartitionLease>> {
        if check::renew_partitions(self, group, partitions, owner, ttl)? == Batch::Empty {
            return Ok(Vec::new());
        }
        let now = Instant::now();
        let until = self.until(now, ttl);
        let mut st = self.lock();
        let mut out = Vec::new();
        for &p in partitions.iter().collect::<BTreeSet<_>>() {
            if let Some(r) = st.partitions.get_mut(&(group.to_owned(), p))
                && r.owner == owner
                && r.live(now)
            {
                r.until = until;
                out.push(r.lease(p, now));
            }
        }
        Ok(out)
    }

    async fn release_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> Result<usize> {
        if check::release_partitions(self, group, partitions, owner)? == Batch::Empty {
            return Ok(0);
        }
        let now = Instant::now();
        let mut st = self.lock();
        let mut ended = 0;
        for &p in partitions.iter().collect::<BTreeSet<_>>() {
            if let Some(r) = st.partitions.get_mut(&(group.to_owned(), p))
                && r.owner == owner
                && r.live(now)
            {
                r.until = Until::At(now);
                ended += 1;
            }
        }
        drop(st);
        if ended > 0 {
            self.notify(&Topic::group(group));
        }
        Ok(ended)
    }

    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        check::owners(self, group)?;
        let now = Instant::now();
        let st = self.lock();
        let live: BTreeMap<u32, PartitionLease> = st
            .partitions
            .iter()
            .filter(|((g, _), r)| g == group && r.live(now))
            .map(|((_, p), r)| (*p, r.lease(*p, now)))
            .collect();
        Ok(live.into_values().collect())
    }
}
