//! The backend contract: a small store of atomic lease operations.
//!
//! Every backend implements [`LeaseStore`]; [`Coordinator`](crate::Coordinator), the keeper,
//! `run` and `run_elected` are written once over it.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::store::capabilities::Capabilities;
use crate::store::error::{Error, Result};
use crate::store::membership::MembershipStore;
use crate::store::names::NamePage;
use crate::store::notify::{Topic, Wakeups};
use crate::store::partitions::PartitionStore;
use crate::store::permits::PermitStore;
use crate::store::record::{Grant, HolderToken, LeaseInfo, RenewItem, check_renewals};
use crate::store::slots::SlotStore;
use crate::store::validate::validate_ttl;

/// The backend contract: atomic lease operations, each one round trip to the store.
///
/// # The rules every store keeps
///
/// - One record per name, updated in place; its term (fencing token) starts at 1 and goes up
///   by one on every claim that changes hands. Release and expiry keep the record, so the
///   term keeps growing. (A store that takes its terms from elsewhere, such as a stream
///   sequence, says so with `consecutive_terms: false`; its terms still strictly increase. A
///   store whose server removes ended records says so with `keeps_ended_records: false`.)
/// - Expiry is judged by the **store's clock** alone. The caller's clock never decides whether
///   a lease is live.
/// - A lease is live while its expiry is in the future by the store's clock. Renew, verify and
///   release act only on a live lease held under the given holder token.
/// - Every argument is checked before any I/O, with the one check per operation in
///   [`backend::check`](crate::backend::check), and refused with `InvalidName`,
///   `InvalidTimings` or `InvalidArgument`.
/// - Errors from the driver keep their source; connection failures are `Unavailable`.
///
/// # Cancel safety
///
/// Every operation is a single atomic statement or script. If its future is dropped or times
/// out after the request was sent, the operation either took effect whole or not at all, and
/// the caller cannot tell which. The engine never guesses: after an unknown claim it reads back
/// with [`verify`](LeaseStore::verify) and adopts the claim if it took effect under its holder
/// token; an unknown renewal is simply retried (the deadline counts from the last renewal known
/// to have succeeded); release is idempotent and may be repeated; verify and get only read.
#[async_trait]
pub trait LeaseStore: Send + Sync + fmt::Debug + 'static {
    /// A short name of the backend, e.g. `"postgres"`, for logs and test output.
    fn backend(&self) -> &'static str;

    /// What this store can do.
    fn capabilities(&self) -> Capabilities;

    /// Checks at start-up that the store can carry leases (reachable, writable, clock
    /// present, schema in place), failing fast with a message that says what to fix.
    async fn available(&self) -> Result<()> {
        Ok(())
    }

    /// Claims `name` for `holder` for `ttl`, if it is free (never claimed, released, or
    /// expired by the store's clock). Returns the new term, one more than the last, and the
    /// time left; `None` when someone holds it live — including this same holder token: a
    /// claim never extends a live lease, [`renew`](LeaseStore::renew) does.
    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>>;

    /// Extends the live lease `holder` has on `name` to `ttl` from now by the store's clock.
    /// `None` when the lease is not live under this holder (lost): an expired lease is never
    /// revived, even if nobody claimed it since.
    async fn renew(&self, name: &str, holder: &HolderToken, ttl: Duration)
    -> Result<Option<Grant>>;

    /// Renews many leases at once, each exactly as [`renew`](LeaseStore::renew) would: extended
    /// to `ttl` from now by the store's clock while live under its holder token, never revived
    /// once expired.
    ///
    /// Answers one result per item, in the order given: `Ok(Some(grant))` renewed,
    /// `Ok(None)` not live under this holder (lost), `Err` when that item's outcome is unknown
    /// or failed. The outer `Err` means nothing is known of any item: an argument refused
    /// before any I/O (see [`check::renew_many`](crate::backend::check::renew_many): at most
    /// [`MAX_RENEWALS_PER_CALL`](crate::backend::MAX_RENEWALS_PER_CALL) items, no name twice,
    /// each name as `renew` checks it), or a request whose answer was lost. An empty list is
    /// answered at once, with no I/O.
    ///
    /// **Cancel safety**: as for `renew`. If the future is dropped or times out after the
    /// request was sent, some, all or none of the items may have been renewed; each renewal
    /// is atomic and keeps the rules, so the caller retries the batch like an unknown renewal,
    /// counting each lease's deadline from the last renewal known to have succeeded.
    ///
    /// The default renews one item after the other with `renew` (so a store of one's own keeps
    /// working, at one round trip per item) and answers
    /// [`Capabilities::renew_many`] `false`; a store that renews them in one request or a fixed
    /// few overrides it and says so with `renew_many: true`.
    async fn renew_many(
        &self,
        items: &[RenewItem<'_>],
        ttl: Duration,
    ) -> Result<Vec<Result<Option<Grant>>>> {
        validate_ttl(ttl)?;
        check_renewals(items, self.capabilities().max_name_bytes)?;
        let mut answers = Vec::with_capacity(items.len());
        for item in items {
            answers.push(self.renew(item.name, item.holder, ttl).await);
        }
        Ok(answers)
    }

    /// Ends the live lease `holder` has on `name`, keeping the record and its term, so the next
    /// claim gets a higher term at once. `true` when this call ended a live lease.
    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool>;

    /// The term and time left when `holder` holds `name` live; `None` otherwise.
    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>>;

    /// What the store knows of `name`; `None` when it was never claimed.
    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>>;

    /// Ends whoever's live lease on `name`: an administrator's break. **Unsafe**: the holder
    /// may still be working. The record and its term are kept, so the next claim still gets a
    /// higher term and a fenced resource refuses the old holder. `true` when a live lease was
    /// ended.
    async fn force_release(&self, name: &str) -> Result<bool> {
        let _ = name;
        Err(Error::unsupported(format!(
            "the {} store does not support force release",
            self.backend()
        )))
    }

    /// One page of the names under `prefix` this store keeps a record of (a plain lease, held
    /// or not, or permits of a counted name), in byte order: at most `limit` (1 to
    /// [`MAX_NAMES_PER_PAGE`](crate::backend::names::MAX_NAMES_PER_PAGE)), only those greater
    /// than `after` when given. [`NamePage::more`] says whether more follow. `prefix` is literal
    /// (no character is special) and may be empty; the rules are in
    /// [`backend::names`](crate::backend::names). Read-only.
    ///
    /// The default answers `Unsupported` (and
    /// [`Capabilities::list_names`] is `false`); every backend of this workspace lists.
    async fn names(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<NamePage> {
        let _ = (prefix, after, limit);
        Err(Error::unsupported(format!(
            "the {} store cannot list its names; name the leases instead",
            self.backend()
        )))
    }

    /// Counted leases, when this store has them: `Some(self)` from a store that implements
    /// [`PermitStore`]; `None` (the default) otherwise.
    /// [`Capabilities::permits`] is derived from this answer.
    fn permit_store(&self) -> Option<&dyn PermitStore> {
        None
    }

    /// Partitioned leases, when this store has them: `Some(self)` from a store that
    /// implements [`PartitionStore`]; `None` (the default) otherwise.
    /// [`Capabilities::partitions`] is derived from this answer.
    fn partition_store(&self) -> Option<&dyn PartitionStore> {
        None
    }

    /// Membership records, when this store has them: `Some(self)` from a store that
    /// implements [`MembershipStore`]; `None` (the default) otherwise.
    /// [`Capabilities::membership`] is derived from this answer.
    fn membership_store(&self) -> Option<&dyn MembershipStore> {
        None
    }

    /// Scheduler slots, when this store has them: `Some(self)` from a store that implements
    /// [`SlotStore`]; `None` (the default) otherwise. [`Capabilities::slots`] is derived from
    /// this answer.
    fn slot_store(&self) -> Option<&dyn SlotStore> {
        None
    }

    /// Hints that `topic` may change hands, when this store can push them (see
    /// [`notify`](crate::backend::notify)); `None` when it cannot, and waiters poll. Hints are
    /// never the basis of a decision: a woken waiter claims as usual. A store that answers `Some`
    /// for some topic says so with [`Capabilities::watch`].
    fn changes(&self, topic: &Topic) -> Option<Wakeups> {
        let _ = topic;
        None
    }
}

/// The error of a permit operation on a store without counted leases.
pub(crate) fn permits_unsupported(backend: &str) -> Error {
    Error::unsupported(format!(
        "the {backend} store does not support counted leases (permits)"
    ))
}

/// The error of an operation of a capability the store does not have (`what`: "partitioned
/// leases", "membership records", "scheduler slots").
pub(crate) fn lacks(backend: &str, what: &str) -> Error {
    Error::unsupported(format!("the {backend} store has no {what}"))
}

/// `store` behind an `Arc<dyn LeaseStore>`, for the builders that take any store: an
/// `Arc<dyn LeaseStore>` is taken as it is, so a shared store is not wrapped a second time
/// (which would add a pointer hop to every operation).
pub(crate) fn shared<S: LeaseStore>(store: S) -> Arc<dyn LeaseStore> {
    let mut store = Some(store);
    let any: &mut dyn Any = &mut store;
    let given = any
        .downcast_mut::<Option<Arc<dyn LeaseStore>>>()
        .and_then(Option::take);
    match (given, store) {
        (Some(arc), _) => arc,
        (None, Some(store)) => Arc::new(store),
        (None, None) => unreachable!("the store is taken only when it is an Arc<dyn LeaseStore>"),
    }
}

/// `store`'s counted leases, or the `Unsupported` error of a store without them.
pub(crate) fn permits_of<S: LeaseStore + ?Sized>(store: &S) -> Result<&dyn PermitStore> {
    let found = store.permit_store();
    found.ok_or_else(|| permits_unsupported(store.backend()))
}

/// `store`'s partitioned leases, or `Unsupported`.
pub(crate) fn partitions_of<S: LeaseStore + ?Sized>(store: &S) -> Result<&dyn PartitionStore> {
    let found = store.partition_store();
    found.ok_or_else(|| lacks(store.backend(), "partitioned leases"))
}

/// `store`'s membership records, or `Unsupported`.
pub(crate) fn membership_of<S: LeaseStore + ?Sized>(store: &S) -> Result<&dyn MembershipStore> {
    let found = store.membership_store();
    found.ok_or_else(|| lacks(store.backend(), "membership records"))
}

/// `store`'s scheduler slots, or `Unsupported`.
pub(crate) fn slots_of<S: LeaseStore + ?Sized>(store: &S) -> Result<&dyn SlotStore> {
    let found = store.slot_store();
    found.ok_or_else(|| lacks(store.backend(), "scheduler slots"))
}

macro_rules! forward_lease_store {
    ($($ptr:ty),*) => {$(
        #[deny(clippy::missing_trait_methods)]
        #[async_trait]
        impl<S: LeaseStore + ?Sized> LeaseStore for $ptr {
            fn backend(&self) -> &'static str {
                (**self).backend()
            }
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
            fn permit_store(&self) -> Option<&dyn PermitStore> {
                (**self).permit_store()
            }
            fn partition_store(&self) -> Option<&dyn PartitionStore> {
                (**self).partition_store()
            }
            fn membership_store(&self) -> Option<&dyn MembershipStore> {
                (**self).membership_store()
            }
            fn slot_store(&self) -> Option<&dyn SlotStore> {
                (**self).slot_store()
            }
            async fn available(&self) -> Result<()> {
                (**self).available().await
            }
            async fn claim(
                &self,
                name: &str,
                holder: &HolderToken,
                instance: &str,
                ttl: Duration,
            ) -> Result<Option<Grant>> {
                (**self).claim(name, holder, instance, ttl).await
            }
            async fn renew(
                &self,
                name: &str,
                holder: &HolderToken,
                ttl: Duration,
            ) -> Result<Option<Grant>> {
                (**self).renew(name, holder, ttl).await
            }
            async fn renew_many(
                &self,
                items: &[RenewItem<'_>],
                ttl: Duration,
            ) -> Result<Vec<Result<Option<Grant>>>> {
                (**self).renew_many(items, ttl).await
            }
            async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
                (**self).release(name, holder).await
            }
            async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
                (**self).verify(name, holder).await
            }
            async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
                (**self).get(name).await
            }
            async fn force_release(&self, name: &str) -> Result<bool> {
                (**self).force_release(name).await
            }
            async fn names(
                &self,
                prefix: &str,
                after: Option<&str>,
                limit: usize,
            ) -> Result<NamePage> {
                (**self).names(prefix, after, limit).await
            }
            fn changes(&self, topic: &Topic) -> Option<Wakeups> {
                (**self).changes(topic)
            }
        }
    )*};
}

forward_lease_store!(Arc<S>, Box<S>);
