//! The soak on a 3-node cluster (`--cluster etcd,nats,redis`): the clusters of `ci/cluster/`,
//! started (idempotently) and killed by their scripts. Contenders and group workers reach the
//! whole cluster (every etcd member, every NATS node with the lease bucket replicated 3 times,
//! the Redis primary the Sentinels name, with `replica_acks(1, …)`), each through a
//! fault-injecting store wrapper that plays the usual stalls and cuts; meanwhile the leader (or
//! primary) node is SIGKILLed twice and restarted, and the whole cluster is restarted once.
//! Each kill's recovery is measured from the history: the time until a fenced section is
//! entered under a claim or renewal that was sent after the kill.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{GroupStore, Timings};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cli::ClusterKind;
use crate::groups::Restart;
use crate::report::Kill;

/// Where the cluster scripts are (the workspace's `ci/cluster/`).
const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../ci/cluster");

/// The lease stores' key space on the clusters.
const PREFIX: &str = "lease-soak/";

/// One cluster, driven through its script.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cluster {
    pub(crate) kind: ClusterKind,
}

impl Cluster {
    fn script(self) -> String {
        let file = match self.kind {
            ClusterKind::Etcd => "etcd.sh",
            ClusterKind::Nats => "nats.sh",
            ClusterKind::Redis => "redis-sentinel.sh",
        };
        format!("{SCRIPTS}/{file}")
    }

    /// The word the script's `kill` takes for the node everything goes through.
    fn leader_word(self) -> &'static str {
        match self.kind {
            ClusterKind::Redis => "primary",
            _ => "leader",
        }
    }

    /// Runs the script with `args` (on a blocking thread: start and restart wait for the
    /// cluster) and answers its output's last line.
    pub(crate) async fn run(self, args: &[&str]) -> Result<String, String> {
        let script = self.script();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let shown = format!("bash {script} {}", args.join(" "));
        let out = tokio::task::spawn_blocking(move || {
            Command::new("bash").arg(&script).args(&args).output()
        })
        .await
        .map_err(|e| format!("{shown}: {e}"))?
        .map_err(|e| format!("{shown}: {e}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(3).collect();
            return Err(format!(
                "{shown} failed ({}): {}",
                out.status,
                tail.join(" | ")
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .to_owned())
    }

    /// Starts the cluster (a running one is left alone) and answers its client URL.
    pub(crate) async fn start(self) -> Result<String, String> {
        self.run(&["start"]).await?;
        self.run(&["url"]).await
    }

    /// Opens a store on the whole cluster at `url`.
    pub(crate) async fn connect(
        self,
        url: &str,
        lease: Duration,
        attempt: Duration,
    ) -> lease_core::Result<Arc<dyn GroupStore>> {
        match self.kind {
            ClusterKind::Etcd => {
                let config = lease_etcd::EtcdConfig::new()
                    .prefix(PREFIX)
                    .op_timeout(attempt);
                Ok(Arc::new(lease_etcd::EtcdStore::connect(url, config).await?))
            }
            ClusterKind::Nats => {
                let config = lease_nats::NatsConfig::new(lease)
                    .replicas(3)
                    .op_timeout(attempt);
                // `NatsStore::connect` hands the URL to async-nats whole, which takes one server
                // per string (a comma list fails to parse): connect to the first node, and the
                // client learns the others from the cluster (NATS's `connect_urls`) and
                // reconnects to them when that node dies.
                let first = url.split(',').next().unwrap_or(url);
                Ok(Arc::new(
                    lease_nats::NatsStore::connect(first, config).await?,
                ))
            }
            ClusterKind::Redis => {
                // The remedy for asynchronous replication (lease-redis's README, "Failover"):
                // every answer is on a replica, so a failover repeats no term.
                let config = lease_redis::RedisConfig::new()
                    .key_prefix("lease-soak:")
                    .operation_timeout(Some(attempt))
                    .replica_acks(1, attempt / 2);
                let conn = lease_redis::SentinelConnection::from_url(url, &config)?;
                let store = lease_redis::RedisStore::with_client(conn, config)?;
                lease_core::LeaseStore::available(&store).await?;
                Ok(Arc::new(store))
            }
        }
    }

    /// Connects until the cluster accepts a store, for up to `within`.
    pub(crate) async fn probe(
        self,
        url: &str,
        lease: Duration,
        attempt: Duration,
        within: Duration,
    ) -> Result<(), String> {
        let until = Instant::now() + within;
        loop {
            match self.connect(url, lease, attempt).await {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > until => {
                    return Err(format!(
                        "{} does not accept a lease store after {within:?}: {e}",
                        self.kind
                    ));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Stops every node (gracefully), waits `pause`, starts them again.
    pub(crate) async fn restart_all(self, pause: Duration) -> Result<(), String> {
        self.run(&["stop"]).await?;
        tokio::time::sleep(pause).await;
        self.run(&["start"]).await.map(|_| ())
    }

    /// Plays the node kills: one a third of a lease after `start` (a holder works by then; the
    /// cluster must serve again before the group phase's graceful leave, which comes at 15 % of
    /// the run at the earliest: see [`MIN_SECONDS`]), one a lease after the whole-cluster
    /// restart is over. Each SIGKILLs the leader or primary, keeps it down for `down`, and restarts it.
    /// Answers each kill (its recovery is filled in later, from the history) and the errors.
    ///
    /// The second kill is left out (and said so in `notes`) when the restart is over too late
    /// for the cluster to serve again, [`RECOVERY_BUDGET`] after the kill, before `faults_end`
    /// (after which the group phase checks that the assignment settles, and its workers leave).
    pub(crate) async fn kill_nodes(
        self,
        start: Instant,
        (lease, down): (Duration, Duration),
        faults_end: Instant,
        mut restart: watch::Receiver<Restart>,
    ) -> (Vec<Kill>, Vec<String>, Vec<String>) {
        let mut kills = Vec::new();
        let mut errors = Vec::new();
        let mut notes = Vec::new();
        for turn in 0..2 {
            if turn == 0 {
                tokio::time::sleep_until(start + lease / 3).await;
            } else {
                let _ = restart.wait_for(|r| *r == Restart::Over).await;
                tokio::time::sleep(lease).await;
                let late = Instant::now() + RECOVERY_BUDGET > faults_end;
                if late {
                    notes.push(format!(
                        "second kill left out: the whole-cluster restart was over {:.1} s in, \
                         too late for a kill and {RECOVERY_BUDGET:?} of recovery before the \
                         faults end",
                        start.elapsed().as_secs_f64()
                    ));
                    break;
                }
            }
            let node = match self.run(&["kill", self.leader_word()]).await {
                Ok(node) => node,
                Err(e) => {
                    errors.push(format!("killing the {}: {e}", self.leader_word()));
                    continue;
                }
            };
            // The script answers once the process is gone (it finds the leader first, which
            // takes a few requests): a grant asked after this moment was asked without it.
            let killed_at = Instant::now();
            tokio::time::sleep(down).await;
            if let Err(e) = self.run(&["restart", &node]).await {
                errors.push(format!("restarting {node}: {e}"));
            }
            kills.push(Kill {
                node,
                at: killed_at,
                offset: killed_at.duration_since(start),
                back: None,
            });
        }
        (kills, errors, notes)
    }
}

/// How long a cluster is given to serve a holder again after a node kill, when placing the
/// kills (the slowest seen here: NATS 2.15.1, 8.0 s, whose Raft election timeout is 4–9 s; a
/// kill still recovers in time two leases later, when the run ends).
pub(crate) const RECOVERY_BUDGET: Duration = Duration::from_secs(8);

/// The shortest cluster soak: the cluster must serve again after the first kill before the
/// group phase's graceful leave at 15 % of the run (9 s into 60 s; a NATS 2.15.1 cluster took
/// up to 8.0 s from a kill about 2 s in to serve a holder again here, and its leave still
/// passed), and the second kill (after the restart at 40–60 %) should be over before the
/// faults end, two leases before the end.
pub(crate) const MIN_SECONDS: u64 = 60;

/// Fills in each kill's recovery: the first fenced section entered after the kill under a
/// grant (claim or renewal) sent after it. `sections` holds each section's entry time and its
/// term's local deadline at entry; a deadline lies `timings.deadline()` after the moment the
/// grant it rests on was requested.
pub(crate) fn recoveries(kills: &mut [Kill], sections: &[(Instant, Instant)], timings: &Timings) {
    for kill in kills.iter_mut() {
        kill.back = sections
            .iter()
            .filter(|(entered, deadline)| {
                *entered >= kill.at
                    && deadline
                        .checked_sub(timings.deadline())
                        .is_some_and(|asked| asked >= kill.at)
            })
            .map(|(entered, _)| entered.duration_since(kill.at))
            .min();
    }
}
