//! The counted-lease cases can fail: each is run here over a memory store broken in the way
//! the case checks, and must panic with the case's own message.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_conformance::history::{CountedGrants, CountedGrantsReport};
use lease_conformance::{ChaosConfig, FaultMode, Harness, HintMode, cases, faulty, panic_of};
use lease_core::backend::notify::{Topic, Wakeups};
use lease_core::backend::{Grant, HolderToken, async_trait};
use lease_core::{
    Coordinator, LeaseStore, Permits, Result, Timings,
    backend::{
        Capabilities, LeaseInfo,
        permits::{PermitGrant, PermitInfo, PermitStore},
    },
};
use lease_local::MemoryStore;

/// How the store is broken.
#[derive(Debug, Clone, Copy)]
enum Breakage {
    /// Every counted claim is granted against a count one higher than asked: N+1 holders.
    OneTooMany,
    /// The read-back of a claim never finds it: a lost answer leads to a second claim.
    BlindReadBack,
    /// Tokens counted per permit instead of per name: two permits share a token.
    TermPerPermit,
    /// Only the permits below the asked N are counted (as a store that counts, then takes, and
    /// never counts again would): a claim of 3 is granted while permits at or above 3, taken
    /// by claims of a larger N, are live.
    CountsBelowN,
}

/// A memory store, broken as its [`Breakage`] says.
#[derive(Debug, Clone)]
struct Broken {
    inner: MemoryStore,
    breakage: Breakage,
}

impl Broken {
    /// The inner store's counted leases.
    fn counted(&self) -> &dyn PermitStore {
        &self.inner
    }

    fn counts_below_n() -> Broken {
        Broken {
            inner: MemoryStore::new(),
            breakage: Breakage::CountsBelowN,
        }
    }

    fn harness(breakage: Breakage) -> Harness {
        Harness::new(Arc::new(Broken {
            inner: MemoryStore::new(),
            breakage,
        }))
    }

    /// The term as a per-permit sequence would have it: the permit's own count of grants.
    async fn per_permit(&self, name: &str, permit: u32, term: u64) -> u64 {
        match self.breakage {
            Breakage::TermPerPermit => {
                let all = self.counted().permits(name).await.unwrap_or_default();
                // Grants so far on lower permits, taken off: permits 0 and 1 both start at 1.
                let lower: u64 = all.iter().filter(|p| p.permit < permit).map(|_| 1).sum();
                term.saturating_sub(lower).max(1)
            }
            _ => term,
        }
    }
}

#[async_trait]
impl LeaseStore for Broken {
    fn backend(&self) -> &'static str {
        "broken-memory"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // Terms are not consecutive once broken; the cases then check "strictly more".
            consecutive_terms: false,
            ..self.inner.capabilities()
        }
    }
    fn permit_store(&self) -> Option<&dyn PermitStore> {
        Some(self)
    }
    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.inner.claim(name, holder, instance, ttl).await
    }
    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.inner.renew(name, holder, ttl).await
    }
    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.inner.release(name, holder).await
    }
    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.inner.verify(name, holder).await
    }
    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.inner.get(name).await
    }
    fn changes(&self, topic: &Topic) -> Option<Wakeups> {
        self.inner.changes(topic)
    }
}

#[async_trait]
impl PermitStore for Broken {
    async fn claim_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<PermitGrant>> {
        let asked = match self.breakage {
            Breakage::OneTooMany => permits + 1,
            Breakage::CountsBelowN => {
                let above = self
                    .counted()
                    .permits(name)
                    .await?
                    .iter()
                    .filter(|p| p.live && p.permit >= permits)
                    .count();
                permits + u32::try_from(above).unwrap()
            }
            _ => permits,
        };
        let Some(mut g) = self
            .counted()
            .claim_permit(name, asked, holder, instance, ttl)
            .await?
        else {
            return Ok(None);
        };
        if matches!(self.breakage, Breakage::CountsBelowN) && g.permit >= permits {
            // Never above the asked N: taken back, as if that permit had not been free.
            self.counted()
                .release_permit(name, g.permit, holder)
                .await?;
            return Ok(None);
        }
        g.grant.term = self.per_permit(name, g.permit, g.grant.term).await;
        Ok(Some(g))
    }
    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.counted().renew_permit(name, permit, holder, ttl).await
    }
    async fn release_permit(&self, name: &str, permit: u32, holder: &HolderToken) -> Result<bool> {
        self.counted().release_permit(name, permit, holder).await
    }
    async fn verify_permit(&self, name: &str, holder: &HolderToken) -> Result<Option<PermitGrant>> {
        match self.breakage {
            Breakage::BlindReadBack => Ok(None),
            _ => self.counted().verify_permit(name, holder).await,
        }
    }
    async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
        self.counted().permits(name).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_race_case_fails_when_the_store_grants_one_permit_too_many() {
    let h = Broken::harness(Breakage::OneTooMany);
    let msg = panic_of(async move {
        cases::at_most_n_permits_are_granted_among_concurrent_claimers(&h).await
    })
    .await;
    assert!(
        msg.contains("4 claimers won one of 3 permits"),
        "the race case passed over N+1 grants: {msg:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_case_fails_when_the_store_grants_one_permit_too_many() {
    let h = Broken::harness(Breakage::OneTooMany);
    let msg =
        panic_of(async move { cases::at_most_n_holders_among_many_contenders(&h).await }).await;
    assert!(
        msg.contains("more than the limit of 3 allows"),
        "the N-holder history passed over N+1 grants: {msg:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unknown_outcome_case_fails_when_the_read_back_is_blind() {
    let h = Broken::harness(Breakage::BlindReadBack);
    let msg = panic_of(async move {
        cases::an_unknown_permit_claim_never_leaves_one_acquirer_two_permits(&h).await
    })
    .await;
    assert!(
        // The store-level read-back, or (were it skipped) the coordinators' leaked claims.
        msg.contains("did not adopt") || msg.contains("not the terms held"),
        "the unknown-outcome case passed over a blind read-back: {msg:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_cases_fail_when_tokens_count_per_permit() {
    let h = Broken::harness(Breakage::TermPerPermit);
    let h2 = h.clone();
    let msg = panic_of(async move {
        cases::permit_terms_increase_per_name_across_release_and_expiry(&h).await
    })
    .await;
    assert!(
        msg.contains("does not increase"),
        "the token case passed over per-permit tokens: {msg:?}"
    );
    let msg = panic_of(async move {
        cases::at_most_n_permits_are_granted_among_concurrent_claimers(&h2).await
    })
    .await;
    assert!(
        msg.contains("share a token") || msg.contains("after token"),
        "the race case passed over per-permit tokens: {msg:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_permit_wake_case_fails_when_a_store_that_says_watch_sends_no_hints() {
    // The fault hook reports the memory store's capabilities (watch: true) but cuts its hints.
    let mute = faulty(MemoryStore::new());
    mute.hook().set_hint_mode(HintMode::Cut);
    let h = Harness::new(Arc::new(mute));
    let msg =
        panic_of(async move { cases::a_permit_release_wakes_a_waiter_at_once(&h).await }).await;
    assert!(
        msg.contains("did not wake the permit waiter"),
        "the permit wake case passed without hints: {msg:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mixed_count_case_fails_when_only_permits_below_n_are_counted() {
    let h = Broken::harness(Breakage::CountsBelowN);
    let msg =
        panic_of(async move { cases::claims_of_different_counts_keep_each_claims_limit(&h).await })
            .await;
    assert!(
        msg.contains("was granted while 3 or more others were live"),
        "the mixed-count case passed over a store that counts only below N: {msg:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mixed_count_chaos_case_fails_when_only_permits_below_n_are_counted() {
    let broken = Broken::counts_below_n();
    let path = faulty(broken.clone());
    let h = Harness::new(Arc::new(broken))
        .with_faults(Arc::new(path.clone()), Arc::new(path.hook().clone()));
    let msg = panic_of(async move {
        cases::claims_of_different_counts_keep_each_claims_limit_under_chaos(&h).await
    })
    .await;
    assert!(
        msg.contains("a claim of 3 granted while"),
        "the mixed-count chaos case passed over a store that counts only below N: {msg:?}"
    );
}

// The "at most N" judgment of claims of different counts (`history::CountedGrants`) can fail,
// and does not fail a correct store: claims of 3 and 5 race through coordinators on a memory
// store under chaos (lost answers read back, held answers, delays), and on one that counts only
// the permits below the asked N.

fn timings() -> Timings {
    Timings::from_lease(Duration::from_secs(2)).unwrap()
}

fn coordinator(store: Arc<dyn LeaseStore>, who: &str) -> Coordinator {
    Coordinator::builder(store)
        .instance(who)
        .timings(timings())
        .build()
        .unwrap()
}

/// Five claims of 5 take every permit, the one on permit 0 resigns, then a claim of 3 asks:
/// four others are live, so a correct store refuses it.
async fn claim_of_three_behind_four_of_five(store: Arc<dyn LeaseStore>) -> CountedGrants {
    let grants = CountedGrants::new(timings().lease());
    let (three, five) = (
        Permits::new("mixed", 3).unwrap(),
        Permits::new("mixed", 5).unwrap(),
    );
    let big = coordinator(store.clone(), "five");
    let mut held = Vec::new();
    for _ in 0..5 {
        let sent = Instant::now();
        let term = big.try_acquire(&five).await.unwrap();
        let id = grants.granted("five", 5, term.token(), sent, Instant::now());
        held.push((term, id));
    }
    let (first, id) = held.remove(0);
    assert_eq!(first.permit(), Some(0));
    grants.ended(id, Instant::now());
    first.resign().await.unwrap();
    let small = coordinator(store, "three");
    let sent = Instant::now();
    if let Ok(term) = small.try_acquire(&three).await {
        grants.granted("three", 3, term.token(), sent, Instant::now());
        term.resign().await.unwrap();
    }
    for (term, id) in held {
        grants.ended(id, Instant::now());
        term.resign().await.unwrap();
    }
    grants
}

#[tokio::test]
async fn a_claim_of_three_behind_four_of_five_is_judged_over_its_limit() {
    let broken = claim_of_three_behind_four_of_five(Arc::new(Broken::counts_below_n()))
        .await
        .report();
    assert_eq!(broken.over_limit, 1, "{broken}: {:?}", broken.violations);
    assert!(
        broken.violations[0].contains("three@6: a claim of 3 granted while 4 others were live"),
        "{:?}",
        broken.violations
    );
    let sound = claim_of_three_behind_four_of_five(Arc::new(MemoryStore::new()))
        .await
        .report();
    assert!(sound.is_clean(), "{sound}: {:?}", sound.violations);
    assert_eq!((sound.of(5), sound.of(3)), (5, 0));
}

/// Three claimers of 3 and three of 5 race through coordinators, each holding a few
/// milliseconds, in rounds of half a second, until `enough` says the record (every grant) is
/// enough to judge, or for at most 30 s (a busy machine only takes more rounds).
async fn race(
    store: Arc<dyn LeaseStore>,
    enough: impl Fn(&CountedGrantsReport) -> bool,
) -> CountedGrantsReport {
    let grants = CountedGrants::new(timings().lease());
    for _ in 0..60 {
        race_round(store.clone(), &grants, Duration::from_millis(500)).await;
        let report = grants.report();
        if enough(&report) {
            return report;
        }
    }
    grants.report()
}

/// One round of [`race`].
async fn race_round(store: Arc<dyn LeaseStore>, grants: &CountedGrants, race: Duration) {
    let started = Instant::now();
    let mut claimers = Vec::new();
    for i in 0..6u32 {
        let permits = if i % 2 == 0 { 3 } else { 5 };
        let pool = Permits::new("race", permits).unwrap();
        let who = format!("claimer-{i}");
        let c = coordinator(store.clone(), &who);
        let grants = grants.clone();
        claimers.push(tokio::spawn(async move {
            while started.elapsed() < race {
                let sent = Instant::now();
                match c.try_acquire(&pool).await {
                    Ok(term) => {
                        let id = grants.granted(&who, permits, term.token(), sent, Instant::now());
                        let hold = u64::from(rand::random::<u8>() % 6);
                        tokio::time::sleep(Duration::from_millis(hold)).await;
                        grants.ended(id, Instant::now());
                        let _ = term.resign().await;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                }
            }
            c.close().await.unwrap();
        }));
    }
    for c in claimers {
        c.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claims_of_three_and_five_are_judged_per_claim() {
    // A correct store under chaos: lost answers read back and adopted, held answers adopted
    // after the attempt timed out, delays. No grant is judged over its limit.
    let chaotic = faulty(MemoryStore::new());
    let config = ChaosConfig::new(3);
    chaotic.hook().set_mode(FaultMode::Chaos(config));
    let sound = race(Arc::new(chaotic.clone()), |r| {
        r.of(3) >= 20 && r.of(5) >= 20
    })
    .await;
    let chaos = chaotic.hook().chaos_counts();
    eprintln!("memory store, {config}: {sound}; chaos: {chaos}");
    assert!(sound.is_clean(), "{sound}: {:?}", sound.violations);
    assert!(sound.of(3) >= 20 && sound.of(5) >= 20, "{sound}");
    assert!(chaos.lost > 0 && chaos.held > 0, "{chaos}");

    let broken = race(Arc::new(Broken::counts_below_n()), |r| r.over_limit > 0).await;
    eprintln!("store counting only below N: {broken}");
    assert!(broken.over_limit > 0, "{broken}");
    assert!(
        broken.violations[0].contains("a claim of 3 granted while"),
        "{:?}",
        broken.violations
    );
}
