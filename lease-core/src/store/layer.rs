//! Layers: behaviour wrapped once around every operation of a store, instead of a wrapper that
//! forwards each method by hand.
//!
//! An [`Intercept<S, H>`](Intercept) is a store that runs the [`Hook`] `H` around each of
//! `S`'s operations: those of [`LeaseStore`], of the capability traits ([`PermitStore`],
//! [`PartitionStore`], [`MembershipStore`], [`SlotStore`]) and of [`PollingStore`]. It answers
//! each capability accessor ([`LeaseStore::permit_store`] and the others) with itself exactly
//! when `S` answers with its own, so an operation reached through the accessor runs through
//! the hook too. The hook sees which operation runs ([`Call`]) and the inner store's answer as a
//! future it may await, delay, cut short, replace or never start. Everything that is not an
//! operation — the backend's name, its [`Capabilities`] — is the inner store's, so a wrapper
//! cannot claim to be what its store is not, and a method added to a store trait is forwarded
//! here (each impl is `#[deny(clippy::missing_trait_methods)]`) or the workspace does not
//! build.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use lease_core::layer::{Answer, Call, Hook, Intercept};
//! use lease_core::LeaseStore;
//! use lease_core::backend::LeaseStoreExt;
//! use lease_local::MemoryStore;
//!
//! /// Counts the operations that reach the store.
//! #[derive(Debug, Default)]
//! struct Count(AtomicU64);
//!
//! impl Hook for Count {
//!     fn around<'a, T: Send + 'static>(&'a self, _call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
//!         self.0.fetch_add(1, Ordering::Relaxed);
//!         op
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lease_core::Result<()> {
//! let store = MemoryStore::new().with_hook(Count::default());
//! assert_eq!(store.get("jobs").await?, None);
//! assert_eq!(store.hook().0.load(Ordering::Relaxed), 1);
//! assert_eq!(store.capabilities(), MemoryStore::new().capabilities());
//! # Ok(()) }
//! ```

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;

use crate::store::capabilities::Capabilities;
use crate::store::error::Result;
use crate::store::lease_store::{LeaseStore, membership_of, partitions_of, permits_of, slots_of};
use crate::store::membership::{Member, MembershipStore};
use crate::store::names::NamePage;
use crate::store::notify::{Topic, Wakeups};
use crate::store::partitions::{PartitionLease, PartitionStore};
use crate::store::permits::{PermitGrant, PermitInfo, PermitStore};
use crate::store::polling::PollingStore;
use crate::store::record::{Grant, HolderToken, LeaseInfo, RenewItem};
use crate::store::slots::{SlotClaim, SlotFinish, SlotRecord, SlotStore};

pub use crate::store::operation::Operation;

/// What a hook learns of the operation it wraps.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Call<'a> {
    /// Which operation.
    pub operation: Operation,
    /// The name it is about: the lease or job name, the group, or the service; the first of
    /// the names for [`Operation::Unfinished`]; the prefix for [`Operation::Names`]; empty for
    /// [`Operation::Available`].
    pub name: &'a str,
    /// Who asks, where the operation names one: the instance label of a claim, the owner id of
    /// a partition operation, the node id of a membership operation.
    pub who: Option<&'a str>,
    /// The lease duration asked for, where the operation takes one.
    pub ttl: Option<Duration>,
    /// The partitions named, for partition operations (one for an acquire).
    pub partitions: &'a [u32],
    /// The leases named, for [`Operation::RenewMany`] (whose `name` is the first of them).
    pub renewals: &'a [RenewItem<'a>],
}

impl<'a> Call<'a> {
    fn new(operation: Operation, name: &'a str) -> Call<'a> {
        Call {
            operation,
            name,
            who: None,
            ttl: None,
            partitions: &[],
            renewals: &[],
        }
    }

    fn who(mut self, who: &'a str) -> Call<'a> {
        self.who = Some(who);
        self
    }

    fn ttl(mut self, ttl: Duration) -> Call<'a> {
        self.ttl = Some(ttl);
        self
    }

    fn partitions(mut self, partitions: &'a [u32]) -> Call<'a> {
        self.partitions = partitions;
        self
    }
}

/// An operation's answer, not yet awaited.
pub type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// Behaviour run around every operation of an [`Intercept`]ed store.
///
/// `around` gets the inner store's operation as `op`, not yet started: return it as it is to
/// pass the call through, or a future that awaits it with something before or after (a delay,
/// a count, a timeout), or one that never awaits it (a fault, a lie). `T` is the operation's
/// answer type (e.g. `Option<Grant>` for a renewal); a hook that must look at it or answer in
/// the store's place for one operation uses [`peek`] and [`answer_as`].
pub trait Hook: Send + Sync + fmt::Debug + 'static {
    /// Runs `op`, the inner store's operation described by `call`, or not.
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T>;

    /// The hints a waiter on `topic` gets, from the inner store's `hints` (see
    /// [`LeaseStore::changes`]): passed on unchanged unless the hook cuts or replaces them (a
    /// fault layer's cut listener).
    fn changes(&self, topic: &Topic, hints: Option<Wakeups>) -> Option<Wakeups> {
        let _ = topic;
        hints
    }
}

/// `value` as the answer type `T`, when it is one: `answer_as::<T, _>(Some(grant))` is
/// `Some(Some(grant))` in a hook whose `T` is `Option<Grant>`, and `None` in any other.
pub fn answer_as<T: 'static, U: 'static>(value: U) -> Option<T> {
    let boxed: Box<dyn Any> = Box::new(value);
    boxed.downcast::<T>().ok().map(|b| *b)
}

/// The answer `answer` as a `U`, when it is one (e.g. `peek::<_, Option<PartitionLease>>`).
pub fn peek<T: 'static, U: 'static>(answer: &T) -> Option<&U> {
    (answer as &dyn Any).downcast_ref::<U>()
}

/// A store wrapped in a [`Hook`]: every operation of `S` runs through `H::around`.
///
/// It reaches a capability of `S` (counted leases, partitions, membership, slots) through
/// `S`'s accessor, answers that accessor as `S` does, and reports `S`'s backend name and
/// capabilities unchanged.
#[derive(Debug, Clone)]
pub struct Intercept<S, H> {
    inner: S,
    hook: H,
}

impl<S, H> Intercept<S, H> {
    /// `inner` with `hook` around its operations.
    pub fn new(inner: S, hook: H) -> Intercept<S, H> {
        Intercept { inner, hook }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }

    /// The wrapped store, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<S: LeaseStore, H: Hook> LeaseStore for Intercept<S, H> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn permit_store(&self) -> Option<&dyn PermitStore> {
        self.inner.permit_store().map(|_| self as &dyn PermitStore)
    }

    fn partition_store(&self) -> Option<&dyn PartitionStore> {
        self.inner
            .partition_store()
            .map(|_| self as &dyn PartitionStore)
    }

    fn membership_store(&self) -> Option<&dyn MembershipStore> {
        self.inner
            .membership_store()
            .map(|_| self as &dyn MembershipStore)
    }

    fn slot_store(&self) -> Option<&dyn SlotStore> {
        self.inner.slot_store().map(|_| self as &dyn SlotStore)
    }

    async fn available(&self) -> Result<()> {
        let call = Call::new(Operation::Available, "");
        self.hook
            .around(call, Box::pin(self.inner.available()))
            .await
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        let call = Call::new(Operation::Claim, name).who(instance).ttl(ttl);
        let op = self.inner.claim(name, holder, instance, ttl);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        let call = Call::new(Operation::Renew, name).ttl(ttl);
        let op = self.inner.renew(name, holder, ttl);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn renew_many(
        &self,
        items: &[RenewItem<'_>],
        ttl: Duration,
    ) -> Result<Vec<Result<Option<Grant>>>> {
        let first = items.first().map_or("", |i| i.name);
        let mut call = Call::new(Operation::RenewMany, first).ttl(ttl);
        call.renewals = items;
        let op = self.inner.renew_many(items, ttl);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        let call = Call::new(Operation::Release, name);
        let op = self.inner.release(name, holder);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        let call = Call::new(Operation::Verify, name);
        let op = self.inner.verify(name, holder);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        let call = Call::new(Operation::Get, name);
        self.hook.around(call, Box::pin(self.inner.get(name))).await
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        let call = Call::new(Operation::ForceRelease, name);
        let op = self.inner.force_release(name);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn names(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<NamePage> {
        let call = Call::new(Operation::Names, prefix);
        let op = self.inner.names(prefix, after, limit);
        self.hook.around(call, Box::pin(op)).await
    }

    fn changes(&self, topic: &Topic) -> Option<Wakeups> {
        self.hook.changes(topic, self.inner.changes(topic))
    }
}

/// The permit operations of an `Intercept`: the inner store's (its
/// [`permit_store`](LeaseStore::permit_store)), each run through the hook. Reached through
/// [`LeaseStore::permit_store`] only when the inner store has counted leases; called on a store
/// without them, each answers `Unsupported`.
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<S: LeaseStore, H: Hook> PermitStore for Intercept<S, H> {
    async fn claim_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<PermitGrant>> {
        let call = Call::new(Operation::ClaimPermit, name)
            .who(instance)
            .ttl(ttl);
        let op = permits_of(&self.inner)?.claim_permit(name, permits, holder, instance, ttl);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        let call = Call::new(Operation::RenewPermit, name).ttl(ttl);
        let op = permits_of(&self.inner)?.renew_permit(name, permit, holder, ttl);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn release_permit(&self, name: &str, permit: u32, holder: &HolderToken) -> Result<bool> {
        let call = Call::new(Operation::ReleasePermit, name);
        let op = permits_of(&self.inner)?.release_permit(name, permit, holder);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn verify_permit(&self, name: &str, holder: &HolderToken) -> Result<Option<PermitGrant>> {
        let call = Call::new(Operation::VerifyPermit, name);
        let op = permits_of(&self.inner)?.verify_permit(name, holder);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn read_back_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
    ) -> Result<Option<PermitGrant>> {
        let call = Call::new(Operation::ReadBackPermit, name);
        let op = permits_of(&self.inner)?.read_back_permit(name, permits, holder);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
        let call = Call::new(Operation::Permits, name);
        self.hook
            .around(call, Box::pin(permits_of(&self.inner)?.permits(name)))
            .await
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<S: LeaseStore, H: Hook> PartitionStore for Intercept<S, H> {
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<PartitionLease>> {
        let one = [partition];
        let call = Call::new(Operation::AcquirePartition, group)
            .who(owner)
            .ttl(ttl)
            .partitions(&one);
        let op = partitions_of(&self.inner)?.acquire_partition(group, partition, owner, ttl);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<PartitionLease>> {
        let call = Call::new(Operation::RenewPartitions, group)
            .who(owner)
            .ttl(ttl)
            .partitions(partitions);
        let op = partitions_of(&self.inner)?.renew_partitions(group, partitions, owner, ttl);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn release_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> Result<usize> {
        let call = Call::new(Operation::ReleasePartitions, group)
            .who(owner)
            .partitions(partitions);
        let op = partitions_of(&self.inner)?.release_partitions(group, partitions, owner);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        let call = Call::new(Operation::Owners, group);
        self.hook
            .around(call, Box::pin(partitions_of(&self.inner)?.owners(group)))
            .await
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<S: LeaseStore, H: Hook> MembershipStore for Intercept<S, H> {
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member> {
        let call = Call::new(Operation::Heartbeat, service).who(node).ttl(ttl);
        let op = membership_of(&self.inner)?.heartbeat(service, node, address, ttl, groups);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        let call = Call::new(Operation::Members, service);
        self.hook
            .around(call, Box::pin(membership_of(&self.inner)?.members(service)))
            .await
    }

    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        let call = Call::new(Operation::Leave, service).who(node);
        let op = membership_of(&self.inner)?.leave(service, node);
        self.hook.around(call, Box::pin(op)).await
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<S: LeaseStore, H: Hook> SlotStore for Intercept<S, H> {
    async fn claim_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<SlotClaim> {
        let call = Call::new(Operation::ClaimSlot, name).who(instance).ttl(ttl);
        let op = slots_of(&self.inner)?.claim_slot(name, holder, instance, ttl, instant_ms);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn finish_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instant_ms: i64,
        passed_ms: Option<i64>,
    ) -> Result<SlotFinish> {
        let call = Call::new(Operation::FinishSlot, name);
        let op = slots_of(&self.inner)?.finish_slot(name, holder, instant_ms, passed_ms);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn unfinished(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
        let first = names.first().map_or("", String::as_str);
        let call = Call::new(Operation::Unfinished, first);
        self.hook
            .around(call, Box::pin(slots_of(&self.inner)?.unfinished(names)))
            .await
    }

    async fn claim_rerun(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<Option<Grant>> {
        let call = Call::new(Operation::ClaimRerun, name)
            .who(instance)
            .ttl(ttl);
        let op = slots_of(&self.inner)?.claim_rerun(name, holder, instance, ttl, instant_ms);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn last_slot(&self, name: &str) -> Result<Option<SlotRecord>> {
        let call = Call::new(Operation::LastSlot, name);
        self.hook
            .around(call, Box::pin(slots_of(&self.inner)?.last_slot(name)))
            .await
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<S: PollingStore, H: Hook> PollingStore for Intercept<S, H> {
    async fn try_acquire(
        &self,
        name: &str,
        holder: &[u8],
        ttl: Duration,
    ) -> Result<(bool, Vec<u8>)> {
        let call = Call::new(Operation::PollAcquire, name).ttl(ttl);
        let op = self.inner.try_acquire(name, holder, ttl);
        self.hook.around(call, Box::pin(op)).await
    }

    async fn release(&self, name: &str, holder: &[u8]) -> Result<()> {
        let call = Call::new(Operation::PollRelease, name);
        let op = PollingStore::release(&self.inner, name, holder);
        self.hook.around(call, Box::pin(op)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_convert_only_to_their_own_type() {
        let grant = Grant {
            term: 3,
            expires_in: Duration::from_secs(1),
        };
        assert_eq!(
            answer_as::<Option<Grant>, _>(Some(grant)),
            Some(Some(grant))
        );
        assert_eq!(answer_as::<bool, _>(Some(grant)), None);
        assert_eq!(peek::<_, usize>(&7usize), Some(&7));
        assert_eq!(peek::<_, bool>(&7usize), None);
        assert!(Operation::Renew.writes());
        assert!(!Operation::Get.writes());
        assert_eq!(Operation::RenewPartitions.to_string(), "renew_partitions");
    }
}
