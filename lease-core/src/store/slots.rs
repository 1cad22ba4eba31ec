//! Scheduler slots: claim each instant of a job once across a cluster.
//!
//! A job's name is a lease name; its record also keeps three instants (milliseconds since the
//! Unix epoch, UTC):
//!
//! - `last` — the last instant claimed (or taken along by a finish: see below);
//! - `unfinished` — the instant whose round is running, or was cut short;
//! - `rerun` — the unfinished instant that has been claimed a second time.
//!
//! The rules, the same on every backend (those of the SQL lease protocol):
//!
//! - **Claim an instant** ([`SlotStore::claim_slot`]): the name must be free, the instant later
//!   than `last`, and not in the future by the *server's* clock (a replica whose clock runs fast
//!   must not claim instants early and make the others skip them). The store reads the record,
//!   then writes with the term compared, so among replicas that read the same record only one
//!   write matches. The claim sets `last` and `unfinished` to the instant; when the previous
//!   instant was still unfinished, it is reported as superseded: it will never run again.
//! - **Finish** ([`SlotStore::finish_slot`]): records the round as run to its end (clears
//!   `unfinished`) and gives the name back. `passed` — the last instant of the schedule to have
//!   come by the time the round ended — becomes `last`, so instants the round overran stay
//!   skipped; an instant the server's clock has yet to reach is not taken along. When the lease
//!   was lost meanwhile, the end is still recorded unless a later instant has been claimed, and
//!   `passed` is not taken along.
//! - **Unfinished** ([`SlotStore::unfinished`]): for many jobs in one round trip, the instants
//!   whose round was cut short, not yet claimed a second time, with no later instant claimed
//!   and the lease free.
//! - **Claim again** ([`SlotStore::claim_rerun`]): an unfinished instant runs a second time, at
//!   most once. A round cut short again stays unfinished for good.
//! - **Last slot** ([`SlotStore::last_slot`]): what the record says, to tell "never ran" from
//!   "no replica claimed the last instant".

use std::time::Duration;

use async_trait::async_trait;

use crate::store::error::Result;
use crate::store::record::{Grant, HolderToken};

/// The slot instants kept in a job's record, in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotRecord {
    /// The last instant claimed or taken along by a finish.
    pub last_ms: Option<i64>,
    /// The instant whose round is running or was cut short.
    pub unfinished_ms: Option<i64>,
    /// The unfinished instant that has been claimed a second time.
    pub rerun_ms: Option<i64>,
}

/// The outcome of [`SlotStore::claim_slot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotClaim {
    /// This replica runs the instant: the lease is held under the grant.
    Claimed {
        /// The lease granted for the round.
        grant: Grant,
        /// The previous instant, when its round was still unfinished: it is given up for good.
        superseded_ms: Option<i64>,
    },
    /// Someone holds the job's lease (a round is running), or another replica's claim matched
    /// first.
    Held,
    /// This instant or a later one has been claimed already.
    Taken {
        /// The last instant on record.
        last_ms: i64,
    },
    /// The instant is still in the future by the server's clock.
    Early {
        /// The server's clock when it answered.
        now_ms: i64,
    },
}

/// The outcome of [`SlotStore::finish_slot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotFinish {
    /// The round's end was recorded (no later instant had been claimed).
    pub recorded: bool,
    /// `passed` became the last instant on record.
    pub passed_taken: bool,
    /// The lease was still held and has been given back.
    pub released: bool,
}

/// Slot operations on a lease store. Implemented by stores whose
/// [`capabilities`](crate::LeaseStore::capabilities) say `slots: true`; see the [module
/// docs](crate::backend::slots) for the rules.
///
/// Cancel safety: as for [`LeaseStore`](crate::LeaseStore). A claim whose outcome is unknown can be read back with
/// [`LeaseStore::verify`](crate::LeaseStore::verify) under the same holder token.
#[async_trait]
pub trait SlotStore: Send + Sync {
    /// Claims `instant_ms` of job `name` for `holder` with a lease of `ttl`.
    async fn claim_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<SlotClaim>;

    /// Records the round of `instant_ms` as run to its end and gives the name back; `passed_ms`
    /// is the last instant of the schedule to have come by then.
    async fn finish_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instant_ms: i64,
        passed_ms: Option<i64>,
    ) -> Result<SlotFinish>;

    /// Among `names`, the jobs with an instant to run again, in one round trip.
    async fn unfinished(&self, names: &[String]) -> Result<Vec<(String, i64)>>;

    /// Claims the unfinished `instant_ms` of `name` for its one rerun; `None` when it is not (or
    /// no longer) unfinished, already rerun, superseded, or the lease is held.
    async fn claim_rerun(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<Option<Grant>>;

    /// The slot instants on record for `name`; `None` when the name was never claimed.
    async fn last_slot(&self, name: &str) -> Result<Option<SlotRecord>>;
}

macro_rules! forward_slot_store {
    ($($ptr:ty),*) => {$(
        #[deny(clippy::missing_trait_methods)]
        #[async_trait]
        impl<S: SlotStore + ?Sized> SlotStore for $ptr {
            async fn claim_slot(
                &self,
                name: &str,
                holder: &HolderToken,
                instance: &str,
                ttl: Duration,
                instant_ms: i64,
            ) -> Result<SlotClaim> {
                (**self).claim_slot(name, holder, instance, ttl, instant_ms).await
            }
            async fn finish_slot(
                &self,
                name: &str,
                holder: &HolderToken,
                instant_ms: i64,
                passed_ms: Option<i64>,
            ) -> Result<SlotFinish> {
                (**self).finish_slot(name, holder, instant_ms, passed_ms).await
            }
            async fn unfinished(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
                (**self).unfinished(names).await
            }
            async fn claim_rerun(
                &self,
                name: &str,
                holder: &HolderToken,
                instance: &str,
                ttl: Duration,
                instant_ms: i64,
            ) -> Result<Option<Grant>> {
                (**self).claim_rerun(name, holder, instance, ttl, instant_ms).await
            }
            async fn last_slot(&self, name: &str) -> Result<Option<SlotRecord>> {
                (**self).last_slot(name).await
            }
        }
    )*};
}

forward_slot_store!(std::sync::Arc<S>, Box<S>);
