//! What keeping many leases costs.
//!
//! - **renew-cost** ([`run`]): renewing 1, 100, 10,000 held leases once (one renew period's
//!   work), one at a time and with bounded concurrency — what N keepers of one process cost
//!   the store per period.
//! - **partitions** ([`partitions`]): the same work done the partitioned way, side by side in
//!   one run: K partitions renewed with one `PartitionStore::renew_partitions` call against K
//!   leases renewed one by one with `LeaseStore::renew`, in interleaved rounds.
//!
//! Wall time on a direct connection; round trips counted on the wire in a second pass through
//! a proxy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt, stream};
use lease::{
    LeaseStore,
    backend::{
        HolderToken, MAX_RENEWALS_PER_CALL, RenewItem,
        partitions::{BatchRenew, owner_id},
    },
};
use lease_conformance::GroupStore;

use crate::backends::{self, Env, TTL, open_group_store, open_store};
use crate::cli::{Args, Backend};
use crate::peers::INSTANCE;
use crate::stats::{Samples, Summary};

/// Rounds every K of the partitions run makes, whatever its time budget.
pub(crate) const MIN_PARTITION_ROUNDS: u32 = 5;

/// The lease duration of the partitions run, leases and partitions alike. Longer than the
/// protocol's 15 s so that setting up 10,000 of each on the slowest backend (claims, then
/// acquisitions, then the first renewals) never lets one lapse before it is first renewed;
/// the duration does not change what a renewal costs.
pub(crate) const PARTITION_TTL: Duration = Duration::from_secs(60);

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
    /// Wall time of renewing all once with `LeaseStore::renew_many` (one call per
    /// `MAX_RENEWALS_PER_CALL` names, one after the other), as the coordinator's renewer does.
    pub(crate) batched: Option<Duration>,
    /// Whether the store batches natively (`Capabilities::renew_many`).
    pub(crate) native_batch: bool,
    /// Round trips of renewing all once with `renew_many` (servers only).
    pub(crate) rt_batched: Option<u64>,
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
            batched: None,
            native_batch: false,
            rt_batched: None,
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
    let held = Held::claim(store, &names, c, TTL).await?;
    // One renewal first, so the renew statement is prepared on every connection in use.
    held.renew_concurrent(c).await?;
    row.sequential = Some(held.renew_sequential().await?);
    row.concurrent = Some(held.renew_concurrent(c).await?);
    row.native_batch = held.store.capabilities().renew_many;
    held.renew_batched().await?;
    row.batched = Some(held.renew_batched().await?);
    held.release(c).await?;

    if backend.has_server() {
        let (proxy, url) = backends::proxy(env, backend).await?;
        let store = open_store(backend, &url, TTL).await?;
        let held = Held::claim(store, &names, c, TTL).await?;
        // One renewal first, so every statement is prepared on the connections in use.
        held.renew_concurrent(c).await?;
        proxy.reset_stats();
        held.renew_sequential().await?;
        row.rt_sequential = Some(proxy.stats().round_trips);
        proxy.reset_stats();
        held.renew_concurrent(c).await?;
        row.rt_concurrent = Some(proxy.stats().round_trips);
        held.renew_batched().await?;
        proxy.reset_stats();
        held.renew_batched().await?;
        row.rt_batched = Some(proxy.stats().round_trips);
        held.release(c).await?;
    }
    Ok(())
}

/// One backend at one batch size K: K partitions renewed with one call (a) against K leases
/// renewed one by one (b), in the same interleaved rounds.
#[derive(Debug, Clone)]
pub(crate) struct PartitionRow {
    /// The backend.
    pub(crate) backend: Backend,
    /// Partitions per batch, and leases renewed one by one.
    pub(crate) k: usize,
    /// How the store's batch renewal reaches the server, as it declares.
    pub(crate) mode: Option<BatchRenew>,
    /// Rounds measured (one batch of each side per round).
    pub(crate) rounds: u32,
    /// (a) one `renew_partitions` call of K partitions, per call.
    pub(crate) batch: Option<Summary>,
    /// (b) K `renew` calls one after the other, per batch of K.
    pub(crate) single: Option<Summary>,
    /// Round trips of one (a) batch (servers only).
    pub(crate) rt_batch: Option<u64>,
    /// Round trips of one (b) batch (servers only).
    pub(crate) rt_single: Option<u64>,
    /// Connections opened during the counted batches.
    pub(crate) connections: u64,
    /// Why it stopped early.
    pub(crate) error: Option<String>,
}

impl PartitionRow {
    /// Renewals per second of (a): K × batches ÷ their wall time.
    pub(crate) fn batch_rate(&self) -> Option<f64> {
        self.batch.map(|s| s.rate * self.k as f64)
    }

    /// Renewals per second of (b): K × batches ÷ their wall time.
    pub(crate) fn single_rate(&self) -> Option<f64> {
        self.single.map(|s| s.rate * self.k as f64)
    }

    /// (b) ÷ (a) of the median batch times: how many times longer K single renewals take.
    pub(crate) fn ratio(&self) -> Option<f64> {
        let a = self.batch.and_then(|s| s.p50)?.as_secs_f64();
        let b = self.single.and_then(|s| s.p50)?.as_secs_f64();
        (a > 0.0).then(|| b / a)
    }
}

/// Runs every `args.partitions` size on `backend`.
pub(crate) async fn partitions(args: &Args, env: &Env, backend: Backend) -> Vec<PartitionRow> {
    let mut rows = Vec::new();
    for &k in &args.partitions {
        let mut row = PartitionRow {
            backend,
            k,
            mode: None,
            rounds: 0,
            batch: None,
            single: None,
            rt_batch: None,
            rt_single: None,
            connections: 0,
            error: None,
        };
        if let Err(e) = partitions_one(args, env, &mut row).await {
            eprintln!(
                "lease-bench: {} partitions ({k}): {}",
                backend.label(),
                crate::describe(&e)
            );
            row.error = Some(crate::describe(&e));
        }
        rows.push(row);
    }
    rows
}

async fn partitions_one(args: &Args, env: &Env, row: &mut PartitionRow) -> Result<()> {
    let backend = row.backend;
    let k = row.k;
    let c = args.renew_concurrency;
    let group = env.name(&format!("parts-{k}"));
    let owner = owner_id("lease-bench");
    let all: Vec<u32> = (0..u32::try_from(k).context("too many partitions")?).collect();
    let names: Vec<String> = (0..k)
        .map(|i| env.name(&format!("single-{k}-{i}")))
        .collect();

    let store = open_group_store(backend, &env.url(backend), PARTITION_TTL).await?;
    row.mode = Some(store.capabilities().batch_renew);
    let held = Held::claim(store.clone(), &names, c, PARTITION_TTL).await?;
    let parts = Parts::acquire(store, &group, &owner, &all, c).await?;
    // One renewal of each first, so the statements are prepared on every connection in use.
    held.renew_concurrent(c).await?;
    parts.renew().await?;

    let (mut batch, mut single) = (Samples::default(), Samples::default());
    let budget = Duration::from_secs_f64(args.partition_seconds);
    let start = Instant::now();
    while row.rounds < args.partition_rounds
        && (row.rounds < MIN_PARTITION_ROUNDS || start.elapsed() < budget)
    {
        // Alternate which side goes first, so neither always follows the other's writes.
        let batch_first = row.rounds.is_multiple_of(2);
        if batch_first {
            record(&mut batch, parts.renew().await?);
        }
        record(&mut single, held.renew_sequential().await?);
        if !batch_first {
            record(&mut batch, parts.renew().await?);
        }
        row.rounds += 1;
    }
    row.batch = Some(batch.summary());
    row.single = Some(single.summary());
    parts.release().await?;
    held.release(c).await?;

    if backend.has_server() {
        let (proxy, url) = backends::proxy(env, backend).await?;
        let store = open_group_store(backend, &url, PARTITION_TTL).await?;
        let held = Held::claim(store.clone(), &names, c, PARTITION_TTL).await?;
        let parts = Parts::acquire(store, &group, &owner, &all, c).await?;
        // One renewal first, so every statement is prepared on the connections in use.
        held.renew_concurrent(c).await?;
        parts.renew().await?;
        proxy.reset_stats();
        parts.renew().await?;
        let s = proxy.stats();
        (row.rt_batch, row.connections) = (Some(s.round_trips), s.connections_accepted);
        proxy.reset_stats();
        held.renew_sequential().await?;
        let s = proxy.stats();
        (row.rt_single, row.connections) = (
            Some(s.round_trips),
            row.connections + s.connections_accepted,
        );
        parts.release().await?;
        held.release(c).await?;
    }
    Ok(())
}

fn record(samples: &mut Samples, d: Duration) {
    samples.push(d);
    samples.add_busy(d);
}

/// Partitions of one group held by one owner through one store.
struct Parts<'a> {
    store: Arc<dyn GroupStore>,
    group: &'a str,
    owner: &'a str,
    all: &'a [u32],
}

impl<'a> Parts<'a> {
    async fn acquire(
        store: Arc<dyn GroupStore>,
        group: &'a str,
        owner: &'a str,
        all: &'a [u32],
        c: usize,
    ) -> Result<Parts<'a>> {
        let s = &store;
        stream::iter(all.iter().map(Ok::<_, anyhow::Error>))
            .try_for_each_concurrent(c, |&p| async move {
                let got = s.acquire_partition(group, p, owner, PARTITION_TTL).await?;
                ensure!(
                    got.is_some(),
                    "the acquisition of the free partition {p} of {group} was refused"
                );
                Ok(())
            })
            .await?;
        Ok(Parts {
            store,
            group,
            owner,
            all,
        })
    }

    /// One `renew_partitions` call of every partition; its wall time.
    async fn renew(&self) -> Result<Duration> {
        let start = Instant::now();
        let renewed = self
            .store
            .renew_partitions(self.group, self.all, self.owner, PARTITION_TTL)
            .await?;
        let elapsed = start.elapsed();
        ensure!(
            renewed.len() == self.all.len(),
            "the renewal of {} partitions of {} found {} lost",
            self.all.len(),
            self.group,
            self.all.len().saturating_sub(renewed.len())
        );
        Ok(elapsed)
    }

    async fn release(&self) -> Result<()> {
        let ended = self
            .store
            .release_partitions(self.group, self.all, self.owner)
            .await?;
        ensure!(
            ended == self.all.len(),
            "the release of {} partitions of {} ended {ended}",
            self.all.len(),
            self.group
        );
        Ok(())
    }
}

/// Leases held through one store.
struct Held {
    store: Arc<dyn LeaseStore>,
    leases: Vec<(String, HolderToken)>,
    ttl: Duration,
}

impl Held {
    async fn claim(
        store: Arc<dyn LeaseStore>,
        names: &[String],
        c: usize,
        ttl: Duration,
    ) -> Result<Held> {
        let leases: Vec<(String, HolderToken)> = names
            .iter()
            .map(|n| (n.clone(), HolderToken::mint()))
            .collect();
        let s = &store;
        stream::iter(leases.iter().map(Ok::<_, anyhow::Error>))
            .try_for_each_concurrent(c, |(name, holder)| async move {
                let grant = s.claim(name, holder, INSTANCE, ttl).await?;
                ensure!(
                    grant.is_some(),
                    "the claim of the free name {name} was refused"
                );
                Ok(())
            })
            .await?;
        Ok(Held { store, leases, ttl })
    }

    async fn renew_sequential(&self) -> Result<Duration> {
        let start = Instant::now();
        for (name, holder) in &self.leases {
            let grant = self.store.renew(name, holder, self.ttl).await?;
            ensure!(
                grant.is_some(),
                "the renewal of {name} found the lease lost"
            );
        }
        Ok(start.elapsed())
    }

    async fn renew_batched(&self) -> Result<Duration> {
        let start = Instant::now();
        for chunk in self.leases.chunks(MAX_RENEWALS_PER_CALL) {
            let items: Vec<RenewItem<'_>> = chunk
                .iter()
                .map(|(name, holder)| RenewItem { name, holder })
                .collect();
            let answers = self.store.renew_many(&items, self.ttl).await?;
            for ((name, _), answer) in chunk.iter().zip(answers) {
                ensure!(
                    answer?.is_some(),
                    "the batched renewal of {name} found the lease lost"
                );
            }
        }
        Ok(start.elapsed())
    }

    async fn renew_concurrent(&self, c: usize) -> Result<Duration> {
        let start = Instant::now();
        let (s, ttl) = (&self.store, self.ttl);
        let results: Vec<Result<()>> = stream::iter(&self.leases)
            .map(|(name, holder)| async move {
                let grant = s.renew(name, holder, ttl).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_rows_compare_the_medians_and_count_renewals() {
        let summary = |ms: u64| {
            let mut s = Samples::default();
            for _ in 0..4 {
                record(&mut s, Duration::from_millis(ms));
            }
            s.summary()
        };
        let row = PartitionRow {
            backend: Backend::Local,
            k: 100,
            mode: Some(BatchRenew::default()),
            rounds: 4,
            batch: Some(summary(2)),
            single: Some(summary(50)),
            rt_batch: None,
            rt_single: None,
            connections: 0,
            error: None,
        };
        assert!((row.ratio().unwrap() - 25.0).abs() < 1e-9);
        assert!((row.batch_rate().unwrap() - 50_000.0).abs() < 1e-6);
        assert!((row.single_rate().unwrap() - 2_000.0).abs() < 1e-6);
        assert_eq!(PartitionRow { batch: None, ..row }.ratio(), None);
    }
}
