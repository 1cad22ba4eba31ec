//! Partitioned leases: a group's work split into numbered partitions, each a lease of its own.
//!
//! One record per `(group, partition)` keeps the **owner**, the **epoch** and the expiry. The
//! rules, the same on every backend (those of the MongoDB lease store):
//!
//! - **Acquire** ([`PartitionStore::acquire_partition`]) admits only an expired (or released, or
//!   never seen) lease, or the acquirer's own. The epoch is kept when the acquirer still holds the
//!   lease live, and goes up by one otherwise — so the epoch is a fencing token: it strictly
//!   increases every time the partition changes hands, and every time an owner comes back to a
//!   partition after letting it lapse.
//! - The **owner** names one process incarnation, not a node: a node id plus an id minted at
//!   each start ([`owner_id`]). A restarted node is thus never taken for its stalled
//!   predecessor: it waits for the old incarnation's leases to expire, and gets a new epoch.
//! - **Renew** ([`PartitionStore::renew_partitions`]) extends, to one expiry, every live lease the
//!   owner holds among the partitions named, in a fixed number of round trips however many there
//!   are (see [`BatchRenew`]). A lapsed lease is never revived: it is missing from the answer.
//! - **Release** ([`PartitionStore::release_partitions`]) ends the owner's live leases at once and
//!   keeps the records, so the epoch continues.
//! - **Owners** ([`PartitionStore::owners`]) lists a group's live leases.
//! - Every expiry is judged by the store's clock, as for [`LeaseStore`](crate::LeaseStore).
//!
//! The [`GroupWorker`](crate::GroupWorker) spreads a group's partitions over the live members of a
//! service ([`MembershipStore`](crate::backend::membership::MembershipStore)) with these
//! operations.

use std::time::Duration;

use async_trait::async_trait;

use crate::store::error::Result;
use crate::store::record::HolderToken;

pub use crate::store::capabilities::BatchRenew;

/// How many bytes [`owner_id`] appends to a node id: `@` and 16 hex digits.
pub const OWNER_ID_SUFFIX_BYTES: usize = 17;

/// The most partitions one [`PartitionStore::renew_partitions`] or
/// [`PartitionStore::release_partitions`] call takes.
pub const MAX_PARTITIONS_PER_CALL: usize = 10_000;

/// One partition lease as the store answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLease {
    /// The partition number.
    pub partition: u32,
    /// The owner (one process incarnation) holding it.
    pub owner: String,
    /// The fencing token: it strictly increases every time the partition changes hands.
    pub epoch: u64,
    /// Time left on the lease by the store's clock when the store answered.
    pub expires_in: Duration,
}

/// An owner id for `node`: the node id, `@`, and 16 hex digits minted now, so each start of a
/// process is a new owner.
///
/// ```
/// let a = lease_core::backend::partitions::owner_id("node-a");
/// let b = lease_core::backend::partitions::owner_id("node-a");
/// assert!(a.starts_with("node-a@"));
/// assert_ne!(a, b);
/// ```
///
/// The owner id is [`OWNER_ID_SUFFIX_BYTES`] longer than the node id, and an owner is at most
/// [`MAX_INSTANCE_BYTES`](crate::backend::MAX_INSTANCE_BYTES) bytes, hence
/// [`MAX_NODE_ID_BYTES`](crate::backend::membership::MAX_NODE_ID_BYTES).
pub fn owner_id(node: &str) -> String {
    let hex = HolderToken::mint().to_hex();
    format!("{node}@{}", hex.get(..16).unwrap_or(&hex))
}

/// The node part of an owner id made by [`owner_id`]: everything before the last `@`.
///
/// ```
/// assert_eq!(lease_core::backend::partitions::owner_node("node-a@0123456789abcdef"), "node-a");
/// assert_eq!(lease_core::backend::partitions::owner_node("plain"), "plain");
/// ```
pub fn owner_node(owner: &str) -> &str {
    owner.rsplit_once('@').map_or(owner, |(node, _)| node)
}

/// Partitioned lease operations. Implemented by stores whose
/// [`capabilities`](crate::LeaseStore::capabilities) say `partitions: true`; see the [module
/// docs](crate::backend::partitions) for the rules.
///
/// Cancel safety: as for [`LeaseStore`](crate::LeaseStore). An acquire whose outcome is unknown can simply be
/// repeated by the same owner (it keeps the epoch when the first one took effect); an unknown
/// renewal is retried; release may be repeated.
#[async_trait]
pub trait PartitionStore: Send + Sync {
    /// Acquires `partition` of `group` for `owner` for `ttl`, if the lease is free (never held,
    /// released or expired by the store's clock) or already `owner`'s. `None` when another owner
    /// holds it live.
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<PartitionLease>>;

    /// Extends, to `ttl` from now by the store's clock, every live lease `owner` holds among
    /// `partitions`, and returns those (in no particular order). A partition missing from the
    /// answer is lost to `owner`. Duplicates count once; an empty slice does no I/O.
    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<PartitionLease>>;

    /// Ends every live lease `owner` holds among `partitions`, keeping the records and their
    /// epochs. Returns how many live leases it ended. An empty slice does no I/O.
    async fn release_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> Result<usize>;

    /// The live leases of `group`, by partition number.
    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>>;
}

macro_rules! forward_partition_store {
    ($($ptr:ty),*) => {$(
        #[deny(clippy::missing_trait_methods)]
        #[async_trait]
        impl<S: PartitionStore + ?Sized> PartitionStore for $ptr {
            async fn acquire_partition(
                &self,
                group: &str,
                partition: u32,
                owner: &str,
                ttl: Duration,
            ) -> Result<Option<PartitionLease>> {
                (**self).acquire_partition(group, partition, owner, ttl).await
            }
            async fn renew_partitions(
                &self,
                group: &str,
                partitions: &[u32],
                owner: &str,
                ttl: Duration,
            ) -> Result<Vec<PartitionLease>> {
                (**self).renew_partitions(group, partitions, owner, ttl).await
            }
            async fn release_partitions(&self, group: &str, partitions: &[u32], owner: &str) -> Result<usize> {
                (**self).release_partitions(group, partitions, owner).await
            }
            async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
                (**self).owners(group).await
            }
        }
    )*};
}

forward_partition_store!(std::sync::Arc<S>, Box<S>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_name_their_node() {
        let a = owner_id("n1");
        assert_eq!(owner_node(&a), "n1");
        assert_eq!(a.len(), "n1@".len() + 16);
        assert_eq!(owner_node("a@b@c"), "a@b");
    }
}
