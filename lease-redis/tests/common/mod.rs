//! Helpers shared by the test files: connecting to the test server directly and through a
//! fault proxy.

#![allow(dead_code, unreachable_pub)]

use lease_conformance::{FaultProxy, env};
use lease_redis::redis::aio::ConnectionManager;
use lease_redis::redis::{Client, ConnectionAddr, IntoConnectionInfo};
use lease_redis::{RedisConfig, RedisStore};

/// The test server's URL, or `None` after the SKIPPED line (a panic when redis is required).
pub fn url() -> Option<String> {
    env::server_url("redis")
}

/// A config for tests: the test server has no AOF, which the tests accept.
pub fn config() -> RedisConfig {
    RedisConfig::new().allow_volatile(true)
}

/// A store connected straight to the test server.
pub async fn direct(url: &str, config: RedisConfig) -> Option<RedisStore> {
    match RedisStore::connect(url, config).await {
        Ok(store) => Some(store),
        Err(e) => {
            env::skip("redis", &format!("cannot connect to {url}: {e}"));
            None
        }
    }
}

/// A fault proxy in front of the test server, and a store on a `ConnectionManager` of its own
/// connected through it (built as a user would, from a `ConnectionInfo`).
pub async fn proxied(url: &str, config: RedisConfig) -> Option<(RedisStore, FaultProxy)> {
    let info = url.into_connection_info().expect("test URL parses");
    let ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
        env::skip("redis", "the fault path needs a TCP server URL");
        return None;
    };
    let proxy = match FaultProxy::start(format!("{host}:{port}")).await {
        Ok(p) => p,
        Err(e) => panic!("fault proxy: {e}"),
    };
    let local = proxy.local_addr();
    let info = info.set_addr(ConnectionAddr::Tcp(local.ip().to_string(), local.port()));
    let client = Client::open(info).expect("client");
    let config = config.server_label(local.to_string());
    let manager = match ConnectionManager::new_with_config(client, config.manager_config()).await {
        Ok(m) => m,
        Err(e) => {
            env::skip("redis", &format!("cannot connect through the proxy: {e}"));
            return None;
        }
    };
    let store = RedisStore::with_client(manager, config).expect("valid config");
    Some((store, proxy))
}

/// A plain connection for looking at the server behind the store's back.
pub async fn raw(url: &str) -> lease_redis::redis::aio::MultiplexedConnection {
    Client::open(url)
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection")
}

/// A string unique to this call, starting with `tag`, for names and key prefixes.
pub fn unique(tag: &str) -> String {
    let hex = lease_core::backend::HolderToken::mint().to_hex();
    format!("{tag}{}-", &hex[..10])
}

/// A store on a lazily connecting manager whose server does not exist: any I/O would fail with
/// Unavailable, so a refusal of another kind proves the check came first.
pub fn store_without_server() -> RedisStore {
    let config = RedisConfig::new()
        .connect_timeout(std::time::Duration::from_millis(200))
        .server_label("127.0.0.1:1");
    let client = Client::open("redis://127.0.0.1:1").unwrap();
    let manager = ConnectionManager::new_lazy_with_config(client, config.manager_config()).unwrap();
    RedisStore::with_client(manager, config).unwrap()
}
