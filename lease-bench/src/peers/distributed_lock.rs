//! The `distributed-lock` crates (0.2): `create_lock(name)`, then `try_acquire` + `release` per
//! cycle, with each backend's provider built from the URL as its documentation shows.
//!
//! PostgreSQL and MySQL take a connection from the provider's sqlx pool for each acquisition
//! and hold it while the lock is held (session-level advisory lock / `GET_LOCK`); Redis runs
//! `SET NX PX` and an `EVAL` release through a fred client.

use anyhow::{Context, Result, anyhow};
use distributed_lock_core::traits::{DistributedLock, LockHandle, LockProvider};
use distributed_lock_mysql::MySqlLockProvider;
use distributed_lock_postgres::PostgresLockProvider;
use distributed_lock_redis::RedisLockProvider;
use futures::future::BoxFuture;

use super::Subject;
use crate::cli::Backend;

/// The distributed-lock subject of `backend`.
pub(crate) async fn open(backend: Backend, url: &str, name: &str) -> Result<Box<dyn Subject>> {
    Ok(match backend {
        Backend::Postgres => {
            let provider = PostgresLockProvider::builder()
                .connection_string(url)
                .build()
                .await
                .map_err(|e| anyhow!("{e}"))
                .context("building the distributed-lock PostgreSQL provider")?;
            Box::new(Dl {
                lock: provider.create_lock(name),
            })
        }
        Backend::Mysql => {
            let provider = MySqlLockProvider::builder()
                .connection_string(url)
                .build()
                .await
                .map_err(|e| anyhow!("{e}"))
                .context("building the distributed-lock MySQL provider")?;
            Box::new(Dl {
                lock: provider.create_lock(name),
            })
        }
        Backend::Redis => {
            let provider = RedisLockProvider::builder()
                .url(url)
                .build()
                .await
                .map_err(|e| anyhow!("{e}"))
                .context("building the distributed-lock Redis provider")?;
            Box::new(Dl {
                lock: provider.create_lock(&format!("lease-bench:{name}")),
            })
        }
        other => anyhow::bail!("distributed-lock has no {} backend", other.label()),
    })
}

/// One lock object, acquired and released each cycle.
struct Dl<L> {
    lock: L,
}

impl<L> Subject for Dl<L>
where
    L: DistributedLock + Send + Sync + 'static,
    L::Handle: Send,
{
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let handle = self
                .lock
                .try_acquire()
                .await
                .map_err(|e| anyhow!("distributed-lock try_acquire: {e}"))?
                .context("distributed-lock refused a free lock")?;
            handle
                .release()
                .await
                .map_err(|e| anyhow!("distributed-lock release: {e}"))?;
            Ok(())
        })
    }
}
