//! Claim gates: lock-delay after an involuntary loss
//! ([`LeaseStore::claim_gated`](lease_core::LeaseStore::claim_gated)) and hand-over to a chosen
//! successor ([`LeaseStore::hand_over`](lease_core::LeaseStore::hand_over)), both judged by the
//! store's clock. Each case reports NOT APPLICABLE where the store's capability is off, after
//! checking that the store then answers `Unsupported` rather than acting without the gate.

use std::time::Duration;

use lease_core::backend::{Grant, HolderToken, MAX_LOCK_DELAY};
use lease_core::{ErrorKind, LeaseStore};
use tokio::time::{Instant, sleep, sleep_until};

use super::{PROBE_STEP_MIN, assert_next_term, claim, mint, must_claim, needs_expiry};
use crate::Harness;

/// `true` when the store has lock-delay; otherwise checks that `claim_gated` answers
/// `Unsupported` and records the case as not applicable.
async fn needs_lock_delay(h: &Harness, case: &str) -> bool {
    if h.caps().lock_delay {
        return true;
    }
    let err = h
        .store
        .claim_gated(&h.name("nogate"), &mint(), "a", h.ttl, h.ttl)
        .await
        .expect_err("a store without Capabilities::lock_delay must refuse claim_gated");
    assert_eq!(
        err.kind(),
        ErrorKind::Unsupported,
        "{}: claim_gated without the capability: {err}",
        h.backend()
    );
    h.not_applicable(
        case,
        "the store has no lock-delay (Capabilities::lock_delay)",
    );
    false
}

/// `true` when the store hands over; otherwise checks that `hand_over` answers `Unsupported`.
async fn needs_hand_over(h: &Harness, case: &str) -> bool {
    if h.caps().hand_over {
        return true;
    }
    let err = h
        .store
        .hand_over(&h.name("nogate"), &mint(), "b", h.ttl)
        .await
        .expect_err("a store without Capabilities::hand_over must refuse hand_over");
    assert_eq!(
        err.kind(),
        ErrorKind::Unsupported,
        "{}: hand_over without the capability: {err}",
        h.backend()
    );
    h.not_applicable(case, "the store cannot hand over (Capabilities::hand_over)");
    false
}

async fn gated(h: &Harness, name: &str, holder: &HolderToken, delay: Duration) -> Grant {
    match h.store.claim_gated(name, holder, "a", h.ttl, delay).await {
        Ok(Some(g)) => g,
        Ok(None) => panic!(
            "{}: gated claim of free name {name} was refused",
            h.backend()
        ),
        Err(e) => panic!("{}: gated claim of {name} failed: {e}", h.backend()),
    }
}

/// Probes `name` with claims by `who` (plain and gated with no delay of their own) until
/// `bound`: every one answered before `bound` must be refused. Returns how many were, and the
/// term of the last probe when it was answered past `bound` and granted (then released).
async fn refused_until(
    h: &Harness,
    name: &str,
    who: &str,
    bound: Instant,
    what: &str,
) -> (u32, Option<u64>) {
    let mut probes = 0u32;
    let b = mint();
    loop {
        let got = if probes.is_multiple_of(2) {
            claim(h, name, &b, who).await
        } else {
            h.store
                .claim_gated(name, &b, who, h.ttl, Duration::ZERO)
                .await
                .unwrap_or_else(|e| panic!("{}: claim of {name} failed: {e}", h.backend()))
        };
        let answered = Instant::now();
        if answered >= bound {
            if got.is_some() {
                assert!(h.store.release(name, &b).await.unwrap());
            }
            return (probes, got.map(|g| g.term));
        }
        probes += 1;
        if let Some(g) = got {
            panic!(
                "{}: {what}: {who} claimed it (term {}) {:?} before the gate opened by the \
                 store's clock",
                h.backend(),
                g.term,
                bound - answered,
            );
        }
        let left = bound.saturating_duration_since(Instant::now());
        sleep((h.ttl / 6).min(left / 2).max(PROBE_STEP_MIN)).await;
    }
}

/// After a crash (the lease left to expire, once renewed), a successor claims no earlier than
/// expiry + lock-delay by the store's clock: every claim answered sooner than the last renewal's
/// send + ttl + delay − clock granularity is refused, plain claims and gated ones alike (the
/// delay is the lost holder's, carried in the record); after it plus the slack one succeeds,
/// with the next term.
pub async fn lock_delay_holds_a_crashed_name_until_expiry_plus_delay(h: &Harness) {
    let case = "lock_delay_holds_a_crashed_name_until_expiry_plus_delay";
    if !needs_expiry(h, case) || !needs_lock_delay(h, case).await {
        return;
    }
    let name = h.name("delay-crash");
    let delay = h.ttl;
    let a = mint();
    let g = gated(h, &name, &a, delay).await;
    sleep(h.ttl / 3).await;
    let renewed_at = Instant::now();
    let r = h.store.renew(&name, &a, h.ttl).await.unwrap();
    assert_eq!(
        r.map(|r| r.term),
        Some(g.term),
        "{}: a gated lease renews",
        h.backend()
    );
    // The holder crashes: no renewal, no release.
    let granularity = h.caps().clock_granularity;
    let bound = renewed_at + (h.ttl + delay).saturating_sub(granularity);
    let (probes, late) = refused_until(h, &name, "b", bound, "the lock-delay ended early").await;
    assert!(probes >= 2, "{}: too few probes ({probes})", h.backend());
    if let Some(term) = late {
        assert_next_term(h, g.term, term, "the first claim past the lock-delay");
    }
    sleep_until(renewed_at + h.ttl + delay + h.slack).await;
    let next = must_claim(h, &name, &mint(), "c").await;
    assert_next_term(h, late.unwrap_or(g.term), next.term, "after the lock-delay");
}

/// A release of a lease claimed with a lock-delay frees the name at once (a graceful end has no
/// delay), and so does a force release; the next claims get the next terms.
pub async fn lock_delay_does_not_hold_a_released_name(h: &Harness) {
    let case = "lock_delay_does_not_hold_a_released_name";
    if !needs_lock_delay(h, case).await {
        return;
    }
    let name = h.name("delay-release");
    let a = mint();
    let long = (h.ttl * 20).min(MAX_LOCK_DELAY);
    let g = gated(h, &name, &a, long).await;
    assert!(h.store.release(&name, &a).await.unwrap());
    let b = mint();
    let g2 = must_claim(h, &name, &b, "b").await;
    assert_next_term(h, g.term, g2.term, "after a release of a gated lease");
    assert!(h.store.release(&name, &b).await.unwrap());
    if h.caps().force_release {
        let c = mint();
        let g3 = gated(h, &name, &c, long).await;
        assert!(h.store.force_release(&name).await.unwrap());
        let g4 = must_claim(h, &name, &mint(), "d").await;
        assert_next_term(
            h,
            g3.term,
            g4.term,
            "after a force release of a gated lease",
        );
    }
}

/// A hand-over ends the lease so that within the window only the chosen instance may claim:
/// others (plain or gated claims) are refused, the old holder can no longer renew, verify or
/// hand over again; the chosen one claims with the next term; once it holds, the gate is gone
/// (its release frees the name for anyone at once).
pub async fn hand_over_lets_only_the_chosen_instance_claim_in_the_window(h: &Harness) {
    let case = "hand_over_lets_only_the_chosen_instance_claim_in_the_window";
    if !needs_hand_over(h, case).await {
        return;
    }
    let name = h.name("handover");
    let a = mint();
    let g = must_claim(h, &name, &a, "a").await;
    let window = (h.ttl * 20).min(MAX_LOCK_DELAY);
    // Nobody but the holder hands over.
    assert!(
        !h.store
            .hand_over(&name, &mint(), "c", window)
            .await
            .unwrap()
    );
    assert!(h.store.verify(&name, &a).await.unwrap().is_some());
    assert!(h.store.hand_over(&name, &a, "b", window).await.unwrap());
    assert_eq!(h.store.verify(&name, &a).await.unwrap(), None);
    assert_eq!(h.store.renew(&name, &a, h.ttl).await.unwrap(), None);
    assert!(
        !h.store.hand_over(&name, &a, "c", window).await.unwrap(),
        "{}: a hand-over of a lease already handed over answers false",
        h.backend()
    );
    let c = mint();
    assert_eq!(
        claim(h, &name, &c, "c").await,
        None,
        "{}: others wait",
        h.backend()
    );
    assert_eq!(
        h.store
            .claim_gated(&name, &c, "c", h.ttl, Duration::ZERO)
            .await
            .unwrap(),
        None,
        "{}: a gated claim by another waits too",
        h.backend()
    );
    let b = mint();
    let gb = must_claim(h, &name, &b, "b").await;
    assert_next_term(h, g.term, gb.term, "the chosen successor");
    let info = h.store.get(&name).await.unwrap().unwrap();
    assert_eq!((info.instance.as_str(), info.term), ("b", gb.term));
    assert!(h.store.release(&name, &b).await.unwrap());
    let gc = must_claim(h, &name, &c, "c").await;
    assert_next_term(h, gb.term, gc.term, "after the successor's release");
}

/// When the chosen successor does not claim within the window, anyone may after it: claims by
/// others answered sooner than the hand-over's send + window − clock granularity are refused,
/// and one after the window plus the slack succeeds with the next term.
pub async fn hand_over_opens_to_anyone_after_the_window(h: &Harness) {
    let case = "hand_over_opens_to_anyone_after_the_window";
    if !needs_hand_over(h, case).await {
        return;
    }
    let name = h.name("handover-window");
    let a = mint();
    let g = must_claim(h, &name, &a, "a").await;
    let window = h.ttl;
    let sent = Instant::now();
    assert!(h.store.hand_over(&name, &a, "b", window).await.unwrap());
    let bound = sent + window.saturating_sub(h.caps().clock_granularity);
    let (probes, late) =
        refused_until(h, &name, "c", bound, "the hand-over window ended early").await;
    assert!(probes >= 2, "{}: too few probes ({probes})", h.backend());
    if let Some(term) = late {
        assert_next_term(h, g.term, term, "the first claim past the window");
    }
    sleep_until(sent + window + h.slack).await;
    let gc = must_claim(h, &name, &mint(), "c").await;
    assert_next_term(
        h,
        late.unwrap_or(g.term),
        gc.term,
        "after the hand-over window",
    );
}

/// A name through every kind of gate keeps its term order: a gated claim, its release, a
/// hand-over and the successor's claim, and a hand-over's successor that itself declares a
/// delay; each term the next, `get` reporting each; bad gate inputs refused.
pub async fn a_gated_name_keeps_its_term_order(h: &Harness) {
    let case = "a_gated_name_keeps_its_term_order";
    if !needs_lock_delay(h, case).await || !needs_hand_over(h, case).await {
        return;
    }
    let name = h.name("gate-terms");
    let window = (h.ttl * 20).min(MAX_LOCK_DELAY);
    let a = mint();
    let mut last = gated(h, &name, &a, h.ttl).await.term;
    assert!(h.store.release(&name, &a).await.unwrap());
    for round in 0..3 {
        let holder = mint();
        let who = format!("n{round}");
        let g = must_claim(h, &name, &holder, &who).await;
        assert_next_term(h, last, g.term, "a claim after a gate");
        last = g.term;
        assert!(
            h.store
                .hand_over(&name, &holder, "next", window)
                .await
                .unwrap()
        );
        assert_eq!(
            h.store.get(&name).await.unwrap().map(|i| i.live),
            Some(false)
        );
        let n = mint();
        let g = h
            .store
            .claim_gated(&name, &n, "next", h.ttl, h.ttl)
            .await
            .unwrap()
            .expect("the chosen successor claims with a delay of its own");
        assert_next_term(h, last, g.term, "the successor of a hand-over");
        last = g.term;
        assert_eq!(
            h.store.get(&name).await.unwrap().map(|i| i.term),
            Some(last)
        );
        assert!(h.store.release(&name, &n).await.unwrap());
    }
    let err = h
        .store
        .hand_over(&name, &a, "b", Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidTimings, "{err}");
    let err = h.store.hand_over(&name, &a, "", window).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidName, "{err}");
    let too_long = MAX_LOCK_DELAY + Duration::from_millis(1);
    let err = h
        .store
        .claim_gated(&name, &a, "a", h.ttl, too_long)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidTimings, "{err}");
}

/// A claim gate holds back other holders only: after a lease claimed with a lock-delay expired,
/// a claim under the *same* holder token (that holder's own; the engine mints a new one per
/// claim, so only a caller of the store can do this) passes at once with the next term, while
/// a claim under another token, made just before, is refused — and, refused, changes nothing:
/// the same token's claim still passes, and a live lease under a token answers held to it.
pub async fn a_gate_does_not_hold_back_the_token_that_held_the_lease(h: &Harness) {
    let case = "a_gate_does_not_hold_back_the_token_that_held_the_lease";
    if !needs_expiry(h, case) || !needs_lock_delay(h, case).await {
        return;
    }
    let name = h.name("gate-own-token");
    let long = (h.ttl * 20).min(MAX_LOCK_DELAY);
    let a = mint();
    let g = gated(h, &name, &a, long).await;
    assert_eq!(
        h.store
            .claim_gated(&name, &a, "a", h.ttl, long)
            .await
            .unwrap(),
        None,
        "{}: a live lease answers held to its own token",
        h.backend()
    );
    sleep(h.ttl + h.slack).await;
    assert_eq!(
        h.store.verify(&name, &a).await.unwrap(),
        None,
        "{}: the lease expired",
        h.backend()
    );
    for who in ["b", "a"] {
        assert_eq!(
            claim(h, &name, &mint(), who).await,
            None,
            "{}: another token ({who}) is held back by the lock-delay",
            h.backend()
        );
    }
    let again = h
        .store
        .claim_gated(&name, &a, "a", h.ttl, long)
        .await
        .unwrap()
        .unwrap_or_else(|| {
            panic!(
                "{}: the token that held the lease was held back by its own lock-delay",
                h.backend()
            )
        });
    assert_next_term(h, g.term, again.term, "the same token's claim after expiry");
    let info = h.store.get(&name).await.unwrap().unwrap();
    assert!(
        info.live && info.term == again.term,
        "{}: {info:?}",
        h.backend()
    );
    assert!(h.store.release(&name, &a).await.unwrap());
    let next = must_claim(h, &name, &mint(), "c").await;
    assert_next_term(h, again.term, next.term, "after the release");
}
