//! Command-line options.

use std::fmt;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// A bounded soak of every lease store: contenders run fenced critical sections through
/// `run_elected` while a seeded schedule stalls and cuts their connections and restarts the
/// server once; the history checker must see no overlap and no term going back. At the same
/// time, group workers share a group's partitions under faults of their own, a leave, a
/// re-join and a crash; the assignment audit must see no partition held twice, and the
/// assignment must settle once the faults stop.
///
/// Servers (PostgreSQL, MariaDB, Redis, NATS) are started by the soak itself from the installed
/// binaries, on free loopback ports in a temporary directory, and removed at the end. A backend
/// whose binaries are missing is skipped with the reason, unless `LEASE_TEST_REQUIRE` names it.
#[derive(Debug, Clone, Parser)]
#[command(name = "lease-soak", version)]
pub(crate) struct Args {
    /// How long each backend is soaked, in seconds.
    #[arg(long, default_value_t = 45, value_parser = clap::value_parser!(u64).range(10..=3600))]
    pub(crate) seconds: u64,

    /// The backends to soak, comma-separated, in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "memory,sqlite,postgres,mariadb,redis,nats"
    )]
    pub(crate) backends: Vec<BackendKind>,

    /// Soak these clusters instead of the backends, comma-separated: `etcd`, `nats`, `redis`,
    /// `postgres`, `mariadb` (the clusters of `ci/cluster/`, started by their scripts when not
    /// running). The leader (or primary) is SIGKILLed twice — restarted on etcd, NATS and Redis;
    /// on PostgreSQL and MariaDB the replica is promoted and the old primary reattached as its
    /// replica — cut off once (etcd, NATS: through a fault proxy per node; Redis: frozen with
    /// SIGSTOP; the SQL clusters: none), the whole cluster restarted once, on top of the usual
    /// stalls and cuts; the report adds each kill's and the cut's recovery time.
    #[arg(long, value_delimiter = ',')]
    pub(crate) cluster: Vec<ClusterKind>,

    /// With `--cluster redis`: also play the Redis cluster's cut, the primary frozen (SIGSTOP)
    /// for 3 s and then continued. Off by default, as it FAILS today: a replica can attach to
    /// the thawed old primary and acknowledge its grants before the Sentinels move it to the new
    /// primary, which never had them (lease-soak/README.md, "The Redis freeze").
    #[arg(long)]
    pub(crate) freeze_primary: bool,

    /// The seed of the fault schedule and of the contenders' choices.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,

    /// How many contenders campaign for the lease.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(2..=16))]
    pub(crate) contenders: u64,

    /// The lease duration in milliseconds; every other timing is derived from it in the
    /// protocol's proportions (deadline 2/3, renew and retry 2/15, grace 4/15).
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(300..=60_000))]
    pub(crate) lease_ms: u64,

    /// The phases to run on each backend, comma-separated: `leases` (contenders campaigning for
    /// one lease) and `groups` (group workers sharing a group's partitions). Both run at the
    /// same time, on the same server and through its restart.
    #[arg(long, value_delimiter = ',', default_value = "leases,groups")]
    pub(crate) phases: Vec<Phase>,

    /// How many group workers share the group (group phase).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..=16))]
    pub(crate) group_workers: u64,

    /// How many partitions the group has (group phase).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) group_partitions: u32,

    /// Print the fault schedule of each backend and exit without running anything.
    #[arg(long)]
    pub(crate) show_schedule: bool,

    /// Check the checker: each contender's store answers a renewal that fails or hangs as if
    /// it had succeeded, as a buggy backend would. Holders then keep running sections after
    /// the store has let their lease expire, and the soak must FAIL with overlaps.
    #[arg(long)]
    pub(crate) break_renewals: bool,

    /// Check the fence: the fenced resource the contenders write to accepts stale tokens, as a
    /// resource that does not compare fencing tokens would. The zombies (holders paused past
    /// their lease that then write with their old token) then get their writes in after a
    /// successor's, and the soak must FAIL with stale writes accepted. The real fences (see
    /// `--no-real-fences`) are broken too, through their test break switches, and the soak must
    /// FAIL naming each.
    #[arg(long)]
    pub(crate) break_fencing: bool,

    /// Leave out the real fences: by default every write of the lease phase (sections' and
    /// zombies') also goes through lease-fence's fences on a PostgreSQL table
    /// (`LEASE_TEST_POSTGRES_URL`), a Redis key (`LEASE_TEST_REDIS_URL`) and an in-process HTTP
    /// service, each of which must refuse every zombie write; `--break-fencing` breaks them too.
    #[arg(long)]
    pub(crate) no_real_fences: bool,

    /// Check each real fence's check alone: these real fences (comma-separated: `postgres`,
    /// `redis`, `http`) are built with their checks left out while the model stays correct. The
    /// zombies' writes then get through them, and the soak must FAIL naming each (stale writes
    /// accepted, no zombie write refused).
    #[arg(long, value_delimiter = ',')]
    pub(crate) break_real_fence: Vec<crate::downstream::Kind>,

    /// Check the group checker: each group worker's store answers a batch renewal that fails or
    /// hangs as if every partition had been renewed (and a heartbeat or member read as if it had
    /// worked), as a buggy backend would. A worker cut off from the store then keeps its
    /// partitions after the others have taken them over, and the soak must FAIL with assignment
    /// violations.
    #[arg(long)]
    pub(crate) break_group_renewals: bool,

    /// Keep the temporary directories (server data and logs) for inspection.
    #[arg(long)]
    pub(crate) keep: bool,

    /// Log filter for the library's own logs on stderr (tracing `EnvFilter` syntax), e.g.
    /// `lease_core=info`.
    #[arg(long, env = "LEASE_SOAK_LOG", default_value = "off")]
    pub(crate) log: String,
}

impl Args {
    /// How long each backend is soaked.
    pub(crate) fn duration(&self) -> Duration {
        Duration::from_secs(self.seconds)
    }

    /// The lease duration.
    pub(crate) fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// The number of contenders.
    pub(crate) fn contenders(&self) -> usize {
        usize::try_from(self.contenders).unwrap_or(5)
    }

    /// Whether the lease phase runs.
    pub(crate) fn leases(&self) -> bool {
        self.phases.contains(&Phase::Leases)
    }

    /// Whether the group phase runs.
    pub(crate) fn groups(&self) -> bool {
        self.phases.contains(&Phase::Groups)
    }

    /// The number of group workers.
    pub(crate) fn group_workers(&self) -> usize {
        usize::try_from(self.group_workers).unwrap_or(4)
    }
}

/// What the soak runs on each backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Phase {
    /// Contenders campaign for one lease and run fenced critical sections.
    Leases,
    /// Group workers share a group's partitions, watched by an assignment audit.
    Groups,
}

/// A backend the soak knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BackendKind {
    /// lease-local's in-memory store (faults injected in the store; no server to restart).
    Memory,
    /// A SQLite file (faults injected in the store; the restart closes and reopens every
    /// connection).
    Sqlite,
    /// A PostgreSQL server started by the soak.
    Postgres,
    /// A MariaDB server started by the soak.
    #[value(alias = "mysql")]
    Mariadb,
    /// A Redis server started by the soak, with AOF and `appendfsync always`.
    Redis,
    /// A NATS server with JetStream (file storage) started by the soak.
    Nats,
}

impl BackendKind {
    /// The name used in output.
    pub(crate) fn name(self) -> &'static str {
        match self {
            BackendKind::Memory => "memory",
            BackendKind::Sqlite => "sqlite",
            BackendKind::Postgres => "postgres",
            BackendKind::Mariadb => "mariadb",
            BackendKind::Redis => "redis",
            BackendKind::Nats => "nats",
        }
    }

    /// Whether `LEASE_TEST_REQUIRE` (the test suites' variable) names this backend, so that a
    /// skip becomes a failure. `mysql` there means MariaDB.
    pub(crate) fn required(self) -> bool {
        let Ok(list) = std::env::var("LEASE_TEST_REQUIRE") else {
            return false;
        };
        list.split(',').map(str::trim).any(|n| {
            n.eq_ignore_ascii_case(self.name())
                || (self == BackendKind::Mariadb && n.eq_ignore_ascii_case("mysql"))
        })
    }
}

/// A 3-node cluster the soak knows (`--cluster`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ClusterKind {
    /// Three etcd members (`ci/cluster/etcd.sh`).
    Etcd,
    /// Three NATS JetStream nodes, the lease bucket replicated 3 times (`ci/cluster/nats.sh`).
    Nats,
    /// A Redis primary, 2 replicas and 3 Sentinels (`ci/cluster/redis-sentinel.sh`).
    Redis,
    /// A PostgreSQL primary and a synchronous streaming replica behind an address that moves
    /// to the primary (`ci/cluster/postgres.sh`).
    Postgres,
    /// A MariaDB primary and a semi-synchronous (AFTER_SYNC) replica behind an address that
    /// moves to the primary (`ci/cluster/mariadb.sh`).
    #[value(alias = "mysql")]
    Mariadb,
}

impl ClusterKind {
    /// The name used in output, and in `LEASE_TEST_REQUIRE`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ClusterKind::Etcd => "etcd-cluster",
            ClusterKind::Nats => "nats-cluster",
            ClusterKind::Redis => "redis-sentinel",
            ClusterKind::Postgres => "postgres-cluster",
            ClusterKind::Mariadb => "mariadb-cluster",
        }
    }

    /// Whether the cluster is a SQL primary + replica: no leader election, the scripts
    /// promote the replica and move the clients' address to it.
    pub(crate) fn promotes(self) -> bool {
        matches!(self, ClusterKind::Postgres | ClusterKind::Mariadb)
    }
}

impl fmt::Display for ClusterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_backends_and_aliases() {
        let args = Args::try_parse_from([
            "lease-soak",
            "--backends",
            "mysql,redis",
            "--seconds",
            "20",
            "--seed",
            "7",
        ])
        .unwrap();
        assert_eq!(
            args.backends,
            vec![BackendKind::Mariadb, BackendKind::Redis]
        );
        assert_eq!(args.duration(), Duration::from_secs(20));
        assert_eq!(args.seed, 7);
        assert!(Args::try_parse_from(["lease-soak", "--seconds", "1"]).is_err());
        assert!(Args::try_parse_from(["lease-soak", "--backends", "mongo"]).is_err());
    }

    #[test]
    fn defaults_cover_every_backend() {
        let args = Args::try_parse_from(["lease-soak"]).unwrap();
        assert_eq!(args.backends.len(), 6);
        assert_eq!(args.contenders(), 5);
        assert_eq!(args.lease(), Duration::from_millis(1500));
        assert!(args.leases() && args.groups());
        assert!(!args.break_renewals && !args.break_fencing && !args.no_real_fences);
        assert_eq!(args.group_workers(), 4);
        assert_eq!(args.group_partitions, 16);
    }

    #[test]
    fn phases_can_be_chosen() {
        let args = Args::try_parse_from(["lease-soak", "--phases", "groups"]).unwrap();
        assert!(!args.leases() && args.groups());
        assert!(Args::try_parse_from(["lease-soak", "--phases", "slots"]).is_err());
        assert!(Args::try_parse_from(["lease-soak", "--group-workers", "1"]).is_err());
    }

    #[test]
    fn clusters_parse() {
        let args = Args::try_parse_from(["lease-soak", "--cluster", "etcd,nats,redis"]).unwrap();
        assert_eq!(
            args.cluster,
            vec![ClusterKind::Etcd, ClusterKind::Nats, ClusterKind::Redis]
        );
        assert!(
            Args::try_parse_from(["lease-soak"])
                .unwrap()
                .cluster
                .is_empty()
        );
        assert!(Args::try_parse_from(["lease-soak", "--cluster", "mongo"]).is_err());
        let args = Args::try_parse_from(["lease-soak", "--cluster", "postgres,mysql"]).unwrap();
        assert_eq!(
            args.cluster,
            vec![ClusterKind::Postgres, ClusterKind::Mariadb]
        );
    }

    #[test]
    fn break_switches_parse() {
        let args = Args::try_parse_from(["lease-soak", "--break-fencing"]).unwrap();
        assert!(args.break_fencing && !args.break_renewals && !args.break_group_renewals);
        assert!(args.break_real_fence.is_empty());
        let args =
            Args::try_parse_from(["lease-soak", "--break-real-fence", "postgres,http"]).unwrap();
        assert_eq!(
            args.break_real_fence,
            [
                crate::downstream::Kind::Postgres,
                crate::downstream::Kind::Http
            ]
        );
        assert!(!args.break_fencing);
        assert!(Args::try_parse_from(["lease-soak", "--break-real-fence", "mongo"]).is_err());
    }
}
