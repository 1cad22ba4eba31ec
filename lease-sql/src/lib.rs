//! Leases on PostgreSQL, MySQL/MariaDB and SQLite, through sqlx, on the database's clock.
//!
//! One row per name in a lease table, updated in place by four single-row statements (claim,
//! renew, release, verify), each one round trip on a warm connection. Expiry is judged by the
//! **database server's clock** only (on SQLite, which has no server, by the host's boot clock,
//! see [`SqliteStore`]); a process whose own wall clock is hours off neither steals a live lease
//! nor misjudges an expired one. The term (fencing token) is a column that goes up by
//! one on every change of hands and survives release and expiry.
//!
//! ```
//! use lease_core::Coordinator;
//! use lease_sql::{SqlConfig, SqliteStore};
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
//! let mut tx = store.begin_verified(&term).await?;
//! sqlx::query("CREATE TABLE IF NOT EXISTS report (fence INTEGER)")
//!     .execute(&mut *tx)
//!     .await
//!     .map_err(|e| lease_core::Error::backend("report", e, false))?;
//! tx.commit().await.map_err(|e| lease_core::Error::backend("commit", e, true))?;
//!
//! term.resign().await?;
//! coordinator.close().await
//! # }
//! ```
//!
//! Build a store from a URL (`connect(url, SqlConfig)`) or on the application's own pool
//! (`with_client(pool, SqlConfig)`: [`PostgresStore::with_client`],
//! [`MySqlStore::with_client`], [`SqliteStore::with_client`]). Building checks at once that the
//! database can carry leases (a clock, a writable connection, the table — created unless
//! [`Ddl::None`] — and a `name` column wide and exact enough). [`SqlConfig::from_env`] reads the
//! options from `LEASE_SQL_*` variables.
//!
//! The table's DDL is [`schema_sql`]; the same SQL ships as migrations under `migrations/` for
//! those who manage their own schema.
//!
//! Partitioned leases ([`PartitionStore`](lease_core::PartitionStore)) and membership
//! ([`MembershipStore`](lease_core::MembershipStore)) live in two more tables named after the
//! lease table, `<table>_partitions` and `<table>_members` ([`partitions_schema_sql`],
//! [`members_schema_sql`], migration `0002`), created and checked at start-up as the lease
//! table is. Every one of their operations is one round trip, a batch renewal of any size
//! included.

//!
//! Every store implements [`LeaseStore`](lease_core::LeaseStore),
//! [`PartitionStore`](lease_core::PartitionStore),
//! [`MembershipStore`](lease_core::MembershipStore) and [`SlotStore`](lease_core::SlotStore);
//! no operation is missing on any dialect.
//!
//! ## Layout
//!
//! One impl of each store trait serves every dialect (`leases.rs`, `partitions.rs`,
//! `membership.rs`, `slots.rs`: argument checks, answers, the statements every dialect shares);
//! what differs per dialect is in its folder, as sqlx's drivers are: `postgres/`, `mysql/`,
//! `sqlite/` (each with its constructors and start-up checks in `mod.rs`, its statements in
//! `statements.rs`, and the writes it does its own way — MySQL's through `LAST_INSERT_ID`,
//! SQLite's boot clock). `store.rs` holds the store type and the start-up checks all share,
//! `wire/` the DDL, the statements PostgreSQL and SQLite share and the store's own
//! connections, `error.rs` the classification of sqlx errors.

mod config;
mod error;
mod leases;
mod membership;
#[cfg(feature = "mysql")]
mod mysql;
mod partitions;
#[cfg(feature = "postgres")]
mod postgres;
mod slots;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;
mod wire;

pub use config::{
    DEFAULT_TABLE, Ddl, MEMBERS_SUFFIX, NAME_COLUMN_BYTES, PARTITIONS_SUFFIX, SqlConfig,
};
#[cfg(feature = "mysql")]
pub use mysql::MySqlStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use store::{Fence, SqlStore};
pub use wire::schema::{
    Dialect, members_schema_sql, partitions_schema_sql, schema_sql, sqlite_boot_clock_sql,
};
