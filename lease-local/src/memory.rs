//! The in-memory store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lease_core::{
    Capabilities, Grant, HolderToken, LeaseInfo, LeaseStore, PollingStore, Result, async_trait,
    validate_instance,
};
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
enum Until {
    Never,
    At(Instant),
}

#[derive(Debug)]
struct Record {
    holder: HolderToken,
    instance: String,
    term: u64,
    until: Until,
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
struct State {
    leases: HashMap<String, Record>,
    polled: HashMap<String, (Vec<u8>, Instant)>,
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
        }
    }

    /// A store whose leases never expire: they end only on release (single-node mode).
    pub fn never_expiring() -> MemoryStore {
        MemoryStore {
            state: Arc::default(),
            expiry: false,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn until(&self, now: Instant, ttl: Duration) -> Until {
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
        let term = match st.leases.get(name) {
            Some(r) if r.live(now) => return Ok(None),
            Some(r) => r.term + 1,
            None => 1,
        };
        let rec = Record {
            holder: holder.clone(),
            instance: instance.to_owned(),
            term,
            until,
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
