//! How each contender reaches its store, and the switch the fault schedule flips.
//!
//! Servers are reached through one [`FaultProxy`] per contender, so a stall or a cut hits one
//! contender's connections only. The embedded backends have no connection to cut: their
//! contenders' stores are wrapped in lease-local's [`FaultyStore`] instead (stall = operations
//! held without an answer, cut = operations failing at once). For SQLite, each contender's store
//! is a [`Reopenable`] one, whose "restart" closes every connection to the file and opens new
//! ones.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lease_conformance::{FaultMode, FaultProxy};
use lease_core::{
    Capabilities, Error, Grant, HolderToken, LeaseInfo, LeaseStore, Result, async_trait,
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
/// that it can carry leases. Operations are bounded by `attempt` (the coordinator bounds them
/// too); NATS keeps leases for exactly `lease`.
pub(crate) async fn connect(
    kind: BackendKind,
    url: &str,
    lease: Duration,
    attempt: Duration,
) -> Result<Arc<dyn LeaseStore>> {
    Ok(match kind {
        BackendKind::Postgres => Arc::new(PostgresStore::connect(url, SqlConfig::default()).await?),
        BackendKind::Mariadb => Arc::new(MySqlStore::connect(url, SqlConfig::default()).await?),
        BackendKind::Sqlite => Arc::new(SqliteStore::connect(url, SqlConfig::default()).await?),
        BackendKind::Redis => {
            let config = RedisConfig::new()
                .operation_timeout(Some(attempt))
                .connect_timeout(attempt);
            let store = lease_redis::connect_with(url, config).await?;
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
    Store(FaultyStore<Arc<dyn LeaseStore>>),
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
