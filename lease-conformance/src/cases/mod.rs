//! The cases. Each is a plain `pub async fn(&Harness)`;
//! [`conformance_suite!`](crate::conformance_suite) runs every one as its own test. They panic with
//! a message that says what the store got wrong.

// Test support: a failed expectation panics, which is how a case reports it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_core::{
    ErrorKind, LeaseStore, Term,
    backend::{Grant, HolderToken},
};
use tokio::time::{Instant, sleep, sleep_until, timeout};

use crate::Harness;
use crate::history::History;

mod groups;
mod handover;
mod inputs;
mod names;
mod permits;
mod renew_many;
mod slots;
mod wrappers;
pub use groups::*;
pub use handover::*;
pub use inputs::*;
pub use names::*;
pub use permits::*;
pub use renew_many::*;
pub use slots::*;
pub use wrappers::*;

fn mint() -> HolderToken {
    HolderToken::mint()
}

async fn claim(h: &Harness, name: &str, holder: &HolderToken, instance: &str) -> Option<Grant> {
    match h.store.claim(name, holder, instance, h.ttl).await {
        Ok(g) => g,
        Err(e) => panic!("{}: claim of {name} failed: {e}", h.backend()),
    }
}

async fn must_claim(h: &Harness, name: &str, holder: &HolderToken, instance: &str) -> Grant {
    match claim(h, name, holder, instance).await {
        Some(g) => g,
        None => panic!("{}: claim of free name {name} was refused", h.backend()),
    }
}

/// Asserts that `after` is the term that follows `before`: exactly one more on stores with
/// consecutive terms, strictly more on the others.
fn assert_next_term(h: &Harness, before: u64, after: u64, what: &str) {
    if h.caps().consecutive_terms {
        assert_eq!(after, before + 1, "{what}: the next claim adds one");
    } else {
        assert!(
            after > before,
            "{what}: term {after} after {before} does not increase"
        );
    }
}

/// Asserts a name's first term: 1 on stores with consecutive terms, positive on the others.
fn assert_first_term(h: &Harness, term: u64, what: &str) {
    if h.caps().consecutive_terms {
        assert_eq!(term, 1, "{what}: the first term of a name is 1");
    } else {
        assert!(term >= 1, "{what}: term {term}");
    }
}

/// Asserts what `get` says of a lease that ended with `term`: not live, the term kept (or, on a
/// store whose server removes ended records, no record at all).
fn assert_ended(h: &Harness, info: Option<lease_core::backend::LeaseInfo>, term: u64) {
    match info {
        Some(info) => {
            assert!(!info.live && info.expires_in.is_zero(), "{info:?}");
            assert_eq!(info.term, term, "{info:?}");
        }
        None => assert!(
            !h.caps().keeps_ended_records,
            "{}: the record of an ended lease was dropped",
            h.backend()
        ),
    }
}

fn needs_expiry(h: &Harness, case: &str) -> bool {
    if !h.caps().expiry {
        h.not_applicable(case, "leases on this store never expire");
        return false;
    }
    true
}

/// A claim of a never-claimed name succeeds with term 1 and an expiry close to the TTL, by the
/// store's clock.
pub async fn claim_of_a_free_name_reports_term_and_expiry(h: &Harness) {
    let name = h.name("free");
    let g = must_claim(h, &name, &mint(), "a").await;
    assert_first_term(h, g.term, "claim of a free name");
    if h.caps().expiry {
        assert!(
            g.expires_in <= h.ttl && g.expires_in + h.slack + h.caps().clock_granularity >= h.ttl,
            "expires_in {:?} should be close to the ttl {:?}",
            g.expires_in,
            h.ttl
        );
    }
    let info = h
        .store
        .get(&name)
        .await
        .unwrap()
        .expect("claimed name is known");
    assert_eq!(
        (
            info.name.as_str(),
            info.instance.as_str(),
            info.term,
            info.live
        ),
        (name.as_str(), "a", g.term, true)
    );
}

/// A claim of a live lease fails — also for the holder itself — and changes nothing.
pub async fn claim_of_a_held_name_fails_and_changes_nothing(h: &Harness) {
    let name = h.name("held");
    let a = mint();
    let g = must_claim(h, &name, &a, "a").await;
    assert_eq!(
        claim(h, &name, &mint(), "b").await,
        None,
        "a second holder got a live lease"
    );
    assert_eq!(
        claim(h, &name, &a, "a").await,
        None,
        "a claim must not extend a live lease"
    );
    let info = h.store.get(&name).await.unwrap().unwrap();
    assert_eq!((info.instance.as_str(), info.term), ("a", g.term));
    assert_eq!(
        h.store.verify(&name, &a).await.unwrap().map(|g| g.term),
        Some(g.term)
    );
}

/// Among many concurrent claimers of one free name exactly one wins, round after round.
pub async fn one_winner_among_many_concurrent_claimers(h: &Harness) {
    for round in 0..8 {
        let name = h.name(&format!("race{round}"));
        let mut tasks = Vec::new();
        for i in 0..16 {
            let store = h.store.clone();
            let name = name.clone();
            let ttl = h.ttl;
            tasks.push(tokio::spawn(async move {
                let holder = mint();
                let g = store.claim(&name, &holder, &format!("c{i}"), ttl).await;
                (holder, g)
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            let (holder, g) = t.await.expect("claimer task");
            match g {
                Ok(Some(g)) => winners.push((holder, g)),
                Ok(None) => {}
                Err(e) => panic!("{}: concurrent claim failed: {e}", h.backend()),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {} winners", winners.len());
        let (holder, g) = &winners[0];
        assert_first_term(h, g.term, "the winner's term");
        assert!(h.store.release(&name, holder).await.unwrap());
    }
}

/// Terms strictly increase across claim, release and expiry: every change of hands adds one.
pub async fn terms_increase_across_claim_release_and_expiry(h: &Harness) {
    let name = h.name("terms");
    let a = mint();
    let t1 = must_claim(h, &name, &a, "a").await.term;
    assert!(h.store.release(&name, &a).await.unwrap());
    let b = mint();
    let t2 = must_claim(h, &name, &b, "b").await.term;
    assert_next_term(h, t1, t2, "after release");
    if !needs_expiry(h, "terms_increase (expiry part)") {
        return;
    }
    sleep(h.ttl + h.slack).await;
    let c = mint();
    let t3 = must_claim(h, &name, &c, "c").await.term;
    assert_next_term(h, t2, t3, "after expiry");
    assert_eq!(h.store.get(&name).await.unwrap().unwrap().term, t3);
}

/// Renewing keeps a lease live well past its original TTL, and the store reports the new
/// expiry.
pub async fn renew_extends_the_expiry(h: &Harness) {
    let name = h.name("renew");
    let a = mint();
    let g = must_claim(h, &name, &a, "a").await;
    let until = Instant::now() + h.ttl * 3;
    while Instant::now() < until {
        sleep(h.ttl / 4).await;
        let r = h.store.renew(&name, &a, h.ttl).await.unwrap();
        let r = r.unwrap_or_else(|| panic!("{}: renewal of a live lease failed", h.backend()));
        assert_eq!(r.term, g.term, "renewal keeps the term");
        if h.caps().expiry {
            assert!(
                r.expires_in + h.slack + h.caps().clock_granularity >= h.ttl,
                "renewal reports {:?}",
                r.expires_in
            );
        }
    }
    assert_eq!(
        claim(h, &name, &mint(), "b").await,
        None,
        "renewed lease was taken"
    );
    assert!(h.store.verify(&name, &a).await.unwrap().is_some());
}

/// An expired lease is never revived by its old holder, even when nobody claimed it since.
pub async fn renew_after_expiry_fails(h: &Harness) {
    if !needs_expiry(h, "renew_after_expiry_fails") {
        return;
    }
    let name = h.name("late-renew");
    let a = mint();
    must_claim(h, &name, &a, "a").await;
    sleep(h.ttl + h.slack).await;
    assert_eq!(h.store.renew(&name, &a, h.ttl).await.unwrap(), None);
    assert_eq!(h.store.verify(&name, &a).await.unwrap(), None);
    if let Some(info) = h.store.get(&name).await.unwrap() {
        assert!(!info.live, "{info:?}");
    }
}

/// Renewal by someone who does not hold the lease fails and leaves the record as it was: the
/// time left it reports after the refused renewal is what it reported before, less the time
/// that passed in between, give or take one step of the store's clock (a clock that ticks in
/// whole seconds may report the same time left a third of a lease later).
pub async fn renew_by_a_non_holder_fails_and_changes_nothing(h: &Harness) {
    let name = h.name("renew-other");
    let a = mint();
    let g = must_claim(h, &name, &a, "a").await;
    let before = h.store.get(&name).await.unwrap().unwrap();
    let read = Instant::now();
    sleep(h.ttl / 3).await;
    assert_eq!(h.store.renew(&name, &mint(), h.ttl).await.unwrap(), None);
    let asked = Instant::now();
    let after = h.store.get(&name).await.unwrap().unwrap();
    assert_eq!((after.instance.as_str(), after.term), ("a", g.term));
    if h.caps().expiry {
        // Between the two reads at least `asked - read` passed on the store's clock too, so the
        // time left went down by at least that much; a clock of granularity G may hide up to G
        // of it.
        let passed = asked - read;
        assert!(
            after.expires_in + passed <= before.expires_in + h.caps().clock_granularity,
            "{}: a non-holder's renewal extended the lease: {:?} left before it, {:?} after, \
             {passed:?} later (clock granularity {:?})",
            h.backend(),
            before.expires_in,
            after.expires_in,
            h.caps().clock_granularity
        );
    }
    assert_eq!(
        h.store
            .renew(&h.name("never-claimed"), &a, h.ttl)
            .await
            .unwrap(),
        None
    );
}

/// Release by someone who does not hold the lease fails and leaves it live.
pub async fn release_by_a_non_holder_fails_and_changes_nothing(h: &Harness) {
    let name = h.name("release-other");
    let a = mint();
    let g = must_claim(h, &name, &a, "a").await;
    assert!(!h.store.release(&name, &mint()).await.unwrap());
    assert_eq!(
        h.store.verify(&name, &a).await.unwrap().map(|v| v.term),
        Some(g.term)
    );
    assert!(h.store.get(&name).await.unwrap().unwrap().live);
    assert!(!h.store.release(&h.name("never-claimed"), &a).await.unwrap());
}

/// Release ends the lease at once, keeps the record and its term, and is idempotent.
pub async fn release_frees_at_once_and_keeps_the_term(h: &Harness) {
    let name = h.name("release");
    let a = mint();
    let g = must_claim(h, &name, &a, "a").await;
    assert!(h.store.release(&name, &a).await.unwrap());
    assert!(
        !h.store.release(&name, &a).await.unwrap(),
        "a second release ends nothing"
    );
    assert_ended(h, h.store.get(&name).await.unwrap(), g.term);
    assert_eq!(
        h.store.renew(&name, &a, h.ttl).await.unwrap(),
        None,
        "released lease renewed"
    );
    let b = mint();
    let next = must_claim(h, &name, &b, "b").await.term;
    assert_next_term(h, g.term, next, "after release");
}

/// The last stretch before `ttl − clock_granularity` that the "not before" probe keeps
/// probing densely: a store whose leases end early is caught however little early.
const PROBE_STEP_MIN: Duration = Duration::from_millis(5);

/// Without renewal a lease can be claimed by another holder once its TTL has passed by the
/// store's clock (within the harness's slack: lateness is allowed), and **not before**: every
/// claim whose answer arrives sooner than `ttl − clock_granularity` after the first claim was
/// sent must be refused (the unsafe direction has no slack beyond the store's declared clock
/// granularity, see [`Capabilities::clock_granularity`](lease_core::backend::Capabilities)).
/// The probes come closer together towards that bound, down to every 5 ms.
pub async fn unrenewed_lease_is_claimable_after_ttl_and_not_before(h: &Harness) {
    if !needs_expiry(h, "unrenewed_lease_is_claimable_after_ttl") {
        return;
    }
    let name = h.name("expiry");
    let granularity = h.caps().clock_granularity;
    let sent = Instant::now();
    let g = must_claim(h, &name, &mint(), "a").await;
    // A correct store ends the lease no sooner than `sent + ttl − granularity`.
    let bound = sent + h.ttl.saturating_sub(granularity);
    let b = mint();
    let mut probes = 0u32;
    loop {
        let got = claim(h, &name, &b, "b").await;
        let answered = Instant::now();
        if answered >= bound {
            // This claim may have reached the store past the bound: its answer proves nothing.
            if let Some(g2) = got {
                assert_next_term(h, g.term, g2.term, "after expiry");
                assert!(h.store.release(&name, &b).await.unwrap());
            }
            break;
        }
        probes += 1;
        if let Some(g2) = got {
            panic!(
                "{}: the lease ended early: another holder claimed it (term {}) {:?} after the \
                 claim of a {:?} lease was sent, {:?} before ttl − clock granularity ({:?}) had \
                 passed; a store whose clock is coarser must say so in \
                 Capabilities::clock_granularity",
                h.backend(),
                g2.term,
                answered - sent,
                h.ttl,
                bound - answered,
                granularity
            );
        }
        let left = bound.saturating_duration_since(Instant::now());
        sleep((h.ttl / 6).min(left / 2).max(PROBE_STEP_MIN)).await;
    }
    assert!(
        probes >= 1,
        "{}: no claim was answered before ttl − clock granularity ({:?} − {granularity:?}): give \
         the harness a TTL of at least twice the clock granularity (Harness::with_ttl)",
        h.backend(),
        h.ttl
    );
    // Lateness: generous, the harness's slack past the TTL.
    sleep_until(sent + h.ttl + h.slack).await;
    let c = mint();
    let g3 = must_claim(h, &name, &c, "c").await;
    assert!(g3.term > g.term, "term {} after {}", g3.term, g.term);
}

/// Verify answers the term for the holder of a live lease and nothing for anyone else.
pub async fn verify_tells_the_holder_from_others(h: &Harness) {
    let name = h.name("verify");
    let a = mint();
    assert_eq!(h.store.verify(&name, &a).await.unwrap(), None);
    let g = must_claim(h, &name, &a, "a").await;
    let v = h
        .store
        .verify(&name, &a)
        .await
        .unwrap()
        .expect("holder verifies");
    assert_eq!(v.term, g.term);
    assert!(v.expires_in <= h.ttl || !h.caps().expiry);
    assert_eq!(h.store.verify(&name, &mint()).await.unwrap(), None);
    assert!(h.store.release(&name, &a).await.unwrap());
    assert_eq!(h.store.verify(&name, &a).await.unwrap(), None);
}

/// Get reports nothing for an unknown name, the holder while live, and the last term after.
pub async fn get_tells_the_truth(h: &Harness) {
    let name = h.name("get");
    assert_eq!(h.store.get(&name).await.unwrap(), None);
    let a = mint();
    let g = must_claim(h, &name, &a, "worker-7").await;
    let info = h.store.get(&name).await.unwrap().unwrap();
    assert_eq!(info.instance, "worker-7");
    assert_eq!(info.term, g.term);
    assert!(info.live);
    if h.caps().expiry {
        assert!(
            info.expires_in <= h.ttl
                && info.expires_in + h.slack + h.caps().clock_granularity >= h.ttl,
            "{info:?}"
        );
        sleep(h.ttl + h.slack).await;
        let info = h.store.get(&name).await.unwrap();
        assert_ended(h, info.clone(), g.term);
        if let Some(info) = info {
            assert_eq!(info.instance, "worker-7");
        }
    }
}

/// Names are compared byte for byte: case, trailing spaces and accents make different names.
pub async fn names_are_compared_byte_for_byte(h: &Harness) {
    let base = h.name("");
    let names = [
        format!("{base}Job"),
        format!("{base}job"),
        format!("{base}job "),
        format!("{base}jöb"),
        format!("{base}jo\u{308}b"),
    ];
    for n in &names {
        // A name sharing a record with an earlier one would find it held.
        let g = must_claim(h, n, &mint(), "a").await;
        assert_first_term(
            h,
            g.term,
            &format!("{n:?} shares a record with another name"),
        );
    }
    for n in &names {
        assert_eq!(h.store.get(n).await.unwrap().unwrap().name, *n);
    }
}

/// A name of the store's maximum length works; empty, longer, or control characters are refused
/// with InvalidName by every operation.
pub async fn longest_name_works_and_bad_names_are_refused(h: &Harness) {
    let max = h.caps().max_name_bytes;
    let prefix = h.name("");
    let longest = format!("{prefix}{}", "n".repeat(max.saturating_sub(prefix.len())));
    assert_eq!(longest.len(), max);
    let a = mint();
    must_claim(h, &longest, &a, "a").await;
    assert!(h.store.verify(&longest, &a).await.unwrap().is_some());
    assert_eq!(h.store.get(&longest).await.unwrap().unwrap().name, longest);
    let too_long = format!("{longest}n");
    for bad in [
        "".to_owned(),
        too_long,
        format!("{prefix}a\0b"),
        format!("{prefix}a\nb"),
    ] {
        let results = [
            h.store.claim(&bad, &a, "a", h.ttl).await.err(),
            h.store.renew(&bad, &a, h.ttl).await.err(),
            h.store.release(&bad, &a).await.err(),
            h.store.verify(&bad, &a).await.err(),
            h.store.get(&bad).await.err(),
        ];
        for (op, e) in ["claim", "renew", "release", "verify", "get"]
            .iter()
            .zip(results)
        {
            let e = e.unwrap_or_else(|| panic!("{op} accepted the name {bad:?}"));
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{op} of {bad:?}: {e}");
        }
    }
}

/// A zero, sub-millisecond or absurd TTL is refused with InvalidTimings.
pub async fn bad_ttls_are_refused(h: &Harness) {
    let name = h.name("ttl");
    let a = mint();
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(500),
        lease_core::backend::MAX_TTL + Duration::from_secs(1),
    ] {
        let e = h.store.claim(&name, &a, "a", ttl).await.unwrap_err();
        assert_eq!(
            e.kind(),
            ErrorKind::InvalidTimings,
            "claim ttl {ttl:?}: {e}"
        );
        let e = h.store.renew(&name, &a, ttl).await.unwrap_err();
        assert_eq!(
            e.kind(),
            ErrorKind::InvalidTimings,
            "renew ttl {ttl:?}: {e}"
        );
    }
    assert_eq!(
        h.store.get(&name).await.unwrap(),
        None,
        "a refused claim wrote a record"
    );
}

/// An administrator's force release ends a live lease; the holder finds it lost and the next
/// claim gets a higher term.
pub async fn force_release_ends_a_live_lease_and_keeps_the_term(h: &Harness) {
    if !h.caps().force_release {
        h.not_applicable("force_release", "the store does not support it");
        return;
    }
    let name = h.name("force");
    let a = mint();
    let g = must_claim(h, &name, &a, "a").await;
    assert!(h.store.force_release(&name).await.unwrap());
    assert!(!h.store.force_release(&name).await.unwrap());
    assert_eq!(h.store.renew(&name, &a, h.ttl).await.unwrap(), None);
    let next = must_claim(h, &name, &mint(), "b").await.term;
    assert_next_term(h, g.term, next, "after force release");
}

/// Through the coordinator: a held name gives Held, and the observer names the holder.
pub async fn coordinator_reports_held_and_the_observer_names_the_holder(h: &Harness) {
    let name = h.name("coord-held");
    let a = h.coordinator("a");
    let b = h.coordinator("b");
    let term = a.try_acquire(&name).await.unwrap();
    let e = b.try_acquire(&name).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Held, "{e}");
    let obs = b.observer();
    assert!(obs.held(&name).await.unwrap());
    let holder = obs.holder(&name).await.unwrap().unwrap();
    assert_eq!((holder.instance.as_str(), holder.term), ("a", term.token()));
    assert!(!obs.held(&h.name("nobody")).await.unwrap());
    a.close().await.unwrap();
    assert!(!obs.held(&name).await.unwrap(), "close released the lease");
}

/// A resigned term frees the name at once; the next holder gets a higher token.
pub async fn coordinator_resign_hands_over_at_once(h: &Harness) {
    let name = h.name("coord-resign");
    let a = h.coordinator("a");
    let b = h.coordinator("b");
    let t1 = a.try_acquire(&name).await.unwrap();
    t1.resign().await.unwrap();
    assert!(!t1.is_live());
    let t2 = b.try_acquire(&name).await.unwrap();
    assert!(t2.token() > t1.token());
    t2.resign().await.unwrap();
}

/// Closing a coordinator signals its terms with Closed and releases them.
pub async fn coordinator_close_signals_and_releases(h: &Harness) {
    let name = h.name("coord-close");
    let a = h.coordinator("a");
    let term = a.try_acquire(&name).await.unwrap();
    a.close().await.unwrap();
    term.done().await;
    assert_eq!(term.err().map(|e| e.kind()), Some(ErrorKind::Closed));
    assert!(!h.coordinator("b").observer().held(&name).await.unwrap());
    assert_eq!(
        a.try_acquire(&name).await.unwrap_err().kind(),
        ErrorKind::Closed
    );
}

/// The keeper holds the lease for many lease durations; nobody else gets it meanwhile.
///
/// The other contender claims through the store itself, every fifth of a lease: the store must
/// refuse each claim. (Through a coordinator, a claim whose answer takes longer than its
/// attempt timeout — a third of the lease here — reads as `Timeout` on a loaded machine; what
/// this case checks is the store's refusal, not that contender's patience.)
pub async fn coordinator_keeps_the_lease_well_past_its_ttl(h: &Harness) {
    let name = h.name("coord-keep");
    let a = h.coordinator("a");
    let b = h.coordinator("b");
    let term = a.try_acquire(&name).await.unwrap();
    let until = Instant::now() + h.timings.lease() * 3;
    while Instant::now() < until {
        let other = mint();
        if let Some(g) = claim(h, &name, &other, "b").await {
            panic!(
                "{}: a claim of {name} succeeded (term {}) while its keeper held term {}",
                h.backend(),
                g.term,
                term.token()
            );
        }
        assert!(term.is_live(), "term ended: {:?}", term.err());
        sleep(h.timings.lease() / 5).await;
    }
    let info = b.observer().holder(&name).await.unwrap().unwrap();
    assert_eq!(info.term, term.token());
    term.resign().await.unwrap();
}

async fn loss_within_deadline(h: &Harness, stall: bool) {
    let case = if stall {
        "loss_on_stall"
    } else {
        "loss_on_cut"
    };
    let Some(faults) = h.faults.clone() else {
        h.not_applicable(case, "the backend provides no fault path");
        return;
    };
    if !needs_expiry(h, case) {
        return;
    }
    let name = h.name(case);
    let a = h.coordinator_over(faults.store.clone(), "a");
    let term = a.try_acquire(&name).await.unwrap();
    sleep(h.timings.renew_every() * 2).await;
    assert!(term.is_live());
    let cut_at = Instant::now();
    if stall {
        faults.switch.stall();
    } else {
        faults.switch.cut();
    }
    // What a holder relies on: past the local deadline (counted from a renewal sent before the
    // cut) `check` fails, read from the clock — exact on any machine, however late the keeper's
    // task wakes. Checked right at the deadline, before waiting for the keeper's notification.
    sleep_until(cut_at + h.timings.deadline()).await;
    let past = cut_at.elapsed();
    assert!(
        term.check().is_err() && !term.is_live(),
        "{past:?} after the cut (deadline {:?}) the term still checks live",
        h.timings.deadline()
    );
    // The keeper ends the term at that deadline too; its notification is a task wake-up, so on
    // a loaded machine it may come a little later: bounded by one more second.
    let notified = timeout(Duration::from_secs(1), term.lost()).await.is_ok();
    let took = cut_at.elapsed();
    faults.switch.pass();
    assert!(
        notified,
        "loss not notified {took:?} after the cut, deadline {:?}",
        h.timings.deadline()
    );
    assert_eq!(term.err().map(|e| e.kind()), Some(ErrorKind::Lost));
    assert!(term.check().is_err());
}

/// When the store stops answering, the holder's term ends with Lost within the local deadline.
pub async fn loss_is_detected_within_the_deadline_when_the_store_stalls(h: &Harness) {
    loss_within_deadline(h, true).await;
}

/// When the connection is cut, the holder's term ends with Lost within the local deadline.
pub async fn loss_is_detected_within_the_deadline_when_the_connection_is_cut(h: &Harness) {
    loss_within_deadline(h, false).await;
}

/// A holder cut off from the store loses its term before the store lets anyone else claim:
/// the next holder gets in only after the store expired the lease, with a higher token.
pub async fn a_stalled_holder_is_replaced_only_after_the_store_expires_it(h: &Harness) {
    let case = "stalled_holder_replaced";
    let Some(faults) = h.faults.clone() else {
        h.not_applicable(case, "the backend provides no fault path");
        return;
    };
    if !needs_expiry(h, case) {
        return;
    }
    let name = h.name("stalled");
    let a = h.coordinator_over(faults.store.clone(), "a");
    let b = h.coordinator("b");
    let t1 = a.try_acquire(&name).await.unwrap();
    faults.switch.stall();
    let stalled_at = Instant::now();
    let t1_lost_at = {
        let t1 = t1.clone();
        tokio::spawn(async move {
            t1.lost().await;
            Instant::now()
        })
    };
    let t2 = loop {
        match b.try_acquire(&name).await {
            Ok(t) => break t,
            Err(e) if e.is(ErrorKind::Held) => sleep(h.timings.renew_every() / 2).await,
            Err(e) => panic!("{e}"),
        }
        assert!(
            stalled_at.elapsed() < h.timings.lease() * 3,
            "never handed over"
        );
    };
    let t2_at = Instant::now();
    let lost_at = t1_lost_at.await.unwrap();
    faults.switch.pass();
    assert!(t2.token() > t1.token());
    assert!(
        lost_at <= t2_at,
        "the old holder still believed it held the lease when the new one got it"
    );
    assert!(
        t2_at - lost_at >= h.timings.grace(),
        "the old holder's work had only {:?} of its {:?} grace",
        t2_at - lost_at,
        h.timings.grace()
    );
    t2.resign().await.unwrap();
}

/// Many contenders run fenced critical sections through `run_elected`; the recorded history has
/// no overlap and no term going back, and every fenced write is accepted.
pub async fn fenced_history_of_many_contenders_is_clean(h: &Harness) {
    let name = h.name("history");
    let history = History::new();
    let sections = Arc::new(AtomicU64::new(0));
    let mut coordinators = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let store = match (&h.faults, i) {
            (Some(f), 3) => f.store.clone(),
            _ => h.store.clone(),
        };
        let c = h.coordinator_over(store, &format!("contender-{i}"));
        coordinators.push(c.clone());
        let history = history.clone();
        let sections = sections.clone();
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            c.run_elected(&name, move |term: Term| {
                let history = history.clone();
                let sections = sections.clone();
                async move {
                    let who = term.instance().to_owned();
                    for _ in 0..5 {
                        if term.check().is_err() {
                            break;
                        }
                        let s = history.enter(&who, term.token());
                        assert!(
                            s.fenced_write(),
                            "fenced write refused for term {}",
                            term.token()
                        );
                        sleep(Duration::from_millis(15)).await;
                        drop(s);
                        sections.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
        }));
    }
    // A stall on the fault path while it runs, long enough to lose a term there.
    if let Some(f) = &h.faults {
        sleep(h.timings.lease()).await;
        f.switch.stall();
        sleep(h.timings.deadline() + h.timings.renew_every()).await;
        f.switch.pass();
    }
    sleep(h.timings.lease() * 2).await;
    for c in &coordinators {
        let _ = c.close().await;
    }
    for t in tasks {
        t.await.expect("contender task").expect("run_elected");
    }
    let report = history.report();
    eprintln!("{}: {report}", h.backend());
    history.assert_clean();
    assert!(report.distinct_terms >= 3, "too few hand-overs: {report}");
    assert!(
        h.step_down_failures().is_empty(),
        "{:?}",
        h.step_down_failures()
    );
}
