//! The `rslock` crate (Redlock over one server): `LockManager::lock` + `LockManager::unlock`.

use anyhow::{Result, anyhow};
use futures::future::BoxFuture;
use rslock::LockManager;

use super::Subject;
use crate::backends::TTL;

/// One `LockManager` on one server; it connects on first use and keeps the connection.
pub(crate) struct Rslock {
    manager: LockManager,
    resource: Vec<u8>,
}

impl Rslock {
    /// A manager for the server at `url`.
    pub(crate) fn open(url: &str, name: String) -> Rslock {
        Rslock {
            manager: LockManager::new(vec![url.to_owned()]),
            resource: format!("lease-bench:rslock:{name}").into_bytes(),
        }
    }
}

impl Subject for Rslock {
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let lock = self
                .manager
                .lock(&self.resource, TTL)
                .await
                .map_err(|e| anyhow!("rslock lock: {e}"))?;
            self.manager.unlock(&lock).await;
            Ok(())
        })
    }
}
