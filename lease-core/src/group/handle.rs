//! The public handle of a worker and its builder.

use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::assignment::{AckBox, Assignment, StopAck};
use super::owners::Owners;
use super::run::{Run, Start};
use crate::backend::check;
use crate::clock::{Deadline, Stamp};
use crate::store::error::{Error, Result};
use crate::store::lease_store::{LeaseStore, membership_of, shared};
use crate::store::notify::Topic;
use crate::timings::Timings;

/// The most partitions one group may have.
pub const MAX_GROUP_PARTITIONS: u32 = 65_536;

/// Builds and starts a [`GroupWorker`]; see [`GroupWorker::builder`].
#[must_use = "a builder does nothing until `start` is awaited"]
pub struct GroupWorkerBuilder {
    store: Arc<dyn LeaseStore>,
    group: String,
    partitions: u32,
    service: Option<String>,
    node: Option<String>,
    address: String,
    timings: Timings,
}

impl fmt::Debug for GroupWorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupWorkerBuilder")
            .field("backend", &self.store.backend())
            .field("group", &self.group)
            .field("partitions", &self.partitions)
            .field("service", &self.service)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl GroupWorkerBuilder {
    /// The service whose membership the worker heartbeats; defaults to the group's name.
    pub fn service(mut self, service: impl Into<String>) -> Self {
        self.service = Some(service.into());
        self
    }

    /// This node's id among the members; stable across restarts so a restarted node gets back
    /// the same share. Defaults to `node-` and 8 random hex digits.
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Where this node answers, for the member record (free-form; empty by default).
    pub fn address(mut self, address: impl Into<String>) -> Self {
        self.address = address.into();
        self
    }

    /// The timings: `lease` for the partition leases and the membership record, `renew_every`
    /// as the tick, `deadline`, `attempt_timeout` and `grace` as for a lease.
    pub fn timings(mut self, timings: Timings) -> Self {
        self.timings = timings;
        self
    }

    /// Checks everything, heartbeats once (so an unreachable store fails here), and starts the
    /// worker's task on the current tokio runtime.
    ///
    /// Fails with [`Unsupported`](crate::ErrorKind::Unsupported) when the store has no
    /// partitioned leases or no membership records (its
    /// [`partition_store`](LeaseStore::partition_store) or
    /// [`membership_store`](LeaseStore::membership_store) answers `None`), naming which.
    pub async fn start(self) -> Result<GroupWorker> {
        crate::telemetry::describe_once();
        let lacks = match (
            self.store.partition_store().is_some(),
            self.store.membership_store().is_some(),
        ) {
            (true, true) => None,
            (false, true) => Some("partitioned leases"),
            (true, false) => Some("membership records"),
            (false, false) => Some("partitioned leases and no membership records"),
        };
        if let Some(lacks) = lacks {
            return Err(Error::unsupported(format!(
                "the {} store has no {lacks}, which a group worker needs; choose a store whose \
                 capabilities say `partitions` and `membership`",
                self.store.backend(),
            )));
        }
        if self.partitions == 0 || self.partitions > MAX_GROUP_PARTITIONS {
            return Err(Error::invalid_argument(format!(
                "a group has 1 to {MAX_GROUP_PARTITIONS} partitions; asked for {}",
                self.partitions
            )));
        }
        let service = self.service.unwrap_or_else(|| self.group.clone());
        let node = self.node.unwrap_or_else(|| {
            let hex = crate::backend::HolderToken::mint().to_hex();
            format!("node-{}", hex.get(..8).unwrap_or(&hex))
        });
        let owners = Arc::new(Owners::new(&node));
        let owner = owners.current();
        let lease = self.timings.lease();
        let groups = vec![self.group.clone()];
        let store = self.store;
        check::heartbeat(&*store, &service, &node, &self.address, lease, &groups)?;
        check::acquire_partition(&*store, &self.group, &owner, lease)?;
        let began = Stamp::now();
        let attempt = Deadline::in_(self.timings.attempt_timeout());
        tokio::select! {
            biased;
            first = async {
                membership_of(&*store)?
                    .heartbeat(&service, &node, &self.address, lease, &groups)
                    .await
            } => {
                first?;
            }
            () = attempt.reached() => {
                return Err(Error::timeout(
                    format!("the first heartbeat of {node} in {service}"),
                    self.timings.attempt_timeout(),
                ));
            }
        }
        let (tx, rx) = watch::channel(Assignment::default());
        let stop = CancellationToken::new();
        let acks = Arc::new(AckBox::default());
        // Subscribed before the first tick, so no change after it is missed.
        let hints = store.changes(&Topic::group(self.group.as_str()));
        let (run, beats) = Run::new(Start {
            store,
            group: self.group.clone(),
            service: service.clone(),
            node: node.clone(),
            address: self.address,
            owner: owner.clone(),
            owners: Arc::clone(&owners),
            partitions: self.partitions,
            timings: self.timings,
            groups,
            acks: Arc::clone(&acks),
            tx,
            hints,
            // The worker's heartbeats go on from this one, `renew_every` apart.
            first_beat: began.deadline_after(self.timings.renew_every()),
        });
        let task = tokio::spawn(run.run(beats, stop.clone()));
        info!(group = %self.group, %service, %node, %owner, "group worker started");
        Ok(GroupWorker {
            rx,
            stop,
            task: Some(task),
            acks,
            owners,
            partitions: self.partitions,
            group: self.group,
            service,
            node,
        })
    }
}

/// One node's part in spreading a group's partitions over the live members of a service; see
/// the [module docs](crate::group).
///
/// Dropping the worker without [`leave`](GroupWorker::leave) stops it the same way, in the
/// background.
pub struct GroupWorker {
    rx: watch::Receiver<Assignment>,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<()>>>,
    acks: Arc<AckBox>,
    owners: Arc<Owners>,
    partitions: u32,
    group: String,
    service: String,
    node: String,
}

impl fmt::Debug for GroupWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupWorker")
            .field("group", &self.group)
            .field("service", &self.service)
            .field("node", &self.node)
            .field("owner", &self.owners.current())
            .finish_non_exhaustive()
    }
}

impl GroupWorker {
    /// A worker for `partitions` partitions (numbered `0..partitions`) of `group` over `store`:
    /// the store itself, or a shared one (an `Arc<dyn LeaseStore>` is taken as it is; `Arc<S>`
    /// is a store too). The store must have partitioned leases and membership records:
    /// [`start`](GroupWorkerBuilder::start) refuses one without.
    pub fn builder(
        store: impl LeaseStore,
        group: impl Into<String>,
        partitions: u32,
    ) -> GroupWorkerBuilder {
        GroupWorkerBuilder {
            store: shared(store),
            group: group.into(),
            partitions,
            service: None,
            node: None,
            address: String::new(),
            timings: Timings::default(),
        }
    }

    /// The watch channel of this worker's assignment. The value changes whenever a partition is
    /// gained or lost or the member list changes; when a partition disappears, stop its work
    /// within the timings' `grace`, and say so with [`stop_acks`](GroupWorker::stop_acks) so
    /// that it is handed over at once. A partition that left is not released — nor acquired
    /// again by this worker — before the acknowledgement or the end of the grace, and every
    /// later holding of it, this worker's included, has a higher epoch.
    ///
    /// Do not hold a [`borrow`](watch::Receiver::borrow) across an `.await`: the worker's next
    /// publication waits for it, and with it the renewals. Clone what you need out of it.
    pub fn assignment(&self) -> watch::Receiver<Assignment> {
        self.rx.clone()
    }

    /// A handle for the consumer to acknowledge that it stopped working a partition (see
    /// [`StopAck`]); it stays usable while [`leave`](GroupWorker::leave) drains.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::{GroupWorker, Timings};
    /// use lease_local::MemoryStore;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> lease_core::Result<()> {
    /// let timings = Timings::from_lease(Duration::from_secs(3))?;
    /// let worker = GroupWorker::builder(MemoryStore::new(), "orders", 4)
    ///     .node("a")
    ///     .timings(timings)
    ///     .start()
    ///     .await?;
    /// let (mut rx, acks) = (worker.assignment(), worker.stop_acks());
    /// let consumer = tokio::spawn(async move {
    ///     let mut working = std::collections::BTreeMap::new();
    ///     loop {
    ///         let now = rx.borrow_and_update().partitions.clone();
    ///         // Stop what left (or came back under another epoch), then say so.
    ///         working.retain(|p, e| {
    ///             let keep = now.get(p) == Some(e);
    ///             if !keep {
    ///                 // ... stop the work on partition p here ...
    ///                 acks.stopped(*p, *e);
    ///             }
    ///             keep
    ///         });
    ///         for (p, e) in now {
    ///             // ... start work on partition p, fenced with epoch e ...
    ///             working.entry(p).or_insert(e);
    ///         }
    ///         if rx.changed().await.is_err() {
    ///             break;
    ///         }
    ///     }
    /// });
    /// tokio::time::sleep(GroupWorker::settle_time(&timings)).await;
    /// assert_eq!(worker.assignment().borrow().partitions.len(), 4);
    /// let left = tokio::time::Instant::now();
    /// worker.leave().await?; // returns as soon as the consumer acknowledged the four stops
    /// assert!(left.elapsed() < timings.grace());
    /// consumer.await.ok();
    /// # Ok(()) }
    /// ```
    pub fn stop_acks(&self) -> StopAck {
        StopAck {
            acks: Arc::clone(&self.acks),
            partitions: self.partitions,
        }
    }

    /// Says the consumer stopped working `partition` under `epoch`: as
    /// [`StopAck::stopped`] on [`stop_acks`](GroupWorker::stop_acks).
    pub fn stopped(&self, partition: u32, epoch: u64) {
        self.stop_acks().stopped(partition, epoch);
    }

    /// The group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The service whose membership the worker heartbeats.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The owner id under which this worker acquires partitions now, as the partition leases
    /// record it: `node@` and 16 hex digits, minted at start. It changes (the last digits count
    /// up) after a release of unknown outcome, so that a release still on its way cannot end a
    /// later holding; partitions acquired before keep their owner id. See
    /// [`owns`](GroupWorker::owns).
    pub fn owner(&self) -> String {
        self.owners.current()
    }

    /// `true` when `owner` is one of this worker's owner ids (of any generation).
    pub fn owns(&self, owner: &str) -> bool {
        self.owners.owns(owner)
    }

    /// Leaves gracefully: the assignment becomes empty and the membership ends at once; each
    /// partition is released as soon as the consumer acknowledged its stop
    /// ([`stop_acks`](GroupWorker::stop_acks)) or the timings' `grace` has passed (renewed
    /// until then), so the other members take over on their next ticks instead of waiting out
    /// the lease. Returns once every partition is released: at once when the consumer
    /// acknowledges, after the grace when it does not. A release or the end of the membership
    /// that fails with a temporary error is tried again (each is idempotent), a few times; an
    /// error says the store did not confirm one of them within those tries (what it left
    /// behind then expires with its lease, and the others wait for that).
    pub async fn leave(mut self) -> Result<()> {
        self.stop.cancel();
        match self.task.take() {
            Some(task) => task
                .await
                .map_err(|e| Error::unavailable(format!("the group worker's task ended: {e}")))?,
            None => Ok(()),
        }
    }
}

impl Drop for GroupWorker {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl GroupWorker {
    /// How long the assignment takes to settle after a member joins or leaves gracefully, when
    /// the store answers: every member sees the change within one tick, gives up what is no
    /// longer its within the next, releases it once its consumer acknowledged the stop or the
    /// grace has passed, and the new owner acquires it within the tick after — three ticks
    /// plus the grace (`3 × renew_every + grace`), plus the time each tick's store operations
    /// take. With consumers that acknowledge their stops at once, about three ticks.
    pub fn settle_time(timings: &Timings) -> std::time::Duration {
        timings.renew_every() * 3 + timings.grace()
    }

    /// How long the assignment takes to settle after a member crashes (or hangs, or loses the
    /// store): its membership and its partition leases expire within `lease` of its last
    /// successful heartbeat and renewal, then the others settle as after a leave.
    pub fn crash_settle_time(timings: &Timings) -> std::time::Duration {
        timings.lease() + Self::settle_time(timings)
    }
}
