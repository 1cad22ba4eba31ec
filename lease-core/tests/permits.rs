//! Counted leases through the coordinator, in paused tokio time on the memory store:
//! `try_acquire`, `acquire`, `run` and `run_elected` with a [`Permits`]; the keeper renews a
//! permit; loss at the local deadline; resign releases; a waiter for a permit is woken by a
//! release hint, or at the earliest expiry of a crashed holder's permit; the herd one release
//! wakes stays bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lease_conformance::{FaultMode, faulty};
use lease_core::backend::wait::{EXPIRY_MARGIN, HINT_JITTER};
use lease_core::{
    Coordinator, ErrorKind, LeaseStore, Permits, Term, Timings, backend::LeaseStoreExt,
};
use lease_local::MemoryStore;
use tokio::time::{Instant, sleep};

const S: Duration = Duration::from_secs(1);

fn timings() -> Timings {
    Timings::default()
}

fn coordinator(store: Arc<dyn LeaseStore>, instance: &str) -> Coordinator {
    Coordinator::builder(store)
        .instance(instance)
        .timings(timings())
        .fail_action(|_| {})
        .build()
        .unwrap()
}

fn permits(n: u32) -> Permits {
    Permits::new("pool", n).unwrap()
}

fn waiting(
    c: &Coordinator,
    target: &Permits,
    limit: Duration,
) -> tokio::task::JoinHandle<(lease_core::Result<Term>, Instant)> {
    let c = c.clone();
    let target = target.clone();
    tokio::spawn(async move {
        let r = c.acquire(&target, limit).await;
        (r, Instant::now())
    })
}

/// The live permits by the store's account: (permit, instance, term).
async fn live(store: &dyn LeaseStore, name: &str) -> Vec<(u32, String, u64)> {
    store
        .permits(name)
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.live)
        .map(|p| (p.permit, p.instance, p.term))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn try_acquire_takes_the_lowest_free_permit_and_refuses_the_n_plus_first() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let pool = permits(3);
    let mut terms = Vec::new();
    for i in 0..3 {
        let c = coordinator(store.clone(), &format!("c{i}"));
        let t = c.try_acquire(&pool).await.unwrap();
        assert_eq!(t.permit(), Some(i));
        assert_eq!(t.name(), "pool");
        terms.push(t);
    }
    let tokens: Vec<u64> = terms.iter().map(Term::token).collect();
    assert_eq!(tokens, vec![1, 2, 3], "one token sequence across permits");
    let e = coordinator(store.clone(), "c3")
        .try_acquire(&pool)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Held);
    assert!(e.to_string().contains("all 3 permits of 'pool'"), "{e}");
    // The plain lease of the name is another thing.
    let plain = coordinator(store.clone(), "plain")
        .try_acquire("pool")
        .await
        .unwrap();
    assert_eq!((plain.permit(), plain.token()), (None, 1));
    // Resign releases at once: the permit is the lowest free one again, with a higher token.
    terms[1].resign().await.unwrap();
    assert_eq!(
        live(store.as_ref(), "pool").await,
        vec![(0, "c0".into(), 1), (2, "c2".into(), 3)]
    );
    let t = coordinator(store.clone(), "c4")
        .try_acquire(&pool)
        .await
        .unwrap();
    assert_eq!((t.permit(), t.token()), (Some(1), 4));
}

#[tokio::test(start_paused = true)]
async fn the_keeper_renews_a_permit_for_many_lease_periods() {
    let counted = faulty(MemoryStore::new());
    let c = coordinator(Arc::new(counted.clone()), "a");
    let t = c.try_acquire(&permits(2)).await.unwrap();
    sleep(timings().lease() * 10).await;
    assert!(t.is_live(), "{:?}", t.err());
    let renews = counted.hook().counts().renews;
    // 150 s at a renewal every 2 s.
    assert!((70..=80).contains(&renews), "{renews} renewals");
    let listed = live(counted.inner(), "pool").await;
    assert_eq!(listed, vec![(0, "a".into(), t.token())]);
    assert!(t.expires_in() > timings().lease() - 3 * S);
    c.close().await.unwrap();
    assert!(
        live(counted.inner(), "pool").await.is_empty(),
        "close released"
    );
}

#[tokio::test(start_paused = true)]
async fn a_permit_is_lost_at_the_local_deadline_and_freed_at_the_stores_expiry() {
    let holder_side = faulty(MemoryStore::new());
    let inner = holder_side.inner().clone();
    let a = coordinator(Arc::new(holder_side.clone()), "a");
    let b = coordinator(Arc::new(inner.clone()), "b");
    let pool = permits(1);
    let t0 = Instant::now();
    let t = a.try_acquire(&pool).await.unwrap();
    sleep(S).await;
    holder_side.hook().set_mode(FaultMode::Cut);
    t.lost().await;
    assert_eq!(
        t0.elapsed(),
        timings().deadline(),
        "lost at the local deadline"
    );
    assert_eq!(t.err().map(|e| e.kind()), Some(ErrorKind::Lost));
    // The store still holds the permit until its TTL (15 s from the claim) runs out.
    assert_eq!(
        b.try_acquire(&pool).await.unwrap_err().kind(),
        ErrorKind::Held
    );
    let (next, at) = waiting(&b, &pool, 60 * S).await.unwrap();
    let next = next.unwrap();
    assert!(at - t0 >= timings().lease(), "{:?}", at - t0);
    assert!(
        at - t0 <= timings().lease() + EXPIRY_MARGIN + HINT_JITTER,
        "{:?}",
        at - t0
    );
    assert_eq!((next.permit(), next.token()), (Some(0), 2));
}

#[tokio::test(start_paused = true)]
async fn a_release_wakes_a_waiter_for_a_permit_within_the_hint_jitter() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let pool = permits(2);
    let a = coordinator(store.clone(), "a");
    let b = coordinator(store.clone(), "b");
    let c = coordinator(store.clone(), "c");
    let ta = a.try_acquire(&pool).await.unwrap();
    let tb = b.try_acquire(&pool).await.unwrap();
    let w = waiting(&c, &pool, 60 * S);
    sleep(5 * S).await;
    assert!(!w.is_finished(), "c got a permit while both were held");
    let released = Instant::now();
    ta.resign().await.unwrap();
    let (tc, at) = w.await.unwrap();
    let tc = tc.unwrap();
    assert!(at - released <= HINT_JITTER, "{:?}", at - released);
    assert_eq!(tc.permit(), ta.permit());
    assert!(tc.token() > tb.token());
    assert!(tb.is_live());
}

#[tokio::test(start_paused = true)]
async fn a_waiter_takes_a_crashed_holders_permit_at_its_expiry_and_not_before() {
    let holder_side = faulty(MemoryStore::new());
    let inner = holder_side.inner().clone();
    let pool = permits(2);
    let crashed = coordinator(Arc::new(holder_side.clone()), "crashed");
    let alive = coordinator(Arc::new(inner.clone()), "alive");
    let waiter = coordinator(Arc::new(inner.clone()), "waiter");
    let tc = crashed.try_acquire(&pool).await.unwrap();
    sleep(3 * S).await;
    let ta = alive.try_acquire(&pool).await.unwrap();
    let w = waiting(&waiter, &pool, 120 * S);
    sleep(4 * S).await;
    holder_side.hook().set_mode(FaultMode::Cut);
    let info = inner.permits("pool").await.unwrap();
    let left = info.iter().find(|p| p.permit == 0).unwrap().expires_in;
    let expiry = Instant::now() + left;
    let (tw, at) = w.await.unwrap();
    let tw = tw.unwrap();
    assert!(
        at >= expiry,
        "took the permit {:?} before its expiry",
        expiry - at
    );
    assert!(
        at - expiry <= EXPIRY_MARGIN + HINT_JITTER,
        "took the permit {:?} after its expiry",
        at - expiry
    );
    assert_eq!(tw.permit(), tc.permit());
    assert!(tw.token() > ta.token());
    assert!(ta.is_live(), "the renewing holder kept its permit");
    tc.lost().await;
}

#[tokio::test(start_paused = true)]
async fn idle_permit_waiters_cost_little_and_one_release_wakes_a_bounded_herd() {
    let counted = faulty(MemoryStore::new());
    let inner: Arc<dyn LeaseStore> = Arc::new(counted.inner().clone());
    let pool = permits(2);
    let a = coordinator(inner.clone(), "a");
    let b = coordinator(inner, "b");
    let ta = a.try_acquire(&pool).await.unwrap();
    let _tb = b.try_acquire(&pool).await.unwrap();
    const WAITERS: u64 = 16;
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let c = coordinator(Arc::new(counted.clone()), &format!("w{i}"));
        tasks.push(waiting(&c, &pool, 3600 * S));
    }
    let periods = 20;
    sleep(timings().lease() * periods).await;
    let counts = counted.hook().counts();
    let per_period = (counts.claims + counts.gets) as f64 / (WAITERS as f64 * f64::from(periods));
    eprintln!(
        "idle permit waiters: {} claims and {} reads by {WAITERS} waiters in {periods} lease \
         periods: {per_period:.2} store operations per waiter per lease period",
        counts.claims, counts.gets
    );
    // One claim each, then a read at each expiry last read (see handover.rs's idle waiters).
    assert!(
        counts.claims <= WAITERS,
        "{} claims: a waiter claimed while every permit was read as live",
        counts.claims
    );
    assert!(per_period <= 1.6, "{per_period:.2}");
    let before = counted.hook().counts().claims;
    ta.resign().await.unwrap();
    sleep(HINT_JITTER * 3).await;
    let herd = counted.hook().counts().claims - before;
    eprintln!("one permit release woke {WAITERS} waiters: {herd} claims");
    assert!(herd <= WAITERS + 2, "{herd} claims for {WAITERS} waiters");
    let mut won = 0;
    for t in tasks {
        if t.is_finished() {
            won += 1;
            let (term, _) = t.await.unwrap();
            assert_eq!(term.unwrap().permit(), Some(0));
        } else {
            t.abort();
        }
    }
    assert_eq!(won, 1, "one permit came free");
}

#[tokio::test(start_paused = true)]
async fn run_holds_a_permit_for_the_work_and_releases_it() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let pool = permits(2);
    let c = coordinator(store.clone(), "a");
    let s = store.clone();
    let (permit, token) = c
        .run(&pool, move |term: Term| async move {
            sleep(40 * S).await; // longer than the lease: the keeper renews the permit
            term.check()?;
            let held = live(s.as_ref(), "pool").await;
            assert_eq!(held, vec![(0, "a".into(), term.token())]);
            Ok::<_, lease_core::Error>((term.permit(), term.token()))
        })
        .await
        .unwrap();
    assert_eq!((permit, token), (Some(0), 1));
    assert!(
        live(store.as_ref(), "pool").await.is_empty(),
        "run released"
    );
}

#[tokio::test(start_paused = true)]
async fn run_elected_keeps_at_most_n_electors_working_and_hands_over_on_a_release() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let pool = permits(2);
    let working = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut electors = Vec::new();
    let mut coordinators = Vec::new();
    for i in 0..3 {
        let c = coordinator(store.clone(), &format!("e{i}"));
        coordinators.push(c.clone());
        let pool = pool.clone();
        let (working, peak, tx) = (working.clone(), peak.clone(), tx.clone());
        electors.push(tokio::spawn(async move {
            c.run_elected(&pool, move |term: Term| {
                let (working, peak, tx) = (working.clone(), peak.clone(), tx.clone());
                async move {
                    let now = working.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    let _ = tx.send((i, term.permit(), term.token(), Instant::now()));
                    term.done().await;
                    working.fetch_sub(1, Ordering::SeqCst);
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
        }));
    }
    sleep(30 * S).await;
    let mut started = Vec::new();
    while let Ok(s) = rx.try_recv() {
        started.push(s);
    }
    assert_eq!(
        started.len(),
        2,
        "two of three electors hold a permit: {started:?}"
    );
    assert_eq!(working.load(Ordering::SeqCst), 2);
    let mut permits_held: Vec<Option<u32>> = started.iter().map(|s| s.1).collect();
    permits_held.sort();
    assert_eq!(permits_held, vec![Some(0), Some(1)]);
    // One leader's coordinator closes: its permit goes to the third elector within the jitter.
    let (leader, permit, token, _) = started[0];
    let closed = Instant::now();
    coordinators[leader].close().await.unwrap();
    let (next, next_permit, next_token, at) = rx.recv().await.unwrap();
    assert!(at - closed <= HINT_JITTER, "{:?}", at - closed);
    assert_ne!(next, leader);
    assert!(
        !started.iter().any(|s| s.0 == next),
        "the third elector took over"
    );
    assert_eq!(next_permit, permit);
    assert!(next_token > token.max(started[1].2));
    sleep(30 * S).await;
    assert_eq!(peak.load(Ordering::SeqCst), 2, "never more than 2 at work");
    for c in &coordinators {
        let _ = c.close().await;
    }
    for e in electors {
        e.await.unwrap().unwrap();
    }
}
