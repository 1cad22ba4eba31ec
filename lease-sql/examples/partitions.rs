//! Three workers share the 12 partitions of a group over one SQLite file (the embedded default):
//! each takes its fair share. Then `a` leaves gracefully and `b` and `c` take its partitions over
//! at once; then `d` joins and gets its share. Every worker prints its assignment (partition →
//! epoch) as it changes; the epochs are fencing tokens, higher every time a partition changes
//! hands.
//!
//! Each worker has its own store (its own connections), as separate processes would. Each
//! worker's consumer acknowledges a partition's stop as soon as the partition leaves its
//! assignment (`StopAck::stopped`), so hand-overs do not wait out the grace.
//!
//! Run with `cargo run -p lease-sql --example partitions`
//! (`RUST_LOG=lease_core=info` for the worker's own log lines). It exits non-zero when the
//! workers do not settle within the bound their timings give.

use std::collections::BTreeMap;
use std::time::Duration;

use lease_conformance::assignments_settled;
use lease_core::{Assignment, Error, GroupWorker, Result, Timings};
use lease_sql::{SqlConfig, SqliteStore};
use tokio::time::{Instant, sleep};

const GROUP: &str = "orders";
const PARTITIONS: u32 = 12;

fn show(assignment: &Assignment) -> String {
    let held: Vec<String> = assignment
        .partitions
        .iter()
        .map(|(p, epoch)| format!("{p}@{epoch}"))
        .collect();
    format!(
        "[{}]  (members: {})",
        held.join(" "),
        assignment.members.join(" ")
    )
}

async fn start(
    url: &str,
    node: &'static str,
    timings: Timings,
    t0: Instant,
) -> Result<GroupWorker> {
    let store = SqliteStore::connect(url, SqlConfig::default()).await?;
    let worker = GroupWorker::builder(store, GROUP, PARTITIONS)
        .node(node)
        .address(format!("{node}.local:7000"))
        .timings(timings)
        .start()
        .await?;
    let (mut rx, acks) = (worker.assignment(), worker.stop_acks());
    tokio::spawn(async move {
        let mut working: BTreeMap<u32, u64> = BTreeMap::new();
        loop {
            let now = rx.borrow_and_update().clone();
            println!(
                "{:>6.1}s  {node} holds {}",
                t0.elapsed().as_secs_f64(),
                show(&now)
            );
            // The work on a partition that left (or came back under another epoch) stops here,
            // and the worker hears of it: the partition is handed over at once.
            working.retain(|&p, &mut epoch| {
                let keep = now.partitions.get(&p) == Some(&epoch);
                if !keep {
                    acks.stopped(p, epoch);
                }
                keep
            });
            for (p, epoch) in now.partitions {
                working.entry(p).or_insert(epoch);
            }
            if rx.changed().await.is_err() {
                break;
            }
        }
    });
    Ok(worker)
}

/// Waits until every partition is held by exactly one of `workers`, each a fair share.
async fn settle(workers: &[&GroupWorker], bound: Duration, what: &str) -> Result<()> {
    let start = Instant::now();
    loop {
        let now: Vec<Assignment> = workers
            .iter()
            .map(|w| w.assignment().borrow().clone())
            .collect();
        if assignments_settled(&now, PARTITIONS) {
            println!(
                "  ----  {what}: settled in {:.1}s",
                start.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if start.elapsed() > bound {
            return Err(Error::invalid_argument(format!(
                "{what}: not settled within {bound:?}: {now:?}"
            )));
        }
        sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("lease-partitions-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::unavailable(format!("cannot create {}: {e}", dir.display())))?;
    let url = format!("sqlite://{}/leases.db", dir.display());
    let timings = Timings::from_lease(Duration::from_secs(3))?;
    // A tick's few statements on a busy machine: the bound's allowance for store work.
    let bound = GroupWorker::settle_time(&timings) + Duration::from_secs(1);
    println!(
        "{PARTITIONS} partitions of {GROUP:?} on {url}; tick {:?}, lease {:?}, settle bound {bound:?}",
        timings.renew_every(),
        timings.lease()
    );
    let t0 = Instant::now();

    let a = start(&url, "a", timings, t0).await?;
    let b = start(&url, "b", timings, t0).await?;
    let c = start(&url, "c", timings, t0).await?;
    settle(&[&a, &b, &c], bound, "a, b and c started").await?;
    sleep(Duration::from_secs(1)).await;

    println!("  ----  a leaves");
    a.leave().await?;
    settle(&[&b, &c], bound, "a left").await?;
    sleep(Duration::from_secs(1)).await;

    println!("  ----  d joins");
    let d = start(&url, "d", timings, t0).await?;
    settle(&[&b, &c, &d], bound, "d joined").await?;
    sleep(Duration::from_secs(1)).await;

    for w in [b, c, d] {
        w.leave().await?;
    }
    sleep(Duration::from_millis(50)).await;
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
