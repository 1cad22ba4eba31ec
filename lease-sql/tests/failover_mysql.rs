//! MariaDB across a failover, on the primary + replica of `ci/cluster/mariadb.sh`
//! (`LEASE_TEST_MARIADB_CLUSTER_URL`, its proxy to the current primary; one loud `SKIPPED` line
//! without it). The cases change the cluster: they kill its primary, promote the replica,
//! reattach the old primary, and switch its replication mode.
//!
//! - `available_refuses_asynchronous_replicas`: the start-up check refuses a primary with an
//!   asynchronous replica (naming `rpl_semi_sync_master_enabled`), accepts it with
//!   `allow_async_replication`, and accepts semi-synchronous replication waiting `AFTER_SYNC`.
//! - `acknowledged_leases_survive_a_failover`: the scenario of `support/failover.rs` in the mode
//!   `LEASE_TEST_MARIADB_CLUSTER_MODE` names (`semisync` by default; `async`, where it fails:
//!   the hazard, a term handed out twice and a live lease gone).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/failover.rs"]
mod failover;

use std::sync::Arc;

use failover::{CLUSTER, Cluster};
use lease_conformance::env;
use lease_core::{ErrorKind, LeaseStore};
use lease_sql::{MySqlStore, SqlConfig};

const BACKEND: &str = "mariadb-cluster";
const MARIADB: Cluster = Cluster {
    script: "mariadb.sh",
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn available_refuses_asynchronous_replicas() {
    let Some(url) = env::server_url(BACKEND) else {
        return;
    };
    let _cluster = CLUSTER.lock().await;
    MARIADB.run(&["start"]).await;
    MARIADB.run(&["mode", "async"]).await;
    let Err(e) = MySqlStore::connect(&url, SqlConfig::default()).await else {
        panic!("a primary with an asynchronous replica is accepted");
    };
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    let msg = e.to_string();
    for part in [
        "rpl_semi_sync_master_enabled is OFF",
        "allow_async_replication",
    ] {
        assert!(msg.contains(part), "{part:?} missing from: {msg}");
    }
    MySqlStore::connect(&url, SqlConfig::default().allow_async_replication(true))
        .await
        .expect("accepted with allow_async_replication");
    MARIADB.run(&["mode", "semisync"]).await;
    MySqlStore::connect(&url, SqlConfig::default())
        .await
        .expect("semi-synchronous replication waiting AFTER_SYNC is accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_leases_survive_a_failover() {
    let Some(url) = env::server_url(BACKEND) else {
        return;
    };
    let mode =
        std::env::var("LEASE_TEST_MARIADB_CLUSTER_MODE").unwrap_or_else(|_| "semisync".into());
    let _cluster = CLUSTER.lock().await;
    MARIADB.run(&["start"]).await;
    MARIADB.run(&["mode", &mode]).await;
    // The check would refuse the async mode: opted out, so that the scenario shows what it
    // guards against.
    let config = SqlConfig::default()
        .allow_async_replication(true)
        .lease_connections(4);
    let a: Arc<dyn LeaseStore> = Arc::new(MySqlStore::connect(&url, config.clone()).await.unwrap());
    let b: Arc<dyn LeaseStore> = Arc::new(MySqlStore::connect(&url, config).await.unwrap());
    let outcome = failover::scenario(MARIADB, a, b).await;
    eprintln!(
        "mariadb {mode}: kill to the first read {:.1?}, to the first claim {:.1?}",
        outcome.kill_to_answer, outcome.kill_to_write
    );
    assert!(
        outcome.breaches.is_empty(),
        "FAILOVER LOST ACKNOWLEDGED LEASES ({mode} replication):\n{}",
        outcome.breaches.join("\n")
    );
}
