//! The memory of a store object's own last writes, per lease name and per `(group, partition)`:
//! what lets renew and release compare-and-set without reading first.

use std::collections::HashMap;
use std::time::Instant;

use lease_core::backend::HolderToken;

/// The last write this store object made per lease name.
pub(crate) type KnownLeases = HashMap<String, Known>;

/// A write this store made: the revision it got and what it wrote.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) holder: HolderToken,
    pub(crate) revision: u64,
    pub(crate) term: u64,
    pub(crate) instance: String,
    /// A job's lease (`job1`), claimed for a scheduler slot.
    pub(crate) job: bool,
    /// When the write was sent: the server stamped the message later than this.
    pub(crate) sent_at: Instant,
}

/// The last write this store object made per `(group, partition)`.
pub(crate) type KnownPartitions = HashMap<(String, u32), KnownPartition>;

/// A partition write this store made: the owner, the revision it got, the epoch it carries.
#[derive(Debug, Clone)]
pub(crate) struct KnownPartition {
    pub(crate) owner: String,
    pub(crate) revision: u64,
    pub(crate) epoch: u64,
    /// When the write was sent: the server stamped the message later than this.
    pub(crate) sent_at: Instant,
}
