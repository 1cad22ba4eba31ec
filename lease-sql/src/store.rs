//! The store type shared by the three dialects.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{Error, ErrorKind, Result, Term, backend::HolderToken};
use sqlx::{Database, Pool};

use crate::config::SqlConfig;
use crate::conns::Conns;
use crate::schema::{Dialect, Statements};

/// A lease store on a SQL database: [`PostgresStore`](crate::PostgresStore),
/// [`MySqlStore`](crate::MySqlStore) or [`SqliteStore`](crate::SqliteStore).
///
/// Lease operations run on a few connections of the store's own (see
/// [`SqlConfig::lease_connections`]), opened with the application pool's connect options: a
/// saturated application pool never delays a renewal, and no pool pings them on checkout or
/// release, so every operation is one round trip on a warm connection. The
/// application's pool is used only for the transactions opened with `begin_verified`.
pub struct SqlStore<DB: Database> {
    pub(crate) inner: Arc<Inner<DB>>,
}

pub(crate) struct Inner<DB: Database> {
    pub(crate) leases: Conns<DB>,
    pub(crate) app: Pool<DB>,
    pub(crate) stmts: Statements,
    pub(crate) config: SqlConfig,
    pub(crate) server: String,
    pub(crate) dialect: Dialect,
    /// MySQL/MariaDB: the server takes `SET STATEMENT innodb_lock_wait_timeout = 0 FOR` (MariaDB
    /// 10.3 or later), so claims use [`Statements::claim_nowait`]; found at start-up.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) nowait_claims: std::sync::atomic::AtomicBool,
}

impl<DB: Database> Clone for SqlStore<DB> {
    fn clone(&self) -> Self {
        SqlStore {
            inner: self.inner.clone(),
        }
    }
}

impl<DB: Database> fmt::Debug for SqlStore<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStore")
            .field("dialect", &self.inner.dialect)
            .field("server", &self.inner.server)
            .field("table", &self.inner.config.table)
            .finish_non_exhaustive()
    }
}

impl<DB: Database> SqlStore<DB> {
    pub(crate) fn assemble(
        app: Pool<DB>,
        leases: Conns<DB>,
        config: SqlConfig,
        server: String,
        dialect: Dialect,
    ) -> Self {
        SqlStore {
            inner: Arc::new(Inner {
                leases,
                app,
                stmts: Statements::new(dialect, &config.table),
                config,
                server,
                dialect,
                nowait_claims: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// The store's own connections for lease operations, opened on first use with the
    /// application pool's connect options.
    pub(crate) fn lease_conns(app: &Pool<DB>, config: &SqlConfig) -> Conns<DB> {
        Conns::new((*app.connect_options()).clone(), config.lease_connections)
    }

    /// The options this store was built with.
    pub fn config(&self) -> &SqlConfig {
        &self.inner.config
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.inner.dialect
    }

    /// The server this store talks to (host:port/database or file), for messages; never a
    /// password.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The application's pool the store was built on.
    pub fn app_pool(&self) -> &Pool<DB> {
        &self.inner.app
    }

    /// Maps a sqlx error of `op`, naming the table and its DDL when the table is missing.
    pub(crate) fn err(&self, e: sqlx::Error, op: &str) -> Error {
        if crate::error::is_missing_table(&e) {
            return missing_table(
                &self.inner.config.table,
                &self.inner.stmts.create,
                &self.inner.server,
            )
            .with_source(e);
        }
        crate::error::map(e, op, &self.inner.server)
    }

    pub(crate) fn term_from(&self, v: i64) -> Result<u64> {
        u64::try_from(v)
            .ok()
            .filter(|t| *t > 0)
            .ok_or_else(|| crate::error::corrupt(&format!("term {v}"), &self.inner.server))
    }
}

pub(crate) fn missing_table(table: &str, create: &str, server: &str) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "the lease table `{table}` does not exist on {server} and DDL is off; create it \
             with:\n{create}"
        ),
    )
    .with_temporary(false)
}

pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(lease_core::backend::ceil_millis(ttl)).unwrap_or(i64::MAX)
}

pub(crate) fn remaining(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// What a verified transaction is told about the term it runs under.
#[derive(Debug, Clone, Copy)]
pub struct Fence<'a> {
    /// The lease's name.
    pub name: &'a str,
    /// The holder token the term was claimed under.
    pub holder: &'a HolderToken,
    /// The term (fencing token).
    pub term: u64,
}

impl<'a> From<&'a Term> for Fence<'a> {
    fn from(term: &'a Term) -> Self {
        Fence {
            name: term.name(),
            holder: term.holder(),
            term: term.token(),
        }
    }
}

pub(crate) fn lost_in_transaction(fence: &Fence<'_>) -> Error {
    Error::lost(
        fence.name,
        format_args!(
            "verify at the start of the transaction found term {} no longer held; no statement \
             ran under it",
            fence.term
        ),
    )
}

pub(crate) fn term_i64(term: u64) -> i64 {
    i64::try_from(term).unwrap_or(i64::MAX)
}
