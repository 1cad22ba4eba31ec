//! The scheduler's loops: one per job (wait for the instant, claim it, run the round), and one
//! that looks for rounds cut short and reruns them.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use super::clock::WallClock;
use super::due::{DueInstant, DueOutcome};
use super::job::{CatchUp, Job};
use super::round::{RoundEnv, run_round};
use super::schedule::Schedule;
use super::telemetry;
use crate::engine::coordinator::{Coordinator, SlotAsk};
use crate::engine::term::Term;
use crate::store::error::{Error, ErrorKind, Result};
use crate::store::lease_store::{LeaseStore, slots_of};
use crate::store::notify::{Topic, Wakeups};
use crate::store::slots::{SlotClaim, SlotRecord};

/// The longest single sleep while waiting for an instant: the wall clock is read again after
/// it, so a step of the system clock delays a round by at most this much.
const MAX_NAP: Duration = Duration::from_secs(60);

/// Past the end of the lease that held an instant, when the claim is asked again (the store's
/// clock and the local one agree only to the millisecond), and the least pause between two
/// claims of a held instant.
const HELD_MARGIN: Duration = Duration::from_millis(10);

/// When a claim was answered `Held` but the lease reads as ended (it ended in between, or a
/// store's answers disagree for a moment), the pause before the claim is asked again.
const HELD_RECHECK: Duration = Duration::from_millis(100);

pub(crate) const IDLE: u8 = 0;
pub(crate) const RUNNING: u8 = 1;
pub(crate) const RAN: u8 = 2;

pub(crate) struct Inner {
    /// The store, which has slots (checked at `build`); the coordinator runs on the same one.
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) coordinator: Coordinator,
    pub(crate) jobs: Vec<Job>,
    pub(crate) clock: Arc<dyn WallClock>,
    pub(crate) rerun_check: Option<Duration>,
    /// Fires when the scheduler starts shutting down.
    pub(crate) stopping: CancellationToken,
    /// IDLE, RUNNING or RAN.
    pub(crate) state: AtomicU8,
    /// The job loops and the rerun loop, so `shutdown` can wait for them without `run`'s own
    /// future being polled.
    pub(crate) loops: TaskTracker,
}

/// The outcome of a claim through the coordinator.
enum Claimed {
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

impl Inner {
    /// The store's record of job `name`.
    async fn last_slot(&self, name: &str) -> Result<Option<SlotRecord>> {
        slots_of(&*self.store)?.last_slot(name).await
    }

    /// The store's unfinished rounds among the jobs `names`.
    async fn unfinished(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
        slots_of(&*self.store)?.unfinished(names).await
    }

    /// Claims `name` as `ask` says, through the coordinator's claim of a slot.
    async fn claim(&self, name: &str, ask: SlotAsk) -> Claimed {
        let (outcome, answer) = self.coordinator.claim_slot(name, ask).await;
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

    /// What a round needs of the scheduler.
    fn round_env(&self) -> RoundEnv<'_> {
        RoundEnv {
            store: &*self.store,
            clock: &*self.clock,
        }
    }

    /// Sleeps `d`; `false` when the scheduler started shutting down first.
    async fn nap(&self, d: Duration) -> bool {
        tokio::select! {
            biased;
            _ = self.stopping.cancelled() => false,
            _ = sleep(d) => true,
        }
    }

    /// Sleeps `d`, or until a hint of `hints` (then a small jitter); `false` when the scheduler
    /// started shutting down first.
    async fn nap_or_hint(&self, d: Duration, hints: &mut Option<Wakeups>) -> bool {
        let hinted = tokio::select! {
            biased;
            _ = self.stopping.cancelled() => return false,
            _ = sleep(d) => false,
            () = crate::engine::wait::next_hint(hints) => true,
        };
        if hinted {
            return self
                .nap(crate::engine::wait::hint_jitter(
                    &self.coordinator.timings(),
                ))
                .await;
        }
        true
    }

    /// Waits until the wall clock reaches `instant_ms`; `false` on shutdown.
    async fn wait_for(&self, instant_ms: i64) -> bool {
        loop {
            if self.stopping.is_cancelled() {
                return false;
            }
            let now = self.clock.now_ms();
            if now >= instant_ms {
                return true;
            }
            let left = Duration::from_millis(u64::try_from(instant_ms - now).unwrap_or(0));
            if !self.nap(left.min(MAX_NAP)).await {
                return false;
            }
        }
    }

    fn retry_pause(&self) -> Duration {
        self.coordinator.timings().retry_delay()
    }

    fn rerun_pause(&self) -> Duration {
        self.rerun_check
            .unwrap_or_else(|| self.coordinator.timings().retry_delay())
    }

    fn job(&self, name: &str) -> Option<&Job> {
        self.jobs.iter().find(|j| &*j.name == name)
    }
}

fn fatal(e: &Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::InvalidName | ErrorKind::InvalidTimings | ErrorKind::Unsupported
    )
}

/// Logs and counts an unfinished instant the store reports as given up by a claim, and the
/// instants between the two that never ran.
///
/// An unfinished instant is always the last one on record (a claim sets both; a finish clears
/// the unfinished one before it takes later instants along), so the instants strictly between
/// it and the claimed one were never claimed, nor recorded as skipped: the name was held
/// through them by the superseded round's lease, past the next instant too. Only the claim that
/// supersedes sees this, so they are counted once cluster-wide, here.
fn report_superseded(job: &Job, superseded_ms: Option<i64>, by_ms: i64, token: u64) {
    if let Some(gone) = superseded_ms {
        telemetry::job(telemetry::INSTANTS_SUPERSEDED, &job.name, 1);
        warn!(
            job = &*job.name,
            instant = %Schedule::format(gone),
            by = %Schedule::format(by_ms),
            term = token,
            "instant superseded: its round was cut short and not rerun before a later instant \
             was claimed; it will not run again"
        );
        let missed = job
            .schedule
            .count_between(gone, by_ms.saturating_sub(1), 1_000_000);
        if missed > 0 {
            telemetry::job(telemetry::INSTANTS_MISSED, &job.name, missed);
            warn!(
                job = &*job.name,
                after = %Schedule::format(gone),
                before = %Schedule::format(by_ms),
                missed,
                term = token,
                "{missed} instant(s) never ran: the lease of the superseded round, cut short, \
                 held the job through them"
            );
        }
    }
}

/// Who holds the job's lease when a claim of an instant is answered `Held`.
enum HeldBy {
    /// The instant, or a later one, is on record: another replica claimed it first (or the
    /// round holding the lease took it along).
    Claimed { last_ms: i64 },
    /// The round of an earlier instant (still running, or cut short with its lease live):
    /// ask again after `wait`, when its lease may have ended.
    Earlier {
        last_ms: Option<i64>,
        wait: Duration,
    },
}

/// Reads the job's record after a `Held` answer for `instant_ms`. When the store cannot be
/// read, the holder is taken to be an earlier round and the claim is asked again after the
/// retry pause.
async fn held_by(s: &Inner, name: &str, instant_ms: i64) -> HeldBy {
    let t = s.coordinator.timings();
    let last_ms = match timeout(t.attempt_timeout(), s.last_slot(name)).await {
        Ok(Ok(record)) => record.and_then(|r| r.last_ms),
        Ok(Err(e)) => {
            debug!(job = name, error = %e, "reading the job's record after a held claim failed");
            return HeldBy::Earlier {
                last_ms: None,
                wait: s.retry_pause(),
            };
        }
        Err(_) => {
            return HeldBy::Earlier {
                last_ms: None,
                wait: s.retry_pause(),
            };
        }
    };
    if let Some(last) = last_ms.filter(|last| *last >= instant_ms) {
        return HeldBy::Claimed { last_ms: last };
    }
    // Ask again just after the lease expires by the store's clock (a round that is still
    // running renews it meanwhile, and its finish takes this instant along).
    let wait = match timeout(t.attempt_timeout(), s.store.get(name)).await {
        Ok(Ok(Some(info))) if info.live => info.expires_in + HELD_MARGIN,
        Ok(Ok(_)) => HELD_RECHECK,
        Ok(Err(_)) | Err(_) => s.retry_pause(),
    };
    HeldBy::Earlier { last_ms, wait }
}

/// The first instant this replica considers for `job`, by its catch-up policy.
async fn first_instant(s: &Inner, job: &Job) -> Result<Option<i64>> {
    let now = s.clock.now_ms();
    let upcoming = job.schedule.next_after(now.saturating_sub(1));
    if job.catch_up == CatchUp::Skip {
        return Ok(upcoming);
    }
    let Some(latest) = job.schedule.latest_at_or_before(now) else {
        return Ok(upcoming);
    };
    let t = s.coordinator.timings();
    let record: Option<SlotRecord> = loop {
        if s.stopping.is_cancelled() {
            return Ok(None);
        }
        match timeout(t.attempt_timeout(), s.last_slot(&job.name)).await {
            Ok(Ok(record)) => break record,
            Ok(Err(e)) if fatal(&e) => return Err(e),
            Ok(Err(e)) => {
                warn!(job = &*job.name, error = %e, "reading the job's last slot failed; retrying")
            }
            Err(_) => warn!(
                job = &*job.name,
                "reading the job's last slot timed out; retrying"
            ),
        }
        if !s.nap(s.retry_pause()).await {
            return Ok(None);
        }
    };
    match record.and_then(|r| r.last_ms) {
        None => {
            debug!(job = &*job.name, "the job never ran: nothing to catch up");
            Ok(upcoming)
        }
        Some(last) if last < latest => {
            info!(
                job = &*job.name,
                instant = %Schedule::format(latest),
                last = %Schedule::format(last),
                "catching up: the latest instant was missed; claiming it once"
            );
            Ok(Some(latest))
        }
        Some(_) => Ok(upcoming),
    }
}

/// One job's loop: wait for each instant, claim it, run the round when this replica wins.
pub(crate) async fn job_loop(s: Arc<Inner>, job: Job) -> Result<()> {
    let name: &str = &job.name;
    let Some(mut instant) = first_instant(&s, &job).await? else {
        if !s.stopping.is_cancelled() {
            info!(job = name, schedule = %job.schedule, "the schedule has no instant ahead");
        }
        return Ok(());
    };
    // The next instant is claimed late: the last round overran it without recording it.
    let mut next_late = false;
    // The job's lease hints: an earlier round's lease that ends (finished or released) wakes a
    // replica waiting to claim an instant it held, instead of its nap's end.
    let mut hints = s.store.changes(&Topic::lease(name));
    loop {
        if !s.wait_for(instant).await {
            return Ok(());
        }
        // The instant last answered `Held` because the lease belonged to an earlier round.
        let mut held: Option<i64> = None;
        let late = std::mem::take(&mut next_late);
        let claimed = loop {
            if s.stopping.is_cancelled() {
                return Ok(());
            }
            if let Some(h) = &mut hints {
                h.mark_seen();
            }
            match s.claim(name, SlotAsk::Instant(instant)).await {
                Claimed::Held => match held_by(&s, name, instant).await {
                    HeldBy::Claimed { last_ms } => break Claimed::Taken { last_ms },
                    HeldBy::Earlier { last_ms, wait } => {
                        if held != Some(instant) {
                            debug!(job = name, instant = %Schedule::format(instant), last = ?last_ms.map(Schedule::format), wait_ms = wait.as_millis(), "instant held by the round of an earlier instant; claiming it again once that lease ends");
                            held = Some(instant);
                        }
                        // Wake at the next instant at the latest, to claim it on time.
                        let now = s.clock.now_ms();
                        let until_next = job.schedule.next_after(instant).map_or(MAX_NAP, |next| {
                            Duration::from_millis(u64::try_from(next - now).unwrap_or(0))
                        });
                        let nap = wait.min(until_next).min(MAX_NAP).max(HELD_MARGIN);
                        if !s.nap_or_hint(nap, &mut hints).await {
                            return Ok(());
                        }
                        if let Some(latest) = job.schedule.latest_at_or_before(s.clock.now_ms())
                            && latest > instant
                        {
                            // The holder's round takes the instants it held along when it
                            // ends; if it was cut short, the claim that supersedes it counts
                            // them as missed.
                            debug!(job = name, instant = %Schedule::format(instant), now = %Schedule::format(latest), "the lease of an earlier round still held the job at the next instant; moving on to it");
                            instant = latest;
                        }
                    }
                },
                Claimed::Early { now_ms } => {
                    let ahead = u64::try_from(instant.saturating_sub(now_ms)).unwrap_or(0);
                    debug!(job = name, instant = %Schedule::format(instant), ahead_ms = ahead, "the store's clock has not reached the instant; waiting");
                    let wait = Duration::from_millis(ahead.max(1)).min(MAX_NAP);
                    if !s.nap(wait).await {
                        return Ok(());
                    }
                }
                Claimed::Failed(e) if fatal(&e) => return Err(e),
                Claimed::Failed(e) => {
                    warn!(job = name, instant = %Schedule::format(instant), error = %e, "claiming the instant failed; retrying");
                    if !s.nap(s.retry_pause()).await {
                        return Ok(());
                    }
                    // A later instant that has come meanwhile replaces this one.
                    if let Some(latest) = job.schedule.latest_at_or_before(s.clock.now_ms())
                        && latest > instant
                    {
                        warn!(job = name, instant = %Schedule::format(instant), now = %Schedule::format(latest), "the store was unreachable past the next instant; moving on to it");
                        instant = latest;
                    }
                }
                other => break other,
            }
        };
        let cursor = match claimed {
            Claimed::Term {
                term,
                superseded_ms,
            } => {
                report_superseded(&job, superseded_ms, instant, term.token());
                if late || held == Some(instant) {
                    telemetry::job(telemetry::INSTANTS_LATE, name, 1);
                    let late_ms = s.clock.now_ms().saturating_sub(instant);
                    info!(job = name, instant = %Schedule::format(instant), late_ms, term = term.token(), "instant claimed late: the round of an earlier instant held the job's lease when it came, and ended without recording it");
                }
                let end = run_round(&s.round_env(), &job, instant, term, false, None).await;
                next_late = end.next_late;
                end.cursor
            }
            Claimed::Taken { last_ms } => {
                debug!(job = name, instant = %Schedule::format(instant), last = %Schedule::format(last_ms), "instant taken: claimed or skipped already");
                instant.max(last_ms)
            }
            Claimed::Closed => return Ok(()),
            // The claim loop resolves these itself.
            Claimed::Held | Claimed::Early { .. } | Claimed::Failed(_) => instant,
        };
        match job.schedule.next_after(cursor) {
            Some(next) => instant = next,
            None => {
                info!(job = name, schedule = %job.schedule, "the schedule has no instant ahead");
                return Ok(());
            }
        }
    }
}

/// Looks for rounds cut short, on every job at once, and reruns each once.
pub(crate) async fn rerun_loop(s: Arc<Inner>) -> Result<()> {
    let names: Vec<String> = s.jobs.iter().map(|j| j.name.to_string()).collect();
    if names.is_empty() {
        return Ok(());
    }
    let t = s.coordinator.timings();
    let mut running: JoinSet<String> = JoinSet::new();
    let mut busy: HashSet<String> = HashSet::new();
    let mut next_poll = Instant::now();
    loop {
        tokio::select! {
            biased;
            _ = s.stopping.cancelled() => break,
            Some(done) = running.join_next(), if !running.is_empty() => {
                if let Ok(name) = done {
                    busy.remove(&name);
                }
                continue;
            }
            _ = sleep_until(next_poll) => {}
        }
        next_poll = Instant::now() + s.rerun_pause();
        let found = match timeout(t.attempt_timeout(), s.unfinished(&names)).await {
            Ok(Ok(found)) => found,
            Ok(Err(e)) if fatal(&e) => return Err(e),
            Ok(Err(e)) => {
                warn!(error = %e, "looking for unfinished rounds failed; retrying");
                continue;
            }
            Err(_) => {
                warn!("looking for unfinished rounds timed out; retrying");
                continue;
            }
        };
        for (name, instant) in found {
            if busy.contains(&name) || s.stopping.is_cancelled() {
                continue;
            }
            let Some(job) = s.job(&name).cloned() else {
                continue;
            };
            match s.claim(&name, SlotAsk::Rerun(instant)).await {
                Claimed::Term { term, .. } => {
                    busy.insert(name.clone());
                    let s = s.clone();
                    running.spawn(async move {
                        // A rerun leaves its overrun to the job's own loop, which has
                        // moved on to the latest instant meanwhile.
                        run_round(&s.round_env(), &job, instant, term, true, None).await;
                        name
                    });
                }
                Claimed::Closed => break,
                Claimed::Failed(e) => {
                    warn!(job = %name, instant = %Schedule::format(instant), error = %e, "claiming a rerun failed");
                }
                _ => {
                    debug!(job = %name, instant = %Schedule::format(instant), "rerun claimed elsewhere, or no longer due");
                }
            }
        }
    }
    while running.join_next().await.is_some() {}
    Ok(())
}

/// The most instants one pass of [`run_due`] considers per job (the oldest first).
const MAX_DUE: usize = 1000;

/// How many times a pass of [`run_due`] tries a store operation that fails for a reason
/// retrying can fix, before it gives up with the error.
const DUE_ATTEMPTS: u32 = 3;

/// One pass over every job: each instant due within `window` runs once (see
/// [`Scheduler::run_due`](crate::Scheduler::run_due)).
pub(crate) async fn run_due(s: &Inner, window: Duration) -> Result<Vec<DueInstant>> {
    let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    let mut out = Vec::new();
    for job in &s.jobs {
        if s.stopping.is_cancelled() {
            break;
        }
        due_job(s, job, window_ms, &mut out).await?;
    }
    Ok(out)
}

/// Reads the store with `read`, retried on failures retrying can fix; `None` on shutdown.
async fn read_due<T, F, Fut>(s: &Inner, what: &str, mut read: F) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let t = s.coordinator.timings();
    let mut attempts = 0;
    loop {
        if s.stopping.is_cancelled() {
            return Ok(None);
        }
        attempts += 1;
        let e = match timeout(t.attempt_timeout(), read()).await {
            Ok(Ok(v)) => return Ok(Some(v)),
            Ok(Err(e)) if fatal(&e) => return Err(e),
            Ok(Err(e)) => e,
            Err(_) => Error::timeout(what, t.attempt_timeout()),
        };
        if attempts >= DUE_ATTEMPTS {
            return Err(e);
        }
        warn!(error = %e, "{what} failed; retrying");
        if !s.nap(s.retry_pause()).await {
            return Ok(None);
        }
    }
}

/// Claims `ask` for `job`, waiting while the store's clock has not reached the instant and
/// retrying failures retrying can fix; `Closed` on shutdown.
async fn claim_due(s: &Inner, job: &Job, ask: SlotAsk) -> Result<Claimed> {
    let mut attempts = 0;
    loop {
        if s.stopping.is_cancelled() {
            return Ok(Claimed::Closed);
        }
        match s.claim(&job.name, ask).await {
            Claimed::Early { now_ms } => {
                let instant = match ask {
                    SlotAsk::Instant(i) | SlotAsk::Rerun(i) => i,
                };
                let ahead = u64::try_from(instant.saturating_sub(now_ms)).unwrap_or(0);
                debug!(job = &*job.name, instant = %Schedule::format(instant), ahead_ms = ahead, "the store's clock has not reached the instant; waiting");
                if !s
                    .nap(Duration::from_millis(ahead.max(1)).min(MAX_NAP))
                    .await
                {
                    return Ok(Claimed::Closed);
                }
            }
            Claimed::Failed(e) if fatal(&e) => return Err(e),
            Claimed::Failed(e) => {
                attempts += 1;
                if attempts >= DUE_ATTEMPTS {
                    return Err(e);
                }
                warn!(job = &*job.name, error = %e, "claiming a due instant failed; retrying");
                if !s.nap(s.retry_pause()).await {
                    return Ok(Claimed::Closed);
                }
            }
            other => return Ok(other),
        }
    }
}

/// [`run_due`] for one job.
async fn due_job(s: &Inner, job: &Job, window_ms: i64, out: &mut Vec<DueInstant>) -> Result<()> {
    let name: &str = &job.name;
    let now = s.clock.now_ms();
    let oldest = now.saturating_sub(window_ms);
    let push = |out: &mut Vec<DueInstant>, instant_ms: i64, outcome: DueOutcome| {
        out.push(DueInstant {
            job: name.to_owned(),
            instant_ms,
            outcome,
        });
    };
    // Reruns first: a later instant's claim would supersede them.
    let names = [name.to_owned()];
    let Some(unfinished) =
        read_due(s, "looking for unfinished rounds", || s.unfinished(&names)).await?
    else {
        return Ok(());
    };
    for (_, instant) in unfinished.into_iter().filter(|(n, _)| n == name) {
        if instant < oldest {
            debug!(job = name, instant = %Schedule::format(instant), "an unfinished round older than the window is not rerun");
            continue;
        }
        match claim_due(s, job, SlotAsk::Rerun(instant)).await? {
            Claimed::Term { term, .. } => {
                let token = term.token();
                // The rerun takes no later instant along: they are this pass's to claim.
                let before = Some(instant.saturating_add(1));
                let end = run_round(&s.round_env(), job, instant, term, true, before).await;
                push(
                    out,
                    instant,
                    DueOutcome::Ran {
                        token,
                        rerun: true,
                        late: false,
                        ended: end.ended,
                        skipped: end.skipped,
                    },
                );
            }
            Claimed::Closed => return Ok(()),
            _ => {
                debug!(job = name, instant = %Schedule::format(instant), "rerun claimed elsewhere, or no longer due");
            }
        }
    }
    let Some(record) = read_due(s, "reading the job's last slot", || s.last_slot(name)).await?
    else {
        return Ok(());
    };
    let Some(latest) = job
        .schedule
        .latest_at_or_before(now)
        .filter(|l| *l >= oldest)
    else {
        debug!(job = name, "no instant within the window");
        return Ok(());
    };
    let due = match record.and_then(|r| r.last_ms) {
        // A job that never ran catches nothing up: only its latest instant is due.
        None => vec![latest],
        // This period's instant is on record: another replica ran it (or runs it).
        Some(last) if latest <= last => {
            push(out, latest, DueOutcome::Taken { last_ms: last });
            return Ok(());
        }
        Some(last) => job
            .schedule
            .between(last.max(oldest.saturating_sub(1)), now, MAX_DUE),
    };
    for (i, &instant) in due.iter().enumerate() {
        match claim_due(s, job, SlotAsk::Instant(instant)).await? {
            Claimed::Term {
                term,
                superseded_ms,
            } => {
                let token = term.token();
                report_superseded(job, superseded_ms, instant, token);
                let late = job
                    .schedule
                    .latest_at_or_before(s.clock.now_ms())
                    .is_some_and(|l| l > instant);
                if late {
                    telemetry::job(telemetry::INSTANTS_LATE, name, 1);
                    info!(job = name, instant = %Schedule::format(instant), term = token, "catching up: a missed instant within the window is claimed late");
                }
                // The next due instant is this pass's to claim, not the finish's to skip.
                let before = due.get(i + 1).copied();
                let end = run_round(&s.round_env(), job, instant, term, false, before).await;
                push(
                    out,
                    instant,
                    DueOutcome::Ran {
                        token,
                        rerun: false,
                        late,
                        ended: end.ended,
                        skipped: end.skipped,
                    },
                );
            }
            Claimed::Taken { last_ms } => push(out, instant, DueOutcome::Taken { last_ms }),
            Claimed::Held => match held_by(s, name, instant).await {
                HeldBy::Claimed { last_ms } => push(out, instant, DueOutcome::Taken { last_ms }),
                HeldBy::Earlier { .. } => {
                    debug!(job = name, instant = %Schedule::format(instant), "the round of an earlier instant holds the job's lease; leaving the instant to it or to a later pass");
                    push(out, instant, DueOutcome::Busy);
                    return Ok(());
                }
            },
            Claimed::Closed => return Ok(()),
            // `claim_due` resolves these itself.
            Claimed::Early { .. } | Claimed::Failed(_) => return Ok(()),
        }
    }
    Ok(())
}
