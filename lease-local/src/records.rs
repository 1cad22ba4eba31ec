//! The records the in-memory store keeps: leases, partitions, members and counted permits, each
//! with the instant it lasts until.

use std::collections::BTreeMap;
use std::time::Duration;

use lease_core::backend::partitions::PartitionLease;
use lease_core::backend::{Grant, HolderToken, slots::SlotRecord};
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub(crate) enum Until {
    Never,
    At(Instant),
}

#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) holder: HolderToken,
    pub(crate) instance: String,
    pub(crate) term: u64,
    pub(crate) until: Until,
    pub(crate) slot: SlotRecord,
}

impl Record {
    pub(crate) fn expires_in(&self, now: Instant) -> Duration {
        match self.until {
            Until::Never => Duration::MAX,
            Until::At(at) => at.saturating_duration_since(now),
        }
    }

    pub(crate) fn live(&self, now: Instant) -> bool {
        !self.expires_in(now).is_zero()
    }
}

#[derive(Debug)]
pub(crate) struct PartitionRecord {
    pub(crate) owner: String,
    pub(crate) epoch: u64,
    pub(crate) until: Until,
}

#[derive(Debug)]
pub(crate) struct MemberRecord {
    pub(crate) address: String,
    pub(crate) groups: Vec<String>,
    pub(crate) until: Until,
}

pub(crate) fn left(until: Until, now: Instant) -> Duration {
    match until {
        Until::Never => Duration::MAX,
        Until::At(at) => at.saturating_duration_since(now),
    }
}

impl PartitionRecord {
    pub(crate) fn live(&self, now: Instant) -> bool {
        !left(self.until, now).is_zero()
    }

    pub(crate) fn lease(&self, partition: u32, now: Instant) -> PartitionLease {
        PartitionLease {
            partition,
            owner: self.owner.clone(),
            epoch: self.epoch,
            expires_in: left(self.until, now),
        }
    }
}

/// One counted name.
#[derive(Debug, Default)]
pub(crate) struct Counted {
    /// The greatest term issued for the name, across its permits.
    pub(crate) term: u64,
    /// Every permit ever claimed, by index.
    pub(crate) permits: BTreeMap<u32, Permit>,
}

/// One permit of a counted name.
#[derive(Debug)]
pub(crate) struct Permit {
    pub(crate) holder: HolderToken,
    pub(crate) instance: String,
    pub(crate) term: u64,
    pub(crate) until: Until,
}

impl Permit {
    pub(crate) fn live(&self, now: Instant) -> bool {
        !left(self.until, now).is_zero()
    }

    pub(crate) fn grant(&self, now: Instant) -> Grant {
        Grant {
            term: self.term,
            expires_in: left(self.until, now),
        }
    }
}
