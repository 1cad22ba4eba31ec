//! Reading who holds a name, without taking part.

use std::sync::Arc;

use crate::error::Result;
use crate::store::LeaseStoreExt;
use crate::store::{LeaseInfo, LeaseStore};

/// Tells who holds a name, by the store's clock, without claiming anything.
///
/// ```
/// # async fn demo(store: impl lease_core::LeaseStore) -> lease_core::Result<()> {
/// let observer = lease_core::Observer::new(store);
/// if let Some(holder) = observer.holder("nightly-report").await? {
///     println!("{} holds term {} for {:?}", holder.instance, holder.term, holder.expires_in);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Observer {
    store: Arc<dyn LeaseStore>,
}

impl Observer {
    /// An observer over `store`, taken as [`Coordinator::builder`](crate::Coordinator::builder)
    /// takes it: the store itself, or a shared one (`Arc<S>` is a store too).
    pub fn new(store: impl LeaseStore) -> Observer {
        Self::from_arc(Arc::new(store))
    }

    /// An observer over a shared store, as
    /// [`Coordinator::builder_arc`](crate::Coordinator::builder_arc) takes it.
    pub fn from_arc(store: Arc<dyn LeaseStore>) -> Observer {
        Observer { store }
    }

    /// `true` when someone holds `name` live.
    pub async fn held(&self, name: &str) -> Result<bool> {
        Ok(self.holder(name).await?.is_some())
    }

    /// The live holder of `name`: instance, term and time left; `None` when nobody holds it.
    pub async fn holder(&self, name: &str) -> Result<Option<LeaseInfo>> {
        Ok(self.get(name).await?.filter(|info| info.live))
    }

    /// Everything the store keeps about `name`, live or not (the last term survives release and
    /// expiry); `None` when the name was never claimed.
    pub async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.store.validate_name(name)?;
        self.store.get(name).await
    }
}
