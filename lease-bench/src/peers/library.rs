//! The library itself: the store API, and the coordinator on top of it.

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use futures::future::BoxFuture;
use lease::{Coordinator, LeaseStore, Timings, backend::HolderToken};

use super::{INSTANCE, Subject};
use crate::backends::{TTL, open_store};
use crate::cli::Backend;

/// `claim` + `release` on the store, a fresh holder token per claim.
pub(crate) struct StoreCycle {
    store: Arc<dyn LeaseStore>,
    name: String,
}

impl StoreCycle {
    /// Opens the store of `backend` at `url`.
    pub(crate) async fn open(backend: Backend, url: &str, name: String) -> Result<StoreCycle> {
        Ok(StoreCycle {
            store: open_store(backend, url, TTL).await?,
            name,
        })
    }
}

impl StoreCycle {
    /// lease-redis's store with `operation_timeout(None)`: neither the store nor its
    /// `ConnectionManager` wraps a request in a timer.
    pub(crate) async fn redis_without_timeouts(url: &str, name: String) -> Result<StoreCycle> {
        let config = lease::redis::RedisConfig::new()
            .allow_volatile(true)
            .key_prefix(crate::backends::REDIS_PREFIX)
            .operation_timeout(None);
        let store = lease::redis::RedisStore::connect(url, config).await?;
        store.available().await?;
        Ok(StoreCycle {
            store: Arc::new(store),
            name,
        })
    }
}

impl Subject for StoreCycle {
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let holder = HolderToken::mint();
            let grant = self.store.claim(&self.name, &holder, INSTANCE, TTL).await?;
            ensure!(grant.is_some(), "the claim of a free name was refused");
            let released = self.store.release(&self.name, &holder).await?;
            ensure!(released, "the release did not end the lease");
            Ok(())
        })
    }
}

/// `Coordinator::try_acquire` + `Term::resign`: the term's keeper task is started and stopped
/// every cycle.
pub(crate) struct CoordCycle {
    coordinator: Coordinator,
    name: String,
}

impl CoordCycle {
    /// Opens the store of `backend` at `url` and builds a coordinator with the default timings.
    pub(crate) async fn open(backend: Backend, url: &str, name: String) -> Result<CoordCycle> {
        let store = open_store(backend, url, TTL).await?;
        Ok(CoordCycle {
            coordinator: coordinator(store, INSTANCE, Timings::from_lease(TTL)?)?,
            name,
        })
    }
}

impl Subject for CoordCycle {
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let term = self.coordinator.try_acquire(&self.name).await?;
            term.resign().await?;
            Ok(())
        })
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let _ = self.coordinator.close().await;
        })
    }
}

/// A coordinator over `store` whose fail action only records (the default ends the process).
pub(crate) fn coordinator(
    store: Arc<dyn LeaseStore>,
    instance: &str,
    timings: Timings,
) -> Result<Coordinator> {
    Coordinator::builder(store)
        .instance(instance)
        .timings(timings)
        .fail_action(|failure| {
            eprintln!("lease-bench: step-down failure: {failure:?}");
        })
        .build()
        .context("building a coordinator")
}
