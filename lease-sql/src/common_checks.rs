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
