//! What a coordinator shares with each of its terms: the store, the instance label, the
//! timings, the fail action, the tracker of spawned work, the closing signal and the
//! leadership board.

use std::sync::Arc;
use std::time::Duration;

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
    /// The lock-delay this coordinator's claims declare, per name.
    pub(crate) lock_delays: LockDelays,
}

/// The lock-delay a coordinator's claims of plain leases declare: one for every name, and
/// others for chosen names.
#[derive(Debug, Clone, Default)]
pub(crate) struct LockDelays {
    pub(crate) all: Duration,
    pub(crate) named: std::collections::HashMap<String, Duration>,
}

impl LockDelays {
    /// The delay a claim of `name` declares; zero for none.
    pub(crate) fn of(&self, name: &str) -> Duration {
        self.named.get(name).copied().unwrap_or(self.all)
    }

    /// `true` when some claim declares a delay.
    pub(crate) fn any(&self) -> bool {
        !self.all.is_zero() || self.named.values().any(|d| !d.is_zero())
    }
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
