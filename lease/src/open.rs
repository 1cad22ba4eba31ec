//! Every backend constructor the facade calls, in one place: the store for a parsed URL.
//!
//! The backends' constructors are named here and nowhere else in the crate, so a renaming in
//! a backend crate is adapted in this file alone.

// A build without some backends leaves some of these unused.
#![allow(unused_imports, unused_variables)]

use std::str::FromStr;

use lease_core::telemetry::redact::scrub;
use lease_core::{Error, ErrorKind, LeaseStore, Result};

use crate::Store;
use crate::options::Resolved;
use crate::url::{Backend, Target, UrlError};

/// Lets the backend's driver parse the URL, without any I/O (the checks `lease` cannot make
/// itself). MongoDB's parser may look up DNS and NATS's is run when connecting, so their URLs
/// are judged then.
pub(crate) fn check_driver(target: &Target) -> std::result::Result<(), UrlError> {
    let url = target.driver_url.as_str();
    let refused = |why: String| UrlError::Malformed {
        url: target.shown.clone(),
        backend: target.backend,
        problem: format!("is not valid: {}; fix the store URL", scrub(&why, url)),
    };
    match target.backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => sqlx::sqlite::SqliteConnectOptions::from_str(url)
            .map(drop)
            .map_err(|e| refused(e.to_string())),
        #[cfg(feature = "postgres")]
        Backend::Postgres => sqlx::postgres::PgConnectOptions::from_str(url)
            .map(drop)
            .map_err(|e| refused(e.to_string())),
        #[cfg(feature = "mysql")]
        Backend::MySql => sqlx::mysql::MySqlConnectOptions::from_str(url)
            .map(drop)
            .map_err(|e| refused(e.to_string())),
        #[cfg(feature = "redis")]
        Backend::Redis => lease_redis::redis::Client::open(url)
            .map(drop)
            .map_err(|e| refused(e.to_string())),
        _ => Ok(()),
    }
}

/// Opens the store `target` names with `options`, and checks it with
/// [`available`](LeaseStore::available) (the SQL, NATS, MongoDB and etcd constructors run that
/// check themselves, and so does a registered scheme's opener: NATS's `connect` checks the bucket as `available` does, etcd's makes the
/// same linearizable read).
pub(crate) async fn connect(target: &Target, options: &Resolved) -> Result<Store> {
    let url = target.driver_url.as_str();
    match target.backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => Ok(Store::new(
            target.backend,
            lease_sql::SqliteStore::connect(url, sql_config(options)?).await?,
        )),
        #[cfg(feature = "postgres")]
        Backend::Postgres => Ok(Store::new(
            target.backend,
            lease_sql::PostgresStore::connect(url, sql_config(options)?).await?,
        )),
        #[cfg(feature = "mysql")]
        Backend::MySql => Ok(Store::new(
            target.backend,
            lease_sql::MySqlStore::connect(url, sql_config(options)?).await?,
        )),
        #[cfg(feature = "redis")]
        Backend::Redis => {
            let mut config = options.redis.apply(lease_redis::RedisConfig::new());
            if let Some(bound) = options.op_timeout {
                config = config.operation_timeout(Some(bound)).connect_timeout(bound);
            }
            let store = lease_redis::RedisStore::connect(url, config).await?;
            store.available().await.map_err(redis_hint)?;
            Ok(Store::new(target.backend, store))
        }
        #[cfg(feature = "nats")]
        Backend::Nats => {
            use lease_nats::{DEFAULT_TTL, NatsConfig, NatsStore};
            let mut config = options
                .nats
                .apply(NatsConfig::new(options.lease.unwrap_or(DEFAULT_TTL)));
            if let Some(bucket) = &options.nats_bucket {
                config = config.bucket(bucket.clone());
            }
            if let Some(bound) = options.op_timeout {
                config = config.op_timeout(bound);
            }
            Ok(Store::new(
                target.backend,
                NatsStore::connect(url, config).await?,
            ))
        }
        #[cfg(feature = "mongodb")]
        Backend::MongoDb => {
            use lease_mongo::{MongoConfig, MongoStore};
            // The default config names no database: the URL's is used, else `lease`.
            let mut config = MongoConfig::default();
            if let Some(bound) = options.op_timeout {
                config = config.op_timeout(bound);
            }
            Ok(Store::new(
                target.backend,
                MongoStore::connect(url, config).await?,
            ))
        }
        #[cfg(feature = "etcd")]
        Backend::Etcd => {
            use lease_etcd::{EtcdConfig, EtcdStore};
            let mut config = options.etcd.apply(EtcdConfig::new());
            if let Some(bound) = options.op_timeout {
                config = config.op_timeout(bound);
            }
            Ok(Store::new(
                target.backend,
                EtcdStore::connect(url, config).await?,
            ))
        }
        #[cfg(feature = "memory")]
        Backend::Memory => Ok(Store::new(target.backend, lease_local::MemoryStore::new())),
        Backend::Registered(scheme) => {
            crate::registry::open(scheme, target.driver_url.clone()).await
        }
        // `Target::parse` refuses the backends not compiled in.
        #[allow(unreachable_patterns)]
        other => Err(UrlError::NotCompiled {
            url: target.shown.clone(),
            backend: other,
        }
        .into()),
    }
}

/// The SQL stores' configuration: lease-sql's defaults with what the URL and options set.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
fn sql_config(options: &Resolved) -> Result<lease_sql::SqlConfig> {
    options.sql.apply(lease_sql::SqlConfig::default())
}

/// A Redis server refused as configured: say which URL parameters accept it.
#[cfg(feature = "redis")]
fn redis_hint(e: Error) -> Error {
    if e.kind() != ErrorKind::Unsupported {
        return e;
    }
    // The same error, said once: lease-redis's message with the URL's ways to accept it.
    let message = format!(
        "{} (to accept it: add ?allow_fsync_everysec=1 (AOF with appendfsync everysec), \
         ?allow_volatile=1 or ?terms=clock_floor to the store URL)",
        e.message()
    );
    e.with_message(message)
}
