//! The suite for the minimal [`PollingStore`] contract (a conditional put and a conditional
//! delete: memcached `add`/`cas`, an RDBMS row, a file…), which the
//! `PollingLeaser` runs over.
//!
//! A store that implements only `PollingStore` issues no fencing token, so there is no term to
//! check; what it must do is hand a name to one holder at a time, keep it while that holder
//! polls, and let it go at the TTL — **not before** `ttl − clock_granularity` after the request
//! that created or extended it was sent, and soon after `ttl` (within the harness's slack).
//!
//! Run every case with one macro call, from an `async fn() -> Option<PollingHarness>`:
//!
//! ```
//! use std::sync::Arc;
//! use lease_conformance::polling::PollingHarness;
//!
//! async fn setup() -> Option<PollingHarness> {
//!     Some(PollingHarness::new(Arc::new(lease_local::MemoryStore::new())))
//! }
//!
//! lease_conformance::polling_suite!(setup);
//! # fn main() {}
//! ```

// Test support: a failed expectation panics, which is how a case reports it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use lease_core::backend::STORE_CLOCK_GRANULARITY;
use lease_core::backend::polling::{PollingLeaser, PollingStore};
use tokio::time::{Instant, sleep, sleep_until};

/// What a polling case gets: the store and how to test it.
#[derive(Clone)]
pub struct PollingHarness {
    /// The store under test.
    pub store: Arc<dyn PollingStore>,
    /// A short name for test output, e.g. `"memcached"`.
    pub backend: &'static str,
    /// The TTL the cases use.
    pub ttl: Duration,
    /// How late the store may end a lease past its TTL, as the test measures it.
    pub slack: Duration,
    /// The coarsest step of the store's clock: how early it may end a lease (see
    /// [`Capabilities::clock_granularity`](lease_core::backend::Capabilities::clock_granularity)).
    pub clock_granularity: Duration,
    /// A random prefix for this case's names.
    pub prefix: String,
}

impl PollingHarness {
    /// A harness over `store`: TTL 600 ms, 150 ms of slack, a 1 ms clock, a fresh random prefix.
    pub fn new(store: Arc<dyn PollingStore>) -> PollingHarness {
        PollingHarness {
            store,
            backend: "polling",
            ttl: Duration::from_millis(600),
            slack: Duration::from_millis(150),
            clock_granularity: STORE_CLOCK_GRANULARITY,
            prefix: format!("lp{:08x}-", rand::random::<u32>()),
        }
    }

    /// Names the backend in test output.
    pub fn with_backend(mut self, backend: &'static str) -> Self {
        self.backend = backend;
        self
    }

    /// Sets the TTL (at least twice the clock granularity, so something can be checked).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets the slack allowed past the TTL.
    pub fn with_slack(mut self, slack: Duration) -> Self {
        self.slack = slack;
        self
    }

    /// Declares the store's clock granularity.
    pub fn with_clock_granularity(mut self, granularity: Duration) -> Self {
        self.clock_granularity = granularity;
        self
    }

    /// A name unique to this case.
    pub fn name(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    async fn acquire(&self, name: &str, holder: &[u8]) -> (bool, Vec<u8>) {
        match self.store.try_acquire(name, holder, self.ttl).await {
            Ok(answer) => answer,
            Err(e) => panic!("{}: try_acquire of {name} failed: {e}", self.backend),
        }
    }

    async fn release(&self, name: &str, holder: &[u8]) {
        if let Err(e) = self.store.release(name, holder).await {
            panic!("{}: release of {name} failed: {e}", self.backend);
        }
    }
}

/// A free name goes to the first holder; another holder is refused and told who holds it; the
/// holder's own call extends it.
pub async fn polling_a_free_name_goes_to_one_holder(h: &PollingHarness) {
    let name = h.name("free");
    let b = h.backend;
    assert_eq!(
        h.acquire(&name, b"a").await,
        (true, b"a".to_vec()),
        "{b}: a free name"
    );
    assert_eq!(
        h.acquire(&name, b"b").await,
        (false, b"a".to_vec()),
        "{b}: a held name must be refused, naming its holder"
    );
    assert_eq!(
        h.acquire(&name, b"a").await,
        (true, b"a".to_vec()),
        "{b}: the holder's own call extends its lease"
    );
}

/// Among many concurrent callers for one free name exactly one gets it, and every caller is
/// told that one.
pub async fn polling_one_winner_among_concurrent_callers(h: &PollingHarness) {
    for round in 0..5 {
        let name = h.name(&format!("race{round}"));
        let mut tasks = Vec::new();
        for i in 0..12u8 {
            let h = h.clone();
            let name = name.clone();
            tasks.push(tokio::spawn(async move {
                let me = vec![b'c', i];
                let (won, holder) = h.acquire(&name, &me).await;
                (me, won, holder)
            }));
        }
        let mut winners = Vec::new();
        let mut named = Vec::new();
        for t in tasks {
            let (me, won, holder) = t.await.expect("caller task");
            if won {
                assert_eq!(holder, me, "{}: a winner named another holder", h.backend);
                winners.push(me);
            }
            named.push(holder);
        }
        assert_eq!(
            winners.len(),
            1,
            "{}: round {round}: {winners:?}",
            h.backend
        );
        assert!(
            named.iter().all(|n| *n == winners[0]),
            "{}: round {round}: callers were told different holders: {named:?}",
            h.backend
        );
    }
}

/// A release by someone else does nothing; the holder's release frees the name at once.
pub async fn polling_release_frees_only_for_the_holder(h: &PollingHarness) {
    let name = h.name("release");
    let b = h.backend;
    assert!(h.acquire(&name, b"a").await.0);
    h.release(&name, b"b").await;
    assert_eq!(
        h.acquire(&name, b"b").await,
        (false, b"a".to_vec()),
        "{b}: a release by a non-holder freed the name"
    );
    h.release(&name, b"a").await;
    assert_eq!(
        h.acquire(&name, b"b").await,
        (true, b"b".to_vec()),
        "{b}: the holder's release did not free the name"
    );
    // Releasing a name nobody holds is not an error.
    h.release(&h.name("never"), b"a").await;
}

/// Probes with `other` until `bound`: every call answered before it must be refused.
async fn refused_until(
    h: &PollingHarness,
    name: &str,
    other: &[u8],
    sent: Instant,
    bound: Instant,
) {
    let mut probes = 0u32;
    loop {
        let (won, holder) = h.acquire(name, other).await;
        let answered = Instant::now();
        if answered >= bound {
            break;
        }
        probes += 1;
        assert!(
            !won,
            "{}: the lease ended early: another holder got it {:?} after the request that \
             created or extended it was sent, {:?} before ttl − clock granularity ({:?} − {:?})",
            h.backend,
            answered - sent,
            bound - answered,
            h.ttl,
            h.clock_granularity
        );
        assert_ne!(
            holder, other,
            "{}: a refused caller was named holder",
            h.backend
        );
        let left = bound.saturating_duration_since(Instant::now());
        sleep((h.ttl / 6).min(left / 2).max(Duration::from_millis(5))).await;
    }
    assert!(
        probes >= 1,
        "{}: no call was answered before ttl − clock granularity; give the harness a TTL of at \
         least twice the clock granularity",
        h.backend
    );
}

/// Without a call from its holder the lease ends at its TTL — not before `ttl − clock
/// granularity` after the request that created it was sent, and within the slack after the
/// TTL; an extension counts from the extending request the same way.
pub async fn polling_an_unextended_lease_ends_at_its_ttl_and_not_before(h: &PollingHarness) {
    let name = h.name("expiry");
    let early = h.ttl.saturating_sub(h.clock_granularity);
    let sent = Instant::now();
    assert!(h.acquire(&name, b"a").await.0);
    refused_until(h, &name, b"b", sent, sent + early).await;
    sleep_until(sent + h.ttl + h.slack).await;
    assert_eq!(
        h.acquire(&name, b"b").await,
        (true, b"b".to_vec()),
        "{}: the lease was still held {:?} past its TTL",
        h.backend,
        h.slack
    );
    // An extension: a, then a again a while later; the lease counts from the second call.
    let name = h.name("extended");
    assert!(h.acquire(&name, b"a").await.0);
    sleep(h.ttl / 2).await;
    let sent = Instant::now();
    assert!(
        h.acquire(&name, b"a").await.0,
        "{}: extension refused",
        h.backend
    );
    refused_until(h, &name, b"b", sent, sent + early).await;
}

/// Two [`PollingLeaser`]s over the store: never both hold the name, sampled every few
/// milliseconds over several TTLs, and the second takes over after the first closes.
pub async fn polling_leasers_never_hold_at_once(h: &PollingHarness) {
    let name = h.name("leasers");
    let leaser = |store: Arc<dyn PollingStore>| {
        PollingLeaser::new(SharedPolling(store), h.ttl, h.ttl / 6).expect("leaser timings")
    };
    let a = leaser(h.store.clone())
        .new_lease(&name, b"a".to_vec())
        .unwrap();
    let b = leaser(h.store.clone())
        .new_lease(&name, b"b".to_vec())
        .unwrap();
    let until = Instant::now() + h.ttl * 3;
    let mut held = [false; 2];
    while Instant::now() < until {
        let (ha, hb) = (a.is_held(), b.is_held());
        assert!(!(ha && hb), "{}: both leasers hold the name", h.backend);
        held[0] |= ha;
        held[1] |= hb;
        sleep(Duration::from_millis(3)).await;
    }
    assert!(
        held[0] || held[1],
        "{}: nobody ever held the name",
        h.backend
    );
    let (first, second) = if a.is_held() { (a, b) } else { (b, a) };
    first.close().await;
    let until = Instant::now() + h.ttl * 2 + h.slack;
    while !second.is_held() {
        assert!(
            Instant::now() < until,
            "{}: the other leaser did not take over after a close",
            h.backend
        );
        sleep(Duration::from_millis(5)).await;
    }
    second.close().await;
}

/// A shared store handed to a [`PollingLeaser`] (which takes a store by value).
struct SharedPolling(Arc<dyn PollingStore>);

#[lease_core::backend::async_trait]
impl PollingStore for SharedPolling {
    async fn try_acquire(
        &self,
        name: &str,
        holder: &[u8],
        ttl: Duration,
    ) -> lease_core::Result<(bool, Vec<u8>)> {
        self.0.try_acquire(name, holder, ttl).await
    }

    async fn release(&self, name: &str, holder: &[u8]) -> lease_core::Result<()> {
        self.0.release(name, holder).await
    }
}

/// Stamps out every case of [`polling`](crate::polling) as its own `#[test]`, each calling
/// `setup()` (an `async fn() -> Option<PollingHarness>`; `None` skips) on a runtime of this
/// crate's, then a summary test, as [`conformance_suite!`](crate::conformance_suite) does.
#[macro_export]
macro_rules! polling_suite {
    ($setup:path) => {
        $crate::polling_suite!(@each $setup;
            polling_a_free_name_goes_to_one_holder,
            polling_one_winner_among_concurrent_callers,
            polling_release_frees_only_for_the_holder,
            polling_an_unextended_lease_ends_at_its_ttl_and_not_before,
            polling_leasers_never_hold_at_once
        );
    };
    (@each $setup:path; $($case:ident),* $(,)?) => {
        static __LEASE_POLLING_SUITE: $crate::suite::SuiteRecord =
            $crate::suite::SuiteRecord::new();
        $(
            #[test]
            fn $case() {
                $crate::suite::run_case(&__LEASE_POLLING_SUITE, stringify!($case), async {
                    let Some(harness) = $setup().await else {
                        return (None, $crate::suite::CaseOutcome::NoServer);
                    };
                    $crate::polling::$case(&harness).await;
                    (Some(harness.backend), $crate::suite::CaseOutcome::Ran)
                });
            }
        )*
        /// Prints the suite's summary once its other cases are done (its name sorts last).
        #[test]
        fn zz_conformance_summary() {
            let total = [$(stringify!($case)),*].len();
            $crate::suite::summarize(&__LEASE_POLLING_SUITE, module_path!(), total);
        }
    };
}
