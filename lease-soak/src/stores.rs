//! How each contender reaches its store, and the switch the fault schedule flips.
//!
//! Servers are reached through one [`FaultProxy`] per contender, so a stall or a cut hits one
//! contender's connections only. The embedded backends have no connection to cut: their
//! contenders' stores are wrapped in the test kit's [`FaultyStore`] instead (stall = operations
//! held without an answer, cut = operations failing at once). For SQLite, each contender's store
//! is a [`Reopenable`] one, whose "restart" closes every connection to the file and opens new
//! ones.
//!
//! Every store here is a [`GroupStore`] (leases, partitions and membership): the contenders use
//! its lease operations, the group workers the rest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lease::backend::membership::{Member, MembershipStore};
use lease::backend::partitions::{PartitionLease, PartitionStore};
use lease::backend::permits::PermitStore;
use lease::backend::{Capabilities, Grant, HolderToken, LeaseInfo, RenewItem, async_trait};
use lease::layer::{Answer, Call, Hook, Intercept, Operation, answer_as, peek};
use lease::sql::{SqlConfig, SqliteStore};
use lease::{Error, LeaseStore, Result};
use lease_conformance::{ChaosConfig, ChaosCounts, FaultMode, FaultProxy, FaultyStore, GroupStore};

use crate::cli::BackendKind;
use crate::schedule::Mode;

/// How long a server may take to accept a store after it listens.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Opens a store of `kind` at `url` through [`lease::open`], creating its table or bucket when
/// missing, and checks that it can carry leases (Redis: refuses a server without AOF, as terms
/// must survive the restart). Operations are bounded by `attempt` (the coordinator and the
/// group worker bound them too); NATS keeps leases, partitions and members for exactly `lease`.
pub(crate) async fn connect(
    kind: BackendKind,
    url: &str,
    lease: Duration,
    attempt: Duration,
) -> Result<Arc<dyn GroupStore>> {
    // The embedded in-process store has no server, so no URL of its own here.
    let url = if kind == BackendKind::Memory {
        "memory://"
    } else {
        url
    };
    let options = lease::OpenOptions::new().lease(lease).op_timeout(attempt);
    let store = lease::open(url, &options).await?;
    group_store(&store).ok_or_else(|| {
        lease::Error::unsupported(format!(
            "the {} store has no partitions or no membership",
            store.backend()
        ))
    })
}

/// The backend's own store behind `store`, which keeps leases, partitions and membership (the
/// facade's `Store` reaches partitions and membership through its accessors; the soak calls
/// them on one handle).
fn group_store(store: &lease::Store) -> Option<Arc<dyn GroupStore>> {
    fn own<T: GroupStore + LeaseStore>(store: &lease::Store) -> Option<Arc<dyn GroupStore>> {
        let own: Arc<dyn GroupStore> = store.downcast_arc::<T>()?;
        Some(own)
    }
    own::<lease::sql::SqliteStore>(store)
        .or_else(|| own::<lease::sql::PostgresStore>(store))
        .or_else(|| own::<lease::sql::MySqlStore>(store))
        .or_else(|| own::<lease::redis::RedisStore>(store))
        .or_else(|| own::<lease::nats::NatsStore>(store))
        .or_else(|| own::<lease::memory::MemoryStore>(store))
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

/// The fault of a scheduled mode, for a proxy or a store alike.
fn fault(mode: Mode) -> FaultMode {
    match mode {
        Mode::Pass => FaultMode::Pass,
        Mode::Stall => FaultMode::Stall,
        Mode::Cut => FaultMode::Cut,
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
            Switch::Proxy(proxy) => proxy.set_mode(fault(mode)),
            Switch::Store(store) => store.hook().set_mode(fault(mode)),
        }
    }

    /// Puts the contender's connection in chaos (see [`FaultMode::Chaos`]).
    pub(crate) fn chaos(&self, config: ChaosConfig) {
        match self {
            Switch::Proxy(proxy) => proxy.set_mode(FaultMode::Chaos(config)),
            Switch::Store(store) => store.hook().set_mode(FaultMode::Chaos(config)),
        }
    }

    /// What the chaos did on this connection since it was put in chaos.
    pub(crate) fn chaos_counts(&self) -> ChaosCounts {
        match self {
            Switch::Proxy(proxy) => proxy.chaos_counts(),
            Switch::Store(store) => store.hook().chaos_counts(),
        }
    }
}

/// `lie` as the answer of the operation at hand, or `truth` when the operation answers
/// another type (which the hooks below never let happen: they lie only about operations
/// whose answer type is the lie's).
fn lie_or<T: 'static, U: 'static>(lie: U, truth: Result<T>) -> Result<T> {
    answer_as::<T, U>(lie).map_or(truth, Ok)
}

/// `op`'s answer if it is a success within `within`; else the error, or a timeout error.
async fn within<T>(within: Duration, what: Call<'_>, op: Answer<'_, T>) -> Result<T> {
    match tokio::time::timeout(within, op).await {
        Ok(answer) => answer,
        Err(_) => Err(Error::timeout(what.operation, within)),
    }
}

/// A deliberately broken store for checking the checker (`--break-renewals`): the hook of a
/// store whose renewal (of a lease or of a permit) that fails or takes longer than a tenth of
/// the TTL is reported as successful. Everything else passes through.
#[derive(Debug, Default)]
pub(crate) struct LyingRenewals;

/// A lease store whose renewals lie ([`LyingRenewals`]).
pub(crate) type LyingStore = Intercept<Arc<dyn LeaseStore>, LyingRenewals>;

impl Hook for LyingRenewals {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        if let (Operation::RenewMany, Some(ttl)) = (call.operation, call.ttl) {
            // A batch lies item by item: a failed item, or the whole batch failed or slow,
            // is answered as renewed.
            let renewed = Grant {
                term: 0,
                expires_in: ttl,
            };
            let count = call.renewals.len();
            return Box::pin(async move {
                match within(ttl / 10, call, op).await {
                    Ok(answer) => {
                        let lie = peek::<T, Vec<Result<Option<Grant>>>>(&answer).map(|items| {
                            items
                                .iter()
                                .map(|item| match item {
                                    Err(_) => Ok(Some(renewed)),
                                    Ok(grant) => Ok(*grant),
                                })
                                .collect::<Vec<Result<Option<Grant>>>>()
                        });
                        match lie {
                            Some(lie) => lie_or(lie, Ok(answer)),
                            None => Ok(answer),
                        }
                    }
                    Err(e) => lie_or(vec![Ok::<_, Error>(Some(renewed)); count], Err(e)),
                }
            });
        }
        let (Operation::Renew | Operation::RenewPermit, Some(ttl)) = (call.operation, call.ttl)
        else {
            return op;
        };
        Box::pin(async move {
            match within(ttl / 10, call, op).await {
                Ok(answer) => Ok(answer),
                // The lie: the keeper only reads the time left from a renewal's grant.
                Err(e) => lie_or(
                    Some(Grant {
                        term: 0,
                        expires_in: ttl,
                    }),
                    Err(e),
                ),
            }
        })
    }
}

/// A deliberately broken group store for checking the assignment audit
/// (`--break-group-renewals`): the hook of a store whose batch renewal that fails or takes
/// longer than a tenth of the lease is answered as if every partition named had been renewed,
/// under the epoch this store last saw it acquired with.
///
/// The worker's tick heartbeats and reads the members before it renews, each call cut at the
/// earliest local deadline; where a cut connection makes requests wait for their timeout rather
/// than fail at once (NATS), those two calls alone would outlast the deadline and the worker
/// would drop its partitions before the lie could keep them. So they lie too, after the same
/// tenth of the lease: a heartbeat as if recorded (the member as last recorded through this
/// store, with a fresh expiry; the worker reads nothing but success from it), a member read
/// with the last list read. Everything else is passed through.
#[derive(Debug)]
pub(crate) struct LyingGroups {
    /// How long a call may take before the store lies about it.
    lie_after: Duration,
    /// The epoch of each partition as last acquired through this store, by group.
    epochs: Mutex<HashMap<(String, u32), u64>>,
    /// The last member list read, by service.
    members: Mutex<HashMap<String, Vec<Member>>>,
    /// The last heartbeat's answer, by service and node.
    beats: Mutex<HashMap<(String, String), Member>>,
}

/// A group store whose renewals, heartbeats and member reads lie ([`LyingGroups`]).
pub(crate) type LyingGroupStore = Intercept<Arc<dyn GroupStore>, LyingGroups>;

impl LyingGroups {
    /// `inner` with the lies around it, for a lease of `lease`.
    pub(crate) fn wrap(inner: Arc<dyn GroupStore>, lease: Duration) -> LyingGroupStore {
        Intercept::new(
            inner,
            LyingGroups {
                lie_after: lease / 10,
                epochs: Mutex::default(),
                members: Mutex::default(),
                beats: Mutex::default(),
            },
        )
    }

    async fn acquired<T: 'static>(&self, call: Call<'_>, op: Answer<'_, T>) -> Result<T> {
        let answer = op.await?;
        if let (Some(Some(lease)), Some(&p)) = (
            peek::<T, Option<PartitionLease>>(&answer),
            call.partitions.first(),
        ) {
            lock(&self.epochs).insert((call.name.to_owned(), p), lease.epoch);
        }
        Ok(answer)
    }

    async fn renewed<T: 'static>(&self, call: Call<'_>, op: Answer<'_, T>) -> Result<T> {
        let truth = match within(self.lie_after, call, op).await {
            Ok(answer) => return Ok(answer),
            Err(e) => Err(e),
        };
        let (Some(owner), Some(ttl)) = (call.who, call.ttl) else {
            return truth;
        };
        // The lie: the worker only matches partitions and epochs in the answer.
        let epochs = lock(&self.epochs);
        let leases: Vec<PartitionLease> = call
            .partitions
            .iter()
            .filter_map(|&p| {
                epochs
                    .get(&(call.name.to_owned(), p))
                    .map(|&epoch| PartitionLease {
                        partition: p,
                        owner: owner.to_owned(),
                        epoch,
                        expires_in: ttl,
                    })
            })
            .collect();
        lie_or(leases, truth)
    }

    async fn beat<T: 'static>(&self, call: Call<'_>, op: Answer<'_, T>) -> Result<T> {
        let key = (
            call.name.to_owned(),
            call.who.unwrap_or_default().to_owned(),
        );
        let truth = match within(self.lie_after, call, op).await {
            Ok(answer) => {
                if let Some(member) = peek::<T, Member>(&answer) {
                    lock(&self.beats).insert(key, member.clone());
                }
                return Ok(answer);
            }
            Err(e) => Err(e),
        };
        let mut member = lock(&self.beats).get(&key).cloned().unwrap_or(Member {
            node: key.1,
            address: String::new(),
            groups: Vec::new(),
            expires_in: Duration::ZERO,
        });
        member.expires_in = call.ttl.unwrap_or(self.lie_after * 10);
        lie_or(member, truth)
    }

    async fn read_members<T: 'static>(&self, call: Call<'_>, op: Answer<'_, T>) -> Result<T> {
        match within(self.lie_after, call, op).await {
            Ok(answer) => {
                if let Some(members) = peek::<T, Vec<Member>>(&answer) {
                    lock(&self.members).insert(call.name.to_owned(), members.clone());
                }
                Ok(answer)
            }
            Err(e) => {
                let last = lock(&self.members)
                    .get(call.name)
                    .cloned()
                    .unwrap_or_default();
                lie_or(last, Err(e))
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Hook for LyingGroups {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        match call.operation {
            Operation::AcquirePartition => Box::pin(self.acquired(call, op)),
            Operation::RenewPartitions => Box::pin(self.renewed(call, op)),
            Operation::Heartbeat => Box::pin(self.beat(call, op)),
            Operation::Members => Box::pin(self.read_members(call, op)),
            _ => op,
        }
    }
}

/// A SQLite store whose connections can all be closed and opened again: the embedded
/// database's "server restart". While closed, every operation fails as a server that is down
/// would.
#[derive(Debug)]
pub(crate) struct Reopenable {
    url: String,
    backend: &'static str,
    caps: Capabilities,
    current: Mutex<Option<Arc<SqliteStore>>>,
}

impl Reopenable {
    /// Opens the store at `url`.
    pub(crate) async fn open(url: &str) -> Result<Reopenable> {
        let store = SqliteStore::connect(url, SqlConfig::default()).await?;
        Ok(Reopenable {
            url: url.to_owned(),
            backend: store.backend(),
            // The store's own, but without slots: this forwarder keeps no slot operations (its
            // `slot_store()` answers `None`).
            caps: Capabilities {
                slots: false,
                ..store.capabilities()
            },
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

// A hand forwarder (it swaps its inner store, which a hook cannot): every method is written
// out, so a method added to a store trait fails the build here instead of being lost.
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl LeaseStore for Reopenable {
    fn backend(&self) -> &'static str {
        self.backend
    }

    fn capabilities(&self) -> Capabilities {
        self.caps.clone()
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

    fn slot_store(&self) -> Option<&dyn lease::backend::slots::SlotStore> {
        None
    }

    async fn available(&self) -> Result<()> {
        self.store()?.available().await
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

    async fn renew_many(
        &self,
        items: &[RenewItem<'_>],
        ttl: Duration,
    ) -> Result<Vec<Result<Option<Grant>>>> {
        self.store()?.renew_many(items, ttl).await
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

    async fn force_release(&self, name: &str) -> Result<bool> {
        self.store()?.force_release(name).await
    }

    async fn names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<lease::backend::names::NamePage> {
        self.store()?.names(prefix, after, limit).await
    }

    fn changes(
        &self,
        topic: &lease::backend::notify::Topic,
    ) -> Option<lease::backend::notify::Wakeups> {
        self.store().ok()?.changes(topic)
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl PermitStore for Reopenable {
    async fn claim_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<lease::backend::permits::PermitGrant>> {
        self.store()?
            .claim_permit(name, permits, holder, instance, ttl)
            .await
    }

    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.store()?.renew_permit(name, permit, holder, ttl).await
    }

    async fn release_permit(&self, name: &str, permit: u32, holder: &HolderToken) -> Result<bool> {
        self.store()?.release_permit(name, permit, holder).await
    }

    async fn verify_permit(
        &self,
        name: &str,
        holder: &HolderToken,
    ) -> Result<Option<lease::backend::permits::PermitGrant>> {
        self.store()?.verify_permit(name, holder).await
    }

    async fn read_back_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
    ) -> Result<Option<lease::backend::permits::PermitGrant>> {
        self.store()?.read_back_permit(name, permits, holder).await
    }

    async fn permits(&self, name: &str) -> Result<Vec<lease::backend::permits::PermitInfo>> {
        self.store()?.permits(name).await
    }
}

#[deny(clippy::missing_trait_methods)]
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

#[deny(clippy::missing_trait_methods)]
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::contenders::Pause;
    use lease::memory::MemoryStore;

    /// The same answer, for `available()`: both Ok, or both failing with the same kind.
    fn same(a: &Result<()>, b: &Result<()>) -> bool {
        match (a, b) {
            (Ok(()), Ok(())) => true,
            (Err(a), Err(b)) => a.kind() == b.kind(),
            _ => false,
        }
    }

    fn sqlite_url(tag: &str) -> String {
        let dir = std::env::temp_dir().join("lease-soak-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("{tag}-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&file);
        format!("sqlite://{}", file.display())
    }

    /// Every wrapper the soak puts around `store` reports its backend, capabilities and
    /// `available()` answer.
    async fn wrappers_tell_the_truth(store: Arc<dyn GroupStore>) {
        let truth = store.available().await;
        let lease: Arc<dyn LeaseStore> = store.clone();
        let wrappers: Vec<(&str, Arc<dyn LeaseStore>)> = vec![
            (
                "LyingStore",
                Arc::new(LyingStore::new(lease.clone(), LyingRenewals)),
            ),
            (
                "LyingGroupStore",
                Arc::new(LyingGroups::wrap(store.clone(), Duration::from_secs(1))),
            ),
            ("Pausable", Arc::new(Pause::wrap(lease.clone()))),
            (
                "FaultyStore",
                Arc::new(lease_conformance::faulty(store.clone())),
            ),
        ];
        for (what, wrapper) in wrappers {
            assert_eq!(wrapper.backend(), store.backend(), "{what}");
            assert_eq!(wrapper.capabilities(), store.capabilities(), "{what}");
            let answer = wrapper.available().await;
            assert!(same(&answer, &truth), "{what}: {answer:?} vs {truth:?}");
        }
    }

    #[tokio::test]
    async fn wrappers_over_the_memory_store_tell_the_truth() {
        wrappers_tell_the_truth(Arc::new(MemoryStore::new())).await;
    }

    #[tokio::test]
    async fn wrappers_over_sqlite_tell_the_truth() {
        let url = sqlite_url("wrappers");
        let store = SqliteStore::connect(&url, SqlConfig::default())
            .await
            .unwrap();
        wrappers_tell_the_truth(Arc::new(store.clone())).await;

        let reopenable = Reopenable::open(&url).await.unwrap();
        assert_eq!(reopenable.backend(), store.backend());
        // The store's capabilities, but for slots: this forwarder keeps no slot operations, and
        // says so (its accessor and its flag agree).
        assert_eq!(
            reopenable.capabilities(),
            Capabilities {
                slots: false,
                ..store.capabilities()
            }
        );
        assert!(store.capabilities().slots);
        assert!(reopenable.slot_store().is_none());
        reopenable.available().await.unwrap();
        // force_release reaches the store (it was lost before).
        let holder = HolderToken::mint();
        let ttl = Duration::from_secs(30);
        assert!(
            reopenable
                .claim("n", &holder, "i", ttl)
                .await
                .unwrap()
                .is_some()
        );
        assert!(reopenable.force_release("n").await.unwrap());
        // So does the listing of names.
        let listed = reopenable.names("n", None, 10).await.unwrap();
        assert_eq!(listed.names.first().map(|n| n.name.as_str()), Some("n"));
        // Closed for the restart, it is unavailable; reopened, available again.
        reopenable.close().await;
        let closed = reopenable.available().await;
        assert!(closed.is_err_and(|e| e.is(lease::ErrorKind::Unavailable)));
        reopenable.reopen().await.unwrap();
        reopenable.available().await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_lying_store_reports_failed_renewals_as_granted() {
        let store = lease_conformance::faulty(MemoryStore::new());
        let lying = LyingStore::new(Arc::new(store.clone()), LyingRenewals);
        let holder = HolderToken::mint();
        let ttl = Duration::from_secs(10);
        assert!(lying.claim("n", &holder, "i", ttl).await.unwrap().is_some());
        store.hook().set_mode(FaultMode::Cut);
        let lie = lying.renew("n", &holder, ttl).await.unwrap();
        assert_eq!(lie.map(|g| g.expires_in), Some(ttl));
        // Other operations do not lie.
        assert!(lying.verify("n", &holder).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lying_group_store_keeps_epochs_and_members() {
        let store = lease_conformance::faulty(MemoryStore::new());
        let inner: Arc<dyn GroupStore> = Arc::new(store.clone());
        let lying = LyingGroups::wrap(inner, Duration::from_secs(10));
        let ttl = Duration::from_secs(10);
        let won = lying
            .acquire_partition("g", 3, "o", ttl)
            .await
            .unwrap()
            .unwrap();
        lying
            .heartbeat("s", "o", "addr", ttl, &["g".to_owned()])
            .await
            .unwrap();
        let members = lying.members("s").await.unwrap();
        store.hook().set_mode(FaultMode::Cut);
        let renewed = lying
            .renew_partitions("g", &[3, 4], "o", ttl)
            .await
            .unwrap();
        assert_eq!(renewed.len(), 1, "only the partition acquired through it");
        assert_eq!((renewed[0].partition, renewed[0].epoch), (3, won.epoch));
        let beat = lying.heartbeat("s", "o", "addr", ttl, &[]).await.unwrap();
        assert_eq!((beat.node.as_str(), beat.address.as_str()), ("o", "addr"));
        assert_eq!(lying.members("s").await.unwrap(), members);
        assert!(lying.owners("g").await.is_err(), "owners do not lie");
    }
}
