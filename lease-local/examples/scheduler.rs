//! Three replicas of a process run a job every 2 seconds over one in-memory store: each instant
//! runs once, on one of them. One replica is killed in the middle of a round; once its lease
//! has expired, the round runs again, once, on another replica.
//!
//! Each replica runs on its own thread with its own tokio runtime, so a kill is real: the
//! runtime is dropped with everything in flight, and nothing of it (renewal, release, finish)
//! ever reaches the store again.
//!
//! Run with `cargo run -p lease-local --example scheduler`
//! (`RUST_LOG=lease_core=info` to see the scheduler's own log lines).

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lease_core::{Job, Scheduler, scheduler::Round};
use lease_core::{Result, Timings};
use lease_local::MemoryStore;

/// What the replicas' work reports to the main thread.
enum Event {
    Started {
        who: &'static str,
        instant_ms: i64,
        label: String,
        token: u64,
        rerun: bool,
    },
    Ended {
        who: &'static str,
        instant_ms: i64,
        completed: bool,
    },
}

/// What the main thread tells a replica.
enum Signal {
    /// Shut down gracefully.
    Stop,
    /// Die on the spot.
    Kill,
}

const REPLICAS: [&str; 3] = ["alpha", "bravo", "charlie"];
const ROUND: Duration = Duration::from_millis(500);
const RUN_FOR: Duration = Duration::from_secs(12);

fn replica(
    who: &'static str,
    store: MemoryStore,
    events: mpsc::Sender<Event>,
    signals: tokio::sync::oneshot::Receiver<Signal>,
) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| lease_core::Error::unavailable(format!("no runtime: {e}")))?;
    let killed = runtime.block_on(async move {
        let job = Job::every("report", Duration::from_secs(2))?.run(move |round: Round| {
            let events = events.clone();
            async move {
                let instant_ms = round.instant_ms();
                let _ = events.send(Event::Started {
                    who,
                    instant_ms,
                    label: round.instant().format("%H:%M:%S").to_string(),
                    token: round.token(),
                    rerun: round.is_rerun(),
                });
                // The work: half a second, unless told to stop.
                let completed = tokio::select! {
                    _ = round.done() => false,
                    _ = tokio::time::sleep(ROUND) => true,
                };
                let _ = events.send(Event::Ended {
                    who,
                    instant_ms,
                    completed,
                });
                if completed {
                    Ok(())
                } else {
                    Err(std::io::Error::other("told to stop"))
                }
            }
        });
        let scheduler = Scheduler::builder(store)
            .instance(who)
            // A short lease, so a dead replica's round is found within about a second.
            .timings(Timings::from_lease(Duration::from_millis(900))?)
            .job(job)
            .build()?;
        let run = scheduler.run();
        tokio::pin!(run);
        tokio::select! {
            r = &mut run => r.map(|()| false),
            signal = signals => match signal {
                Ok(Signal::Kill) => Ok(true),
                _ => {
                    scheduler.shutdown().await?;
                    run.await.map(|()| false)
                }
            },
        }
    })?;
    if killed {
        // The process is gone: whatever it had in flight never runs again.
        runtime.shutdown_background();
    }
    Ok(())
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let store = MemoryStore::new();
    let (events_tx, events) = mpsc::channel();
    let mut stops = BTreeMap::new();
    let mut threads = Vec::new();
    for who in REPLICAS {
        let (tx, rx) = tokio::sync::oneshot::channel();
        stops.insert(who, tx);
        let (store, events_tx) = (store.clone(), events_tx.clone());
        threads.push((
            who,
            thread::spawn(move || replica(who, store, events_tx, rx)),
        ));
    }
    drop(events_tx);

    println!("three replicas run 'report' every 2 s; each instant runs once cluster-wide\n");
    let start = Instant::now();
    let mut ran: BTreeMap<i64, (String, Vec<String>)> = BTreeMap::new();
    let mut victim: Option<(&'static str, i64)> = None;
    let mut kill_at: Option<(Instant, &'static str, i64)> = None;
    while start.elapsed() < RUN_FOR {
        if let Some((at, who, instant_ms)) = kill_at
            && Instant::now() >= at
        {
            if let Some(tx) = stops.remove(who) {
                let _ = tx.send(Signal::Kill);
            }
            println!(
                "{:>6.2}s  ** killed {who} in the middle of its round of {} **",
                start.elapsed().as_secs_f64(),
                ran.get(&instant_ms).map_or("?", |(l, _)| l.as_str())
            );
            kill_at = None;
        }
        let event = match events.recv_timeout(Duration::from_millis(20)) {
            Ok(e) => e,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let t = start.elapsed().as_secs_f64();
        match event {
            Event::Started {
                who,
                instant_ms,
                label,
                token,
                rerun,
            } => {
                let entry = ran
                    .entry(instant_ms)
                    .or_insert_with(|| (label.clone(), Vec::new()));
                entry
                    .1
                    .push(format!("{who}{}", if rerun { " (rerun)" } else { "" }));
                println!(
                    "{t:>6.2}s  {label}  {who:<8} runs it{}   (fencing token {token})",
                    if rerun {
                        " AGAIN: rerun of a round cut short"
                    } else {
                        ""
                    }
                );
                // Kill whoever runs the third instant, a quarter of a second into its round.
                if victim.is_none() && ran.len() == 3 {
                    victim = Some((who, instant_ms));
                    kill_at = Some((Instant::now() + Duration::from_millis(250), who, instant_ms));
                }
            }
            Event::Ended {
                who,
                instant_ms,
                completed,
            } => {
                if !completed {
                    let label = ran.get(&instant_ms).map_or("?", |(l, _)| l.as_str());
                    println!("{t:>6.2}s  {label}  {who:<8} stopped before the end");
                }
            }
        }
    }
    for (_, tx) in std::mem::take(&mut stops) {
        let _ = tx.send(Signal::Stop);
    }
    for (who, thread) in threads {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("{who} failed: {e}"),
            Err(_) => eprintln!("{who} panicked"),
        }
    }

    println!("\nwho ran which instant:");
    for (instant_ms, (label, who)) in &ran {
        let killed = victim.is_some_and(|(_, v)| v == *instant_ms);
        println!(
            "  {label}  {}{}",
            who.join(", then "),
            if killed {
                "   <- cut short by the kill, rerun once"
            } else {
                ""
            }
        );
    }
    let once = ran
        .iter()
        .filter(|(t, (_, who))| who.len() == 1 && victim.is_none_or(|(_, v)| v != **t))
        .count();
    let rerun_once = victim.is_some_and(|(_, v)| ran.get(&v).is_some_and(|(_, w)| w.len() == 2));
    println!(
        "\n{once} of {} instants ran exactly once; the killed round ran again exactly once: {rerun_once}",
        ran.len()
    );
    Ok(())
}
