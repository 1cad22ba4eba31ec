//! Options of a SQL lease store.

use lease_core::{Error, Result};

/// Whether the store creates its table when it is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ddl {
    /// Create the table (`CREATE TABLE IF NOT EXISTS`) when the store is built.
    #[default]
    Auto,
    /// Never run DDL: the table must exist (see [`schema_sql`](crate::schema_sql) and the
    /// migrations shipped with the crate); a missing table is reported with the statement that
    /// creates it.
    None,
}

/// Options of a SQL lease store.
///
/// ```
/// use lease_sql::{Ddl, SqlConfig};
/// let config = SqlConfig::default().table("app.leases").unwrap().ddl(Ddl::None);
/// assert_eq!(config.table_name(), "app.leases");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlConfig {
    pub(crate) table: String,
    pub(crate) ddl: Ddl,
    pub(crate) max_name_bytes: usize,
    pub(crate) lease_connections: u32,
    pub(crate) hints: bool,
    pub(crate) allow_async_replication: bool,
}

/// The default table name.
pub const DEFAULT_TABLE: &str = "leases";

/// The width of the `name` column the crate creates, in bytes (and of the `group_name` and
/// `service` columns of the partition and member tables).
pub const NAME_COLUMN_BYTES: usize = 255;

/// What is appended to the lease table's name to name the partition table.
pub const PARTITIONS_SUFFIX: &str = "_partitions";

/// What is appended to the lease table's name to name the member table.
pub const MEMBERS_SUFFIX: &str = "_members";

/// What is appended to the lease table's name to name the permit table (counted leases).
pub const PERMITS_SUFFIX: &str = "_permits";

/// SQLite: expiries at or above this are wall-clock milliseconds (September 2001 or later),
/// written by a lease-sql from before the boot clock; boot-clock values stay below it through
/// 31 years of uptime.
pub(crate) const WALL_CLOCK_FLOOR_MS: i64 = 1_000_000_000_000;

/// The longest identifier accepted for the lease table (PostgreSQL cuts identifiers at 63 bytes),
/// leaving room for the longest suffix (`_partitions`; `_members` and `_permits` are shorter).
const MAX_TABLE_BYTES: usize = 63 - PARTITIONS_SUFFIX.len();

impl Default for SqlConfig {
    fn default() -> Self {
        SqlConfig {
            table: DEFAULT_TABLE.to_owned(),
            ddl: Ddl::Auto,
            max_name_bytes: NAME_COLUMN_BYTES,
            lease_connections: 2,
            hints: true,
            allow_async_replication: false,
        }
    }
}

impl SqlConfig {
    /// Sets the table name: an identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 52 bytes),
    /// optionally qualified by a schema (`schema.table`, the schema at most 63 bytes). It is
    /// interpolated into the SQL, so nothing else is accepted.
    ///
    /// The partition and member tables are named after it, in the same schema:
    /// `<table>_partitions` and `<table>_members` (hence 52 bytes: the longer name must still
    /// fit PostgreSQL's 63).
    ///
    /// ```
    /// use lease_sql::SqlConfig;
    /// let config = SqlConfig::default().table("app.jobs").unwrap();
    /// assert_eq!(config.partitions_table_name(), "app.jobs_partitions");
    /// assert_eq!(config.members_table_name(), "app.jobs_members");
    /// ```
    pub fn table(mut self, table: &str) -> Result<Self> {
        let parts: Vec<&str> = table.split('.').collect();
        let ident_ok = |p: &str| {
            !p.is_empty()
                && p.len() <= 63
                && p.chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if parts.len() > 2 || !parts.iter().all(|p| ident_ok(p)) {
            return Err(Error::invalid_name(format!(
                "table name {table:?} is not a plain SQL identifier; use letters, digits and \
                 underscores (optionally schema.table)"
            )));
        }
        if let Some(last) = parts.last().filter(|p| p.len() > MAX_TABLE_BYTES) {
            return Err(Error::invalid_name(format!(
                "table name {last:?} is {} bytes long; at most {MAX_TABLE_BYTES} are taken, so \
                 that `{last}{PARTITIONS_SUFFIX}` still fits a 63-byte identifier",
                last.len()
            )));
        }
        self.table = table.to_owned();
        Ok(self)
    }

    /// Options from the environment, over the defaults:
    ///
    /// - `LEASE_SQL_TABLE`: the lease table (see [`table`](Self::table));
    /// - `LEASE_SQL_DDL`: `auto` or `none` (see [`Ddl`]);
    /// - `LEASE_SQL_MAX_NAME_BYTES`: the longest name accepted, in bytes;
    /// - `LEASE_SQL_LEASE_CONNECTIONS`: the store's own connections for lease operations;
    /// - `LEASE_SQL_HINTS`: `on` or `off` (also `true`/`false`, `1`/`0`; see
    ///   [`hints`](Self::hints)).
    ///
    /// An unset or empty variable keeps the default. A malformed value is refused with a
    /// message naming the variable (`InvalidName` for the table, `InvalidArgument` otherwise).
    pub fn from_env() -> Result<Self> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) with the variables read through `var`.
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let number = |name: &str| -> Result<Option<u64>> {
            var(name)
                .map(|v| {
                    v.trim().parse::<u64>().map_err(|_| {
                        Error::invalid_argument(format!("{name} is {v:?}; give a whole number"))
                    })
                })
                .transpose()
        };
        let mut config = SqlConfig::default();
        if let Some(table) = var("LEASE_SQL_TABLE") {
            config = config
                .table(table.trim())
                .map_err(|e| Error::invalid_name(format!("LEASE_SQL_TABLE: {}", e.message())))?;
        }
        if let Some(v) = var("LEASE_SQL_DDL") {
            config = config.ddl(match v.trim().to_ascii_lowercase().as_str() {
                "auto" => Ddl::Auto,
                "none" => Ddl::None,
                _ => {
                    return Err(Error::invalid_argument(format!(
                        "LEASE_SQL_DDL is {v:?}; give auto or none"
                    )));
                }
            });
        }
        if let Some(n) = number("LEASE_SQL_MAX_NAME_BYTES")? {
            config = config.max_name_bytes(usize::try_from(n).unwrap_or(usize::MAX));
        }
        if let Some(n) = number("LEASE_SQL_LEASE_CONNECTIONS")? {
            config = config.lease_connections(u32::try_from(n).unwrap_or(u32::MAX));
        }
        if let Some(v) = var("LEASE_SQL_HINTS") {
            config = config.hints(match v.trim().to_ascii_lowercase().as_str() {
                "on" | "true" | "1" => true,
                "off" | "false" | "0" => false,
                _ => {
                    return Err(Error::invalid_argument(format!(
                        "LEASE_SQL_HINTS is {v:?}; give on or off"
                    )));
                }
            });
        }
        Ok(config)
    }

    /// Sets the DDL switch.
    pub fn ddl(mut self, ddl: Ddl) -> Self {
        self.ddl = ddl;
        self
    }

    /// Sets the longest name accepted, in bytes (default 255, the width of the column this crate
    /// creates). The store checks at start-up that the table's `name` column is at least this
    /// wide, so no name is ever truncated.
    pub fn max_name_bytes(mut self, bytes: usize) -> Self {
        self.max_name_bytes = bytes;
        self
    }

    /// Sets how many connections the store's own lease pool may open (default 2). Lease
    /// operations never wait behind the application's pool.
    pub fn lease_connections(mut self, n: u32) -> Self {
        self.lease_connections = n.max(1);
        self
    }

    /// Sets whether the store pushes hints of changes to other processes (default on): what
    /// lets a waiter claim the moment a lease is released instead of at its next retry (see
    /// [`LeaseStore::changes`](lease_core::LeaseStore::changes)). Hints are never the basis of a
    /// decision; with them off, waiters poll and nothing else changes.
    ///
    /// - **PostgreSQL**: on, the statements that change hands (claim, release, force release,
    ///   a partition acquired by a new owner or released) send `pg_notify` in their own
    ///   statement, delivered when it commits, and the store keeps one listening connection
    ///   (`LISTEN`, opened on the first wait, checked with a `SELECT 1` every 5 s, reconnected
    ///   with backoff). Turn it off behind PgBouncer in transaction or statement mode (`LISTEN`
    ///   does not work there; or open the listener straight to the server with
    ///   `PostgresStore::with_listener_options`), or where
    ///   many clients change hands at once: PostgreSQL serializes the commits of transactions
    ///   that notify (measured on PostgreSQL 15 with `fsync` on: one client cycles at the same
    ///   rate, eight concurrent clients at about a quarter of it).
    /// - **SQLite**: on, a poller on a connection of its own checks `PRAGMA data_version`
    ///   every 15 ms while anybody waits, so changes by other processes wake waiters too.
    /// - **MySQL/MariaDB**: no effect; only the changes made through the same store wake its
    ///   waiters (see `MySqlStore`).
    ///
    /// Off, every store still wakes its own waiters on the changes made through itself, and says
    /// that hints may be missing
    /// ([`Wakeups::is_connected`](lease_core::backend::notify::Wakeups::is_connected) is `false`),
    /// so waiters keep their polling pace.
    pub fn hints(mut self, on: bool) -> Self {
        self.hints = on;
        self
    }

    /// Accepts a primary whose replicas may miss acknowledged commits (default `false`).
    ///
    /// A failover that promotes a replica which had not received the last commits loses them:
    /// a claim acknowledged with term N is gone on the new primary, so the next claim of the
    /// name gets term N again (a fencing token handed out twice) and the holder's live lease is
    /// gone while it still counts on it (`lease-sql/tests/failover_postgres.rs` and
    /// `failover_mysql.rs` show both). So [`available`](lease_core::LeaseStore::available) (run
    /// before the first operation however the store was built) reads the replication settings
    /// and fails with [`ErrorKind::Unsupported`](lease_core::ErrorKind::Unsupported), naming
    /// the setting to change, when a replica streams from the server and a commit is
    /// acknowledged before one has it:
    ///
    /// - **PostgreSQL**: a replica in `pg_stat_replication` while `synchronous_standby_names`
    ///   is empty, or `synchronous_commit` is `local` or `off` for the store's connections.
    ///   Accepted: a synchronous standby with `synchronous_commit` `on`, `remote_apply` or
    ///   `remote_write` (the last loses a commit only if the replica's host crashes too), and
    ///   `statement_timeout` 0 (a timeout cancels the wait for the standby, and PostgreSQL then
    ///   answers the commit as done though the standby may not have it; so does a cancelled or
    ///   terminated session, `pg_cancel_backend`, which the check cannot see).
    /// - **MariaDB/MySQL**: a replica connected (`Slaves_connected`, MariaDB; `SHOW REPLICAS`,
    ///   MySQL) while semi-synchronous replication is off (`rpl_semi_sync_master_enabled`), not
    ///   active now (`Rpl_semi_sync_master_status`), or waits `AFTER_COMMIT`
    ///   (`rpl_semi_sync_master_wait_point` must be `AFTER_SYNC`).
    ///
    /// With `true` the store logs the risk as a warning and goes on. Set it only where a repeated
    /// term cannot hurt (nothing is fenced) or where replication is made safe in a way the
    /// server cannot show (storage-level replication such as RDS Multi-AZ's instances).
    ///
    /// Limits of the check: it runs once, at start-up, on the server the store reached; a
    /// replica attached later, a primary that falls back to asynchronous replication later
    /// (MariaDB's `rpl_semi_sync_master_timeout`, 10 s by default; PostgreSQL never does), a
    /// failover tool that promotes a replica that was not synchronous, or a standalone server
    /// whose replicas are all down at start-up are not seen. URL parameter:
    /// `allow_async_replication=1`.
    pub fn allow_async_replication(mut self, allow: bool) -> Self {
        self.allow_async_replication = allow;
        self
    }

    /// Whether a primary with asynchronous replicas is accepted (see
    /// [`allow_async_replication`](Self::allow_async_replication)).
    pub fn async_replication_allowed(&self) -> bool {
        self.allow_async_replication
    }

    /// Whether hints to other processes are on (see [`hints`](Self::hints)).
    pub fn hints_enabled(&self) -> bool {
        self.hints
    }

    /// The table name.
    pub fn table_name(&self) -> &str {
        &self.table
    }

    /// The partition table's name: the lease table's, then `_partitions`.
    pub fn partitions_table_name(&self) -> String {
        format!("{}{PARTITIONS_SUFFIX}", self.table)
    }

    /// The member table's name: the lease table's, then `_members`.
    pub fn members_table_name(&self) -> String {
        format!("{}{MEMBERS_SUFFIX}", self.table)
    }

    /// The permit table's name (counted leases): the lease table's, then `_permits`.
    pub fn permits_table_name(&self) -> String {
        format!("{}{PERMITS_SUFFIX}", self.table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_from_the_environment() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(
            SqlConfig::from_vars(vars(&[])).unwrap(),
            SqlConfig::default()
        );
        let config = SqlConfig::from_vars(vars(&[
            ("LEASE_SQL_TABLE", "app.jobs"),
            ("LEASE_SQL_DDL", "None"),
            ("LEASE_SQL_MAX_NAME_BYTES", "100"),
            ("LEASE_SQL_LEASE_CONNECTIONS", " 3 "),
            ("LEASE_SQL_HINTS", "Off"),
        ]))
        .unwrap();
        let expected = SqlConfig::default()
            .table("app.jobs")
            .unwrap()
            .ddl(Ddl::None)
            .max_name_bytes(100)
            .lease_connections(3)
            .hints(false);
        assert_eq!(config, expected);
        assert_eq!(
            SqlConfig::from_vars(vars(&[("LEASE_SQL_DDL", "")])).unwrap(),
            SqlConfig::default()
        );
        for (pairs, kind, named) in [
            (
                &[("LEASE_SQL_TABLE", "a;b")][..],
                lease_core::ErrorKind::InvalidName,
                "LEASE_SQL_TABLE",
            ),
            (
                &[("LEASE_SQL_DDL", "sometimes")][..],
                lease_core::ErrorKind::InvalidArgument,
                "LEASE_SQL_DDL",
            ),
            (
                &[("LEASE_SQL_MAX_NAME_BYTES", "-1")][..],
                lease_core::ErrorKind::InvalidArgument,
                "LEASE_SQL_MAX_NAME_BYTES",
            ),
            (
                &[("LEASE_SQL_LEASE_CONNECTIONS", "two")][..],
                lease_core::ErrorKind::InvalidArgument,
                "LEASE_SQL_LEASE_CONNECTIONS",
            ),
            (
                &[("LEASE_SQL_HINTS", "sometimes")][..],
                lease_core::ErrorKind::InvalidArgument,
                "LEASE_SQL_HINTS",
            ),
        ] {
            let pairs: &'static [(&str, &str)] = pairs;
            let e = SqlConfig::from_vars(vars(pairs)).unwrap_err();
            assert_eq!(e.kind(), kind, "{e}");
            assert!(e.to_string().contains(named), "{e}");
        }
    }

    #[test]
    fn table_names_are_identifiers() {
        assert!(SqlConfig::default().table("leases_2").is_ok());
        assert!(SqlConfig::default().table("app.leases").is_ok());
        for bad in ["", "1x", "a;drop table x", "a.b.c", "a-b", "\"x\"", "a b"] {
            assert!(SqlConfig::default().table(bad).is_err(), "{bad}");
        }
        let longest = "t".repeat(MAX_TABLE_BYTES);
        let config = SqlConfig::default().table(&longest).unwrap();
        assert_eq!(config.partitions_table_name().len(), 63);
        assert!(SqlConfig::default().table(&format!("{longest}x")).is_err());
        let schema = "s".repeat(63);
        assert!(SqlConfig::default().table(&format!("{schema}.t")).is_ok());
    }
}
