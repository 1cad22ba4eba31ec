//! What keeping many leases costs: renewing 1, 100, 10,000 held leases once (one renew period's
//! work), one at a time and with bounded concurrency; wall time on a direct connection, round
//! trips counted on the wire in a second pass through a proxy.
//!
//! The store API renews one lease per call (no backend offers partitioned leases with a batched
//! renewal yet), so this is what N keepers of one process cost the store per period.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use futures::{StreamExt, TryStreamExt, stream};
use lease_core::{HolderToken, LeaseStore};

use crate::backends::{self, Env, TTL, open_store};
use crate::cli::{Args, Backend};
use crate::peers::INSTANCE;

/// One backend at one number of held leases.
#[derive(Debug, Clone)]
pub(crate) struct RenewRow {
    /// The backend.
    pub(crate) backend: Backend,
    /// Leases held.
    pub(crate) held: usize,
    /// Renewals in flight in the concurrent run.
    pub(crate) concurrency: usize,
    /// Wall time of renewing all once, one at a time.
    pub(crate) sequential: Option<Duration>,
    /// Wall time of renewing all once, `concurrency` in flight.
    pub(crate) concurrent: Option<Duration>,
    /// Round trips of renewing all once, one at a time (servers only).
    pub(crate) rt_sequential: Option<u64>,
    /// Round trips of renewing all once, `concurrency` in flight (servers only).
    pub(crate) rt_concurrent: Option<u64>,
    /// Why it stopped early.
    pub(crate) error: Option<String>,
}

/// Runs every `args.held` size on `backend`.
pub(crate) async fn run(args: &Args, env: &Env, backend: Backend) -> Vec<RenewRow> {
    let mut rows = Vec::new();
    for &held in &args.held {
        let mut row = RenewRow {
            backend,
            held,
            concurrency: args.renew_concurrency,
            sequential: None,
            concurrent: None,
            rt_sequential: None,
            rt_concurrent: None,
            error: None,
        };
        if let Err(e) = one(env, &mut row).await {
            eprintln!(
                "lease-bench: {} renew cost ({held}): {}",
                backend.label(),
                crate::describe(&e)
            );
            row.error = Some(crate::describe(&e));
        }
        rows.push(row);
    }
    rows
}

async fn one(env: &Env, row: &mut RenewRow) -> Result<()> {
    let backend = row.backend;
    let c = row.concurrency;
    let names: Vec<String> = (0..row.held)
        .map(|i| env.name(&format!("renew-{}-{i}", row.held)))
        .collect();

    let store = open_store(backend, &env.url(backend), TTL).await?;
    let held = Held::claim(store, &names, c).await?;
    // One renewal first, so the renew statement is prepared on every connection in use.
    held.renew_concurrent(c).await?;
    row.sequential = Some(held.renew_sequential().await?);
    row.concurrent = Some(held.renew_concurrent(c).await?);
    held.release(c).await?;

    if backend.has_server() {
        let (proxy, url) = backends::proxy(env, backend).await?;
        let store = open_store(backend, &url, TTL).await?;
        let held = Held::claim(store, &names, c).await?;
        // One renewal first, so every statement is prepared on the connections in use.
        held.renew_concurrent(c).await?;
        proxy.reset_stats();
        held.renew_sequential().await?;
        row.rt_sequential = Some(proxy.stats().round_trips);
        proxy.reset_stats();
        held.renew_concurrent(c).await?;
        row.rt_concurrent = Some(proxy.stats().round_trips);
        held.release(c).await?;
    }
    Ok(())
}

/// Leases held through one store.
struct Held {
    store: Arc<dyn LeaseStore>,
    leases: Vec<(String, HolderToken)>,
}

impl Held {
    async fn claim(store: Arc<dyn LeaseStore>, names: &[String], c: usize) -> Result<Held> {
        let leases: Vec<(String, HolderToken)> = names
            .iter()
            .map(|n| (n.clone(), HolderToken::mint()))
            .collect();
        let s = &store;
        stream::iter(leases.iter().map(Ok::<_, anyhow::Error>))
            .try_for_each_concurrent(c, |(name, holder)| async move {
                let grant = s.claim(name, holder, INSTANCE, TTL).await?;
                ensure!(
                    grant.is_some(),
                    "the claim of the free name {name} was refused"
                );
                Ok(())
            })
            .await?;
        Ok(Held { store, leases })
    }

    async fn renew_sequential(&self) -> Result<Duration> {
        let start = Instant::now();
        for (name, holder) in &self.leases {
            let grant = self.store.renew(name, holder, TTL).await?;
            ensure!(
                grant.is_some(),
                "the renewal of {name} found the lease lost"
            );
        }
        Ok(start.elapsed())
    }

    async fn renew_concurrent(&self, c: usize) -> Result<Duration> {
        let start = Instant::now();
        let s = &self.store;
        let results: Vec<Result<()>> = stream::iter(&self.leases)
            .map(|(name, holder)| async move {
                let grant = s.renew(name, holder, TTL).await?;
                ensure!(
                    grant.is_some(),
                    "the renewal of {name} found the lease lost"
                );
                Ok(())
            })
            .buffer_unordered(c)
            .collect()
            .await;
        let elapsed = start.elapsed();
        results.into_iter().collect::<Result<()>>()?;
        Ok(elapsed)
    }

    async fn release(&self, c: usize) -> Result<()> {
        let s = &self.store;
        stream::iter(self.leases.iter().map(Ok::<_, anyhow::Error>))
            .try_for_each_concurrent(c, |(name, holder)| async move {
                s.release(name, holder).await?;
                Ok(())
            })
            .await
    }
}
