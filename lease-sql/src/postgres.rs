//! PostgreSQL.

use std::str::FromStr;

use lease_core::{Error, ErrorKind, Result};
use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use crate::common::{check_common, returning_store, verify_guard};
use crate::config::SqlConfig;
use crate::schema::Dialect;
use crate::store::SqlStore;

/// A lease store on PostgreSQL.
///
/// Statements (`:now` is `clock_timestamp()` in milliseconds):
///
/// ```sql
/// -- claim: one statement whether the name is new, expired or held
/// INSERT INTO leases AS l (name, holder, instance, term, expires_at_ms)
/// VALUES ($1, $2, $3, 1, :now + $4)
/// ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, instance = excluded.instance,
///        term = l.term + 1, expires_at_ms = excluded.expires_at_ms
///  WHERE l.expires_at_ms <= :now
/// RETURNING term;                          -- no row: held
/// -- renew
/// UPDATE leases SET expires_at_ms = :now + $3
///  WHERE name = $1 AND holder = $2 AND expires_at_ms > :now RETURNING term;
/// -- release (keeps the row and its term)
/// UPDATE leases SET expires_at_ms = 0 WHERE name = $1 AND holder = $2 AND expires_at_ms > :now;
/// -- verify
/// SELECT term, expires_at_ms - :now FROM leases
///  WHERE name = $1 AND holder = $2 AND expires_at_ms > :now;
/// -- verify as the first statement of a transaction
/// SELECT term FROM leases WHERE name = $1 AND holder = $2 AND term = $3
///    AND expires_at_ms > :now FOR SHARE;
/// ```
pub type PostgresStore = SqlStore<Postgres>;

impl SqlStore<Postgres> {
    /// A store on the application's pool with the default options; checks at once that the
    /// database can carry leases (see [`SqlStore::with_config`](SqlStore::<Postgres>::with_config)).
    pub async fn new(pool: PgPool) -> Result<Self> {
        Self::with_config(pool, SqlConfig::default()).await
    }

    /// A store on the application's pool. Creates the table when missing (unless
    /// [`Ddl::None`](crate::Ddl::None)) and fails fast when the database cannot carry leases: no
    /// clock, a read-only connection, a missing table with DDL off, a `name` column narrower
    /// than `max_name_bytes`.
    pub async fn with_config(pool: PgPool, config: SqlConfig) -> Result<Self> {
        let server = {
            let o = pool.connect_options();
            format!(
                "postgres {}:{}/{}",
                o.get_host(),
                o.get_port(),
                o.get_database().unwrap_or_default()
            )
        };
        let leases = Self::lease_conns(&pool, &config);
        let store = Self::assemble(pool, leases, config, server, Dialect::Postgres);
        store.check_available().await?;
        Ok(store)
    }

    /// Connects to `url` (`postgres://user:password@host:port/database`) with a pool of its own
    /// and builds the store. A bad URL or an unreachable server gives `Unavailable`, naming the
    /// host (never the password).
    pub async fn connect(url: &str, config: SqlConfig) -> Result<Self> {
        let opts = PgConnectOptions::from_str(url).map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                "bad PostgreSQL URL; expected postgres://user:password@host:port/database",
            )
            .with_temporary(false)
            .with_source(e)
        })?;
        let server = format!("postgres {}:{}", opts.get_host(), opts.get_port());
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(std::time::Duration::from_secs(5))
            .connect_with(opts)
            .await
            .map_err(|e| crate::error::map(e, "connect", &server))?;
        Self::with_config(pool, config).await
    }

    async fn check_available(&self) -> Result<()> {
        check_common!(self, Postgres);
        let table = self.inner.config.table.to_lowercase();
        let (schema, name) = match table.split_once('.') {
            Some((s, n)) => (Some(s.to_owned()), n.to_owned()),
            None => (None, table.clone()),
        };
        let width: Option<(String, Option<i32>)> =
            crate::common::with_conn!(self, "start-up check", |c| sqlx::query_as(
                "SELECT data_type::text, character_maximum_length::int \
             FROM information_schema.columns \
             WHERE column_name = 'name' AND table_name = $1 \
               AND table_schema = COALESCE($2, current_schema())",
            )
            .bind(&name)
            .bind(schema)
            .fetch_optional(c))?;
        crate::common_checks::name_width(self, width.map(|(t, w)| (t, w.map(i64::from))))
    }
}

returning_store!(Postgres);
verify_guard!(Postgres, PgConnection, begin);
