//! The in-memory store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lease_core::LeaseStoreExt;
use lease_core::{
    Capabilities, LeaseInfo, LeaseStore, PollingStore, Result, SlotStore,
    backend::{
        Grant, HolderToken, SlotClaim, SlotFinish, SlotRecord, async_trait, validate_instance,
    },
};
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub(crate) enum Until {
    Never,
    At(Instant),
}

#[derive(Debug)]
struct Record {
    holder: HolderToken,
    instance: String,
    term: u64,
    until: Until,
    slot: SlotRecord,
}

impl Record {
    fn expires_in(&self, now: Instant) -> Duration {
        match self.until {
            Until::Never => Duration::MAX,
            Until::At(at) => at.saturating_duration_since(now),
        }
    }

    fn live(&self, now: Instant) -> bool {
        !self.expires_in(now).is_zero()
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    leases: HashMap<String, Record>,
    polled: HashMap<String, (Vec<u8>, Instant)>,
    /// Partition leases by (group, partition).
    pub(crate) partitions: HashMap<(String, u32), crate::groups::PartitionRecord>,
    /// Member records by (service, node).
    pub(crate) members: HashMap<(String, String), crate::groups::MemberRecord>,
}

/// An in-memory [`LeaseStore`] on tokio time: expiry is real, judged by
/// `tokio::time::Instant`, so it follows paused time in tests.
///
/// Clones share one store. Every operation takes one short lock and never awaits while holding
/// it; each is atomic and cancel safe.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    expiry: bool,
    clock: WallClock,
}

/// The store's wall clock for slot instants: the system clock when the store was made, moved on
/// by tokio's clock since, so it follows paused time in tests.
#[derive(Debug, Clone, Copy)]
struct WallClock {
    wall_ms: i64,
    at: Instant,
}

impl WallClock {
    fn new() -> WallClock {
        let wall_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        WallClock {
            wall_ms,
            at: Instant::now(),
        }
    }

    fn now_ms(&self) -> i64 {
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
            expiry: true,
            clock: WallClock::new(),
        }
    }

    /// A store whose leases never expire: they end only on release (single-node mode).
    pub fn never_expiring() -> MemoryStore {
        MemoryStore {
            state: Arc::default(),
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

    pub(crate) fn until(&self, now: Instant, ttl: Duration) -> Until {
        if self.expiry {
            Until::At(now + ttl)
        } else {
            Until::Never
        }
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    fn backend(&self) -> &'static str {
        if self.expiry { "memory" } else { "local" }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            expiry: self.expiry,
            force_release: true,
            slots: true,
            partitions: true,
            membership: true,
            ..Capabilities::default()
        }
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
        validate_instance(instance)?;
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
        Ok(Some(Grant { term, expires_in }))
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
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

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.validate_name(name)?;
        let now = Instant::now();
        let mut st = self.lock();
        match st.leases.get_mut(name) {
            Some(r) if r.holder == *holder && r.live(now) => {
                r.until = Until::At(now);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.validate_name(name)?;
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
        self.validate_name(name)?;
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
        self.validate_name(name)?;
        let now = Instant::now();
        let mut st = self.lock();
        match st.leases.get_mut(name) {
            Some(r) if r.live(now) => {
                r.until = Until::At(now);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

#[async_trait]
impl PollingStore for MemoryStore {
    async fn try_acquire(
        &self,
        name: &str,
        holder: &[u8],
        ttl: Duration,
    ) -> Result<(bool, Vec<u8>)> {
        let now = Instant::now();
        let mut st = self.lock();
        match st.polled.get_mut(name) {
            Some((h, until)) if *until > now && h.as_slice() != holder => Ok((false, h.clone())),
            _ => {
                st.polled
                    .insert(name.to_owned(), (holder.to_vec(), now + ttl));
                Ok((true, holder.to_vec()))
            }
        }
    }

    async fn release(&self, name: &str, holder: &[u8]) -> Result<()> {
        let mut st = self.lock();
        if st
            .polled
            .get(name)
            .is_some_and(|(h, _)| h.as_slice() == holder)
        {
            st.polled.remove(name);
        }
        Ok(())
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
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
        validate_instance(instance)?;
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
        self.validate_name(name)?;
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
        Ok(out)
    }

    async fn unfinished(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
        for name in names {
            self.validate_name(name)?;
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
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
        validate_instance(instance)?;
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
        Ok(Some(Grant {
            term: r.term,
            expires_in: r.expires_in(now),
        }))
    }

    async fn last_slot(&self, name: &str) -> Result<Option<SlotRecord>> {
        self.validate_name(name)?;
        Ok(self.lock().leases.get(name).map(|r| r.slot))
    }
}
