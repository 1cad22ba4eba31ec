//! The command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Side-by-side benchmarks of the lease stores against peer lock crates and the raw protocols,
/// on the live servers. Writes `results.md` and `cycles.svg` into `--out`.
///
/// A server that does not answer is skipped with one `SKIPPED <backend>: <why>` line. Every
/// measurement is bounded in count and time and only talks to the given (loopback) servers.
/// For stable figures on a 2-vCPU machine, keep one vCPU busy and pin the benchmark to the
/// other, e.g. `timeout 600 taskset -c 1 sh -c 'while :; do :; done' &` then
/// `taskset -c 0 lease-bench --out DIR`.
#[derive(Debug, Parser)]
#[command(name = "lease-bench", version, about, long_about)]
pub(crate) struct Args {
    /// Folder for `results.md` and `cycles.svg` (created when missing).
    #[arg(long, value_name = "DIR")]
    pub(crate) out: PathBuf,

    /// Measured seconds per cycle subject, and per write subject of the fences section (split
    /// over the rounds).
    #[arg(long, value_name = "N", default_value_t = 3.0)]
    pub(crate) seconds: f64,

    /// Only these backends (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "BACKENDS")]
    pub(crate) only: Vec<Backend>,

    /// Only these sections (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "SECTIONS")]
    pub(crate) sections: Vec<Section>,

    /// Interleaved rounds of the cycle subjects (and of the fences section's writes): every
    /// subject of a backend runs once per round, in a new random order, so a slow drift of the
    /// machine hits all of them alike.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub(crate) rounds: u32,

    /// Upper bound on the cycles of one subject in one round.
    #[arg(long, value_name = "N", default_value_t = 2_000_000)]
    pub(crate) max_cycles: u64,

    /// Samples per failover scenario and backend.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub(crate) failover_samples: u32,

    /// Lease duration of the failover runs, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    pub(crate) failover_ttl_ms: u64,

    /// Campaign retry of the polling candidates (failover, contention), in milliseconds; the
    /// jitter is a quarter of it.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub(crate) retry_ms: u64,

    /// Held leases for the renew-cost runs (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "N,…",
        default_values_t = [1usize, 100, 10_000]
    )]
    pub(crate) held: Vec<usize>,

    /// Names held by one coordinator in the held-names runs (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "N,…",
        default_values_t = [1_000usize, 10_000]
    )]
    pub(crate) held_names: Vec<usize>,

    /// Renewals in flight at once in the bounded-concurrency renew run.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub(crate) renew_concurrency: usize,

    /// Partitions per batch (K) in the partitions run, each measured against K leases renewed
    /// one by one (comma-separated; at most 10,000, the most one call takes).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "K,…",
        default_values_t = [10usize, 100, 1_000, 10_000]
    )]
    pub(crate) partitions: Vec<usize>,

    /// Most interleaved rounds per K in the partitions run: each round renews the K partitions
    /// with one call and the K leases one by one, the order alternating.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub(crate) partition_rounds: u32,

    /// Time budget per K and backend of the partitions run's rounds, in seconds: no new round
    /// starts once it is spent and 5 rounds ran.
    #[arg(long, value_name = "N", default_value_t = 10.0)]
    pub(crate) partition_seconds: f64,

    /// Candidates on one name in the contention run.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub(crate) candidates: usize,

    /// Measured seconds of the contention run (after a warm-up of one campaign pause).
    #[arg(long, value_name = "N", default_value_t = 10.0)]
    pub(crate) contention_seconds: f64,

    /// Samples per hand-over scenario, mode and backend (the handover and handover-cli
    /// sections).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub(crate) handover_samples: u32,

    /// Idle waiters on one held name in the handover section.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub(crate) idle_waiters: usize,

    /// Measured seconds of the idle waiters (after a warm-up of one lease).
    #[arg(long, value_name = "N", default_value_t = 30.0)]
    pub(crate) idle_seconds: f64,

    /// The `lease` binary of the handover-cli section (default: the one next to lease-bench).
    #[arg(long, value_name = "PATH")]
    pub(crate) lease_bin: Option<PathBuf>,

    /// A second `lease` binary measured side by side in the handover-cli section, e.g. the
    /// previous release's.
    #[arg(long, value_name = "PATH")]
    pub(crate) lease_bin_baseline: Option<PathBuf>,

    /// PostgreSQL URL.
    #[arg(
        long,
        env = "LEASE_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    pub(crate) postgres_url: String,

    /// MySQL / MariaDB URL.
    #[arg(
        long,
        env = "LEASE_BENCH_MYSQL_URL",
        default_value = "mysql://root@127.0.0.1:3306/test"
    )]
    pub(crate) mysql_url: String,

    /// Redis URL (a server without AOF is accepted: the benchmark opts in to volatile terms).
    #[arg(
        long,
        env = "LEASE_BENCH_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub(crate) redis_url: String,

    /// NATS URL (JetStream enabled).
    #[arg(
        long,
        env = "LEASE_BENCH_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub(crate) nats_url: String,

    /// MongoDB URL (the handover and fences sections only).
    #[arg(
        long,
        env = "LEASE_BENCH_MONGODB_URL",
        default_value = "mongodb://127.0.0.1:27017/lease_bench"
    )]
    pub(crate) mongodb_url: String,

    /// etcd URL (the handover and fences sections only).
    #[arg(
        long,
        env = "LEASE_BENCH_ETCD_URL",
        default_value = "etcd://127.0.0.1:2379"
    )]
    pub(crate) etcd_url: String,
}

impl Args {
    /// The backends to run, in report order: the six of [`Backend::ALL`] by default; MongoDB
    /// and etcd only when `--only` names them.
    pub(crate) fn backends(&self) -> Vec<Backend> {
        let all: &[Backend] = if self.only.is_empty() {
            &Backend::ALL
        } else {
            &Backend::HANDOVER
        };
        all.iter()
            .copied()
            .filter(|b| self.only.is_empty() || self.only.contains(b))
            .collect()
    }

    /// The backends of the handover section, in report order: every backend.
    pub(crate) fn handover_backends(&self) -> Vec<Backend> {
        Backend::HANDOVER
            .into_iter()
            .filter(|b| self.only.is_empty() || self.only.contains(b))
            .collect()
    }

    /// `true` when `section` is to run.
    pub(crate) fn runs(&self, section: Section) -> bool {
        self.sections.is_empty() || self.sections.contains(&section)
    }

    /// The campaign retry of the polling candidates.
    pub(crate) fn retry(&self) -> Duration {
        Duration::from_millis(self.retry_ms.max(1))
    }

    /// Checks the values clap cannot.
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.seconds.is_finite() && self.seconds > 0.0 && self.seconds <= 600.0,
            "--seconds must be in (0, 600]"
        );
        anyhow::ensure!(
            self.contention_seconds.is_finite()
                && self.contention_seconds > 0.0
                && self.contention_seconds <= 600.0,
            "--contention-seconds must be in (0, 600]"
        );
        anyhow::ensure!((1..=20).contains(&self.rounds), "--rounds must be 1 to 20");
        anyhow::ensure!(
            (1..=1000).contains(&self.candidates),
            "--candidates must be 1 to 1000"
        );
        anyhow::ensure!(
            self.held.iter().all(|n| (1..=100_000).contains(n)),
            "--held values must be 1 to 100000"
        );
        anyhow::ensure!(
            self.partitions
                .iter()
                .all(|n| (1..=lease::backend::partitions::MAX_PARTITIONS_PER_CALL).contains(n)),
            "--partitions values must be 1 to {} (the most one renew_partitions call takes)",
            lease::backend::partitions::MAX_PARTITIONS_PER_CALL
        );
        anyhow::ensure!(
            (5..=10_000).contains(&self.partition_rounds),
            "--partition-rounds must be 5 to 10000"
        );
        anyhow::ensure!(
            self.partition_seconds.is_finite()
                && self.partition_seconds > 0.0
                && self.partition_seconds <= 600.0,
            "--partition-seconds must be in (0, 600]"
        );
        anyhow::ensure!(
            (1..=256).contains(&self.renew_concurrency),
            "--renew-concurrency must be 1 to 256"
        );
        anyhow::ensure!(
            (1..=200).contains(&self.handover_samples),
            "--handover-samples must be 1 to 200"
        );
        anyhow::ensure!(
            (1..=1000).contains(&self.idle_waiters),
            "--idle-waiters must be 1 to 1000"
        );
        anyhow::ensure!(
            self.idle_seconds.is_finite() && self.idle_seconds > 0.0 && self.idle_seconds <= 600.0,
            "--idle-seconds must be in (0, 600]"
        );
        anyhow::ensure!(
            (1..=20).contains(&self.failover_samples),
            "--failover-samples must be 1 to 20"
        );
        anyhow::ensure!(
            (300..=60_000).contains(&self.failover_ttl_ms),
            "--failover-ttl-ms must be 300 to 60000"
        );
        anyhow::ensure!(
            (10..=60_000).contains(&self.retry_ms),
            "--retry-ms must be 10 to 60000"
        );
        Ok(())
    }
}

/// A lease backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub(crate) enum Backend {
    /// `lease-local`'s in-process `MemoryStore`.
    Local,
    /// SQLite (a file in a temporary folder).
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MariaDB / MySQL.
    Mysql,
    /// Redis.
    Redis,
    /// NATS JetStream KV.
    Nats,
    /// MongoDB (the handover section only).
    Mongodb,
    /// etcd (the handover section only).
    Etcd,
}

impl Backend {
    /// Every backend, in report order.
    pub(crate) const ALL: [Backend; 6] = [
        Backend::Local,
        Backend::Sqlite,
        Backend::Postgres,
        Backend::Mysql,
        Backend::Redis,
        Backend::Nats,
    ];

    /// Every backend the handover section measures, in report order.
    pub(crate) const HANDOVER: [Backend; 8] = [
        Backend::Local,
        Backend::Sqlite,
        Backend::Postgres,
        Backend::Mysql,
        Backend::Redis,
        Backend::Nats,
        Backend::Mongodb,
        Backend::Etcd,
    ];

    /// The name shown in reports.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Backend::Local => "local",
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
            Backend::Mysql => "MariaDB",
            Backend::Redis => "Redis",
            Backend::Nats => "NATS",
            Backend::Mongodb => "MongoDB",
            Backend::Etcd => "etcd",
        }
    }

    /// `true` for backends with a server on the network (round trips can be counted).
    pub(crate) fn has_server(self) -> bool {
        !matches!(self, Backend::Local | Backend::Sqlite)
    }
}

/// A part of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Section {
    /// Acquire+release cycles per second, library against peers and raw protocols.
    Cycles,
    /// Round trips per operation and per cycle, counted on the wire by a proxy.
    RoundTrips,
    /// Take-over time after a holder dies and after a graceful resign.
    Failover,
    /// Renewing 1, 100, 10,000 held leases once.
    RenewCost,
    /// 1,000 and 10,000 names held by one coordinator for three renew periods, renewed per
    /// term and coalesced: terms lost, store renewals per period.
    Held,
    /// Renewing K partitions with one `renew_partitions` call against K leases one by one.
    Partitions,
    /// Many candidates on one name through `run_elected`.
    Contention,
    /// Hand-over with the store's push wake-ups against polling: graceful, crash, idle waiters.
    Handover,
    /// `lease run --wait` hand-over between two processes of the CLI.
    HandoverCli,
    /// A write fenced by `lease-fence` against the same write unfenced, per resource
    /// (PostgreSQL, MariaDB, SQLite, Redis, etcd, NATS KV, MongoDB, files, HTTP).
    Fences,
}
