//! What a coordinator shares with each of its terms: the store, the instance label, the
//! timings, the fail action, the tracker of spawned work, the closing signal and the
//! leadership board.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Stamp;
use crate::engine::leadership::Board;
use crate::engine::renewer::Renewer;
use crate::engine::step_down::FailAction;
use crate::store::lease_store::LeaseStore;
use crate::timings::Timings;

/// A coordinator's state that its terms use too: each term holds it, and reports to it when
/// it is won and when it ends.
pub(crate) struct CoordShared {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) instance: String,
    pub(crate) timings: Timings,
    pub(crate) fail_action: FailAction,
    /// Work spawned by `run`, waited for by `close`.
    pub(crate) work: TaskTracker,
    /// Fires when the coordinator starts closing.
    pub(crate) closing: CancellationToken,
    /// The leadership state of every name asked for or claimed.
    pub(crate) leadership: Board,
    /// The renewer of this coordinator's plain leases, when they are renewed in batches
    /// ([`Renewals`](crate::coordinator::Renewals)); `None` when each term renews on its own.
    pub(crate) renewer: Option<Arc<Renewer>>,
}

impl CoordShared {
    /// A term of `name` was won, with the claim sent at `since`.
    pub(crate) fn term_started(&self, name: &str, token: u64, since: Stamp) {
        self.leadership.won(name, token, &self.instance, since);
    }

    /// A term of `name` ended (its `done` fired).
    pub(crate) fn term_ended(&self, name: &str, token: u64) {
        self.leadership.ended(name, token);
    }
}
