//! `lease run --wait` hand-over through the CLI: two OS processes of the `lease` command.
//!
//! Per sample, a holder `lease run NAME -- sh -c 'touch started; sleep S; date > end'` starts;
//! once its command runs, a contender `lease run --wait NAME -- sh -c 'date > start'` starts
//! and queues. S is 1 s plus a random part of one campaign period, so the holder's end falls at
//! a random phase of a polling contender. The figure is the contender command's start minus the
//! holder command's end (both stamped by `date +%s%N` on this machine's clock): the holder's
//! release, the contender's wake-up and claim, and its command's spawn.
//!
//! Two binaries side by side, alternating per sample: the one under test (`--lease-bin`) and,
//! when given, a baseline (`--lease-bin-baseline`, e.g. the last release's, which polls).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tokio::process::Command;

use crate::backends::Env;
use crate::cli::{Args, Backend};

/// The backends the CLI section runs on.
pub(crate) const BACKENDS: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

/// One binary's samples on one backend.
#[derive(Debug, Clone)]
pub(crate) struct CliRow {
    /// The backend.
    pub(crate) backend: Backend,
    /// Which binary: "push" (under test) or "baseline".
    pub(crate) binary: &'static str,
    /// Holder's command ends → contender's command starts.
    pub(crate) handover: Vec<Duration>,
    /// Why it stopped early.
    pub(crate) error: Option<String>,
}

/// The `lease` binary next to this one, unless `--lease-bin` names another.
pub(crate) fn lease_bin(args: &Args) -> Result<PathBuf> {
    if let Some(p) = &args.lease_bin {
        return Ok(p.clone());
    }
    let me = std::env::current_exe().context("finding lease-bench's own path")?;
    let bin = me.with_file_name("lease");
    ensure!(
        bin.exists(),
        "no `lease` binary at {} (build it with `cargo build --release -p lease-cli`, or give \
         --lease-bin PATH)",
        bin.display()
    );
    Ok(bin)
}

/// Runs the CLI section on `backend`: the binary under test, and the baseline when given.
pub(crate) async fn run(args: &Args, env: &Env, backend: Backend) -> Vec<CliRow> {
    let mut bins: Vec<(&'static str, Result<PathBuf>)> = vec![("push", lease_bin(args))];
    if let Some(b) = &args.lease_bin_baseline {
        bins.push(("baseline", Ok(b.clone())));
    }
    let mut rows: Vec<CliRow> = bins
        .iter()
        .map(|(binary, _)| CliRow {
            backend,
            binary,
            handover: Vec::new(),
            error: None,
        })
        .collect();
    let url = match backend {
        Backend::Sqlite => {
            let file = env
                .sqlite_file
                .with_file_name(format!("cli-{}.db", std::process::id()));
            format!("sqlite://{}", file.display())
        }
        _ => env.url(backend),
    };
    let dir = env
        .sqlite_file
        .with_file_name(format!("cli-{}", backend.label()));
    for i in 0..args.handover_samples {
        for (row, (_, bin)) in rows.iter_mut().zip(&bins) {
            if row.error.is_some() {
                continue;
            }
            let sample = match bin {
                Ok(bin) => {
                    let name = env.name(&format!("cli-{}-{}-{i}", backend.label(), row.binary));
                    sample(
                        bin,
                        &url,
                        &name,
                        &dir.join(format!("{}-{i}", row.binary)),
                        args,
                    )
                    .await
                }
                Err(e) => Err(anyhow::anyhow!("{e:#}")),
            };
            match sample {
                Ok(d) => row.handover.push(d),
                Err(e) => {
                    eprintln!(
                        "lease-bench: {} CLI hand-over ({}): {}",
                        backend.label(),
                        row.binary,
                        crate::describe(&e)
                    );
                    row.error = Some(crate::describe(&e));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    rows
}

/// One hand-over between two `lease run` processes.
async fn sample(bin: &Path, url: &str, name: &str, dir: &Path, args: &Args) -> Result<Duration> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (started, end, start) = (dir.join("started"), dir.join("end"), dir.join("start"));
    let period = args.retry().as_secs_f64() * 1.25;
    let hold = 1.0 + rand::random_range(0.0..period);
    let ttl = format!("{}ms", args.failover_ttl_ms);
    let holder_cmd = format!(
        "touch '{}'; sleep {hold:.3}; date +%s%N > '{}'",
        started.display(),
        end.display()
    );
    let mut holder = lease(
        bin,
        url,
        &ttl,
        name,
        false,
        &holder_cmd,
        &dir.join("holder.err"),
    )?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !started.exists() {
        if Instant::now() > deadline {
            let _ = holder.kill().await;
            bail!("the holder's command did not start within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let contender_cmd = format!("date +%s%N > '{}'", start.display());
    let mut contender = lease(
        bin,
        url,
        &ttl,
        name,
        true,
        &contender_cmd,
        &dir.join("contender.err"),
    )?;
    let bound = Duration::from_secs_f64(hold + period) + Duration::from_secs(15);
    let h = tokio::time::timeout(bound, holder.wait()).await;
    let c = tokio::time::timeout(bound, contender.wait()).await;
    let (h, c) = match (h, c) {
        (Ok(h), Ok(c)) => (h?, c?),
        _ => {
            let _ = holder.kill().await;
            let _ = contender.kill().await;
            bail!("the holder or the contender did not finish within {bound:?}");
        }
    };
    ensure!(
        h.success(),
        "the holder exited with {h}: {}",
        tail(&dir.join("holder.err"))
    );
    ensure!(
        c.success(),
        "the contender exited with {c}: {}",
        tail(&dir.join("contender.err"))
    );
    let end = stamp(&end)?;
    let start = stamp(&start)?;
    ensure!(
        start >= end,
        "the contender's command started {} ms before the holder's ended",
        (end - start) / 1_000_000
    );
    Ok(Duration::from_nanos(start - end))
}

/// The last line `lease` wrote to `file`.
fn tail(file: &Path) -> String {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|t| t.lines().last().map(str::to_owned))
        .unwrap_or_else(|| "(nothing on stderr)".to_owned())
}

/// `lease run [--wait] --store URL --ttl TTL NAME -- sh -c CMD`, its stderr into `err`.
fn lease(
    bin: &Path,
    url: &str,
    ttl: &str,
    name: &str,
    wait: bool,
    cmd: &str,
    err: &Path,
) -> Result<tokio::process::Child> {
    let err = std::fs::File::create(err).with_context(|| format!("creating {}", err.display()))?;
    let mut c = Command::new(bin);
    c.arg("run").args(["--store", url, "--ttl", ttl]);
    if wait {
        c.arg("--wait");
    }
    c.args([name, "--", "sh", "-c", cmd])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(err))
        .kill_on_drop(true);
    c.spawn()
        .with_context(|| format!("starting {}", bin.display()))
}

/// The nanoseconds `date +%s%N` wrote into `file`.
fn stamp(file: &Path) -> Result<u64> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    text.trim()
        .parse()
        .with_context(|| format!("{} holds {text:?}, not a time", file.display()))
}
