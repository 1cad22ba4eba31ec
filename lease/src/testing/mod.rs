//! A test kit for your own code that holds leases (feature `testing`): an in-process store on
//! tokio's clock with handles that take a term away, stall or cut the store and hand a name to
//! another holder, and a fenced-history recorder that says whether two holders' writes
//! overlapped or went out of token order.
//!
//! - [`TestStore`]: the store (lease-local's memory store: leases expire by tokio's clock, so
//!   paused-time tests run a 15 s lease in no time), [`TestStore::lose`],
//!   [`TestStore::hand_over`], [`TestStore::stall`], [`TestStore::cut`], [`TestStore::heal`],
//!   and [`TestStore::coordinator`], a coordinator whose fail action is recorded
//!   ([`TestStore::step_down_failures`]) instead of ending the test process;
//! - [`FencedHistory`]: the writes of every holder with their tokens and times, and the
//!   [`Report`] of its [`Violation`]s.
//!
//! What to check of a leader-only service: once its term is taken away, it hears of it within
//! one renewal period ([`Timings::renew_every`](crate::Timings::renew_every)) and stops writing
//! within its [`grace`](crate::Timings::grace) (by returning from its work, for
//! [`Coordinator::run_elected`](crate::Coordinator::run_elected) and
//! [`Term::run`](crate::Term::run)); a new holder's writes after that never meet one of its
//! own. A service that ignores [`Term::done`](crate::Term::done) goes on writing with its old
//! token, and the history reports it out of token order. (Until it hears of the loss, even a
//! correct holder may write once more: a new holder that writes at once after
//! [`TestStore::hand_over`] sees that write out of token order, which is why the resource
//! itself must check the token: see `lease::fence`.) Run such tests in paused time
//! (`#[tokio::test(start_paused = true)]`, tokio's `test-util` feature in your
//! dev-dependencies).
//!
//! ```
//! use std::time::Duration;
//!
//! use lease::Timings;
//! use lease::testing::{FencedHistory, TestStore};
//! use tokio::time::{Instant, sleep};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> lease::Result<()> {
//! let kit = TestStore::new();
//! let timings = Timings::from_lease(Duration::from_secs(3))?;
//! let coordinator = kit.coordinator("service-1").timings(timings).build()?;
//! let history = FencedHistory::new();
//!
//! // The code under test: it writes with its term's token until the term is done.
//! let term = coordinator.try_acquire("leader").await?;
//! let service = tokio::spawn({
//!     let history = history.clone();
//!     async move {
//!         loop {
//!             tokio::select! {
//!                 () = term.done() => break,
//!                 () = sleep(Duration::from_millis(100)) => {
//!                     history.write("service-1", term.token());
//!                 }
//!             }
//!         }
//!     }
//! });
//! sleep(Duration::from_secs(1)).await;
//!
//! // Another node takes the name over: the service must hear of it and stop.
//! let handed_over = Instant::now();
//! let token = kit.hand_over("leader", "node-2", Duration::from_secs(60)).await?;
//! sleep(timings.renew_every() + timings.grace()).await;
//! assert!(service.is_finished());
//! assert!(history.write("node-2", token));
//! history.assert_clean();
//! let last = history.last_write_by("service-1").expect("the service wrote");
//! assert!(last.at <= handed_over + timings.renew_every());
//!
//! // A stalled store: no renewal comes back, and the term ends at its local deadline.
//! sleep(Duration::from_secs(60)).await;
//! let term = coordinator.try_acquire("leader").await?;
//! kit.stall();
//! let ended = tokio::time::timeout(timings.deadline() + Duration::from_millis(1), term.lost());
//! ended.await.expect("the term ended at its local deadline");
//! kit.heal();
//! coordinator.close().await?;
//! # Ok(())
//! # }
//! ```

mod history;
mod store;

pub use history::{FencedHistory, Report, Violation, Write, Writing};
pub use store::{Fault, TestStore};
