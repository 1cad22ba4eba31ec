//! The store contract: the store traits (`LeaseStore`, the optional partition, membership and
//! slot stores, counted leases, and the polling store) with their records and capabilities, the
//! operation names, the argument rules, the error type, a store's hints, and the layer
//! mechanism.
//!
//! Its files import from this folder (and the clock) only. The engine, the group worker, the
//! scheduler and `backend` build on it.

pub(crate) mod capabilities;
pub(crate) mod error;
pub mod layer;
pub(crate) mod lease_store;
pub mod membership;
pub mod names;
pub mod notify;
mod operation;
pub mod partitions;
pub mod permits;
pub mod polling;
pub(crate) mod record;
pub mod slots;
pub(crate) mod store_ext;
pub(crate) mod target;
pub(crate) mod validate;
