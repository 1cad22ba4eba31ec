//! The conformance suite's set-up on etcd, shared by the single-member run
//! (`tests/conformance.rs`) and the 3-member cluster run (`tests/cluster.rs`): one store
//! connected directly (to every endpoint of the URL), a second through a fault-injecting proxy
//! in front of the first endpoint.
//!
//! etcd keeps lease TTLs in whole seconds (rounded up), and expires them in a sweep every
//! 500 ms: the store-level TTL is 2 s (etcd's minimum with its default settings) and the slack
//! 700 ms, so "expired by now" is asked only after the sweep, and "still live" only before the
//! TTL. Partitions and membership run on the same store; the fault path's store counts the round
//! trips of a batch renewal (its watch, for hints, runs straight to the server).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use lease_conformance::{FaultProxy, Harness, env};
use lease_etcd::{EtcdConfig, EtcdStore};

/// The harness for `backend` (`etcd` or `etcd-cluster`), whose server URL is
/// `LEASE_TEST_<BACKEND>_URL`; `None` after a loud skip when it is not set.
pub(crate) async fn setup(backend: &str) -> Option<Harness> {
    let url = env::server_url(backend)?;
    let config = EtcdConfig::new().prefix("lease-conformance/");
    let store = match EtcdStore::connect(&url, config.clone()).await {
        Ok(store) => store,
        Err(e) => {
            env::skip(backend, &format!("cannot open a lease store at {url}: {e}"));
            return None;
        }
    };
    let first = store
        .server()
        .split(',')
        .next()
        .unwrap_or_default()
        .to_owned();
    let proxy = FaultProxy::start(first).await.expect("fault proxy starts");
    let proxied = EtcdStore::connect(&format!("etcd://{}", proxy.local_addr()), config)
        .await
        .expect("a store connects through the fault proxy")
        // Its watch runs straight to the server, like the direct store's: the proxy then
        // counts only the store's requests.
        .with_watch_client(store.client().clone());
    Some(
        Harness::new(Arc::new(store.clone()))
            .with_ttl(Duration::from_secs(2))
            .with_slack(Duration::from_millis(700))
            .with_faults(Arc::new(proxied.clone()), Arc::new(proxy))
            .with_groups(Arc::new(store), Some(Arc::new(proxied))),
    )
}
