//! An example service on `lease`: one instance at a time writes a report, fenced by its term.
//!
//! - An elector (`Coordinator::run_elected`) on the store `--store` names (`lease::open`; an
//!   SQLite file by default). The leader writes the report row every `--every`, in a
//!   transaction that verifies the lease first (`begin_verified`) and refuses a lower fencing
//!   token than the last writer's (`WHERE fence <= ?`).
//! - HTTP on `--listen`: `GET /ready` answers 200 on the leader and 503 on a follower, from the
//!   coordinator's leadership watch (a JSON body says who leads, which term, since when);
//!   `GET /health` answers 200 while the process runs; `GET /metrics` is the Prometheus text of
//!   lease's metrics and the service's own.
//! - SIGTERM or Ctrl-C: the coordinator closes (the work is told to stop, the lease released
//!   once it has), the server stops, and the process exits 0.
//!
//! `--plot OUT.svg` runs the README's hand-over instead: two instances of this binary, one
//! stopped, then the other killed, with their metrics scraped every 100 ms and drawn.
//!
//! ```sh
//! cargo run -p lease-example-service -- --listen 127.0.0.1:8080
//! curl -i localhost:8080/ready
//! cargo run -p lease-example-service -- --plot docs/handover.svg
//! ```

mod plot;
mod service;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// The command line.
#[derive(Debug, Clone, Parser)]
#[command(about = "An example service: elector, fenced writes, readiness, metrics, shutdown")]
pub(crate) struct Args {
    /// The store: any URL `lease::open` takes whose business table can live beside it (this
    /// example keeps it in SQLite). Default: `lease-example-service.db` in the temp directory.
    #[arg(long)]
    store: Option<String>,
    /// Where HTTP listens (`/ready`, `/health`, `/metrics`); port 0 picks a free one, printed
    /// on stdout as `listening on http://ADDR`.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// This instance's label, as others see it (default: host, pid and a random suffix).
    #[arg(long)]
    instance: Option<String>,
    /// The lease duration, in seconds; every other timing is derived from it
    /// (`Timings::from_lease`).
    #[arg(long, default_value_t = 15.0)]
    lease: f64,
    /// How often the leader writes its report, in milliseconds.
    #[arg(long, default_value_t = 500)]
    every_ms: u64,
    /// After the shutdown, keep answering HTTP this many milliseconds (so a last scrape sees
    /// the lease released).
    #[arg(long, default_value_t = 0)]
    linger_ms: u64,
    /// Instead of serving: run the hand-over of two instances and draw their metrics into
    /// this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
}

impl Args {
    fn lease(&self) -> anyhow::Result<Duration> {
        Duration::try_from_secs_f64(self.lease)
            .map_err(|e| anyhow::anyhow!("--lease {}: {e}; give seconds, e.g. 15", self.lease))
    }

    fn store(&self) -> String {
        self.store.clone().unwrap_or_else(|| {
            let file = std::env::temp_dir().join("lease-example-service.db");
            format!("sqlite://{}", file.display())
        })
    }
}

/// The error and its causes on one line, each cause once: a lease error's message already says
/// what its source says.
fn message(e: &anyhow::Error) -> String {
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

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let result = match &args.plot {
        Some(out) => plot::run(out.clone()).await,
        None => service::serve(args).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lease-example-service: {}", message(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
