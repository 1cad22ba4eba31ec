//! Distributed leases and leader election over the databases you already run.
//!
//! A **lease** is a name that at most one healthy process holds at a time. Each holding is a
//! [`Term`] with a **fencing token** that strictly increases every time the name changes hands,
//! so a downstream system can refuse a stale holder. This crate holds the parts written once for
//! every backend: the store contract ([`LeaseStore`]), the [`Coordinator`] that claims and
//! keeps terms, [`Term::run`] and [`Coordinator::run_elected`], the [`Observer`], the
//! [`Timings`] and their safety rules, and the
//! [`PollingLeaser`](backend::polling::PollingLeaser). Backends live in their own
//! crates (`lease-local`, `lease-sql`, …) and provide a store.
//!
//! A **counted lease** ([`Permits`]) lets at most N processes hold a name at once, each with a
//! permit and a token of its own from one strictly increasing sequence per name: pass a
//! `Permits` wherever a name is taken (`try_acquire`, `acquire`, `run`, `run_elected`), on a
//! store whose [`Capabilities::permits`](backend::Capabilities::permits) is true. The rules are in
//! [`backend::permits`].
//!
//! ```
//! use std::time::Duration;
//! use lease_core::{Coordinator, ErrorKind, Timings};
//! use lease_local::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lease_core::Result<()> {
//! let store = MemoryStore::new();
//! let timings = Timings::from_lease(Duration::from_secs(3))?;
//! let a = Coordinator::builder(store.clone()).instance("a").timings(timings).build()?;
//! let b = Coordinator::builder(store).instance("b").timings(timings).build()?;
//!
//! let term = a.try_acquire("compactor").await?;
//! assert_eq!(b.try_acquire("compactor").await.unwrap_err().kind(), ErrorKind::Held);
//!
//! // Fence downstream writes with the token: `UPDATE … WHERE fence < $token`.
//! let first = term.token();
//! term.resign().await?;
//!
//! let next = b.try_acquire("compactor").await?;
//! assert!(next.token() > first);
//! b.close().await?;
//! # Ok(()) }
//! ```
//!
//! # Guarantees and their limits
//!
//! - Expiry is judged by the store's clock only. A process clock is used for local deadlines
//!   alone (monotonic, and counting through suspend on Linux).
//! - A holder's term ends (`Lost`) when no renewal has succeeded within the local deadline of
//!   the start of the last one that did; with valid [`Timings`] that is at least the step-down
//!   grace plus a drift margin before the store lets anyone else claim.
//! - Fencing tokens are only as durable as the store: see each backend's documentation.
//! - A process paused for longer than the lease (a long GC pause, a stopped VM) can wake with
//!   work in flight after its lease has passed to another holder. Only fencing protects a
//!   downstream system against that: pass [`Term::token`] along and let the system refuse
//!   lower tokens.

pub mod backend;
mod engine;
pub mod group;
pub mod scheduler;
mod store;
pub mod telemetry;
mod timings;

pub(crate) use backend::clock;
pub use store::layer;

pub use engine::coordinator::Coordinator;
pub use engine::leadership::Leadership;
pub use engine::observer::Observer;
pub use engine::term::Term;
pub use group::assignment::Assignment;
pub use group::handle::GroupWorker;
pub use scheduler::handle::Scheduler;
pub use scheduler::job::Job;
pub use scheduler::schedule::Schedule;
pub use store::error::{Error, ErrorKind, Result};
pub use store::lease_store::LeaseStore;
pub use store::target::Permits;
pub use timings::Timings;

/// What comes with a [`Coordinator`], a [`Term`] and an [`Observer`]: the builders, what a
/// coordinator claims ([`Target`](coordinator::Target): a name or one permit of a counted name),
/// what to do when work fails or a step-down cannot finish, and the watch an observer hands out.
pub mod coordinator {
    pub use crate::engine::campaign::{
        FIRST_CLAIM_SPREAD_MIN, FIRST_CLAIM_SPREAD_ROUND_TRIPS, first_claim_window,
    };
    pub use crate::engine::coordinator::{CoordinatorBuilder, OnWorkError, Renewals};
    pub use crate::engine::observer::{HolderChange, HolderWatch};
    pub use crate::engine::step_down::{
        FAIL_EXIT_CODE, FailAction, StepDownFailure, default_fail_action,
    };
    pub use crate::store::target::Target;
    pub use crate::timings::TimingsBuilder;

    /// Test tools of the coordinator (feature `test-util`).
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub mod testing {
        /// Deliberately broken, for proving the renewer's tests: on the calling thread, a
        /// batch's deadlines count from its answer instead of its start.
        pub use crate::engine::renewer::testing::stamp_batches_at_answer;
    }
}

/// The README's examples, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
