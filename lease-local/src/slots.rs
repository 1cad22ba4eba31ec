//! The scheduler slots of the in-memory store.

use std::time::Duration;

use lease_core::backend::check::{self, Batch};
use lease_core::backend::notify::Topic;
use lease_core::backend::{
    Grant, HolderToken, async_trait,
    slots::{SlotClaim, SlotFinish, SlotRecord},
};
use lease_core::{Result, backend::slots::SlotStore};
use tokio::time::Instant;

use crate::records::*;
use crate::store::*;

impl MemoryStore {
    /// Hints a job's lease and slot topics: its record changed.
    fn slot_changed(&self, name: &str) {
        self.notify(&Topic::lease(name));
        self.notify(&Topic::slots(name));
    }
}

#[async_trait]
impl SlotStore for MemoryStore {
    async fn claim_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<SlotClaim> {
        check::claim(self, name, instance, ttl)?;
        let now = Instant::now();
        let now_ms = self.now_ms();
        let until = self.until(now, ttl);
        let mut st = self.lock();
        let (term, slot) = match st.leases.get(name) {
            Some(r) if r.live(now) => return Ok(SlotClaim::Held),
            Some(r) => (r.term + 1, r.slot),
            None => (1, SlotRecord::default()),
        };
        if let Some(last_ms) = slot.last_ms.filter(|last| instant_ms <= *last) {
            return Ok(SlotClaim::Taken { last_ms });
        }
        if instant_ms > now_ms {
            return Ok(SlotClaim::Early { now_ms });
        }
        let rec = Record {
            holder: holder.clone(),
            instance: instance.to_owned(),
            term,
            until,
            slot: SlotRecord {
                last_ms: Some(instant_ms),
                unfinished_ms: Some(instant_ms),
                rerun_ms: slot.rerun_ms,
            },
        };
        let expires_in = rec.expires_in(now);
        st.leases.insert(name.to_owned(), rec);
        drop(st);
        self.slot_changed(name);
        Ok(SlotClaim::Claimed {
            grant: Grant { term, expires_in },
            superseded_ms: slot.unfinished_ms,
        })
    }

    async fn finish_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instant_ms: i64,
        passed_ms: Option<i64>,
    ) -> Result<SlotFinish> {
        check::name(self, name)?;
        let now = Instant::now();
        let now_ms = self.now_ms();
        let mut st = self.lock();
        let Some(r) = st.leases.get_mut(name) else {
            return Ok(SlotFinish::default());
        };
        let held = r.holder == *holder && r.live(now);
        let mut out = SlotFinish::default();
        if r.slot.last_ms == Some(instant_ms) {
            if r.slot.unfinished_ms == Some(instant_ms) {
                r.slot.unfinished_ms = None;
            }
            out.recorded = true;
            if let Some(passed) = passed_ms.filter(|p| held && *p <= now_ms && *p > instant_ms) {
                r.slot.last_ms = Some(passed);
                out.passed_taken = true;
            }
        }
        if held {
            r.until = Until::At(now);
            out.released = true;
        }
        drop(st);
        if out.recorded || out.released {
            self.slot_changed(name);
        }
        Ok(out)
    }

    async fn unfinished(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
        if check::unfinished(self, names)? == Batch::Empty {
            return Ok(Vec::new());
        }
        let now = Instant::now();
        let st = self.lock();
        Ok(names
            .iter()
            .filter_map(|name| {
                let r = st.leases.get(name)?;
                let u = r.slot.unfinished_ms?;
                let eligible =
                    r.slot.last_ms == Some(u) && r.slot.rerun_ms != Some(u) && !r.live(now);
                eligible.then(|| (name.clone(), u))
            })
            .collect())
    }

    async fn claim_rerun(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<Option<Grant>> {
        check::claim(self, name, instance, ttl)?;
        let now = Instant::now();
        let until = self.until(now, ttl);
        let mut st = self.lock();
        let Some(r) = st.leases.get_mut(name) else {
            return Ok(None);
        };
        let s = r.slot;
        let eligible = s.unfinished_ms == Some(instant_ms)
            && s.last_ms == Some(instant_ms)
            && s.rerun_ms != Some(instant_ms)
            && !r.live(now);
        if !eligible {
            return Ok(None);
        }
        r.holder = holder.clone();
        r.instance = instance.to_owned();
        r.term += 1;
        r.until = until;
        r.slot.rerun_ms = Some(instant_ms);
        let grant = Grant {
            term: r.term,
            expires_in: r.expires_in(now),
        };
        drop(st);
        self.slot_changed(name);
        Ok(Some(grant))
    }

    async fn last_slot(&self, name: &str) -> Result<Option<SlotRecord>> {
        check::name(self, name)?;
        Ok(self.lock().leases.get(name).map(|r| r.slot))
    }
}
