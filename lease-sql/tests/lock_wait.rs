//! A verified transaction's row lock holds up nobody but the lease it verifies.
//!
//! A holder keeps a verified transaction open on name A for 2.5 s (its row locked in share
//! mode). Meanwhile, through one store with the default two lease connections:
//!
//! - the holder's own renewal of A waits for the lock (it must: the row is locked), pinning one
//!   lease connection for the whole transaction;
//! - a contender's claim of A answers `Held` at once, never waiting on the lock;
//! - the holder's renewals of B and C, two at a time every 100 ms, keep their cadence on the
//!   other connection.
//!
//! An operation that queued on one connection chosen round-robin, rather than taking the first
//! that frees up, would make every other renewal of B or C wait behind the pinned connection
//! for the whole transaction; and a claim that waited on the lock would hold the contender up
//! just as long.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::{LeaseStore, backend::HolderToken};
use lease_sql::{Fence, SqlStore};

const HOLD: Duration = Duration::from_millis(2500);
const TTL: Duration = Duration::from_secs(20);

struct Names {
    holder: HolderToken,
    a: String,
    a_term: u64,
    others: [String; 2],
}

async fn claim_all(store: &impl LeaseStore) -> Names {
    let id = support::rand_u64();
    let holder = HolderToken::mint();
    let [a, b, c] = ["a", "b", "c"].map(|n| format!("lock-wait-{id:x}-{n}"));
    let a_term = store
        .claim(&a, &holder, "holder", TTL)
        .await
        .unwrap()
        .unwrap()
        .term;
    for n in [&b, &c] {
        store
            .claim(n, &holder, "holder", TTL)
            .await
            .unwrap()
            .unwrap();
    }
    Names {
        holder,
        a,
        a_term,
        others: [b, c],
    }
}

/// Runs the scenario; `verified` is the holder's transaction on A (open, then held for
/// [`HOLD`], then committed), already under way.
async fn cadence<S, F>(backend: &str, store: Arc<S>, names: Names, verified: F)
where
    S: LeaseStore + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let tx = tokio::spawn(verified);
    // The transaction's verify has run by now.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();

    // The holder's own renewal of A waits for the lock, pinning a connection.
    let own = {
        let store = store.clone();
        let (a, holder) = (names.a.clone(), names.holder.clone());
        tokio::spawn(async move { store.renew(&a, &holder, TTL).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;

    // A contender's claim of A: held, at once.
    let t = Instant::now();
    let claimed = store
        .claim(&names.a, &HolderToken::mint(), "contender", TTL)
        .await
        .unwrap();
    let took = t.elapsed();
    assert!(
        claimed.is_none(),
        "{backend}: the contender took A from a live verified transaction"
    );
    assert!(
        took < Duration::from_millis(200),
        "{backend}: the contender's claim of A waited {took:?} on the verified transaction's \
         lock instead of answering held at once"
    );

    // The holder's renewals of B and C, both at once every 100 ms, while A stays locked.
    let mut worst = Duration::ZERO;
    let mut rounds = 0;
    while started.elapsed() + Duration::from_millis(400) < HOLD {
        let t = Instant::now();
        let [b, c] = &names.others;
        let (rb, rc) = tokio::join!(
            store.renew(b, &names.holder, TTL),
            store.renew(c, &names.holder, TTL)
        );
        let took = t.elapsed();
        assert!(rb.unwrap().is_some() && rc.unwrap().is_some(), "{backend}");
        worst = worst.max(took);
        assert!(
            took < Duration::from_millis(300),
            "{backend}: renewals of B and C took {took:?} (round {rounds}) while a renewal of \
             A waited on its verified transaction's lock"
        );
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rounds >= 5, "{backend}: only {rounds} rounds");
    eprintln!("{backend}: {rounds} rounds of renewals of B and C, the slowest {worst:?}");
    // The renewal of A was waiting all along; it goes through once the transaction commits.
    assert!(
        !own.is_finished(),
        "{backend}: the renewal of A did not wait for the lock"
    );
    tx.await.unwrap();
    let renewed = own.await.unwrap().unwrap();
    assert_eq!(renewed.map(|g| g.term), Some(names.a_term), "{backend}");
}

/// A store whose verified transactions the scenario opens: each dialect's `begin_verified`.
trait Verified: LeaseStore + Clone + 'static {
    type Tx: Send + 'static;
    fn open(
        &self,
        name: &str,
        holder: &HolderToken,
        term: u64,
    ) -> impl Future<Output = Self::Tx> + Send;
    fn commit(tx: Self::Tx) -> impl Future<Output = ()> + Send;
}

macro_rules! verified {
    ($($db:ty),*) => {$(
        impl Verified for SqlStore<$db> {
            type Tx = sqlx::Transaction<'static, $db>;
            async fn open(&self, name: &str, holder: &HolderToken, term: u64) -> Self::Tx {
                self.begin_verified(Fence {
                    name,
                    holder,
                    term,
                    permit: None,
                })
                    .await
                    .unwrap()
            }
            async fn commit(tx: Self::Tx) {
                tx.commit().await.unwrap();
            }
        }
    )*};
}

verified!(sqlx::Postgres, sqlx::MySql, sqlx::Sqlite);

/// The scenario on a server: the holder's verified transaction on A stays open for [`HOLD`].
async fn holds_up_only_its_own_lease<S: Verified>(backend: &str, store: S) {
    let names = claim_all(&store).await;
    let verified = {
        let (store, a, holder, term) = (
            store.clone(),
            names.a.clone(),
            names.holder.clone(),
            names.a_term,
        );
        async move {
            let tx = store.open(&a, &holder, term).await;
            tokio::time::sleep(HOLD).await;
            S::commit(tx).await;
        }
    };
    cadence(backend, Arc::new(store), names, verified).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_verified_transaction_holds_up_only_its_own_lease() {
    if let Some((store, _)) = support::postgres().await {
        holds_up_only_its_own_lease("postgres", store).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_verified_transaction_holds_up_only_its_own_lease() {
    if let Some((store, _)) = support::mysql().await {
        holds_up_only_its_own_lease("mysql", store).await;
    }
}

/// SQLite differs: `BEGIN IMMEDIATE` takes the file's one write lock, so while a verified
/// transaction is open every write on the file — a renewal of any name, any claim — waits for
/// it (up to the 5 s busy timeout), then goes through. Nothing waits longer than the
/// transaction, and the claim of A still answers held once it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_verified_transaction_holds_up_every_write_until_it_commits() {
    let store = Arc::new(support::sqlite().await);
    let names = claim_all(&*store).await;
    let hold = Duration::from_millis(800);
    let tx = store.open(&names.a, &names.holder, names.a_term).await;
    let opened = Instant::now();
    let commit = tokio::spawn(async move {
        tokio::time::sleep(hold).await;
        tx.commit().await.unwrap();
    });
    let renewed = store
        .renew(&names.others[0], &names.holder, TTL)
        .await
        .unwrap();
    let waited = opened.elapsed();
    assert!(renewed.is_some());
    assert!(
        waited >= hold - Duration::from_millis(100),
        "the renewal of B did not wait for the write lock: {waited:?}"
    );
    assert!(
        waited < hold + Duration::from_millis(1000),
        "the renewal of B waited {waited:?}"
    );
    commit.await.unwrap();
    let claimed = store
        .claim(&names.a, &HolderToken::mint(), "contender", TTL)
        .await
        .unwrap();
    assert!(claimed.is_none(), "the contender took a live lease");
}
