//! Membership: which nodes of a service are alive, where they answer, and which partition
//! groups they serve.
//!
//! One record per `(service, node)` keeps the node's address, its groups and an expiry by the
//! store's clock. A node stays a member while it heartbeats more often than its TTL; a node that
//! stops (crashes, hangs, loses the store) drops out when the TTL runs out, and a node that
//! leaves gracefully drops out at once.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::partitions::OWNER_ID_SUFFIX_BYTES;
use crate::store::{LeaseStore, MAX_INSTANCE_BYTES, validate_instance};

/// The longest node id, in bytes: 111, so that the owner id a
/// [`GroupWorker`](crate::GroupWorker) makes of it ([`owner_id`](crate::owner_id): the node id,
/// `@` and 16 hex digits) fits the [`MAX_INSTANCE_BYTES`] of an owner.
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

/// Checks a heartbeat's arguments before any I/O: the service and every group are names the
/// store can hold, the node a label of at most [`MAX_NODE_ID_BYTES`] (so that its owner id
/// fits an owner; a longer one is refused here, naming the node id, rather than later as an
/// owner),
/// the address printable and at most [`MAX_ADDRESS_BYTES`], at most [`MAX_GROUPS_PER_MEMBER`]
/// groups, and the TTL one the store keeps.
pub fn check_member_args(
    store: &dyn LeaseStore,
    service: &str,
    node: &str,
    address: Option<&str>,
    ttl: Option<Duration>,
    groups: &[String],
) -> Result<()> {
    store
        .validate_name(service)
        .map_err(|e| Error::invalid_name(format!("service: {}", e.message())))?;
    validate_instance(node)
        .map_err(|e| Error::invalid_name(e.message().replace("instance label", "node id")))?;
    if node.len() > MAX_NODE_ID_BYTES {
        return Err(Error::invalid_name(format!(
            "node id {:?}… is {} bytes long; a node id is at most {MAX_NODE_ID_BYTES} bytes, so \
             that the owner id of its partition leases (the node id, '@' and 16 hex digits) \
             fits the {MAX_INSTANCE_BYTES} bytes of an owner; give a shorter node id",
            node.chars().take(24).collect::<String>(),
            node.len()
        )));
    }
    if let Some(address) = address {
        if address.len() > MAX_ADDRESS_BYTES {
            return Err(Error::invalid_argument(format!(
                "address is {} bytes long; at most {MAX_ADDRESS_BYTES} are kept",
                address.len()
            )));
        }
        if address.chars().any(char::is_control) {
            return Err(Error::invalid_argument(
                "address holds a control character; use printable characters",
            ));
        }
    }
    if let Some(ttl) = ttl {
        store.validate_ttl(ttl)?;
    }
    if groups.len() > MAX_GROUPS_PER_MEMBER {
        return Err(Error::invalid_argument(format!(
            "{} groups for one member; at most {MAX_GROUPS_PER_MEMBER} are kept",
            groups.len()
        )));
    }
    for group in groups {
        store
            .validate_name(group)
            .map_err(|e| Error::invalid_name(format!("group: {}", e.message())))?;
    }
    Ok(())
}

/// Groups as one text value, for stores that keep text: one group per line (names hold no
/// control characters, so a line feed never occurs inside one).
///
/// ```
/// use lease_core::{decode_groups, encode_groups};
/// let groups = vec!["orders".to_string(), "mail".to_string()];
/// assert_eq!(decode_groups(&encode_groups(&groups)), groups);
/// assert!(decode_groups(&encode_groups(&[])).is_empty());
/// ```
pub fn encode_groups(groups: &[String]) -> String {
    groups.join("\n")
}

/// The groups [`encode_groups`] wrote.
pub fn decode_groups(text: &str) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    text.split('\n').map(str::to_string).collect()
}

/// Membership records. Implemented by stores whose
/// [`capabilities`](LeaseStore::capabilities) say `membership: true`; see the [module
/// docs](crate::membership).
#[async_trait]
pub trait MembershipStore: LeaseStore {
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

/// A store with both partitions and membership: what a [`GroupWorker`](crate::GroupWorker)
/// needs. Every type that implements both traits implements this one.
pub trait GroupStore: crate::PartitionStore + MembershipStore {}

impl<S: crate::PartitionStore + MembershipStore + ?Sized> GroupStore for S {}
