//! Three candidates elect a leader over one in-memory store; each leader fences its writes to a
//! shared "downstream" with its term and steps down after a few writes, so leadership moves.
//!
//! Run with `cargo run -p lease-local --example election`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::{Coordinator, Term, Timings};
use lease_local::MemoryStore;

/// A downstream system that refuses writes from a stale leader: `UPDATE … WHERE fence <= $term`.
#[derive(Default)]
struct Downstream {
    fence: u64,
    log: Vec<String>,
}

impl Downstream {
    fn write(&mut self, term: u64, what: String) -> bool {
        if term < self.fence {
            return false;
        }
        self.fence = term;
        self.log.push(what);
        true
    }
}

#[tokio::main]
async fn main() -> lease_core::Result<()> {
    let store = MemoryStore::new();
    let timings = Timings::from_lease(Duration::from_millis(900))?;
    let downstream = Arc::new(Mutex::new(Downstream::default()));
    let mut coordinators = Vec::new();
    let mut candidates = Vec::new();
    for who in ["alpha", "bravo", "charlie"] {
        let coordinator = Coordinator::builder(store.clone())
            .instance(who)
            .timings(timings)
            .build()?;
        coordinators.push(coordinator.clone());
        let downstream = downstream.clone();
        candidates.push(tokio::spawn(async move {
            coordinator
                .run_elected("report-writer", move |term: Term| {
                    let downstream = downstream.clone();
                    async move {
                        println!(
                            "{:>8} leads with fencing token {}",
                            term.instance(),
                            term.token()
                        );
                        for n in 1..=3 {
                            tokio::select! {
                                _ = term.done() => break,
                                _ = tokio::time::sleep(Duration::from_millis(150)) => {}
                            }
                            let line = format!(
                                "{} wrote row {n} under token {}",
                                term.instance(),
                                term.token()
                            );
                            let accepted = downstream
                                .lock()
                                .map(|mut d| d.write(term.token(), line))
                                .unwrap_or(false);
                            println!(
                                "{:>8}   write {n}: {}",
                                term.instance(),
                                if accepted {
                                    "accepted"
                                } else {
                                    "REFUSED (stale token)"
                                }
                            );
                        }
                        println!("{:>8} steps down", term.instance());
                        Ok::<(), std::io::Error>(())
                    }
                })
                .await
        }));
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    for c in &coordinators {
        c.close().await?;
    }
    for c in candidates {
        if let Ok(Err(e)) = c.await {
            eprintln!("candidate failed: {e}");
        }
    }
    let rows = downstream.lock().map(|d| d.log.len()).unwrap_or(0);
    println!("done: {rows} rows written, every one under the highest token seen so far");
    Ok(())
}
