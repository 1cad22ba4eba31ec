//! The scheduler's view of its store as a plain [`LeaseStore`], so that slot claims become
//! terms through the coordinator's own machinery.
//!
//! The scheduler claims an instant through [`Coordinator::try_acquire`] over this adapter:
//! while a [`Request`] is in scope (a task-local), the adapter's `claim` is the slot claim
//! (`claim_slot` or `claim_rerun`) and the detailed answer is kept in the request. The claim
//! thereby gets the coordinator's bound on the attempt, its read-back with `verify` after an
//! unknown outcome, its keeper, and its registration for `close`.
//!
//! A round's finish replaces the release of its term: before the scheduler resigns a round's
//! term, it registers the finish under the term's holder token, and the keeper's `release`
//! (after it has stopped renewing) performs `finish_slot` instead. A renewal can therefore
//! never race the finish and find the lease "lost" just after the finish gave it back.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;

use crate::capabilities::Capabilities;
use crate::coordinator::Coordinator;
use crate::error::{Error, ErrorKind, Result};
use crate::notify::{Topic, Wakeups};
use crate::permits::{PermitGrant, PermitInfo};
use crate::record::{Grant, HolderToken, LeaseInfo};
use crate::slots::{SlotClaim, SlotFinish, SlotStore};
use crate::store::LeaseStore;
use crate::term::Term;

tokio::task_local! {
    static REQUEST: Arc<Request>;
}

/// What to claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// The instant, for its first round.
    Instant(i64),
    /// The unfinished instant, for its one rerun.
    Rerun(i64),
}

#[derive(Debug)]
struct Request {
    ask: Ask,
    /// The store's answer to a slot claim (none for a rerun: its grant says it all).
    answer: Mutex<Option<SlotClaim>>,
}

/// The outcome of a claim through the coordinator.
pub(crate) enum Claimed {
    /// This replica runs the round; `superseded_ms` as reported by the store (`None` too when
    /// the claim's answer was lost and read back).
    Term {
        term: Term,
        superseded_ms: Option<i64>,
    },
    /// The lease is held (a round is running), or another replica matched first; for a rerun
    /// also: not (or no longer) eligible.
    Held,
    /// This instant or a later one is on record.
    Taken { last_ms: i64 },
    /// The instant is in the future by the store's clock.
    Early { now_ms: i64 },
    /// The scheduler is shutting down.
    Closed,
    /// The claim failed; its outcome is known not to have taken effect, or unknown and not
    /// found by the read-back.
    Failed(Error),
}

/// A finish waiting for the keeper's release, and its result.
#[derive(Debug)]
struct PendingFinish {
    instant_ms: i64,
    passed_ms: Option<i64>,
    result: Option<Result<SlotFinish>>,
}

pub(crate) struct SlotAdapter {
    inner: Arc<dyn SlotStore>,
    finishes: Mutex<HashMap<HolderToken, PendingFinish>>,
}

impl SlotAdapter {
    pub(crate) fn new(inner: Arc<dyn SlotStore>) -> SlotAdapter {
        SlotAdapter {
            inner,
            finishes: Mutex::new(HashMap::new()),
        }
    }

    fn finishes(&self) -> MutexGuard<'_, HashMap<HolderToken, PendingFinish>> {
        self.finishes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the finish that the release of `holder`'s lease performs.
    pub(crate) fn register_finish(
        &self,
        holder: &HolderToken,
        instant_ms: i64,
        passed_ms: Option<i64>,
    ) {
        self.finishes().insert(
            holder.clone(),
            PendingFinish {
                instant_ms,
                passed_ms,
                result: None,
            },
        );
    }

    /// Removes the registered finish; its result when the release performed it.
    pub(crate) fn take_finish(&self, holder: &HolderToken) -> Option<Result<SlotFinish>> {
        self.finishes().remove(holder).and_then(|p| p.result)
    }
}

impl fmt::Debug for SlotAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotAdapter")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// Claims `name` as `ask` says, through `coordinator` (whose store is the adapter).
pub(crate) async fn claim(coordinator: &Coordinator, name: &str, ask: Ask) -> Claimed {
    let request = Arc::new(Request {
        ask,
        answer: Mutex::new(None),
    });
    let outcome = REQUEST
        .scope(request.clone(), coordinator.try_acquire(name))
        .await;
    let answer = *request.answer.lock().unwrap_or_else(|p| p.into_inner());
    match outcome {
        Ok(term) => {
            let superseded_ms = match answer {
                Some(SlotClaim::Claimed { superseded_ms, .. }) => superseded_ms,
                _ => None,
            };
            Claimed::Term {
                term,
                superseded_ms,
            }
        }
        Err(e) if e.is(ErrorKind::Held) => match answer {
            Some(SlotClaim::Taken { last_ms }) => Claimed::Taken { last_ms },
            Some(SlotClaim::Early { now_ms }) => Claimed::Early { now_ms },
            _ => Claimed::Held,
        },
        Err(e) if e.is(ErrorKind::Closed) => Claimed::Closed,
        Err(e) => Claimed::Failed(e),
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl LeaseStore for SlotAdapter {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn available(&self) -> Result<()> {
        self.inner.available().await
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        let Ok(request) = REQUEST.try_with(Arc::clone) else {
            return self.inner.claim(name, holder, instance, ttl).await;
        };
        match request.ask {
            Ask::Instant(instant_ms) => {
                let claim = self
                    .inner
                    .claim_slot(name, holder, instance, ttl, instant_ms)
                    .await?;
                *request.answer.lock().unwrap_or_else(|p| p.into_inner()) = Some(claim);
                Ok(match claim {
                    SlotClaim::Claimed { grant, .. } => Some(grant),
                    _ => None,
                })
            }
            Ask::Rerun(instant_ms) => {
                self.inner
                    .claim_rerun(name, holder, instance, ttl, instant_ms)
                    .await
            }
        }
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.inner.renew(name, holder, ttl).await
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        let pending = self
            .finishes()
            .get(holder)
            .filter(|p| p.result.is_none())
            .map(|p| (p.instant_ms, p.passed_ms));
        let Some((instant_ms, passed_ms)) = pending else {
            return self.inner.release(name, holder).await;
        };
        let result = self
            .inner
            .finish_slot(name, holder, instant_ms, passed_ms)
            .await;
        if let Some(p) = self.finishes().get_mut(holder) {
            p.result = Some(result.clone());
        }
        result.map(|f| f.released)
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.inner.verify(name, holder).await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.inner.get(name).await
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        self.inner.force_release(name).await
    }

    async fn claim_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<PermitGrant>> {
        self.inner
            .claim_permit(name, permits, holder, instance, ttl)
            .await
    }

    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.inner.renew_permit(name, permit, holder, ttl).await
    }

    async fn release_permit(&self, name: &str, permit: u32, holder: &HolderToken) -> Result<bool> {
        self.inner.release_permit(name, permit, holder).await
    }

    async fn verify_permit(&self, name: &str, holder: &HolderToken) -> Result<Option<PermitGrant>> {
        self.inner.verify_permit(name, holder).await
    }

    async fn read_back_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
    ) -> Result<Option<PermitGrant>> {
        self.inner.read_back_permit(name, permits, holder).await
    }

    async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
        self.inner.permits(name).await
    }

    fn changes(&self, topic: &Topic) -> Option<Wakeups> {
        self.inner.changes(topic)
    }
}
