//! A verified transaction's row lock holds up nobody but the lease it verifies.
//!
//! A holder keeps a verified transaction open on name A for 4 s (its row locked in share
//! mode). Meanwhile, through one store with the default two lease connections:
//!
//! - the holder's own renewal of A waits for the lock (it must: the row is locked), pinning one
//!   lease connection for the whole transaction;
//! - a contender's claim of A answers `Held` while the transaction is still open, never waiting
//!   on the lock;
//! - the holder's renewals of B and C, two at a time every 100 ms, each come back while the
//!   transaction is still open, on the other connection.
//!
//! "Still open" is read from the transaction itself: it notes the instant it begins to commit,
//! and an operation that waited for the lock can only answer after that. So the checks hold on
//! a loaded machine as on an idle one, and fail for exactly the two faults they are about: an
//! operation that queued on one connection chosen round-robin, rather than taking the first
//! that frees up, would make every other renewal of B or C wait behind the pinned connection
//! until the commit; and a claim that waited on the lock would answer only after it. With one
//! lease connection the store cannot keep these promises, and the checks say so
//! (`with_one_lease_connection_the_claim_waits_for_the_commit`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use lease_core::{LeaseStore, backend::HolderToken};
use lease_sql::{Fence, SqlConfig, SqlStore};
use tokio::sync::oneshot;

const HOLD: Duration = Duration::from_millis(4000);
const TTL: Duration = Duration::from_secs(20);
/// The renewal rounds stop this long before the transaction commits, so a round that a loaded
/// machine slows down still ends before the commit.
const MARGIN: Duration = Duration::from_millis(1500);

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

/// The instant the holder's transaction on A began to commit, once it has.
type Committing = Arc<OnceLock<Instant>>;

/// Runs the scenario; `verified` is the holder's transaction on A: it opens, says so on
/// `opened`, stays open for [`HOLD`], notes the instant in `committing`, then commits. Answers
/// the first broken promise, if any.
async fn cadence<S, F>(
    backend: &str,
    store: Arc<S>,
    names: Names,
    verified: F,
    opened: oneshot::Receiver<()>,
    committing: Committing,
) -> Result<(), String>
where
    S: LeaseStore + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let tx = tokio::spawn(verified);
    opened.await.unwrap();
    let started = Instant::now();
    let open = || committing.get().is_none();

    // The holder's own renewal of A waits for the lock, pinning a connection.
    let own = {
        let store = store.clone();
        let (a, holder) = (names.a.clone(), names.holder.clone());
        tokio::spawn(async move { store.renew(&a, &holder, TTL).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;

    // A contender's claim of A: held, while the transaction is open.
    let t = Instant::now();
    let claimed = store
        .claim(&names.a, &HolderToken::mint(), "contender", TTL)
        .await
        .unwrap();
    let took = t.elapsed();
    if claimed.is_some() {
        return Err(format!(
            "{backend}: the contender took A from a live verified transaction"
        ));
    }
    if !open() {
        return Err(format!(
            "{backend}: the contender's claim of A answered only after the verified \
             transaction began to commit ({took:?}): it waited on the transaction's lock \
             instead of answering held"
        ));
    }

    // The holder's renewals of B and C, both at once every 100 ms, while A stays locked.
    let mut worst = Duration::ZERO;
    let mut rounds = 0;
    while started.elapsed() + MARGIN < HOLD {
        let t = Instant::now();
        let [b, c] = &names.others;
        let (rb, rc) = tokio::join!(
            store.renew(b, &names.holder, TTL),
            store.renew(c, &names.holder, TTL)
        );
        let took = t.elapsed();
        assert!(rb.unwrap().is_some() && rc.unwrap().is_some(), "{backend}");
        worst = worst.max(took);
        if !open() {
            return Err(format!(
                "{backend}: renewals of B and C (round {rounds}) answered only after the \
                 verified transaction on A began to commit ({took:?}): they waited behind the \
                 renewal of A that waits on its lock"
            ));
        }
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rounds >= 3, "{backend}: only {rounds} rounds");
    eprintln!(
        "{backend}: the claim of A answered held in {took:?}; {rounds} rounds of renewals of B \
         and C, the slowest {worst:?}"
    );
    // The renewal of A was waiting all along; it goes through once the transaction commits.
    if own.is_finished() {
        return Err(format!(
            "{backend}: the renewal of A did not wait for the lock"
        ));
    }
    tx.await.unwrap();
    let renewed = own.await.unwrap().unwrap();
    assert_eq!(renewed.map(|g| g.term), Some(names.a_term), "{backend}");
    Ok(())
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
async fn holds_up_only_its_own_lease<S: Verified>(backend: &str, store: S) -> Result<(), String> {
    let names = claim_all(&store).await;
    let (opened_tx, opened) = oneshot::channel();
    let committing = Committing::default();
    let verified = {
        let (store, a, holder, term) = (
            store.clone(),
            names.a.clone(),
            names.holder.clone(),
            names.a_term,
        );
        let committing = committing.clone();
        async move {
            let tx = store.open(&a, &holder, term).await;
            opened_tx.send(()).unwrap();
            tokio::time::sleep(HOLD).await;
            committing.set(Instant::now()).unwrap();
            S::commit(tx).await;
        }
    };
    cadence(
        backend,
        Arc::new(store),
        names,
        verified,
        opened,
        committing,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_verified_transaction_holds_up_only_its_own_lease() {
    if let Some((store, _)) = support::postgres().await {
        holds_up_only_its_own_lease("postgres", store)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_verified_transaction_holds_up_only_its_own_lease() {
    if let Some((store, _)) = support::mysql().await {
        holds_up_only_its_own_lease("mysql", store).await.unwrap();
    }
}

/// The checks can fail: with one lease connection, the holder's renewal of A (waiting on its
/// lock) pins the only connection, and the contender's claim of A queues behind it until the
/// transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_lease_connection_the_claim_waits_for_the_commit() {
    let one = || SqlConfig::default().lease_connections(1);
    if let Some((_, one_conn)) = support::postgres_with(one()).await {
        let broken = holds_up_only_its_own_lease("postgres", one_conn.store).await;
        let why = broken.expect_err("postgres: one lease connection kept every promise");
        assert!(why.contains("began to commit"), "{why}");
        eprintln!("as expected: {why}");
    }
    if let Some((_, one_conn)) = support::mysql_with(one()).await {
        let broken = holds_up_only_its_own_lease("mysql", one_conn.store).await;
        let why = broken.expect_err("mysql: one lease connection kept every promise");
        assert!(why.contains("began to commit"), "{why}");
        eprintln!("as expected: {why}");
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
