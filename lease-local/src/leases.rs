//! The lease operations of the in-memory store.

use std::time::Duration;

use lease_core::backend::names::{self, ListedName, NamePage};
use lease_core::backend::notify::{Topic, Wakeups};
use lease_core::backend::{Grant, HolderToken, RenewItem, async_trait, check, slots::SlotRecord};
use lease_core::{
    LeaseStore, Result,
    backend::{
        Capabilities, LeaseInfo, membership::MembershipStore, partitions::PartitionStore,
        permits::PermitStore, slots::SlotStore,
    },
};
use tokio::time::Instant;

use crate::records::*;
use crate::store::*;

#[async_trait]
impl LeaseStore for MemoryStore {
    fn backend(&self) -> &'static str {
        if self.expiry { "memory" } else { "local" }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            expiry: self.expiry,
            consecutive_terms: true,
            keeps_ended_records: true,
            // Expiry by the process's monotonic clock (nanoseconds); the default 1 ms.
            force_release: true,
            list_names: true,
            watch: true,
            renew_many: true,
            ..lease_core::backend::derived_capabilities(self)
        }
    }

    fn permit_store(&self) -> Option<&dyn PermitStore> {
        Some(self)
    }

    fn partition_store(&self) -> Option<&dyn PartitionStore> {
        Some(self)
    }

    fn membership_store(&self) -> Option<&dyn MembershipStore> {
        Some(self)
    }

    fn slot_store(&self) -> Option<&dyn SlotStore> {
        Some(self)
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::claim(self, name, instance, ttl)?;
        let now = Instant::now();
        let until = self.until(now, ttl);
        let mut st = self.lock();
        let (term, slot) = match st.leases.get(name) {
            Some(r) if r.live(now) => return Ok(None),
            Some(r) => (r.term + 1, r.slot),
            None => (1, SlotRecord::default()),
        };
        let rec = Record {
            holder: holder.clone(),
            instance: instance.to_owned(),
            term,
            until,
            slot,
        };
        let expires_in = rec.expires_in(now);
        st.leases.insert(name.to_owned(), rec);
        drop(st);
        self.notify(&Topic::lease(name));
        Ok(Some(Grant { term, expires_in }))
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::renew(self, name, ttl)?;
        let now = Instant::now();
        let until = self.until(now, ttl);
        let mut st = self.lock();
        match st.leases.get_mut(name) {
            Some(r) if r.holder == *holder && r.live(now) => {
                r.until = until;
                Ok(Some(Grant {
                    term: r.term,
                    expires_in: r.expires_in(now),
                }))
            }
            _ => Ok(None),
        }
    }

    /// Every item under one lock, by one reading of the clock.
    async fn renew_many(
        &self,
        items: &[RenewItem<'_>],
        ttl: Duration,
    ) -> Result<Vec<Result<Option<Grant>>>> {
        if check::renew_many(self, items, ttl)? == check::Batch::Empty {
            return Ok(Vec::new());
        }
        let now = Instant::now();
        let until = self.until(now, ttl);
        let mut st = self.lock();
        Ok(items
            .iter()
            .map(|item| match st.leases.get_mut(item.name) {
                Some(r) if r.holder == *item.holder && r.live(now) => {
                    r.until = until;
                    Ok(Some(Grant {
                        term: r.term,
                        expires_in: r.expires_in(now),
                    }))
                }
                _ => Ok(None),
            })
            .collect())
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        check::name(self, name)?;
        let now = Instant::now();
        let mut st = self.lock();
        match st.leases.get_mut(name) {
            Some(r) if r.holder == *holder && r.live(now) => {
                r.until = Until::At(now);
                drop(st);
                self.notify(&Topic::lease(name));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        check::name(self, name)?;
        let now = Instant::now();
        let st = self.lock();
        Ok(st
            .leases
            .get(name)
            .filter(|r| r.holder == *holder && r.live(now))
            .map(|r| Grant {
                term: r.term,
                expires_in: r.expires_in(now),
            }))
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        check::name(self, name)?;
        let now = Instant::now();
        let st = self.lock();
        Ok(st.leases.get(name).map(|r| LeaseInfo {
            name: name.to_owned(),
            instance: r.instance.clone(),
            term: r.term,
            live: r.live(now),
            expires_in: r.expires_in(now),
        }))
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        check::name(self, name)?;
        let now = Instant::now();
        let mut st = self.lock();
        match st.leases.get_mut(name) {
            Some(r) if r.live(now) => {
                r.until = Until::At(now);
                drop(st);
                self.notify(&Topic::lease(name));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Walks the lease and permit maps under the lock (no await while it is held): every lease
    /// record (held, released or expired: the store keeps them all) and every counted name.
    async fn names(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<NamePage> {
        check::names(self, prefix, after, limit)?;
        let st = self.lock();
        let leases = st
            .leases
            .keys()
            .filter(|n| names::in_range(n, prefix, after));
        let counted = st
            .permits
            .keys()
            .filter(|n| names::in_range(n, prefix, after));
        let found: Vec<ListedName> = leases
            .map(names::lease_name)
            .chain(counted.map(names::counted_name))
            .collect();
        drop(st);
        Ok(NamePage::from_found(found, limit))
    }

    fn changes(&self, topic: &Topic) -> Option<Wakeups> {
        Some(self.hub.subscribe(topic))
    }
}
