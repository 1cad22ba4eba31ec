//! Where the servers are, and how to open the library's store on each backend, directly or
//! through a counting proxy.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use lease::LeaseStore;
use lease::sql::SqlConfig;
use lease::telemetry::redact::redact_url as redact;
use lease_conformance::FaultProxy;
use lease_conformance::GroupStore;

use crate::cli::{Args, Backend};

/// The SQL table the benchmark's leases live in (created when missing).
pub(crate) const SQL_TABLE: &str = "lease_bench";

/// The Redis key prefix of the benchmark's leases.
pub(crate) const REDIS_PREFIX: &str = "lease-bench:";

/// The lease duration of the cycle, round-trip and contention runs (the protocol's default).
pub(crate) const TTL: Duration = Duration::from_secs(15);

/// How long opening a store may take before the backend counts as not answering.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything the sections need to reach the backends.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    /// PostgreSQL URL.
    pub(crate) postgres: String,
    /// MariaDB URL.
    pub(crate) mysql: String,
    /// Redis URL.
    pub(crate) redis: String,
    /// NATS URL.
    pub(crate) nats: String,
    /// MongoDB URL.
    pub(crate) mongodb: String,
    /// etcd URL.
    pub(crate) etcd: String,
    /// The SQLite database file.
    pub(crate) sqlite_file: PathBuf,
    /// A prefix unique to this run, for every lease name.
    pub(crate) prefix: String,
}

impl Env {
    /// From the command line; the SQLite file goes into a fresh temporary folder.
    pub(crate) fn new(args: &Args) -> Result<Env> {
        let run: u32 = rand::random();
        let dir =
            std::env::temp_dir().join(format!("lease-bench-{}-{run:08x}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating the SQLite folder {}", dir.display()))?;
        Ok(Env {
            postgres: args.postgres_url.clone(),
            mysql: args.mysql_url.clone(),
            redis: args.redis_url.clone(),
            nats: args.nats_url.clone(),
            mongodb: args.mongodb_url.clone(),
            etcd: args.etcd_url.clone(),
            sqlite_file: dir.join("leases.db"),
            prefix: format!("bench-{run:08x}"),
        })
    }

    /// A lease name unique to this run.
    pub(crate) fn name(&self, what: &str) -> String {
        format!("{}-{what}", self.prefix)
    }

    /// The store URL of `backend` (the SQLite URL for SQLite, `memory://` for local).
    pub(crate) fn url(&self, backend: Backend) -> String {
        match backend {
            Backend::Local => "memory://".to_owned(),
            Backend::Sqlite => format!("sqlite://{}", self.sqlite_file.display()),
            Backend::Postgres => self.postgres.clone(),
            Backend::Mysql => self.mysql.clone(),
            Backend::Redis => self.redis.clone(),
            Backend::Nats => self.nats.clone(),
            Backend::Mongodb => self.mongodb.clone(),
            Backend::Etcd => self.etcd.clone(),
        }
    }

    /// Removes the SQLite folder.
    pub(crate) fn cleanup(&self) {
        if let Some(dir) = self.sqlite_file.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The `host:port` of a server URL (`scheme://[user[:password]@]host:port[/…]`).
pub(crate) fn authority(url: &str) -> Result<String> {
    let (_, rest) = url
        .split_once("://")
        .with_context(|| format!("no scheme in the URL {}", redact(url)))?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let auth = &rest[..end];
    let host = auth.rsplit_once('@').map_or(auth, |(_, h)| h);
    if host.is_empty() {
        bail!("no host in the URL {}", redact(url));
    }
    Ok(host.to_owned())
}

/// `url` with its `host:port` replaced by `addr` (a proxy's).
pub(crate) fn via(url: &str, addr: SocketAddr) -> Result<String> {
    let host = authority(url)?;
    let (scheme, rest) = url
        .split_once("://")
        .with_context(|| format!("no scheme in the URL {}", redact(url)))?;
    let at = rest
        .find(host.as_str())
        .with_context(|| format!("cannot rewrite the URL {}", redact(url)))?;
    Ok(format!(
        "{scheme}://{}{addr}{}",
        &rest[..at],
        &rest[at + host.len()..]
    ))
}

/// A proxy in front of `backend`'s server that counts round trips, and the URL through it.
pub(crate) async fn proxy(env: &Env, backend: Backend) -> Result<(FaultProxy, String)> {
    let url = env.url(backend);
    let target = authority(&url)?;
    let proxy = FaultProxy::start(target.as_str())
        .await
        .with_context(|| format!("starting a counting proxy to {target}"))?;
    let through = via(&url, proxy.local_addr())?;
    Ok((proxy, through))
}

/// Opens the library's store of `backend` at `url` with leases of `ttl` (only NATS cares: its
/// bucket has one fixed lease duration), and checks it is available.
pub(crate) async fn open_store(
    backend: Backend,
    url: &str,
    ttl: Duration,
) -> Result<Arc<dyn LeaseStore>> {
    let store: Arc<dyn LeaseStore> = open_group_store(backend, url, ttl).await?;
    Ok(store)
}

/// [`open_store`] as a [`GroupStore`] (leases, partitions and membership): every backend's store
/// is one. Opened through [`lease::open`], which also runs `available()`.
pub(crate) async fn open_group_store(
    backend: Backend,
    url: &str,
    ttl: Duration,
) -> Result<Arc<dyn GroupStore>> {
    let options = lease::OpenOptions::new()
        .lease(ttl)
        .sql_table(SQL_TABLE)
        .redis_allow_volatile(true)
        .redis_key_prefix(REDIS_PREFIX)
        .nats_bucket(format!("lease_bench_{}ms", ttl.as_millis()));
    let opening = lease::open(url, &options);
    let store = tokio::time::timeout(OPEN_TIMEOUT, opening)
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {OPEN_TIMEOUT:?}"))?
        .with_context(|| format!("opening the {} store at {}", backend.label(), redact(url)))?;
    group_store(&store).with_context(|| {
        format!(
            "the {} store at {} has no partitions or no membership",
            backend.label(),
            redact(url)
        )
    })
}

/// The backend's own store behind `store`, which keeps leases, partitions and membership (the
/// facade's `Store` reaches partitions and membership through its accessors; the benchmark
/// calls them on one handle).
fn group_store(store: &lease::Store) -> Option<Arc<dyn GroupStore>> {
    fn own<T: GroupStore + LeaseStore>(store: &lease::Store) -> Option<Arc<dyn GroupStore>> {
        let own: Arc<dyn GroupStore> = store.downcast_arc::<T>()?;
        Some(own)
    }
    own::<lease::sql::SqliteStore>(store)
        .or_else(|| own::<lease::sql::PostgresStore>(store))
        .or_else(|| own::<lease::sql::MySqlStore>(store))
        .or_else(|| own::<lease::redis::RedisStore>(store))
        .or_else(|| own::<lease::nats::NatsStore>(store))
        .or_else(|| own::<lease::mongodb::MongoStore>(store))
        .or_else(|| own::<lease::etcd::EtcdStore>(store))
        .or_else(|| own::<lease::memory::MemoryStore>(store))
}

/// The SQL stores' configuration: the benchmark's own table (its partition table is
/// `<table>_partitions`).
pub(crate) fn sql_config() -> Result<SqlConfig> {
    Ok(SqlConfig::default().table(SQL_TABLE)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_rewritten_to_the_proxy() {
        let addr: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        assert_eq!(
            via("postgres://postgres@127.0.0.1:5432/test", addr).unwrap(),
            "postgres://postgres@127.0.0.1:40000/test"
        );
        assert_eq!(
            via("redis://127.0.0.1:6379", addr).unwrap(),
            "redis://127.0.0.1:40000"
        );
        assert_eq!(
            authority("mysql://root:pw@localhost:3306/test").unwrap(),
            "localhost:3306"
        );
        assert_eq!(redact("mysql://root:pw@h:1/x"), "mysql://root:***@h:1/x");
        assert_eq!(redact("mysql://root@h:1/x"), "mysql://root@h:1/x");
    }
}
