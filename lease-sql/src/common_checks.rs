//! Start-up checks shared by the dialects.

use lease_core::{Error, ErrorKind, Result};
use sqlx::Database;

use crate::store::SqlStore;

/// Checks the `name` column: it must exist and hold `max_name_bytes`. `column` is its type and
/// width in characters or bytes (whichever the type limits; `None` = unlimited).
pub(crate) fn name_width<DB: Database>(
    store: &SqlStore<DB>,
    column: Option<(String, Option<i64>)>,
) -> Result<()> {
    let inner = &store.inner;
    let Some((data_type, width)) = column else {
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "the lease table `{}` on {} has no `name` column; create it with:\n{}",
                inner.config.table, inner.server, inner.stmts.create
            ),
        )
        .with_temporary(false));
    };
    let wanted = i64::try_from(inner.config.max_name_bytes).unwrap_or(i64::MAX);
    match width {
        Some(w) if w < wanted => Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "the `name` column of `{}` on {} is {data_type}({w}), narrower than the {wanted} \
                 bytes this store accepts; widen the column or lower max_name_bytes to {w}",
                inner.config.table, inner.server
            ),
        )
        .with_temporary(false)),
        _ => Ok(()),
    }
}

/// A column of the partition or member table, as the catalog describes it.
#[derive(Debug, Clone)]
pub(crate) struct ColumnInfo {
    pub(crate) name: String,
    /// Its type, for messages.
    pub(crate) data_type: String,
    /// How many bytes it surely holds (`None`: unlimited, or a type without a width).
    pub(crate) width: Option<i64>,
    /// `None` when it compares byte for byte; otherwise its collation, for the message.
    pub(crate) inexact: Option<String>,
}

/// What the store needs of one column.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wanted {
    pub(crate) column: &'static str,
    /// The longest value the store writes, in bytes (0: not a string).
    pub(crate) bytes: usize,
    /// The store compares (or sorts) it: it must compare byte for byte.
    pub(crate) exact: bool,
    /// Appended to the "too narrow" message, after "widen the column".
    pub(crate) hint: &'static str,
}

/// Checks the columns of the partition or member table (`what` names it in messages): every
/// wanted column exists, holds the longest value the store writes, and, where the store
/// compares it, compares byte for byte.
pub(crate) fn table_columns(
    server: &str,
    what: &str,
    table: &str,
    create: &str,
    have: &[ColumnInfo],
    wanted: &[Wanted],
) -> Result<()> {
    let unavailable = |msg: String| Error::new(ErrorKind::Unavailable, msg).with_temporary(false);
    for w in wanted {
        let Some(c) = have.iter().find(|c| c.name.eq_ignore_ascii_case(w.column)) else {
            return Err(unavailable(format!(
                "the {what} `{table}` on {server} has no `{}` column; create it with:\n{create}",
                w.column
            )));
        };
        let bytes = i64::try_from(w.bytes).unwrap_or(i64::MAX);
        if let Some(width) = c.width.filter(|width| *width < bytes) {
            return Err(unavailable(format!(
                "the `{}` column of `{table}` on {server} is {}({width}), narrower than the \
                 {bytes} bytes this store writes; widen the column{}",
                w.column, c.data_type, w.hint
            )));
        }
        if let (true, Some(collation)) = (w.exact, &c.inexact) {
            return Err(unavailable(format!(
                "the `{}` column of `{table}` on {server} is {} with collation {collation}, \
                 under which \"Job\", \"job\" and \"job \" could compare equal; make it as in:\n\
                 {create}",
                w.column, c.data_type
            )));
        }
    }
    Ok(())
}
