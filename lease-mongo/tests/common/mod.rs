//! Connecting the test stores: one straight to the server in `LEASE_TEST_MONGODB_URL`, one
//! through a [`FaultProxy`] (a second client with `directConnection=true` to the proxy).

use std::time::Duration;

use lease_conformance::FaultProxy;
use lease_conformance::env;
use lease_core::Result;
use lease_mongo::mongodb::Client;
use lease_mongo::mongodb::bson::doc;
use lease_mongo::mongodb::options::{ClientOptions, ServerAddress, ServerMonitoringMode};
use lease_mongo::{MongoConfig, MongoStore};

/// The backend name the conformance policy knows this crate by.
pub(crate) const BACKEND: &str = "mongodb";

/// The database the tests use.
pub(crate) const DATABASE: &str = "lease_test";

/// The store under test, the same database through a fault proxy, and the proxy; `None` after
/// printing the SKIPPED line when no server is configured or it cannot be reached.
///
/// `quiet_monitoring` polls the proxied server only once a minute, so the proxy's round-trip
/// count sees the operations alone.
pub(crate) async fn stores(quiet_monitoring: bool) -> Option<(MongoStore, MongoStore, FaultProxy)> {
    let url = env::server_url(BACKEND)?;
    match connect(&url, quiet_monitoring).await {
        Ok(s) => Some(s),
        Err(e) => {
            env::skip(
                BACKEND,
                &format!("cannot use the server in LEASE_TEST_MONGODB_URL: {e}"),
            );
            None
        }
    }
}

fn setup_error(what: &str, e: impl std::fmt::Display) -> lease_core::Error {
    lease_core::Error::unavailable(format!("{what}: {e}"))
}

async fn connect(url: &str, quiet: bool) -> Result<(MongoStore, MongoStore, FaultProxy)> {
    let direct = MongoStore::connect(url, MongoConfig::new(DATABASE)).await?;

    // Proxy the primary (a replica set's writes go there), or the only host.
    let mut options = ClientOptions::parse(url)
        .await
        .map_err(|e| setup_error("parse the URL", e))?;
    let hello = direct
        .client()
        .database("admin")
        .run_command(doc! { "hello": 1 })
        .await
        .map_err(|e| setup_error("hello", e))?;
    let target = match hello.get_str("primary") {
        Ok(p) => p.to_owned(),
        Err(_) => options
            .hosts
            .first()
            .map(ToString::to_string)
            .ok_or_else(|| setup_error("the URL", "names no host"))?,
    };
    let proxy = FaultProxy::start(target.as_str())
        .await
        .map_err(|e| setup_error("start the fault proxy", e))?;
    let address = proxy.local_addr().to_string();
    options.hosts = vec![ServerAddress::parse(&address).map_err(|e| setup_error("proxy", e))?];
    options.direct_connection = Some(true);
    options.repl_set_name = None;
    options.server_selection_timeout = Some(Duration::from_millis(500));
    options.connect_timeout = Some(Duration::from_millis(500));
    if quiet {
        options.heartbeat_freq = Some(Duration::from_secs(60));
        options.server_monitoring_mode = Some(ServerMonitoringMode::Poll);
    }
    let client = Client::with_options(options).map_err(|e| setup_error("proxied client", e))?;
    let proxied = MongoStore::with_client(
        client,
        MongoConfig::new(DATABASE)
            .server_label(format!("{address} (proxy to {target})"))
            .op_timeout(Duration::from_millis(500)),
    )?;
    Ok((direct, proxied, proxy))
}

/// `true` when the server is the mongoeco wire emulator CI runs (`buildInfo.gitVersion` is
/// `mongoeco`; see ci/mongo-emulator/), not a MongoDB server.
pub(crate) async fn emulated(store: &MongoStore) -> bool {
    store
        .client()
        .database("admin")
        .run_command(doc! { "buildInfo": 1 })
        .await
        .is_ok_and(|b| b.get_str("gitVersion") == Ok("mongoeco"))
}
