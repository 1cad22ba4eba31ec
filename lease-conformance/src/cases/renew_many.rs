//! `LeaseStore::renew_many`: many renewals in one call, each keeping `renew`'s rules, one
//! answer per item in the order asked.

use lease_core::ErrorKind;
use lease_core::backend::{MAX_RENEWALS_PER_CALL, RenewItem};
use tokio::time::sleep;

use super::{mint, must_claim, needs_expiry};
use crate::Harness;

/// Held, held by another, released and never-claimed leases in one call, in no particular
/// order: each answered as `renew` would answer it, in the order asked, and only the held one
/// extended.
pub async fn renew_many_answers_item_by_item(h: &Harness) {
    let backend = h.backend();
    let (held, other, released, never) = (
        h.name("many-held"),
        h.name("many-other"),
        h.name("many-released"),
        h.name("many-never"),
    );
    let a = mint();
    let b = mint();
    let g = must_claim(h, &held, &a, "a").await;
    let g_other = must_claim(h, &other, &b, "b").await;
    must_claim(h, &released, &a, "a").await;
    assert!(h.store.release(&released, &a).await.unwrap());
    sleep(h.ttl / 3).await;
    let before_other = h.store.get(&other).await.unwrap().unwrap();
    let items = [
        RenewItem {
            name: &released,
            holder: &a,
        },
        RenewItem {
            name: &other,
            holder: &a,
        },
        RenewItem {
            name: &held,
            holder: &a,
        },
        RenewItem {
            name: &never,
            holder: &a,
        },
    ];
    let answers = h.store.renew_many(&items, h.ttl).await.unwrap();
    assert_eq!(answers.len(), 4, "{backend}: one answer per item");
    let answers: Vec<_> = answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|e| panic!("{backend}: an item of renew_many failed: {e}")))
        .collect();
    assert_eq!(
        answers[0], None,
        "{backend}: a released lease is not renewed"
    );
    assert_eq!(
        answers[1], None,
        "{backend}: a lease held by another is not renewed"
    );
    let renewed = answers[2].unwrap_or_else(|| panic!("{backend}: the held lease was not renewed"));
    assert_eq!(renewed.term, g.term, "{backend}: renewal keeps the term");
    assert_eq!(
        answers[3], None,
        "{backend}: a never-claimed lease is not renewed"
    );
    if h.caps().expiry {
        assert!(
            renewed.expires_in + h.slack >= h.ttl,
            "{backend}: renewal reports {:?}",
            renewed.expires_in
        );
        let info = h.store.get(&held).await.unwrap().unwrap();
        assert!(
            info.live && info.expires_in + h.slack >= h.ttl,
            "{backend}: the store reports {info:?} after the renewal"
        );
        let after_other = h.store.get(&other).await.unwrap().unwrap();
        assert_eq!(
            (after_other.term, after_other.instance.as_str()),
            (g_other.term, "b")
        );
        assert!(
            after_other.expires_in <= before_other.expires_in,
            "{backend}: another holder's lease was extended"
        );
    }
    if let Some(info) = h.store.get(&released).await.unwrap() {
        assert!(
            !info.live,
            "{backend}: a released lease was revived: {info:?}"
        );
    }
    assert_eq!(h.store.get(&never).await.unwrap(), None);
    assert!(h.store.verify(&held, &a).await.unwrap().is_some());
    assert!(h.store.verify(&other, &b).await.unwrap().is_some());
}

/// An expired lease in a batch is answered `None` and stays expired (never revived), while a
/// live one beside it is renewed.
pub async fn renew_many_never_revives_an_expired_lease(h: &Harness) {
    if !needs_expiry(h, "renew_many_never_revives_an_expired_lease") {
        return;
    }
    let backend = h.backend();
    let (expired, live) = (h.name("many-expired"), h.name("many-live"));
    let a = mint();
    must_claim(h, &expired, &a, "a").await;
    sleep(h.ttl + h.slack).await;
    let g = must_claim(h, &live, &a, "a").await;
    let items = [
        RenewItem {
            name: &expired,
            holder: &a,
        },
        RenewItem {
            name: &live,
            holder: &a,
        },
    ];
    let answers = h.store.renew_many(&items, h.ttl).await.unwrap();
    assert_eq!(answers.len(), 2, "{backend}: one answer per item");
    assert_eq!(
        answers[0].as_ref().ok(),
        Some(&None),
        "{backend}: an expired lease was renewed"
    );
    assert_eq!(
        answers[1].as_ref().ok().copied().flatten().map(|g| g.term),
        Some(g.term),
        "{backend}: the live lease was not renewed"
    );
    assert_eq!(h.store.verify(&expired, &a).await.unwrap(), None);
    if let Some(info) = h.store.get(&expired).await.unwrap() {
        assert!(
            !info.live,
            "{backend}: an expired lease was revived: {info:?}"
        );
    }
}

/// An empty list is answered empty; a name twice, more than
/// [`MAX_RENEWALS_PER_CALL`] items, a bad name or a bad TTL are refused with the typed error
/// of the whole call.
pub async fn renew_many_refuses_bad_batches(h: &Harness) {
    let backend = h.backend();
    assert!(
        h.store.renew_many(&[], h.ttl).await.unwrap().is_empty(),
        "{backend}: an empty list"
    );
    let name = h.name("many-dup");
    let a = mint();
    must_claim(h, &name, &a, "a").await;
    let twice = [
        RenewItem {
            name: &name,
            holder: &a,
        },
        RenewItem {
            name: &name,
            holder: &a,
        },
    ];
    let err = h.store.renew_many(&twice, h.ttl).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{backend}: {err}");
    assert!(err.to_string().contains("twice"), "{backend}: {err}");

    let names: Vec<String> = (0..=MAX_RENEWALS_PER_CALL)
        .map(|i| h.name(&format!("many-{i}")))
        .collect();
    let over: Vec<RenewItem<'_>> = names
        .iter()
        .map(|n| RenewItem {
            name: n,
            holder: &a,
        })
        .collect();
    let err = h.store.renew_many(&over, h.ttl).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{backend}: {err}");
    assert!(
        err.to_string().contains(&MAX_RENEWALS_PER_CALL.to_string()),
        "{backend}: the error names the limit: {err}"
    );

    let bad = [
        RenewItem {
            name: &name,
            holder: &a,
        },
        RenewItem {
            name: "",
            holder: &a,
        },
    ];
    let err = h.store.renew_many(&bad, h.ttl).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidName, "{backend}: {err}");
    let one = [RenewItem {
        name: &name,
        holder: &a,
    }];
    let err = h
        .store
        .renew_many(&one, std::time::Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidTimings, "{backend}: {err}");
}
