//! Membership ([`lease_core::backend::membership::MembershipStore`]) on a table of its own, named
//! after the lease table: `<table>_members`, one row per `(service, node)` (its start-up checks and
//! errors are shared with the partition table, in `partitions.rs`).
//!
//! One impl for every database: argument checks before any I/O (lease-core's `backend::check`,
//! one per operation); each database's [`MemberDriver`] runs the statements (PostgreSQL's and
//! SQLite's in `shared.rs`, MySQL's in `mysql/membership.rs`, but `leave`, the same on every
//! database, in `shared.rs`). Every operation is one statement, one round trip; the
//! heartbeat's answer is what it wrote (its `expires_in` the TTL from the statement's own clock
//! reading), with no read-back.

use std::future::Future;

use lease_core::{Result, backend::membership::Member};

use crate::leases::LeaseDriver;
use crate::store::{SqlStore, Table, remaining};

/// A member record as read back.
pub(crate) fn member(node: String, address: String, groups: &str, left: i64) -> Member {
    Member {
        node,
        address,
        groups: lease_core::backend::decode_groups(groups),
        expires_in: remaining(left),
    }
}

/// A member record as just written: the expiry is `ttl` from the statement's own clock reading.
pub(crate) fn written(node: &str, address: &str, groups: &[String], ttl_ms: i64) -> Member {
    Member {
        node: node.to_owned(),
        address: address.to_owned(),
        groups: groups.to_vec(),
        expires_in: remaining(ttl_ms),
    }
}

/// The member table's part of the `Driver` (`driver.rs`): what a database runs for the
/// membership operations (see [`LeaseDriver`] for what each returns).
pub(crate) trait MemberDriver: LeaseDriver {
    /// The heartbeat's upsert, `list` the groups one per line.
    fn heartbeat_row(
        store: &SqlStore<Self>,
        service: &str,
        node: &str,
        address: &str,
        list: &str,
        ms: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Node, address, group list and time left of each live member of `service`, by node.
    fn member_rows(
        store: &SqlStore<Self>,
        service: &str,
    ) -> impl Future<Output = Result<Vec<(String, String, String, i64)>>> + Send;

    /// The leave: whether the member was live.
    fn leave_row(
        store: &SqlStore<Self>,
        service: &str,
        node: &str,
    ) -> impl Future<Output = Result<bool>> + Send;
}

#[lease_core::backend::async_trait]
impl<DB: MemberDriver> lease_core::backend::membership::MembershipStore for SqlStore<DB>
where
    Self: lease_core::LeaseStore,
{
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: std::time::Duration,
        groups: &[String],
    ) -> lease_core::Result<lease_core::backend::membership::Member> {
        lease_core::backend::check::heartbeat(self, service, node, address, ttl, groups)?;
        let ms = crate::store::ttl_ms(ttl);
        let list = lease_core::backend::encode_groups(groups);
        let during =
            |e: lease_core::Error| e.during(lease_core::layer::Operation::Heartbeat, service);
        self.group_table_ready(Table::Members)
            .await
            .map_err(during)?;
        DB::heartbeat_row(self, service, node, address, &list, ms)
            .await
            .map_err(during)?;
        Ok(crate::membership::written(node, address, groups, ms))
    }

    async fn members(
        &self,
        service: &str,
    ) -> lease_core::Result<Vec<lease_core::backend::membership::Member>> {
        lease_core::backend::check::members(self, service)?;
        let during =
            |e: lease_core::Error| e.during(lease_core::layer::Operation::Members, service);
        self.group_table_ready(Table::Members)
            .await
            .map_err(during)?;
        let rows = DB::member_rows(self, service).await.map_err(during)?;
        Ok(rows
            .into_iter()
            .map(|(node, address, groups, left)| {
                crate::membership::member(node, address, &groups, left)
            })
            .collect())
    }

    /// One `UPDATE`; its affected rows are 1 exactly when the member was live (on
    /// MySQL whatever the found-rows flag: it matches a live record only, and always
    /// changes it).
    async fn leave(&self, service: &str, node: &str) -> lease_core::Result<bool> {
        lease_core::backend::check::leave(self, service, node)?;
        self.group_table_ready(Table::Members)
            .await
            .map_err(|e| e.during(lease_core::layer::Operation::Leave, service))?;
        DB::leave_row(self, service, node)
            .await
            .map_err(|e| e.during(lease_core::layer::Operation::Leave, service))
    }
}
