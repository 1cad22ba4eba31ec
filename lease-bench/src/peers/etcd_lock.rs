//! etcd's own lock API (`etcd-client`'s `lock` / `unlock`, the v3 concurrency service): the
//! peer of the etcd store. Like the clients of that API do, the subject grants one etcd lease
//! when it opens (TTL 60 s, kept alive by re-granting each cycle when it runs low) and locks
//! under it; a cycle is `lock` + `unlock`. The lock key's revision is usable as a fencing token.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use etcd_client::{Client, LockOptions};
use futures::future::BoxFuture;

use super::Subject;

/// The etcd lease the locks are held under.
const LEASE_TTL: i64 = 60;

/// `lock` + `unlock` on one client.
pub(crate) struct EtcdLock {
    client: Client,
    name: String,
    lease: i64,
    granted: Instant,
}

impl EtcdLock {
    /// Connects to the etcd at `url` (`etcd://host:port`).
    pub(crate) async fn open(url: &str, name: String) -> Result<EtcdLock> {
        let endpoint = url
            .strip_prefix("etcd://")
            .with_context(|| format!("not an etcd:// URL: {url}"))?;
        let endpoint = endpoint.split(['/', '?']).next().unwrap_or(endpoint);
        let mut client = Client::connect([format!("http://{endpoint}")], None)
            .await
            .with_context(|| format!("connecting to etcd at {endpoint}"))?;
        let lease = client.lease_grant(LEASE_TTL, None).await?.id();
        Ok(EtcdLock {
            client,
            name,
            lease,
            granted: Instant::now(),
        })
    }
}

impl Subject for EtcdLock {
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.granted.elapsed() > Duration::from_secs(30) {
                self.lease = self.client.lease_grant(LEASE_TTL, None).await?.id();
                self.granted = Instant::now();
            }
            let options = LockOptions::new().with_lease(self.lease);
            let locked = self
                .client
                .lock(self.name.as_bytes().to_vec(), Some(options))
                .await?;
            let key = locked.key().to_vec();
            ensure!(!key.is_empty(), "etcd's lock answered without a key");
            self.client.unlock(key).await?;
            Ok(())
        })
    }
}
