//! SQL by hand on one plain sqlx connection: lease-sql's own claim and release statements (the
//! raw lease-row protocol), and the servers' plain locks (the floor).
//!
//! The statements are lease-sql's, character for character (its `Statements` are private, so
//! they are rebuilt here from the public clock expression [`Dialect::now_ms`] and table DDL
//! [`schema_sql`]); the binds are the same values of the same types. The only difference to the
//! library is what runs around them: the library's connection slots, name and TTL checks and
//! error mapping. On SQLite that includes the write transaction lease-sql puts every write in
//! (`BEGIN IMMEDIATE`, the clock, the statement, `COMMIT`): it is part of the protocol, which
//! reads the clock only once it holds the file's write lock.

use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use futures::future::BoxFuture;
use lease::backend::HolderToken;
use lease::sql::{Dialect, schema_sql};
use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode};
use sqlx::{ConnectOptions, Connection};

use super::{INSTANCE, Subject};
use crate::backends::{SQL_TABLE, TTL};
use crate::cli::Backend;

/// The claim and release statements lease-sql sends for `dialect` on `table`.
pub(crate) fn lease_statements(dialect: Dialect, table: &str) -> (String, String) {
    // SQLite's expiries are on the host's boot clock, which lease-sql hands each operation in
    // a one-row temporary table of its connection (set right before the statement, as
    // `SqliteRow::cycle` does); the servers read their own clock.
    let now = match dialect {
        Dialect::Sqlite => SQLITE_NOW,
        _ => dialect.now_ms(),
    };
    let t = table;
    match dialect {
        Dialect::Postgres | Dialect::Sqlite => {
            // PostgreSQL's claim takes the row lock first, without waiting (a verified
            // transaction of the holder's answers Held at once instead of queueing the claim);
            // SQLite has no row locks.
            let claim = if dialect == Dialect::Postgres {
                format!(
                    "WITH busy AS (SELECT 1 FROM {t} WHERE name = $1 FOR UPDATE NOWAIT) \
                     INSERT INTO {t} AS l (name, holder, instance, term, expires_at_ms) \
                     SELECT $1, $2, $3, 1, {now} + $4 FROM (SELECT count(*) FROM busy) AS b \
                     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                     instance = excluded.instance, term = l.term + 1, \
                     expires_at_ms = excluded.expires_at_ms \
                     WHERE l.expires_at_ms <= {now} \
                     RETURNING term"
                )
            } else {
                format!(
                    "INSERT INTO {t} AS l (name, holder, instance, term, expires_at_ms) \
                     VALUES ($1, $2, $3, 1, {now} + $4) \
                     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                     instance = excluded.instance, term = l.term + 1, \
                     expires_at_ms = excluded.expires_at_ms \
                     WHERE l.expires_at_ms <= {now} \
                     RETURNING term"
                )
            };
            let release = format!(
                "UPDATE {t} SET expires_at_ms = 0 \
                 WHERE name = $1 AND holder = $2 AND expires_at_ms > {now}"
            );
            if dialect == Dialect::Sqlite {
                (claim.replace('$', "?"), release.replace('$', "?"))
            } else {
                (claim, release)
            }
        }
        Dialect::MySql => (
            format!(
                "INSERT INTO {t} (name, holder, instance, term, expires_at_ms) \
                 VALUES (?, ?, ?, LAST_INSERT_ID(1), {now} + ?) \
                 ON DUPLICATE KEY UPDATE \
                 holder = IF(expires_at_ms <= {now}, ?, holder), \
                 instance = IF(expires_at_ms <= {now}, ?, instance), \
                 term = IF(expires_at_ms <= {now}, LAST_INSERT_ID(term + 1), term + LAST_INSERT_ID(0)), \
                 expires_at_ms = IF(expires_at_ms <= {now}, {now} + ?, expires_at_ms)"
            ),
            format!(
                "UPDATE {t} SET expires_at_ms = 0, term = LAST_INSERT_ID(term) \
                 WHERE name = ? AND holder = ? AND expires_at_ms > {now}"
            ),
        ),
    }
}

fn ttl_ms() -> i64 {
    i64::try_from(TTL.as_millis()).unwrap_or(i64::MAX)
}

/// What lease-sql's SQLite statements read as "now": the boot clock its connection was told.
const SQLITE_NOW: &str = "(SELECT boot_ms FROM temp.lease_sql_clock)";

/// lease-sql's statements that tell a SQLite lease connection the boot clock: created once per
/// connection, set before every operation.
const SQLITE_CLOCK_TABLE: [&str; 2] = [
    "CREATE TEMP TABLE IF NOT EXISTS lease_sql_clock \
     (id INTEGER PRIMARY KEY CHECK (id = 1), boot_ms INTEGER NOT NULL)",
    "INSERT OR REPLACE INTO temp.lease_sql_clock (id, boot_ms) VALUES (1, 0)",
];
const SQLITE_SET_CLOCK: &str = "UPDATE temp.lease_sql_clock SET boot_ms = ?1";

/// What lease-sql's SQLite store sends before every write (`LeaseDb::begin_write`): `BEGIN
/// IMMEDIATE`, which waits for the file's write lock, then the clock, read once the lock is
/// held (a clock read before the wait would be old by the time the write lands). The write's
/// statement follows, then `COMMIT`.
async fn begin_write(conn: &mut SqliteConnection) -> Result<()> {
    sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
    sqlx::query(SQLITE_SET_CLOCK)
        .bind(boot_ms())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The host's boot clock in milliseconds, as lease-sql reads it for SQLite.
fn boot_ms() -> i64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    ts.tv_sec
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec / 1_000_000)
}

/// The raw lease-row subject of a SQL backend.
pub(crate) async fn raw_row(backend: Backend, url: &str, name: String) -> Result<Box<dyn Subject>> {
    let (claim, release) = match backend {
        Backend::Postgres => lease_statements(Dialect::Postgres, SQL_TABLE),
        Backend::Mysql => lease_statements(Dialect::MySql, SQL_TABLE),
        Backend::Sqlite => lease_statements(Dialect::Sqlite, SQL_TABLE),
        other => anyhow::bail!("{} has no lease-row protocol", other.label()),
    };
    Ok(match backend {
        Backend::Postgres => {
            let mut conn = PgConnection::connect(url)
                .await
                .context("connecting to PostgreSQL")?;
            sqlx::query(&schema_sql(Dialect::Postgres, SQL_TABLE))
                .execute(&mut conn)
                .await
                .context("creating the lease table")?;
            Box::new(PgRow {
                conn,
                claim,
                release,
                name,
            })
        }
        Backend::Mysql => {
            let mut conn = MySqlConnection::connect(url)
                .await
                .context("connecting to MariaDB")?;
            sqlx::query(&schema_sql(Dialect::MySql, SQL_TABLE))
                .execute(&mut conn)
                .await
                .context("creating the lease table")?;
            // lease-sql sends its MariaDB claims (10.3 and later) under a zero lock wait, so a
            // verified transaction of the holder's answers Held at once: the same here.
            let (version,): (String,) = sqlx::query_as("SELECT VERSION()")
                .fetch_one(&mut conn)
                .await
                .context("reading the server's version")?;
            let claim = if version.to_ascii_lowercase().contains("mariadb") {
                format!("SET STATEMENT innodb_lock_wait_timeout = 0 FOR {claim}")
            } else {
                claim
            };
            Box::new(MySqlRow {
                conn,
                claim,
                release,
                name,
            })
        }
        _ => {
            // The options lease-sql's SqliteStore::connect uses.
            let mut conn = SqliteConnectOptions::from_str(url)
                .context("parsing the SQLite URL")?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(5))
                .connect()
                .await
                .context("opening the SQLite file")?;
            sqlx::query(&schema_sql(Dialect::Sqlite, SQL_TABLE))
                .execute(&mut conn)
                .await
                .context("creating the lease table")?;
            for stmt in SQLITE_CLOCK_TABLE {
                sqlx::query(stmt)
                    .execute(&mut conn)
                    .await
                    .context("creating the clock table")?;
            }
            Box::new(SqliteRow {
                conn,
                claim,
                release,
                name,
            })
        }
    })
}

struct PgRow {
    conn: PgConnection,
    claim: String,
    release: String,
    name: String,
}

impl Subject for PgRow {
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let holder = HolderToken::mint().to_hex();
            let row: Option<(i64,)> = sqlx::query_as(&self.claim)
                .bind(&self.name)
                .bind(&holder)
                .bind(INSTANCE)
                .bind(ttl_ms())
                .fetch_optional(&mut self.conn)
                .await?;
            ensure!(row.is_some(), "the claim of a free name was refused");
            let done = sqlx::query(&self.release)
                .bind(&self.name)
                .bind(&holder)
                .execute(&mut self.conn)
                .await?;
            ensure!(
                done.rows_affected() == 1,
                "the release did not end the lease"
            );
            Ok(())
        })
    }
}

struct SqliteRow {
    conn: SqliteConnection,
    claim: String,
    release: String,
    name: String,
}

impl Subject for SqliteRow {
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let holder = HolderToken::mint().to_hex();
            begin_write(&mut self.conn).await?;
            let row: Option<(i64,)> = sqlx::query_as(&self.claim)
                .bind(&self.name)
                .bind(&holder)
                .bind(INSTANCE)
                .bind(ttl_ms())
                .fetch_optional(&mut self.conn)
                .await?;
            sqlx::query("COMMIT").execute(&mut self.conn).await?;
            ensure!(row.is_some(), "the claim of a free name was refused");
            begin_write(&mut self.conn).await?;
            let done = sqlx::query(&self.release)
                .bind(&self.name)
                .bind(&holder)
                .execute(&mut self.conn)
                .await?;
            sqlx::query("COMMIT").execute(&mut self.conn).await?;
            ensure!(
                done.rows_affected() == 1,
                "the release did not end the lease"
            );
            Ok(())
        })
    }
}

struct MySqlRow {
    conn: MySqlConnection,
    claim: String,
    release: String,
    name: String,
}

impl Subject for MySqlRow {
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let holder = HolderToken::mint().to_hex();
            let ms = ttl_ms();
            let done = sqlx::query(&self.claim)
                .bind(&self.name)
                .bind(&holder)
                .bind(INSTANCE)
                .bind(ms)
                .bind(&holder)
                .bind(INSTANCE)
                .bind(ms)
                .execute(&mut self.conn)
                .await?;
            ensure!(
                done.last_insert_id() > 0,
                "the claim of a free name was refused"
            );
            let done = sqlx::query(&self.release)
                .bind(&self.name)
                .bind(&holder)
                .execute(&mut self.conn)
                .await?;
            ensure!(
                done.last_insert_id() > 0,
                "the release did not end the lease"
            );
            Ok(())
        })
    }
}

/// `pg_try_advisory_lock($1)` + `pg_advisory_unlock($1)` on one connection.
pub(crate) struct Advisory {
    conn: PgConnection,
    key: i64,
}

impl Advisory {
    /// Connects; the lock key is derived from `name`.
    pub(crate) async fn open(url: &str, name: &str) -> Result<Advisory> {
        let conn = PgConnection::connect(url)
            .await
            .context("connecting to PostgreSQL")?;
        let key = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Ok(Advisory {
            conn,
            key: i64::from_ne_bytes(key.to_ne_bytes()),
        })
    }
}

impl Subject for Advisory {
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let (got,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
                .bind(self.key)
                .fetch_one(&mut self.conn)
                .await?;
            ensure!(got, "pg_try_advisory_lock refused a free key");
            let (freed,): (bool,) = sqlx::query_as("SELECT pg_advisory_unlock($1)")
                .bind(self.key)
                .fetch_one(&mut self.conn)
                .await?;
            ensure!(freed, "pg_advisory_unlock did not hold the key");
            Ok(())
        })
    }
}

/// `GET_LOCK(name, 0)` + `RELEASE_LOCK(name)` on one connection.
pub(crate) struct GetLock {
    conn: MySqlConnection,
    name: String,
}

impl GetLock {
    /// Connects.
    pub(crate) async fn open(url: &str, name: String) -> Result<GetLock> {
        let conn = MySqlConnection::connect(url)
            .await
            .context("connecting to MariaDB")?;
        Ok(GetLock { conn, name })
    }
}

impl Subject for GetLock {
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let (got,): (Option<i64>,) = sqlx::query_as("SELECT GET_LOCK(?, 0)")
                .bind(&self.name)
                .fetch_one(&mut self.conn)
                .await?;
            ensure!(got == Some(1), "GET_LOCK refused a free name");
            let (freed,): (Option<i64>,) = sqlx::query_as("SELECT RELEASE_LOCK(?)")
                .bind(&self.name)
                .fetch_one(&mut self.conn)
                .await?;
            ensure!(freed == Some(1), "RELEASE_LOCK did not hold the name");
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// lease-sql's statement templates, as its source writes them (the statements PostgreSQL
    /// and SQLite share, and each dialect's own).
    const STATEMENT_SRC: [&str; 4] = [
        include_str!("../../../lease-sql/src/wire/returning.rs"),
        include_str!("../../../lease-sql/src/postgres/statements.rs"),
        include_str!("../../../lease-sql/src/mysql/statements.rs"),
        include_str!("../../../lease-sql/src/sqlite/statements.rs"),
    ];

    /// The boot-clock statements copied above are lease-sql's, character for character.
    #[test]
    fn sqlite_clock_statements_match_lease_sql() {
        let clock = include_str!("../../../lease-sql/src/sqlite/clock.rs");
        let schema = include_str!("../../../lease-sql/src/wire/schema.rs");
        // The source as the compiler reads it: a `\` at a line's end joins the next line,
        // without its indentation.
        let mut joined = String::new();
        let mut lines = clock.lines().peekable();
        while let Some(line) = lines.next() {
            match line.strip_suffix('\\') {
                Some(head) => {
                    joined.push_str(head);
                    if let Some(next) = lines.peek_mut() {
                        *next = next.trim_start();
                    }
                }
                None => {
                    joined.push_str(line);
                    joined.push('\n');
                }
            }
        }
        for stmt in SQLITE_CLOCK_TABLE.iter().chain([&SQLITE_SET_CLOCK]) {
            assert!(joined.contains(stmt), "lease-sql no longer sends: {stmt}");
        }
        assert!(
            schema.contains(SQLITE_NOW),
            "lease-sql's SQLite clock moved"
        );
    }

    /// Every line of the templates copied above must still be in lease-sql's source, so the raw
    /// protocol cannot drift away from what the library sends.
    #[test]
    fn statements_match_lease_sql() {
        let me = include_str!("sql_raw.rs");
        let start = me.find("pub(crate) fn lease_statements").unwrap();
        let end = me.find("fn ttl_ms()").unwrap();
        let mut checked = 0;
        const SQL: [&str; 8] = [
            "{t}",
            "{now}",
            "INSERT",
            "UPDATE",
            "VALUES",
            "WHERE",
            "RETURNING",
            "expires_at_ms",
        ];
        for line in me[start..end].lines().map(str::trim) {
            if !SQL.iter().any(|k| line.contains(k)) || line.starts_with("//") {
                continue;
            }
            let sql = line
                .trim_start_matches('"')
                .trim_end_matches(',')
                .trim_end_matches(')')
                .trim_end_matches('"')
                .trim_end_matches('\\')
                .trim();
            assert!(
                STATEMENT_SRC.iter().any(|src| src.contains(sql)),
                "lease-sql no longer sends: {sql}"
            );
            checked += 1;
        }
        assert!(checked >= 15, "only {checked} template lines found");
        let (claim, release) = lease_statements(Dialect::Sqlite, "t");
        assert!(claim.contains("?4") && release.contains("?2") && !claim.contains('$'));
    }
}
