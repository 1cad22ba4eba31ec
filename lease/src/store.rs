//! [`Store`]: the store [`open`](crate::open) returns, one variant per compiled backend.

// A build without any backend has a `Store` with no variant, whose methods use no argument.
#![cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "postgres",
        feature = "mysql",
        feature = "redis",
        feature = "nats",
        feature = "mongodb",
        feature = "etcd",
        feature = "memory"
    )),
    allow(unused_variables)
)]

use std::time::Duration;

use lease_core::backend::{
    Grant, HolderToken, async_trait,
    slots::{SlotClaim, SlotFinish, SlotRecord},
};
use lease_core::{
    LeaseStore, Result,
    backend::{
        Capabilities, LeaseInfo,
        membership::{Member, MembershipStore},
        partitions::{PartitionLease, PartitionStore},
        slots::SlotStore,
    },
};

use crate::Backend;

/// A store of whichever backend a URL named: one variant per backend compiled into this build.
///
/// It implements [`LeaseStore`], [`PartitionStore`], [`MembershipStore`] and [`SlotStore`] by
/// handing every call to the backend's own store, so it answers exactly as that store does,
/// [`capabilities`](LeaseStore::capabilities) and [`available`](LeaseStore::available)
/// included. An operation the backend lacks answers `ErrorKind::Unsupported`, as its
/// capabilities say: etcd keeps no scheduler slots (`slots: false`).
///
/// Match on it to reach the backend's own API (e.g. Redis's `purge_expired`).
#[derive(Debug)]
#[non_exhaustive]
pub enum Store {
    /// `sqlite://` (feature `sqlite`).
    #[cfg(feature = "sqlite")]
    Sqlite(lease_sql::SqliteStore),
    /// `postgres://` (feature `postgres`).
    #[cfg(feature = "postgres")]
    Postgres(lease_sql::PostgresStore),
    /// `mysql://`, `mariadb://` (feature `mysql`).
    #[cfg(feature = "mysql")]
    MySql(lease_sql::MySqlStore),
    /// `redis://`, `rediss://` (feature `redis`).
    #[cfg(feature = "redis")]
    Redis(lease_redis::RedisStore),
    /// `nats://` (feature `nats`).
    #[cfg(feature = "nats")]
    Nats(lease_nats::NatsStore),
    /// `mongodb://`, `mongodb+srv://` (feature `mongodb`).
    #[cfg(feature = "mongodb")]
    MongoDb(lease_mongo::MongoStore),
    /// `etcd://` (feature `etcd`).
    #[cfg(feature = "etcd")]
    Etcd(lease_etcd::EtcdStore),
    /// `memory://` (feature `memory`).
    #[cfg(feature = "memory")]
    Memory(lease_local::MemoryStore),
}

/// `$body` with `$s` bound to the backend's store, for every variant.
macro_rules! each {
    ($self:ident, $s:ident => $body:expr) => {
        match *$self {
            #[cfg(feature = "sqlite")]
            Store::Sqlite(ref $s) => $body,
            #[cfg(feature = "postgres")]
            Store::Postgres(ref $s) => $body,
            #[cfg(feature = "mysql")]
            Store::MySql(ref $s) => $body,
            #[cfg(feature = "redis")]
            Store::Redis(ref $s) => $body,
            #[cfg(feature = "nats")]
            Store::Nats(ref $s) => $body,
            #[cfg(feature = "mongodb")]
            Store::MongoDb(ref $s) => $body,
            #[cfg(feature = "etcd")]
            Store::Etcd(ref $s) => $body,
            #[cfg(feature = "memory")]
            Store::Memory(ref $s) => $body,
        }
    };
}

/// As [`each!`], but the backends without scheduler slots answer `Unsupported`.
macro_rules! each_with_slots {
    ($self:ident, $s:ident => $body:expr) => {
        match *$self {
            #[cfg(feature = "sqlite")]
            Store::Sqlite(ref $s) => $body,
            #[cfg(feature = "postgres")]
            Store::Postgres(ref $s) => $body,
            #[cfg(feature = "mysql")]
            Store::MySql(ref $s) => $body,
            #[cfg(feature = "redis")]
            Store::Redis(ref $s) => $body,
            #[cfg(feature = "nats")]
            Store::Nats(ref $s) => $body,
            #[cfg(feature = "mongodb")]
            Store::MongoDb(ref $s) => $body,
            #[cfg(feature = "etcd")]
            Store::Etcd(_) => Err(no_slots($self)),
            #[cfg(feature = "memory")]
            Store::Memory(ref $s) => $body,
        }
    };
}

impl Store {
    /// The backend this store is on.
    pub fn kind(&self) -> Backend {
        match *self {
            #[cfg(feature = "sqlite")]
            Store::Sqlite(_) => Backend::Sqlite,
            #[cfg(feature = "postgres")]
            Store::Postgres(_) => Backend::Postgres,
            #[cfg(feature = "mysql")]
            Store::MySql(_) => Backend::MySql,
            #[cfg(feature = "redis")]
            Store::Redis(_) => Backend::Redis,
            #[cfg(feature = "nats")]
            Store::Nats(_) => Backend::Nats,
            #[cfg(feature = "mongodb")]
            Store::MongoDb(_) => Backend::MongoDb,
            #[cfg(feature = "etcd")]
            Store::Etcd(_) => Backend::Etcd,
            #[cfg(feature = "memory")]
            Store::Memory(_) => Backend::Memory,
        }
    }
}

/// The answer of a scheduler-slot operation on a backend that keeps none.
#[allow(dead_code)] // Unused when no backend without slots is compiled in.
fn no_slots(store: &Store) -> lease_core::Error {
    lease_core::Error::unsupported(format!(
        "the {} store keeps no scheduler slots (its capabilities say slots: false); run the \
         scheduler on a store that does, e.g. SQL, Redis, NATS, MongoDB",
        store.backend()
    ))
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl LeaseStore for Store {
    fn backend(&self) -> &'static str {
        each!(self, s => s.backend())
    }

    fn capabilities(&self) -> Capabilities {
        each!(self, s => s.capabilities())
    }

    fn permit_store(&self) -> Option<&dyn lease_core::backend::permits::PermitStore> {
        each!(self, s => s.permit_store())
    }

    fn partition_store(&self) -> Option<&dyn PartitionStore> {
        each!(self, s => s.partition_store())
    }

    fn membership_store(&self) -> Option<&dyn MembershipStore> {
        each!(self, s => s.membership_store())
    }

    fn slot_store(&self) -> Option<&dyn SlotStore> {
        each!(self, s => s.slot_store())
    }

    async fn available(&self) -> Result<()> {
        each!(self, s => s.available().await)
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        each!(self, s => s.claim(name, holder, instance, ttl).await)
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        each!(self, s => s.renew(name, holder, ttl).await)
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        each!(self, s => s.release(name, holder).await)
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        each!(self, s => s.verify(name, holder).await)
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        each!(self, s => s.get(name).await)
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        each!(self, s => s.force_release(name).await)
    }

    fn changes(
        &self,
        topic: &lease_core::backend::notify::Topic,
    ) -> Option<lease_core::backend::notify::Wakeups> {
        each!(self, s => s.changes(topic))
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl PartitionStore for Store {
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<PartitionLease>> {
        each!(self, s => s.acquire_partition(group, partition, owner, ttl).await)
    }

    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<PartitionLease>> {
        each!(self, s => s.renew_partitions(group, partitions, owner, ttl).await)
    }

    async fn release_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> Result<usize> {
        each!(self, s => s.release_partitions(group, partitions, owner).await)
    }

    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        each!(self, s => s.owners(group).await)
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl MembershipStore for Store {
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member> {
        each!(self, s => s.heartbeat(service, node, address, ttl, groups).await)
    }

    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        each!(self, s => s.members(service).await)
    }

    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        each!(self, s => s.leave(service, node).await)
    }
}

// With etcd the only backend compiled in, every slot operation answers `Unsupported` and reads
// none of its arguments.
#[cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "postgres",
        feature = "mysql",
        feature = "redis",
        feature = "nats",
        feature = "mongodb",
        feature = "memory"
    )),
    allow(unused_variables)
)]
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl SlotStore for Store {
    async fn claim_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<SlotClaim> {
        each_with_slots!(self, s => s.claim_slot(name, holder, instance, ttl, instant_ms).await)
    }

    async fn finish_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instant_ms: i64,
        passed_ms: Option<i64>,
    ) -> Result<SlotFinish> {
        each_with_slots!(self, s => s.finish_slot(name, holder, instant_ms, passed_ms).await)
    }

    async fn unfinished(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
        each_with_slots!(self, s => s.unfinished(names).await)
    }

    async fn claim_rerun(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<Option<Grant>> {
        each_with_slots!(self, s => s.claim_rerun(name, holder, instance, ttl, instant_ms).await)
    }

    async fn last_slot(&self, name: &str) -> Result<Option<SlotRecord>> {
        each_with_slots!(self, s => s.last_slot(name).await)
    }
}
