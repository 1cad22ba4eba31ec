//! MySQL's permit renewal and release: no `RETURNING` on `UPDATE`, so the term comes back
//! through `LAST_INSERT_ID(term)`, 0 when no row matched (see `statements.rs`). The claim is the
//! shared transaction and the rest of the permit operations is shared, see `permits.rs`.

use lease_core::Result;
use sqlx::MySql;

use super::leases::inserted;
use crate::partitions::{Table, group_conn};
use crate::store::SqlStore;

impl SqlStore<MySql> {
    /// The term, `None` when the permit is not the holder's live.
    pub(super) async fn renew_permit_row(
        &self,
        name: &str,
        permit: u32,
        hex: &str,
        ms: i64,
    ) -> Result<Option<i64>> {
        let p = &self.inner.stmts.permits;
        let done = group_conn!(
            self,
            lease_core::layer::Operation::RenewPermit,
            Table::Permits,
            |c| {
                sqlx::query(&p.renew)
                    .bind(ms)
                    .bind(name)
                    .bind(i64::from(permit))
                    .bind(hex)
                    .execute(c)
            }
        )?;
        Ok(inserted(done.last_insert_id()).map(|t| i64::try_from(t).unwrap_or(i64::MAX)))
    }

    /// Whether the holder's live permit ended.
    pub(super) async fn release_permit_row(
        &self,
        name: &str,
        permit: u32,
        hex: &str,
    ) -> Result<bool> {
        let p = &self.inner.stmts.permits;
        let done = group_conn!(
            self,
            lease_core::layer::Operation::ReleasePermit,
            Table::Permits,
            |c| {
                sqlx::query(&p.release)
                    .bind(name)
                    .bind(i64::from(permit))
                    .bind(hex)
                    .execute(c)
            }
        )?;
        Ok(inserted(done.last_insert_id()).is_some())
    }
}
