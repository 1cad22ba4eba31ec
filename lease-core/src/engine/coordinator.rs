//! The coordinator: claims terms over any [`LeaseStore`], keeps them, and closes them.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::clock::{Deadline, Stamp};
use crate::engine::context::CoordShared;
use crate::engine::leadership::{Board, Leadership};
use crate::engine::observer::Observer;
use crate::engine::renewer::Renewer;
use crate::engine::step_down::{FailAction, StepDownFailure, default_fail_action};
use crate::engine::term::{Term, TermShared};
use crate::engine::wait::{Holder, Seen};
use crate::store::error::{BoxError, Error, ErrorKind, Result};
use crate::store::lease_store::{LeaseStore, permits_of, shared, slots_of};
use crate::store::record::{Grant, HolderToken, validate_instance};
use crate::store::slots::SlotClaim;
use crate::store::store_ext::LeaseStoreExt;
use crate::store::target::Target;
use crate::store::validate::MAX_TTL;
use crate::telemetry;
use crate::timings::Timings;

/// What [`Coordinator::run_elected`] does when its work fails — returns an error or panics —
/// while its term is live (a failure that turns out to be the term's loss is a loss, never
/// this: see [`Term::run`]).
///
/// The default is [`Restart`](OnWorkError::Restart) with a backoff of up to a minute. An
/// elector exists to keep a leader: a transient error in the leader's work (a database that
/// blipped, a downstream call that timed out) should cost a step-down, not this node's place
/// in the election for good, and releasing at once lets a healthy node take over while this
/// one backs off. Every failure is logged at warn level with the error and counted
/// ([`telemetry::WORK_FAILURES`]), so a failure that never clears (a bad configuration) shows
/// as a steady stream rather than a silent, dead elector. Choose
/// [`Return`](OnWorkError::Return) when the caller must see the error — a command-line tool
/// that should exit non-zero, a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnWorkError {
    /// Step down (the lease is released as after any term), pause, and campaign again. After
    /// the n-th failure in a row the pause is `retry × 2ⁿ⁻¹`, at most `max_backoff` (and never
    /// less than `retry`), plus the usual random jitter; a term that ends without a failure
    /// starts the count again.
    Restart {
        /// The longest pause after a failure (at most a day).
        max_backoff: Duration,
    },
    /// End the election: `run_elected` returns the error ([`Work`](ErrorKind::Work) or
    /// [`Panicked`](ErrorKind::Panicked)), logged at error level and counted in
    /// [`telemetry::ELECTIONS_ENDED`].
    Return,
}

impl OnWorkError {
    /// The default's longest pause after failures in a row: one minute.
    pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(60);

    /// The pause before the next campaign after `failures` failures in a row (at least 1).
    fn backoff(&self, timings: &Timings, failures: u32) -> Duration {
        let OnWorkError::Restart { max_backoff } = *self else {
            return timings.retry();
        };
        let doublings = failures.saturating_sub(1).min(30);
        let pause = timings.retry().saturating_mul(1u32 << doublings);
        pause.min(max_backoff).max(timings.retry())
    }
}

impl Default for OnWorkError {
    /// [`Restart`](OnWorkError::Restart) with a backoff of at most
    /// [`DEFAULT_MAX_BACKOFF`](OnWorkError::DEFAULT_MAX_BACKOFF).
    fn default() -> Self {
        OnWorkError::Restart {
            max_backoff: Self::DEFAULT_MAX_BACKOFF,
        }
    }
}

/// How a coordinator renews the plain leases it holds.
///
/// Terms of counted names (permits) are renewed by their own keeper whichever is chosen.
///
/// The default is [`Auto`](Renewals::Auto): coalesced on the stores that renew many leases in
/// one request or one pipelined burst (PostgreSQL, MariaDB 10.6 or later, MongoDB, NATS, Redis,
/// SQLite, the memory store), per term on the others (MySQL, older MariaDB, etcd). The bench's
/// "held names" section (BENCHMARKS.md) holds 1,000 and 10,000 names both ways in one run:
/// coalesced, no term is lost and a renew period costs a handful of store operations instead
/// of one per name. (Coalesced renewals once lost most of 10,000 terms on PostgreSQL: its
/// batch statement joined two CTEs in a nested loop, 10^8 comparisons per batch; fixed.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Renewals {
    /// [`Coalesced`](Renewals::Coalesced) when the store renews many leases in one request
    /// ([`Capabilities::renew_many`](crate::backend::Capabilities::renew_many)),
    /// [`PerTerm`](Renewals::PerTerm) otherwise. The default.
    #[default]
    Auto,
    /// Every term has its own keeper task, which renews it with
    /// [`renew`](crate::LeaseStore::renew) every [`renew_every`](Timings::renew_every): one
    /// round trip per term per period.
    PerTerm,
    /// One renewer for the coordinator renews every term it holds with
    /// [`renew_many`](crate::LeaseStore::renew_many), one batch (of at most
    /// [`MAX_RENEWALS_PER_CALL`](crate::backend::MAX_RENEWALS_PER_CALL) names) per period. Each
    /// term keeps its own deadline: it counts from the start of the batch that renewed it; an
    /// answer that the lease is gone ends that term alone; a batch that fails or does not
    /// answer moves no deadline and is sent again at the next tick, bounded by its oldest
    /// term's deadline. A term joins the next batch; one whose last renewal is less than a
    /// quarter period old waits for the one after, and none waits longer than a period. On a
    /// store without native batches this sends the renewals one after the other.
    Coalesced,
}

/// The terms a coordinator has handed out, for `close` to end.
#[derive(Default)]
struct Terms {
    closed: bool,
    /// Every term handed out since the last sweep; ended ones are swept out.
    live: Vec<Weak<TermShared>>,
    /// The length at which the next claim sweeps ended terms out of `live` first: twice what
    /// the last sweep left (at least [`Terms::SWEEP_FLOOR`]), so claiming N names costs O(N)
    /// in all, not a scan of every held term per claim.
    sweep_at: usize,
}

impl Terms {
    /// The smallest sweep mark.
    const SWEEP_FLOOR: usize = 64;

    /// Keeps `term` for `close`.
    fn add(&mut self, term: Weak<TermShared>) {
        if self.live.len() >= self.sweep_at {
            self.live.retain(|w| w.strong_count() > 0);
            self.sweep_at = Self::SWEEP_FLOOR.max(self.live.len().saturating_mul(2));
        }
        self.live.push(term);
    }
}

/// What a claim won: the permit (for a counted name) and the grant; `None` when held.
type Won = Option<(Option<u32>, Grant)>;

/// What the scheduler claims through [`Coordinator::claim_slot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotAsk {
    /// The instant, for its first round (`claim_slot`).
    Instant(i64),
    /// The unfinished instant, for its one rerun (`claim_rerun`).
    Rerun(i64),
}

/// The claim an attempt makes, and with it how the attempt reads back an unknown outcome.
#[derive(Clone, Copy)]
enum Claim<'a> {
    /// A name (`claim`, read back with `verify`) or one permit of a counted name
    /// (`claim_permit`, read back with `read_back_permit`).
    Target(&'a Target),
    /// An instant of a scheduler job (`claim_slot`) or its rerun (`claim_rerun`), on the
    /// coordinator's own store, through its slots. Read back with `verify`, as a name: the
    /// holder token is new, so a lease found under it was granted by this claim, which the
    /// store makes only when the slot rules allow it.
    Slot { name: &'a str, ask: SlotAsk },
}

impl Claim<'_> {
    fn name(&self) -> &str {
        match self {
            Claim::Target(target) => target.name(),
            Claim::Slot { name, .. } => name,
        }
    }

    /// The permit count, for a permit of a counted name.
    fn permits(&self) -> Option<u32> {
        match self {
            Claim::Target(target) => target.permits(),
            Claim::Slot { .. } => None,
        }
    }

    /// `Held` for this claim: the name is held, or every permit of it.
    fn held(&self) -> Error {
        match self {
            Claim::Target(Target::Permits(p)) => Error::new(
                ErrorKind::Held,
                format!(
                    "all {} permits of '{}' are held by others",
                    p.count(),
                    p.name()
                ),
            ),
            _ => Error::held(self.name()),
        }
    }
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
    /// The live terms, ended by `close`; closed once `close` has begun.
    terms: Arc<Mutex<Terms>>,
    /// What `run_elected` does when its work fails.
    on_work_error: OnWorkError,
}

/// Builds a [`Coordinator`].
pub struct CoordinatorBuilder {
    store: Arc<dyn LeaseStore>,
    instance: Option<String>,
    timings: Timings,
    fail_action: FailAction,
    on_work_error: OnWorkError,
    renewals: Renewals,
}

impl CoordinatorBuilder {
    /// How the terms of plain leases are renewed (default: [`Renewals::Auto`]; see
    /// [`Renewals`]).
    pub fn renewals(mut self, renewals: Renewals) -> Self {
        self.renewals = renewals;
        self
    }

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
    /// (default: [`default_fail_action`](crate::coordinator::default_fail_action), a line on
    /// stderr and a log at error level, then the end of the process with exit code
    /// [`FAIL_EXIT_CODE`](crate::coordinator::FAIL_EXIT_CODE)). Tests record it instead (the
    /// facade's `lease::testing::TestStore::coordinator` does).
    pub fn fail_action(
        mut self,
        action: impl Fn(&StepDownFailure) + Send + Sync + 'static,
    ) -> Self {
        self.fail_action = Arc::new(action);
        self
    }

    /// What [`run_elected`](Coordinator::run_elected) does when its work fails while its term
    /// is live (default: [`OnWorkError::Restart`] with a backoff of up to a minute; see
    /// [`OnWorkError`] for why).
    pub fn on_work_error(mut self, policy: OnWorkError) -> Self {
        self.on_work_error = policy;
        self
    }

    /// Checks the instance label and the timings against the store, and builds.
    pub fn build(self) -> Result<Coordinator> {
        telemetry::describe_once();
        let instance = self.instance.unwrap_or_else(default_instance);
        validate_instance(&instance)?;
        self.store.validate_ttl(self.timings.lease())?;
        self.timings
            .check_clock_granularity(self.store.capabilities().clock_granularity)?;
        if let OnWorkError::Restart { max_backoff } = self.on_work_error
            && max_backoff > MAX_TTL
        {
            return Err(Error::invalid_timings(format!(
                "the backoff after work failures of up to {max_backoff:?} exceeds the maximum \
                 {MAX_TTL:?}; choose seconds to minutes"
            )));
        }
        let coalesce = match self.renewals {
            Renewals::Auto => self.store.capabilities().renew_many,
            Renewals::PerTerm => false,
            Renewals::Coalesced => true,
        };
        let renewer = coalesce.then(|| Arc::new(Renewer::new(self.store.clone(), self.timings)));
        Ok(Coordinator {
            shared: Arc::new(CoordShared {
                store: self.store,
                instance,
                timings: self.timings,
                fail_action: self.fail_action,
                work: TaskTracker::new(),
                closing: CancellationToken::new(),
                leadership: Board::default(),
                renewer,
            }),
            terms: Arc::new(Mutex::new(Terms::default())),
            on_work_error: self.on_work_error,
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
    /// A builder over `store`: the store itself, or a shared one (an `Arc<dyn LeaseStore>` is
    /// taken as it is, not wrapped again; `Arc<S>` is a store too).
    pub fn builder(store: impl LeaseStore) -> CoordinatorBuilder {
        CoordinatorBuilder {
            store: shared(store),
            instance: None,
            timings: Timings::default(),
            fail_action: Arc::new(default_fail_action),
            on_work_error: OnWorkError::default(),
            renewals: Renewals::default(),
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
        Observer::from_arc(self.shared.store.clone()).with_timings(self.shared.timings)
    }

    /// A watch of this coordinator's own leadership of `name`: whether it holds a live term,
    /// which, since when, and, while it follows, who holds the name as its last campaign saw
    /// (see [`Leadership`]). Cheap: no I/O; the value changes when a term of `name` is won or
    /// ends, and when a campaign of [`run_elected`](Coordinator::run_elected) sees another
    /// holder. Made for readiness endpoints and admin pages:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lease_core::Result<()> {
    /// let coordinator = lease_core::Coordinator::builder(lease_local::MemoryStore::new())
    ///     .instance("api-1")
    ///     .build()?;
    /// let mut leadership = coordinator.leadership("billing-leader");
    /// assert!(!leadership.borrow().held);
    ///
    /// let term = coordinator.try_acquire("billing-leader").await?;
    /// leadership.changed().await.ok();
    /// assert!(leadership.borrow().held);
    /// assert_eq!(leadership.borrow().term, Some(term.token()));
    ///
    /// term.resign().await?;
    /// assert!(!leadership.borrow().held);
    /// coordinator.close().await
    /// # }
    /// ```
    ///
    /// A name this coordinator never claims stays not held; the channel lives as long as the
    /// coordinator.
    pub fn leadership(&self, name: &str) -> tokio::sync::watch::Receiver<Leadership> {
        self.shared.leadership.subscribe(name)
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
    /// connection dropped after the request was sent), the coordinator reads back with `verify`
    /// under the same holder token and adopts the claim if it took effect (a permit claim with
    /// [`read_back_permit`](crate::backend::permits::PermitStore::read_back_permit), which adopts a
    /// permit only if the claim's count was checked for it). If that too fails, the error is
    /// returned; a claim that lands later holds the name until its TTL passes, but nobody acts
    /// under it, and its holder token is never used again.
    ///
    /// Takes a name or a [`Permits`](crate::Permits): for a counted name it claims one permit
    /// (the error is `Held` when every permit is live), and the term's
    /// [`permit`](Term::permit) says which.
    pub async fn try_acquire(&self, target: impl Into<Target>) -> Result<Term> {
        self.claim_once(&target.into()).await
    }

    /// [`try_acquire`](Coordinator::try_acquire) of `target`.
    pub(crate) async fn claim_once(&self, target: &Target) -> Result<Term> {
        self.claim_attempt(Claim::Target(target)).await.0
    }

    /// Claims an instant of the scheduler's job `name`, or its rerun, as `ask` says, once: the
    /// same attempt as [`try_acquire`](Coordinator::try_acquire)'s (bounded by the attempt
    /// timeout, read back with `verify` when its outcome is unknown, the term adopted and
    /// registered for `close`), on this coordinator's own store, through its slots.
    ///
    /// Returns the term, or the error (`Held` when the store did not grant the claim, `Closed`
    /// after `close`), and beside it the store's answer to `claim_slot`: `None` for a rerun
    /// (its grant says it all) and when the answer was lost (a claim then adopted by the
    /// read-back reports no superseded instant).
    pub(crate) async fn claim_slot(
        &self,
        name: &str,
        ask: SlotAsk,
    ) -> (Result<Term>, Option<SlotClaim>) {
        self.claim_attempt(Claim::Slot { name, ask }).await
    }

    /// One attempt of `claim`: claim once, read back an unknown outcome, adopt what was won.
    /// Returns the term or the error, and the store's answer to a slot claim.
    async fn claim_attempt(&self, claim: Claim<'_>) -> (Result<Term>, Option<SlotClaim>) {
        let shared = &self.shared;
        if self.is_closed() {
            return (Err(Error::closed()), None);
        }
        let name = claim.name();
        let store = &shared.store;
        if let Err(e) = store.validate_name(name) {
            return (Err(e), None);
        }
        let t = shared.timings;
        let holder = HolderToken::mint();
        let start = Stamp::now();
        let (instance, ttl) = (shared.instance.as_str(), t.lease());
        let request = async {
            match claim {
                Claim::Target(target) => match target.permits() {
                    None => Ok((
                        store
                            .claim(name, &holder, instance, ttl)
                            .await?
                            .map(|g| (None, g)),
                        None,
                    )),
                    Some(n) => Ok((
                        permits_of(&**store)?
                            .claim_permit(name, n, &holder, instance, ttl)
                            .await?
                            .map(|g| (Some(g.permit), g.grant)),
                        None,
                    )),
                },
                Claim::Slot {
                    ask: SlotAsk::Instant(instant_ms),
                    ..
                } => {
                    let answer = slots_of(&**store)?
                        .claim_slot(name, &holder, instance, ttl, instant_ms)
                        .await?;
                    let won = match answer {
                        SlotClaim::Claimed { grant, .. } => Some((None, grant)),
                        _ => None,
                    };
                    Ok((won, Some(answer)))
                }
                Claim::Slot {
                    ask: SlotAsk::Rerun(instant_ms),
                    ..
                } => Ok((
                    slots_of(&**store)?
                        .claim_rerun(name, &holder, instance, ttl, instant_ms)
                        .await?
                        .map(|g| (None, g)),
                    None,
                )),
            }
        };
        let outcome: std::result::Result<Result<(Won, Option<SlotClaim>)>, _> =
            timeout(t.attempt_timeout(), request).await;
        let ((permit, grant), answer) = match outcome {
            Ok(Ok((Some(won), answer))) => (won, answer),
            Ok(Ok((None, answer))) => {
                debug!(name, "lease is held by another holder");
                return (Err(claim.held()), answer);
            }
            Ok(Err(e)) if !e.is_temporary() => return (Err(e), None),
            Ok(Err(e)) => return (self.read_back(claim, &holder, start, e).await, None),
            Err(_) => {
                let e = Error::timeout(format_args!("claim of '{name}'"), t.attempt_timeout());
                return (self.read_back(claim, &holder, start, e).await, None);
            }
        };
        (self.adopt(name, permit, holder, start, grant).await, answer)
    }

    async fn read_back(
        &self,
        claim: Claim<'_>,
        holder: &HolderToken,
        start: Stamp,
        original: Error,
    ) -> Result<Term> {
        let name = claim.name();
        let t = self.shared.timings;
        let left = start.remaining(t.deadline());
        if left.is_zero() {
            return Err(original);
        }
        let store = &self.shared.store;
        let verify = async {
            match claim.permits() {
                None => Ok(store.verify(name, holder).await?.map(|g| (None, g))),
                Some(n) => Ok(permits_of(&**store)?
                    .read_back_permit(name, n, holder)
                    .await?
                    .map(|g| (Some(g.permit), g.grant))),
            }
        };
        let read: std::result::Result<Result<Won>, _> =
            timeout(t.attempt_timeout().min(left), verify).await;
        match read {
            Ok(Ok(Some((permit, grant)))) => {
                info!(name, term = grant.term, error = %original, "claim answer was lost but the claim took effect; adopting it");
                self.adopt(name, permit, holder.clone(), start, grant).await
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
        permit: Option<u32>,
        holder: HolderToken,
        start: Stamp,
        grant: Grant,
    ) -> Result<Term> {
        let term = Term::start(
            name.to_owned(),
            permit,
            grant.term,
            holder,
            start,
            grant,
            self.shared.clone(),
        );
        let registered = {
            let mut terms = self.terms.lock().unwrap_or_else(|p| p.into_inner());
            if !terms.closed {
                terms.add(Arc::downgrade(term.shared()));
            }
            !terms.closed
        };
        if !registered {
            let _ = term.resign().await;
            return Err(Error::closed());
        }
        match permit {
            None => {
                info!(name, term = grant.term, instance = %self.shared.instance, expires_in = ?grant.expires_in, "lease claimed");
            }
            Some(permit) => {
                info!(name, permit, term = grant.term, instance = %self.shared.instance, expires_in = ?grant.expires_in, "permit claimed");
            }
        }
        Ok(term)
    }

    /// Claims `name` and runs `work` under it: see [`Term::run`]. Returns `Held` at once when
    /// someone else holds the name.
    pub async fn run<F, Fut, T, E>(&self, target: impl Into<Target>, work: F) -> Result<T>
    where
        F: FnOnce(Term) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Into<BoxError> + Send + 'static,
    {
        self.try_acquire(target).await?.run(work).await
    }

    /// Campaigns for `name` until the coordinator closes, running `f` under each term won.
    ///
    /// It campaigns as [`acquire`](Coordinator::acquire) does: a claim, then, while someone else
    /// holds the name, a wait until the holder's lease runs out by the store's clock, a store's
    /// hint (a release wakes it within milliseconds on stores that say `watch`), or — where hints
    /// may be missing — the retry pace; see [`wait`](crate::backend::wait). When it wins, it runs
    /// `f` as [`Term::run`] does (own task, cancellation through the term's [`done`](Term::done),
    /// step-down grace on loss), resigns when `f` returns, and campaigns again after a pause of
    /// [`retry`](Timings::retry) plus jitter (so a candidate that just held the name leaves the
    /// others their turn). Held and lost terms are the election working: it goes on. A loss the
    /// work learns of first — it fails with a `Lost` error in its chain of sources (a fenced write
    /// that found the lease expired), or fails once the term is no longer live or no longer held by
    /// the store — is a loss too. A failed campaign (store unreachable) is logged and retried.
    ///
    /// When `f` fails (an error or a panic) while its term is live, the coordinator's
    /// [`OnWorkError`] policy decides: by default the node steps down and campaigns again
    /// after a growing backoff; with [`OnWorkError::Return`] the error is returned.
    ///
    /// While another node holds the name, a campaign answered held reads the holder (one
    /// `get`), to learn when its lease runs out; a poll at the retry pace skips the read while
    /// the holder's lease, as last read, is still ahead. So an idle candidate behind a holder
    /// that renews costs about one claim and one read per lease period where the store hints,
    /// and one claim per retry where it does not. It logs at info when this node
    /// starts following and when it sees the holder change (instance, term, time left by the
    /// store's clock), and publishes the holder on [`leadership`](Coordinator::leadership). A
    /// lost term is logged at warn. Campaigns are counted in [`telemetry::CAMPAIGNS`] by
    /// outcome.
    ///
    /// Returns `Ok(())` once the coordinator is closed; an error for invalid names or timings,
    /// or a work failure under [`OnWorkError::Return`]. Every end is counted in
    /// [`telemetry::ELECTIONS_ENDED`] by reason; an end other than a close is logged at error
    /// level, since the node no longer campaigns.
    ///
    /// Dropping this future ends the current term as closed (its work is told to stop); the
    /// lease is renewed until the work has returned, then released.
    pub async fn run_elected<F, Fut, E>(&self, target: impl Into<Target>, mut f: F) -> Result<()>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError> + Send + 'static,
    {
        let target = target.into();
        let name = target.name();
        if let Err(e) = self.shared.store.validate_name(name) {
            return self.election_ended(name, Err(e));
        }
        let mut waiter = match self.waiter(&target) {
            Ok(w) => w,
            Err(e) if e.is(ErrorKind::Closed) => return self.election_ended(name, Ok(())),
            Err(e) => return self.election_ended(name, Err(e)),
        };
        telemetry::campaigning(name);
        let policy = self.on_work_error;
        let t = self.shared.timings;
        let mut failures = 0u32;
        // The pause before the next campaign: none at first, `retry` plus jitter after a term
        // of this node's ends (its successor gets its turn) or a campaign fails for good.
        let mut pause: Option<Duration> = None;
        // The holder last logged while following, so a line is written when it changes.
        let mut followed: Option<(String, u64)> = None;
        // No start-up herd: read first, and spread the first claim of a free name.
        let first = self.before_first_claim(&mut waiter, |holder| {
            telemetry::campaign(name, "held");
            self.follow(name, holder, &mut followed);
        });
        if first.await.is_err() {
            return self.election_ended(name, Ok(()));
        }
        loop {
            if let Some(pause) = pause.take() {
                tokio::select! {
                    biased;
                    _ = self.shared.closing.cancelled() => return self.election_ended(name, Ok(())),
                    _ = tokio::time::sleep(pause) => {}
                }
            }
            let campaign = self
                .campaign(&target, Deadline::never(), &mut waiter, |seen| match seen {
                    Seen::Held(holder) => {
                        telemetry::campaign(name, "held");
                        self.follow(name, holder, &mut followed);
                    }
                    Seen::Failed(e) => {
                        telemetry::campaign(name, "error");
                        warn!(name, error = %e, "campaign failed; retrying");
                    }
                })
                .await;
            let term = match campaign {
                Ok(Some(term)) => term,
                Ok(None) => continue,
                Err(e) => match e.kind() {
                    ErrorKind::Closed => return self.election_ended(name, Ok(())),
                    ErrorKind::InvalidName | ErrorKind::InvalidTimings | ErrorKind::Unsupported => {
                        return self.election_ended(name, Err(e));
                    }
                    _ => {
                        telemetry::campaign(name, "error");
                        warn!(name, error = %e, "campaign failed; retrying");
                        pause = Some(t.retry_delay());
                        continue;
                    }
                },
            };
            telemetry::campaign(name, "claimed");
            followed = None;
            let token = term.token();
            pause = Some(t.retry_delay());
            match term.run(&mut f).await {
                Ok(()) => {
                    failures = 0;
                    if self.is_closed() {
                        // The work returned because the coordinator closes: no new campaign.
                        return self.election_ended(name, Ok(()));
                    }
                    debug!(name, term = token, "work returned; campaigning again");
                }
                Err(e) if e.is(ErrorKind::Lost) => {
                    failures = 0;
                    warn!(name, term = token, error = %e, "term lost; campaigning again");
                }
                Err(e) if e.is(ErrorKind::Closed) => {
                    if self.is_closed() {
                        return self.election_ended(name, Ok(()));
                    }
                    failures = 0;
                    debug!(name, term = token, error = %e, "term closed; campaigning again");
                }
                Err(e) => {
                    telemetry::work_failed(name);
                    match policy {
                        OnWorkError::Return => return self.election_ended(name, Err(e)),
                        OnWorkError::Restart { .. } => {
                            failures = failures.saturating_add(1);
                            let backoff = policy.backoff(&t, failures);
                            let jitter = t.retry_delay().saturating_sub(t.retry());
                            pause = Some(backoff + jitter);
                            warn!(name, term = token, error = %e, failures, ?backoff, "work failed; stepped down, campaigning again after the backoff");
                        }
                    }
                }
            }
        }
    }

    /// After a campaign found `name` held and its waiter read the holder: publishes it on the
    /// leadership watch, and logs at info when this node starts following or the holder
    /// changed. Nothing when the waiter did not read (the holder's lease, as last read, had
    /// not run out: it cannot have changed unless it released, which a later read shows).
    fn follow(&self, name: &str, holder: &Holder, followed: &mut Option<(String, u64)>) {
        let h = match holder {
            Holder::Unread => return,
            Holder::Vacant => {
                self.shared.leadership.following(name, None);
                debug!(
                    name,
                    "the name was held at the claim and free when read; campaigning again"
                );
                return;
            }
            Holder::Live(h) => h,
        };
        self.shared.leadership.following(name, Some(h));
        let seen = (h.instance.clone(), h.term);
        if followed.as_ref() == Some(&seen) {
            return;
        }
        let earlier_own = h.instance == self.shared.instance;
        match followed.replace(seen) {
            None if earlier_own => info!(
                name,
                holder = %h.instance,
                term = h.term,
                expires_in = ?h.expires_in,
                "following: an earlier term of this instance holds the lease until it expires \
                 (expires_in by the store's clock)"
            ),
            None => info!(
                name,
                holder = %h.instance,
                term = h.term,
                expires_in = ?h.expires_in,
                "following: another instance holds the lease (expires_in by the store's clock)"
            ),
            Some((before, before_term)) => info!(
                name,
                holder = %h.instance,
                term = h.term,
                expires_in = ?h.expires_in,
                previous = %before,
                previous_term = before_term,
                "following: the holder changed (expires_in by the store's clock)"
            ),
        }
    }

    /// The tracker of the coordinator's tasks that `close` waits for.
    pub(crate) fn tracker(&self) -> &TaskTracker {
        &self.shared.work
    }

    /// The token that fires when the coordinator starts closing.
    pub(crate) fn closing(&self) -> &CancellationToken {
        &self.shared.closing
    }

    /// Logs and counts the end of a `run_elected` loop.
    fn election_ended(&self, name: &str, result: Result<()>) -> Result<()> {
        match &result {
            Ok(()) => {
                telemetry::election_ended(name, "closed");
                info!(name, "election ended: the coordinator is closed");
            }
            Err(e) => {
                telemetry::election_ended(name, e.kind().as_str());
                error!(name, error = %e, kind = %e.kind(), "election ended: this node no longer campaigns for the lease");
            }
        }
        result
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
    ///
    /// A [`Term::run`] racing `close` either took its term first — `close` then leaves the
    /// release to it and waits for its work like any other — or finds the term ended and starts
    /// no work: no work ever starts, or goes on, under a term that `close` released.
    pub async fn close(&self) -> Result<()> {
        let terms: Vec<Arc<TermShared>> = {
            let mut terms = self.terms.lock().unwrap_or_else(|p| p.into_inner());
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
            // Decided under the lock a starting run takes: either no run uses the term and it
            // is released here (a run that comes later sees the term ended and starts nothing),
            // or the release is left to the run.
            if t.stop_if_unused() {
                let _ = t.stop_and_wait().await;
            } else if waited.is_ok() {
                // The work has returned and its `run` is resigning: wait for the release.
                let released = timeout(t.timings.attempt_timeout(), t.finished.cancelled()).await;
                if released.is_err() && t.runs() > 0 {
                    still_running += 1;
                }
            } else {
                still_running += 1;
            }
        }
        if still_running > 0 {
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
