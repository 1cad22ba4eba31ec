//! [`Store`]: the store [`open`](crate::open) returns, whichever backend its URL named.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lease_core::backend::membership::MembershipStore;
use lease_core::backend::names::NamePage;
use lease_core::backend::notify::{Topic, Wakeups};
use lease_core::backend::partitions::PartitionStore;
use lease_core::backend::permits::PermitStore;
use lease_core::backend::slots::SlotStore;
use lease_core::backend::{Capabilities, Grant, HolderToken, LeaseInfo, RenewItem, async_trait};
use lease_core::{LeaseStore, Result};

use crate::Backend;

/// The store a URL named: the backend's own store behind one `Arc<dyn LeaseStore>`.
///
/// It implements [`LeaseStore`] by handing every call to that store, so it answers exactly as
/// the backend's store does, [`capabilities`](LeaseStore::capabilities) and
/// [`available`](LeaseStore::available) included. Partitions, membership, counted leases and
/// scheduler slots are reached through the accessors
/// ([`partition_store`](LeaseStore::partition_store) and the like), which answer `None` when
/// the backend lacks the capability: etcd keeps no scheduler slots (`slots: false`).
///
/// Cloning a `Store` shares the one backend store (its pool, connection manager or client).
/// [`downcast_ref`](Store::downcast_ref) reaches the backend's own type, for its own API
/// (e.g. Redis's `purge_expired`):
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lease::Result<()> {
/// let store = lease::open("sqlite::memory:", &lease::OpenOptions::new()).await?;
/// assert_eq!(store.url_backend(), lease::Backend::Sqlite);
/// let sqlite = store.downcast_ref::<lease::sql::SqliteStore>().expect("a sqlite:// URL");
/// assert_eq!(sqlite.config().table_name(), "leases");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Store {
    /// The backend's store.
    inner: Arc<dyn LeaseStore>,
    /// The same store, as its own type for [`Store::downcast_ref`].
    own: Arc<dyn Any + Send + Sync>,
    /// What the URL's scheme named.
    backend: Backend,
}

impl Store {
    /// `store`, opened for a URL whose scheme named `backend`.
    pub(crate) fn new<S: LeaseStore>(backend: Backend, store: S) -> Store {
        let store = Arc::new(store);
        Store {
            inner: store.clone(),
            own: store,
            backend,
        }
    }

    /// The backend the URL's scheme named: what [`check_url`](crate::check_url) answers for
    /// it. ([`LeaseStore::backend`] is the store's own short name, for logs.)
    pub fn url_backend(&self) -> Backend {
        self.backend
    }

    /// The backend's own store, when it is a `T` (e.g. `lease::sql::SqliteStore` for a
    /// `sqlite://` URL, or the store a [registered scheme](crate::registry::register_scheme)'s opener
    /// made); `None` for any other type.
    pub fn downcast_ref<T: LeaseStore>(&self) -> Option<&T> {
        self.own.downcast_ref::<T>()
    }

    /// As [`downcast_ref`](Store::downcast_ref), but shared: the backend's own store itself
    /// (not a copy), for code that keeps it.
    pub fn downcast_arc<T: LeaseStore>(&self) -> Option<Arc<T>> {
        Arc::clone(&self.own).downcast::<T>().ok()
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .field("store", &self.inner)
            .finish()
    }
}

/// The backend's store itself, shared: the builders keep an `Arc<dyn LeaseStore>` as it is,
/// so each operation then reaches the backend without passing through the `Store`.
impl From<Store> for Arc<dyn LeaseStore> {
    fn from(store: Store) -> Arc<dyn LeaseStore> {
        store.inner
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl LeaseStore for Store {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn permit_store(&self) -> Option<&dyn PermitStore> {
        self.inner.permit_store()
    }

    fn partition_store(&self) -> Option<&dyn PartitionStore> {
        self.inner.partition_store()
    }

    fn membership_store(&self) -> Option<&dyn MembershipStore> {
        self.inner.membership_store()
    }

    fn slot_store(&self) -> Option<&dyn SlotStore> {
        self.inner.slot_store()
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

    async fn renew_many(
        &self,
        items: &[RenewItem<'_>],
        ttl: Duration,
    ) -> Result<Vec<Result<Option<Grant>>>> {
        self.inner.renew_many(items, ttl).await
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

    async fn force_release(&self, name: &str) -> Result<bool> {
        self.inner.force_release(name).await
    }

    async fn names(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<NamePage> {
        self.inner.names(prefix, after, limit).await
    }

    fn changes(&self, topic: &Topic) -> Option<Wakeups> {
        self.inner.changes(topic)
    }
}
