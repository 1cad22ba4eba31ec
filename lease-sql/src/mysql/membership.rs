//! MySQL's member statements: the heartbeat's upsert binds its values twice (no `excluded`),
//! and the members are read as bytes (binary columns). The rest of
//! [`MembershipStore`](lease_core::MembershipStore) is shared, see `membership.rs`.

use lease_core::Result;
use sqlx::MySql;

use crate::partitions::{Table, group_conn};
use crate::store::SqlStore;

/// A member as read: node, address and group list as bytes (binary columns), time left.
type MemberRow = (Vec<u8>, Vec<u8>, Vec<u8>, i64);

impl SqlStore<MySql> {
    /// One upsert, one round trip. MySQL has no `RETURNING`, but the answer is what was
    /// written: the expiry is `ttl` from the statement's own reading of the server's clock, so
    /// `expires_in` is `ttl` (reading the clock back would cost a second round trip and tell
    /// nothing more).
    pub(super) async fn heartbeat_row(
        &self,
        service: &str,
        node: &str,
        address: &str,
        list: &str,
        ms: i64,
    ) -> Result<()> {
        let g = &self.inner.stmts.groups;
        group_conn!(
            self,
            lease_core::layer::Operation::Heartbeat,
            Table::Members,
            |c| {
                sqlx::query(&g.heartbeat)
                    .bind(service)
                    .bind(node)
                    .bind(address)
                    .bind(list)
                    .bind(ms)
                    .bind(address)
                    .bind(list)
                    .bind(ms)
                    .execute(c)
            }
        )?;
        Ok(())
    }

    pub(super) async fn member_rows(
        &self,
        service: &str,
    ) -> Result<Vec<(String, String, String, i64)>> {
        let g = &self.inner.stmts.groups;
        let rows: Vec<MemberRow> = group_conn!(
            self,
            lease_core::layer::Operation::Members,
            Table::Members,
            |c| { sqlx::query_as(&g.members).bind(service).fetch_all(c) }
        )?;
        rows.into_iter()
            .map(|(node, address, groups, left)| {
                let node = self.text_from(Table::Members, "node", node)?;
                let address = self.text_from(Table::Members, "address", address)?;
                let groups = self.text_from(Table::Members, "group_list", groups)?;
                Ok((node, address, groups, left))
            })
            .collect()
    }
}
