//! `lease-bench`: the lease stores measured side by side with peer lock crates and with the raw
//! protocols run by hand, on the live servers, in one run.
//!
//! Sections (all by default, or `--sections …`):
//!
//! - **cycles** — acquire+release cycles per second and p50/p99 latency per backend: the
//!   library's store API (claim + release) and coordinator (try_acquire + resign), the same
//!   lease protocol by hand on one plain connection, the server's raw lock (the floor), and
//!   `rslock` / `distributed-lock` where they have a backend;
//! - **round-trips** — per store operation and per cycle of every subject, counted on the wire
//!   by the conformance suite's proxy;
//! - **renew-cost** — renewing 1, 100, 10,000 held leases once;
//! - **partitions** — renewing K partitions with one `renew_partitions` call against K leases
//!   renewed one by one, for K = 10, 100, 1,000, 10,000, in interleaved rounds;
//! - **failover** — take-over after the holder dies and after it resigns, with a candidate
//!   polling through `run_elected`;
//! - **contention** — 64 candidates on one name, store operations counted by a wrapper;
//! - **handover** — push wake-ups against polling, side by side: graceful hand-off, crash
//!   failover against the store's expiry, and idle waiters' store operations (every backend,
//!   MongoDB and etcd included);
//! - **handover-cli** — `lease run --wait` between two processes of the `lease` binary, on
//!   SQLite and PostgreSQL (against a baseline binary when given);
//! - **fences** — a write fenced by `lease-fence` against the same write unfenced, side by
//!   side in interleaved rounds, per resource: PostgreSQL, MariaDB, SQLite, Redis, etcd, NATS
//!   KV, MongoDB (the wire emulator here), files and an in-process HTTP server.
//!
//! Output: `results.md` and `cycles.svg` in `--out`, and the markdown on stdout. A server that
//! does not answer is skipped with one `SKIPPED <backend>: <why>` line.

mod backends;
mod candidate;
mod cleanup;
mod cli;
mod cli_wait;
mod contention;
mod cycles;
mod failover;
mod fences;
mod handover;
mod held;
mod machine;
mod peers;
mod renew_cost;
mod report;
mod round_trips;
mod stats;
mod wrappers;

use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::Parser;

use crate::backends::{Env, TTL, open_store};
use crate::cli::{Args, Section};
use crate::machine::Machine;
use crate::report::Report;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = args.validate() {
        eprintln!("lease-bench: {}", crate::describe(&e));
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lease-bench: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lease-bench: {}", crate::describe(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each cause once: lease errors already print their
/// source, which the chain would repeat.
pub(crate) fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn progress(started: Instant, what: &str) {
    eprintln!(
        "lease-bench: [{:6.1} s] {what}",
        started.elapsed().as_secs_f64()
    );
}

async fn run(args: Args) -> Result<()> {
    let started = Instant::now();
    let env = Env::new(&args)?;
    let mut report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: Machine::read(),
        started_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        seconds: args.seconds,
        rounds: args.rounds,
        partition_rounds: args.partition_rounds,
        partition_seconds: args.partition_seconds,
        ..Report::default()
    };
    for b in args.backends() {
        match open_store(b, &env.url(b), TTL).await {
            Ok(_) => report.backends.push(b),
            Err(e) => {
                eprintln!("SKIPPED {}: {}", b.label(), crate::describe(&e));
                report.skipped.push((b, crate::describe(&e)));
            }
        }
    }
    let backends = report.backends.clone();
    let servers: Vec<_> = backends
        .iter()
        .copied()
        .filter(|b| b.has_server())
        .collect();

    if args.runs(Section::Cycles) {
        for &b in &backends {
            progress(started, &format!("cycles: {}", b.label()));
            report.cycles.extend(cycles::run(&args, &env, b).await);
        }
    }
    if args.runs(Section::RoundTrips) {
        for &b in &servers {
            progress(started, &format!("round trips: {}", b.label()));
            report.op_rts.push(round_trips::ops(&env, b).await);
            report.cycle_rts.extend(round_trips::cycles(&env, b).await);
        }
    }
    if args.runs(Section::RenewCost) {
        for &b in &backends {
            progress(started, &format!("renew cost: {}", b.label()));
            report.renew.extend(renew_cost::run(&args, &env, b).await);
        }
    }
    if args.runs(Section::Held) {
        for &b in &backends {
            progress(started, &format!("held names: {}", b.label()));
            report.held.extend(held::run(&args, &env, b).await);
        }
    }
    if args.runs(Section::Partitions) {
        for &b in &backends {
            progress(started, &format!("partitions: {}", b.label()));
            report
                .partitions
                .extend(renew_cost::partitions(&args, &env, b).await);
        }
    }
    if args.runs(Section::Fences) {
        for resource in fences::Resource::ALL {
            if !fences::selected(&args, resource) {
                continue;
            }
            progress(started, &format!("fences: {}", resource.label()));
            let absent = report
                .skipped
                .iter()
                .find(|(b, _)| *b == resource.backend())
                .map(|(_, why)| why.clone());
            report
                .fences
                .push(fences::run(&args, &env, resource, absent.as_deref()).await);
        }
    }
    // Failover and contention wait out leases and campaign pauses, not the CPU: every backend
    // runs at once.
    let failover = async {
        if args.runs(Section::Failover) {
            progress(started, "failover: every backend at once");
            futures::future::join_all(backends.iter().map(|&b| failover::run(&args, &env, b))).await
        } else {
            Vec::new()
        }
    };
    let contention = async {
        if args.runs(Section::Contention) {
            progress(started, "contention: every backend at once");
            futures::future::join_all(backends.iter().map(|&b| contention::run(&args, &env, b)))
                .await
        } else {
            Vec::new()
        }
    };
    (report.failover, report.contention) = tokio::join!(failover, contention);

    // Hand-over waits on leases too: every backend at once, the CLI's beside them.
    if args.runs(Section::Handover) || args.runs(Section::HandoverCli) {
        let mut live = Vec::new();
        for b in args.handover_backends() {
            if report.backends.contains(&b) {
                live.push(b);
                continue;
            }
            if report.skipped.iter().any(|(s, _)| *s == b) {
                continue;
            }
            match open_store(b, &env.url(b), TTL).await {
                Ok(_) => live.push(b),
                Err(e) => {
                    eprintln!("SKIPPED {}: {}", b.label(), crate::describe(&e));
                    report.skipped.push((b, crate::describe(&e)));
                }
            }
        }
        let library = async {
            if args.runs(Section::Handover) {
                progress(started, "handover: every backend at once");
                futures::future::join_all(live.iter().map(|&b| handover::run(&args, &env, b))).await
            } else {
                Vec::new()
            }
        };
        let through_cli = async {
            if args.runs(Section::HandoverCli) {
                progress(started, "handover-cli: SQLite and PostgreSQL at once");
                let runs = cli_wait::BACKENDS
                    .iter()
                    .filter(|b| live.contains(b))
                    .map(|&b| cli_wait::run(&args, &env, b));
                futures::future::join_all(runs)
                    .await
                    .into_iter()
                    .flatten()
                    .collect()
            } else {
                Vec::new()
            }
        };
        (report.handover, report.handover_cli) = tokio::join!(library, through_cli);
    }

    progress(started, "cleaning up");
    for &b in &servers {
        if let Err(e) = cleanup::run(&env, b).await {
            eprintln!(
                "lease-bench: cleaning up {}: {}",
                b.label(),
                crate::describe(&e)
            );
        }
    }
    env.cleanup();

    report.elapsed = started.elapsed();
    let md = report
        .write(&args.out)
        .with_context(|| format!("writing the report into {}", args.out.display()))?;
    println!("{md}");
    progress(
        started,
        &format!(
            "wrote {} and {}",
            args.out.join("results.md").display(),
            args.out.join("cycles.svg").display()
        ),
    );
    Ok(())
}
