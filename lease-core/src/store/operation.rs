//! The name of every store operation: what a hook sees and an error's context names.

use std::fmt;

/// One store operation, as a hook or an error's context names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// [`LeaseStore::available`](crate::LeaseStore::available).
    Available,
    /// [`LeaseStore::claim`](crate::LeaseStore::claim).
    Claim,
    /// [`LeaseStore::renew`](crate::LeaseStore::renew).
    Renew,
    /// [`LeaseStore::renew_many`](crate::LeaseStore::renew_many).
    RenewMany,
    /// [`LeaseStore::release`](crate::LeaseStore::release).
    Release,
    /// [`LeaseStore::verify`](crate::LeaseStore::verify).
    Verify,
    /// [`LeaseStore::get`](crate::LeaseStore::get).
    Get,
    /// [`LeaseStore::force_release`](crate::LeaseStore::force_release).
    ForceRelease,
    /// [`LeaseStore::names`](crate::LeaseStore::names).
    Names,
    /// [`PartitionStore::acquire_partition`](crate::backend::partitions::PartitionStore::acquire_partition).
    AcquirePartition,
    /// [`PartitionStore::renew_partitions`](crate::backend::partitions::PartitionStore::renew_partitions).
    RenewPartitions,
    /// [`PartitionStore::release_partitions`](crate::backend::partitions::PartitionStore::release_partitions).
    ReleasePartitions,
    /// [`PartitionStore::owners`](crate::backend::partitions::PartitionStore::owners).
    Owners,
    /// [`MembershipStore::heartbeat`](crate::backend::membership::MembershipStore::heartbeat).
    Heartbeat,
    /// [`MembershipStore::members`](crate::backend::membership::MembershipStore::members).
    Members,
    /// [`MembershipStore::leave`](crate::backend::membership::MembershipStore::leave).
    Leave,
    /// [`SlotStore::claim_slot`](crate::backend::slots::SlotStore::claim_slot).
    ClaimSlot,
    /// [`SlotStore::finish_slot`](crate::backend::slots::SlotStore::finish_slot).
    FinishSlot,
    /// [`SlotStore::unfinished`](crate::backend::slots::SlotStore::unfinished).
    Unfinished,
    /// [`SlotStore::claim_rerun`](crate::backend::slots::SlotStore::claim_rerun).
    ClaimRerun,
    /// [`SlotStore::last_slot`](crate::backend::slots::SlotStore::last_slot).
    LastSlot,
    /// [`PollingStore::try_acquire`](crate::backend::polling::PollingStore::try_acquire).
    PollAcquire,
    /// [`PollingStore::release`](crate::backend::polling::PollingStore::release).
    PollRelease,
    /// [`PermitStore::claim_permit`](crate::backend::permits::PermitStore::claim_permit).
    ClaimPermit,
    /// [`PermitStore::renew_permit`](crate::backend::permits::PermitStore::renew_permit).
    RenewPermit,
    /// [`PermitStore::release_permit`](crate::backend::permits::PermitStore::release_permit).
    ReleasePermit,
    /// [`PermitStore::verify_permit`](crate::backend::permits::PermitStore::verify_permit).
    VerifyPermit,
    /// [`PermitStore::read_back_permit`](crate::backend::permits::PermitStore::read_back_permit).
    ReadBackPermit,
    /// [`PermitStore::permits`](crate::backend::permits::PermitStore::permits).
    Permits,
}

impl Operation {
    /// The operation's name in snake case, e.g. `"renew_partitions"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Available => "available",
            Operation::Claim => "claim",
            Operation::Renew => "renew",
            Operation::RenewMany => "renew_many",
            Operation::Release => "release",
            Operation::Verify => "verify",
            Operation::Get => "get",
            Operation::ForceRelease => "force_release",
            Operation::Names => "names",
            Operation::AcquirePartition => "acquire_partition",
            Operation::RenewPartitions => "renew_partitions",
            Operation::ReleasePartitions => "release_partitions",
            Operation::Owners => "owners",
            Operation::Heartbeat => "heartbeat",
            Operation::Members => "members",
            Operation::Leave => "leave",
            Operation::ClaimSlot => "claim_slot",
            Operation::FinishSlot => "finish_slot",
            Operation::Unfinished => "unfinished",
            Operation::ClaimRerun => "claim_rerun",
            Operation::LastSlot => "last_slot",
            Operation::PollAcquire => "poll_acquire",
            Operation::PollRelease => "poll_release",
            Operation::ClaimPermit => "claim_permit",
            Operation::RenewPermit => "renew_permit",
            Operation::ReleasePermit => "release_permit",
            Operation::VerifyPermit => "verify_permit",
            Operation::ReadBackPermit => "read_back_permit",
            Operation::Permits => "permits",
        }
    }

    /// `true` for the operations that can change what the store holds (claims, renewals,
    /// releases, heartbeats, leaves, slot claims and finishes, and the read-back of a permit
    /// claim, which a store may renew to adopt it); `false` for pure reads.
    pub fn writes(self) -> bool {
        !matches!(
            self,
            Operation::Available
                | Operation::Verify
                | Operation::Get
                | Operation::Names
                | Operation::Owners
                | Operation::Members
                | Operation::Unfinished
                | Operation::LastSlot
                | Operation::VerifyPermit
                | Operation::Permits
        )
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
