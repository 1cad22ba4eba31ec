//! The coordinator: claims terms over any [`LeaseStore`], keeps them, and closes them.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};

use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::clock::Stamp;
use crate::error::{BoxError, Error, ErrorKind, Result};
use crate::observer::Observer;
use crate::run::{FailAction, default_fail_action};
use crate::store::{HolderToken, LeaseStore, validate_instance};
use crate::term::{Term, TermShared};
use crate::timings::Timings;

pub(crate) struct CoordShared {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) instance: String,
    pub(crate) timings: Timings,
    pub(crate) fail_action: FailAction,
    /// Work spawned by `run`, waited for by `close`.
    pub(crate) work: TaskTracker,
    /// Fires when the coordinator starts closing.
    pub(crate) closing: CancellationToken,
    terms: Mutex<Terms>,
}

#[derive(Default)]
struct Terms {
    closed: bool,
    live: Vec<Weak<TermShared>>,
}

/// Claims and keeps leases over a [`LeaseStore`]; the entry point of the library.
///
/// Written once for every backend: a store crate only provides the store.
///
/// ```
/// # async fn demo(store: impl lease_core::LeaseStore) -> lease_core::Result<()> {
/// use lease_core::{Coordinator, ErrorKind};
///
/// let coordinator = Coordinator::builder(store).instance("worker-1").build()?;
/// match coordinator.try_acquire("nightly-report").await {
///     Ok(term) => {
///         println!("leader with fencing token {}", term.token());
///         term.resign().await?;
///     }
///     Err(e) if e.kind() == ErrorKind::Held => println!("someone else runs it"),
///     Err(e) => return Err(e),
/// }
/// coordinator.close().await
/// # }
/// ```
#[derive(Clone)]
pub struct Coordinator {
    shared: Arc<CoordShared>,
}

/// Builds a [`Coordinator`].
pub struct CoordinatorBuilder {
    store: Arc<dyn LeaseStore>,
    instance: Option<String>,
    timings: Timings,
    fail_action: FailAction,
}

impl CoordinatorBuilder {
    /// The label others see as this holder's instance (default: host name, process id and a
    /// random suffix). At most 128 printable bytes.
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }

    /// The timings (default: [`Timings::default`]).
    pub fn timings(mut self, timings: Timings) -> Self {
        self.timings = timings;
        self
    }

    /// What to do when work under a lost lease does not return within the step-down grace
    /// (default: log, then end the process with exit code
    /// [`FAIL_EXIT_CODE`](crate::FAIL_EXIT_CODE)). Tests record it instead.
    pub fn fail_action(
        mut self,
        action: impl Fn(&crate::StepDownFailure) + Send + Sync + 'static,
    ) -> Self {
        self.fail_action = Arc::new(action);
        self
    }

    /// Checks the instance label and the timings against the store, and builds.
    pub fn build(self) -> Result<Coordinator> {
        let instance = self.instance.unwrap_or_else(default_instance);
        validate_instance(&instance)?;
        self.store.validate_ttl(self.timings.lease())?;
        Ok(Coordinator {
            shared: Arc::new(CoordShared {
                store: self.store,
                instance,
                timings: self.timings,
                fail_action: self.fail_action,
                work: TaskTracker::new(),
                closing: CancellationToken::new(),
                terms: Mutex::new(Terms::default()),
            }),
        })
    }
}

fn default_instance() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| {
            h.trim()
                .chars()
                .filter(|c| !c.is_control())
                .take(64)
                .collect::<String>()
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    format!(
        "{host}/{}/{:04x}",
        std::process::id(),
        rand::random::<u16>()
    )
}

impl Coordinator {
    /// A builder over `store`.
    pub fn builder(store: impl LeaseStore) -> CoordinatorBuilder {
        Self::builder_arc(Arc::new(store))
    }

    /// A builder over a shared store.
    pub fn builder_arc(store: Arc<dyn LeaseStore>) -> CoordinatorBuilder {
        CoordinatorBuilder {
            store,
            instance: None,
            timings: Timings::default(),
            fail_action: Arc::new(default_fail_action),
        }
    }

    /// A coordinator over `store` with the default timings and instance label.
    pub fn new(store: impl LeaseStore) -> Result<Coordinator> {
        Self::builder(store).build()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn LeaseStore> {
        &self.shared.store
    }

    /// This holder's instance label.
    pub fn instance(&self) -> &str {
        &self.shared.instance
    }

    /// The timings.
    pub fn timings(&self) -> Timings {
        self.shared.timings
    }

    /// An observer over the same store.
    pub fn observer(&self) -> Observer {
        Observer::new(self.shared.store.clone())
    }

    /// `true` once [`close`](Coordinator::close) has been called.
    pub fn is_closed(&self) -> bool {
        self.shared.closing.is_cancelled()
    }

    /// Claims `name` once, without waiting.
    ///
    /// Returns the new [`Term`], or an error of kind [`Held`](ErrorKind::Held) when someone
    /// else holds the name live, [`Closed`](ErrorKind::Closed) after `close`,
    /// [`InvalidName`](ErrorKind::InvalidName) before any I/O for a name the store cannot hold.
    ///
    /// The claim is bounded by the attempt timeout. When its outcome is unknown (a timeout, a
    /// connection dropped after the request was sent), the coordinator reads back with
    /// `verify` under the same holder token and adopts the claim if it took effect. If that too
    /// fails, the error is returned; a claim that lands later holds the name until its TTL
    /// passes, but nobody acts under it, and its holder token is never used again.
    pub async fn try_acquire(&self, name: &str) -> Result<Term> {
        let shared = &self.shared;
        if self.is_closed() {
            return Err(Error::closed());
        }
        let store = &shared.store;
        store.validate_name(name)?;
        let t = shared.timings;
        let holder = HolderToken::mint();
        let start = Stamp::now();
        let outcome = timeout(
            t.attempt_timeout(),
            store.claim(name, &holder, &shared.instance, t.lease()),
        )
        .await;
        let unknown = match outcome {
            Ok(Ok(Some(grant))) => Some(grant),
            Ok(Ok(None)) => {
                debug!(name, "lease is held by another holder");
                return Err(Error::held(name));
            }
            Ok(Err(e)) if !e.is_temporary() => return Err(e),
            Ok(Err(e)) => return self.read_back(name, &holder, start, e).await,
            Err(_) => {
                let e = Error::timeout(format_args!("claim of '{name}'"), t.attempt_timeout());
                return self.read_back(name, &holder, start, e).await;
            }
        };
        let Some(grant) = unknown else {
            return Err(Error::held(name));
        };
        self.adopt(name, holder, start, grant).await
    }

    async fn read_back(
        &self,
        name: &str,
        holder: &HolderToken,
        start: Stamp,
        original: Error,
    ) -> Result<Term> {
        let t = self.shared.timings;
        let left = start.remaining(t.deadline());
        if left.is_zero() {
            return Err(original);
        }
        match timeout(
            t.attempt_timeout().min(left),
            self.shared.store.verify(name, holder),
        )
        .await
        {
            Ok(Ok(Some(grant))) => {
                info!(name, term = grant.term, error = %original, "claim answer was lost but the claim took effect; adopting it");
                self.adopt(name, holder.clone(), start, grant).await
            }
            Ok(Ok(None)) => {
                debug!(name, error = %original, "claim did not take effect");
                Err(original)
            }
            Ok(Err(e)) => {
                debug!(name, error = %e, "read-back after an unknown claim failed");
                Err(original)
            }
            Err(_) => Err(original),
        }
    }

    async fn adopt(
        &self,
        name: &str,
        holder: HolderToken,
        start: Stamp,
        grant: crate::Grant,
    ) -> Result<Term> {
        let term = Term::start(
            name.to_owned(),
            grant.term,
            holder,
            start,
            grant,
            self.shared.clone(),
        );
        let registered = {
            let mut terms = self.shared.terms.lock().unwrap_or_else(|p| p.into_inner());
            if !terms.closed {
                terms.live.retain(|w| w.strong_count() > 0);
                terms.live.push(Arc::downgrade(term.shared()));
            }
            !terms.closed
        };
        if !registered {
            let _ = term.resign().await;
            return Err(Error::closed());
        }
        info!(name, term = grant.term, instance = %self.shared.instance, expires_in = ?grant.expires_in, "lease claimed");
        Ok(term)
    }

    /// Claims `name` and runs `work` under it: see [`Term::run`]. Returns `Held` at once when
    /// someone else holds the name.
    pub async fn run<F, Fut, T, E>(&self, name: &str, work: F) -> Result<T>
    where
        F: FnOnce(Term) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Into<BoxError> + Send + 'static,
    {
        self.try_acquire(name).await?.run(work).await
    }

    /// Campaigns for `name` until the coordinator closes, running `f` under each term won.
    ///
    /// Every [`retry`](Timings::retry) plus jitter it tries to claim the name. When it wins, it
    /// runs `f` as [`Term::run`] does (own task, cancellation through the term's
    /// [`done`](Term::done), step-down grace on loss), resigns when `f` returns, and campaigns
    /// again after a pause. Held and lost terms are the election working: it goes on. A
    /// failed campaign (store unreachable) is logged and retried.
    ///
    /// Returns `Ok(())` once the coordinator is closed, and the error when `f` fails or
    /// panics while its term is live, or when the name or timings are invalid.
    pub async fn run_elected<F, Fut, E>(&self, name: &str, mut f: F) -> Result<()>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError> + Send + 'static,
    {
        self.shared.store.validate_name(name)?;
        let mut first = true;
        loop {
            if !first {
                let pause = self.shared.timings.retry_delay();
                tokio::select! {
                    biased;
                    _ = self.shared.closing.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(pause) => {}
                }
            }
            first = false;
            let term = match self.try_acquire(name).await {
                Ok(term) => term,
                Err(e) => match e.kind() {
                    ErrorKind::Held => continue,
                    ErrorKind::Closed => return Ok(()),
                    ErrorKind::InvalidName | ErrorKind::InvalidTimings | ErrorKind::Unsupported => {
                        return Err(e);
                    }
                    _ => {
                        warn!(name, error = %e, "campaign failed; retrying");
                        continue;
                    }
                },
            };
            let fut = f(term.clone());
            match term.run_future(fut).await {
                Ok(()) => debug!(name, "work returned; campaigning again"),
                Err(e) if e.is(ErrorKind::Lost) => {
                    info!(name, error = %e, "term lost; campaigning again");
                }
                Err(e) if e.is(ErrorKind::Closed) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Closes the coordinator.
    ///
    /// Every term is signalled ([`done`](Term::done) fires with `Closed`); work under
    /// [`Term::run`] and [`run_elected`](Coordinator::run_elected) gets up to the step-down
    /// grace to return while its leases are still renewed; then every term whose work has
    /// returned is released. New claims fail with `Closed`.
    ///
    /// When some work has not returned within the grace, `close` returns a `Timeout` error;
    /// those leases stay held and are released as soon as their work returns, never before.
    pub async fn close(&self) -> Result<()> {
        let terms: Vec<Arc<TermShared>> = {
            let mut terms = self.shared.terms.lock().unwrap_or_else(|p| p.into_inner());
            terms.closed = true;
            terms.live.drain(..).filter_map(|w| w.upgrade()).collect()
        };
        self.shared.closing.cancel();
        for t in &terms {
            t.end(Some(Error::closed()));
        }
        self.shared.work.close();
        let grace = self.shared.timings.grace();
        let waited = timeout(grace, self.shared.work.wait()).await;
        let mut still_running = 0usize;
        for t in &terms {
            if t.under_run.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                let _ = t.stop_and_wait().await;
            } else if waited.is_ok() {
                // The work has returned and its `run` is resigning: wait for the release.
                let _ = timeout(t.timings.attempt_timeout(), t.finished.cancelled()).await;
            } else {
                still_running += 1;
            }
        }
        if waited.is_err() && still_running > 0 {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "work under {still_running} lease(s) did not return within the step-down \
                     grace of {grace:?}; those leases stay held until it returns"
                ),
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coordinator")
            .field("store", &self.shared.store)
            .field("instance", &self.shared.instance)
            .field("timings", &self.shared.timings)
            .field("closed", &self.is_closed())
            .finish()
    }
}
