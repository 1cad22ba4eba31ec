//! The failover scenario of `failover_postgres.rs` and `failover_mysql.rs`, on a primary + replica
//! cluster of `ci/cluster/` (its script drives the faults), through the address that moves to
//! the current primary (the script's proxy).
//!
//! 1. With the replica streaming, A claims `kept` (120 s) and `renewed` (10 s): both acknowledged.
//! 2. The replica stops receiving (`detach-replica`).
//! 3. A renews `renewed` for 120 s and claims the new name `claimed` for 120 s, concurrently.
//!    Under asynchronous replication both are acknowledged at once, from the primary alone; under
//!    synchronous (PostgreSQL) or semi-synchronous AFTER_SYNC (MariaDB) replication both wait for
//!    a replica that never answers.
//! 4. The primary is SIGKILLed, the replica promoted (the proxy moves to it), the old primary
//!    reattached as the new one's replica.
//! 5. B, another store, claims the three names through the moved address, once `renewed`'s first
//!    expiry (10 s) has passed; A verifies.
//!
//! What a user counts on: a lease A was told it holds (a claim or renewal acknowledged) is still
//! A's after the failover — B's claim is refused and A's verify finds it — so no term is handed
//! out twice and no live lease vanishes. Every breach is collected and reported together.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::LeaseStore;
use lease_core::backend::{Grant, HolderToken};

/// One of the cluster scripts of `ci/cluster/`.
#[derive(Clone, Copy)]
pub(crate) struct Cluster {
    /// The script's file name under `ci/cluster/`.
    pub script: &'static str,
}

impl Cluster {
    /// Runs the script with `args` (on a blocking thread: it waits for servers), its stdout
    /// trimmed; panics with its stderr when it fails.
    pub(crate) async fn run(self, args: &[&str]) -> String {
        let path = format!(
            "{}/../ci/cluster/{}",
            env!("CARGO_MANIFEST_DIR"),
            self.script
        );
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new("bash")
                .arg(&path)
                .args(&args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{path} {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        })
        .await
        .unwrap()
    }
}

/// The first lease of `renewed`: long enough that its renewal, sent after the replica is cut
/// off, still finds it live on a loaded machine (with both cores busy 4 s was too short: the
/// renewal came after the expiry and was refused).
const RENEWED_TTL: Duration = Duration::from_secs(10);

/// Serializes the cases of one test process: they share the cluster.
pub(crate) static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `op` again every 200 ms while it fails, for up to 60 s (the new primary's address may still
/// refuse, or a connection to the old one still be pooled); the first success.
async fn retried<T, F, Fut>(what: &str, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = lease_core::Result<T>>,
{
    let start = Instant::now();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), op()).await {
            Ok(Ok(v)) => return v,
            Ok(Err(e)) if start.elapsed() < Duration::from_secs(60) => {
                let _ = e;
            }
            Ok(Err(e)) => panic!("{what}: still failing after 60 s: {e}"),
            Err(_) if start.elapsed() < Duration::from_secs(60) => {}
            Err(_) => panic!("{what}: no answer after 60 s"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What the scenario saw.
pub(crate) struct Outcome {
    /// Every acknowledged lease lost, or term handed out twice, one line each.
    pub breaches: Vec<String>,
    /// From the SIGKILL of the primary to B's first answer (a read) through the moved address.
    pub kill_to_answer: Duration,
    /// From the SIGKILL of the primary to B's first claim answered (after the reattach).
    pub kill_to_write: Duration,
}

/// Runs the scenario (module docs) with stores `a` and `b` on the cluster (streaming, in the
/// mode under test); leaves it with the old replica as primary and the old primary reattached.
pub(crate) async fn scenario(
    cluster: Cluster,
    a: Arc<dyn LeaseStore>,
    b: Arc<dyn LeaseStore>,
) -> Outcome {
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    let kept = format!("failover-kept-{run}");
    let renewed = format!("failover-renewed-{run}");
    let claimed = format!("failover-claimed-{run}");
    let holder_a = HolderToken::mint();
    let long = Duration::from_secs(120);

    // 1. Acknowledged with the replica streaming.
    let kept_grant = a.claim(&kept, &holder_a, "a", long).await.unwrap();
    let kept_grant = kept_grant.expect("kept: a new name is free");
    let renewed_at = Instant::now();
    let first = a
        .claim(&renewed, &holder_a, "a", RENEWED_TTL)
        .await
        .unwrap()
        .expect("renewed: a new name is free");
    // The replica has both before it stops (a synchronous one had them at the acknowledgement).
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // 2., 3.
    cluster.run(&["detach-replica"]).await;
    let (ra, ca) = (Arc::clone(&a), Arc::clone(&a));
    let (rn, cn, h1, h2) = (
        renewed.clone(),
        claimed.clone(),
        holder_a.clone(),
        holder_a.clone(),
    );
    let renewal = tokio::spawn(async move { ra.renew(&rn, &h1, long).await });
    let claim = tokio::spawn(async move { ca.claim(&cn, &h2, "a", long).await });
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 4.
    let killed = Instant::now();
    cluster.run(&["kill-primary"]).await;
    cluster.run(&["promote"]).await;
    // 5. B's first answer through the moved address (a read: before the old primary is back, a
    // synchronous primary takes no write).
    let holder_b = HolderToken::mint();
    retried("B's first get after the promotion", || b.get(&kept)).await;
    let kill_to_answer = killed.elapsed();
    cluster.run(&["reattach"]).await;

    let acknowledged = |what: &str, r: Result<lease_core::Result<Option<Grant>>, _>| match r {
        Ok(Ok(Some(grant))) => Some(grant),
        Ok(Ok(None)) => panic!("{what}: refused before the failover (held by nobody else)"),
        Ok(Err(e)) => {
            eprintln!("{what}: not acknowledged (the primary died first): {e}");
            None
        }
        Err(_) => {
            eprintln!("{what}: no answer 15 s after the primary's kill");
            None
        }
    };
    let renewal = acknowledged(
        "A's renewal of `renewed`",
        tokio::time::timeout(Duration::from_secs(15), renewal)
            .await
            .map(|j| j.unwrap()),
    );
    let claim = acknowledged(
        "A's claim of `claimed`",
        tokio::time::timeout(Duration::from_secs(15), claim)
            .await
            .map(|j| j.unwrap()),
    );

    // `renewed`'s first expiry has passed: only the renewal can keep it A's.
    let wait = (RENEWED_TTL + Duration::from_secs(1)).saturating_sub(renewed_at.elapsed());
    tokio::time::sleep(wait).await;

    let mut breaches = Vec::new();
    let b_kept = retried("B's claim of `kept`", || {
        b.claim(&kept, &holder_b, "b", Duration::from_secs(10))
    })
    .await;
    let kill_to_write = killed.elapsed();
    breaches.extend(breach(
        &kept,
        kept_grant,
        "A's claim (replica streaming)",
        b_kept,
    ));
    let b_renewed = retried("B's claim of `renewed`", || {
        b.claim(&renewed, &holder_b, "b", Duration::from_secs(10))
    })
    .await;
    if let Some(grant) = renewal {
        breaches.extend(breach(
            &renewed,
            grant,
            "A's renewal (replica cut off)",
            b_renewed,
        ));
    } else if let Some(bg) = b_renewed
        && bg.term <= first.term
    {
        breaches.push(format!(
            "{renewed}: B got term {} after A's term {}: a term going back",
            bg.term, first.term
        ));
    }
    let b_claimed = retried("B's claim of `claimed`", || {
        b.claim(&claimed, &holder_b, "b", Duration::from_secs(10))
    })
    .await;
    if let Some(grant) = claim {
        breaches.extend(breach(
            &claimed,
            grant,
            "A's claim (replica cut off)",
            b_claimed,
        ));
    }
    if retried("A's verify of `kept`", || a.verify(&kept, &holder_a))
        .await
        .is_none()
    {
        breaches.push(format!(
            "{kept}: A's verify finds no lease after the failover (claimed for 120 s)"
        ));
    }
    Outcome {
        breaches,
        kill_to_answer,
        kill_to_write,
    }
}

/// The breach when B claimed `name` after A's `what` was acknowledged with `grant`.
fn breach(name: &str, grant: Grant, what: &str, b_claim: Option<Grant>) -> Option<String> {
    let bg = b_claim?;
    Some(format!(
        "{name}: {what} was acknowledged with term {} for 120 s before the failover; after it, \
         B claimed the name with term {}{}",
        grant.term,
        bg.term,
        if bg.term <= grant.term {
            " (a fencing token handed out twice, and A's live lease gone)"
        } else {
            " (A's live lease gone)"
        }
    ))
}
