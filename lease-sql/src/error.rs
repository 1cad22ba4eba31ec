//! sqlx errors as lease errors.

use lease_core::layer::Operation;
use lease_core::{Error, ErrorKind};

/// A database error's code in one namespace per dialect: PostgreSQL's SQLSTATE, MySQL's error
/// number (its SQLSTATE is too coarse: a lock wait timeout is HY000), SQLite's primary result
/// code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code<'a> {
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Postgres(&'a str),
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    MySql(u16),
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    Sqlite(i64),
    Other,
}

pub(crate) fn code_of(d: &dyn sqlx::error::DatabaseError) -> Code<'_> {
    #[cfg(feature = "mysql")]
    if let Some(m) = d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return Code::MySql(m.number());
    }
    #[cfg(feature = "sqlite")]
    if let Some(s) = d.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
        let code = sqlx::error::DatabaseError::code(s)
            .and_then(|c| c.parse::<i64>().ok())
            .unwrap_or(0);
        return Code::Sqlite(code & 0xff);
    }
    #[cfg(feature = "postgres")]
    if let Some(p) = d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return Code::Postgres(p.code());
    }
    Code::Other
}

/// `true` when trying again may succeed: serialization failures, deadlocks, lock timeouts,
/// shutdowns, too many connections, a busy SQLite file.
fn is_temporary(code: Code<'_>) -> bool {
    match code {
        Code::Postgres(c) => matches!(
            c,
            "40001"
                | "40P01"
                | "55P03"
                | "57P01"
                | "57P02"
                | "57P03"
                | "53300"
                | "08000"
                | "08003"
                | "08006"
        ),
        Code::MySql(n) => matches!(n, 1205 | 1213 | 1040 | 2006 | 2013 | 1927 | 3572),
        Code::Sqlite(c) => matches!(c, 5 | 6),
        Code::Other => false,
    }
}

/// `true` for a deadlock: the statement was rolled back whole and may be retried at once.
pub(crate) fn is_deadlock(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => matches!(
            code_of(d.as_ref()),
            Code::MySql(1213) | Code::Postgres("40P01")
        ),
        _ => false,
    }
}

/// `true` when the statement gave up on a row lock another transaction holds: PostgreSQL's
/// `lock_not_available` (55P03, from `NOWAIT` or `lock_timeout`), MySQL/MariaDB's lock wait
/// timeout (1205) or `NOWAIT` failure (3572). The statement changed nothing.
pub(crate) fn is_lock_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => matches!(
            code_of(d.as_ref()),
            Code::Postgres("55P03") | Code::MySql(1205 | 3572)
        ),
        _ => false,
    }
}

/// `true` for a unique violation or "already exists" (of the relation, 42P07, or of its row
/// type, 42710) on `CREATE TABLE IF NOT EXISTS`, which PostgreSQL reports when two sessions
/// create the table at once.
pub(crate) fn is_create_race(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => matches!(
            code_of(d.as_ref()),
            Code::Postgres("23505") | Code::Postgres("42P07") | Code::Postgres("42710")
        ),
        _ => false,
    }
}

/// `true` when the error says the lease table does not exist.
pub(crate) fn is_missing_table(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            matches!(
                code_of(d.as_ref()),
                Code::Postgres("42P01") | Code::MySql(1146)
            ) || d.message().contains("no such table")
        }
        _ => false,
    }
}

/// What the store was doing when a sqlx error came.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Doing<'a> {
    /// A store operation (any [`Operation`]): the error's context says which (the operation's
    /// impl attaches it with [`Error::during`], with the name), so the message leaves it out.
    Op,
    /// Anything else (a start-up step, the verified transaction's begin): named in the message.
    Step(&'a str),
}

impl From<Operation> for Doing<'_> {
    fn from(_: Operation) -> Self {
        Doing::Op
    }
}

impl<'a> From<&'a str> for Doing<'a> {
    fn from(step: &'a str) -> Self {
        Doing::Step(step)
    }
}

impl Doing<'_> {
    /// `message`, after the step when this is one.
    fn say(self, message: &str) -> String {
        match self {
            Doing::Op => message.to_owned(),
            Doing::Step(step) => format!("{step}: {message}"),
        }
    }
}

/// Maps a sqlx error met while `doing` something against `server` (host:port/database or
/// file, never a password), attached as the error's server.
pub(crate) fn map(e: sqlx::Error, doing: Doing<'_>, server: &str) -> Error {
    classified(e, doing).at_server(server)
}

/// A sqlx error met by the application's own statement as a lease error, for business code
/// that mixes sqlx calls with lease calls under one error type: `doing` heads the message (say
/// what the statement was for), the sqlx error is its source, and the verdict
/// [`is_temporary`](Error::is_temporary) is the one the store judges its own statements by.
///
/// - The connection failed, timed out waiting for the pool, or the pool is closed:
///   `Unavailable`, temporary. (After a failed `COMMIT` the outcome is unknown: read before
///   retrying.)
/// - A bad URL or connect option: `Unavailable`, permanent.
/// - The database refused the statement: `Backend`, temporary for a serialization failure, a
///   deadlock, a lock timeout or `NOWAIT` failure, too many connections, a server shutting down
///   (PostgreSQL SQLSTATE `40001`, `40P01`, `55P03`, `53300`, `57P01`–`57P03`, `08000`, `08003`, `08006`; MySQL
///   1205, 1213, 1040, 1927, 2006, 2013, 3572; SQLite `BUSY`, `LOCKED`), permanent otherwise (a
///   constraint, a syntax error, a missing table).
/// - Anything else (a row that did not decode, no row where one was expected): `Backend`,
///   permanent.
///
/// Why a function here and not `impl From<sqlx::Error> for lease_core::Error`: Rust's orphan
/// rule allows that impl only in lease-core, which would then depend on sqlx (and, for the
/// other backends, on redis, mongodb and async-nats) and classify each driver's errors a second
/// time; the classification lives with the backend that already judges its own statements by
/// it. [`SqlResultExt::lease_err`] is the same as a method on a `Result`.
///
/// ```
/// let e = lease_sql::classify(sqlx::Error::PoolTimedOut, "insert the report");
/// assert_eq!(e.kind(), lease_core::ErrorKind::Unavailable);
/// assert!(e.is_temporary());
/// assert!(e.to_string().starts_with("insert the report: "));
/// ```
pub fn classify(err: sqlx::Error, doing: &str) -> Error {
    classified(err, Doing::Step(doing))
}

/// sqlx results as lease results: [`classify`] as a method.
///
/// ```
/// use lease_sql::SqlResultExt;
///
/// # async fn report(pool: &sqlx::SqlitePool) -> lease_core::Result<()> {
/// sqlx::query("INSERT INTO report (day) VALUES (1)")
///     .execute(pool)
///     .await
///     .lease_err("insert the report")?;
/// # Ok(()) }
/// ```
pub trait SqlResultExt<T> {
    /// The error, if any, as [`classify`] maps it; `doing` heads its message.
    fn lease_err(self, doing: &str) -> lease_core::Result<T>;
}

impl<T> SqlResultExt<T> for Result<T, sqlx::Error> {
    fn lease_err(self, doing: &str) -> lease_core::Result<T> {
        self.map_err(|e| classify(e, doing))
    }
}

/// [`map`] without a server.
fn classified(e: sqlx::Error, doing: Doing<'_>) -> Error {
    match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => Error::new(
            ErrorKind::Unavailable,
            doing.say("cannot reach the database"),
        )
        .with_source(e),
        sqlx::Error::Configuration(_) => Error::new(
            ErrorKind::Unavailable,
            doing.say("bad database configuration"),
        )
        .with_temporary(false)
        .with_source(e),
        sqlx::Error::Database(d) => {
            let temporary = is_temporary(code_of(d.as_ref()));
            Error::backend(doing.say("the statement failed"), e, temporary)
        }
        _ => Error::backend(doing.say("the statement failed"), e, false),
    }
}

/// A row the store cannot read (a negative term, a holder that is not hex…).
pub(crate) fn corrupt(what: &str, server: &str) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!("the lease table holds a corrupt row: {what}"),
    )
    .at_server(server)
}

/// The lease table (or SQLite's clock table) `table` does not exist and DDL is off: the message
/// carries `create`, the DDL that creates it.
pub(crate) fn missing_table(table: &str, create: &str, server: &str) -> Error {
    Error::schema(format!(
        "the lease table `{table}` does not exist and DDL is off; create it with:\n{create}"
    ))
    .at_server(server)
}

/// How often a statement is retried at once after it was picked as a deadlock victim (it was
/// rolled back whole, so retrying is safe).
pub(crate) const DEADLOCK_RETRIES: usize = 3;
