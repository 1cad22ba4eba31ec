//! The lease table and the statements run on it, per dialect.
//!
//! One row per name, updated in place. `:now` is always the database server's clock, in
//! milliseconds since the Unix epoch; every value is a bound parameter.

/// A SQL dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
    /// SQLite.
    Sqlite,
}

impl Dialect {
    /// The server's clock in milliseconds, as a SQL expression.
    ///
    /// - PostgreSQL: `clock_timestamp()`, which moves during a transaction (unlike `now()`), so a
    ///   verify late in a long transaction still sees the real time.
    /// - MySQL / MariaDB: `UNIX_TIMESTAMP()` plus the milliseconds of `NOW(3)`; both read the
    ///   statement's start instant, and neither goes through the session time zone (which is
    ///   ambiguous at daylight-saving changes).
    /// - SQLite: `unixepoch('subsec')` (SQLite 3.42+), the host's clock.
    pub fn now_ms(self) -> &'static str {
        match self {
            Dialect::Postgres => "FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
            Dialect::MySql => {
                "(CAST(UNIX_TIMESTAMP() AS SIGNED) * 1000 + MICROSECOND(NOW(3)) DIV 1000)"
            }
            Dialect::Sqlite => "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
        }
    }

    /// A short name, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
            Dialect::Sqlite => "sqlite",
        }
    }
}

/// The `CREATE TABLE IF NOT EXISTS` statement for the lease table `table` in `dialect`.
///
/// Columns: `name` (compared byte for byte, 255 bytes), `holder` (the holder token, 32 hex
/// digits), `instance`, `term` (the fencing token), `expires_at_ms` (the server's clock; 0 once
/// released), and the scheduler's slot columns `slot_ms`, `unfinished_slot_ms`,
/// `rerun_slot_ms` (NULL until used).
///
/// ```
/// use lease_sql::{Dialect, schema_sql};
/// let sql = schema_sql(Dialect::MySql, "leases");
/// assert!(sql.contains("VARBINARY(255)"));
/// ```
pub fn schema_sql(dialect: Dialect, table: &str) -> String {
    let (name, text, instance, big, tail) = match dialect {
        // COLLATE "C": byte order, and equality is byte equality.
        Dialect::Postgres => ("VARCHAR(255) COLLATE \"C\"", "TEXT", "TEXT", "BIGINT", ""),
        // VARBINARY: exact bytes, no case folding, no PAD SPACE ("job" ≠ "job ").
        Dialect::MySql => (
            "VARBINARY(255)",
            "CHAR(32) CHARACTER SET ascii COLLATE ascii_bin",
            "VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            "BIGINT",
            " ENGINE=InnoDB",
        ),
        // TEXT with the default BINARY collation compares with memcmp.
        Dialect::Sqlite => ("TEXT", "TEXT", "TEXT", "INTEGER", ""),
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\n    \
         name               {name} NOT NULL PRIMARY KEY,\n    \
         holder             {text} NOT NULL,\n    \
         instance           {instance} NOT NULL,\n    \
         term               {big} NOT NULL,\n    \
         expires_at_ms      {big} NOT NULL,\n    \
         slot_ms            {big} NULL,\n    \
         unfinished_slot_ms {big} NULL,\n    \
         rerun_slot_ms      {big} NULL\n)\
         {tail}"
    )
}

/// The statements of one store, with the table name and clock expression filled in.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) claim: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) force_release: String,
    pub(crate) verify: String,
    pub(crate) verify_locking: String,
    pub(crate) get: String,
    pub(crate) now: String,
    pub(crate) create: String,
}

impl Statements {
    pub(crate) fn new(dialect: Dialect, table: &str) -> Statements {
        let now = dialect.now_ms();
        let t = table;
        let s = match dialect {
            Dialect::Postgres | Dialect::Sqlite => Statements {
                claim: format!(
                    "INSERT INTO {t} AS l (name, holder, instance, term, expires_at_ms) \
                     VALUES ($1, $2, $3, 1, {now} + $4) \
                     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                     instance = excluded.instance, term = l.term + 1, \
                     expires_at_ms = excluded.expires_at_ms \
                     WHERE l.expires_at_ms <= {now} \
                     RETURNING term"
                ),
                renew: format!(
                    "UPDATE {t} SET expires_at_ms = {now} + $3 \
                     WHERE name = $1 AND holder = $2 AND expires_at_ms > {now} RETURNING term"
                ),
                release: format!(
                    "UPDATE {t} SET expires_at_ms = 0 \
                     WHERE name = $1 AND holder = $2 AND expires_at_ms > {now}"
                ),
                force_release: format!(
                    "UPDATE {t} SET expires_at_ms = 0 WHERE name = $1 AND expires_at_ms > {now}"
                ),
                verify: format!(
                    "SELECT term, expires_at_ms - {now} FROM {t} \
                     WHERE name = $1 AND holder = $2 AND expires_at_ms > {now}"
                ),
                verify_locking: format!(
                    "SELECT term FROM {t} \
                     WHERE name = $1 AND holder = $2 AND term = $3 AND expires_at_ms > {now}{}",
                    if dialect == Dialect::Postgres {
                        " FOR SHARE"
                    } else {
                        ""
                    }
                ),
                get: format!(
                    "SELECT instance, term, expires_at_ms - {now} FROM {t} WHERE name = $1"
                ),
                now: format!("SELECT {now}"),
                create: schema_sql(dialect, t),
            },
            // MySQL has no RETURNING on UPDATE: the term comes back through LAST_INSERT_ID(expr),
            // which the server reports in the OK packet of the same statement — 0 when the
            // expression was not evaluated (no row matched, or the lease was held). Affected-row
            // counts are not used: they depend on the client's found-rows flag.
            //
            // ON DUPLICATE KEY UPDATE assigns left to right, each assignment seeing the columns
            // already assigned: expires_at_ms is assigned last, so every condition tests the
            // original expiry. LAST_INSERT_ID(1) in VALUES is evaluated before the duplicate is
            // found; the update then calls LAST_INSERT_ID again (term + 1 when claimed, 0 when
            // held), and the last call is what the OK packet reports.
            Dialect::MySql => Statements {
                claim: format!(
                    "INSERT INTO {t} (name, holder, instance, term, expires_at_ms) \
                     VALUES (?, ?, ?, LAST_INSERT_ID(1), {now} + ?) \
                     ON DUPLICATE KEY UPDATE \
                     holder = IF(expires_at_ms <= {now}, ?, holder), \
                     instance = IF(expires_at_ms <= {now}, ?, instance), \
                     term = IF(expires_at_ms <= {now}, LAST_INSERT_ID(term + 1), term + LAST_INSERT_ID(0)), \
                     expires_at_ms = IF(expires_at_ms <= {now}, {now} + ?, expires_at_ms)"
                ),
                renew: format!(
                    "UPDATE {t} SET expires_at_ms = {now} + ?, term = LAST_INSERT_ID(term) \
                     WHERE name = ? AND holder = ? AND expires_at_ms > {now}"
                ),
                release: format!(
                    "UPDATE {t} SET expires_at_ms = 0, term = LAST_INSERT_ID(term) \
                     WHERE name = ? AND holder = ? AND expires_at_ms > {now}"
                ),
                force_release: format!(
                    "UPDATE {t} SET expires_at_ms = 0, term = LAST_INSERT_ID(term) \
                     WHERE name = ? AND expires_at_ms > {now}"
                ),
                verify: format!(
                    "SELECT term, expires_at_ms - {now} FROM {t} \
                     WHERE name = ? AND holder = ? AND expires_at_ms > {now}"
                ),
                verify_locking: format!(
                    "SELECT term FROM {t} \
                     WHERE name = ? AND holder = ? AND term = ? AND expires_at_ms > {now} \
                     LOCK IN SHARE MODE"
                ),
                // utf8mb4_bin columns come back flagged binary: ask for text.
                get: format!(
                    "SELECT CAST(instance AS CHAR CHARACTER SET utf8mb4), term, \
                     expires_at_ms - {now} FROM {t} WHERE name = ?"
                ),
                now: format!("SELECT {now}"),
                create: schema_sql(dialect, t),
            },
        };
        if dialect == Dialect::Sqlite {
            // SQLite numbers its parameters ?1, ?2…
            return s.map(|q| q.replace('$', "?"));
        }
        s
    }

    fn map(self, f: impl Fn(String) -> String) -> Statements {
        Statements {
            claim: f(self.claim),
            renew: f(self.renew),
            release: f(self.release),
            force_release: f(self.force_release),
            verify: f(self.verify),
            verify_locking: f(self.verify_locking),
            get: f(self.get),
            now: self.now,
            create: self.create,
        }
    }
}
