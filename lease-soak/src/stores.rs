//! How each contender reaches its store, and the switch the fault schedule flips.
//!
//! Servers are reached through one [`FaultProxy`] per contender, so a stall or a cut hits one
//! contender's connections only. The embedded backends have no connection to cut: their
//! contenders' stores are wrapped in lease-local's [`FaultyStore`] instead (stall = operations
//! held without an answer, cut = operations failing at once). For SQLite, each contender's store
//! is a [`Reopenable`] one, whose "restart" closes every connection to the file and opens new
//! ones.
//!
//! Every store here is a [`GroupStore`] (leases, partitions and membership): the contenders use
//! its lease operations, the group workers the rest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lease_conformance::{FaultMode, FaultProxy};
use lease_core::{
    Capabilities, Error, GroupStore, LeaseInfo, LeaseStore, Member, MembershipStore,
    PartitionLease, PartitionStore, Result,
    backend::{Grant, HolderToken, async_trait},
};
use lease_local::FaultyStore;
use lease_nats::{NatsConfig, NatsStore};
use lease_redis::RedisConfig;
use lease_sql::{MySqlStore, PostgresStore, SqlConfig, SqliteStore};

use crate::cli::BackendKind;
use crate::schedule::Mode;

/// How long a server may take to accept a store after it listens.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Opens a store of `kind` at `url`, creating its table or bucket when missing, and checks
/// that it can carry leases. Operations are bounded by `attempt` (the coordinator and the group
/// worker bound them too); NATS keeps leases, partitions and members for exactly `lease`.
pub(crate) async fn connect(
    kind: BackendKind,
    url: &str,
    lease: Duration,
    attempt: Duration,
) -> Result<Arc<dyn GroupStore>> {
    Ok(match kind {
        BackendKind::Postgres => Arc::new(PostgresStore::connect(url, SqlConfig::default()).await?),
        BackendKind::Mariadb => Arc::new(MySqlStore::connect(url, SqlConfig::default()).await?),
        BackendKind::Sqlite => Arc::new(SqliteStore::connect(url, SqlConfig::default()).await?),
        BackendKind::Redis => {
            let config = RedisConfig::new()
                .operation_timeout(Some(attempt))
                .connect_timeout(attempt);
            let store = lease_redis::RedisStore::connect(url, config).await?;
            // Refuses a server without AOF: terms must survive the restart.
            store.available().await?;
            Arc::new(store)
        }
        BackendKind::Nats => {
            Arc::new(NatsStore::connect(url, NatsConfig::new(lease).op_timeout(attempt)).await?)
        }
        BackendKind::Memory => Arc::new(lease_local::MemoryStore::new()),
    })
}

/// Connects to a server that is (re)starting until it accepts a store, for up to
/// [`PROBE_TIMEOUT`].
pub(crate) async fn probe(
    kind: BackendKind,
    url: &str,
    lease: Duration,
    attempt: Duration,
) -> std::result::Result<(), String> {
    let until = Instant::now() + PROBE_TIMEOUT;
    loop {
        match connect(kind, url, lease, attempt).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > until => {
                return Err(format!(
                    "{kind} does not accept a lease store after {PROBE_TIMEOUT:?}: {e}"
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The fault switch of one contender.
pub(crate) enum Switch {
    /// A TCP proxy between the contender and the server.
    Proxy(FaultProxy),
    /// A wrapper around the contender's store.
    Store(FaultyStore<Arc<dyn GroupStore>>),
}

impl Switch {
    /// Puts the contender's connection in `mode`.
    pub(crate) fn set(&self, mode: Mode) {
        match self {
            Switch::Proxy(proxy) => proxy.set_mode(match mode {
                Mode::Pass => FaultMode::Pass,
                Mode::Stall => FaultMode::Stall,
                Mode::Cut => FaultMode::Cut,
            }),
            Switch::Store(store) => store.set_mode(match mode {
                Mode::Pass => lease_local::FaultMode::Pass,
                Mode::Stall => lease_local::FaultMode::Stall,
                Mode::Cut => lease_local::FaultMode::Fail,
            }),
        }
    }
}

/// A deliberately broken store for checking the checker (`--break-renewals`): a renewal that
/// fails or takes longer than a tenth of the TTL is reported as successful.
#[derive(Debug)]
pub(crate) struct LyingStore(pub(crate) Arc<dyn LeaseStore>);

#[async_trait]
impl LeaseStore for LyingStore {
    fn backend(&self) -> &'static str {
        self.0.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.0.claim(name, holder, instance, ttl).await
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        match tokio::time::timeout(ttl / 10, self.0.renew(name, holder, ttl)).await {
            Ok(Ok(answer)) => Ok(answer),
            // The lie: the keeper only reads the time left from a renewal's grant.
            Ok(Err(_)) | Err(_) => Ok(Some(Grant {
                term: 0,
                expires_in: ttl,
            })),
        }
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.0.release(name, holder).await
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.0.verify(name, holder).await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.0.get(name).await
    }
}

/// A deliberately broken group store for checking the assignment audit
/// (`--break-group-renewals`): a batch renewal that fails or takes longer than a tenth of the
/// lease is answered as if every partition named had been renewed, under the epoch this store
/// last saw it acquired with.
///
/// The worker's tick heartbeats and reads the members before it renews, each call cut at the
/// earliest local deadline; where a cut connection makes requests wait for their timeout rather
/// than fail at once (NATS), those two calls alone would outlast the deadline and the worker
/// would drop its partitions before the lie could keep them. So they lie too, after the same
/// tenth of the lease: a heartbeat as if recorded, a member read with the last list read.
/// Everything else is passed through.
#[derive(Debug)]
pub(crate) struct LyingGroupStore {
    inner: Arc<dyn GroupStore>,
    /// How long a call may take before the store lies about it.
    lie_after: Duration,
    /// The epoch of each partition as last acquired through this store, by group.
    epochs: Mutex<HashMap<(String, u32), u64>>,
    /// The last member list read, by service.
    members: Mutex<HashMap<String, Vec<Member>>>,
}

impl LyingGroupStore {
    /// Wraps `inner`, for a lease of `lease`.
    pub(crate) fn new(inner: Arc<dyn GroupStore>, lease: Duration) -> LyingGroupStore {
        LyingGroupStore {
            inner,
            lie_after: lease / 10,
            epochs: Mutex::default(),
            members: Mutex::default(),
        }
    }

    fn epochs(&self) -> MutexGuard<'_, HashMap<(String, u32), u64>> {
        self.epochs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn members(&self) -> MutexGuard<'_, HashMap<String, Vec<Member>>> {
        self.members.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl LeaseStore for LyingGroupStore {
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
        self.inner.claim(name, holder, instance, ttl).await
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.inner.renew(name, holder, ttl).await
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.inner.release(name, holder).await
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.inner.verify(name, holder).await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.inner.get(name).await
    }
}

#[async_trait]
impl PartitionStore for LyingGroupStore {
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<PartitionLease>> {
        let answer = self
            .inner
            .acquire_partition(group, partition, owner, ttl)
            .await?;
        if let Some(lease) = &answer {
            self.epochs()
                .insert((group.to_owned(), partition), lease.epoch);
        }
        Ok(answer)
    }

    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<PartitionLease>> {
        let renewal = self.inner.renew_partitions(group, partitions, owner, ttl);
        match tokio::time::timeout(self.lie_after, renewal).await {
            Ok(Ok(answer)) => Ok(answer),
            // The lie: the worker only matches partitions and epochs in the answer.
            Ok(Err(_)) | Err(_) => {
                let epochs = self.epochs();
                Ok(partitions
                    .iter()
                    .filter_map(|&p| {
                        epochs
                            .get(&(group.to_owned(), p))
                            .map(|&epoch| PartitionLease {
                                partition: p,
                                owner: owner.to_owned(),
                                epoch,
                                expires_in: ttl,
                            })
                    })
                    .collect())
            }
        }
    }

    async fn release_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> Result<usize> {
        self.inner
            .release_partitions(group, partitions, owner)
            .await
    }

    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        self.inner.owners(group).await
    }
}

#[async_trait]
impl MembershipStore for LyingGroupStore {
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member> {
        let beat = self.inner.heartbeat(service, node, address, ttl, groups);
        match tokio::time::timeout(self.lie_after, beat).await {
            Ok(Ok(member)) => Ok(member),
            Ok(Err(_)) | Err(_) => Ok(Member {
                node: node.to_owned(),
                address: address.to_owned(),
                groups: groups.to_vec(),
                expires_in: ttl,
            }),
        }
    }

    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        let read = self.inner.members(service);
        match tokio::time::timeout(self.lie_after, read).await {
            Ok(Ok(members)) => {
                self.members().insert(service.to_owned(), members.clone());
                Ok(members)
            }
            Ok(Err(_)) | Err(_) => Ok(self.members().get(service).cloned().unwrap_or_default()),
        }
    }

    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        self.inner.leave(service, node).await
    }
}

/// A SQLite store whose connections can all be closed and opened again: the embedded
/// database's "server restart". While closed, every operation fails as a server that is down
/// would.
#[derive(Debug)]
pub(crate) struct Reopenable {
    url: String,
    caps: Capabilities,
    current: Mutex<Option<Arc<SqliteStore>>>,
}

impl Reopenable {
    /// Opens the store at `url`.
    pub(crate) async fn open(url: &str) -> Result<Reopenable> {
        let store = SqliteStore::connect(url, SqlConfig::default()).await?;
        Ok(Reopenable {
            url: url.to_owned(),
            caps: store.capabilities(),
            current: Mutex::new(Some(Arc::new(store))),
        })
    }

    fn slot(&self) -> MutexGuard<'_, Option<Arc<SqliteStore>>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn store(&self) -> Result<Arc<SqliteStore>> {
        self.slot()
            .clone()
            .ok_or_else(|| Error::unavailable("the SQLite database is closed for the restart"))
    }

    /// Closes every connection: the application pool now, the lease connections as soon as the
    /// operations in flight on them return.
    pub(crate) async fn close(&self) {
        let old = self.slot().take();
        if let Some(store) = old {
            store.app_pool().close().await;
        }
    }

    /// Opens the database again.
    pub(crate) async fn reopen(&self) -> Result<()> {
        let store = SqliteStore::connect(&self.url, SqlConfig::default()).await?;
        *self.slot() = Some(Arc::new(store));
        Ok(())
    }
}

#[async_trait]
impl LeaseStore for Reopenable {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn capabilities(&self) -> Capabilities {
        self.caps.clone()
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.store()?.claim(name, holder, instance, ttl).await
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.store()?.renew(name, holder, ttl).await
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.store()?.release(name, holder).await
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.store()?.verify(name, holder).await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.store()?.get(name).await
    }
}

#[async_trait]
impl PartitionStore for Reopenable {
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<PartitionLease>> {
        self.store()?
            .acquire_partition(group, partition, owner, ttl)
            .await
    }

    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<PartitionLease>> {
        self.store()?
            .renew_partitions(group, partitions, owner, ttl)
            .await
    }

    async fn release_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> Result<usize> {
        self.store()?
            .release_partitions(group, partitions, owner)
            .await
    }

    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        self.store()?.owners(group).await
    }
}

#[async_trait]
impl MembershipStore for Reopenable {
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member> {
        self.store()?
            .heartbeat(service, node, address, ttl, groups)
            .await
    }

    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        self.store()?.members(service).await
    }

    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        self.store()?.leave(service, node).await
    }
}
