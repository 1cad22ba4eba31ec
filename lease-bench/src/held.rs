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
    /// The mean and the longest time of one renewal call (one `renew`, or one batch).
    pub(crate) call_time: Option<(Duration, Duration)>,
    /// The process's CPU time (user + system) per held name per renew period while held.
    pub(crate) cpu_per_name: Option<Duration>,
    /// The growth of the process's resident memory from before the claims to the end of the
    /// hold, per held name (bytes; freed memory of earlier runs reused makes it a lower bound).
    pub(crate) rss_per_name: Option<f64>,
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
                call_time: None,
                cpu_per_name: None,
                rss_per_name: None,
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
    if renewals == Renewals::Coalesced && !store.capabilities().renew_many {
        // One `renew_many` call, but the store's default loop inside: a round trip per name.
        row.renewals = "coalesced (loop)";
    }
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
    let rss_before = rss_bytes();
    let c = &coordinator;
    let claimed: Vec<lease::Result<Term>> = stream::iter(&names)
        .map(|name| async move { c.try_acquire(name.as_str()).await })
        .buffer_unordered(CLAIMS_IN_FLIGHT)
        .collect()
        .await;
    let terms = claimed.into_iter().collect::<lease::Result<Vec<Term>>>()?;
    // The first period after the claims renews the terms claimed first, in smaller batches:
    // the figures count from the second.
    tokio::time::sleep(timings.renew_every()).await;
    let hook = counted.hook();
    let before = hook.counts();
    let micros_before = hook.renew_micros();
    hook.reset_renew_max();
    let cpu_before = cpu_time();
    let start = Instant::now();
    tokio::time::sleep(timings.renew_every() * PERIODS + Duration::from_millis(100)).await;
    let renews = hook.counts().since(&before).renews;
    let periods = start.elapsed().as_secs_f64() / timings.renew_every().as_secs_f64();
    row.ops_per_period = Some(renews as f64 / periods);
    row.call_time = hook.renew_times(&before, micros_before);
    if let (Some(a), Some(b)) = (cpu_before, cpu_time()) {
        row.cpu_per_name = Some(b.saturating_sub(a).div_f64(periods * row.held as f64));
    }
    if let (Some(a), Some(b)) = (rss_before, rss_bytes()) {
        row.rss_per_name = Some((b as f64 - a as f64) / row.held as f64);
    }
    row.lost = Some(terms.iter().filter(|t| !t.is_live()).count());
    drop(terms);
    coordinator.close().await?;
    Ok(())
}

/// The process's CPU time so far (user + system, from `/proc/self/stat`, in clock ticks of
/// 10 ms); `None` off Linux.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime: fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// The process's resident memory now (`VmRSS` of `/proc/self/status`); `None` off Linux.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
