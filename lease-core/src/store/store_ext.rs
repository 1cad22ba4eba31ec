//! [`LeaseStoreExt`]: the methods every store has, derived from [`LeaseStore`]'s own.

use std::time::Duration;

use crate::store::error::{Error, Result};
use crate::store::layer::{Hook, Intercept};
use crate::store::lease_store::{LeaseStore, permits_unsupported};
use crate::store::validate::{validate_name, validate_ttl};

/// Methods every store has, derived from [`LeaseStore`]'s own: no backend overrides them, so
/// they live here, implemented once for every store (`dyn LeaseStore` included).
pub trait LeaseStoreExt: LeaseStore {
    /// Refuses a name this store cannot hold: empty, longer than the store's
    /// [`max_name_bytes`](crate::Capabilities::max_name_bytes), or holding a control character;
    /// no I/O.
    fn validate_name(&self, name: &str) -> Result<()> {
        validate_name(name, self.capabilities().max_name_bytes)
    }

    /// Refuses a lease duration this store cannot keep: outside
    /// [`MIN_TTL`](crate::backend::MIN_TTL)..=[`MAX_TTL`](crate::backend::MAX_TTL), or other
    /// than the store's [`fixed_ttl`](crate::Capabilities::fixed_ttl) where it has one; no I/O.
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

    /// This store with `hook` run around every operation (see [`crate::layer`]).
    fn with_hook<H: Hook>(self, hook: H) -> Intercept<Self, H>
    where
        Self: Sized,
    {
        Intercept::new(self, hook)
    }
}

impl<S: LeaseStore + ?Sized> LeaseStoreExt for S {}
