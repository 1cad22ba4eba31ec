//! The failover hazard of asynchronous replication, shown and closed.
//!
//! Each case starts its own Redis servers (the machine's `redis-server`, on free loopback ports,
//! AOF synced on every write, removed at the end): a primary, and a replica that replicates
//! through a `FaultProxy`, so the test can cut the replication link at a chosen moment. Then:
//!
//! 1. holder A claims the name (term 1) and releases it; both reach the replica;
//! 2. the replication link is cut, and holder B claims the name on the primary;
//! 3. failover: the replica is promoted (`REPLICAOF NO ONE`, what Sentinel sends), the old
//!    primary killed, and a fresh replica attached to the new primary;
//! 4. holder C claims the name on the new primary.
//!
//! Without [`RedisConfig::replica_acks`], B's claim is granted with term 2 on the old primary,
//! never reaches the replica, and C is granted term 2 again: **a repeated fencing token** (a
//! resource fenced by B's token accepts C's writes as B's equal, and the other way round).
//! With `replica_acks(1, …)`, B's claim is not granted (`Unavailable`: no replica acknowledged),
//! a read-back of it fails the same way, and C gets term 2 as the only holder of it: every term
//! granted is granted once.
//!
//! Needs `redis-server` on the machine; without it the cases skip loudly
//! (`SKIPPED redis-failover: …`), and `LEASE_TEST_REQUIRE=redis-failover` makes that a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "sentinel")]
use std::process::Command;
use std::time::{Duration, Instant};

#[cfg(feature = "sentinel")]
use lease_conformance::env;
use lease_conformance::{FaultMode, FaultProxy};
use lease_core::backend::HolderToken;
use lease_core::{ErrorKind, LeaseStore};
use lease_redis::redis;
use lease_redis::{RedisConfig, RedisStore};

const BACKEND: &str = "redis-failover";
const NAME: &str = "orders";
const TTL: Duration = Duration::from_secs(30);
/// How long an operation waits for a replica's acknowledgement: generous, as the servers sync
/// every write to disk and share the machine with builds (a slow fsync delays the ack).
const ACK_WAIT: Duration = Duration::from_secs(1);

/// The cases run one at a time: the Sentinel case kills and restarts servers, and the load of
/// a resync must not delay another case's acknowledgements.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[path = "common/redis_server.rs"]
mod redis_server;

use redis_server::Node;

/// Starts a `redis-server` of the failover cases (AOF on) with `extra` arguments; `None` (after
/// the skip line) when the binary is missing.
async fn spawn(tag: &str, extra: &[String]) -> Option<Node> {
    let mut args: Vec<String> = [
        "--appendonly",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
        "--protected-mode",
        "no",
    ]
    .map(String::from)
    .to_vec();
    args.extend_from_slice(extra);
    redis_server::spawn(BACKEND, tag, &args).await
}

async fn info_replication(node: &Node) -> String {
    let mut conn = node.conn().await;
    redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Waits until `node`'s INFO replication holds `line`.
async fn wait_for(node: &Node, line: &str) {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        if info_replication(node)
            .await
            .lines()
            .any(|l| l.trim() == line)
        {
            return;
        }
        assert!(Instant::now() < until, "no '{line}' on port {}", node.port);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `node` (a primary) lists a replica whose state is `online` (the initial sync
/// done, so it acknowledges `WAIT`).
async fn online(node: &Node) {
    let until = Instant::now() + Duration::from_secs(15);
    while !info_replication(node)
        .await
        .lines()
        .any(|l| l.starts_with("slave0:") && l.contains("state=online"))
    {
        assert!(
            Instant::now() < until,
            "no replica online on port {}",
            node.port
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn record(node: &Node, key: &str) -> Vec<(String, String)> {
    let mut conn = node.conn().await;
    let mut fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap();
    fields.sort();
    fields
}

/// Waits until the replica holds the primary's copy of `key`.
async fn replicated(primary: &Node, replica: &Node, key: &str) {
    let until = Instant::now() + Duration::from_secs(10);
    while record(primary, key).await != record(replica, key).await {
        assert!(Instant::now() < until, "{key} does not reach the replica");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn config(acks: bool) -> RedisConfig {
    let config = RedisConfig::new()
        .key_prefix("failover:")
        .operation_timeout(Some(Duration::from_secs(3)));
    if acks {
        config.replica_acks(1, ACK_WAIT)
    } else {
        config
    }
}

/// What each holder got: its term, or the error.
#[derive(Debug)]
struct Run {
    a: u64,
    b: lease_core::Result<Option<u64>>,
    b_read_back: Option<lease_core::Result<Option<u64>>>,
    c: u64,
}

/// Plays the scenario of the file's docs with or without replica acknowledgements.
async fn scenario(acks: bool) -> Option<Run> {
    let _one = ONE_AT_A_TIME.lock().await;
    let primary = spawn("primary", &[]).await?;
    let link = FaultProxy::start(format!("127.0.0.1:{}", primary.port))
        .await
        .unwrap();
    let via = link.local_addr();
    let replica = spawn(
        "replica",
        &[
            "--replicaof".into(),
            via.ip().to_string(),
            via.port().to_string(),
        ],
    )
    .await?;
    wait_for(&replica, "master_link_status:up").await;
    online(&primary).await;

    let old = RedisStore::connect(&primary.url(), config(acks))
        .await
        .unwrap();
    old.available().await.unwrap();
    let key = old.record_key(NAME).unwrap();

    // 1. A claims and releases; both reach the replica.
    let holder_a = HolderToken::mint();
    let a = old
        .claim(NAME, &holder_a, "a", TTL)
        .await
        .unwrap()
        .unwrap()
        .term;
    assert!(old.release(NAME, &holder_a).await.unwrap());
    replicated(&primary, &replica, &key).await;

    // 2. The replication link is cut; B claims on the primary.
    link.set_mode(FaultMode::Cut);
    wait_for(&primary, "connected_slaves:0").await;
    let holder_b = HolderToken::mint();
    let b = old
        .claim(NAME, &holder_b, "b", TTL)
        .await
        .map(|g| g.map(|g| g.term));
    // What the coordinator does with a claim of unknown outcome: read it back.
    let b_read_back = if b.is_err() {
        Some(old.verify(NAME, &holder_b).await.map(|g| g.map(|g| g.term)))
    } else {
        None
    };

    // 3. Failover: the replica becomes the primary, the old one dies, a new replica follows.
    let mut conn = replica.conn().await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut conn)
        .await
        .unwrap();
    drop(old);
    drop(primary);
    let spare = spawn(
        "spare",
        &[
            "--replicaof".into(),
            "127.0.0.1".into(),
            replica.port.to_string(),
        ],
    )
    .await?;
    wait_for(&spare, "master_link_status:up").await;
    online(&replica).await;

    // 4. C claims on the new primary.
    let new = RedisStore::connect(&replica.url(), config(acks))
        .await
        .unwrap();
    let holder_c = HolderToken::mint();
    let c = new
        .claim(NAME, &holder_c, "c", TTL)
        .await
        .unwrap()
        .expect("the name is free on the new primary")
        .term;
    drop(spare);
    Some(Run {
        a,
        b,
        b_read_back,
        c,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replica_acks_a_failover_repeats_a_granted_term() {
    let Some(run) = scenario(false).await else {
        return;
    };
    eprintln!("without replica_acks: {run:?}");
    assert_eq!(run.a, 1);
    let b = run
        .b
        .expect("HAZARD NOT SHOWN: the old primary refused B's claim")
        .expect("free");
    assert_eq!(b, 2);
    // The demonstration can fail: if B's claim had reached the replica (the cut not taking
    // effect), C would get term 3 and this says so instead of passing.
    assert_eq!(
        run.c, b,
        "HAZARD NOT SHOWN: C was granted term {} after the failover, not B's term {b} again — \
         B's claim reached the replica despite the cut replication link, so this test no longer \
         demonstrates what lease-redis's README says it does",
        run.c
    );
    eprintln!(
        "HAZARD SHOWN: B was granted term {b} on the old primary, C term {} on the promoted \
         replica",
        run.c
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replica_acks_no_granted_term_repeats() {
    let Some(run) = scenario(true).await else {
        return;
    };
    eprintln!("with replica_acks(1, {ACK_WAIT:?}): {run:?}");
    assert_eq!(run.a, 1);
    let e = run.b.expect_err("no replica acknowledged B's claim");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.message().contains("replicas acknowledged"), "{e}");
    let read = run
        .b_read_back
        .expect("read back")
        .expect_err("the read-back waits too");
    assert_eq!(read.kind(), ErrorKind::Unavailable, "{read}");
    assert_eq!(run.c, 2, "C holds term 2, which nobody was granted before");
    eprintln!(
        "HAZARD CLOSED: B's claim was refused ({e}); C was granted term {} as its only holder",
        run.c
    );
}

/// Runs `bash ci/cluster/redis-sentinel.sh <args>` (the cluster `LEASE_TEST_REDIS_SENTINEL_URL`
/// names) and answers its output's last line.
#[cfg(feature = "sentinel")]
fn cluster(args: &[&str]) -> String {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../ci/cluster/redis-sentinel.sh"
    );
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "redis-sentinel.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The remedy under a real Sentinel failover, on the primary + 2 replicas + 3 Sentinels of
/// `ci/cluster/redis-sentinel.sh` (`LEASE_TEST_REDIS_SENTINEL_URL`, its `url`; skips loudly
/// without it, `LEASE_TEST_REQUIRE=redis-sentinel` makes that a failure): a store on a
/// [`SentinelConnection`](lease_redis::SentinelConnection) with `replica_acks(1, …)` claims, the
/// primary is SIGKILLed, and the holder's renewal works again on the replica the Sentinels
/// promote, with the same term (the acknowledged claim survived); the next holder's term is
/// higher. Prints the time from the kill until the renewal worked. Then the killed node is
/// restarted (it rejoins as a replica) and the test waits until the primary has both replicas
/// again. What this cannot show deterministically is the hazard itself (a write the replicas
/// missed): the cases above do that on servers of their own, with the replication link cut.
#[cfg(feature = "sentinel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_an_acknowledged_claim_survives_a_primary_kill() {
    let Some(url) = env::server_url("redis-sentinel") else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let config = RedisConfig::new()
        .key_prefix("failover-sentinel:")
        .operation_timeout(Some(Duration::from_secs(3)))
        .replica_acks(1, ACK_WAIT);
    let store = sentinel_store(&url, config).await;
    let name = format!("orders-{}", std::process::id());

    let holder_a = HolderToken::mint();
    let t1 = store
        .claim(&name, &holder_a, "a", TTL)
        .await
        .unwrap()
        .expect("a fresh name is free")
        .term;
    let killed = cluster(&["kill", "primary"]);
    let at = Instant::now();
    let mut failures = 0u32;
    let grant = loop {
        match store.renew(&name, &holder_a, TTL).await {
            Ok(Some(grant)) => break grant,
            Ok(None) => {
                panic!("the acknowledged claim (term {t1}) was lost in the failover from {killed}")
            }
            Err(e) => {
                failures += 1;
                assert!(
                    at.elapsed() < Duration::from_secs(30),
                    "no renewal worked within 30 s of killing {killed}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let took = at.elapsed();
    assert_eq!(grant.term, t1, "the renewal kept the term");
    let promoted = cluster(&["primary"]);
    assert_ne!(promoted, killed, "the Sentinels promoted another node");
    assert!(store.release(&name, &holder_a).await.unwrap());
    let holder_b = HolderToken::mint();
    let t2 = store
        .claim(&name, &holder_b, "b", TTL)
        .await
        .unwrap()
        .expect("released")
        .term;
    assert!(t2 > t1, "term {t2} after term {t1}");
    assert!(store.release(&name, &holder_b).await.unwrap());
    eprintln!(
        "SENTINEL FAILOVER: {killed} killed, {promoted} promoted; the holder renewed term {t1} \
         {took:?} after the kill ({failures} failed attempts); the next claim got term {t2}"
    );

    cluster(&["restart", &killed]);
    rejoined(&killed, Duration::from_secs(30)).await;
}

/// A primary that stops answering without closing its connections (frozen with SIGSTOP, as a
/// host cut off without a reset) is given up: requests time out at the store's operation
/// timeout, the connection is dropped, and a later request asks the Sentinels again and
/// reaches the replica they promote (2.8 s after the freeze here, with down-after 1 s). Prints
/// that time; then thaws the node and waits until it is a replica again.
#[cfg(feature = "sentinel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_a_frozen_primary_is_given_up() {
    let Some(url) = env::server_url("redis-sentinel") else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let config = RedisConfig::new()
        .key_prefix("failover-frozen:")
        .operation_timeout(Some(Duration::from_secs(1)))
        .replica_acks(1, Duration::from_millis(500));
    let store = sentinel_store(&url, config).await;
    let name = format!("frozen-{}", std::process::id());
    let first = HolderToken::mint();
    store
        .claim(&name, &first, "a", TTL)
        .await
        .unwrap()
        .expect("a fresh name is free");
    assert!(store.release(&name, &first).await.unwrap());

    let frozen = cluster(&["freeze", "primary"]);
    let at = Instant::now();
    let mut failures = 0u32;
    let outcome = loop {
        let holder = HolderToken::mint();
        match store.claim(&name, &holder, "b", TTL).await {
            Ok(Some(_)) => break Ok(holder),
            Ok(None) => break Err("the released name was held".to_owned()),
            Err(e) => {
                failures += 1;
                if at.elapsed() > Duration::from_secs(20) {
                    break Err(format!(
                        "no claim worked within 20 s of freezing {frozen}: {e}"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let took = at.elapsed();
    let promoted = cluster(&["primary"]);
    cluster(&["thaw", &frozen]);
    let holder = outcome.unwrap();
    assert_ne!(promoted, frozen, "the Sentinels promoted another node");
    eprintln!(
        "SENTINEL FREEZE: {frozen} frozen, {promoted} promoted; a claim worked {took:?} after \
         the freeze ({failures} failed attempts)"
    );
    rejoined(&frozen, Duration::from_secs(40)).await;
    assert!(store.release(&name, &holder).await.unwrap());
}

/// `CONFIG SET appendonly <on>` on cluster node `node` (`r1`…`r3`), then `CONFIG REWRITE`: a
/// Sentinel rewrites a node's config file when it reconfigures it, so the setting must be in
/// the file too, or a restart would bring back the other one.
#[cfg(feature = "sentinel")]
async fn set_appendonly(node: &str, on: bool) {
    let client = redis::Client::open(node_url(node)).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg(if on { "yes" } else { "no" })
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("REWRITE")
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// The durability check follows the primary: a store on a
/// [`SentinelConnection`](lease_redis::SentinelConnection) passes it on the first primary,
/// the replicas then run without AOF, the primary is killed, and the next claim — on the
/// replica the Sentinels promote, which would start `Counter` terms again after a restart — is
/// refused with the check's `Unsupported`. The check ran once per store before (the claim was
/// granted). Then AOF is turned back on, the killed node restarted and waited for.
#[cfg(feature = "sentinel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_a_promoted_replica_is_checked_too() {
    let Some(url) = env::server_url("redis-sentinel") else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let config = RedisConfig::new()
        .key_prefix("failover-checked:")
        .operation_timeout(Some(Duration::from_secs(1)));
    let store = sentinel_store(&url, config).await;
    let name = format!("checked-{}", std::process::id());
    let first = HolderToken::mint();
    store
        .claim(&name, &first, "a", TTL)
        .await
        .unwrap()
        .expect("a fresh name is free");
    assert!(store.release(&name, &first).await.unwrap());

    let primary = cluster(&["primary"]);
    let replicas: Vec<String> = ["r1", "r2", "r3"]
        .iter()
        .filter(|n| **n != primary)
        .map(|n| (*n).to_owned())
        .collect();
    for r in &replicas {
        set_appendonly(r, false).await;
    }
    let killed = cluster(&["kill", "primary"]);
    let at = Instant::now();
    let outcome = loop {
        match store.claim(&name, &HolderToken::mint(), "b", TTL).await {
            Err(e) if e.kind() == ErrorKind::Unsupported => break Ok(e),
            Ok(granted) => {
                break Err(format!(
                    "a claim on the promoted replica answered {granted:?}"
                ));
            }
            Err(e) if at.elapsed() > Duration::from_secs(30) => {
                break Err(format!("no answer but errors within 30 s of the kill: {e}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    for r in &replicas {
        set_appendonly(r, true).await;
    }
    let promoted = cluster(&["primary"]);
    cluster(&["restart", &killed]);
    let refused = outcome.unwrap();
    assert!(refused.message().contains("appendonly"), "{refused}");
    eprintln!(
        "SENTINEL CHECK: {killed} killed, {promoted} promoted without AOF; the next claim was \
         refused {:?} after the kill: {refused}",
        at.elapsed()
    );
    // With AOF back on, the promoted primary passes the check again.
    let holder = HolderToken::mint();
    store
        .claim(&name, &holder, "c", TTL)
        .await
        .unwrap()
        .expect("released");
    assert!(store.release(&name, &holder).await.unwrap());
    rejoined(&killed, Duration::from_secs(30)).await;
}

/// A store on a [`SentinelConnection`](lease_redis::SentinelConnection) to the cluster at `url`
/// with `config`, its start-up check passed.
#[cfg(feature = "sentinel")]
async fn sentinel_store(
    url: &str,
    config: RedisConfig,
) -> RedisStore<lease_redis::SentinelConnection> {
    let conn = lease_redis::SentinelConnection::from_url(url, &config).unwrap();
    let store = RedisStore::with_client(conn, config).unwrap();
    store.available().await.unwrap();
    store
}

/// The URL of cluster node `node` (`r1`…`r3`: ports 63791…63793).
#[cfg(feature = "sentinel")]
fn node_url(node: &str) -> String {
    let port = 63790 + node.trim_start_matches('r').parse::<u16>().unwrap_or(0);
    format!("redis://127.0.0.1:{port}")
}

/// Waits until the primary has both replicas again, `node` (killed or frozen) among them.
#[cfg(feature = "sentinel")]
async fn rejoined(node: &str, within: Duration) {
    let until = Instant::now() + within;
    while !in_sync().await {
        assert!(
            Instant::now() < until,
            "{node} did not rejoin as a replica within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether the cluster's primary has both replicas online.
#[cfg(feature = "sentinel")]
async fn in_sync() -> bool {
    let Ok(client) = redis::Client::open(node_url(&cluster(&["primary"]))) else {
        return false;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return false;
    };
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    info.lines().any(|l| l.trim() == "connected_slaves:2")
}
