//! [`LeaseStoreExt`]: the methods every store has, derived from [`LeaseStore`]'s own.

use std::time::Duration;

use async_trait::async_trait;

use crate::store::error::{Error, Result};
use crate::store::layer::{Hook, Intercept};
use crate::store::lease_store::{LeaseStore, permits_of, permits_unsupported};
use crate::store::names::{MAX_NAMES_PER_PAGE, NamePage};
use crate::store::permits::{PermitGrant, PermitInfo};
use crate::store::record::{Grant, HolderToken};
use crate::store::validate::{validate_name, validate_ttl};

/// Methods every store has, derived from [`LeaseStore`]'s own: no backend overrides them, so
/// they live here, implemented once for every store (`dyn LeaseStore` included).
///
/// The counted-lease operations are here as conveniences over
/// [`permit_store`](LeaseStore::permit_store): each calls the store's
/// [`PermitStore`](crate::backend::permits::PermitStore) method of the same name, or answers
/// `Unsupported` on a store without counted leases. (On a concrete store type that implements
/// `PermitStore`, import one of the two traits, not both: the names would be ambiguous.)
#[async_trait]
pub trait LeaseStoreExt: LeaseStore {
    /// Refuses a name this store cannot hold: empty, longer than the store's
    /// [`max_name_bytes`](crate::backend::Capabilities::max_name_bytes), or holding a control
    /// character; no I/O.
    fn validate_name(&self, name: &str) -> Result<()> {
        validate_name(name, self.capabilities().max_name_bytes)
    }

    /// Refuses a lease duration this store cannot keep: outside
    /// [`MIN_TTL`](crate::backend::MIN_TTL)..=[`MAX_TTL`](crate::backend::MAX_TTL), or other than
    /// the store's [`fixed_ttl`](crate::backend::Capabilities::fixed_ttl) where it has one; no I/O.
    fn validate_ttl(&self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl)?;
        match self.capabilities().fixed_ttl {
            Some(fixed) if fixed != ttl => Err(Error::invalid_timings(format!(
                "this {} store keeps every lease for exactly {fixed:?}; asked for {ttl:?}",
                self.backend()
            ))),
            _ => Ok(()),
        }
    }

    /// The error of a permit operation on a store without counted leases.
    fn permits_unsupported(&self) -> Error {
        permits_unsupported(self.backend())
    }

    /// [`PermitStore::claim_permit`](crate::backend::permits::PermitStore::claim_permit) through
    /// [`permit_store`](LeaseStore::permit_store); `Unsupported` on a store without counted
    /// leases.
    async fn claim_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<PermitGrant>> {
        permits_of(self)?
            .claim_permit(name, permits, holder, instance, ttl)
            .await
    }

    /// [`PermitStore::renew_permit`](crate::backend::permits::PermitStore::renew_permit) through
    /// [`permit_store`](LeaseStore::permit_store); `Unsupported` on a store without counted
    /// leases.
    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        permits_of(self)?
            .renew_permit(name, permit, holder, ttl)
            .await
    }

    /// [`PermitStore::release_permit`](crate::backend::permits::PermitStore::release_permit)
    /// through [`permit_store`](LeaseStore::permit_store); `Unsupported` on a store without counted
    /// leases.
    async fn release_permit(&self, name: &str, permit: u32, holder: &HolderToken) -> Result<bool> {
        permits_of(self)?.release_permit(name, permit, holder).await
    }

    /// [`PermitStore::verify_permit`](crate::backend::permits::PermitStore::verify_permit) through
    /// [`permit_store`](LeaseStore::permit_store); `Unsupported` on a store without counted
    /// leases.
    async fn verify_permit(&self, name: &str, holder: &HolderToken) -> Result<Option<PermitGrant>> {
        permits_of(self)?.verify_permit(name, holder).await
    }

    /// [`PermitStore::read_back_permit`](crate::backend::permits::PermitStore::read_back_permit)
    /// through [`permit_store`](LeaseStore::permit_store); `Unsupported` on a store without counted
    /// leases.
    async fn read_back_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
    ) -> Result<Option<PermitGrant>> {
        permits_of(self)?
            .read_back_permit(name, permits, holder)
            .await
    }

    /// [`PermitStore::permits`](crate::backend::permits::PermitStore::permits) through
    /// [`permit_store`](LeaseStore::permit_store); `Unsupported` on a store without counted
    /// leases.
    async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
        permits_of(self)?.permits(name).await
    }

    /// Every name under `prefix` the store keeps a record of, in byte order, up to `max` of
    /// them: [`names`](LeaseStore::names) page after page (one call per
    /// [`MAX_NAMES_PER_PAGE`] names). [`NamePage::more`] is `true` when names past the first
    /// `max` were left out. The pages are read one after the other, so this is not a snapshot:
    /// a name claimed or removed meanwhile may or may not show.
    async fn names_upto(&self, prefix: &str, max: usize) -> Result<NamePage> {
        if max == 0 {
            let first = self.names(prefix, None, 1).await?;
            return Ok(NamePage {
                names: Vec::new(),
                more: !first.names.is_empty(),
            });
        }
        let mut names = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let want = (max - names.len()).clamp(1, MAX_NAMES_PER_PAGE);
            let page = self.names(prefix, after.as_deref(), want).await?;
            let empty = page.names.is_empty();
            names.extend(page.names);
            if !page.more || empty {
                return Ok(NamePage { names, more: false });
            }
            if names.len() >= max {
                names.truncate(max);
                return Ok(NamePage { names, more: true });
            }
            after = names.last().map(|n| n.name.clone());
        }
    }

    /// This store with `hook` run around every operation (see [`crate::layer`]).
    fn with_hook<H: Hook>(self, hook: H) -> Intercept<Self, H>
    where
        Self: Sized,
    {
        Intercept::new(self, hook)
    }
}

impl<S: LeaseStore + ?Sized> LeaseStoreExt for S {}
