//! The soak on a 3-node cluster (`--cluster etcd,nats,redis`): the clusters of `ci/cluster/`,
//! started (idempotently), killed and frozen by their scripts. Contenders and group workers
//! reach the whole cluster (every etcd member, every NATS node with the lease bucket replicated
//! 3 times, the Redis primary the Sentinels name, with `replica_acks(1, …)`), each through a
//! fault-injecting store wrapper that plays the usual stalls and cuts. On etcd and NATS every
//! client reaches each node through a [`FaultProxy`] of that node (one per node, shared by the
//! clients; the store URL lists the proxies, and NATS clients ignore the servers the cluster
//! advertises, so they never go around the proxies). Meanwhile:
//!
//! - the leader (or primary) node is SIGKILLed and restarted twice;
//! - once, between the first kill's recovery and the whole-cluster restart, the leader is cut
//!   off for [`CUT_LENGTH`] and then reconnected: on etcd and NATS its proxy drops every
//!   connection and closes each new one ([`FaultMode::Cut`]) while the node goes on running
//!   and talking to the others, so the clients must go on through the other nodes; on Redis
//!   the Sentinel client learns the primary's real address from the Sentinels, so no
//!   client-side proxy sits in front of it, and the primary is frozen instead (the script's
//!   `freeze primary`, SIGSTOP: cut off from clients, replicas and Sentinels alike, as in a
//!   network partition; the Sentinels fail over after 1 s) and continued (`thaw`) after
//!   [`FREEZE_LENGTH`], when it still answers as a primary until the Sentinels demote it. Only
//!   with `--freeze-primary`: it fails today. A replica the Sentinels were moving to the
//!   frozen primary (a killed node, restarted) attaches to it once it is thawed, acknowledges
//!   its grants for a moment, and is then moved to the new primary, which never had them: the
//!   same partition epoch granted twice, which `replica_acks(1, …)` does not prevent;
//! - the whole cluster is restarted once.
//!
//! On the SQL clusters (`--cluster postgres,mariadb`: a primary and one replica, synchronous
//! on PostgreSQL and semi-synchronous AFTER_SYNC on MariaDB, the modes the stores' start-up
//! check accepts) there is no election: each kill SIGKILLs the primary, the script promotes the
//! replica at once and moves the clients' address (its proxy) to it, and the old primary is
//! reattached as the new one's replica after the node's down time (until then the synchronous
//! primary takes no write). No cut: the address the clients use is the one that moves.
//!
//! Each kill's and the cut's recovery is measured from the history: the time until a fenced
//! section is entered under a claim or renewal that was sent after the kill or the cut began.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use lease::Timings;
use lease_conformance::FaultProxy;
use lease_conformance::GroupStore;
use lease_conformance::proxy::FaultMode;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cli::ClusterKind;
use crate::groups::Restart;
use crate::report::{Outage, OutageKind};

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
            ClusterKind::Postgres => "postgres.sh",
            ClusterKind::Mariadb => "mariadb.sh",
        };
        format!("{SCRIPTS}/{file}")
    }

    /// The word the script's `kill` takes for the node everything goes through.
    fn leader_word(self) -> &'static str {
        match self.kind {
            ClusterKind::Redis | ClusterKind::Postgres | ClusterKind::Mariadb => "primary",
            _ => "leader",
        }
    }

    /// Runs the script with `args` (on a blocking thread: start and restart wait for the
    /// cluster) and answers its output's last line.
    pub(crate) async fn run(self, args: &[&str]) -> Result<String, String> {
        let out = self.run_all(args).await?;
        Ok(out.lines().last().unwrap_or_default().trim().to_owned())
    }

    /// Runs the script with `args` and answers its whole output.
    async fn run_all(self, args: &[&str]) -> Result<String, String> {
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
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Starts the cluster (a running one is left alone) and answers its client URL and the
    /// proxies that URL goes through: on etcd and NATS one [`FaultProxy`] per node (the URL
    /// lists the proxies), on Redis none (the URL names the Sentinels).
    pub(crate) async fn start(self) -> Result<(String, Arc<Proxies>), String> {
        // The SQL clusters in their safe modes: what the stores' start-up check accepts.
        match self.kind {
            ClusterKind::Postgres => self.run(&["start", "sync"]).await?,
            ClusterKind::Mariadb => self.run(&["start", "semisync"]).await?,
            _ => self.run(&["start"]).await?,
        };
        let url = self.run(&["url"]).await?;
        if self.kind == ClusterKind::Redis || self.kind.promotes() {
            return Ok((url, Arc::new(Proxies(Vec::new()))));
        }
        // `status` names each node and its client address: `e1 up 127.0.0.1:23791`.
        let status = self.run_all(&["status"]).await?;
        let mut proxies = Vec::new();
        for line in status.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if let [node, "up", addr] = words[..] {
                let proxy = FaultProxy::start(addr)
                    .await
                    .map_err(|e| format!("a fault proxy to {node} ({addr}): {e}"))?;
                proxies.push((node.to_owned(), proxy));
            }
        }
        if proxies.len() != 3 {
            return Err(format!(
                "{} status names {} serving nodes, not 3: {status}",
                self.kind,
                proxies.len()
            ));
        }
        let scheme = url.split("://").next().unwrap_or_default();
        let hosts: Vec<String> = proxies
            .iter()
            .map(|(_, p)| p.local_addr().to_string())
            .collect();
        Ok((
            format!("{scheme}://{}", hosts.join(",")),
            Arc::new(Proxies(proxies)),
        ))
    }

    /// Opens a store on the whole cluster at `url`.
    pub(crate) async fn connect(
        self,
        url: &str,
        lease: Duration,
        attempt: Duration,
    ) -> lease::Result<Arc<dyn GroupStore>> {
        match self.kind {
            ClusterKind::Etcd => {
                let config = lease::etcd::EtcdConfig::new()
                    .prefix(PREFIX)
                    .op_timeout(attempt);
                Ok(Arc::new(
                    lease::etcd::EtcdStore::connect(url, config).await?,
                ))
            }
            ClusterKind::Nats => {
                let config = lease::nats::NatsConfig::new(lease)
                    .replicas(3)
                    .op_timeout(attempt);
                let client = nats_client(url, attempt).await?;
                Ok(Arc::new(
                    lease::nats::NatsStore::with_client(client, config).await?,
                ))
            }
            ClusterKind::Redis => {
                // The remedy for asynchronous replication (lease-redis's README, "Failover"):
                // every answer is on a replica, so a failover repeats no term.
                let config = lease::redis::RedisConfig::new()
                    .key_prefix("lease-soak:")
                    .operation_timeout(Some(attempt))
                    .replica_acks(1, attempt / 2);
                let conn = lease::redis::SentinelConnection::from_url(url, &config)?;
                let store = lease::redis::RedisStore::with_client(conn, config)?;
                lease::LeaseStore::available(&store).await?;
                Ok(Arc::new(store))
            }
            // Default options: the start-up check refuses a primary whose replica can miss an
            // acknowledged commit.
            ClusterKind::Postgres => Ok(Arc::new(
                lease::sql::PostgresStore::connect(url, lease::sql::SqlConfig::default()).await?,
            )),
            ClusterKind::Mariadb => Ok(Arc::new(
                lease::sql::MySqlStore::connect(url, lease::sql::SqlConfig::default()).await?,
            )),
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

    /// Plays the node kills and the cut: a kill a third of a lease after `start` (a holder
    /// works by then; the cluster must serve again before the group phase's graceful leave,
    /// which comes at 15 % of the run at the earliest: see [`MIN_SECONDS`]), the cut (see
    /// [`cut_node`](Self::cut_node)) as late as it fits before the whole-cluster restart at
    /// `restart_at` with the recovery budget to spare, and a kill a lease after that restart is
    /// over. Each kill SIGKILLs the leader or primary, keeps it down for `down`, and restarts
    /// it. Answers each outage (its recovery is filled in later, from the history), the errors
    /// and the notes.
    ///
    /// The second kill is left out (and said so in `notes`) when the restart is over too late
    /// for the cluster to serve again, the recovery budget ([`Cluster::recovery_budget`]) after the kill, before `faults_end`
    /// (after which the group phase checks that the assignment settles, and its workers leave);
    /// the cut likewise when it does not fit between the first kill's recovery and the restart,
    /// and (with a note) when `cut` is false.
    pub(crate) async fn kill_nodes(
        self,
        (start, restart_at): (Instant, Option<Instant>),
        (lease, down): (Duration, Duration),
        faults_end: Instant,
        (proxies, cut): (&Proxies, bool),
        mut restart: watch::Receiver<Restart>,
    ) -> (Vec<Outage>, Vec<String>, Vec<String>) {
        let mut kills = Vec::new();
        let mut errors = Vec::new();
        let mut notes = Vec::new();
        let budget = self.recovery_budget();
        for turn in 0..2 {
            if turn == 0 {
                tokio::time::sleep_until(start + lease / 3).await;
            } else {
                // The cut: after the first kill's recovery, done before the restart's.
                let after = kills
                    .first()
                    .map_or(start, |k: &Outage| k.at + budget)
                    .max(Instant::now());
                let length = self.cut_length();
                let before = restart_at
                    .unwrap_or(faults_end)
                    .checked_sub(length + budget);
                match before {
                    _ if !cut && self.kind.promotes() => notes.push(
                        "no cut: the clients' address is the script's proxy, which moves with \
                         the primary (the kills cover a primary gone)"
                            .to_owned(),
                    ),
                    _ if !cut => notes.push(
                        "the primary is not frozen (the Redis cut: see --freeze-primary)"
                            .to_owned(),
                    ),
                    Some(at) if at >= after => {
                        tokio::time::sleep_until(at).await;
                        match self.cut_node(start, length, proxies).await {
                            Ok(cut) => kills.push(cut),
                            Err(e) => errors.push(e),
                        }
                    }
                    _ => notes.push(format!(
                        "the cut left out: no {length:?} between the first kill's recovery \
                         ({budget:?} after it) and {budget:?} before the \
                         whole-cluster restart"
                    )),
                }
                let _ = restart.wait_for(|r| *r == Restart::Over).await;
                tokio::time::sleep(lease).await;
                let late = Instant::now() + budget > faults_end;
                if late {
                    notes.push(format!(
                        "second kill left out: the whole-cluster restart was over {:.1} s in, \
                         too late for a kill and {budget:?} of recovery before the \
                         faults end",
                        start.elapsed().as_secs_f64()
                    ));
                    break;
                }
            }
            let kill = if self.kind.promotes() {
                self.run(&["kill-primary"]).await
            } else {
                self.run(&["kill", self.leader_word()]).await
            };
            let node = match kill {
                Ok(node) => node,
                Err(e) => {
                    errors.push(format!("killing the {}: {e}", self.leader_word()));
                    continue;
                }
            };
            // The script answers once the process is gone (it finds the leader first, which
            // takes a few requests): a grant asked after this moment was asked without it.
            let killed_at = Instant::now();
            if self.kind.promotes() {
                // What a failover tool does once it sees the primary gone: the replica promoted,
                // the clients' address moved to it. The old primary comes back as its replica
                // (until then a synchronous primary takes no write).
                if let Err(e) = self.run(&["promote"]).await {
                    errors.push(format!("promoting the replica after killing {node}: {e}"));
                }
                tokio::time::sleep(down).await;
                if let Err(e) = self.run(&["reattach"]).await {
                    errors.push(format!("reattaching {node}: {e}"));
                }
            } else {
                tokio::time::sleep(down).await;
                if let Err(e) = self.run(&["restart", &node]).await {
                    errors.push(format!("restarting {node}: {e}"));
                }
            }
            kills.push(Outage {
                kind: OutageKind::Kill,
                node,
                at: killed_at,
                offset: killed_at.duration_since(start),
                length: down,
                dropped: None,
                back: None,
            });
        }
        (kills, errors, notes)
    }

    /// How long the cluster is given to serve a holder again after a kill, when placing the
    /// second kill: [`RECOVERY_BUDGET`], or [`SQL_RECOVERY_BUDGET`] on the SQL clusters (a
    /// synchronous primary takes no write until the old one is back as its replica).
    fn recovery_budget(self) -> Duration {
        if self.kind.promotes() {
            SQL_RECOVERY_BUDGET
        } else {
            RECOVERY_BUDGET
        }
    }

    /// How long the cut lasts on this cluster.
    fn cut_length(self) -> Duration {
        match self.kind {
            ClusterKind::Redis => FREEZE_LENGTH,
            _ => CUT_LENGTH,
        }
    }

    /// Cuts the leader off for `length`, then reconnects it. On etcd and NATS its proxy drops
    /// every connection and closes each new one ([`FaultMode::Cut`]), the node itself runs on;
    /// on Redis the primary is frozen (SIGSTOP) and then continued, as the module docs say.
    /// Answers the outage (its recovery is filled in later), or what failed; the node is
    /// reconnected (or continued) in every case.
    async fn cut_node(
        self,
        start: Instant,
        length: Duration,
        proxies: &Proxies,
    ) -> Result<Outage, String> {
        let (kind, node, at, dropped) = if self.kind == ClusterKind::Redis {
            let node = self
                .run(&["freeze", self.leader_word()])
                .await
                .map_err(|e| format!("freezing the primary: {e}"))?;
            let at = Instant::now();
            tokio::time::sleep(length).await;
            self.run(&["thaw", &node])
                .await
                .map_err(|e| format!("thawing {node}: {e}"))?;
            (OutageKind::Freeze, node, at, None)
        } else {
            let node = self
                .run(&["leader"])
                .await
                .map_err(|e| format!("finding the leader to cut off: {e}"))?;
            let proxy = proxies
                .of(&node)
                .ok_or_else(|| format!("no fault proxy for {node}, the leader"))?;
            let dropped = proxy.connections_open();
            proxy.set_mode(FaultMode::Cut);
            let at = Instant::now();
            tokio::time::sleep(length).await;
            proxy.set_mode(FaultMode::Pass);
            (OutageKind::Cut, node, at, Some(dropped))
        };
        Ok(Outage {
            kind,
            node,
            at,
            offset: at.duration_since(start),
            length,
            dropped,
            back: None,
        })
    }
}

/// The fault proxies of a cluster's nodes, by node name (none on Redis).
#[derive(Debug)]
pub(crate) struct Proxies(Vec<(String, FaultProxy)>);

impl Proxies {
    /// The proxy in front of `node`.
    fn of(&self, node: &str) -> Option<&FaultProxy> {
        self.0.iter().find(|(n, _)| n == node).map(|(_, p)| p)
    }
}

/// A NATS client on every server of `url` (`nats://host:port,host:port,…`): it reconnects to
/// them only, never to the servers the cluster advertises (which would go around the fault
/// proxies), with a pause of at most 500 ms between attempts, as `NatsStore::connect` does.
async fn nats_client(url: &str, attempt: Duration) -> lease::Result<async_nats::Client> {
    let servers: Vec<String> = url
        .trim_start_matches("nats://")
        .split(',')
        .map(|host| format!("nats://{host}"))
        .collect();
    let connecting = async_nats::ConnectOptions::new()
        .connection_timeout(attempt)
        .reconnect_delay_callback(|attempts| {
            let exp = u32::try_from(attempts.saturating_sub(2).min(4)).unwrap_or(4);
            match attempts {
                0 | 1 => Duration::ZERO,
                _ => Duration::from_millis(50 * 2u64.pow(exp)).min(Duration::from_millis(500)),
            }
        })
        .ignore_discovered_servers()
        .connect(servers.as_slice());
    match tokio::time::timeout(attempt, connecting).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(lease::Error::unavailable(format!(
            "cannot connect to NATS at {url}: {e}"
        ))),
        Err(_) => Err(lease::Error::unavailable(format!(
            "cannot connect to NATS at {url}: no answer within {attempt:?}"
        ))),
    }
}

/// How long the leader of etcd or NATS is cut off from the clients.
pub(crate) const CUT_LENGTH: Duration = Duration::from_millis(2500);

/// How long the Redis primary is frozen: long enough for the Sentinels to notice (1 s) and
/// fail over.
pub(crate) const FREEZE_LENGTH: Duration = Duration::from_secs(3);

/// How long a cluster is given to serve a holder again after a node kill, when placing the
/// kills (the slowest seen here: NATS 2.15.1, 8.0 s, whose Raft election timeout is 4–9 s; a
/// kill still recovers in time two leases later, when the run ends).
pub(crate) const RECOVERY_BUDGET: Duration = Duration::from_secs(8);

/// [`RECOVERY_BUDGET`] on the SQL clusters: the promotion, the node's down time and the old
/// primary's reattachment (`pg_rewind`, or a fresh MariaDB replica), during which the
/// synchronous primary takes no write. Seen here (2026-12-07, debug build, loaded 2-core
/// machine): 9.4–18.6 s from the kill until a holder works again. With 8 s the second kill's
/// recovery ran past the group phase's calm, and the assignment was judged unsettled while the
/// primary still took no write.
pub(crate) const SQL_RECOVERY_BUDGET: Duration = Duration::from_secs(25);

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
pub(crate) fn recoveries(kills: &mut [Outage], sections: &[(Instant, Instant)], timings: &Timings) {
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
