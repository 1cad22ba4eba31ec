//! Many candidates on one name: each runs `Coordinator::run_elected` (retry 2 s + jitter) over
//! one shared store wrapped in a [`Counting`] hook; the winner works for a second, resigns and
//! campaigns again. The store's operations per second must stay at or below
//! candidates / retry; the claims per 100 ms show whether they come in a herd.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use lease::{Coordinator, LeaseStore, Term, Timings};

use crate::backends::{Env, TTL, open_store};
use crate::cli::{Args, Backend};
use crate::peers::library::coordinator;
use crate::wrappers::{Counting, Counts};

/// How long the winner works before it resigns.
const HOLD: Duration = Duration::from_secs(1);
/// The width of the buckets the claims are counted in.
const BUCKET: Duration = Duration::from_millis(100);

/// One backend's contention figures.
#[derive(Debug, Clone)]
pub(crate) struct ContentionRow {
    /// The backend.
    pub(crate) backend: Backend,
    /// Candidates.
    pub(crate) candidates: usize,
    /// Campaign retry and jitter.
    pub(crate) timings: Timings,
    /// The measured window (after a warm-up of one campaign period).
    pub(crate) window: Duration,
    /// Operations that reached the store in the window.
    pub(crate) counts: Counts,
    /// Most claims in one 100 ms bucket of the window.
    pub(crate) peak_bucket: u64,
    /// Claims in the first 100 ms after all candidates started.
    pub(crate) first_bucket: u64,
    /// Why it stopped early.
    pub(crate) error: Option<String>,
}

impl ContentionRow {
    /// Store operations per second in the window.
    pub(crate) fn ops_per_sec(&self) -> f64 {
        self.counts.total() as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// Claims per second in the window.
    pub(crate) fn claims_per_sec(&self) -> f64 {
        self.counts.claims as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// The bound: candidates / retry.
    pub(crate) fn bound(&self) -> f64 {
        self.candidates as f64 / self.timings.retry().as_secs_f64().max(1e-9)
    }

    /// Mean claims per 100 ms bucket.
    pub(crate) fn mean_bucket(&self) -> f64 {
        self.claims_per_sec() * BUCKET.as_secs_f64()
    }
}

/// Runs the contention scenario on `backend`.
pub(crate) async fn run(args: &Args, env: &Env, backend: Backend) -> ContentionRow {
    let retry = args.retry();
    let mut row = ContentionRow {
        backend,
        candidates: args.candidates,
        timings: Timings::default(),
        window: Duration::ZERO,
        counts: Counts::default(),
        peak_bucket: 0,
        first_bucket: 0,
        error: None,
    };
    let timings = Timings::from_lease(TTL)
        .and_then(|t| t.to_builder().retry(retry).jitter(retry / 4).build());
    match timings {
        Ok(t) => row.timings = t,
        Err(e) => {
            row.error = Some(e.to_string());
            return row;
        }
    }
    if let Err(e) = run_into(args, env, &mut row).await {
        eprintln!(
            "lease-bench: {} contention: {}",
            backend.label(),
            crate::describe(&e)
        );
        row.error = Some(crate::describe(&e));
    }
    row
}

async fn run_into(args: &Args, env: &Env, row: &mut ContentionRow) -> Result<()> {
    let t = row.timings;
    let store = open_store(row.backend, &env.url(row.backend), TTL).await?;
    let counting = Arc::new(Counting::wrap(store));
    let shared: Arc<dyn LeaseStore> = counting.clone();
    let name = env.name("contention");
    let coordinators: Vec<Coordinator> = (0..row.candidates)
        .map(|i| coordinator(shared.clone(), &format!("candidate-{i}"), t))
        .collect::<Result<_>>()?;

    let started = Instant::now();
    let tasks: Vec<_> = coordinators
        .iter()
        .map(|c| {
            let c = c.clone();
            let name = name.clone();
            tokio::spawn(async move {
                c.run_elected(&name, |term: Term| async move {
                    tokio::select! {
                        _ = tokio::time::sleep(HOLD) => {}
                        _ = term.done() => {}
                    }
                    Ok::<(), std::io::Error>(())
                })
                .await
            })
        })
        .collect();

    tokio::time::sleep(t.retry() + t.jitter()).await;
    let before = counting.hook().counts();
    let from = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(args.contention_seconds)).await;
    let after = counting.hook().counts();
    let to = Instant::now();

    futures::future::join_all(coordinators.iter().map(|c| c.close())).await;
    for task in tasks {
        match tokio::time::timeout(Duration::from_secs(10), task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => anyhow::bail!("a candidate's run_elected failed: {e}"),
            Ok(Err(e)) => anyhow::bail!("a candidate's task failed: {e}"),
            Err(_) => anyhow::bail!("a candidate did not stop within 10 s of close"),
        }
    }

    row.window = to - from;
    row.counts = after.since(&before);
    let stamps = counting.hook().claim_instants();
    row.first_bucket = stamps
        .iter()
        .filter(|s| s.saturating_duration_since(started) < BUCKET)
        .count() as u64;
    let buckets = (row.window.as_nanos() / BUCKET.as_nanos()).max(1) as usize + 1;
    let mut counts = vec![0u64; buckets];
    for s in stamps.iter().filter(|s| **s >= from && **s < to) {
        let i = (s.duration_since(from).as_nanos() / BUCKET.as_nanos()) as usize;
        if let Some(c) = counts.get_mut(i) {
            *c += 1;
        }
    }
    row.peak_bucket = counts.iter().copied().max().unwrap_or(0);
    Ok(())
}
