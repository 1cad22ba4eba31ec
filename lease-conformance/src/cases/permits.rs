//! Counted leases (see `lease_core::backend::permits`): at most N live holders of a name, the
//! lowest free permit, one strictly increasing token sequence per name across its permits, expiry
//! by the store's clock, no second permit for one acquirer after an unknown outcome, typed bad
//! input, and a changed N applying to new claims only.
//!
//! Every case runs where the store's `capabilities().permits` is true; elsewhere it says so,
//! loudly, and returns.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lease_core::backend::HolderToken;
use lease_core::backend::permits::MAX_PERMITS;
use lease_core::{
    ErrorKind, LeaseStore, Permits,
    backend::{LeaseStoreExt, permits::PermitGrant},
};
use tokio::time::{Instant, sleep};

use super::{WAKE_BOUND, assert_first_term, assert_next_term, mint, needs_expiry};
use crate::history::{CountedGrants, History};
use crate::{ChaosConfig, FaultMode, Harness, faulty};

/// The permit count most cases use.
const N: u32 = 3;

/// `true` when the store has counted leases; otherwise notes, loudly, that `case` did not run.
fn needs_permits(h: &Harness, case: &str) -> bool {
    assert!(
        !h.caps().permits || h.store.permit_store().is_some(),
        "{}: capabilities().permits is true but permit_store() answers None, so every permit \
         operation is refused as unsupported: take the flag from `..derived_capabilities(self)` \
         and answer permit_store() with Some(self) once PermitStore is implemented",
        h.backend()
    );
    if !h.caps().permits {
        h.not_applicable_loudly(
            case,
            "the store has no counted leases (capabilities().permits is false)",
        );
        return false;
    }
    true
}

async fn claim(
    h: &Harness,
    name: &str,
    n: u32,
    holder: &HolderToken,
    instance: &str,
) -> Option<PermitGrant> {
    match h.store.claim_permit(name, n, holder, instance, h.ttl).await {
        Ok(g) => g,
        Err(e) => panic!("{}: claim of a permit of {name} failed: {e}", h.backend()),
    }
}

async fn must_claim(
    h: &Harness,
    name: &str,
    n: u32,
    holder: &HolderToken,
    instance: &str,
) -> PermitGrant {
    match claim(h, name, n, holder, instance).await {
        Some(g) => g,
        None => panic!(
            "{}: a claim of one of {n} permits of {name} by {instance} was refused though one \
             was free",
            h.backend()
        ),
    }
}

/// The live permits of `name` by the store's account, as (permit, instance, term).
async fn live(h: &Harness, name: &str) -> Vec<(u32, String, u64)> {
    let all = h.store.permits(name).await.unwrap();
    all.into_iter()
        .filter(|p| p.live)
        .map(|p| (p.permit, p.instance, p.term))
        .collect()
}

/// Claims up to `n` hand out the lowest free permit with a fresh token each; the (n+1)-th is
/// refused, and so is a second claim by a holder that holds one. Verify finds each holder's
/// permit by its token alone; renewal keeps the term and works only for the holder of that
/// permit; `permits` lists each holder, term and time left.
pub async fn permit_claims_take_the_lowest_free_permit_up_to_n(h: &Harness) {
    if !needs_permits(h, "permit_claims_take_the_lowest_free_permit_up_to_n") {
        return;
    }
    let name = h.name("permits");
    assert!(h.store.permits(&name).await.unwrap().is_empty());
    let holders: Vec<HolderToken> = (0..N).map(|_| mint()).collect();
    let mut grants: Vec<PermitGrant> = Vec::new();
    for (i, holder) in holders.iter().enumerate() {
        let g = must_claim(h, &name, N, holder, &format!("p{i}")).await;
        assert_eq!(g.permit, i as u32, "the lowest free permit is taken");
        match grants.last() {
            None => assert_first_term(h, g.grant.term, "the first permit"),
            Some(prev) => assert_next_term(h, prev.grant.term, g.grant.term, "the next permit"),
        }
        if h.caps().expiry {
            assert!(
                g.grant.expires_in <= h.ttl
                    && g.grant.expires_in + h.slack + h.caps().clock_granularity >= h.ttl,
                "expires_in {:?} should be close to the ttl {:?}",
                g.grant.expires_in,
                h.ttl
            );
        }
        grants.push(g);
    }
    assert_eq!(
        claim(h, &name, N, &mint(), "extra").await,
        None,
        "{}: a claim got a permit beyond the {N}",
        h.backend()
    );
    // Raise N by one, so only the rule "no holder twice" can refuse it.
    assert_eq!(
        claim(h, &name, N + 1, &holders[0], "p0").await,
        None,
        "{}: a holder of a live permit got a second one",
        h.backend()
    );
    for (holder, g) in holders.iter().zip(&grants) {
        let v = h.store.verify_permit(&name, holder).await.unwrap();
        let v = v.unwrap_or_else(|| panic!("{}: a holder does not verify", h.backend()));
        assert_eq!((v.permit, v.grant.term), (g.permit, g.grant.term));
    }
    assert_eq!(h.store.verify_permit(&name, &mint()).await.unwrap(), None);
    let listed = live(h, &name).await;
    let expected: Vec<(u32, String, u64)> = grants
        .iter()
        .enumerate()
        .map(|(i, g)| (g.permit, format!("p{i}"), g.grant.term))
        .collect();
    assert_eq!(
        listed,
        expected,
        "{}: permits() lists the holders",
        h.backend()
    );
    if h.caps().expiry {
        for p in h.store.permits(&name).await.unwrap() {
            assert!(p.expires_in <= h.ttl && !p.expires_in.is_zero(), "{p:?}");
        }
    }
    // Renewal: the holder of the permit, that permit only; the term is kept.
    sleep(h.ttl / 4).await;
    let r = h
        .store
        .renew_permit(&name, 1, &holders[1], h.ttl)
        .await
        .unwrap();
    let r = r.unwrap_or_else(|| panic!("{}: renewal of a live permit failed", h.backend()));
    assert_eq!(r.term, grants[1].grant.term, "renewal keeps the term");
    if h.caps().expiry {
        assert!(
            r.expires_in + h.slack + h.caps().clock_granularity >= h.ttl,
            "renewal reports {r:?}"
        );
    }
    assert_eq!(
        h.store
            .renew_permit(&name, 2, &holders[1], h.ttl)
            .await
            .unwrap(),
        None,
        "{}: a holder renewed another holder's permit",
        h.backend()
    );
    assert_eq!(
        h.store
            .renew_permit(&name, 0, &mint(), h.ttl)
            .await
            .unwrap(),
        None
    );
    assert!(
        !h.store.release_permit(&name, 0, &holders[1]).await.unwrap(),
        "{}: a holder released another holder's permit",
        h.backend()
    );
    assert_eq!(live(h, &name).await.len(), N as usize);
    // A plain lease of the name is a different thing.
    let plain = h.store.claim(&name, &mint(), "plain", h.ttl).await.unwrap();
    assert!(
        plain.is_some(),
        "{}: the permits of a name kept its plain lease from being claimed",
        h.backend()
    );
    assert_eq!(live(h, &name).await.len(), N as usize);
    for (i, holder) in holders.iter().enumerate() {
        assert!(
            h.store
                .release_permit(&name, i as u32, holder)
                .await
                .unwrap()
        );
    }
    assert!(live(h, &name).await.is_empty());
}

/// Many claimers race for the permits of one free name at once: exactly N win, on distinct
/// permits below N, with distinct tokens above every token of the rounds before, round after
/// round.
pub async fn at_most_n_permits_are_granted_among_concurrent_claimers(h: &Harness) {
    if !needs_permits(h, "at_most_n_permits_are_granted_among_concurrent_claimers") {
        return;
    }
    let name = h.name("permit-race");
    let mut top = 0u64;
    for round in 0..6 {
        let mut tasks = Vec::new();
        for i in 0..16 {
            let store = h.store.clone();
            let name = name.clone();
            let ttl = h.ttl;
            tasks.push(tokio::spawn(async move {
                let holder = mint();
                let g = store
                    .claim_permit(&name, N, &holder, &format!("c{i}"), ttl)
                    .await;
                (holder, g)
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            let (holder, g) = t.await.expect("claimer task");
            match g {
                Ok(Some(g)) => winners.push((holder, g)),
                Ok(None) => {}
                Err(e) => panic!("{}: concurrent permit claim failed: {e}", h.backend()),
            }
        }
        assert_eq!(
            winners.len(),
            N as usize,
            "{}: round {round}: {} claimers won one of {N} permits",
            h.backend(),
            winners.len()
        );
        let permits: BTreeSet<u32> = winners.iter().map(|(_, g)| g.permit).collect();
        assert_eq!(
            permits,
            (0..N).collect(),
            "{}: round {round}: permits",
            h.backend()
        );
        let terms: BTreeSet<u64> = winners.iter().map(|(_, g)| g.grant.term).collect();
        assert_eq!(
            terms.len(),
            N as usize,
            "{}: round {round}: two winners share a token: {winners:?}",
            h.backend()
        );
        let low = terms.first().copied().unwrap_or_default();
        assert!(
            low > top,
            "{}: round {round}: token {low} after token {top} of an earlier round",
            h.backend()
        );
        top = terms.last().copied().unwrap_or_default();
        for (holder, g) in &winners {
            assert!(
                h.store
                    .release_permit(&name, g.permit, holder)
                    .await
                    .unwrap()
            );
        }
    }
}

/// Contenders campaign for one of N permits with `Coordinator::acquire` and run short sections
/// while they hold one: the history, checked with a limit of N, never has more than N
/// sections open and no token entered by two holders, and the permits were used at once (more
/// than one section open at a time).
pub async fn at_most_n_holders_among_many_contenders(h: &Harness) {
    if !needs_permits(h, "at_most_n_holders_among_many_contenders") {
        return;
    }
    let target = Permits::new(h.name("permit-history"), N).unwrap();
    let history = History::with_limit(N as usize);
    let sections = Arc::new(AtomicU64::new(0));
    // Terms on a permit at or above N (judged after the history, which is what this case shows).
    let beyond = Arc::new(AtomicU64::new(0));
    let stop_at = Instant::now() + h.timings.lease() * 2;
    let mut coordinators = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let c = h.coordinator(&format!("contender-{i}"));
        coordinators.push(c.clone());
        let history = history.clone();
        let sections = sections.clone();
        let beyond = beyond.clone();
        let target = target.clone();
        let limit = h.timings.lease() * 2;
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                let term = match c.acquire(&target, limit).await {
                    Ok(term) => term,
                    Err(e) if e.is(ErrorKind::Timeout) => continue,
                    Err(e) => panic!("acquire of a permit failed: {e}"),
                };
                if term.permit().is_none_or(|p| p >= N) {
                    beyond.fetch_add(1, Ordering::SeqCst);
                }
                let who = term.instance().to_owned();
                for _ in 0..3 {
                    if term.check().is_err() {
                        break;
                    }
                    let s = history.enter(&who, term.token());
                    sleep(Duration::from_millis(15)).await;
                    drop(s);
                    sections.fetch_add(1, Ordering::SeqCst);
                }
                term.resign().await.ok();
                sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender task");
    }
    for c in &coordinators {
        let _ = c.close().await;
    }
    let report = history.report();
    eprintln!(
        "{}: {N} permits among 8 contenders: {report}, at most {} open at once",
        h.backend(),
        report.peak_open
    );
    history.assert_clean();
    assert_eq!(
        beyond.load(Ordering::SeqCst),
        0,
        "{}: terms held a permit at or above {N}",
        h.backend()
    );
    assert!(
        report.peak_open >= 2,
        "{}: the permits were never held at once: {report}",
        h.backend()
    );
    assert!(
        report.distinct_terms > u64::from(N),
        "too few hand-overs: {report}"
    );
    assert!(
        h.step_down_failures().is_empty(),
        "{:?}",
        h.step_down_failures()
    );
}

/// Tokens strictly increase per name across all its permits: every grant — after claims,
/// releases and expiries on any permit — is above every token issued before, and a permit that
/// changes hands never repeats one. The records keep each permit's last term.
pub async fn permit_terms_increase_per_name_across_release_and_expiry(h: &Harness) {
    if !needs_permits(
        h,
        "permit_terms_increase_per_name_across_release_and_expiry",
    ) {
        return;
    }
    let name = h.name("permit-terms");
    let (a, b, c, d) = (mint(), mint(), mint(), mint());
    let ga = must_claim(h, &name, 2, &a, "a").await;
    let gb = must_claim(h, &name, 2, &b, "b").await;
    assert_next_term(h, ga.grant.term, gb.grant.term, "the second permit");
    assert!(h.store.release_permit(&name, ga.permit, &a).await.unwrap());
    assert!(
        !h.store.release_permit(&name, ga.permit, &a).await.unwrap(),
        "a second release ends nothing"
    );
    assert_eq!(
        h.store
            .renew_permit(&name, ga.permit, &a, h.ttl)
            .await
            .unwrap(),
        None,
        "a released permit was renewed"
    );
    let gc = must_claim(h, &name, 2, &c, "c").await;
    assert_eq!(
        gc.permit, ga.permit,
        "the released permit is the lowest free one"
    );
    assert_next_term(h, gb.grant.term, gc.grant.term, "after a release");
    assert!(h.store.release_permit(&name, gb.permit, &b).await.unwrap());
    assert!(h.store.release_permit(&name, gc.permit, &c).await.unwrap());
    let records = h.store.permits(&name).await.unwrap();
    let terms: Vec<(u32, u64, bool)> = records.iter().map(|p| (p.permit, p.term, p.live)).collect();
    // On a store whose server removes ended records (keeps_ended_records: false), released
    // permits leave none, as ended leases do (see assert_ended).
    let kept = if h.caps().keeps_ended_records {
        vec![(0, gc.grant.term, false), (1, gb.grant.term, false)]
    } else {
        Vec::new()
    };
    assert_eq!(
        terms,
        kept,
        "{}: ended permits keep their last term",
        h.backend()
    );
    let gd = must_claim(h, &name, 2, &d, "d").await;
    assert_eq!(gd.permit, 0);
    assert_next_term(
        h,
        gc.grant.term,
        gd.grant.term,
        "after every permit was released",
    );
    if !needs_expiry(h, "permit_terms_increase (expiry part)") {
        return;
    }
    sleep(h.ttl + h.slack).await;
    assert!(
        live(h, &name).await.is_empty(),
        "an unrenewed permit outlived its TTL"
    );
    let e = mint();
    let ge = must_claim(h, &name, 2, &e, "e").await;
    assert_eq!(ge.permit, 0);
    assert_next_term(h, gd.grant.term, ge.grant.term, "after expiry");
    assert_eq!(
        h.store.renew_permit(&name, 0, &d, h.ttl).await.unwrap(),
        None,
        "an expired holder renewed a permit taken since"
    );
}

/// A holder that stops renewing loses its permit at its TTL by the store's clock, and not
/// before: while the other holders renew, a newcomer is refused until then, and then takes
/// exactly the dead holder's permit with a higher token.
pub async fn a_dead_holders_permit_frees_itself_at_its_ttl(h: &Harness) {
    let case = "a_dead_holders_permit_frees_itself_at_its_ttl";
    if !needs_permits(h, case) || !needs_expiry(h, case) {
        return;
    }
    let name = h.name("permit-expiry");
    let (dead, alive, newcomer) = (mint(), mint(), mint());
    let start = Instant::now();
    let gd = must_claim(h, &name, 2, &dead, "dead").await;
    let ga = must_claim(h, &name, 2, &alive, "alive").await;
    // Not before `ttl − clock granularity` from the dead holder's claim being sent (the unsafe
    // direction has no other slack); the renewing holder keeps its own permit meanwhile.
    let bound = h.ttl.saturating_sub(h.caps().clock_granularity);
    // A probe answered past the bound may have got the permit: allowed, and it is the
    // newcomer's grant below.
    let past_bound = loop {
        let got = claim(h, &name, 2, &newcomer, "newcomer").await;
        let answered = start.elapsed();
        if answered >= bound {
            break got;
        }
        assert_eq!(
            got,
            None,
            "{}: a permit was claimed {answered:?} after the dead holder's claim of a {:?} lease \
             was sent (clock granularity {:?})",
            h.backend(),
            h.ttl,
            h.caps().clock_granularity
        );
        let r = h
            .store
            .renew_permit(&name, ga.permit, &alive, h.ttl)
            .await
            .unwrap();
        assert!(r.is_some(), "the renewing holder lost its permit");
        let left = bound.saturating_sub(start.elapsed());
        sleep((h.ttl / 6).min(left / 2).max(Duration::from_millis(5))).await;
    };
    sleep((h.ttl + h.slack).saturating_sub(start.elapsed())).await;
    h.store
        .renew_permit(&name, ga.permit, &alive, h.ttl)
        .await
        .unwrap()
        .expect("the renewing holder keeps its permit");
    let g = match past_bound {
        Some(g) => g,
        None => must_claim(h, &name, 2, &newcomer, "newcomer").await,
    };
    assert_eq!(
        g.permit, gd.permit,
        "the dead holder's permit is the free one"
    );
    assert_next_term(h, ga.grant.term, g.grant.term, "after the expiry");
    assert_eq!(h.store.verify_permit(&name, &dead).await.unwrap(), None);
    assert_eq!(
        h.store
            .renew_permit(&name, gd.permit, &dead, h.ttl)
            .await
            .unwrap(),
        None,
        "the dead holder revived its permit"
    );
    assert_eq!(
        claim(h, &name, 2, &mint(), "late").await,
        None,
        "a third holder of 2 permits"
    );
}

/// A claim whose answer is lost is read back by the holder token (`read_back_permit`) and
/// adopted, never claimed again: a retry under the same token is refused, and acquirers whose
/// every claim answer was lost end up with one permit each — the store's live permits are
/// exactly the terms the coordinators hold.
pub async fn an_unknown_permit_claim_never_leaves_one_acquirer_two_permits(h: &Harness) {
    if !needs_permits(
        h,
        "an_unknown_permit_claim_never_leaves_one_acquirer_two_permits",
    ) {
        return;
    }
    let name = h.name("permit-unknown");
    // Coordinator level: every claim's answer is lost (the claim itself lands).
    let lossy = faulty(h.store.clone());
    lossy.hook().set_claim_mode(FaultMode::LoseAnswers);
    let lossy: Arc<dyn LeaseStore> = Arc::new(lossy);
    let target = Permits::new(name.clone(), N).unwrap();
    let mut terms = Vec::new();
    let mut coordinators = Vec::new();
    for i in 0..N {
        let c = h.coordinator_over(lossy.clone(), &format!("lost-{i}"));
        let term = c
            .acquire(&target, h.timings.lease() * 4)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{}: an acquire whose claim answer was lost did not adopt its claim: {e}",
                    h.backend()
                )
            });
        terms.push(term);
        coordinators.push(c);
    }
    let mut held: Vec<(u32, String, u64)> = terms
        .iter()
        .map(|t| (t.permit().unwrap(), t.instance().to_owned(), t.token()))
        .collect();
    held.sort();
    assert_eq!(
        live(h, &name).await,
        held,
        "{}: the store's live permits are not the terms held (a lost answer led to a second \
         claim)",
        h.backend()
    );
    let other = h.coordinator("other");
    assert_eq!(
        other.try_acquire(&target).await.unwrap_err().kind(),
        ErrorKind::Held
    );
    for t in terms {
        t.resign().await.unwrap();
    }
    assert!(live(h, &name).await.is_empty());
    for c in coordinators {
        let _ = c.close().await;
    }

    // Store level: the retry of a claim that took effect is refused; the read-back finds it.
    let a = mint();
    let g = must_claim(h, &name, N, &a, "a").await;
    assert_eq!(
        claim(h, &name, N, &a, "a").await,
        None,
        "{}: a retried claim gave its holder a second permit",
        h.backend()
    );
    let v = h.store.verify_permit(&name, &a).await.unwrap();
    assert_eq!(
        v.map(|v| (v.permit, v.grant.term)),
        Some((g.permit, g.grant.term)),
        "{}: the read-back by holder token did not find the claim",
        h.backend()
    );
    // The coordinator's read-back of a claim (it knows the claim's count) adopts it too, with
    // its term, and leaves it held.
    let r = h.store.read_back_permit(&name, N, &a).await.unwrap();
    assert_eq!(
        r.map(|r| (r.permit, r.grant.term)),
        Some((g.permit, g.grant.term)),
        "{}: read_back_permit did not find the claim",
        h.backend()
    );
    assert_eq!(
        live(h, &name).await.iter().map(|p| p.0).collect::<Vec<_>>(),
        [g.permit],
        "{}: the read-back changed which permits are live",
        h.backend()
    );
    assert!(h.store.release_permit(&name, g.permit, &a).await.unwrap());
}

/// Bad input to a permit operation gets a typed error: a count of 0 or above `MAX_PERMITS`,
/// and a permit index `MAX_PERMITS` or above, `InvalidArgument`; a bad name `InvalidName`; a
/// bad TTL `InvalidTimings`. Nothing is written.
pub async fn bad_permit_input_is_refused(h: &Harness) {
    if !needs_permits(h, "bad_permit_input_is_refused") {
        return;
    }
    use ErrorKind::{InvalidArgument, InvalidName, InvalidTimings};
    let name = h.name("permit-bad");
    let a = mint();
    let ttl = h.ttl;
    let s = h.store.as_ref();
    let kind = |r: lease_core::Result<Option<PermitGrant>>| r.err().map(|e| e.kind());
    for n in [0, MAX_PERMITS + 1, u32::MAX] {
        let e = s.claim_permit(&name, n, &a, "a", ttl).await;
        assert_eq!(kind(e), Some(InvalidArgument), "{}: count {n}", h.backend());
        let e = Permits::new(name.clone(), n).unwrap_err();
        assert_eq!(e.kind(), InvalidArgument, "{e}");
    }
    let e = s.claim_permit(&name, 0, &a, "a", ttl).await.unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
    let e = s
        .claim_permit(&name, MAX_PERMITS + 1, &a, "a", ttl)
        .await
        .unwrap_err();
    assert!(e.to_string().contains(&MAX_PERMITS.to_string()), "{e}");
    for index in [MAX_PERMITS, u32::MAX] {
        let e = s.renew_permit(&name, index, &a, ttl).await.unwrap_err();
        assert_eq!(e.kind(), InvalidArgument, "renew of permit {index}: {e}");
        let e = s.release_permit(&name, index, &a).await.unwrap_err();
        assert_eq!(e.kind(), InvalidArgument, "release of permit {index}: {e}");
    }
    for bad in [
        "".to_owned(),
        "n".repeat(h.caps().max_name_bytes + 1),
        format!("{name}\0"),
    ] {
        let results = [
            s.claim_permit(&bad, N, &a, "a", ttl).await.err(),
            s.renew_permit(&bad, 0, &a, ttl).await.err(),
            s.release_permit(&bad, 0, &a).await.err(),
            s.verify_permit(&bad, &a).await.err(),
            s.permits(&bad).await.err(),
        ];
        for (op, e) in [
            "claim_permit",
            "renew_permit",
            "release_permit",
            "verify_permit",
            "permits",
        ]
        .iter()
        .zip(results)
        {
            let e = e.unwrap_or_else(|| panic!("{op} accepted the name {bad:?}"));
            assert_eq!(e.kind(), InvalidName, "{op} of {bad:?}: {e}");
        }
    }
    for bad in [
        Duration::ZERO,
        lease_core::backend::MAX_TTL + Duration::from_secs(1),
    ] {
        let e = s.claim_permit(&name, N, &a, "a", bad).await;
        assert_eq!(kind(e), Some(InvalidTimings), "claim ttl {bad:?}");
        let e = s.renew_permit(&name, 0, &a, bad).await.unwrap_err();
        assert_eq!(e.kind(), InvalidTimings, "renew ttl {bad:?}: {e}");
    }
    assert!(
        h.store.permits(&name).await.unwrap().is_empty(),
        "{}: a refused claim wrote a record",
        h.backend()
    );
    // Within the bounds, any index is a question: a permit nobody holds renews to nothing.
    assert_eq!(
        s.renew_permit(&name, MAX_PERMITS - 1, &a, ttl)
            .await
            .unwrap(),
        None
    );
    assert!(!s.release_permit(&name, MAX_PERMITS - 1, &a).await.unwrap());
}

/// Changing N applies to new claims only. Lowered from 3 to 2 with 3 holders: nobody is
/// revoked (all verify and renew, the permit above the new N too), and no claim is granted
/// until fewer than 2 are live. Raised to 4: new claims take the free permits up to 4.
pub async fn changing_the_permit_count_applies_to_new_claims_only(h: &Harness) {
    if !needs_permits(h, "changing_the_permit_count_applies_to_new_claims_only") {
        return;
    }
    let name = h.name("permit-n");
    let holders: Vec<HolderToken> = (0..3).map(|_| mint()).collect();
    let mut top = 0;
    for (i, holder) in holders.iter().enumerate() {
        let g = must_claim(h, &name, 3, holder, &format!("h{i}")).await;
        assert_eq!(g.permit, i as u32);
        top = g.grant.term;
    }
    // Lowered to 2.
    let newcomer = mint();
    assert_eq!(
        claim(h, &name, 2, &newcomer, "new").await,
        None,
        "{}: granted with 3 live under a count of 2",
        h.backend()
    );
    for (i, holder) in holders.iter().enumerate() {
        let renewed = h
            .store
            .renew_permit(&name, i as u32, holder, h.ttl)
            .await
            .unwrap();
        assert!(
            renewed.is_some(),
            "{}: lowering N revoked permit {i}",
            h.backend()
        );
    }
    assert!(h.store.release_permit(&name, 0, &holders[0]).await.unwrap());
    assert_eq!(
        claim(h, &name, 2, &newcomer, "new").await,
        None,
        "{}: granted with 2 live under a count of 2",
        h.backend()
    );
    assert!(h.store.release_permit(&name, 1, &holders[1]).await.unwrap());
    let g = must_claim(h, &name, 2, &newcomer, "new").await;
    assert_eq!(g.permit, 0, "the lowest free permit below the new count");
    assert_next_term(h, top, g.grant.term, "under the lowered count");
    top = g.grant.term;
    assert_eq!(claim(h, &name, 2, &mint(), "more").await, None);
    // Live now: permit 0 (new) and permit 2 (h2). Raised to 4: permits 1 and 3, then full.
    let mut taken = Vec::new();
    for i in 0..2 {
        let holder = mint();
        let g = must_claim(h, &name, 4, &holder, &format!("r{i}")).await;
        assert_next_term(h, top, g.grant.term, "under the raised count");
        top = g.grant.term;
        taken.push(g.permit);
    }
    assert_eq!(taken, vec![1, 3], "the free permits up to the new count");
    assert_eq!(
        claim(h, &name, 4, &mint(), "more").await,
        None,
        "{}: a fifth holder of 4 permits",
        h.backend()
    );
    let listed: Vec<u32> = live(h, &name).await.iter().map(|p| p.0).collect();
    assert_eq!(listed, vec![0, 1, 2, 3]);
}

/// How long [`claims_of_different_counts_keep_each_claims_limit`] races its claimers.
const MIXED_RACE: Duration = Duration::from_secs(4);

/// How many grants of 3 permits [`claims_of_different_counts_keep_each_claims_limit`] needs to
/// judge; on a loaded machine it races past `MIXED_RACE` until it has them, up to
/// `MIXED_RACE_MOST`.
const MIXED_GRANTS: usize = 10;

/// The longest [`claims_of_different_counts_keep_each_claims_limit`] races for `MIXED_GRANTS`.
const MIXED_RACE_MOST: Duration = Duration::from_secs(30);

/// Changing N while holders come and go: three claimers ask with N = 3 and three with N = 5,
/// for `MIXED_RACE` (4 s), each holding a few milliseconds, on one name. A claim for 3 is granted
/// only while fewer than 3 others are live — also when a claim for 5 took a permit at or above
/// 3 in the instant the claim for 3 counted and took its own (NATS, which counts and takes in
/// two steps, granted about 8 claims for 3 a second with 3 others live before its re-count).
///
/// The check needs no view of the store's: terms are issued in the order the store granted
/// them (NATS: created the permits it then granted), so a holder with a smaller term was live
/// in the store before the claim for 3 began, and one that had not sent its release when the
/// holder for 3 learned of its grant — and was not held longer than a lease — was still live
/// when that grant was decided.
pub async fn claims_of_different_counts_keep_each_claims_limit(h: &Harness) {
    if !needs_permits(h, "claims_of_different_counts_keep_each_claims_limit") {
        return;
    }
    struct Held {
        permits: u32,
        term: u64,
        sent: std::time::Instant,
        granted: std::time::Instant,
        released: std::time::Instant,
    }
    let name = h.name("permit-mixed");
    let started = std::time::Instant::now();
    let small_grants = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for i in 0..6u32 {
        let store = h.store.clone();
        let (name, ttl, backend) = (name.clone(), h.ttl, h.backend().to_owned());
        let permits = if i % 2 == 0 { 3 } else { 5 };
        let small_grants = small_grants.clone();
        let racing = {
            let small_grants = small_grants.clone();
            move || {
                let elapsed = started.elapsed();
                elapsed < MIXED_RACE
                    || (elapsed < MIXED_RACE_MOST
                        && small_grants.load(Ordering::Relaxed) < MIXED_GRANTS)
            }
        };
        workers.push(tokio::spawn(async move {
            let mut held = Vec::new();
            while racing() {
                let holder = mint();
                let sent = std::time::Instant::now();
                let g = match store.claim_permit(&name, permits, &holder, "w", ttl).await {
                    Ok(Some(g)) => g,
                    Ok(None) => {
                        sleep(Duration::from_micros(200 * u64::from(i + 1))).await;
                        continue;
                    }
                    Err(e) => panic!("{backend}: claim of one of {permits} permits failed: {e}"),
                };
                let granted = std::time::Instant::now();
                if permits == 3 {
                    small_grants.fetch_add(1, Ordering::Relaxed);
                }
                sleep(Duration::from_millis(u64::from(rand::random::<u8>() % 8))).await;
                let released = std::time::Instant::now();
                let ended = store.release_permit(&name, g.permit, &holder).await;
                // The store computed the permit's expiry after `sent`, so a release answered
                // before `sent + ttl` reached it while the permit was live. One answered later
                // may have arrived after the expiry (a slow release on a loaded machine), and
                // then "not held" is the right answer.
                let answered = std::time::Instant::now();
                held.push(Held {
                    permits,
                    term: g.grant.term,
                    sent,
                    granted,
                    released,
                });
                if !matches!(ended, Ok(true)) && answered.duration_since(sent) < ttl {
                    panic!(
                        "{backend}: the release of a live permit answered {ended:?} ({:?} after \
                         its claim was sent, {ttl:?} lease)",
                        answered.duration_since(sent)
                    );
                }
            }
            held
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.unwrap());
    }
    let small: Vec<&Held> = all.iter().filter(|g| g.permits == 3).collect();
    let mut over = Vec::new();
    for g in &small {
        let live_before = all
            .iter()
            .filter(|o| {
                o.term < g.term
                    && o.released > g.granted
                    && o.released.duration_since(o.sent) < h.ttl
            })
            .count();
        if live_before >= 3 {
            over.push((g.term, live_before));
        }
    }
    eprintln!(
        "{}: claims of 3 and 5 permits raced for {MIXED_RACE:?}: {} grants ({} of 3), {} over \
         the limit",
        h.backend(),
        all.len(),
        small.len(),
        over.len()
    );
    assert!(
        small.len() >= MIXED_GRANTS,
        "{}: only {} grants of 3 permits in {MIXED_RACE_MOST:?}: too few to check",
        h.backend(),
        small.len()
    );
    assert!(
        over.is_empty(),
        "{}: a claim of 3 permits was granted while 3 or more others were live (its term, \
         those live): {over:?}",
        h.backend()
    );
}

/// On a store that hints (`capabilities().watch`), a waiter for a permit in
/// `Coordinator::acquire` is woken by one holder's release and holds that permit within
/// [`WAKE_BOUND`], although its retry pace is seconds and every permit had most of its lease
/// left.
pub async fn a_permit_release_wakes_a_waiter_at_once(h: &Harness) {
    let case = "a_permit_release_wakes_a_waiter_at_once";
    if !needs_permits(h, case) {
        return;
    }
    if !h.caps().watch {
        h.not_applicable_loudly(
            case,
            "the store sends no hints (capabilities().watch is false): waiters poll",
        );
        return;
    }
    let pool = Permits::new(h.name("permit-wake"), 2).unwrap();
    let slow = h
        .timings
        .to_builder()
        .retry(Duration::from_secs(5))
        .jitter(Duration::from_millis(10))
        .build()
        .unwrap();
    let a = h.coordinator("a");
    let b = h.coordinator("b");
    let c = h.coordinator_timed(h.store.clone(), "c", slow);
    let ta = a.try_acquire(&pool).await.unwrap();
    let tb = b.try_acquire(&pool).await.unwrap();
    let waiting = {
        let (c, pool, limit) = (c.clone(), pool.clone(), h.timings.lease() * 4);
        tokio::spawn(async move {
            let won = c.acquire(&pool, limit).await;
            (won, Instant::now())
        })
    };
    // Long enough for c to have found both permits held and gone to sleep; far less than a
    // lease.
    sleep(h.timings.renew_every()).await;
    assert!(
        !waiting.is_finished(),
        "c got a permit while both were held"
    );
    let released = Instant::now();
    ta.resign().await.unwrap();
    let (tc, at) = waiting.await.unwrap();
    let tc = tc.unwrap();
    let took = at - released;
    eprintln!(
        "{}: permit release → waiter holds it: {took:?}",
        h.backend()
    );
    assert_eq!(tc.permit(), ta.permit(), "the released permit");
    assert!(tc.token() > tb.token());
    assert!(
        took <= WAKE_BOUND,
        "{}: the waiter took the permit {took:?} after the release, more than {WAKE_BOUND:?}: \
         the store says `watch` but its hints did not wake the permit waiter",
        h.backend()
    );
    tc.resign().await.unwrap();
    tb.resign().await.unwrap();
}

/// Claims of 3 and of 5 permits race for one name through coordinators, four of the six on a
/// connection in chaos ([`FaultMode::Chaos`](crate::FaultMode::Chaos), the defaults of
/// [`ChaosConfig::new`]: answers delayed, held past the attempt timeout, or lost after the
/// store carried the request out — at any step of a claim, its re-count, its purge or a
/// release), so that unknown outcomes are read back and adopted as a user's would be. Every
/// grant is judged "at most N" for its own claim ([`CountedGrants`]): a claim of N granted
/// while N or more others were live is a violation, and so is a token granted twice.
///
/// It races until each count has 10 grants (at least 3 s, at most 30 s); the seed is printed, and
/// the same seed replays the same faults on the connection (which request meets which depends on
/// timing).
pub async fn claims_of_different_counts_keep_each_claims_limit_under_chaos(h: &Harness) {
    const CASE: &str = "claims_of_different_counts_keep_each_claims_limit_under_chaos";
    if !needs_permits(h, CASE) {
        return;
    }
    let Some(faults) = h.faults.clone() else {
        h.not_applicable(CASE, "the backend provides no fault path");
        return;
    };
    let seed = rand::random::<u64>();
    let config = ChaosConfig::new(seed);
    faults.switch.chaos(config);
    let name = h.name("permit-chaos");
    let grants = CountedGrants::new(h.timings.lease());
    let counted = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
    let started = std::time::Instant::now();
    let racing = {
        let counted = counted.clone();
        move || {
            let elapsed = started.elapsed();
            let few = counted
                .iter()
                .any(|c| c.load(Ordering::Relaxed) < CHAOS_GRANTS);
            elapsed < CHAOS_RACE || (elapsed < MIXED_RACE_MOST && few)
        }
    };
    let mut claimers = Vec::new();
    for i in 0..6u32 {
        // Claims of 3: 0 and 2 in chaos, 4 not; claims of 5: 3 and 5 in chaos, 1 not.
        let (permits, count) = if i % 2 == 0 { (3, 0) } else { (5, 1) };
        let store = if i == 1 || i == 4 {
            h.store.clone()
        } else {
            faults.store.clone()
        };
        let who = format!("claimer-{i}-of-{permits}");
        let c = h.coordinator_over(store, &who);
        let pool = Permits::new(&name, permits).expect("a valid permit count");
        let (grants, racing, counted) = (grants.clone(), racing.clone(), counted[count].clone());
        let backend = h.backend().to_owned();
        claimers.push(tokio::spawn(async move {
            let mut errors = 0u64;
            while racing() {
                let sent = std::time::Instant::now();
                match c.try_acquire(&pool).await {
                    Ok(term) => {
                        let id = grants.granted(
                            &who,
                            permits,
                            term.token(),
                            sent,
                            std::time::Instant::now(),
                        );
                        counted.fetch_add(1, Ordering::Relaxed);
                        sleep(Duration::from_millis(u64::from(rand::random::<u8>() % 8))).await;
                        grants.ended(id, std::time::Instant::now());
                        // Under chaos a release may time out; the permit then frees itself at
                        // its TTL, and the judgment already counts it ended.
                        let _ = term.resign().await;
                    }
                    Err(e) if e.is(ErrorKind::Held) => sleep(Duration::from_millis(1)).await,
                    Err(e) if e.is_temporary() => {
                        errors += 1;
                        sleep(Duration::from_millis(5)).await;
                    }
                    Err(e) => panic!("{backend}: {who}'s claim failed under chaos: {e}"),
                }
            }
            let _ = c.close().await;
            errors
        }));
    }
    let mut errors = 0;
    for c in claimers {
        errors += c.await.expect("a claimer's task");
    }
    faults.switch.pass();
    let report = grants.report();
    eprintln!(
        "{}: {CASE}: {config}: {report} in {:?}; {errors} temporary errors",
        h.backend(),
        started.elapsed()
    );
    assert!(
        report.is_clean(),
        "{}: under chaos (seed {seed}): {report}: {:?}",
        h.backend(),
        report.violations
    );
    for n in [3, 5] {
        assert!(
            report.of(n) >= CHAOS_GRANTS as u64,
            "{}: only {} grants of claims of {n} in {MIXED_RACE_MOST:?} under chaos (seed \
             {seed}): too few to judge",
            h.backend(),
            report.of(n)
        );
    }
}

/// How long the claimers race under chaos at least.
const CHAOS_RACE: Duration = Duration::from_secs(3);

/// Grants of each count the chaos race needs before it may stop.
const CHAOS_GRANTS: usize = 10;
