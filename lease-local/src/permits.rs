//! The counted leases of the in-memory store: claiming, renewing, releasing, verifying and
//! listing permits, kept per name as its permits and the greatest term ever issued across them
//! (see [`lease_core::backend::permits`] for the rules).

use std::time::Duration;

use lease_core::backend::async_trait;
use lease_core::backend::notify::Topic;
use lease_core::backend::{Grant, HolderToken, check};
use lease_core::{
    Result,
    backend::permits::{PermitGrant, PermitInfo, PermitStore},
};
use tokio::time::Instant;

use crate::records::{Permit, Until, left};
use crate::store::MemoryStore;

#[async_trait]
impl PermitStore for MemoryStore {
    async fn claim_permit(
        &self,
        name: &str,
        count: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<PermitGrant>> {
        check::claim_permit(self, name, count, instance, ttl)?;
        let now = Instant::now();
        let until = self.until(now, ttl);
        let mut st = self.lock();
        let counted = st.permits.entry(name.to_owned()).or_default();
        let live: Vec<&Permit> = counted.permits.values().filter(|p| p.live(now)).collect();
        if live.len() >= usize::try_from(count).unwrap_or(usize::MAX)
            || live.iter().any(|p| p.holder == *holder)
        {
            return Ok(None);
        }
        let Some(index) = (0..count).find(|i| !counted.permits.get(i).is_some_and(|p| p.live(now)))
        else {
            return Ok(None);
        };
        counted.term += 1;
        let permit = Permit {
            holder: holder.clone(),
            instance: instance.to_owned(),
            term: counted.term,
            until,
        };
        let grant = permit.grant(now);
        counted.permits.insert(index, permit);
        drop(st);
        self.notify(&Topic::lease(name));
        Ok(Some(PermitGrant {
            permit: index,
            grant,
        }))
    }

    async fn renew_permit(
        &self,
        name: &str,
        index: u32,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::renew_permit(self, name, index, ttl)?;
        let now = Instant::now();
        let until = self.until(now, ttl);
        let mut st = self.lock();
        let permit = st
            .permits
            .get_mut(name)
            .and_then(|c| c.permits.get_mut(&index))
            .filter(|p| p.holder == *holder && p.live(now));
        Ok(permit.map(|p| {
            p.until = until;
            p.grant(now)
        }))
    }

    async fn release_permit(&self, name: &str, index: u32, holder: &HolderToken) -> Result<bool> {
        check::permit(self, name, index)?;
        let now = Instant::now();
        let mut st = self.lock();
        let permit = st
            .permits
            .get_mut(name)
            .and_then(|c| c.permits.get_mut(&index))
            .filter(|p| p.holder == *holder && p.live(now));
        let Some(permit) = permit else {
            return Ok(false);
        };
        permit.until = Until::At(now);
        drop(st);
        self.notify(&Topic::lease(name));
        Ok(true)
    }

    async fn verify_permit(&self, name: &str, holder: &HolderToken) -> Result<Option<PermitGrant>> {
        check::name(self, name)?;
        let now = Instant::now();
        let st = self.lock();
        Ok(st.permits.get(name).and_then(|c| {
            c.permits
                .iter()
                .find(|(_, p)| p.holder == *holder && p.live(now))
                .map(|(&permit, p)| PermitGrant {
                    permit,
                    grant: p.grant(now),
                })
        }))
    }

    async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
        check::name(self, name)?;
        let now = Instant::now();
        let st = self.lock();
        Ok(st
            .permits
            .get(name)
            .map(|c| {
                c.permits
                    .iter()
                    .map(|(&permit, p)| PermitInfo {
                        permit,
                        instance: p.instance.clone(),
                        term: p.term,
                        live: p.live(now),
                        expires_in: left(p.until, now),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }
}
