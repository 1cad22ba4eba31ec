//! A fence table on PostgreSQL, MySQL/MariaDB or SQLite, checked inside the application's own
//! sqlx transaction by one statement.
//!
//! The fence table holds one row per resource: `resource` (the name, compared byte for byte,
//! at most [`MAX_RESOURCE_BYTES`](crate::MAX_RESOURCE_BYTES) bytes) and `token` (the highest
//! token accepted). [`SqlFence::check`] runs one upsert in the caller's transaction that
//! inserts the resource's row or raises its token to the offered one, and answers the fence's
//! token after the statement — so it is the check and the raise at once, one round trip:
//!
//! | dialect | the statement |
//! |---|---|
//! | PostgreSQL | `INSERT … ON CONFLICT (resource) DO UPDATE SET token = GREATEST(f.token, EXCLUDED.token) RETURNING token` |
//! | MySQL / MariaDB | `INSERT … VALUES (?, LAST_INSERT_ID(?)) ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(GREATEST(token, VALUES(token)))`: the fence's token comes back in the OK packet, no second statement |
//! | SQLite | `INSERT … ON CONFLICT (resource) DO UPDATE SET token = max(token, excluded.token) RETURNING token` |
//!
//! An answer equal to the offered token means accepted (the same term writing again, or a
//! higher one that just raised the fence); a greater one means refused
//! ([`FenceError::Stale`]), and the statement changed nothing (the `GREATEST` keeps the row's
//! value).
//!
//! **Why it holds.** The statement locks the resource's row (a row lock on PostgreSQL and
//! InnoDB, the database's write lock on SQLite) until the transaction ends. So between the
//! check and the commit no other transaction can raise the fence, and a transaction that
//! raises it while this one is open waits for this one to end: every write committed under a
//! fence is ordered by token, and one whose token was lower than an accepted one is never
//! committed — provided the application commits only after the check answered `Ok`, in the
//! same transaction as its writes. A refused check returns the error; the transaction must then
//! be dropped or rolled back (`?` does: sqlx rolls a dropped transaction back), never
//! committed, or the business statements in it would commit without a fence.

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::future::Future;
use std::pin::Pin;

use lease_core::{Error, Result};
pub use lease_sql::Dialect;
use lease_sql::Token;
use sqlx::{Pool, Transaction};

use crate::error::{FenceError, Stale};

/// The fence table's default name.
pub const DEFAULT_TABLE: &str = "lease_fences";

/// The columns of a fence table.
const COLUMNS: [&str; 2] = ["resource", "token"];

/// A boxed `Send` future, as the dialects' statements return.
type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

mod sealed {
    use super::{BoxFuture, Dialect, Token};

    /// What the fence needs of a database: one impl per dialect (sealed: the trait is reachable
    /// only through [`FenceDb`](super::FenceDb)'s bound).
    #[allow(unreachable_pub)]
    pub trait Sealed: sqlx::Database {
        const DIALECT: Dialect;

        /// Runs the check-and-raise statement `sql` and answers the fence's token after it.
        fn raise<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c str,
            resource: &'c str,
            token: Token,
        ) -> BoxFuture<'c, Result<i64, sqlx::Error>>;

        /// Runs the read statement `sql`: the fence's token, if the resource has a row.
        fn read<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c str,
            resource: &'c str,
        ) -> BoxFuture<'c, Result<Option<i64>, sqlx::Error>>;

        /// The columns of the table `table` in `schema` (`None`: the current one); none when
        /// there is no such table.
        fn columns<'c>(
            conn: &'c mut Self::Connection,
            table: &'c str,
            schema: Option<&'c str>,
        ) -> BoxFuture<'c, Result<Vec<String>, sqlx::Error>>;

        /// Runs a statement that answers no rows (the DDL).
        fn execute<'c>(
            conn: &'c mut Self::Connection,
            sql: &'c str,
        ) -> BoxFuture<'c, Result<(), sqlx::Error>>;
    }
}

/// A database a fence table can live in: `sqlx::Postgres`, `sqlx::MySql` (MySQL and MariaDB)
/// or `sqlx::Sqlite`, each behind the crate feature of its name. Sealed: there is nothing to
/// implement.
pub trait FenceDb: sealed::Sealed {}

impl<DB: sealed::Sealed> FenceDb for DB {}

/// The statements of one dialect on one table.
#[derive(Debug, Clone)]
struct Statements {
    create: String,
    raise: String,
    read: String,
}

/// A fence table: the highest token each resource has accepted, checked and raised inside the
/// application's own transaction (see the [module docs](self) for the statement and why it
/// holds).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use lease_fence::sql::SqlFence;
///
/// // One connection: each connection to `sqlite::memory:` is a database of its own.
/// let pool = sqlx::sqlite::SqlitePoolOptions::new()
///     .max_connections(1)
///     .connect("sqlite::memory:")
///     .await?;
/// # sqlx::query("CREATE TABLE report (day INTEGER PRIMARY KEY, total INTEGER)").execute(&pool).await?;
/// let fence = SqlFence::new("lease_fences")?;
/// fence.ensure(&pool).await?; // creates the table, or checks the one there
///
/// // Under a term whose token is 8: check first, then write, then commit.
/// let mut tx = pool.begin().await?;
/// fence.check(&mut tx, "report/2026-12-07", 8).await?;
/// sqlx::query("INSERT INTO report (day, total) VALUES (20261207, 42)").execute(&mut *tx).await?;
/// tx.commit().await?;
///
/// // A zombie still under token 7 is refused, and its transaction is dropped unwritten.
/// let mut tx = pool.begin().await?;
/// let refused = fence.check(&mut tx, "report/2026-12-07", 7).await.unwrap_err();
/// assert_eq!(refused.stale().map(|s| s.fence()), Some(8));
/// drop(tx);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqlFence {
    table: String,
    /// Per dialect, by [`dialect_index`].
    statements: [Statements; 3],
}

fn dialect_index(dialect: Dialect) -> usize {
    match dialect {
        Dialect::Postgres => 0,
        Dialect::MySql => 1,
        _ => 2,
    }
}

impl SqlFence {
    /// A fence on the table `table`: an identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 63
    /// bytes), optionally qualified by a schema (`schema.table`). It is interpolated into the
    /// statements, so nothing else is accepted: `InvalidName` otherwise, saying what to use. No
    /// I/O: [`ensure`](SqlFence::ensure) creates or checks the table.
    pub fn new(table: &str) -> Result<SqlFence> {
        let parts: Vec<&str> = table.split('.').collect();
        let ident_ok = |p: &str| {
            !p.is_empty()
                && p.len() <= 63
                && p.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if parts.len() > 2 || !parts.iter().all(|p| ident_ok(p)) {
            return Err(Error::invalid_name(format!(
                "fence table name {table:?} is not a plain SQL identifier of at most 63 bytes; \
                 use letters, digits and underscores, not starting with a digit (optionally \
                 schema.table), such as {DEFAULT_TABLE:?}"
            )));
        }
        Ok(SqlFence {
            table: table.to_owned(),
            statements: Self::statements(table, false),
        })
    }

    /// The statements of the three dialects on `table`; `broken`: the check left out.
    fn statements(table: &str, broken: bool) -> [Statements; 3] {
        [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite].map(|d| Statements {
            create: schema_sql(d, table),
            raise: raise_sql(d, table, broken),
            read: match d {
                Dialect::Postgres => format!("SELECT token FROM {table} WHERE resource = $1"),
                _ => format!("SELECT token FROM {table} WHERE resource = ?"),
            },
        })
    }

    /// Test support: the same fence with its check left out — the statement sets the offered
    /// token whatever the fence holds, as a resource that does not compare tokens would. Tests
    /// use it to show that their zombie's write gets through without the check (so the test
    /// can fail). Never use it for data.
    #[doc(hidden)]
    pub fn break_check_for_tests(mut self) -> SqlFence {
        self.statements = Self::statements(&self.table, true);
        self
    }

    /// The table's name, as given.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The `CREATE TABLE IF NOT EXISTS` statement of this fence's table in `dialect` (see
    /// [`schema_sql`]), for those who manage their own schema.
    pub fn schema_sql(&self, dialect: Dialect) -> &str {
        &self.statements[dialect_index(dialect)].create
    }

    fn stmts<DB: FenceDb>(&self) -> &Statements {
        &self.statements[dialect_index(DB::DIALECT)]
    }

    /// Creates the fence table when it is missing, or checks the one there: one that lacks the
    /// `resource` or `token` column (another application's table of that name) is refused
    /// with `Schema`, naming its columns and what to change. Call it once at start-up, like a
    /// migration; [`check`](SqlFence::check) never runs DDL. Two processes creating the table
    /// at once both succeed.
    pub async fn ensure<DB: FenceDb>(&self, pool: &Pool<DB>) -> Result<()> {
        let mut conn = pool
            .acquire()
            .await
            .map_err(|e| self.err::<DB>(e, "connect to create the fence table"))?;
        let (schema, bare) = match self.table.split_once('.') {
            Some((schema, bare)) => (Some(schema), bare),
            None => (None, self.table.as_str()),
        };
        let have = DB::columns(&mut *conn, bare, schema)
            .await
            .map_err(|e| self.err::<DB>(e, "read the fence table's columns"))?;
        if !have.is_empty() {
            return self.shape::<DB>(&have);
        }
        let created = DB::execute(&mut *conn, &self.stmts::<DB>().create).await;
        // Created here or, when the DDL failed, perhaps by another process at the same time:
        // the catalog decides.
        let have = DB::columns(&mut *conn, bare, schema)
            .await
            .map_err(|e| self.err::<DB>(e, "read the fence table's columns"))?;
        match created {
            Err(e) if have.is_empty() => Err(self.err::<DB>(e, "create the fence table")),
            _ => self.shape::<DB>(&have),
        }
    }

    /// The table exists with the columns `have`: `Schema` unless it has both of a fence's.
    fn shape<DB: FenceDb>(&self, have: &[String]) -> Result<()> {
        let missing: Vec<String> = COLUMNS
            .iter()
            .filter(|w| !have.iter().any(|h| h.eq_ignore_ascii_case(w)))
            .map(|w| format!("`{w}`"))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let have: Vec<String> = have.iter().map(|h| format!("`{h}`")).collect();
        Err(Error::schema(format!(
            "a table `{}` exists but is not a fence table: it has the columns {}, and lacks {}. \
             If it belongs to something else, give the fence a table of its own \
             (`SqlFence::new(\"{DEFAULT_TABLE}\")` or another free name); if it is meant to be \
             a fence table, make it as in:\n{}",
            self.table,
            have.join(", "),
            missing.join(", "),
            self.stmts::<DB>().create
        )))
    }

    /// Opens a transaction on `pool` whose first statement is [`check`](SqlFence::check) of
    /// `token` on `resource`: the transaction to run the business statements in, then commit.
    /// A refusal rolls it back and returns [`FenceError::Stale`], so no business statement
    /// ever runs under a stale token. The fence's row stays locked until the transaction ends:
    /// keep it short (a successor's write to the same resource waits for it).
    pub async fn begin<DB: FenceDb>(
        &self,
        pool: &Pool<DB>,
        resource: &str,
        token: u64,
    ) -> Result<Transaction<'static, DB>, FenceError> {
        check_args(resource, token)?;
        let mut tx = pool
            .begin()
            .await
            .map_err(|e| self.err::<DB>(e, "begin a fenced transaction"))?;
        match self.check(&mut tx, resource, token).await {
            Ok(()) => Ok(tx),
            Err(e) => {
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }

    /// Checks `token` against the fence of `resource` and raises the fence to it, in `tx`, in
    /// one statement (one round trip): `Ok` when `token` is at least the fence's (equal: the
    /// same term writes again; higher: the fence now holds `token`), [`FenceError::Stale`] when
    /// a higher token has been accepted — then the statement changed nothing, and `tx` must be
    /// dropped or rolled back, never committed.
    ///
    /// Run it before the business statements it guards (a refusal then wastes none of them),
    /// or anywhere before the commit: what matters is that the commit comes after an `Ok`, in
    /// the same transaction. The fence's row stays locked until `tx` ends.
    ///
    /// `token` is the term's [`token`](lease_core::Term::token); `InvalidArgument` for 0 or a
    /// token above `i64::MAX` (which no SQL integer column holds), `InvalidName` for an empty,
    /// oversized or control-character resource name — both before any I/O. A missing table is
    /// `Schema`, with the DDL to create it.
    pub async fn check<DB: FenceDb>(
        &self,
        tx: &mut Transaction<'_, DB>,
        resource: &str,
        token: u64,
    ) -> Result<(), FenceError> {
        check_args(resource, token)?;
        let bound = Token::new(token)?;
        let fence = DB::raise(&mut **tx, &self.stmts::<DB>().raise, resource, bound)
            .await
            .map_err(|e| self.err::<DB>(e, &format!("check the fence of '{resource}'")))?;
        judge(resource, token, fence)
    }

    /// The fence's token for `resource`: the highest token it has accepted, `None` before
    /// the first fenced write. A read on `conn` (a pooled connection, or `&mut *tx` inside a
    /// transaction); for monitoring and tests — a write never needs it, the check is the
    /// statement itself.
    pub async fn token<DB: FenceDb>(
        &self,
        conn: &mut DB::Connection,
        resource: &str,
    ) -> Result<Option<u64>> {
        crate::check::resource(resource, crate::MAX_RESOURCE_BYTES)?;
        let value = DB::read(conn, &self.stmts::<DB>().read, resource)
            .await
            .map_err(|e| self.err::<DB>(e, &format!("read the fence of '{resource}'")))?;
        value.map(|v| stored(resource, v)).transpose()
    }

    /// A sqlx error met while `doing` something, as a lease error: a missing fence table is
    /// `Schema` with its DDL; anything else as lease-sql classifies its own statements.
    fn err<DB: FenceDb>(&self, e: sqlx::Error, doing: &str) -> Error {
        let missing = match &e {
            sqlx::Error::Database(d) => {
                matches!(d.code().as_deref(), Some("42P01" | "42S02"))
                    || d.message().contains("no such table")
            }
            _ => false,
        };
        if missing {
            return Error::schema(format!(
                "{doing}: the fence table `{}` does not exist; create it once with \
                 `SqlFence::ensure`, or with:\n{}",
                self.table,
                self.stmts::<DB>().create
            ))
            .with_source(e);
        }
        lease_sql::classify(e, doing)
    }
}

/// The argument checks of a fenced write, before any I/O.
fn check_args(resource: &str, token: u64) -> Result<()> {
    crate::check::token(token)?;
    crate::check::resource(resource, crate::MAX_RESOURCE_BYTES)
}

/// A token read from the fence table: `Backend` when it is not a token (0 or negative: not
/// written by a fence).
fn stored(resource: &str, v: i64) -> Result<u64> {
    u64::try_from(v).ok().filter(|t| *t > 0).ok_or_else(|| {
        Error::new(
            lease_core::ErrorKind::Backend,
            format!(
                "the fence table holds token {v} for '{resource}', which no fence writes; \
                 something else wrote that row"
            ),
        )
    })
}

/// The verdict on `offered` given the fence's token after the statement: accepted when equal,
/// refused when greater. (A broken fence's statement answers the offered token whatever the
/// fence held: the comparison it leaves out is the statement's.)
fn judge(resource: &str, offered: u64, fence: i64) -> Result<(), FenceError> {
    let fence = stored(resource, fence)?;
    if fence == offered {
        Ok(())
    } else if fence > offered {
        Err(FenceError::Stale(Stale::new(resource, offered, fence)))
    } else {
        Err(Error::new(
            lease_core::ErrorKind::Backend,
            format!(
                "the fence of '{resource}' answered token {fence} after accepting {offered}; \
                 the fence table does not behave as one (a trigger, or another table of that \
                 name?)"
            ),
        )
        .into())
    }
}

/// The check-and-raise statement on `table` in `dialect` (the table in the module docs);
/// `broken`: the comparison left out, the offered token set whatever the fence held.
fn raise_sql(dialect: Dialect, table: &str, broken: bool) -> String {
    match dialect {
        Dialect::Postgres => {
            let new = if broken {
                "EXCLUDED.token"
            } else {
                "GREATEST(f.token, EXCLUDED.token)"
            };
            format!(
                "INSERT INTO {table} AS f (resource, token) VALUES ($1, $2) \
                 ON CONFLICT (resource) DO UPDATE SET token = {new} RETURNING token"
            )
        }
        // LAST_INSERT_ID(expr) on both paths, so the OK packet carries the fence's token
        // whether the row was inserted or updated (affected-row counts depend on the client's
        // found-rows flag; this does not). VALUES(token) is the inserted expression's value,
        // the offered token.
        Dialect::MySql => {
            let new = if broken {
                "VALUES(token)"
            } else {
                "GREATEST(token, VALUES(token))"
            };
            format!(
                "INSERT INTO {table} (resource, token) VALUES (?, LAST_INSERT_ID(?)) \
                 ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID({new})"
            )
        }
        _ => {
            let new = if broken {
                "excluded.token"
            } else {
                "max(token, excluded.token)"
            };
            format!(
                "INSERT INTO {table} (resource, token) VALUES (?1, ?2) \
                 ON CONFLICT (resource) DO UPDATE SET token = {new} RETURNING token"
            )
        }
    }
}

/// The `CREATE TABLE IF NOT EXISTS` statement for the fence table `table` in `dialect`.
///
/// Columns: `resource` (the resource's name, at most 255 bytes, compared byte for byte: `COLLATE
/// "C"` on PostgreSQL, `VARBINARY` on MySQL/MariaDB, SQLite's default `BINARY`) as the primary
/// key, and `token` (`BIGINT`: the highest token accepted).
///
/// ```
/// use lease_fence::sql::{Dialect, schema_sql};
/// let sql = schema_sql(Dialect::MySql, "lease_fences");
/// assert!(sql.contains("resource VARBINARY(255) NOT NULL PRIMARY KEY"));
/// ```
pub fn schema_sql(dialect: Dialect, table: &str) -> String {
    let (resource, token, tail) = match dialect {
        Dialect::Postgres => ("VARCHAR(255) COLLATE \"C\"", "BIGINT", ""),
        Dialect::MySql => ("VARBINARY(255)", "BIGINT", " ENGINE=InnoDB"),
        _ => ("TEXT", "INTEGER", ""),
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\n    \
         resource {resource} NOT NULL PRIMARY KEY,\n    \
         token    {token} NOT NULL\n)\
         {tail}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_identifiers() {
        assert!(SqlFence::new("lease_fences").is_ok());
        assert!(SqlFence::new("app.fences_2").is_ok());
        for bad in [
            "",
            "1x",
            "a;drop table x",
            "a.b.c",
            "a-b",
            "\"x\"",
            "a b",
            "x.",
        ] {
            let e = SqlFence::new(bad).unwrap_err();
            assert_eq!(e.kind(), lease_core::ErrorKind::InvalidName, "{bad}");
            assert!(e.to_string().contains("letters, digits"), "{e}");
        }
        assert!(SqlFence::new(&"t".repeat(63)).is_ok());
        assert!(SqlFence::new(&"t".repeat(64)).is_err());
    }

    #[test]
    fn the_verdict_follows_the_fence() {
        assert!(judge("r", 5, 5).is_ok());
        let e = judge("r", 5, 9).unwrap_err();
        assert_eq!(e.stale().map(|s| (s.offered(), s.fence())), Some((5, 9)));
        assert!(!judge("r", 5, 4).unwrap_err().is_stale());
        assert!(!judge("r", 5, 0).unwrap_err().is_stale());
    }
}
