//! [`TestStore`]: the in-process store on tokio's clock, with the handles a test drives.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lease_core::backend::{HolderToken, LeaseInfo};
use lease_core::coordinator::{CoordinatorBuilder, StepDownFailure};
use lease_core::layer::{Answer, Call, Hook, Intercept};
use lease_core::{Coordinator, Error, ErrorKind, LeaseStore, Result};
use lease_local::MemoryStore;
use tokio::sync::watch;

/// What a [`TestStore`] does to the operations its users send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Fault {
    /// Every operation is carried out and answered: a healthy store.
    #[default]
    Pass,
    /// No operation is answered until the fault changes; then what was held back is carried
    /// out (a store or network that stopped answering, e.g. a long GC pause or a partition).
    Stall,
    /// Every operation fails at once with [`ErrorKind::Unavailable`] and takes no effect (the
    /// connection to the store is down).
    Cut,
}

/// The hook between a [`TestStore`]'s users and its memory store: applies the [`Fault`].
#[derive(Debug, Clone)]
struct Switch {
    fault: Arc<watch::Sender<Fault>>,
}

impl Hook for Switch {
    fn around<'a, T: Send + 'static>(
        &'a self,
        _call: Call<'a>,
        op: Answer<'a, T>,
    ) -> Answer<'a, T> {
        let mut faults = self.fault.subscribe();
        Box::pin(async move {
            let fault = match faults.wait_for(|f| *f != Fault::Stall).await {
                Ok(f) => *f,
                Err(_) => Fault::Pass,
            };
            match fault {
                Fault::Cut => Err(Error::unavailable(
                    "lease::testing: the store is cut (TestStore::cut); TestStore::heal \
                     restores it",
                )),
                Fault::Pass | Fault::Stall => op.await,
            }
        })
    }
}

/// An in-process lease store for tests of code that holds leases, whose time is tokio's clock,
/// with handles that do to that code what a real store and network can: take a term away,
/// stall, cut, hand a name to another holder.
///
/// Leases expire by `tokio::time::Instant`, so in a test run in paused time
/// (`#[tokio::test(start_paused = true)]`, tokio's `test-util` feature) a lease of 15 s runs
/// out in no time, and `tokio::time::advance` moves it on exactly. Everything else is the
/// memory store of lease-local ([`crate::memory::MemoryStore`]): the full store contract, with
/// partitions, membership, counted leases and slots.
///
/// Clones share one store. Hand [`store`](TestStore::store) (or a
/// [`coordinator`](TestStore::coordinator) built on it) to the code under test; keep the `TestStore` to drive
/// it. The handles act on the store itself, past the [`Fault`]: [`lose`](TestStore::lose) and
/// [`hand_over`](TestStore::hand_over) work while the store is stalled or cut for its users.
#[derive(Debug, Clone)]
pub struct TestStore {
    store: Arc<Intercept<MemoryStore, Switch>>,
    failures: Arc<Mutex<Vec<StepDownFailure>>>,
}

impl Default for TestStore {
    fn default() -> Self {
        TestStore::new()
    }
}

impl TestStore {
    /// An empty store, answering every operation ([`Fault::Pass`]).
    pub fn new() -> TestStore {
        TestStore {
            store: Arc::new(Intercept::new(
                MemoryStore::new(),
                Switch {
                    fault: Arc::new(watch::Sender::new(Fault::Pass)),
                },
            )),
            failures: Arc::default(),
        }
    }

    /// The store to give the code under test: every operation goes through the current
    /// [`Fault`]. It is a [`LeaseStore`] with every capability of the memory store, for
    /// [`Coordinator::builder`], [`GroupWorker::builder`](crate::GroupWorker::builder),
    /// [`Scheduler::builder`](crate::Scheduler::builder) or [`Observer::new`](crate::Observer::new).
    pub fn store(&self) -> Arc<dyn LeaseStore> {
        self.store.clone()
    }

    /// A coordinator builder over [`store`](TestStore::store) with instance label `instance`,
    /// whose fail action records the failure (see
    /// [`step_down_failures`](TestStore::step_down_failures)) instead of ending the process. Set timings on it as the
    /// code under test does, then `build()`.
    pub fn coordinator(&self, instance: &str) -> CoordinatorBuilder {
        let failures = self.failures.clone();
        Coordinator::builder(self.store())
            .instance(instance)
            .fail_action(move |failure| {
                failures
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(failure.clone());
            })
    }

    /// Each time work under a lost term of a [`coordinator`](TestStore::coordinator) built here
    /// did not return within its step-down grace, in order: what would have ended the process
    /// (exit code 70) with the default fail action. The coordinator aborted that work, as it
    /// does after any fail action that returns.
    pub fn step_down_failures(&self) -> Vec<StepDownFailure> {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Takes the live term of `name` away from its holder now, as a store reports a lease that
    /// ended under its holder (it expired by the store's clock, or an operator force-released
    /// it): the holder's next renewal or verification answers that the lease is no longer held,
    /// and its term is lost (`done()` and `lost()` fire). A holder hears of it within one
    /// renewal period ([`Timings::renew_every`](crate::Timings::renew_every)); work under the
    /// term then has its step-down [`grace`](crate::Timings::grace) to stop. The name is free
    /// for the next claim, which gets a higher term.
    ///
    /// Returns the term taken away, or `None` when no one held the name.
    pub async fn lose(&self, name: &str) -> Result<Option<u64>> {
        let inner = self.store.inner();
        let held = inner.get(name).await?.filter(|info| info.live);
        match held {
            Some(info) if inner.force_release(name).await? => Ok(Some(info.term)),
            _ => Ok(None),
        }
    }

    /// Takes `name` away from its holder (as [`lose`](TestStore::lose) does) and grants it to
    /// another holder, labelled `to`, for `ttl` (by tokio's clock): what the store does when
    /// another node takes over. Returns the new term, the token that holder fences its writes
    /// with; a test writes as that holder with it (see
    /// [`FencedHistory`](crate::testing::FencedHistory)).
    ///
    /// The new holder never renews: its lease ends after `ttl`, or at the next `lose`.
    pub async fn hand_over(&self, name: &str, to: &str, ttl: Duration) -> Result<u64> {
        let inner = self.store.inner();
        self.lose(name).await?;
        match inner.claim(name, &HolderToken::mint(), to, ttl).await? {
            Some(grant) => Ok(grant.term),
            // Only a claim between the release and this one can take it: the code under test
            // claimed again within the same instant.
            None => Err(Error::new(
                ErrorKind::Held,
                format!(
                    "lease::testing: {name:?} was claimed again before it could be handed to \
                     {to:?}; hand it over again"
                ),
            )),
        }
    }

    /// What the store records of `name` now, whatever the fault: the last holder's instance
    /// label, the last term, whether it is live and the time left.
    pub async fn holder(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.store.inner().get(name).await
    }

    /// Stalls the store: no operation is answered until [`heal`](TestStore::heal) or
    /// [`cut`](TestStore::cut). A holder whose renewals stall loses its term at its local
    /// [`deadline`](crate::Timings::deadline), before its lease can run out in the store.
    pub fn stall(&self) {
        self.set_fault(Fault::Stall);
    }

    /// Cuts the store: every operation fails at once with [`ErrorKind::Unavailable`] until
    /// [`heal`](TestStore::heal). Stalled operations fail too.
    pub fn cut(&self) {
        self.set_fault(Fault::Cut);
    }

    /// Ends a stall or a cut: operations are answered again, those held by a stall first.
    pub fn heal(&self) {
        self.set_fault(Fault::Pass);
    }

    /// Sets the fault its users meet from now on (and stalled operations, when it ends a
    /// stall).
    pub fn set_fault(&self, fault: Fault) {
        self.store.hook().fault.send_replace(fault);
    }

    /// The fault its users meet now.
    pub fn fault(&self) -> Fault {
        *self.store.hook().fault.borrow()
    }
}
