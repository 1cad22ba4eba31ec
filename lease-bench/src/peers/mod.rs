//! The cycle subjects: the library (store and coordinator), the raw protocols run by hand, the
//! raw lock floors and the peer crates, each behind one [`Subject`] interface.
//!
//! A subject owns its warm connection(s) and runs one acquire+release cycle per call, on one
//! name, checking that the acquisition succeeded and the release ended it.

mod distributed_lock;
mod etcd_lock;
pub(crate) mod library;
mod redis_raw;
mod rslock_peer;
mod sql_raw;

use anyhow::Result;
use futures::future::BoxFuture;

use crate::backends::Env;
use crate::cli::Backend;

/// The instance label every subject claims under.
pub(crate) const INSTANCE: &str = "lease-bench";

/// One acquire+release cycle at a time on a warm connection.
pub(crate) trait Subject: Send {
    /// Acquires the subject's name and releases it; an error when either did not happen.
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>>;

    /// Ends the subject (closes a coordinator); dropping it closes its connections.
    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// What a subject is, for the ratios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The library's store API.
    Library,
    /// The library's coordinator.
    Coordinator,
    /// The library's protocol run by hand.
    RawProtocol,
    /// The server's plain lock, no fencing (the floor).
    RawLock,
    /// Another crate.
    Peer,
    /// A variant run only to explain a figure (e.g. without durable commits).
    Diagnostic,
}

/// Every subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubjectId {
    /// `LeaseStore::claim` + `LeaseStore::release`.
    Store,
    /// `Coordinator::try_acquire` + `Term::resign`.
    Coordinator,
    /// lease-sql's claim and release statements on one plain sqlx connection.
    RawRow,
    /// lease-redis's claim and release scripts on one connection.
    RawLua,
    /// `pg_try_advisory_lock` + `pg_advisory_unlock`.
    Advisory,
    /// `GET_LOCK(name, 0)` + `RELEASE_LOCK`.
    GetLock,
    /// `SET key token NX PX ttl` + `DEL key`.
    SetNx,
    /// The `rslock` crate.
    Rslock,
    /// The `distributed-lock` crates.
    DistributedLock,
    /// etcd's lock API (`lock` + `unlock` under one etcd lease).
    EtcdLock,
    /// [`SubjectId::Store`] on PostgreSQL sessions with `synchronous_commit = off`.
    StoreNoSync,
    /// [`SubjectId::RawRow`] on a PostgreSQL session with `synchronous_commit = off`.
    RawRowNoSync,
    /// [`SubjectId::RawLua`] on a `ConnectionManager` configured as lease-redis configures its
    /// own: what the connection type costs.
    RawLuaManaged,
    /// [`SubjectId::Store`] on Redis without operation timeouts: what the timeouts cost.
    StoreNoTimeout,
}

impl SubjectId {
    /// The subjects run on `backend`, library first.
    pub(crate) fn on(backend: Backend) -> Vec<SubjectId> {
        use SubjectId::*;
        match backend {
            Backend::Local | Backend::Nats | Backend::Mongodb => vec![Store, Coordinator],
            Backend::Etcd => vec![Store, Coordinator, EtcdLock],
            Backend::Sqlite => vec![Store, Coordinator, RawRow],
            Backend::Postgres => vec![
                Store,
                Coordinator,
                RawRow,
                Advisory,
                DistributedLock,
                StoreNoSync,
                RawRowNoSync,
            ],
            Backend::Mysql => vec![Store, Coordinator, RawRow, GetLock, DistributedLock],
            Backend::Redis => vec![
                Store,
                Coordinator,
                RawLua,
                SetNx,
                Rslock,
                DistributedLock,
                RawLuaManaged,
                StoreNoTimeout,
            ],
        }
    }

    /// What it is.
    pub(crate) fn kind(self) -> Kind {
        match self {
            SubjectId::Store => Kind::Library,
            SubjectId::Coordinator => Kind::Coordinator,
            SubjectId::RawRow | SubjectId::RawLua => Kind::RawProtocol,
            SubjectId::Advisory | SubjectId::GetLock | SubjectId::SetNx => Kind::RawLock,
            SubjectId::Rslock | SubjectId::DistributedLock | SubjectId::EtcdLock => Kind::Peer,
            SubjectId::StoreNoSync
            | SubjectId::RawRowNoSync
            | SubjectId::RawLuaManaged
            | SubjectId::StoreNoTimeout => Kind::Diagnostic,
        }
    }

    /// A short label for tables and the chart.
    pub(crate) fn label(self) -> &'static str {
        match self {
            SubjectId::Store => "lease store: claim + release",
            SubjectId::Coordinator => "lease Coordinator: try_acquire + resign",
            SubjectId::RawRow => "raw lease-row SQL by hand (1 conn)",
            SubjectId::RawLua => "raw Lua lease by hand (1 conn)",
            SubjectId::Advisory => "pg_try_advisory_lock + unlock (floor)",
            SubjectId::GetLock => "GET_LOCK + RELEASE_LOCK (floor)",
            SubjectId::SetNx => "SET NX PX + DEL (floor)",
            SubjectId::Rslock => "rslock 0.10",
            SubjectId::DistributedLock => "distributed-lock 0.2",
            SubjectId::EtcdLock => "etcd lock API (etcd-client 0.19)",
            SubjectId::StoreNoSync => "lease store, synchronous_commit=off (diagnostic)",
            SubjectId::RawRowNoSync => "raw lease-row, synchronous_commit=off (diagnostic)",
            SubjectId::RawLuaManaged => "raw Lua on the store's ConnectionManager (diagnostic)",
            SubjectId::StoreNoTimeout => "lease store, operation_timeout=None (diagnostic)",
        }
    }

    /// `true` when the subject hands out a fencing token.
    pub(crate) fn fenced(self) -> bool {
        matches!(
            self.kind(),
            Kind::Library | Kind::Coordinator | Kind::RawProtocol | Kind::Diagnostic
        )
    }

    /// A name-safe tag.
    fn tag(self) -> &'static str {
        match self {
            SubjectId::Store => "store",
            SubjectId::Coordinator => "coord",
            SubjectId::RawRow => "rawrow",
            SubjectId::RawLua => "rawlua",
            SubjectId::Advisory => "advisory",
            SubjectId::GetLock => "getlock",
            SubjectId::SetNx => "setnx",
            SubjectId::Rslock => "rslock",
            SubjectId::DistributedLock => "dlock",
            SubjectId::EtcdLock => "etcdlock",
            SubjectId::StoreNoSync => "store-nosync",
            SubjectId::RawRowNoSync => "rawrow-nosync",
            SubjectId::RawLuaManaged => "rawlua-managed",
            SubjectId::StoreNoTimeout => "store-notimeout",
        }
    }
}

/// Builds subject `id` of `backend` against the server at `url` (which may be a proxy's).
/// `salt` keeps the names of two instances of the same subject apart.
pub(crate) async fn build(
    env: &Env,
    backend: Backend,
    id: SubjectId,
    url: &str,
    salt: &str,
) -> Result<Box<dyn Subject>> {
    let name = env.name(&format!("cycle-{}-{salt}", id.tag()));
    Ok(match id {
        SubjectId::Store => Box::new(library::StoreCycle::open(backend, url, name).await?),
        SubjectId::Coordinator => Box::new(library::CoordCycle::open(backend, url, name).await?),
        SubjectId::RawRow => sql_raw::raw_row(backend, url, name).await?,
        SubjectId::Advisory => Box::new(sql_raw::Advisory::open(url, &name).await?),
        SubjectId::GetLock => Box::new(sql_raw::GetLock::open(url, name).await?),
        SubjectId::RawLua => Box::new(redis_raw::RawLua::open(url, &name).await?),
        SubjectId::SetNx => Box::new(redis_raw::SetNx::open(url, &name).await?),
        SubjectId::Rslock => Box::new(rslock_peer::Rslock::open(url, name)),
        SubjectId::DistributedLock => distributed_lock::open(backend, url, &name).await?,
        SubjectId::EtcdLock => Box::new(etcd_lock::EtcdLock::open(url, name).await?),
        SubjectId::StoreNoSync => {
            Box::new(library::StoreCycle::open(backend, &no_sync(url), name).await?)
        }
        SubjectId::RawRowNoSync => sql_raw::raw_row(backend, &no_sync(url), name).await?,
        SubjectId::RawLuaManaged => Box::new(redis_raw::RawLua::open_managed(url, &name).await?),
        SubjectId::StoreNoTimeout => {
            Box::new(library::StoreCycle::redis_without_timeouts(url, name).await?)
        }
    })
}

/// A PostgreSQL URL whose sessions commit without waiting for the WAL flush
/// (`synchronous_commit = off`): not durable, for the diagnostic rows only.
fn no_sync(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options%5Bsynchronous_commit%5D=off")
}
