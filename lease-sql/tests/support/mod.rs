//! Connecting the test stores: straight to the server, and through a fault proxy.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::str::FromStr;
use std::sync::Arc;

use lease_conformance::{FaultProxy, Harness, env};
use lease_sql::{MySqlStore, PostgresStore, SqlConfig, SqliteStore};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

pub(crate) struct Proxied<S> {
    pub store: S,
    pub proxy: Arc<FaultProxy>,
}

/// `$name(config)`: the `$backend` server's store (from its `LEASE_TEST_*` URL, default
/// options, `None` when the server is skipped) and a second store built with `config` on a pool
/// of its own whose connections go through a fault proxy.
macro_rules! server_with {
    ($name:ident, $backend:literal, $store:ty, $options:ty, $pool:ty) => {
        pub(crate) async fn $name(config: SqlConfig) -> Option<($store, Proxied<$store>)> {
            let url = env::server_url($backend)?;
            let store = match <$store>::connect(&url, SqlConfig::default()).await {
                Ok(s) => s,
                Err(e) => {
                    env::skip($backend, &format!("cannot connect: {e}"));
                    return None;
                }
            };
            let opts = <$options>::from_str(&url).unwrap();
            let proxy = FaultProxy::start((opts.get_host().to_owned(), opts.get_port()))
                .await
                .unwrap();
            let pool = <$pool>::new()
                .max_connections(2)
                .connect_lazy_with(opts.host("127.0.0.1").port(proxy.local_addr().port()));
            let proxied = <$store>::with_client(pool, config).await.unwrap();
            Some((
                store,
                Proxied {
                    store: proxied,
                    proxy: Arc::new(proxy),
                },
            ))
        }
    };
}

server_with!(
    postgres_with,
    "postgres",
    PostgresStore,
    PgConnectOptions,
    PgPoolOptions
);
server_with!(
    mysql_with,
    "mysql",
    MySqlStore,
    MySqlConnectOptions,
    MySqlPoolOptions
);

pub(crate) async fn postgres() -> Option<(PostgresStore, Proxied<PostgresStore>)> {
    postgres_with(SqlConfig::default()).await
}

pub(crate) async fn mysql() -> Option<(MySqlStore, Proxied<MySqlStore>)> {
    mysql_with(SqlConfig::default()).await
}

/// A fresh SQLite file under the system temp dir.
pub(crate) fn sqlite_url() -> String {
    let dir = std::env::temp_dir().join("lease-sql-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{:016x}.db", rand_u64()));
    format!("sqlite://{}", file.display())
}

pub(crate) fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}

pub(crate) async fn sqlite() -> SqliteStore {
    SqliteStore::connect(&sqlite_url(), SqlConfig::default())
        .await
        .unwrap()
}

/// The conformance harness on a server's store, its fault path through the proxy.
fn harness_server<S>((store, p): (S, Proxied<S>)) -> Harness
where
    S: lease_core::backend::slots::SlotStore + lease_conformance::GroupStore + Clone + 'static,
{
    Harness::new(Arc::new(store.clone()))
        .with_faults(Arc::new(p.store.clone()), p.proxy)
        .with_slots(Arc::new(store.clone()))
        .with_groups(Arc::new(store), Some(Arc::new(p.store)))
}

pub(crate) async fn harness_postgres() -> Option<Harness> {
    postgres().await.map(harness_server)
}

pub(crate) async fn harness_mysql() -> Option<Harness> {
    mysql().await.map(harness_server)
}

pub(crate) async fn harness_sqlite() -> Option<Harness> {
    let store = sqlite().await;
    // The SQLite fault path: the same store behind the in-process fault hook.
    let faulty = lease_conformance::faulty(store.clone());
    Some(
        Harness::new(Arc::new(store.clone()))
            .with_faults(Arc::new(faulty.clone()), Arc::new(faulty.hook().clone()))
            .with_slots(Arc::new(store.clone()))
            .with_groups(Arc::new(store), None),
    )
}
