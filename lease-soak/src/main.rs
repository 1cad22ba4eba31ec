//! `lease-soak`: a bounded, reproducible soak of every lease store under faults.
//!
//! For each backend, a few contenders campaign for one lease through
//! `Coordinator::run_elected` and run short fenced critical sections under every term they
//! win, recorded by lease-conformance's history checker. Meanwhile a schedule drawn from
//! `--seed` stalls and cuts each contender's connection (a fault proxy per contender; a
//! fault-injecting store wrapper for the embedded backends) and restarts the server once — a
//! server the soak started itself, on its own port, from the machine's installed binaries.
//!
//! At the same time, on the same server, a group phase runs group workers over one group's
//! partitions under a schedule of its own (stalls, cuts and blips of one worker's connection, a
//! graceful leave and re-join, a crash), watched by an assignment audit; once the faults stop,
//! the assignment must settle within the group worker's crash bound.
//!
//! A few times per backend, a holder turns zombie: it pauses past its lease (its store frozen,
//! its work ignoring the term) and then writes with its old token; the fenced resource must
//! refuse every such write. Every write goes through real fences first — a PostgreSQL table, a
//! Redis key and an HTTP service behind lease-fence's fences — and each must refuse what the
//! model refuses.
//!
//! It prints lines per backend and a summary, and exits non-zero on any overlap, term
//! regression, step-down failure, stale write accepted, assignment violation, unsettled
//! assignment, error, or a backend that saw too few terms or no zombie write.
//!
//! ```text
//! cargo run --release -p lease-soak -- [--seconds N] [--backends memory,sqlite,…] [--seed S]
//! ```

mod cli;
mod cluster;
mod contenders;
mod downstream;
mod groups;
mod mixed;
mod report;
mod schedule;
mod servers;
mod soak;
mod stores;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::Args;
use crate::downstream::RealFences;
use crate::report::Outcome;

/// The exit code after an interruption (128 + SIGINT).
const INTERRUPTED: u8 = 130;

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = EnvFilter::try_new(&args.log).unwrap_or_else(|_| EnvFilter::new("off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();

    if args.show_schedule {
        for &kind in &args.backends {
            if args.leases() {
                println!("schedule {kind} (seed {}):", args.seed);
                print!("{}", soak::schedule_for(kind, &args));
                println!("mixed-count claimers {kind} (seed {}):", args.seed);
                for i in 0..mixed::CLAIMERS {
                    let count = mixed::COUNTS[i % mixed::COUNTS.len()];
                    println!(
                        "  mixed-{i}-of-{count}: {}",
                        mixed::chaos(args.seed, kind.name(), i)
                    );
                }
            }
            if args.groups() {
                println!("group schedule {kind} (seed {}):", args.seed);
                print!("{}", groups::schedule_for(kind.name(), &args));
            }
        }
        return ExitCode::SUCCESS;
    }

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("soak: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async {
        tokio::select! {
            code = run_all(&args) => code,
            why = interrupted() => {
                // Dropping `run_all` drops every server guard: processes stopped, directories
                // removed.
                eprintln!("soak: {why}; stopping servers and cleaning up");
                ExitCode::from(INTERRUPTED)
            }
        }
    });
    // Contender tasks still running after an interruption are dropped with the runtime.
    drop(runtime);
    code
}

/// Soaks every backend in turn and prints the lines and the summary.
async fn run_all(args: &Args) -> ExitCode {
    let contenders = if args.leases() {
        format!("{} contenders", args.contenders)
    } else {
        "no contenders".to_owned()
    };
    let workers = if args.groups() {
        format!(
            "{} group workers × {} partitions",
            args.group_workers, args.group_partitions
        )
    } else {
        "no group workers".to_owned()
    };
    let what = if args.cluster.is_empty() {
        format!("{} backends", args.backends.len())
    } else {
        format!(
            "{} 3-node clusters (leader/primary killed twice, leader cut off once{}, whole \
             cluster restarted once)",
            args.cluster.len(),
            if args.freeze_primary {
                ", Redis primary frozen once"
            } else {
                " (not Redis: see --freeze-primary)"
            }
        )
    };
    println!(
        "soak: {what} × {} s, {contenders}, {workers}, lease {} ms, seed {}",
        args.seconds, args.lease_ms, args.seed
    );
    if args.break_renewals {
        println!("soak: --break-renewals: stores lie about failed renewals; this run must FAIL");
    }
    if args.break_fencing {
        println!(
            "soak: --break-fencing: the fenced model and every real fence accept stale tokens, \
             so zombie writes get in after a successor's; this run must FAIL"
        );
    }
    if !args.break_real_fence.is_empty() {
        println!(
            "soak: --break-real-fence: the real fences named accept stale tokens while the model \
             does not; this run must FAIL naming each"
        );
    }
    // The real fences every write of the lease phase also goes through, set up once for every
    // backend.
    let fences = if args.leases() && !args.no_real_fences {
        let broken = |kind| args.break_fencing || args.break_real_fence.contains(&kind);
        match RealFences::setup(broken, args.keep).await {
            Ok(f) => f,
            Err(why) => {
                println!("soak: FAILED: real fences: {why}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        RealFences::none()
    };
    for line in fences.described() {
        println!("soak: real fence {line}");
    }
    for skipped in fences.skipped() {
        println!("{}", skipped.line());
    }
    if args.break_group_renewals {
        println!(
            "soak: --break-group-renewals: group stores lie about failed renewals (and \
             heartbeats and member reads); this run must FAIL"
        );
    }
    let mut outcomes = Vec::new();
    let runs: Vec<Run> = if args.cluster.is_empty() {
        args.backends.iter().copied().map(Run::Backend).collect()
    } else {
        args.cluster.iter().copied().map(Run::Cluster).collect()
    };
    for run in runs {
        let outcome = match run {
            Run::Backend(kind) => soak::run(kind, args, &fences).await,
            Run::Cluster(kind) => soak::run_cluster(kind, args, &fences).await,
        };
        match &outcome {
            Outcome::Ran(report) => {
                if report.leases {
                    println!("{}", report.line());
                    println!("{}", report.details());
                    if let Some(line) = report.real_line() {
                        println!("{line}");
                    }
                    if let Some(m) = &report.mixed {
                        println!("  {}: {}", report.backend, m.line());
                    }
                    for line in report.evidence() {
                        println!("    {line}");
                    }
                }
                if let Some(group) = &report.groups {
                    println!("{}", group.line());
                    println!("{}", group.details());
                    for line in group.evidence() {
                        println!("    {line}");
                    }
                }
            }
            Outcome::Skipped { backend, why, .. } => println!("soak {backend}: SKIPPED: {why}"),
            Outcome::Failed { backend, why } => println!("soak {backend}: FAILED: {why}"),
        }
        outcomes.push(outcome);
    }
    let setup = fences.problems();
    fences.teardown().await;
    let (line, pass) = report::summary(&outcomes, &setup, args.seed, args.seconds);
    println!("{line}");
    if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What one turn of the soak runs.
#[derive(Debug, Clone, Copy)]
enum Run {
    Backend(cli::BackendKind),
    Cluster(cli::ClusterKind),
}

/// Resolves on Ctrl-C or SIGTERM, naming it.
async fn interrupted() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return "interrupted";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupted",
        _ = term.recv() => "terminated",
    }
}
