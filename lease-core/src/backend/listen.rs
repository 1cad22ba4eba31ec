//! The reconnect loop of a store's listener: the one task that keeps a store's [`Hub`] fed from
//! a subscription on the server (Redis pub/sub, a NATS KV watch, an etcd watch, a change
//! stream), written once for every backend.
//!
//! [`Listener::spawn`] runs a backend's *session* over and over. A session opens the
//! subscription, calls [`Link::up`] once it is in place (the hub turns connected, and every
//! topic is hinted: what happened before is unknown), notifies the hub for each change it
//! sees, and returns when the subscription ends or fails. Between sessions the hub is
//! disconnected ([`Hub::set_connected`]`(false)`), so waiters keep their polling pace, and the
//! loop pauses a jittered, doubling back-off ([`Backoff`]) that starts again from its first step
//! after a session that got up. A session that fails with a permanent error
//! ([`Error::is_temporary`] false: refused credentials, a server that cannot subscribe) ends
//! the loop, logged once at warn level, and the hub stays disconnected.
//!
//! Dropping the [`Listener`] ends the task at its next await, session included. A store keeps
//! its listener in its shared state, so the task ends when the last clone of the store is
//! dropped; the task itself holds no reference to the store.
//!
//! ```
//! use std::time::Duration;
//! use lease_core::backend::notify::Hub;
//! use lease_core::backend::listen::{Backoff, Listener};
//! use lease_core::backend::notify::Topic;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lease_core::Result<()> {
//! let hub = Hub::new();
//! let mut wakeups = hub.subscribe(&Topic::lease("jobs"));
//! let listener = Listener::spawn("example", &hub, Backoff::default(), |link| async move {
//!     link.up(); // subscribed
//!     link.hub().notify(&Topic::lease("jobs")); // a change seen on the subscription
//!     std::future::pending::<()>().await; // a real session reads until its stream ends
//!     Ok(())
//! })?;
//! // The spawn disconnected the hub (a first wake-up); the session's `up` connects it again.
//! let up = tokio::time::timeout(Duration::from_secs(1), async {
//!     while !wakeups.is_connected() {
//!         wakeups.changed().await;
//!     }
//! });
//! assert!(up.await.is_ok());
//! drop(listener); // ends the task
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::store::error::{Error, Result};
use crate::store::notify::Hub;

/// The pauses between a listener's sessions: `first` after the first failure, doubling up to
/// `max`, each with up to a quarter more at random (so listeners cut together do not come back
/// together). Starts again from `first` after a session that got up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first pause.
    pub first: Duration,
    /// The longest pause.
    pub max: Duration,
}

impl Default for Backoff {
    /// 100 ms, doubling up to 5 s.
    fn default() -> Self {
        Backoff {
            first: Duration::from_millis(100),
            max: Duration::from_secs(5),
        }
    }
}

impl Backoff {
    /// The pause after `step` failures in a row (0: the first), before the jitter.
    fn pause(&self, step: u32) -> Duration {
        let factor = 1u32.checked_shl(step.min(20)).unwrap_or(u32::MAX);
        self.first.saturating_mul(factor).min(self.max)
    }
}

/// What a session gets: the hub to notify and the switch that says it is subscribed.
#[derive(Debug, Clone)]
pub struct Link {
    hub: Hub,
    up: Arc<AtomicBool>,
}

impl Link {
    /// Says the session's subscription is in place: the hub turns connected (which hints every
    /// topic) and the back-off starts again from its first step after this session. Call it
    /// once the server has confirmed the subscription, not before: from here on a change made
    /// by anyone must reach the session.
    pub fn up(&self) {
        self.up.store(true, Ordering::Relaxed);
        self.hub.set_connected(true);
    }

    /// The hub to notify of the changes the session sees.
    pub fn hub(&self) -> &Hub {
        &self.hub
    }
}

/// A running listener task (see the [module docs](self)); dropping it ends the task.
#[derive(Debug)]
pub struct Listener {
    _stop: oneshot::Sender<()>,
}

impl Listener {
    /// Starts the task that runs `session` over and over on the current tokio runtime, feeding
    /// `hub` (disconnected until a session calls [`Link::up`]). `what` names the listener in
    /// logs (e.g. `"redis pub/sub redis://cache:6379"`; never a password).
    ///
    /// # Errors
    ///
    /// `Unsupported` when called outside a tokio runtime: build the store inside one.
    pub fn spawn<F, Fut>(
        what: impl Into<String>,
        hub: &Hub,
        backoff: Backoff,
        session: F,
    ) -> Result<Listener>
    where
        F: FnMut(Link) -> Fut + Send + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::unsupported(
                "a store's change listener needs a tokio runtime: open the store inside one",
            )
        })?;
        let (stop, stopped) = oneshot::channel();
        hub.set_connected(false);
        runtime.spawn(run(what.into(), hub.clone(), backoff, session, stopped));
        Ok(Listener { _stop: stop })
    }
}

/// The loop of [`Listener::spawn`]; returns when the listener is dropped or a session fails
/// for good.
async fn run<F, Fut>(
    what: String,
    hub: Hub,
    backoff: Backoff,
    mut session: F,
    mut stopped: oneshot::Receiver<()>,
) where
    F: FnMut(Link) -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let mut step = 0u32;
    // Whether the last failure was logged at warn level: one warning per outage, not per try.
    let mut warned = false;
    loop {
        let link = Link {
            hub: hub.clone(),
            up: Arc::new(AtomicBool::new(false)),
        };
        let ended = tokio::select! {
            _ = &mut stopped => return,
            ended = session(link.clone()) => ended,
        };
        hub.set_connected(false);
        let was_up = link.up.load(Ordering::Relaxed);
        if was_up {
            step = 0;
            if warned {
                tracing::info!(listener = %what, "store change listener subscribed again");
                warned = false;
            }
        }
        match ended {
            Err(e) if !e.is_temporary() => {
                tracing::warn!(listener = %what, error = %e,
                    "store change listener stopped; waiters poll at their own pace (hints from \
                     other processes are off until the store is opened again)");
                return;
            }
            Err(e) if !warned => {
                tracing::warn!(listener = %what, error = %e,
                    "store change listener lost its subscription; waiters poll at their own pace \
                     until it is back");
                warned = true;
            }
            Err(e) => {
                tracing::debug!(listener = %what, error = %e, "store change listener retry failed")
            }
            Ok(()) => {
                tracing::debug!(listener = %what, "store change listener's subscription ended")
            }
        }
        let pause = backoff.pause(step);
        let pause = pause + pause.mul_f64(rand::random::<f64>() / 4.0);
        step = step.saturating_add(1);
        tokio::select! {
            _ = &mut stopped => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::store::notify::Topic;
    use std::sync::atomic::AtomicUsize;
    use tokio::sync::mpsc;
    use tokio::time::{Instant, timeout};

    #[test]
    fn pauses_double_up_to_the_max() {
        let b = Backoff::default();
        assert_eq!(b.pause(0), Duration::from_millis(100));
        assert_eq!(b.pause(1), Duration::from_millis(200));
        assert_eq!(b.pause(5), Duration::from_millis(3200));
        assert_eq!(b.pause(6), Duration::from_secs(5));
        assert_eq!(b.pause(u32::MAX), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn sessions_rerun_with_the_hub_down_in_between() {
        let hub = Hub::new();
        let mut w = hub.subscribe(&Topic::lease("a"));
        let (ends, mut ended) = mpsc::unbounded_channel::<()>();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&runs);
        let _listener = Listener::spawn("test", &hub, Backoff::default(), move |link| {
            let ends = ends.clone();
            let n = counted.fetch_add(1, Ordering::Relaxed);
            async move {
                link.up();
                if n < 2 {
                    let _ = ends.send(());
                    return Err(Error::unavailable("cut"));
                }
                std::future::pending::<()>().await;
                Ok(())
            }
        })
        .unwrap();
        assert!(!hub.is_connected(), "connected before any session got up");
        for _ in 0..2 {
            ended.recv().await.unwrap();
            assert!(!hub.is_connected());
        }
        let started = Instant::now();
        while !w.is_connected() {
            timeout(Duration::from_secs(1), w.changed()).await.unwrap();
        }
        // Each session got up, so each pause was the first step: 100..125 ms.
        assert!(
            started.elapsed() <= Duration::from_millis(125),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(runs.load(Ordering::Relaxed), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_before_up_back_off_and_a_permanent_one_stops() {
        let hub = Hub::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&runs);
        let _listener = Listener::spawn("test", &hub, Backoff::default(), move |_link| {
            let n = counted.fetch_add(1, Ordering::Relaxed);
            async move {
                if n < 3 {
                    Err(Error::unavailable("refused"))
                } else {
                    Err(Error::unsupported("no pub/sub here"))
                }
            }
        })
        .unwrap();
        // Runs at 0, 100..125, 300..375 and 700..875 ms.
        tokio::time::sleep(Duration::from_millis(650)).await;
        assert!(runs.load(Ordering::Relaxed) <= 3);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(
            runs.load(Ordering::Relaxed),
            4,
            "the loop went on after a permanent error"
        );
        assert!(!hub.is_connected());
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_listener_ends_the_session() {
        let hub = Hub::new();
        let (tx, mut rx) = mpsc::unbounded_channel::<()>();
        let listener = Listener::spawn("test", &hub, Backoff::default(), move |link| {
            // The sender lives in the session's future: it drops when the session does.
            let tx = tx.clone();
            async move {
                link.up();
                std::future::pending::<()>().await;
                drop(tx);
                Ok(())
            }
        })
        .unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(hub.is_connected());
        drop(listener);
        // Every sender is gone once the task (the closure and its session) is dropped.
        assert!(
            timeout(Duration::from_secs(1), rx.recv())
                .await
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn spawning_outside_a_runtime_is_refused() {
        let e = Listener::spawn("test", &Hub::new(), Backoff::default(), |_link| async {
            Ok(())
        })
        .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Unsupported);
        assert!(e.message().contains("tokio runtime"), "{e}");
    }
}
