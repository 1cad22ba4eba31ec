//! The backend contract: a small store of atomic lease operations.
//!
//! Every backend implements [`LeaseStore`]; [`Coordinator`](crate::Coordinator), the keeper,
//! `run` and `run_elected` are written once over it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::store::capabilities::Capabilities;
use crate::store::error::{Error, Result};
use crate::store::notify::{Topic, Wakeups};
use crate::store::permits::{PermitGrant, PermitInfo};
use crate::store::record::{Grant, HolderToken, LeaseInfo};

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

    /// Claims one permit of the counted name `name` for `holder`, when fewer than `permits`
    /// of its permits are live by the store's clock: the lowest free permit below `permits`,
    /// with a term one more than the greatest ever issued for the name across its permits.
    /// `None` when the name is full, or when `holder` already holds a live permit of it. The
    /// count and the claim are one atomic step (see [`permits`](crate::permits) for every
    /// rule). Unsupported unless [`Capabilities::permits`].
    async fn claim_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<PermitGrant>> {
        let _ = (name, permits, holder, instance, ttl);
        Err(permits_unsupported(self.backend()))
    }

    /// Extends the live permit `permit` of `name` that `holder` holds, keeping its term, as
    /// [`renew`](LeaseStore::renew) does a lease. `None` when it is not live under `holder`.
    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        let _ = (name, permit, holder, ttl);
        Err(permits_unsupported(self.backend()))
    }

    /// Ends the live permit `permit` of `name` that `holder` holds, keeping the name's term
    /// sequence. `true` when this call ended a live permit.
    async fn release_permit(&self, name: &str, permit: u32, holder: &HolderToken) -> Result<bool> {
        let _ = (name, permit, holder);
        Err(permits_unsupported(self.backend()))
    }

    /// The live permit of `name` that `holder` holds, found by the token alone; `None` when it
    /// holds none. A term checks with it that it still holds its permit; the read-back after a
    /// claim whose outcome is unknown goes through
    /// [`read_back_permit`](LeaseStore::read_back_permit).
    async fn verify_permit(&self, name: &str, holder: &HolderToken) -> Result<Option<PermitGrant>> {
        let _ = (name, holder);
        Err(permits_unsupported(self.backend()))
    }

    /// The read-back after a [`claim_permit`](LeaseStore::claim_permit) of one of `permits`
    /// permits of `name` whose outcome is unknown (its answer was lost, or it timed out): the
    /// live permit `holder` holds when that claim took effect *and* the claim's "at most
    /// `permits`" rule was checked for it; `None` otherwise. The coordinator adopts what it
    /// returns, so a permit this answers must be one nothing can still take back.
    ///
    /// The default is [`verify_permit`](LeaseStore::verify_permit), which is right for a store
    /// whose claim counts the live permits and takes one in a single atomic step: a permit
    /// found under the claim's token was counted when it was taken. A store that counts and
    /// takes in separate steps (NATS) counts again here.
    async fn read_back_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
    ) -> Result<Option<PermitGrant>> {
        let _ = permits;
        self.verify_permit(name, holder).await
    }

    /// Every permit record of `name`, live or not, by permit index; empty when the name was
    /// never claimed counted.
    async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
        let _ = name;
        Err(permits_unsupported(self.backend()))
    }

    /// Hints that `topic` may change hands, when this store can push them (see
    /// [`notify`](crate::notify)); `None` when it cannot, and waiters poll. Hints are never the
    /// basis of a decision: a woken waiter claims as usual. A store that answers `Some` for
    /// some topic says so with [`Capabilities::watch`].
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
            async fn claim_permit(
                &self,
                name: &str,
                permits: u32,
                holder: &HolderToken,
                instance: &str,
                ttl: Duration,
            ) -> Result<Option<PermitGrant>> {
                (**self).claim_permit(name, permits, holder, instance, ttl).await
            }
            async fn renew_permit(
                &self,
                name: &str,
                permit: u32,
                holder: &HolderToken,
                ttl: Duration,
            ) -> Result<Option<Grant>> {
                (**self).renew_permit(name, permit, holder, ttl).await
            }
            async fn release_permit(
                &self,
                name: &str,
                permit: u32,
                holder: &HolderToken,
            ) -> Result<bool> {
                (**self).release_permit(name, permit, holder).await
            }
            async fn verify_permit(
                &self,
                name: &str,
                holder: &HolderToken,
            ) -> Result<Option<PermitGrant>> {
                (**self).verify_permit(name, holder).await
            }
            async fn read_back_permit(
                &self,
                name: &str,
                permits: u32,
                holder: &HolderToken,
            ) -> Result<Option<PermitGrant>> {
                (**self).read_back_permit(name, permits, holder).await
            }
            async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
                (**self).permits(name).await
            }
            fn changes(&self, topic: &Topic) -> Option<Wakeups> {
                (**self).changes(topic)
            }
        }
    )*};
}

forward_lease_store!(Arc<S>, Box<S>);
