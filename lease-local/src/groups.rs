//! Partition leases and membership records of the in-memory store.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use lease_core::LeaseStoreExt;
use lease_core::{
    Member, MembershipStore, PartitionLease, PartitionStore, Result,
    backend::{async_trait, check_member_args, check_partition_args, check_partition_batch},
};
use tokio::time::Instant;

use crate::memory::{MemoryStore, Until};

#[derive(Debug)]
pub(crate) struct PartitionRecord {
    owner: String,
    epoch: u64,
    until: Until,
}

#[derive(Debug)]
pub(crate) struct MemberRecord {
    address: String,
    groups: Vec<String>,
    until: Until,
}

fn left(until: Until, now: Instant) -> Duration {
    match until {
        Until::Never => Duration::MAX,
        Until::At(at) => at.saturating_duration_since(now),
    }
}

impl PartitionRecord {
    fn live(&self, now: Instant) -> bool {
        !left(self.until, now).is_zero()
    }

    fn lease(&self, partition: u32, now: Instant) -> PartitionLease {
        PartitionLease {
            partition,
            owner: self.owner.clone(),
            epoch: self.epoch,
            expires_in: left(self.until, now),
        }
    }
}

#[async_trait]
impl PartitionStore for MemoryStore {
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<PartitionLease>> {
        check_partition_args(self, group, owner, Some(ttl))?;
        let now = Instant::now();
        let until = self.until(now, ttl);
        let mut st = self.lock();
        let key = (group.to_owned(), partition);
        let epoch = match st.partitions.get(&key) {
            Some(r) if r.live(now) && r.owner == owner => r.epoch,
            Some(r) if r.live(now) => return Ok(None),
            Some(r) => r.epoch + 1,
            None => 1,
        };
        let rec = PartitionRecord {
            owner: owner.to_owned(),
            epoch,
            until,
        };
        let lease = rec.lease(partition, now);
        st.partitions.insert(key, rec);
        Ok(Some(lease))
    }

    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<PartitionLease>> {
        check_partition_args(self, group, owner, Some(ttl))?;
        check_partition_batch(partitions)?;
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
        check_partition_args(self, group, owner, None)?;
        check_partition_batch(partitions)?;
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
        Ok(ended)
    }

    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        self.validate_name(group)?;
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

#[async_trait]
impl MembershipStore for MemoryStore {
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member> {
        check_member_args(self, service, node, Some(address), Some(ttl), groups)?;
        let now = Instant::now();
        let until = self.until(now, ttl);
        let rec = MemberRecord {
            address: address.to_owned(),
            groups: groups.to_vec(),
            until,
        };
        let member = Member {
            node: node.to_owned(),
            address: rec.address.clone(),
            groups: rec.groups.clone(),
            expires_in: left(until, now),
        };
        self.lock()
            .members
            .insert((service.to_owned(), node.to_owned()), rec);
        Ok(member)
    }

    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        check_member_args(self, service, "-", None, None, &[])?;
        let now = Instant::now();
        let st = self.lock();
        let live: BTreeMap<&str, Member> = st
            .members
            .iter()
            .filter(|((s, _), r)| s == service && !left(r.until, now).is_zero())
            .map(|((_, node), r)| {
                let member = Member {
                    node: node.clone(),
                    address: r.address.clone(),
                    groups: r.groups.clone(),
                    expires_in: left(r.until, now),
                };
                (node.as_str(), member)
            })
            .collect();
        Ok(live.into_values().collect())
    }

    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        check_member_args(self, service, node, None, None, &[])?;
        let now = Instant::now();
        let mut st = self.lock();
        match st.members.get_mut(&(service.to_owned(), node.to_owned())) {
            Some(r) if !left(r.until, now).is_zero() => {
                r.until = Until::At(now);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
