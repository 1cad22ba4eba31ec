//! Round trips counted on the wire: a [`FaultProxy`](lease_conformance::FaultProxy) in pass mode
//! between client and server counts request/response exchanges. Per store operation (claim,
//! renew, verify, release, and a claim over a released name) on a warm connection, and per
//! acquire+release cycle for every cycle subject, peers included.

use anyhow::{Result, ensure};
use lease::backend::HolderToken;

use crate::backends::{self, Env, TTL, open_store};
use crate::cli::Backend;
use crate::peers::{self, INSTANCE, SubjectId};

/// Cycles run through the proxy before counting.
const WARM_CYCLES: u32 = 5;
/// Cycles counted.
const COUNTED_CYCLES: u32 = 20;

/// Round trips of each store operation on one backend.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpRoundTrips {
    /// The backend.
    pub(crate) backend: Option<Backend>,
    /// Claim of a new name.
    pub(crate) claim: u64,
    /// Renew.
    pub(crate) renew: u64,
    /// Verify.
    pub(crate) verify: u64,
    /// Release.
    pub(crate) release: u64,
    /// Claim of a released name.
    pub(crate) reclaim: u64,
    /// Connections opened during the counted operations.
    pub(crate) connections: u64,
    /// Why it stopped early.
    pub(crate) error: Option<String>,
}

/// Round trips per acquire+release cycle of one subject.
#[derive(Debug, Clone)]
pub(crate) struct CycleRoundTrips {
    /// The backend.
    pub(crate) backend: Backend,
    /// The subject.
    pub(crate) id: SubjectId,
    /// Round trips per cycle.
    pub(crate) per_cycle: Option<f64>,
    /// Connections opened during the counted cycles.
    pub(crate) connections: u64,
    /// Why it did not run.
    pub(crate) error: Option<String>,
}

/// Counts each store operation's round trips on `backend`.
pub(crate) async fn ops(env: &Env, backend: Backend) -> OpRoundTrips {
    let mut row = OpRoundTrips {
        backend: Some(backend),
        ..OpRoundTrips::default()
    };
    if let Err(e) = ops_into(env, backend, &mut row).await {
        eprintln!(
            "lease-bench: {} round trips: {}",
            backend.label(),
            crate::describe(&e)
        );
        row.error = Some(crate::describe(&e));
    }
    row
}

async fn ops_into(env: &Env, backend: Backend, row: &mut OpRoundTrips) -> Result<()> {
    let (proxy, url) = backends::proxy(env, backend).await?;
    let store = open_store(backend, &url, TTL).await?;
    // Warm up: every statement once on the connection, on another name.
    let warm = env.name("rt-warm");
    for _ in 0..2 {
        let h = HolderToken::mint();
        ensure!(
            store.claim(&warm, &h, INSTANCE, TTL).await?.is_some(),
            "warm-up claim refused"
        );
        store.renew(&warm, &h, TTL).await?;
        store.verify(&warm, &h).await?;
        store.release(&warm, &h).await?;
    }
    let name = env.name("rt-ops");
    let h = HolderToken::mint();
    let mut connections = 0;

    proxy.reset_stats();
    ensure!(
        store.claim(&name, &h, INSTANCE, TTL).await?.is_some(),
        "claim refused"
    );
    let s = proxy.stats();
    (row.claim, connections) = (s.round_trips, connections + s.connections_accepted);

    proxy.reset_stats();
    ensure!(
        store.renew(&name, &h, TTL).await?.is_some(),
        "renew found the lease lost"
    );
    let s = proxy.stats();
    (row.renew, connections) = (s.round_trips, connections + s.connections_accepted);

    proxy.reset_stats();
    ensure!(
        store.verify(&name, &h).await?.is_some(),
        "verify found the lease lost"
    );
    let s = proxy.stats();
    (row.verify, connections) = (s.round_trips, connections + s.connections_accepted);

    proxy.reset_stats();
    ensure!(
        store.release(&name, &h).await?,
        "release did not end the lease"
    );
    let s = proxy.stats();
    (row.release, connections) = (s.round_trips, connections + s.connections_accepted);

    let h2 = HolderToken::mint();
    proxy.reset_stats();
    ensure!(
        store.claim(&name, &h2, INSTANCE, TTL).await?.is_some(),
        "re-claim refused"
    );
    let s = proxy.stats();
    (row.reclaim, connections) = (s.round_trips, connections + s.connections_accepted);
    store.release(&name, &h2).await?;

    row.connections = connections;
    Ok(())
}

/// Counts the round trips per cycle of every subject of `backend`.
pub(crate) async fn cycles(env: &Env, backend: Backend) -> Vec<CycleRoundTrips> {
    let mut rows = Vec::new();
    for id in SubjectId::on(backend) {
        let (per_cycle, connections, error) = match cycle(env, backend, id).await {
            Ok((p, c)) => (Some(p), c, None),
            Err(e) => {
                eprintln!(
                    "lease-bench: {} {} round trips: {}",
                    backend.label(),
                    id.label(),
                    crate::describe(&e)
                );
                (None, 0, Some(crate::describe(&e)))
            }
        };
        rows.push(CycleRoundTrips {
            backend,
            id,
            per_cycle,
            connections,
            error,
        });
    }
    rows
}

async fn cycle(env: &Env, backend: Backend, id: SubjectId) -> Result<(f64, u64)> {
    let (proxy, url) = backends::proxy(env, backend).await?;
    let mut subject = peers::build(env, backend, id, &url, "rt").await?;
    for _ in 0..WARM_CYCLES {
        subject.cycle().await?;
    }
    proxy.reset_stats();
    for _ in 0..COUNTED_CYCLES {
        subject.cycle().await?;
    }
    let s = proxy.stats();
    subject.close().await;
    Ok((
        s.round_trips as f64 / f64::from(COUNTED_CYCLES),
        s.connections_accepted,
    ))
}
