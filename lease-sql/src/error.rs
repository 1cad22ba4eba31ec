//! sqlx errors as lease errors.

use lease_core::{Error, ErrorKind};

/// Database error codes after which trying again may succeed: serialization failures,
/// deadlocks, lock timeouts, shutdowns, too many connections, a busy SQLite file.
const TEMPORARY_CODES: &[&str] = &[
    // PostgreSQL
    "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300", "08000", "08003", "08006",
    // MySQL / MariaDB
    "1205", "1213", "1040", "2006", "2013", // SQLite (primary result codes)
    "5", "6",
];

/// `true` for a deadlock: the statement was rolled back whole and may be retried at once.
pub(crate) fn is_deadlock(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if matches!(d.code().as_deref(), Some("1213") | Some("40P01")))
}

/// `true` when the error says the lease table does not exist.
pub(crate) fn is_missing_table(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            matches!(d.code().as_deref(), Some("42P01") | Some("1146"))
                || d.message().contains("no such table")
        }
        _ => false,
    }
}

/// Maps a sqlx error from `op` against `server` (host:port or file, never a password).
pub(crate) fn map(e: sqlx::Error, op: &str, server: &str) -> Error {
    match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => Error::new(
            ErrorKind::Unavailable,
            format!("{op}: cannot reach the database at {server}"),
        )
        .with_source(e),
        sqlx::Error::Configuration(_) => Error::new(
            ErrorKind::Unavailable,
            format!("{op}: bad database configuration for {server}"),
        )
        .with_temporary(false)
        .with_source(e),
        sqlx::Error::Database(d) => {
            let temporary = d
                .code()
                .is_some_and(|c| TEMPORARY_CODES.contains(&c.as_ref()));
            Error::backend(format!("{op} failed on {server}"), e, temporary)
        }
        _ => Error::backend(format!("{op} failed on {server}"), e, false),
    }
}

/// A row the store cannot read (a negative term, a holder that is not hex…).
pub(crate) fn corrupt(what: &str, server: &str) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!("the lease table on {server} holds a corrupt row: {what}"),
    )
}
