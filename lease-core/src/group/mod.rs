//! The group worker: a group's partitions spread over the live members of a service.
//!
//! A [`GroupWorker`](crate::GroupWorker) runs one node's part. It heartbeats its membership of the
//! service, serving the group, for the lease duration, every `renew_every` on a schedule of its
//! own: a heartbeat does not wait for a tick, so a slow tick does not let the member record lapse
//! (while the store answers, the record is refreshed at most `renew_every + attempt_timeout`
//! apart). On every tick (the timings' `renew_every`, or longer when the store is slow) it
//!
//! 1. reads the live members that serve the group (its own node always counts);
//! 2. computes its fair share with rendezvous hashing ([`assign`](assign())) when the member list
//!    changed: every member computes the same assignment from the same member list, and a join
//!    or a leave moves few partitions;
//! 3. renews every partition it holds in one batch
//!    ([`PartitionStore::renew_partitions`](crate::backend::partitions::PartitionStore::renew_partitions)),
//!    with the partitions still draining and a read-back of any acquire whose answer was lost
//!    (adopted when still its share, released otherwise);
//! 4. gives up the partitions that are no longer its: it takes them out of its published
//!    [`Assignment`](crate::Assignment) and lets them **drain** — still renewed, so no one else can
//!    acquire them — until the consumer says it stopped ([`StopAck`]) or the timings' `grace` has
//!    passed, whichever comes first; then it releases them and the successor takes them on its next
//!    tick;
//! 5. acquires the partitions of its share it neither holds nor drains (those still held by
//!    their previous owner are tried again next tick), until `renew_every` has passed since
//!    the first of them;
//! 6. publishes its assignment (partition → epoch) on a watch channel when it changed.
//!
//! Between ticks it wakes at every local deadline, at the end of every drain's grace, and at
//! every acknowledgement.
//!
//! # Guarantees and their limits
//!
//! - A partition is in at most one worker's published assignment at a time, as long as the process
//!   is not paused for longer than the lease: a worker drops a partition from its assignment when
//!   no renewal has succeeded within the local `deadline` of the start of the last one that did,
//!   and with valid [`Timings`](crate::Timings) that is at least `grace` before the store lets
//!   anyone else acquire it. Local deadlines are [`Deadline`](crate::clock::Deadline)s: they count
//!   time the machine spent suspended, and fire at once on resume.
//! - Every time a partition leaves the assignment — given up, lost at the deadline, or on
//!   [`leave`](crate::GroupWorker::leave) — its consumer has `grace` to stop before anyone, this
//!   worker included, holds it again: a given-up partition is released only once the consumer
//!   acknowledged the stop or the grace has passed, and a lost one is not acquired again by
//!   this worker before then. A consumer that never acknowledges still gets the grace; one that
//!   does makes hand-overs prompt.
//! - The epoch published with each partition is a fencing token: every holding of a partition
//!   has a higher epoch than the one before, also when the same worker gets it back after a
//!   published loss (the worker releases it first, so the store moves the epoch on). Pass it to
//!   whatever the work writes, and let that refuse lower epochs — the only protection against
//!   a process that was paused past its lease.
//! - After a member joins or leaves gracefully, the assignment settles within
//!   [`GroupWorker::settle_time`](crate::GroupWorker::settle_time); after a member crashes, within
//!   [`GroupWorker::crash_settle_time`](crate::GroupWorker::crash_settle_time). Both assume the
//!   store answers.
//!
//! # Sizing the timings
//!
//! One [`Timings`](crate::Timings) drives both the partition leases and the membership records:
//!
//! - `lease` is how long a crashed member's partitions stay unowned before the others take them
//!   over (plus up to three ticks). Shorter means faster takeover and more store writes.
//! - `renew_every` is the tick and the heartbeat's period: one heartbeat, one member read and
//!   one batch renewal per `renew_every` per member, whatever the number of partitions, plus
//!   one acquire per partition that changes hands. A join or a graceful leave settles within
//!   three ticks.
//! - `deadline`, `grace`: as for a single lease (see [`Timings`](crate::Timings)); the consumer of
//!   the assignment must stop work on a partition within `grace` of its removal, and a hand-over
//!   whose consumer does not acknowledge takes that long.
//!
//! With the defaults (lease 15 s, tick 2 s, grace 4 s) a join or a graceful leave settles in
//! about 6 s when consumers acknowledge their stops (10 s at most when they do not) and a
//! crash in about 25 s at most; `Timings::from_lease(Duration::from_secs(3))` gives 1.2 s
//! (2.0 s) and 5.0 s.
//!
//! ```
//! use std::time::Duration;
//! use lease_core::{GroupWorker, Timings};
//! use lease_local::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> lease_core::Result<()> {
//! let store = MemoryStore::new();
//! let timings = Timings::from_lease(Duration::from_secs(3))?;
//! let a = GroupWorker::builder(store.clone(), "orders", 12).node("a").timings(timings).start().await?;
//! let b = GroupWorker::builder(store.clone(), "orders", 12).node("b").timings(timings).start().await?;
//!
//! tokio::time::sleep(GroupWorker::settle_time(&timings)).await;
//! let (mine, theirs) = (a.assignment().borrow().clone(), b.assignment().borrow().clone());
//! assert_eq!(mine.partitions.len() + theirs.partitions.len(), 12);
//! assert_eq!(mine.partitions.len(), 6);
//!
//! // No consumer acknowledges here, so a's partitions drain for the grace before their release;
//! // b takes them on its next ticks (see `GroupWorker::stop_acks` for a consumer that does).
//! a.leave().await?;
//! tokio::time::sleep(GroupWorker::settle_time(&timings)).await;
//! assert_eq!(b.assignment().borrow().partitions.len(), 12);
//! b.leave().await?;
//! # Ok(()) }
//! ```

mod assign;
pub(crate) mod assignment;
pub(crate) mod handle;
mod owners;
mod run;

pub use assign::{assign, score};
pub use assignment::StopAck;
pub use handle::{GroupWorkerBuilder, MAX_GROUP_PARTITIONS};
