//! One argument check per store operation, run before any I/O.
//!
//! Every backend calls exactly one of these first in each operation, so the rules — which
//! names, prefixes, labels, durations and batches a store takes — are written once and every store
//! refuses the same input with the same kind and message. Each check is pure: it reads only
//! the store's [`capabilities`](crate::LeaseStore::capabilities).
//!
//! The batch operations answer [`Batch::Empty`] for an empty list: the store then answers at
//! once (nothing renewed, nothing released, nothing unfinished) without a round trip.

use std::time::Duration;

use crate::store::error::{Error, Result};
use crate::store::lease_store::LeaseStore;
use crate::store::membership::{MAX_ADDRESS_BYTES, MAX_GROUPS_PER_MEMBER, MAX_NODE_ID_BYTES};
use crate::store::partitions::MAX_PARTITIONS_PER_CALL;
use crate::store::record::{MAX_INSTANCE_BYTES, RenewItem, check_renewals, validate_instance};
use crate::store::store_ext::LeaseStoreExt;

/// What a batch check found: whether the operation has anything to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an empty batch is answered without I/O"]
pub enum Batch {
    /// No item: answer at once, with no I/O.
    Empty,
    /// At least one item: send it.
    Items,
}

impl Batch {
    fn of<T>(items: &[T]) -> Batch {
        if items.is_empty() {
            Batch::Empty
        } else {
            Batch::Items
        }
    }
}

/// [`LeaseStore::claim`], [`SlotStore::claim_slot`](crate::backend::slots::SlotStore::claim_slot)
/// and [`SlotStore::claim_rerun`](crate::backend::slots::SlotStore::claim_rerun): the name, the
/// instance label and the lease duration.
pub fn claim<S: LeaseStore + ?Sized>(
    store: &S,
    name: &str,
    instance: &str,
    ttl: Duration,
) -> Result<()> {
    store.validate_name(name)?;
    store.validate_ttl(ttl)?;
    validate_instance(instance)
}

/// [`PermitStore::claim_permit`](crate::backend::permits::PermitStore::claim_permit): the name, the
/// permit count, the instance label and the lease duration.
pub fn claim_permit<S: LeaseStore + ?Sized>(
    store: &S,
    name: &str,
    permits: u32,
    instance: &str,
    ttl: Duration,
) -> Result<()> {
    claim(store, name, instance, ttl)?;
    crate::store::permits::check_count(permits)
}

/// [`PermitStore::renew_permit`](crate::backend::permits::PermitStore::renew_permit): the name, the
/// permit index and the lease duration.
pub fn renew_permit<S: LeaseStore + ?Sized>(
    store: &S,
    name: &str,
    permit: u32,
    ttl: Duration,
) -> Result<()> {
    renew(store, name, ttl)?;
    permit_index(permit)
}

/// [`PermitStore::release_permit`](crate::backend::permits::PermitStore::release_permit): the name
/// and the permit index.
pub fn permit<S: LeaseStore + ?Sized>(store: &S, name: &str, permit: u32) -> Result<()> {
    store.validate_name(name)?;
    permit_index(permit)
}

fn permit_index(permit: u32) -> Result<()> {
    if permit >= crate::store::permits::MAX_PERMITS {
        return Err(Error::invalid_argument(format!(
            "permit {permit} does not exist: a counted lease has at most {} permits, \
             numbered from 0",
            crate::store::permits::MAX_PERMITS
        )));
    }
    Ok(())
}

/// [`LeaseStore::renew`]: the name and the lease duration.
pub fn renew<S: LeaseStore + ?Sized>(store: &S, name: &str, ttl: Duration) -> Result<()> {
    store.validate_name(name)?;
    store.validate_ttl(ttl)
}

/// [`LeaseStore::renew_many`]: the lease duration, each name as [`renew`] checks it, at most
/// [`MAX_RENEWALS_PER_CALL`](crate::backend::MAX_RENEWALS_PER_CALL) items, and no name twice (one answer per name, in order, would be
/// ambiguous for a name sent twice). `Batch::Empty` for an empty list, answered with no I/O.
pub fn renew_many<S: LeaseStore + ?Sized>(
    store: &S,
    items: &[RenewItem<'_>],
    ttl: Duration,
) -> Result<Batch> {
    store.validate_ttl(ttl)?;
    check_renewals(items, store.capabilities().max_name_bytes)?;
    Ok(Batch::of(items))
}

/// The operations that take a name alone: [`LeaseStore::release`], `verify`, `get`,
/// `force_release`, `verify_permit`, `permits`,
/// [`SlotStore::finish_slot`](crate::backend::slots::SlotStore::finish_slot) and
/// [`SlotStore::last_slot`](crate::backend::slots::SlotStore::last_slot).
pub fn name<S: LeaseStore + ?Sized>(store: &S, name: &str) -> Result<()> {
    store.validate_name(name)
}

/// [`LeaseStore::names`]: the prefix like a name, though it may be empty (no control character,
/// at most the store's [`max_name_bytes`](crate::backend::Capabilities::max_name_bytes)), `after`
/// a name when given, and `limit` from 1 to
/// [`MAX_NAMES_PER_PAGE`](crate::backend::names::MAX_NAMES_PER_PAGE).
pub fn names<S: LeaseStore + ?Sized>(
    store: &S,
    prefix: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<()> {
    crate::store::names::check(prefix, after, limit, store.capabilities().max_name_bytes)
}

/// [`SlotStore::unfinished`](crate::backend::slots::SlotStore::unfinished): every name.
pub fn unfinished<S: LeaseStore + ?Sized>(store: &S, names: &[String]) -> Result<Batch> {
    for name in names {
        store.validate_name(name)?;
    }
    Ok(Batch::of(names))
}

/// [`PartitionStore::acquire_partition`](crate::backend::partitions::PartitionStore::acquire_partition):
/// the group, the owner and the lease duration.
pub fn acquire_partition<S: LeaseStore + ?Sized>(
    store: &S,
    group: &str,
    owner: &str,
    ttl: Duration,
) -> Result<()> {
    partition_args(store, group, owner, Some(ttl))
}

/// [`PartitionStore::renew_partitions`](crate::backend::partitions::PartitionStore::renew_partitions):
/// the group, the owner, the lease duration and the batch (at most [`MAX_PARTITIONS_PER_CALL`]).
pub fn renew_partitions<S: LeaseStore + ?Sized>(
    store: &S,
    group: &str,
    partitions: &[u32],
    owner: &str,
    ttl: Duration,
) -> Result<Batch> {
    partition_args(store, group, owner, Some(ttl))?;
    partition_batch(partitions)
}

/// [`PartitionStore::release_partitions`](crate::backend::partitions::PartitionStore::release_partitions):
/// the group, the owner and the batch.
pub fn release_partitions<S: LeaseStore + ?Sized>(
    store: &S,
    group: &str,
    partitions: &[u32],
    owner: &str,
) -> Result<Batch> {
    partition_args(store, group, owner, None)?;
    partition_batch(partitions)
}

/// [`PartitionStore::owners`](crate::backend::partitions::PartitionStore::owners): the group.
pub fn owners<S: LeaseStore + ?Sized>(store: &S, group: &str) -> Result<()> {
    group_name(store, group)
}

/// [`MembershipStore::heartbeat`](crate::backend::membership::MembershipStore::heartbeat): the
/// service and every group are names the store can hold, the node a label of at most
/// [`MAX_NODE_ID_BYTES`] (so that its owner id fits an owner; a longer one is refused here, naming
/// the node id, rather than later as an owner), the address printable and at most
/// [`MAX_ADDRESS_BYTES`], at most [`MAX_GROUPS_PER_MEMBER`] groups, and the TTL one the store
/// keeps.
pub fn heartbeat<S: LeaseStore + ?Sized>(
    store: &S,
    service: &str,
    node: &str,
    address: &str,
    ttl: Duration,
    groups: &[String],
) -> Result<()> {
    service_name(store, service)?;
    node_id(node)?;
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
    store.validate_ttl(ttl)?;
    if groups.len() > MAX_GROUPS_PER_MEMBER {
        return Err(Error::invalid_argument(format!(
            "{} groups for one member; at most {MAX_GROUPS_PER_MEMBER} are kept",
            groups.len()
        )));
    }
    for group in groups {
        group_name(store, group)?;
    }
    Ok(())
}

/// [`MembershipStore::members`](crate::backend::membership::MembershipStore::members): the service.
pub fn members<S: LeaseStore + ?Sized>(store: &S, service: &str) -> Result<()> {
    service_name(store, service)
}

/// [`MembershipStore::leave`](crate::backend::membership::MembershipStore::leave): the service and
/// the node.
pub fn leave<S: LeaseStore + ?Sized>(store: &S, service: &str, node: &str) -> Result<()> {
    service_name(store, service)?;
    node_id(node)
}

fn group_name<S: LeaseStore + ?Sized>(store: &S, group: &str) -> Result<()> {
    store
        .validate_name(group)
        .map_err(|e| Error::invalid_name(format!("group: {}", e.message())))
}

fn service_name<S: LeaseStore + ?Sized>(store: &S, service: &str) -> Result<()> {
    store
        .validate_name(service)
        .map_err(|e| Error::invalid_name(format!("service: {}", e.message())))
}

fn node_id(node: &str) -> Result<()> {
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
    Ok(())
}

fn partition_args<S: LeaseStore + ?Sized>(
    store: &S,
    group: &str,
    owner: &str,
    ttl: Option<Duration>,
) -> Result<()> {
    group_name(store, group)?;
    validate_instance(owner)
        .map_err(|e| Error::invalid_name(e.message().replace("instance label", "owner")))?;
    if let Some(ttl) = ttl {
        store.validate_ttl(ttl)?;
    }
    Ok(())
}

fn partition_batch(partitions: &[u32]) -> Result<Batch> {
    if partitions.len() > MAX_PARTITIONS_PER_CALL {
        return Err(Error::invalid_argument(format!(
            "{} partitions in one call; at most {MAX_PARTITIONS_PER_CALL} are taken — split the \
             batch",
            partitions.len()
        )));
    }
    Ok(Batch::of(partitions))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_batches_are_refused_and_empty_ones_need_no_io() {
        assert_eq!(
            partition_batch(&[0; MAX_PARTITIONS_PER_CALL]).ok(),
            Some(Batch::Items)
        );
        assert_eq!(partition_batch(&[]).ok(), Some(Batch::Empty));
        let err = partition_batch(&[0; MAX_PARTITIONS_PER_CALL + 1]).unwrap_err();
        assert!(err.message().contains("split the batch"), "{err}");
    }

    #[test]
    fn node_ids_are_bounded_by_their_owner_ids() {
        assert!(node_id(&"n".repeat(MAX_NODE_ID_BYTES)).is_ok());
        let err = node_id(&"n".repeat(MAX_NODE_ID_BYTES + 1)).unwrap_err();
        assert!(err.message().contains("shorter node id"), "{err}");
        assert!(node_id("").is_err());
    }
}
