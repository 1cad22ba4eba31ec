//! Hand-over in paused tokio time on the memory store: waiters woken by hints, at the holder's
//! expiry, or at the retry pace without hints; the herd one release wakes; the cost of idle
//! waiters; `acquire`'s timeout and cancel safety; the holder watch.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use lease_conformance::{FaultMode, HintMode, faulty};
use lease_core::backend::Grant;
use lease_core::backend::wait::HINT_JITTER;
use lease_core::layer::{Answer, Call, Hook, Operation, answer_as};
use lease_core::{
    Coordinator, ErrorKind, LeaseStore, Term, Timings,
    backend::{LeaseInfo, LeaseStoreExt},
    coordinator::HolderChange,
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
        .build()
        .unwrap()
}

fn waiting(
    c: &Coordinator,
    name: &str,
    limit: Duration,
) -> tokio::task::JoinHandle<(lease_core::Result<Term>, Instant)> {
    let c = c.clone();
    let name = name.to_owned();
    tokio::spawn(async move {
        let r = c.acquire(&name, limit).await;
        (r, Instant::now())
    })
}

#[tokio::test(start_paused = true)]
async fn a_release_wakes_a_waiter_within_the_hint_jitter() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let a = coordinator(store.clone(), "a");
    let b = coordinator(store.clone(), "b");
    let t1 = a.try_acquire("job").await.unwrap();
    let w = waiting(&b, "job", 60 * S);
    sleep(5 * S).await;
    assert!(!w.is_finished());
    let released = Instant::now();
    t1.resign().await.unwrap();
    let (t2, at) = w.await.unwrap();
    let took = at - released;
    assert!(took <= HINT_JITTER, "{took:?}");
    assert!(t2.unwrap().token() > t1.token());
}

#[tokio::test(start_paused = true)]
async fn without_hints_a_waiter_polls_at_the_retry_pace() {
    let cut = faulty(MemoryStore::new());
    cut.hook().set_hint_mode(HintMode::Cut);
    let store: Arc<dyn LeaseStore> = Arc::new(cut.clone());
    let a = coordinator(Arc::new(cut.inner().clone()), "a");
    let b = coordinator(store, "b");
    let t1 = a.try_acquire("job").await.unwrap();
    let w = waiting(&b, "job", 60 * S);
    sleep(5 * S).await;
    let released = Instant::now();
    t1.resign().await.unwrap();
    let (t2, at) = w.await.unwrap();
    let took = at - released;
    let t = timings();
    assert!(took <= t.retry() + t.jitter(), "{took:?}");
    assert!(
        took > HINT_JITTER,
        "{took:?}: woken although hints were cut"
    );
    t2.unwrap();
    // Polling: about one claim per retry while a held the name for 5 s, a read per lease.
    let counts = cut.hook().counts();
    assert!(
        (2..=4).contains(&counts.claims),
        "{} claims in 5 s at a 2–2.5 s retry",
        counts.claims
    );
    assert!(counts.gets <= 2, "{} reads", counts.gets);
}

#[tokio::test(start_paused = true)]
async fn a_crashed_holder_is_succeeded_at_its_expiry_and_not_before() {
    let holder_side = faulty(MemoryStore::new());
    let inner = holder_side.inner().clone();
    let a = coordinator(Arc::new(holder_side.clone()), "a");
    let b = coordinator(Arc::new(inner.clone()), "b");
    let t1 = a.try_acquire("job").await.unwrap();
    let w = waiting(&b, "job", 120 * S);
    sleep(7 * S).await;
    holder_side.hook().set_mode(FaultMode::Cut);
    let info = inner.get("job").await.unwrap().unwrap();
    let expiry = Instant::now() + info.expires_in;
    let (t2, at) = w.await.unwrap();
    t2.unwrap();
    assert!(
        at >= expiry,
        "successor {:?} before the expiry",
        expiry - at
    );
    let late = at - expiry;
    assert!(
        late <= lease_core::backend::wait::EXPIRY_MARGIN + HINT_JITTER,
        "successor {late:?} after the expiry"
    );
    t1.lost().await;
}

#[tokio::test(start_paused = true)]
async fn an_idle_waiter_asks_about_once_per_lease_period() {
    let counted = faulty(MemoryStore::new());
    let a = coordinator(Arc::new(counted.inner().clone()), "a");
    let t1 = a.try_acquire("job").await.unwrap();
    let mut tasks = Vec::new();
    const WAITERS: u64 = 16;
    for i in 0..WAITERS {
        let c = coordinator(Arc::new(counted.clone()), &format!("w{i}"));
        tasks.push(waiting(&c, "job", 3600 * S));
    }
    let periods = 20;
    sleep(timings().lease() * periods).await;
    let counts = counted.hook().counts();
    let waiter_periods = WAITERS as f64 * f64::from(periods);
    let per_period = (counts.claims + counts.gets) as f64 / waiter_periods;
    eprintln!(
        "idle waiters: {} claims and {} reads by {WAITERS} waiters in {periods} lease periods: \
         {per_period:.2} store operations per waiter per lease period",
        counts.claims, counts.gets
    );
    // Each waiter claims once, reads the holder, and then only reads, at each expiry it last
    // read: the holder renews every third of a lease, so the time left it reads is two thirds
    // of a lease or more, and a waiter asks at most 1.5 times a lease period.
    assert!(
        counts.claims <= WAITERS,
        "{} claims: a waiter claimed a name it had read as held",
        counts.claims
    );
    assert!(per_period <= 1.6, "{per_period:.2}");
    // One release wakes them all: about one attempt each, not a second wave for the winner's
    // claim.
    let before = counted.hook().counts().claims;
    t1.resign().await.unwrap();
    sleep(HINT_JITTER * 3).await;
    let herd = counted.hook().counts().claims - before;
    eprintln!("one release woke {WAITERS} waiters: {herd} claims");
    assert!(herd <= WAITERS + 2, "{herd} claims for {WAITERS} waiters");
    let mut won = 0;
    for t in tasks {
        if t.is_finished() {
            won += 1;
            let (term, _) = t.await.unwrap();
            term.unwrap().resign().await.unwrap();
        } else {
            t.abort();
        }
    }
    assert!(won >= 1);
}

#[tokio::test(start_paused = true)]
async fn acquire_times_out_with_a_message_naming_the_name_and_the_wait() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let a = coordinator(store.clone(), "a");
    let b = coordinator(store, "b");
    let _t1 = a.acquire("job", Duration::ZERO).await.unwrap();
    let started = Instant::now();
    let e = b.acquire("job", Duration::ZERO).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert_eq!(started.elapsed(), Duration::ZERO);
    let e = b.acquire("job", 20 * S).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    let waited = started.elapsed();
    assert!((20 * S..20 * S + S / 10).contains(&waited), "{waited:?}");
    let text = e.to_string();
    assert!(text.contains("'job'") && text.contains("20s"), "{text}");
    assert!(text.contains("held by a"), "{text}");
    assert_eq!(
        b.acquire("", S).await.unwrap_err().kind(),
        ErrorKind::InvalidName
    );
    b.close().await.unwrap();
    assert_eq!(
        b.acquire("job", S).await.unwrap_err().kind(),
        ErrorKind::Closed
    );
}

#[tokio::test(start_paused = true)]
async fn a_close_ends_a_waiting_acquire() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let a = coordinator(store.clone(), "a");
    let b = coordinator(store, "b");
    let _t1 = a.try_acquire("job").await.unwrap();
    let w = waiting(&b, "job", 600 * S);
    sleep(S).await;
    b.close().await.unwrap();
    let (r, _) = w.await.unwrap();
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Closed);
}

#[tokio::test(start_paused = true)]
async fn dropping_acquire_during_a_claim_leaves_no_lease_behind() {
    let stalled = faulty(MemoryStore::new());
    let inner = stalled.inner().clone();
    let b = coordinator(Arc::new(stalled.clone()), "b");
    stalled.hook().set_claim_mode(FaultMode::Stall);
    let w = waiting(&b, "job", 60 * S);
    sleep(S / 10).await;
    assert_eq!(stalled.hook().counts().claims, 1, "the claim is in flight");
    w.abort();
    assert!(w.await.unwrap_err().is_cancelled());
    // The claim goes through once the stall ends; nobody is left to take the term.
    stalled.hook().set_claim_mode(FaultMode::Pass);
    sleep(S / 10).await;
    let info = inner.get("job").await.unwrap().unwrap();
    assert_eq!(info.term, 1, "the claim took effect");
    assert!(!info.live, "the abandoned claim was released: {info:?}");
}

#[tokio::test(start_paused = true)]
async fn run_elected_hands_over_on_a_release_hint() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let a = coordinator(store.clone(), "a");
    let b = coordinator(store, "b");
    let t1 = a.try_acquire("job").await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let b2 = b.clone();
    let elector = tokio::spawn(async move {
        b2.run_elected("job", move |term: Term| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((term.token(), Instant::now()));
                term.done().await;
                Ok::<(), std::io::Error>(())
            }
        })
        .await
    });
    sleep(7 * S).await;
    let released = Instant::now();
    t1.resign().await.unwrap();
    let (token, started) = rx.recv().await.unwrap();
    assert!(token > t1.token());
    let took = started - released;
    assert!(took <= HINT_JITTER, "{took:?}");
    let follow = b.leadership("job");
    assert!(follow.borrow().held);
    b.close().await.unwrap();
    elector.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_watch_reports_claims_releases_and_expiries() {
    let store = faulty(MemoryStore::new());
    let observer_side: Arc<dyn LeaseStore> = Arc::new(store.inner().clone());
    let a = coordinator(Arc::new(store.clone()), "a");
    let mut watch = lease_core::Observer::from_arc(observer_side)
        .with_timings(timings())
        .watch("job")
        .unwrap();
    let t1 = a.try_acquire("job").await.unwrap();
    let first = watch.next().await.unwrap();
    assert!(
        matches!(&first, HolderChange::Claimed { instance, term, .. } if instance == "a" && *term == t1.token()),
        "{first:?}"
    );
    let since = Instant::now();
    t1.resign().await.unwrap();
    assert_eq!(
        watch.next().await.unwrap(),
        HolderChange::Released { term: t1.token() }
    );
    assert!(since.elapsed() <= HINT_JITTER);
    let t2 = a.try_acquire("job").await.unwrap();
    assert!(
        matches!(watch.next().await.unwrap(), HolderChange::Claimed { term, .. } if term == t2.token())
    );
    // The holder is cut off: the vacancy is reported at the store's expiry.
    let cut_at = Instant::now();
    store.hook().set_mode(FaultMode::Cut);
    assert_eq!(
        watch.next().await.unwrap(),
        HolderChange::Expired { term: t2.token() }
    );
    let after = cut_at.elapsed();
    assert!(
        after >= timings().lease() - timings().renew_every(),
        "{after:?}"
    );
    assert!(after <= timings().lease() + S / 10, "{after:?}");
    assert_eq!(watch.holder(), None);
}

/// Answers, while `lagging`, every claim "held" and every read "live, no time left": a store
/// whose record outlives its expiry for a while (NATS removes an entry at its max age on a
/// server timer; the client's estimate of the time left is already zero).
#[derive(Debug, Clone)]
struct LaggingExpiry {
    lagging: Arc<std::sync::atomic::AtomicBool>,
}

impl Hook for LaggingExpiry {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        if !self.lagging.load(std::sync::atomic::Ordering::SeqCst) {
            return op;
        }
        let forged = match call.operation {
            Operation::Claim => answer_as::<T, _>(None::<Grant>),
            Operation::Get => answer_as::<T, _>(Some(LeaseInfo {
                name: call.name.to_owned(),
                instance: "gone".to_owned(),
                term: 1,
                live: true,
                expires_in: Duration::ZERO,
            })),
            _ => None,
        };
        match forged {
            Some(answer) => Box::pin(async move { Ok(answer) }),
            None => op,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_record_that_outlives_its_expiry_does_not_make_the_waiter_spin() {
    let lagging = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let hook = LaggingExpiry {
        lagging: lagging.clone(),
    };
    let counted = faulty(MemoryStore::new().with_hook(hook));
    let b = coordinator(Arc::new(counted.clone()), "b");
    let w = waiting(&b, "job", 600 * S);
    let lag = S;
    sleep(lag).await;
    let claims = counted.hook().counts().claims;
    eprintln!("{claims} claims in {lag:?} behind a record with no time left");
    // Expiry-aware waking backs off while the store keeps answering "held, no time left":
    // a doubling pause from the margin (1, 2, 4 … ms), not a claim every few milliseconds.
    assert!(claims <= 15, "{claims} claims in {lag:?}: the waiter spins");
    lagging.store(false, std::sync::atomic::Ordering::SeqCst);
    let stopped = Instant::now();
    let (term, at) = w.await.unwrap();
    term.unwrap();
    let took = at - stopped;
    assert!(
        took <= lag + HINT_JITTER,
        "taken {took:?} after the record went"
    );
}

#[tokio::test(start_paused = true)]
async fn hints_cut_during_a_wait_fall_back_to_the_retry_pace() {
    let path = faulty(MemoryStore::new());
    let a = coordinator(Arc::new(path.inner().clone()), "a");
    let b = coordinator(Arc::new(path.clone()), "b");
    let t1 = a.try_acquire("job").await.unwrap();
    let w = waiting(&b, "job", 600 * S);
    // b sleeps with hints connected, for a's expiry about a lease away.
    sleep(S).await;
    let before = path.hook().counts().claims;
    path.hook().set_hint_mode(HintMode::Cut);
    sleep(S).await;
    // The link going down woke b for one claim; from now on it polls.
    let claims = path.hook().counts().claims - before;
    assert!(claims <= 1, "{claims} claims after the cut");
    let released = Instant::now();
    t1.resign().await.unwrap();
    let (t2, at) = w.await.unwrap();
    let took = at - released;
    let t = timings();
    assert!(
        took <= t.retry() + t.jitter(),
        "{took:?} after the release with hints cut: more than the retry pace"
    );
    t2.unwrap();
}

/// Hints that say connected and never come: every hint is dropped on the way while the link
/// reports up (a listener connection that died without a reset, a writer that cannot publish).
fn silent_hints() -> HintMode {
    HintMode::Chaos {
        drop_percent: 100,
        duplicate_percent: 0,
    }
}

#[tokio::test(start_paused = true)]
async fn a_watch_of_a_free_name_reads_once_a_lease_when_hints_say_connected_but_are_lost() {
    let silent = faulty(MemoryStore::new());
    silent.hook().set_hint_mode(silent_hints());
    let a = coordinator(Arc::new(silent.inner().clone()), "a");
    let mut watch = lease_core::Observer::from_arc(Arc::new(silent.clone()))
        .with_timings(timings())
        .watch("job")
        .unwrap();
    assert!(
        silent
            .changes(&lease_core::backend::notify::Topic::lease("job"))
            .unwrap()
            .is_connected(),
        "the silenced link must say connected"
    );
    // Nobody holds the name: the first read finds nothing to report, and the watch waits.
    let started = Instant::now();
    let next = tokio::spawn(async move {
        let change = watch.next().await;
        (change, Instant::now())
    });
    sleep(S).await;
    let t1 = a.try_acquire("job").await.unwrap();
    // No hint reaches the watch: it sees the claim at its next read, at most one lease (with
    // the expiry margin and hint jitter) after the first.
    let longest = timings().lease() + lease_core::backend::wait::EXPIRY_MARGIN + HINT_JITTER;
    let (change, at) = tokio::time::timeout(10 * timings().lease(), next)
        .await
        .expect("the watch never reported the claim: it waits for a hint alone")
        .unwrap();
    assert!(
        matches!(change.unwrap(), HolderChange::Claimed { term, .. } if term == t1.token()),
        "not the claim"
    );
    let took = at - started;
    eprintln!(
        "the watch saw a claim {took:?} after its first read (lease {:?}), no hint",
        timings().lease()
    );
    assert!(
        took <= longest,
        "the watch read {took:?} after its last read: more than one lease"
    );
    t1.resign().await.unwrap();

    // A watch of a name nobody claims asks once per lease, not more.
    let mut idle = lease_core::Observer::from_arc(Arc::new(silent.clone()))
        .with_timings(timings())
        .watch("idle")
        .unwrap();
    let before = silent.hook().counts().gets;
    let periods = 10u32;
    let idle_next = tokio::spawn(async move { idle.next().await });
    sleep(timings().lease() * periods).await;
    let reads = silent.hook().counts().gets - before;
    eprintln!("an idle watch with silent hints: {reads} reads in {periods} lease periods");
    assert!(
        (u64::from(periods)..=u64::from(periods) + 1).contains(&reads),
        "{reads} reads in {periods} lease periods"
    );
    assert!(!idle_next.is_finished());
    idle_next.abort();
}

#[tokio::test(start_paused = true)]
async fn a_waiter_behind_a_longer_lease_asks_once_a_lease_when_hints_say_connected_but_are_lost() {
    let silent = faulty(MemoryStore::new());
    silent.hook().set_hint_mode(silent_hints());
    // The holder's lease is four of the waiter's: the waiter reads an expiry 60 s away.
    let long = Coordinator::builder(Arc::new(silent.inner().clone()))
        .instance("a")
        .timings(Timings::from_lease(60 * S).unwrap())
        .build()
        .unwrap();
    let b = coordinator(Arc::new(silent.clone()), "b");
    let t1 = long.try_acquire("job").await.unwrap();
    let started = Instant::now();
    let w = waiting(&b, "job", 600 * S);
    sleep(5 * S).await;
    assert!(!w.is_finished());
    t1.resign().await.unwrap();
    // No hint of the release reaches b: it asks again at most one lease of its own timings
    // (with the expiry margin and hint jitter) after it last asked, not at the expiry it read.
    let (t2, at) = w.await.unwrap();
    t2.unwrap();
    let took = at - started;
    eprintln!("the waiter won {took:?} after it began, the holder's release at 5s unhinted");
    let longest = timings().lease() + lease_core::backend::wait::EXPIRY_MARGIN + HINT_JITTER;
    assert!(
        took <= longest,
        "the waiter claimed {took:?} after it began: more than one lease without asking the \
         store (the holder's lease, read as {:?})",
        60 * S
    );
}
