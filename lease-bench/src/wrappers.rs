//! Store hooks: one that counts what reaches the store, one that plays a dead holder.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lease::backend::Grant;
use lease::layer::{Answer, Call, Hook, Intercept, Operation, peek};
use lease::{Error, LeaseStore};

/// Counts of the operations that reached a [`CountingStore`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Claims, won or not.
    pub(crate) claims: u64,
    /// Claims that won.
    pub(crate) won: u64,
    /// Renewals.
    pub(crate) renews: u64,
    /// Releases.
    pub(crate) releases: u64,
    /// Verifies and gets.
    pub(crate) reads: u64,
}

impl Counts {
    /// Every operation.
    pub(crate) fn total(&self) -> u64 {
        self.claims + self.renews + self.releases + self.reads
    }

    /// `self - earlier`, per counter.
    pub(crate) fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            claims: self.claims - earlier.claims,
            won: self.won - earlier.won,
            renews: self.renews - earlier.renews,
            releases: self.releases - earlier.releases,
            reads: self.reads - earlier.reads,
        }
    }
}

/// The most claim instants a [`CountingStore`] keeps.
const MAX_STAMPS: usize = 1_000_000;

/// The hook that counts each operation reaching the store and keeps the instant of each claim.
#[derive(Debug, Default)]
pub(crate) struct Counting {
    claims: AtomicU64,
    won: AtomicU64,
    renews: AtomicU64,
    releases: AtomicU64,
    reads: AtomicU64,
    stamps: Mutex<Vec<Instant>>,
    /// Renewal calls (`renew`, `renew_many`) timed, their total and longest time in µs.
    renew_micros: AtomicU64,
    renew_max_micros: AtomicU64,
}

/// A store whose operations are counted ([`Counting`]).
pub(crate) type CountingStore = Intercept<Arc<dyn LeaseStore>, Counting>;

impl Counting {
    /// `inner`, counted from zero.
    pub(crate) fn wrap(inner: Arc<dyn LeaseStore>) -> CountingStore {
        Intercept::new(inner, Counting::default())
    }

    /// The counts so far.
    pub(crate) fn counts(&self) -> Counts {
        Counts {
            claims: self.claims.load(Ordering::Relaxed),
            won: self.won.load(Ordering::Relaxed),
            renews: self.renews.load(Ordering::Relaxed),
            releases: self.releases.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
        }
    }

    /// The mean and the longest time of one renewal call (`renew` or `renew_many`) since
    /// `earlier` (the counts then), and since the last [`Counting::reset_renew_max`] for the
    /// longest; `None` without a call.
    pub(crate) fn renew_times(
        &self,
        earlier: &Counts,
        earlier_micros: u64,
    ) -> Option<(Duration, Duration)> {
        let calls = self.renews.load(Ordering::Relaxed) - earlier.renews;
        let micros = self.renew_micros.load(Ordering::Relaxed) - earlier_micros;
        (calls > 0).then(|| {
            (
                Duration::from_micros(micros / calls),
                Duration::from_micros(self.renew_max_micros.load(Ordering::Relaxed)),
            )
        })
    }

    /// The total time of the renewal calls so far, in µs (for [`Counting::renew_times`]).
    pub(crate) fn renew_micros(&self) -> u64 {
        self.renew_micros.load(Ordering::Relaxed)
    }

    /// Forgets the longest renewal call so far.
    pub(crate) fn reset_renew_max(&self) {
        self.renew_max_micros.store(0, Ordering::Relaxed);
    }

    /// The instants at which claims were sent.
    pub(crate) fn claim_instants(&self) -> Vec<Instant> {
        self.stamps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Hook for Counting {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        let counter = match call.operation {
            Operation::Claim => {
                self.claims.fetch_add(1, Ordering::Relaxed);
                {
                    let mut stamps = self.stamps.lock().unwrap_or_else(|p| p.into_inner());
                    if stamps.len() < MAX_STAMPS {
                        stamps.push(Instant::now());
                    }
                }
                return Box::pin(async move {
                    let answer = op.await;
                    if let Ok(won) = &answer
                        && matches!(peek::<T, Option<Grant>>(won), Some(Some(_)))
                    {
                        self.won.fetch_add(1, Ordering::Relaxed);
                    }
                    answer
                });
            }
            // A batch of renewals is one store operation.
            Operation::Renew | Operation::RenewMany => {
                self.renews.fetch_add(1, Ordering::Relaxed);
                return Box::pin(async move {
                    let started = Instant::now();
                    let answer = op.await;
                    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                    self.renew_micros.fetch_add(micros, Ordering::Relaxed);
                    self.renew_max_micros.fetch_max(micros, Ordering::Relaxed);
                    answer
                });
            }
            Operation::Release => &self.releases,
            Operation::Verify | Operation::Get => &self.reads,
            _ => return op,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        op
    }
}

/// The hook of a holder that can be killed: from then on nothing reaches the store, as when
/// the holder's process died — its renewals stop and it never releases.
#[derive(Debug, Default)]
pub(crate) struct Kill {
    dead: AtomicBool,
}

/// A store whose holder can be killed ([`Kill`]).
pub(crate) type KillableStore = Intercept<Arc<dyn LeaseStore>, Kill>;

impl Kill {
    /// `inner`, alive.
    pub(crate) fn wrap(inner: Arc<dyn LeaseStore>) -> KillableStore {
        Intercept::new(inner, Kill::default())
    }

    /// From now on every operation fails without reaching the store.
    pub(crate) fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }
}

impl Hook for Kill {
    fn around<'a, T: Send + 'static>(
        &'a self,
        _call: Call<'a>,
        op: Answer<'a, T>,
    ) -> Answer<'a, T> {
        if self.dead.load(Ordering::SeqCst) {
            return Box::pin(async {
                Err(Error::unavailable("the holder process is dead (benchmark)"))
            });
        }
        op
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use lease::ErrorKind;
    use lease::backend::HolderToken;
    use lease::memory::MemoryStore;
    use lease::sql::{SqlConfig, SqliteStore};

    use super::*;

    /// Both wrappers report `store`'s backend, capabilities and `available()` answer, and
    /// pass `force_release` on.
    async fn wrappers_tell_the_truth(store: Arc<dyn LeaseStore>) {
        let truth = store.available().await.map_err(|e| e.kind());
        let counting = Counting::wrap(store.clone());
        let killable = Kill::wrap(store.clone());
        for (what, wrapper) in [
            ("CountingStore", &counting as &dyn LeaseStore),
            ("KillableStore", &killable),
        ] {
            assert_eq!(wrapper.backend(), store.backend(), "{what}");
            assert_eq!(wrapper.capabilities(), store.capabilities(), "{what}");
            let answer = wrapper.available().await.map_err(|e| e.kind());
            assert_eq!(answer, truth, "{what}");
            let holder = HolderToken::mint();
            let name = format!("bench-wrapper-{what}");
            let ttl = Duration::from_secs(30);
            assert!(
                wrapper
                    .claim(&name, &holder, "i", ttl)
                    .await
                    .unwrap()
                    .is_some()
            );
            assert!(wrapper.force_release(&name).await.unwrap(), "{what}");
        }
        assert_eq!(
            (
                counting.hook().counts().claims,
                counting.hook().counts().won
            ),
            (1, 1)
        );
        killable.hook().kill();
        let dead = killable.available().await;
        assert!(dead.is_err_and(|e| e.is(ErrorKind::Unavailable)));
    }

    #[tokio::test]
    async fn wrappers_over_the_memory_store_tell_the_truth() {
        wrappers_tell_the_truth(Arc::new(MemoryStore::new())).await;
    }

    #[tokio::test]
    async fn wrappers_over_sqlite_tell_the_truth() {
        let dir = std::env::temp_dir().join("lease-bench-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("wrappers-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let url = format!("sqlite://{}", file.display());
        let store = SqliteStore::connect(&url, SqlConfig::default())
            .await
            .unwrap();
        wrappers_tell_the_truth(Arc::new(store)).await;
    }
}
