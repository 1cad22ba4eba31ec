//! Leases, leader election and partition groups on the store you already run, with one
//! dependency: the user-facing API of `lease-core`, every backend behind a cargo feature, and
//! [`open`], which turns a URL into a store.
//!
//! ```
//! use lease::{Coordinator, OpenOptions};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lease::Result<()> {
//! let file = std::env::temp_dir().join(format!("lease-doc-{}.db", std::process::id()));
//! # let _ = std::fs::remove_file(&file);
//! let store = lease::open(&format!("sqlite://{}", file.display()), &OpenOptions::new()).await?;
//!
//! let coordinator = Coordinator::builder(store).instance("worker-1").build()?;
//! let term = coordinator.try_acquire("nightly-report").await?;
//! // Held until resigned (or lost); the term's token fences what the holder writes.
//! assert_eq!(term.token(), 1);
//! term.resign().await?;
//! coordinator.close().await?;
//! # let _ = std::fs::remove_file(&file);
//! # Ok(())
//! # }
//! ```
//!
//! The [`Coordinator`] also offers `run` and `run_elected`; a [`GroupWorker`] shares
//! partitions among the members of a service. [`Store`] is a [`LeaseStore`] that reaches its
//! backend's partitions, membership, counted leases and slots through the accessors, so the
//! same value serves both. A store of your own is reached by URL once its scheme is registered
//! ([`registry::register_scheme`]).
//!
//! # What is where
//!
//! The root holds what a program builds with: [`open`] and its [`OpenOptions`], the [`Store`]
//! it returns, the [`Coordinator`] and its [`Term`]s, [`Permits`], the [`Observer`] and
//! [`Leadership`], the [`GroupWorker`] and its [`Assignment`], the [`Scheduler`] with its
//! [`Job`]s and [`Schedule`]s, the [`Timings`], and the [`Error`] type. The rest is in a few
//! modules:
//!
//! - [`coordinator`]: the builders, what a coordinator claims ([`coordinator::Target`]), the
//!   step-down policy, an observer's watches;
//! - [`group`] and [`scheduler`]: their builders and the types their handles give out;
//! - [`layer`]: a hook around every call a store answers; [`telemetry`]: the metric names, and
//!   [`telemetry::redact`]: URLs without their passwords; [`registry`]: schemes of stores of
//!   your own;
//! - [`backend`]: what a backend author implements and builds a store with (the capability
//!   traits, the lease protocol's types, the argument checks);
//! - one module per backend, below;
//! - `testing` (feature `testing`): a test kit for your own code that holds leases.
//!
//! # Backends and features
//!
//! | feature | schemes | crate, module |
//! |---|---|---|
//! | `sqlite` (default) | `sqlite:///path/to.db`, `sqlite::memory:` | lease-sql, `sql` |
//! | `postgres` | `postgres://`, `postgresql://` | lease-sql, `sql` |
//! | `mysql` | `mysql://`, `mariadb://` | lease-sql, `sql` |
//! | `redis` | `redis://`, `rediss://` | lease-redis, `redis` |
//! | `redis-sentinel` | (Redis through Sentinel: `redis::SentinelConnection`) | lease-redis, `redis` |
//! | `nats` | `nats://` | lease-nats, `nats` |
//! | `mongodb` | `mongodb://`, `mongodb+srv://` | lease-mongo, `mongodb` |
//! | `etcd` | `etcd://host:2379[,host:2379…]` (plain HTTP/2 endpoints) | lease-etcd, `etcd` |
//! | `memory` | `memory://` (a new in-process store per call) | lease-local, `memory` |
//! | `fence` | (downstream fences: files, and each resource whose feature above is on) | lease-fence, `fence` |
//! | `fence-http` | (the HTTP fences, tower layers: `fence::http`; turns `fence` on) | lease-fence, `fence::http` |
//! | `testing` | (a test kit for your own code, in paused time: `testing`; turns `memory` on) | lease-local, `testing` |
//!
//! Each module re-exports its backend crate whole, for its configuration and its own API; the
//! per-backend crates stay available for programs that want one dependency each. A URL whose
//! backend is not compiled in is refused with a message that names the feature to enable.
//!
//! # URL parameters
//!
//! `lease` reads a few query parameters itself and takes them out before the driver sees the
//! URL; the rest are the driver's (for NATS, etcd and `memory://`, which take none, anything
//! else is refused):
//!
//! - SQL: `table=NAME`, the lease table ([`OpenOptions::sql_table`]); `hints=on|off`, the
//!   store's push hints to waiters in other processes ([`OpenOptions::hints`]; SQL only: the
//!   other backends' listeners have no switch); `allow_async_replication=1`, accepting a
//!   primary whose replicas may miss acknowledged commits (`lease_sql::SqlConfig::allow_async_replication`).
//! - Redis: `allow_volatile=1`, `allow_fsync_everysec=1`, `terms=counter|clock_floor`,
//!   `key_prefix=PREFIX` ([`OpenOptions::redis_allow_volatile`] and the like).
//! - NATS: `bucket=NAME`: that bucket, whatever its max age ([`OpenOptions::nats_bucket`]).
//! - etcd: `prefix=PREFIX`: the key prefix (default `lease/`).
//!
//! A parameter that is also set in the [`OpenOptions`] must agree with it; a malformed
//! value, a conflict, an unknown parameter where the driver takes none, a malformed URL or an
//! unknown scheme are all refused before any I/O with [`ErrorKind::InvalidArgument`] whose
//! source is a [`UrlError`] and whose message says what to change. Passwords never appear in
//! those messages (see [`telemetry::redact`]).

pub use lease_core::{
    Assignment, Coordinator, Error, ErrorKind, GroupWorker, Job, Leadership, LeaseStore, Observer,
    Permits, Result, Schedule, Scheduler, Term, Timings,
};
pub use lease_core::{backend, coordinator, group, layer, scheduler, telemetry};

mod open;
mod options;
pub mod registry;
mod store;
mod url;

pub use options::OpenOptions;
pub use store::Store;
pub use url::{Backend, UrlError};

/// The SQL backends (lease-sql): `SqliteStore`, `PostgresStore` and `MySqlStore` as compiled
/// in (features `sqlite`, `postgres`, `mysql`), [`sql::SqlConfig`], verified transactions,
/// [`sql::Token`] (the fencing token as a SQL `BIGINT`), [`sql::SqlResultExt`] (sqlx errors
/// as lease errors) and, with `sqlite`, `is_sqlite_busy` (an error from a locked SQLite file).
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod sql {
    pub use lease_sql::*;

    /// `true` when `e` comes from SQLite's "database is busy" or "database is locked":
    /// somewhere in its chain of [sources](std::error::Error::source) is a sqlx database error
    /// whose code is `5` (`SQLITE_BUSY`) or `6` (`SQLITE_LOCKED`). Another connection holds the
    /// file's lock (say, another process creating the same new file), so the same call may
    /// succeed once it lets go.
    ///
    /// This asks the question of any error, the driver's type staying inside the facade:
    /// [`open`](crate::open) on a `sqlite://` URL gives such an error when its busy timeout runs
    /// out. Any other error, from any backend, is `false`.
    ///
    /// ```
    /// let e = lease::Error::unavailable("connection refused");
    /// assert!(!lease::sql::is_sqlite_busy(&e));
    /// ```
    #[cfg(feature = "sqlite")]
    pub fn is_sqlite_busy(e: &crate::Error) -> bool {
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            if let Some(sqlx::Error::Database(d)) = s.downcast_ref::<sqlx::Error>()
                && matches!(d.code().as_deref(), Some("5") | Some("6"))
            {
                return true;
            }
            source = s.source();
        }
        false
    }
}

/// The Redis backend (lease-redis).
#[cfg(feature = "redis")]
pub mod redis {
    pub use lease_redis::*;
}

/// The NATS JetStream KV backend (lease-nats).
#[cfg(feature = "nats")]
pub mod nats {
    pub use lease_nats::*;
}

/// The MongoDB backend (lease-mongo).
#[cfg(feature = "mongodb")]
pub mod mongodb {
    pub use lease_mongo::*;
}

/// The etcd v3 backend (lease-etcd).
#[cfg(feature = "etcd")]
pub mod etcd {
    pub use lease_etcd::*;
}

/// Downstream fences (lease-fence): the resource a holder writes to refuses a token lower than
/// the highest it has accepted, in the same atomic operation as the write. File fences always;
/// the SQL, Redis, etcd, NATS and MongoDB fences with their backend's feature; the HTTP fences
/// (`fence::http`: `FenceLayer` for tower servers, `StampLayer` for clients) with
/// `fence-http`. Everything is under this module: none of it is at the crate's root.
#[cfg(feature = "fence")]
pub mod fence {
    pub use lease_fence::*;
}

/// The in-process store (lease-local): [`memory::MemoryStore`] on tokio time.
#[cfg(feature = "memory")]
pub mod memory {
    pub use lease_local::*;
}

#[cfg(feature = "testing")]
pub mod testing;

/// Opens the store `url` names, with `options`, and checks that it can carry leases.
///
/// The URL is checked first, without I/O, as [`check_url`] does: an unknown scheme, a backend
/// not compiled in, a malformed URL, a bad or conflicting parameter give
/// [`ErrorKind::InvalidArgument`] (see [`UrlError`]). Then the backend's store is opened —
/// creating its table, bucket or collections when missing, as that backend does — and
/// [`available`](LeaseStore::available) is run, so a server that cannot carry leases as
/// configured is refused now (`Unsupported`, e.g. Redis without AOF; the message names the
/// URL parameters that accept it) rather than at the first claim. An unreachable server is
/// `Unavailable`, as the backend reports it.
///
/// Each call opens a new client (pool, connection manager); open once and share the store.
pub async fn open(url: &str, options: &OpenOptions) -> Result<Store> {
    let (target, resolved) = checked(url, options)?;
    open::connect(&target, &resolved).await
}

/// The checks [`open`] makes before any I/O: the backend `url` names, when the URL and
/// `options` are fine for it.
///
/// ```
/// use lease::{Backend, ErrorKind, OpenOptions, UrlError};
///
/// let options = OpenOptions::new();
/// assert_eq!(lease::check_url("sqlite:///var/lib/app/leases.db", &options)?, Backend::Sqlite);
/// let e = lease::check_url("ftp://example/x", &options).unwrap_err();
/// assert_eq!(e.kind(), ErrorKind::InvalidArgument);
/// assert!(matches!(UrlError::of(&e), Some(UrlError::UnknownScheme { .. })));
/// # Ok::<(), lease::Error>(())
/// ```
pub fn check_url(url: &str, options: &OpenOptions) -> Result<Backend> {
    checked(url, options).map(|(target, _)| target.backend)
}

fn checked(url: &str, options: &OpenOptions) -> Result<(url::Target, options::Resolved)> {
    let target = url::Target::parse(url)?;
    open::check_driver(&target)?;
    let resolved = options::Resolved::of(&target, options)?;
    Ok((target, resolved))
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use sqlx::ConnectOptions;
    use sqlx::sqlite::SqliteConnectOptions;

    use super::*;

    /// A write refused because another connection holds the file's lock is busy, also as the
    /// source of another error; an error with no such cause is not.
    #[tokio::test]
    async fn a_locked_sqlite_file_is_busy() {
        let file = std::env::temp_dir().join(format!("lease-busy-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let options = SqliteConnectOptions::new()
            .filename(&file)
            .create_if_missing(true)
            .busy_timeout(Duration::ZERO);
        let mut holder = options.connect().await.unwrap();
        let mut other = options.connect().await.unwrap();
        sqlx::query("CREATE TABLE t (x INTEGER)")
            .execute(&mut holder)
            .await
            .unwrap();
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut holder)
            .await
            .unwrap();
        let refused = sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut other)
            .await
            .unwrap_err();
        let e = sql::classify(refused, "insert a row");
        assert!(sql::is_sqlite_busy(&e), "{e}");
        let wrapped = Error::unavailable("open the store").with_source(e);
        assert!(sql::is_sqlite_busy(&wrapped), "{wrapped}");

        assert!(!sql::is_sqlite_busy(&sql::classify(
            sqlx::Error::PoolTimedOut,
            "insert a row"
        )));
        assert!(!sql::is_sqlite_busy(&Error::unavailable(
            "connection refused"
        )));
        drop((holder, other));
        let _ = std::fs::remove_file(&file);
    }
}
