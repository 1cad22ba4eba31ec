//! A fault-injecting wrapper for tests: a store that hangs, fails or loses its answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_core::{
    Capabilities, Error, LeaseInfo, LeaseStore, Member, MembershipStore, PartitionLease,
    PartitionStore, PollingStore, Result,
    backend::{Grant, HolderToken, async_trait},
};
use tokio::sync::watch;

/// How a [`FaultyStore`] treats each operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultMode {
    /// Forward to the inner store.
    Pass,
    /// Hold every operation without an answer until the mode changes, then carry it out
    /// (a stalled connection).
    Stall,
    /// Fail every operation with `Unavailable` before it reaches the store (a cut connection).
    Fail,
    /// Carry out every operation on the inner store, then never answer (an answer lost on the
    /// wire: the outcome is unknown to the caller).
    LoseAnswers,
}

/// How many operations reached a [`FaultyStore`], by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// `claim` and `acquire_partition` calls.
    pub claims: u64,
    /// `renew` and `renew_partitions` calls.
    pub renews: u64,
    /// `release` and `release_partitions` calls.
    pub releases: u64,
    /// `verify` calls.
    pub verifies: u64,
    /// `get` and `owners` calls.
    pub gets: u64,
}

#[derive(Debug, Default)]
struct Counters {
    claims: AtomicU64,
    renews: AtomicU64,
    releases: AtomicU64,
    verifies: AtomicU64,
    gets: AtomicU64,
}

/// Wraps any [`LeaseStore`] and injects faults, switchable at any time; counts operations.
///
/// Clones share the switch and the counters.
#[derive(Debug, Clone)]
pub struct FaultyStore<S> {
    inner: S,
    mode: Arc<watch::Sender<FaultMode>>,
    claim_mode: Arc<watch::Sender<FaultMode>>,
    counters: Arc<Counters>,
}

impl<S: LeaseStore> FaultyStore<S> {
    /// Wraps `inner`, passing everything through.
    pub fn new(inner: S) -> Self {
        FaultyStore {
            inner,
            mode: Arc::new(watch::Sender::new(FaultMode::Pass)),
            claim_mode: Arc::new(watch::Sender::new(FaultMode::Pass)),
            counters: Arc::default(),
        }
    }

    /// Switches the fault mode; operations stalled so far proceed when it leaves `Stall`.
    pub fn set_mode(&self, mode: FaultMode) {
        self.mode.send_replace(mode);
    }

    /// Switches the fault mode of `claim` alone (applied after the store-wide mode).
    pub fn set_claim_mode(&self, mode: FaultMode) {
        self.claim_mode.send_replace(mode);
    }

    /// The current fault mode.
    pub fn mode(&self) -> FaultMode {
        *self.mode.borrow()
    }

    /// The operations seen so far.
    pub fn counts(&self) -> OpCounts {
        let c = &self.counters;
        OpCounts {
            claims: c.claims.load(Ordering::SeqCst),
            renews: c.renews.load(Ordering::SeqCst),
            releases: c.releases.load(Ordering::SeqCst),
            verifies: c.verifies.load(Ordering::SeqCst),
            gets: c.gets.load(Ordering::SeqCst),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    async fn around<T>(&self, op: impl Future<Output = Result<T>>) -> Result<T> {
        Self::apply(&self.mode, op).await
    }

    async fn apply<T>(
        mode: &watch::Sender<FaultMode>,
        op: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let mut rx = mode.subscribe();
        let mode = match rx.wait_for(|m| *m != FaultMode::Stall).await {
            Ok(m) => *m,
            Err(_) => FaultMode::Pass,
        };
        match mode {
            FaultMode::Fail => Err(Error::unavailable("injected fault: connection cut")),
            FaultMode::LoseAnswers => {
                let _ = op.await;
                std::future::pending().await
            }
            FaultMode::Pass | FaultMode::Stall => op.await,
        }
    }
}

#[async_trait]
impl<S: LeaseStore> LeaseStore for FaultyStore<S> {
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
        self.counters.claims.fetch_add(1, Ordering::SeqCst);
        let op = Self::apply(
            &self.claim_mode,
            self.inner.claim(name, holder, instance, ttl),
        );
        self.around(op).await
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.counters.renews.fetch_add(1, Ordering::SeqCst);
        self.around(self.inner.renew(name, holder, ttl)).await
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.counters.releases.fetch_add(1, Ordering::SeqCst);
        self.around(self.inner.release(name, holder)).await
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.counters.verifies.fetch_add(1, Ordering::SeqCst);
        self.around(self.inner.verify(name, holder)).await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.counters.gets.fetch_add(1, Ordering::SeqCst);
        self.around(self.inner.get(name)).await
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        self.around(self.inner.force_release(name)).await
    }
}

#[async_trait]
impl<S: PartitionStore> PartitionStore for FaultyStore<S> {
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<PartitionLease>> {
        self.counters.claims.fetch_add(1, Ordering::SeqCst);
        let op = Self::apply(
            &self.claim_mode,
            self.inner.acquire_partition(group, partition, owner, ttl),
        );
        self.around(op).await
    }

    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<PartitionLease>> {
        self.counters.renews.fetch_add(1, Ordering::SeqCst);
        self.around(self.inner.renew_partitions(group, partitions, owner, ttl))
            .await
    }

    async fn release_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> Result<usize> {
        self.counters.releases.fetch_add(1, Ordering::SeqCst);
        self.around(self.inner.release_partitions(group, partitions, owner))
            .await
    }

    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        self.counters.gets.fetch_add(1, Ordering::SeqCst);
        self.around(self.inner.owners(group)).await
    }
}

#[async_trait]
impl<S: MembershipStore> MembershipStore for FaultyStore<S> {
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member> {
        self.around(self.inner.heartbeat(service, node, address, ttl, groups))
            .await
    }

    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        self.around(self.inner.members(service)).await
    }

    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        self.around(self.inner.leave(service, node)).await
    }
}

/// The polling leaser's store under the same faults: `try_acquire` counts as a claim (and
/// follows the claim mode too), `release` as a release.
#[async_trait]
impl<S: LeaseStore + PollingStore> PollingStore for FaultyStore<S> {
    async fn try_acquire(
        &self,
        name: &str,
        holder: &[u8],
        ttl: Duration,
    ) -> Result<(bool, Vec<u8>)> {
        self.counters.claims.fetch_add(1, Ordering::SeqCst);
        let op = Self::apply(
            &self.claim_mode,
            PollingStore::try_acquire(&self.inner, name, holder, ttl),
        );
        self.around(op).await
    }

    async fn release(&self, name: &str, holder: &[u8]) -> Result<()> {
        self.counters.releases.fetch_add(1, Ordering::SeqCst);
        self.around(PollingStore::release(&self.inner, name, holder))
            .await
    }
}
