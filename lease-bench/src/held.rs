//! Held names: N names held by one coordinator for three renew periods, renewed the old way
//! (a keeper task and a `renew` per term) and the new way (the coordinator's renewer, one
//! `renew_many` per period), side by side in one run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::{StreamExt, stream};
use lease::coordinator::Renewals;
use lease::{Coordinator, LeaseStore, Term, Timings};

use crate::backends::{Env, TTL, open_store};
use crate::cli::{Args, Backend};
use crate::peers::INSTANCE;
use crate::wrappers::Counting;

/// Renew periods each run holds its names for.
const PERIODS: u32 = 3;

/// Claims in flight while the names are taken.
const CLAIMS_IN_FLIGHT: usize = 32;

/// One backend, one number of names, one way of renewing.
#[derive(Debug, Clone)]
pub(crate) struct HeldRow {
    pub(crate) backend: Backend,
    pub(crate) held: usize,
    /// `"per term"` or `"coalesced"`.
    pub(crate) renewals: &'static str,
    /// Terms that ended while held (must be 0).
    pub(crate) lost: Option<usize>,
    /// Store renewal operations (`renew` or `renew_many` calls) per renew period.
    pub(crate) ops_per_period: Option<f64>,
    /// Why it stopped early.
    pub(crate) error: Option<String>,
}

/// Every `args.held_names` size on `backend`, per term and coalesced.
pub(crate) async fn run(args: &Args, env: &Env, backend: Backend) -> Vec<HeldRow> {
    let mut rows = Vec::new();
    for &held in &args.held_names {
        for (label, renewals) in [
            ("per term", Renewals::PerTerm),
            ("coalesced", Renewals::Coalesced),
        ] {
            let mut row = HeldRow {
                backend,
                held,
                renewals: label,
                lost: None,
                ops_per_period: None,
                error: None,
            };
            if let Err(e) = one(env, &mut row, renewals).await {
                eprintln!(
                    "lease-bench: {} held names ({held}, {label}): {}",
                    backend.label(),
                    crate::describe(&e)
                );
                row.error = Some(crate::describe(&e));
            }
            rows.push(row);
        }
    }
    rows
}

async fn one(env: &Env, row: &mut HeldRow, renewals: Renewals) -> Result<()> {
    let store = open_store(row.backend, &env.url(row.backend), TTL).await?;
    let counted = Arc::new(Counting::wrap(store));
    let timings = Timings::default();
    let coordinator = Coordinator::builder(counted.clone() as Arc<dyn LeaseStore>)
        .instance(INSTANCE)
        .timings(timings)
        .renewals(renewals)
        .build()?;
    let names: Vec<String> = (0..row.held)
        .map(|i| env.name(&format!("held-{}-{}-{i}", row.held, row.renewals)))
        .collect();
    let c = &coordinator;
    let claimed: Vec<lease::Result<Term>> = stream::iter(&names)
        .map(|name| async move { c.try_acquire(name.as_str()).await })
        .buffer_unordered(CLAIMS_IN_FLIGHT)
        .collect()
        .await;
    let terms = claimed.into_iter().collect::<lease::Result<Vec<Term>>>()?;
    let before = counted.hook().counts();
    let start = Instant::now();
    tokio::time::sleep(timings.renew_every() * PERIODS + Duration::from_millis(100)).await;
    let renews = counted.hook().counts().since(&before).renews;
    let periods = start.elapsed().as_secs_f64() / timings.renew_every().as_secs_f64();
    row.ops_per_period = Some(renews as f64 / periods);
    row.lost = Some(terms.iter().filter(|t| !t.is_live()).count());
    drop(terms);
    coordinator.close().await?;
    Ok(())
}
