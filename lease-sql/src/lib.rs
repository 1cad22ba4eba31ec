//! Leases on PostgreSQL, MySQL/MariaDB and SQLite, through sqlx, on the database's clock.
//!
//! One row per name in a lease table, updated in place by four single-row statements (claim,
//! renew, release, verify), each one round trip on a warm connection. Expiry is judged by the
//! **database server's clock** only (on SQLite, which has no server, by the host's boot clock,
//! see `SqliteStore`); a process whose own wall clock is hours off neither steals a live lease
//! nor misjudges an expired one. The term (fencing token) is a column that goes up by
//! one on every change of hands and survives release and expiry.
//!
//! ```
//! use lease_core::Coordinator;
//! use lease_sql::{SqlConfig, SqlResultExt, SqliteStore, Token};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lease_core::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("lease-sql-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).ok();
//! # let url = format!("sqlite://{}/leases.db", dir.display());
//! let store = SqliteStore::connect(&url, SqlConfig::default()).await?;
//! let coordinator = Coordinator::builder(store.clone()).instance("worker-1").build()?;
//! let term = coordinator.try_acquire("nightly-report").await?;
//!
//! // Business writes under the lease: verify is the transaction's first statement, and
//! // when the lease is lost not one business statement runs.
//! // sqlx errors convert with `lease_err`, temporary or not as the store judges its own
//! // (a busy file, a deadlock, a lost connection: temporary); the token binds as it is.
//! # sqlx::query("CREATE TABLE report (day INTEGER PRIMARY KEY, fence INTEGER NOT NULL)")
//! #     .execute(store.app_pool()).await.lease_err("create the report table")?;
//! let mut tx = store.begin_verified(&term).await?;
//! sqlx::query("INSERT INTO report (day, fence) VALUES (?1, ?2)")
//!     .bind(20261202_i64)
//!     .bind(Token::of(&term)?)
//!     .execute(&mut *tx)
//!     .await
//!     .lease_err("write the report")?;
//! tx.commit().await.lease_err("commit the report")?;
//!
//! term.resign().await?;
//! coordinator.close().await
//! # }
//! ```
//!
//! Build a store from a URL (`connect(url, SqlConfig)`) or on the application's own pool
//! (`with_client(pool, SqlConfig)`: `PostgresStore::with_client`, `MySqlStore::with_client`,
//! `SqliteStore::with_client`). On your own pool the store still opens lease connections of its
//! own, up to [`SqlConfig::lease_connections`] (default 2), with the pool's connect options:
//! count them against the server's `max_connections` and a PgBouncer pool's size. Building
//! checks at once that the database can carry leases (a clock, a writable connection, the
//! table — created unless [`Ddl::None`] — and a `name` column wide and exact enough); a table of
//! the lease table's name that has other columns (another application's `leases`) is refused
//! with [`ErrorKind::Schema`](lease_core::ErrorKind::Schema), naming its columns and how to
//! choose another name. [`SqlConfig::from_env`] reads the options from `LEASE_SQL_*` variables.
//!
//! # Features
//!
//! One feature per dialect, `postgres`, `mysql` and `sqlite`, all three on by default. To build
//! one driver only, turn the defaults off:
//! `lease-sql = { version = "0.1", default-features = false, features = ["postgres"] }` —
//! then neither sqlx's MySQL nor its SQLite driver is compiled.
//!
//! # Hints
//!
//! [`LeaseStore::changes`](lease_core::LeaseStore::changes) answers on every dialect, so a
//! waiter claims the moment a name is released rather than at its next retry. PostgreSQL
//! pushes from every process (`LISTEN`/`NOTIFY`, see `PostgresStore`); SQLite from every
//! process on the host (a `PRAGMA data_version` check every 15 ms while anybody waits, see
//! `SqliteStore`); **MySQL and MariaDB only from the same store object** — other processes'
//! releases are found by polling, and the hints say so (`is_connected()` is `false`,
//! `capabilities().watch` is `false`; see `MySqlStore`). [`SqlConfig::hints`] turns the
//! cross-process part off. A hint is never the basis of a decision.
//!
//! # Business code under a lease
//!
//! [`SqlResultExt::lease_err`] (and [`classify`]) turn sqlx errors into lease errors with the
//! store's verdict on whether a retry may help, so the application's statements and the lease
//! calls share one error type; [`Token`] binds a fencing token to SQL as a `BIGINT`, refusing
//! (never wrapping) one above `i64::MAX`.
//!
//! The table's DDL is [`schema_sql`]; the same SQL ships as migrations under `migrations/` for
//! those who manage their own schema.
//!
//! Partitioned leases ([`PartitionStore`](lease_core::backend::partitions::PartitionStore)) and
//! membership ([`MembershipStore`](lease_core::backend::membership::MembershipStore)) live in two
//! more tables named after the lease table, `<table>_partitions` and `<table>_members`
//! ([`partitions_schema_sql`], [`members_schema_sql`], migration `0002`), each checked — and
//! created when missing, unless [`Ddl::None`] — as the lease table is, but on the first operation
//! that uses it: a store that serves elections only never creates them. No DDL is sent for a table
//! that exists (so PostgreSQL logs no "already exists, skipping" notice), and two processes
//! creating a table at once both succeed. Every one of their operations is one round trip, a batch
//! renewal of any size included.

//!
//! Counted leases
//! ([`PermitStore::claim_permit`](lease_core::backend::permits::PermitStore::claim_permit) and the
//! other permit operations, `capabilities().permits`; the rules are
//! [`lease_core::backend::permits`]'s) live in a table of their own, `<table>_permits`
//! ([`permits_schema_sql`], migration `0004`), checked and created on first use as the partition
//! and member tables are: a row per permit and a counter row per name. A claim is one statement on
//! PostgreSQL, one transaction sent as one request on MySQL and MariaDB, one `BEGIN IMMEDIATE`
//! transaction on SQLite; every permit operation is one round trip (see each store's docs).
//!
//! Every store implements [`LeaseStore`](lease_core::LeaseStore),
//! [`PartitionStore`](lease_core::backend::partitions::PartitionStore),
//! [`MembershipStore`](lease_core::backend::membership::MembershipStore) and
//! [`SlotStore`](lease_core::backend::slots::SlotStore); no operation is missing on any dialect.
//!
//! ## Layout
//!
//! One impl of each store trait serves every dialect (`driver.rs` for `LeaseStore`,
//! `partitions.rs`, `membership.rs`, `slots.rs`: argument checks, answers); what differs per
//! dialect is in its folder, as sqlx's drivers are: `postgres/`, `mysql/`, `sqlite/` (each with its
//! constructors and start-up checks in `mod.rs`, its statements in `statements.rs`, and the writes
//! it does its own way — MySQL's through `LAST_INSERT_ID`, SQLite's boot clock). `store.rs` holds
//! the store type, what all the others share and the start-up checks, `shared.rs` the statements
//! more than one dialect runs the same way, `wire/` the DDL, the statements PostgreSQL and SQLite
//! share and the store's own connections, `error.rs` the classification of sqlx errors.

mod config;
mod driver;
mod error;
mod hints;
mod leases;
mod membership;
#[cfg(feature = "mysql")]
mod mysql;
mod partitions;
mod permits;
#[cfg(feature = "postgres")]
mod postgres;
mod shared;
mod slots;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;
mod url_params;
mod wire;

pub use config::{
    DEFAULT_TABLE, Ddl, MEMBERS_SUFFIX, NAME_COLUMN_BYTES, PARTITIONS_SUFFIX, PERMITS_SUFFIX,
    SqlConfig,
};
pub use error::{SqlResultExt, classify};
#[cfg(feature = "mysql")]
pub use mysql::MySqlStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
/// The `sqlx` crate this store is built on, re-exported so your pool's and transaction's types
/// match.
pub use sqlx;
pub use store::{Fence, SqlStore, Token};
pub use url_params::SqlUrlParams;
pub use wire::schema::{
    Dialect, members_schema_sql, partitions_schema_sql, permits_schema_sql, schema_sql,
    sqlite_boot_clock_sql,
};
