//! Membership ([`lease_core::MembershipStore`]) on a table of its own, named after the lease
//! table: `<table>_members`, one row per `(service, node)` (its start-up checks and errors are
//! shared with the partition table, in `partitions.rs`).
//!
//! One impl for every dialect ([`membership_store`]): argument checks before any I/O
//! (lease-core's `backend::check`, one per operation); the statements are the dialect's (`heartbeat_row`,
//! `member_rows`: PostgreSQL's and SQLite's from [`returning_member_rows`], MySQL's in
//! `mysql/membership.rs`), but `leave`, the same on every dialect. Every operation is one
//! statement, one round trip; the heartbeat's answer is what it wrote (its `expires_in` the TTL
//! from the statement's own clock reading), with no read-back.

use lease_core::Member;

use crate::store::remaining;

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

/// `impl MembershipStore` for `SqlStore<$db>`. The dialect brings `heartbeat_row` (the upsert)
/// and `member_rows` (node, address, group list, time left of each live member, by node).
macro_rules! membership_store {
    ($db:ty) => {
        #[lease_core::backend::async_trait]
        impl lease_core::MembershipStore for $crate::SqlStore<$db> {
            async fn heartbeat(
                &self,
                service: &str,
                node: &str,
                address: &str,
                ttl: std::time::Duration,
                groups: &[String],
            ) -> lease_core::Result<lease_core::Member> {
                lease_core::backend::check::heartbeat(self, service, node, address, ttl, groups)?;
                let ms = $crate::store::ttl_ms(ttl);
                let list = lease_core::backend::encode_groups(groups);
                let during = |e: lease_core::Error| {
                    e.during(lease_core::layer::Operation::Heartbeat, service)
                };
                self.group_table_ready($crate::partitions::Table::Members)
                    .await
                    .map_err(during)?;
                self.heartbeat_row(service, node, address, &list, ms)
                    .await
                    .map_err(during)?;
                Ok($crate::membership::written(node, address, groups, ms))
            }

            async fn members(&self, service: &str) -> lease_core::Result<Vec<lease_core::Member>> {
                lease_core::backend::check::members(self, service)?;
                let during =
                    |e: lease_core::Error| e.during(lease_core::layer::Operation::Members, service);
                self.group_table_ready($crate::partitions::Table::Members)
                    .await
                    .map_err(during)?;
                let rows = self.member_rows(service).await.map_err(during)?;
                Ok(rows
                    .into_iter()
                    .map(|(node, address, groups, left)| {
                        $crate::membership::member(node, address, &groups, left)
                    })
                    .collect())
            }

            /// One `UPDATE`; its affected rows are 1 exactly when the member was live (on
            /// MySQL whatever the found-rows flag: it matches a live record only, and always
            /// changes it).
            async fn leave(&self, service: &str, node: &str) -> lease_core::Result<bool> {
                lease_core::backend::check::leave(self, service, node)?;
                self.group_table_ready($crate::partitions::Table::Members)
                    .await
                    .map_err(|e| e.during(lease_core::layer::Operation::Leave, service))?;
                let g = &self.inner.stmts.groups;
                let done = $crate::partitions::group_conn!(
                    write self,
                    lease_core::layer::Operation::Leave,
                    $crate::partitions::Table::Members,
                    |c| { sqlx::query(&g.leave).bind(service).bind(node).execute(c) }
                )
                .map_err(|e| e.during(lease_core::layer::Operation::Leave, service))?;
                Ok(done.rows_affected() > 0)
            }
        }
    };
}

/// The member statements of the dialects with `RETURNING` (PostgreSQL, SQLite), for
/// [`membership_store`].
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! returning_member_rows {
    ($db:ty) => {
        impl $crate::SqlStore<$db> {
            async fn heartbeat_row(
                &self,
                service: &str,
                node: &str,
                address: &str,
                list: &str,
                ms: i64,
            ) -> lease_core::Result<()> {
                let g = &self.inner.stmts.groups;
                $crate::partitions::group_conn!(
                    write self,
                    lease_core::layer::Operation::Heartbeat,
                    $crate::partitions::Table::Members,
                    |c| {
                        sqlx::query(&g.heartbeat)
                            .bind(service)
                            .bind(node)
                            .bind(address)
                            .bind(list)
                            .bind(ms)
                            .execute(c)
                    }
                )?;
                Ok(())
            }

            async fn member_rows(
                &self,
                service: &str,
            ) -> lease_core::Result<Vec<(String, String, String, i64)>> {
                let g = &self.inner.stmts.groups;
                $crate::partitions::group_conn!(
                    self,
                    lease_core::layer::Operation::Members,
                    $crate::partitions::Table::Members,
                    |c| { sqlx::query_as(&g.members).bind(service).fetch_all(c) }
                )
            }
        }
    };
}

pub(crate) use membership_store;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use returning_member_rows;
