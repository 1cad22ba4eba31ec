//! Store wrappers: one that counts what reaches the store, one that plays a dead holder.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lease_core::{
    Capabilities, Error, LeaseInfo, LeaseStore, Result,
    backend::{Grant, HolderToken, async_trait},
};

/// Counts of the operations a [`CountingStore`] forwarded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Claims, won or not.
    pub(crate) claims: u64,
    /// Claims that won.
    pub(crate) won: u64,
    /// Renewals.
    pub(crate) renews: u64,
    /// Releases.
    pub(crate) releases: u64,
    /// Verifies and gets.
    pub(crate) reads: u64,
}

impl Counts {
    /// Every operation.
    pub(crate) fn total(&self) -> u64 {
        self.claims + self.renews + self.releases + self.reads
    }

    /// `self - earlier`, per counter.
    pub(crate) fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            claims: self.claims - earlier.claims,
            won: self.won - earlier.won,
            renews: self.renews - earlier.renews,
            releases: self.releases - earlier.releases,
            reads: self.reads - earlier.reads,
        }
    }
}

/// The most claim instants a [`CountingStore`] keeps.
const MAX_STAMPS: usize = 1_000_000;

/// Forwards to a store and counts each operation; keeps the instant of each claim.
#[derive(Debug)]
pub(crate) struct CountingStore {
    inner: Arc<dyn LeaseStore>,
    claims: AtomicU64,
    won: AtomicU64,
    renews: AtomicU64,
    releases: AtomicU64,
    reads: AtomicU64,
    stamps: Mutex<Vec<Instant>>,
}

impl CountingStore {
    /// Wraps `inner`.
    pub(crate) fn new(inner: Arc<dyn LeaseStore>) -> CountingStore {
        CountingStore {
            inner,
            claims: AtomicU64::new(0),
            won: AtomicU64::new(0),
            renews: AtomicU64::new(0),
            releases: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            stamps: Mutex::new(Vec::new()),
        }
    }

    /// The counts so far.
    pub(crate) fn counts(&self) -> Counts {
        Counts {
            claims: self.claims.load(Ordering::Relaxed),
            won: self.won.load(Ordering::Relaxed),
            renews: self.renews.load(Ordering::Relaxed),
            releases: self.releases.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
        }
    }

    /// The instants at which claims were sent.
    pub(crate) fn claim_instants(&self) -> Vec<Instant> {
        self.stamps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[async_trait]
impl LeaseStore for CountingStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn available(&self) -> Result<()> {
        self.inner.available().await
    }
    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.claims.fetch_add(1, Ordering::Relaxed);
        {
            let mut stamps = self.stamps.lock().unwrap_or_else(|p| p.into_inner());
            if stamps.len() < MAX_STAMPS {
                stamps.push(Instant::now());
            }
        }
        let r = self.inner.claim(name, holder, instance, ttl).await;
        if matches!(r, Ok(Some(_))) {
            self.won.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.renews.fetch_add(1, Ordering::Relaxed);
        self.inner.renew(name, holder, ttl).await
    }
    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.releases.fetch_add(1, Ordering::Relaxed);
        self.inner.release(name, holder).await
    }
    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.verify(name, holder).await
    }
    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.get(name).await
    }
}

/// Forwards to a store until killed; from then on nothing reaches the store, as when the
/// holder's process died: its renewals stop and it never releases.
#[derive(Debug)]
pub(crate) struct KillableStore {
    inner: Arc<dyn LeaseStore>,
    dead: AtomicBool,
}

impl KillableStore {
    /// Wraps `inner`, alive.
    pub(crate) fn new(inner: Arc<dyn LeaseStore>) -> KillableStore {
        KillableStore {
            inner,
            dead: AtomicBool::new(false),
        }
    }

    /// From now on every operation fails without reaching the store.
    pub(crate) fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    fn check(&self) -> Result<()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(Error::unavailable("the holder process is dead (benchmark)"));
        }
        Ok(())
    }
}

#[async_trait]
impl LeaseStore for KillableStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.check()?;
        self.inner.claim(name, holder, instance, ttl).await
    }
    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.check()?;
        self.inner.renew(name, holder, ttl).await
    }
    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.check()?;
        self.inner.release(name, holder).await
    }
    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.check()?;
        self.inner.verify(name, holder).await
    }
    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.check()?;
        self.inner.get(name).await
    }
}
