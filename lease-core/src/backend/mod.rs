//! The implementer's module: what a backend needs to build a store, apart from what users
//! build with (the crate root).
//!
//! A backend implements the store traits of the root ([`LeaseStore`](crate::LeaseStore) and, where
//! it can, [`PermitStore`](crate::backend::permits::PermitStore),
//! [`PartitionStore`](crate::backend::partitions::PartitionStore),
//! [`MembershipStore`](crate::backend::membership::MembershipStore),
//! [`SlotStore`](crate::backend::slots::SlotStore), answering each one's accessor with `Some(self)`
//! and taking its capability flags from [`derived_capabilities`]) with the types here: the
//! [`HolderToken`] and [`Grant`] of the lease protocol, the slot outcomes, the boot-clock
//! [`Stamp`](clock::Stamp). Each operation starts with its one argument check from [`check`], so
//! every backend refuses the same inputs with the same messages and does no I/O for them; its
//! driver errors carry their context as [`Error::during`](crate::Error::during) and
//! [`Error::at_server`](crate::Error::at_server) attach it.
//!
//! A backend that reads parameters of a store URL's query reads them with [`UrlParam`]'s
//! typed readers and refuses a bad value with a [`ParamError`].
//!
//! ```
//! use std::time::Duration;
//! use lease_core::backend::check;
//! use lease_local::MemoryStore;
//!
//! let store = MemoryStore::new();
//! assert!(check::claim(&store, "jobs", "worker-1", Duration::from_secs(3)).is_ok());
//! let err = check::claim(&store, "", "worker-1", Duration::from_secs(3)).unwrap_err();
//! assert_eq!(err.kind(), lease_core::ErrorKind::InvalidName);
//! ```

pub mod check;
pub mod clock;
pub mod listen;
mod url_param;

pub use crate::engine::wait;
pub use crate::store::{membership, names, notify, partitions, permits, polling, slots};

pub use crate::store::capabilities::Capabilities;
pub use crate::store::error::BoxError;
pub use crate::store::record::{
    Grant, HolderToken, LeaseInfo, MAX_INSTANCE_BYTES, MAX_RENEWALS_PER_CALL, RenewItem,
    validate_instance,
};
pub use crate::store::store_ext::LeaseStoreExt;
pub use crate::store::validate::{
    DEFAULT_MAX_NAME_BYTES, MAX_TTL, MIN_TTL, ceil_millis, validate_name, validate_ttl,
};
pub use crate::timings::{DRIFT_MARGIN_PERCENT, STORE_CLOCK_GRANULARITY};
pub use url_param::{ParamError, UrlParam};

/// Re-exported so stores can implement the traits without naming the crate themselves.
pub use async_trait::async_trait;

/// [`Capabilities`] at their defaults, with the four capability flags —
/// [`permits`](Capabilities::permits), [`partitions`](Capabilities::partitions),
/// [`membership`](Capabilities::membership), [`slots`](Capabilities::slots) — derived from
/// `store`'s accessors ([`LeaseStore::permit_store`](crate::LeaseStore::permit_store) and the
/// others): the one place they are set, so a store's flags cannot disagree with what it does. A
/// store writes the rest of its capabilities and `..derived_capabilities(self)`, and never sets
/// those four by hand.
///
/// ```
/// use lease_core::LeaseStore;
/// use lease_core::backend::derived_capabilities;
/// use lease_local::MemoryStore;
///
/// let store = MemoryStore::new();
/// let caps = derived_capabilities(&store);
/// assert!(caps.permits && caps.partitions && caps.membership && caps.slots);
/// let own = store.capabilities();
/// assert_eq!(
///     (own.permits, own.partitions, own.membership, own.slots),
///     (caps.permits, caps.partitions, caps.membership, caps.slots),
/// );
/// ```
pub fn derived_capabilities<S: crate::LeaseStore + ?Sized>(store: &S) -> Capabilities {
    Capabilities {
        permits: store.permit_store().is_some(),
        partitions: store.partition_store().is_some(),
        membership: store.membership_store().is_some(),
        slots: store.slot_store().is_some(),
        ..Capabilities::default()
    }
}

/// Groups as one text value, for stores that keep text: one group per line (names hold no
/// control characters, so a line feed never occurs inside one).
///
/// ```
/// use lease_core::backend::{decode_groups, encode_groups};
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
