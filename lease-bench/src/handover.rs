//! Hand-over: the store's push wake-ups against polling, side by side in one run.
//!
//! Every scenario runs twice per sample, alternating: **push** is the store as it is (its hints
//! wake a waiter, and a waiter sleeps until the holder's expiry by the store's clock); **poll**
//! is the same store behind a [`NoHints`] hook, whose `changes` answers `None`, so a waiter
//! also polls at the campaign retry (2 s + up to 0.5 s jitter), as every waiter did before
//! hints. The successor is a `run_elected` candidate on a coordinator of its own; times run
//! from the event to the moment its work starts.
//!
//! - **Graceful**: the holder resigns at a random phase of the candidate's polling.
//! - **Crash**: the holder's store access is cut (a [`Kill`] hook: no renewal, no release). The
//!   store's expiry is observed by reading the lease every 5 ms until the store answers it is
//!   no longer live (or held under a later term, when the successor was quicker). The figure is
//!   *successor start − the sending of the last read the store answered live*: never negative
//!   when the store keeps its promise, and at most one poll and one round trip later than the
//!   store's real expiry. Beside it: how much later the store expired
//!   the lease than the time left it reported right after the cut (etcd reports whole seconds
//!   and expires leases in a 500 ms sweep).
//! - **Idle**: N candidates wait on one name whose holder keeps renewing (lease 15 s, on a store
//!   of its own that is not counted); the candidates' store operations are counted over a window
//!   after a warm-up of one lease, then the holder resigns and the claims of the next second
//!   are counted (the herd a release causes).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use lease::backend::notify::{Topic, Wakeups};
use lease::layer::{Answer, Call, Hook, Intercept};
use lease::{LeaseStore, Timings};
use tokio::sync::mpsc;

use crate::backends::{Env, TTL, open_store};
use crate::candidate::{Candidate, Successor};
use crate::cli::{Args, Backend};
use crate::failover::{graceful, random_phase};
use crate::peers::library::coordinator;
use crate::wrappers::{Counting, Counts, Kill};

/// The hook that hides a store's hints: a waiter behind it polls.
#[derive(Debug, Default)]
pub(crate) struct NoHints;

impl Hook for NoHints {
    fn around<'a, T: Send + 'static>(
        &'a self,
        _call: Call<'a>,
        op: Answer<'a, T>,
    ) -> Answer<'a, T> {
        op
    }

    fn changes(&self, _topic: &Topic, _hints: Option<Wakeups>) -> Option<Wakeups> {
        None
    }
}

/// Push or poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The store's hints, and expiry-aware waiting.
    Push,
    /// Hints hidden: expiry-aware waiting, and polling at the retry.
    Poll,
}

impl Mode {
    /// Both, in report order.
    pub(crate) const BOTH: [Mode; 2] = [Mode::Push, Mode::Poll];

    /// `store` as a waiter in this mode sees it.
    fn store(self, store: &Arc<dyn LeaseStore>) -> Arc<dyn LeaseStore> {
        match self {
            Mode::Push => store.clone(),
            Mode::Poll => Arc::new(Intercept::new(store.clone(), NoHints)),
        }
    }

    /// The label in reports.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Mode::Push => "push",
            Mode::Poll => "poll",
        }
    }
}

/// The idle waiters' figures of one mode.
#[derive(Debug, Clone, Default)]
pub(crate) struct Idle {
    /// The measured window.
    pub(crate) window: Duration,
    /// The waiters' store operations in the window.
    pub(crate) counts: Counts,
    /// Hint wake-ups one subscriber saw in the window.
    pub(crate) hints: u64,
    /// Claims in the second after the holder resigned (the winner's included).
    pub(crate) burst_claims: u64,
    /// Release → the first waiter's work starts.
    pub(crate) burst_handover: Option<Duration>,
}

impl Idle {
    /// Claims per waiter per lease period of `lease`, over the window.
    pub(crate) fn claims_per_waiter_per_lease(&self, waiters: usize, lease: Duration) -> f64 {
        self.counts.claims as f64 / waiters.max(1) as f64 / self.window.as_secs_f64().max(1e-9)
            * lease.as_secs_f64()
    }

    /// Store operations per second in the window.
    pub(crate) fn ops_per_sec(&self) -> f64 {
        self.counts.total() as f64 / self.window.as_secs_f64().max(1e-9)
    }
}

/// One mode's samples on one backend.
#[derive(Debug, Clone, Default)]
pub(crate) struct ModeFigures {
    /// Resign → the successor's work starts.
    pub(crate) graceful: Vec<Duration>,
    /// Successor's work starts − the last read the store answered live, in seconds (negative:
    /// before it, which a correct store never allows).
    pub(crate) crash: Vec<f64>,
    /// The store's observed expiry − the expiry it reported after the cut, in seconds (how
    /// coarse its report of the time left is).
    pub(crate) crash_late: Vec<f64>,
    /// The idle waiters.
    pub(crate) idle: Option<Idle>,
}

/// One backend's hand-over figures.
#[derive(Debug, Clone)]
pub(crate) struct HandoverRow {
    /// The backend.
    pub(crate) backend: Backend,
    /// The timings of the graceful and crash runs.
    pub(crate) timings: Timings,
    /// The timings of the idle run.
    pub(crate) idle_timings: Timings,
    /// Idle waiters.
    pub(crate) waiters: usize,
    /// What wakes a waiter on this store (`changes` answered `Some` and connected, or not).
    pub(crate) mechanism: String,
    /// Push, then poll.
    pub(crate) push: ModeFigures,
    /// Poll.
    pub(crate) poll: ModeFigures,
    /// Why it stopped early.
    pub(crate) error: Option<String>,
}

impl HandoverRow {
    /// The figures of `mode`.
    pub(crate) fn mode(&self, mode: Mode) -> &ModeFigures {
        match mode {
            Mode::Push => &self.push,
            Mode::Poll => &self.poll,
        }
    }

    fn mode_mut(&mut self, mode: Mode) -> &mut ModeFigures {
        match mode {
            Mode::Push => &mut self.push,
            Mode::Poll => &mut self.poll,
        }
    }
}

/// The hint mechanism of each backend, as its store documents it.
pub(crate) fn mechanism(backend: Backend) -> &'static str {
    match backend {
        Backend::Local => "tokio notification (in-process hub)",
        Backend::Sqlite => {
            "PRAGMA data_version checked every 15 ms while waiting, by one poller per process \
             (this process's commits and other processes' alike)"
        }
        Backend::Postgres => "LISTEN/NOTIFY (pg_notify in the statement's transaction)",
        Backend::Mysql => "in-process only; across processes expiry-aware polling",
        Backend::Redis => "PUBLISH from the scripts; RESP3 subscriber",
        Backend::Nats => "KV watch",
        Backend::Mongodb => "none on the emulator (no change streams): expiry-aware polling",
        Backend::Etcd => "watch on the key prefix",
    }
}

/// The timings of the graceful and crash runs: the failover section's.
fn timings(args: &Args) -> Result<Timings> {
    crate::failover::timings(args)
}

/// The idle run's timings: the protocol's lease, with the campaign retry under test.
fn idle_timings(args: &Args) -> Result<Timings> {
    let retry = args.retry();
    Ok(Timings::from_lease(TTL)?
        .to_builder()
        .retry(retry)
        .jitter(retry / 4)
        .build()?)
}

/// Runs the section on `backend`.
pub(crate) async fn run(args: &Args, env: &Env, backend: Backend) -> HandoverRow {
    let mut row = HandoverRow {
        backend,
        timings: Timings::default(),
        idle_timings: Timings::default(),
        waiters: args.idle_waiters,
        mechanism: mechanism(backend).to_owned(),
        push: ModeFigures::default(),
        poll: ModeFigures::default(),
        error: None,
    };
    if let Err(e) = run_into(args, env, &mut row).await {
        eprintln!(
            "lease-bench: {} hand-over: {}",
            backend.label(),
            crate::describe(&e)
        );
        row.error = Some(crate::describe(&e));
    }
    row
}

async fn run_into(args: &Args, env: &Env, row: &mut HandoverRow) -> Result<()> {
    let backend = row.backend;
    let t = timings(args)?;
    row.timings = t;
    row.idle_timings = idle_timings(args)?;
    let store = open_store(backend, &env.url(backend), t.lease()).await?;
    let probe = env.name("handover-probe");
    match store.changes(&Topic::lease(probe)) {
        Some(w) if w.is_connected() => {}
        Some(_) => row
            .mechanism
            .push_str(" (hints not connected at the start)"),
        None => row.mechanism = format!("no hints ({})", row.mechanism),
    }
    for i in 0..args.handover_samples {
        for mode in Mode::BOTH {
            let waiter = mode.store(&store);
            let name = env.name(&format!("handover-resign-{}-{i}", mode.label()));
            let d = graceful(&store, &waiter, t, &name)
                .await
                .with_context(|| format!("{} graceful sample {i}", mode.label()))?;
            row.mode_mut(mode).graceful.push(d);
            let name = env.name(&format!("handover-crash-{}-{i}", mode.label()));
            let c = crash(&store, &waiter, t, &name)
                .await
                .with_context(|| format!("{} crash sample {i}", mode.label()))?;
            row.mode_mut(mode).crash.push(c.after);
            row.mode_mut(mode).crash_late.push(c.late);
        }
    }
    // The idle run opens its own store: its lease is the protocol's (NATS has one per bucket).
    let store = open_store(backend, &env.url(backend), TTL).await?;
    let it = row.idle_timings;
    let waiters = args.idle_waiters;
    let window = Duration::from_secs_f64(args.idle_seconds);
    let (push, poll) = tokio::join!(
        idle(&store, Mode::Push, it, waiters, window, env),
        idle(&store, Mode::Poll, it, waiters, window, env),
    );
    row.push.idle = Some(push.context("push idle waiters")?);
    row.poll.idle = Some(poll.context("poll idle waiters")?);
    Ok(())
}

/// The holder's access cut → the successor starts, against the store's expiry.
async fn crash(
    store: &Arc<dyn LeaseStore>,
    waiter: &Arc<dyn LeaseStore>,
    t: Timings,
    name: &str,
) -> Result<Crash> {
    let killable = Arc::new(Kill::wrap(store.clone()));
    let holder = coordinator(killable.clone(), "dying-holder", t)?;
    let term = holder
        .try_acquire(name)
        .await
        .context("the holder's claim")?;
    let mut candidate = Successor::start(waiter.clone(), t, name)?;
    tokio::time::sleep(random_phase(t)).await;
    if candidate.has_won() {
        bail!("the candidate took the name while the holder was alive");
    }
    killable.hook().kill();
    // A renewal in flight at the cut may still land: read the expiry after it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (reported, first) = read(store, name).await?;
    let first = first.with_context(|| format!("'{name}' has no record after the cut"))?;
    ensure!(
        first.live,
        "'{name}' was not live right after the holder's cut"
    );
    let reported = reported + first.expires_in;
    // The store's expiry as it answers it: the sending of the last read that still finds the
    // lease live, before one that finds it not live (or held under a later term, when the
    // successor was quicker than this poll). A successor cannot have held the name before it.
    let mut expired = Instant::now();
    loop {
        let sent = Instant::now();
        let (_, info) = read(store, name).await?;
        match info {
            Some(i) if i.live && i.term == first.term => expired = sent,
            _ => break,
        }
        if sent > reported + t.lease() + Duration::from_secs(5) {
            bail!(
                "'{name}' was still live {:?} after its reported expiry",
                t.lease()
            );
        }
        tokio::time::sleep(EXPIRY_POLL).await;
    }
    let won = candidate.wait(t.lease() + t.retry() + t.jitter()).await;
    candidate.stop().await;
    drop(term);
    let _ = holder.close().await;
    let won = won?;
    Ok(Crash {
        after: signed(won, expired),
        late: signed(expired, reported),
    })
}

/// How often the crash run reads the store after the holder's reported expiry.
const EXPIRY_POLL: Duration = Duration::from_millis(5);

/// One crash sample, in seconds.
#[derive(Debug, Clone, Copy)]
struct Crash {
    /// Successor's start − the last read the store answered live (negative: before it).
    after: f64,
    /// The store's observed expiry − the expiry it reported right after the cut.
    late: f64,
}

/// `get(name)`, and the instant at the middle of its round trip.
async fn read(
    store: &Arc<dyn LeaseStore>,
    name: &str,
) -> Result<(Instant, Option<lease::backend::LeaseInfo>)> {
    let asked = Instant::now();
    let info = store.get(name).await.context("reading the lease")?;
    Ok((asked + asked.elapsed() / 2, info))
}

/// `a − b` in seconds, negative when `a` is earlier.
fn signed(a: Instant, b: Instant) -> f64 {
    if a >= b {
        (a - b).as_secs_f64()
    } else {
        -(b - a).as_secs_f64()
    }
}

/// `n` idle waiters on one held name: their store operations over `window`, then the herd a
/// release causes.
async fn idle(
    store: &Arc<dyn LeaseStore>,
    mode: Mode,
    t: Timings,
    n: usize,
    window: Duration,
    env: &Env,
) -> Result<Idle> {
    let name = env.name(&format!("handover-idle-{}", mode.label()));
    let holder = coordinator(store.clone(), "idle-holder", t)?;
    let term = holder
        .try_acquire(&name)
        .await
        .context("the holder's claim")?;
    let counted = Arc::new(Counting::wrap(mode.store(store)));
    let waiter_store: Arc<dyn LeaseStore> = counted.clone();
    let hints = Arc::new(AtomicU64::new(0));
    let listener = waiter_store
        .changes(&Topic::lease(name.clone()))
        .map(|mut w| {
            let hints = hints.clone();
            tokio::spawn(async move {
                loop {
                    w.changed().await;
                    hints.fetch_add(1, Ordering::Relaxed);
                }
            })
        });
    let (tx, mut won) = mpsc::unbounded_channel();
    let mut candidates = Vec::with_capacity(n);
    for i in 0..n {
        let c = Candidate::start(
            waiter_store.clone(),
            &format!("idle-{i}"),
            t,
            &name,
            tx.clone(),
        );
        match c {
            Ok(c) => candidates.push(c),
            Err(e) => {
                stop_all(candidates).await;
                return Err(e);
            }
        }
    }
    drop(tx);
    let result = async {
        tokio::time::sleep(t.lease()).await;
        ensure!(
            won.try_recv().is_err(),
            "a waiter took the name while its holder renewed it"
        );
        let (c0, h0) = (counted.hook().counts(), hints.load(Ordering::Relaxed));
        tokio::time::sleep(window).await;
        let (c1, h1) = (counted.hook().counts(), hints.load(Ordering::Relaxed));
        ensure!(
            won.try_recv().is_err(),
            "a waiter took the name while its holder renewed it"
        );
        let released = Instant::now();
        term.resign().await.context("the holder's resign")?;
        let first =
            tokio::time::timeout(t.retry() + t.jitter() + Duration::from_secs(5), won.recv())
                .await
                .ok()
                .flatten()
                .map(|at| at.saturating_duration_since(released));
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(released.elapsed())).await;
        let c2 = counted.hook().counts();
        Ok(Idle {
            window,
            counts: c1.since(&c0),
            hints: h1 - h0,
            burst_claims: c2.since(&c1).claims,
            burst_handover: first,
        })
    }
    .await;
    if let Some(l) = listener {
        l.abort();
    }
    stop_all(candidates).await;
    let _ = holder.close().await;
    result
}

async fn stop_all(candidates: Vec<Candidate>) {
    futures::future::join_all(candidates.into_iter().map(Candidate::stop)).await;
}

/// The `q` quantile (nearest rank) of `values`, or `None` when empty.
pub(crate) fn quantile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

/// The seconds of each duration.
pub(crate) fn secs(values: &[Duration]) -> Vec<f64> {
    values.iter().map(Duration::as_secs_f64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(10.0));
        assert_eq!(quantile(&v, 0.99), Some(20.0));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
