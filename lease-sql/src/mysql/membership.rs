//! MySQL's member statements: the heartbeat's upsert binds its values twice (no `excluded`), and
//! the members are read as bytes (binary columns). The rest of
//! [`MembershipStore`](lease_core::backend::membership::MembershipStore) is shared, see
//! `membership.rs`.

use std::future::Future;

use lease_core::Result;
use sqlx::MySql;

use super::MySqlStore;
use crate::membership::MemberDriver;
use crate::partitions::group_conn;
use crate::store::Table;

/// A member as read: node, address and group list as bytes (binary columns), time left.
type MemberRow = (Vec<u8>, Vec<u8>, Vec<u8>, i64);

impl MemberDriver for MySql {
    /// One upsert, one round trip. MySQL has no `RETURNING`, but the answer is what was
    /// written: the expiry is `ttl` from the statement's own reading of the server's clock, so
    /// `expires_in` is `ttl` (reading the clock back would cost a second round trip and tell
    /// nothing more).
    async fn heartbeat_row(
        store: &MySqlStore,
        service: &str,
        node: &str,
        address: &str,
        list: &str,
        ms: i64,
    ) -> Result<()> {
        let g = &store.inner.stmts.groups;
        group_conn!(
            store,
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

    async fn member_rows(
        store: &MySqlStore,
        service: &str,
    ) -> Result<Vec<(String, String, String, i64)>> {
        let g = &store.inner.stmts.groups;
        let rows: Vec<MemberRow> = group_conn!(
            store,
            lease_core::layer::Operation::Members,
            Table::Members,
            |c| { sqlx::query_as(&g.members).bind(service).fetch_all(c) }
        )?;
        rows.into_iter()
            .map(|(node, address, groups, left)| {
                let node = store.text_from(Table::Members, "node", node)?;
                let address = store.text_from(Table::Members, "address", address)?;
                let groups = store.text_from(Table::Members, "group_list", groups)?;
                Ok((node, address, groups, left))
            })
            .collect()
    }

    fn leave_row(
        store: &MySqlStore,
        service: &str,
        node: &str,
    ) -> impl Future<Output = Result<bool>> + Send {
        store.shared_leave_row(service, node)
    }
}
