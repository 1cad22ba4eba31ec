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
    /// The claim gate once the lease has ended: nobody may claim until `gate` after `until`,
    /// except the instance `gate_for` when set (a hand-over). While the lease is live, `gate`
    /// is the lock-delay its holder declared; a release sets it to zero.
    pub(crate) gate: Duration,
    pub(crate) gate_for: Option<String>,
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

    /// `true` when `instance` may claim the name now under `holder`: the lease is not live,
    /// and its gate is open (its time has passed), or names this instance, or the claim is
    /// under the holder token of the lease that ended (that holder's own; the SQL stores need
    /// the same rule, see lease-sql's `gates_schema_sql`).
    pub(crate) fn claimable(&self, now: Instant, instance: &str, holder: &HolderToken) -> bool {
        self.gate_open(now)
            || (self.ended(now)
                && (self.gate_for.as_deref() == Some(instance) || self.holder == *holder))
    }

    /// `true` when the lease is not live and its gate has passed: anyone may claim, and a
    /// scheduler slot claim (which knows no exception) too.
    pub(crate) fn gate_open(&self, now: Instant) -> bool {
        match self.until {
            Until::Never => false,
            Until::At(at) => at <= now && at + self.gate <= now,
        }
    }

    /// `true` when the lease is not live.
    fn ended(&self, now: Instant) -> bool {
        matches!(self.until, Until::At(at) if at <= now)
    }

    /// The lease ends gracefully now: the gate opens at once.
    pub(crate) fn end_now(&mut self, now: Instant) {
        self.until = Until::At(now);
        self.gate = Duration::ZERO;
        self.gate_for = None;
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
