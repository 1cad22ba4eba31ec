//! Membership: which nodes of a service are alive, where they answer, and which partition
//! groups they serve.
//!
//! One record per `(service, node)` keeps the node's address, its groups and an expiry by the
//! store's clock. A node stays a member while it heartbeats more often than its TTL; a node that
//! stops (crashes, hangs, loses the store) drops out when the TTL runs out, and a node that
//! leaves gracefully drops out at once.

use std::time::Duration;

use async_trait::async_trait;

use crate::store::error::Result;
use crate::store::partitions::OWNER_ID_SUFFIX_BYTES;
use crate::store::record::MAX_INSTANCE_BYTES;

/// The longest node id, in bytes: 111, so that the owner id a [`GroupWorker`](crate::GroupWorker)
/// makes of it ([`owner_id`](crate::backend::partitions::owner_id): the node id, `@` and 16 hex
/// digits) fits the [`MAX_INSTANCE_BYTES`] of an owner.
pub const MAX_NODE_ID_BYTES: usize = MAX_INSTANCE_BYTES - OWNER_ID_SUFFIX_BYTES;

/// The longest address a member record keeps, in bytes.
pub const MAX_ADDRESS_BYTES: usize = 255;

/// The most groups one member may serve.
pub const MAX_GROUPS_PER_MEMBER: usize = 64;

/// A live member of a service, as the store answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The node id.
    pub node: String,
    /// Where the node answers (free-form, possibly empty).
    pub address: String,
    /// The partition groups the node serves.
    pub groups: Vec<String>,
    /// Time left on the record by the store's clock when the store answered.
    pub expires_in: Duration,
}

impl Member {
    /// `true` when the member serves `group`.
    pub fn serves(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// Membership records. Implemented by stores whose
/// [`capabilities`](crate::LeaseStore::capabilities) say `membership: true`; see the [module
/// docs](crate::backend::membership).
#[async_trait]
pub trait MembershipStore: Send + Sync {
    /// Records `node` as a live member of `service` for `ttl` from now by the store's clock,
    /// answering at `address` and serving `groups` (replacing what an earlier heartbeat said).
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member>;

    /// The live members of `service`, by node id.
    async fn members(&self, service: &str) -> Result<Vec<Member>>;

    /// Ends `node`'s membership of `service` at once. `true` when it was live.
    async fn leave(&self, service: &str, node: &str) -> Result<bool>;
}

macro_rules! forward_membership_store {
    ($($ptr:ty),*) => {$(
        #[deny(clippy::missing_trait_methods)]
        #[async_trait]
        impl<S: MembershipStore + ?Sized> MembershipStore for $ptr {
            async fn heartbeat(
                &self,
                service: &str,
                node: &str,
                address: &str,
                ttl: Duration,
                groups: &[String],
            ) -> Result<Member> {
                (**self).heartbeat(service, node, address, ttl, groups).await
            }
            async fn members(&self, service: &str) -> Result<Vec<Member>> {
                (**self).members(service).await
            }
            async fn leave(&self, service: &str, node: &str) -> Result<bool> {
                (**self).leave(service, node).await
            }
        }
    )*};
}

forward_membership_store!(std::sync::Arc<S>, Box<S>);
