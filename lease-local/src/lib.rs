//! In-process leases: a [`MemoryStore`] on tokio time with real expiry, and [`Local`], the
//! coordinator whose terms never expire.
//!
//! `MemoryStore` keeps the full store contract in one process — expiry by its clock (tokio's,
//! so tests run in paused time), terms that grow across release and expiry — and is what the
//! engine is tested on. [`Local`] is for single-node mode: the first `try_acquire` of a name
//! wins and holds it until resigned, exactly as if there were no coordination.
//!
//! ```
//! use lease_local::Local;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lease_core::Result<()> {
//! let coordinator = Local::coordinator()?;
//! let term = coordinator.try_acquire("migrations").await?;
//! assert_eq!(term.token(), 1);
//! assert!(coordinator.try_acquire("migrations").await.is_err());
//! coordinator.close().await?;
//! # Ok(()) }
//! ```

mod leases;
mod membership;
mod partitions;
mod permits;
mod polling;
mod records;
mod slots;
mod store;

pub use store::MemoryStore;

use lease_core::{Coordinator, Result};

/// Single-node mode: a coordinator over a private [`MemoryStore`] whose terms never expire.
#[derive(Debug, Clone, Copy)]
pub struct Local;

impl Local {
    /// A coordinator whose terms never expire: the first `try_acquire` of a name wins, and
    /// holds it until resigned or closed. (It cannot fail with the defaults; the `Result` is
    /// the builder's.)
    pub fn coordinator() -> Result<Coordinator> {
        Self::coordinator_over(MemoryStore::never_expiring())
    }

    /// A coordinator over `store` with the default timings, labelled `local`.
    pub fn coordinator_over(store: MemoryStore) -> Result<Coordinator> {
        Coordinator::builder(store).instance("local").build()
    }
}
