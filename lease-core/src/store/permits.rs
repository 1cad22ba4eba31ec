//! Counted leases: at most N holders of a name at once, each with a fencing token of its own.
//!
//! A counted name has permits `0, 1, …`; each permit is a lease of its own — claimed, renewed
//! by the keeper, lost at the local deadline, released on resign, expired by the store's
//! clock — and a [`Term`](crate::Term) holds one. The rules, the same on every backend:
//!
//! - **At most N.** A claim for a name with `permits = N` is granted only while fewer than N
//!   of the name's permits are live by the store's clock, and takes the lowest free permit
//!   below N. Counting and taking are one atomic step, so racing claims never grant the
//!   (N+1)-th.
//! - **One token sequence per name.** Every grant's term is one more than the greatest term
//!   ever issued for the name, across all its permits: tokens strictly increase per name (a
//!   downstream system can order every holder's writes), and a permit that changes hands never
//!   repeats a token. Renewal keeps the term; release and expiry keep the name's sequence.
//! - **Changing N** applies to new claims only: nobody is revoked. Lowered from 5 to 3 with 5
//!   holders, the 5 keep their permits until they end, and no claim is granted until fewer
//!   than 3 are live. Raised, new claims take the free permits up to the new N.
//! - **No holder twice.** A claim under a holder token that already holds a live permit of the name
//!   is answered "full" (`None`); the coordinator mints a token per claim, and after an unknown
//!   outcome reads back with
//!   [`read_back_permit`](crate::backend::permits::PermitStore::read_back_permit), which finds the
//!   permit by token (and adopts it only if the claim's count was checked for it), so one acquire
//!   never ends up with two permits.
//! - **A plain lease and a counted name do not mix.** The permits of a name are kept apart
//!   from its plain lease (`claim`), so holding `"import"` plainly and by permit are two
//!   different things; use one or the other for a name.
//!
//! ```
//! use lease_core::{Coordinator, Permits};
//! use lease_local::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lease_core::Result<()> {
//! let coordinator = Coordinator::new(MemoryStore::new())?;
//! let import = Permits::new("import", 2)?;
//! let first = coordinator.try_acquire(&import).await?;
//! let second = coordinator.try_acquire(&import).await?;
//! assert_eq!((first.permit(), second.permit()), (Some(0), Some(1)));
//! assert!(second.token() > first.token());
//! let third = coordinator.try_acquire(&import).await;
//! assert_eq!(third.unwrap_err().kind(), lease_core::ErrorKind::Held);
//! coordinator.close().await
//! # }
//! ```

use std::time::Duration;

use async_trait::async_trait;

use crate::store::error::{Error, Result};
use crate::store::record::{Grant, HolderToken};

/// The most permits a counted name may have: every claim counts the name's live permits, so
/// the bound keeps that count one small read.
pub const MAX_PERMITS: u32 = 1024;

/// Refuses a permit count no store takes: 0, or more than [`MAX_PERMITS`].
pub(crate) fn check_count(count: u32) -> Result<()> {
    if count == 0 {
        return Err(Error::invalid_argument(
            "a counted lease needs at least 1 permit; asked for 0",
        ));
    }
    if count > MAX_PERMITS {
        return Err(Error::invalid_argument(format!(
            "a counted lease takes at most {MAX_PERMITS} permits; asked for {count}"
        )));
    }
    Ok(())
}

/// What a counted claim won: which permit, and the lease on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitGrant {
    /// The permit's index, below the count the claim asked for.
    pub permit: u32,
    /// The fencing token and time left.
    pub grant: Grant,
}

/// What anyone can learn about one permit of a counted name (the holder token excepted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitInfo {
    /// The permit's index.
    pub permit: u32,
    /// The instance label of its last holder.
    pub instance: String,
    /// The last term issued for this permit.
    pub term: u64,
    /// `true` when the permit is held live by the store's clock.
    pub live: bool,
    /// Time left by the store's clock; zero when not live.
    pub expires_in: Duration,
}

/// Counted leases: the permit operations of a store that has them, reached through
/// [`LeaseStore::permit_store`](crate::LeaseStore::permit_store).
///
/// A store implements it when it can keep counted names, and answers `Some(self)` from
/// `permit_store`; [`Capabilities::permits`](crate::backend::Capabilities::permits) is derived from
/// that answer. Every rule of the [module docs](self) holds for every implementation.
///
/// Like the other capability traits it has no [`LeaseStore`](crate::LeaseStore) supertrait,
/// which matters most here: [`LeaseStoreExt`](crate::backend::LeaseStoreExt) offers every
/// store conveniences of the same names (through the accessor), so a `&dyn PermitStore` has
/// exactly one method of each name.
#[async_trait]
pub trait PermitStore: Send + Sync {
    /// Claims one permit of the counted name `name` for `holder`, when fewer than `permits`
    /// of its permits are live by the store's clock: the lowest free permit below `permits`,
    /// with a term one more than the greatest ever issued for the name across its permits.
    /// `None` when the name is full, or when `holder` already holds a live permit of it. The
    /// count and the claim are one atomic step (see the [module docs](self) for every rule).
    async fn claim_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<PermitGrant>>;

    /// Extends the live permit `permit` of `name` that `holder` holds, keeping its term, as
    /// [`renew`](crate::LeaseStore::renew) does a lease. `None` when it is not live under
    /// `holder`.
    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>>;

    /// Ends the live permit `permit` of `name` that `holder` holds, keeping the name's term
    /// sequence. `true` when this call ended a live permit.
    async fn release_permit(&self, name: &str, permit: u32, holder: &HolderToken) -> Result<bool>;

    /// The live permit of `name` that `holder` holds, found by the token alone; `None` when it
    /// holds none. A term checks with it that it still holds its permit; the read-back after a
    /// claim whose outcome is unknown goes through
    /// [`read_back_permit`](PermitStore::read_back_permit).
    async fn verify_permit(&self, name: &str, holder: &HolderToken) -> Result<Option<PermitGrant>>;

    /// The read-back after a [`claim_permit`](PermitStore::claim_permit) of one of `permits`
    /// permits of `name` whose outcome is unknown (its answer was lost, or it timed out): the
    /// live permit `holder` holds when that claim took effect *and* the claim's "at most
    /// `permits`" rule was checked for it; `None` otherwise. The coordinator adopts what it
    /// returns, so a permit this answers must be one nothing can still take back.
    ///
    /// The default is [`verify_permit`](PermitStore::verify_permit), which is right for a
    /// store whose claim counts the live permits and takes one in a single atomic step: a
    /// permit found under the claim's token was counted when it was taken. A store that counts
    /// and takes in separate steps (NATS) counts again here.
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
    async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::target::{Permits, Target};

    #[test]
    fn counts_are_checked() {
        assert!(Permits::new("a", 0).is_err());
        assert!(Permits::new("a", MAX_PERMITS + 1).is_err());
        let p = Permits::new("a", 3).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.name(), p.count()), ("a", 3));
        let t: Target = (&p).into();
        assert_eq!(t.permits(), Some(3));
        assert_eq!(Target::from("a").permits(), None);
        assert_eq!(t.to_string(), "a (3 permits)");
    }
}
