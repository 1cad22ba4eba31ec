//! What a worker publishes ([`Assignment`]) and how its consumer acknowledges a stop
//! ([`StopAck`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// What a worker holds, as published on its watch channel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    /// The partitions this worker holds, each with its epoch (the fencing token).
    pub partitions: BTreeMap<u32, u64>,
    /// The live members serving the group, by node id, as last read (this node included).
    pub members: Vec<String>,
}

impl Assignment {
    /// `true` when this worker holds `partition`.
    pub fn holds(&self, partition: u32) -> bool {
        self.partitions.contains_key(&partition)
    }

    /// The epoch under which this worker holds `partition`.
    pub fn epoch(&self, partition: u32) -> Option<u64> {
        self.partitions.get(&partition).copied()
    }
}

/// A handle for the consumer of a [`GroupWorker`](crate::GroupWorker)'s assignment to say it stopped working a
/// partition; see [`GroupWorker::stop_acks`](crate::GroupWorker::stop_acks). Cheap to clone, and usable from any thread.
///
/// When a partition leaves the assignment (given up to another member, lost, or because the
/// worker leaves), the worker does not release it — so no one else can acquire it — until the
/// consumer has called [`stopped`](StopAck::stopped) with its partition and epoch, or the
/// timings' `grace` has passed since the removal was published, whichever comes first. A
/// consumer that never acknowledges thus still gets the whole grace to stop; one that does makes
/// hand-overs (and [`GroupWorker::leave`](crate::GroupWorker::leave)) prompt.
#[derive(Debug, Clone)]
pub struct StopAck {
    pub(super) acks: Arc<AckBox>,
    pub(super) partitions: u32,
}

impl StopAck {
    /// Says the consumer stopped working `partition` under `epoch` (the epoch it was published
    /// with). Call it once the work has really stopped: the partition may be handed over at
    /// once. An acknowledgement for a partition still in the assignment, or for another epoch
    /// than the one it left under, is ignored.
    pub fn stopped(&self, partition: u32, epoch: u64) {
        if partition >= self.partitions {
            return;
        }
        {
            let mut stopped = self.acks.stopped.lock().unwrap_or_else(|p| p.into_inner());
            let e = stopped.entry(partition).or_insert(epoch);
            *e = (*e).max(epoch);
        }
        self.acks.notify.notify_one();
    }
}

/// The consumer's acknowledgements, shared between the [`StopAck`] handles and the task.
#[derive(Debug, Default)]
pub(super) struct AckBox {
    /// Per partition, the highest epoch acknowledged since the task last looked.
    stopped: Mutex<BTreeMap<u32, u64>>,
    pub(super) notify: Notify,
}

impl AckBox {
    pub(super) fn take(&self) -> BTreeMap<u32, u64> {
        std::mem::take(&mut *self.stopped.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
