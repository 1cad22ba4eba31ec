//! Take-over time: after the holder dies, and after it resigns, while a candidate polls through
//! `Coordinator::run_elected`.
//!
//! The dead holder is a real coordinator holding the name and renewing, whose store is switched
//! off at a random moment (a [`Kill`] hook): from then on nothing it sends reaches the
//! server, as after `kill -9` — it neither renews nor releases. The candidate runs
//! `run_elected` on the real store with the campaign retry under test. Times are measured from
//! the kill (or from the start of `resign`) to the moment the candidate's work starts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lease::{LeaseStore, Timings};

use crate::backends::{Env, open_store};
use crate::candidate::Successor;
use crate::cli::{Args, Backend};
use crate::peers::library::coordinator;
use crate::wrappers::Kill;

/// One backend's take-over times.
#[derive(Debug, Clone)]
pub(crate) struct FailoverRow {
    /// The backend.
    pub(crate) backend: Backend,
    /// The timings of holder and candidate.
    pub(crate) timings: Timings,
    /// Kill → candidate's work starts.
    pub(crate) dead: Vec<Duration>,
    /// `resign` starts → candidate's work starts.
    pub(crate) graceful: Vec<Duration>,
    /// Why it stopped early.
    pub(crate) error: Option<String>,
}

/// The timings used: derived from the failover lease, with the campaign retry under test.
pub(crate) fn timings(args: &Args) -> Result<Timings> {
    let retry = args.retry();
    Ok(
        Timings::from_lease(Duration::from_millis(args.failover_ttl_ms))?
            .to_builder()
            .retry(retry)
            .jitter(retry / 4)
            .build()?,
    )
}

/// Runs both scenarios `args.failover_samples` times on `backend`.
pub(crate) async fn run(args: &Args, env: &Env, backend: Backend) -> FailoverRow {
    let mut row = FailoverRow {
        backend,
        timings: Timings::default(),
        dead: Vec::new(),
        graceful: Vec::new(),
        error: None,
    };
    if let Err(e) = run_into(args, env, &mut row).await {
        eprintln!(
            "lease-bench: {} failover: {}",
            backend.label(),
            crate::describe(&e)
        );
        row.error = Some(crate::describe(&e));
    }
    row
}

async fn run_into(args: &Args, env: &Env, row: &mut FailoverRow) -> Result<()> {
    let backend = row.backend;
    let t = timings(args)?;
    row.timings = t;
    let store = open_store(backend, &env.url(backend), t.lease()).await?;
    for i in 0..args.failover_samples {
        let name = env.name(&format!("failover-dead-{i}"));
        row.dead.push(dead_holder(&store, t, &name).await?);
        let name = env.name(&format!("failover-resign-{i}"));
        row.graceful.push(graceful(&store, &store, t, &name).await?);
    }
    Ok(())
}

/// A random pause within one campaign period, so the event lands at a random phase of the
/// candidate's polling.
pub(crate) fn random_phase(t: Timings) -> Duration {
    let span = (t.retry() + t.jitter()).as_secs_f64();
    Duration::from_secs_f64(rand::random_range(0.2..0.2 + span))
}

async fn dead_holder(store: &Arc<dyn LeaseStore>, t: Timings, name: &str) -> Result<Duration> {
    let killable = Arc::new(Kill::wrap(store.clone()));
    let holder = coordinator(killable.clone(), "dying-holder", t)?;
    let term = holder
        .try_acquire(name)
        .await
        .context("the holder's claim")?;
    let mut candidate = Successor::start(store.clone(), t, name)?;
    tokio::time::sleep(random_phase(t)).await;
    if candidate.has_won() {
        bail!("the candidate took the name while the holder was alive");
    }
    let killed = Instant::now();
    killable.hook().kill();
    let won = candidate.wait(t.lease() + t.retry() + t.jitter()).await?;
    candidate.stop().await;
    drop(term);
    let _ = holder.close().await;
    Ok(won.saturating_duration_since(killed))
}

/// Resign → the successor (waiting on `waiter`, which may be `store` behind a hook) starts its
/// work.
pub(crate) async fn graceful(
    store: &Arc<dyn LeaseStore>,
    waiter: &Arc<dyn LeaseStore>,
    t: Timings,
    name: &str,
) -> Result<Duration> {
    let holder = coordinator(store.clone(), "resigning-holder", t)?;
    let term = holder
        .try_acquire(name)
        .await
        .context("the holder's claim")?;
    let mut candidate = Successor::start(waiter.clone(), t, name)?;
    tokio::time::sleep(random_phase(t)).await;
    if candidate.has_won() {
        bail!("the candidate took the name while the holder held it");
    }
    let resigned = Instant::now();
    term.resign().await.context("the holder's resign")?;
    let won = candidate.wait(t.retry() + t.jitter()).await;
    candidate.stop().await;
    let _ = holder.close().await;
    Ok(won?.saturating_duration_since(resigned))
}
