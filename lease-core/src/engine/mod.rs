//! The engine: the coordinator that claims and closes terms, the term and its keeper, running
//! work under a term, campaigning, waiting for a held name, observing a name, and the
//! leadership board.
//!
//! It builds on the store contract (`crate::store`), `clock`, `timings` and `telemetry`; the
//! group worker and the scheduler build on it.

pub(crate) mod campaign;
mod context;
pub(crate) mod coordinator;
pub(crate) mod leadership;
pub(crate) mod observer;
pub(crate) mod renewer;
pub(crate) mod run;
pub(crate) mod step_down;
pub(crate) mod term;
pub mod wait;
