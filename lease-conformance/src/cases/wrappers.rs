//! Wrappers tell the truth about the store they wrap.

use std::time::Duration;

use lease_core::{ErrorKind, LeaseStore, Result};

use crate::Harness;
use crate::faults::{FaultMode, faulty};

/// The same answer, for `available()`: both Ok, or both failing with the same kind.
fn same_answer(a: &Result<()>, b: &Result<()>) -> bool {
    match (a, b) {
        (Ok(()), Ok(())) => true,
        (Err(a), Err(b)) => a.kind() == b.kind() && a.is_temporary() == b.is_temporary(),
        _ => false,
    }
}

/// Asserts that `wrapper` reports `h.store`'s backend name, capabilities and `available()`
/// answer (`truth`), and that its capability accessors answer as its capability flags say.
async fn assert_tells_the_truth(
    h: &Harness,
    what: &str,
    wrapper: &dyn LeaseStore,
    truth: &Result<()>,
) {
    assert_eq!(
        wrapper.backend(),
        h.backend(),
        "{}: {what} reports another backend",
        h.backend()
    );
    assert_eq!(
        wrapper.capabilities(),
        h.caps(),
        "{}: {what} reports other capabilities than the store it wraps",
        h.backend()
    );
    let caps = wrapper.capabilities();
    assert_eq!(
        (
            wrapper.permit_store().is_some(),
            wrapper.partition_store().is_some(),
            wrapper.membership_store().is_some(),
            wrapper.slot_store().is_some(),
        ),
        (caps.permits, caps.partitions, caps.membership, caps.slots),
        "{}: {what}'s capability accessors (permits, partitions, membership, slots) disagree \
         with its capabilities",
        h.backend()
    );
    let answer = wrapper.available().await;
    assert!(
        same_answer(&answer, truth),
        "{}: {what} answers available() with {answer:?}, the store itself with {truth:?}",
        h.backend()
    );
}

/// The test kit's fault hook over the store under test — and over its slot and group views,
/// and the fault path's store — reports the store's own backend name, capabilities and
/// `available()` answer; once cut, `available()` fails with `Unavailable` (and with the
/// store-wide mode back at Pass, the store's own answer again).
pub async fn wrappers_report_the_stores_capabilities_and_availability(h: &Harness) {
    let truth = h.store.available().await;
    let wrapped = faulty(h.store.clone());
    assert_tells_the_truth(h, "the fault hook", &wrapped, &truth).await;
    if let Some(slots) = &h.slots {
        let wrapped = faulty(slots.clone());
        assert_tells_the_truth(h, "the fault hook over the slot store", &wrapped, &truth).await;
    }
    if let Some(groups) = &h.groups {
        let wrapped = faulty(groups.clone());
        assert_tells_the_truth(h, "the fault hook over the group store", &wrapped, &truth).await;
    }
    if let Some(path) = &h.faults {
        path.switch.pass();
        assert_tells_the_truth(h, "the fault path's store", &*path.store, &truth).await;
    }

    wrapped.hook().set_mode(FaultMode::Cut);
    let cut = wrapped.available().await;
    assert!(
        cut.as_ref().is_err_and(|e| e.is(ErrorKind::Unavailable)),
        "{}: a cut store answers available() with {cut:?}, not Unavailable",
        h.backend()
    );
    wrapped.hook().set_mode(FaultMode::Stall);
    assert!(
        tokio::time::timeout(Duration::from_millis(100), wrapped.available())
            .await
            .is_err(),
        "{}: a stalled store answered available()",
        h.backend()
    );
    wrapped.hook().set_mode(FaultMode::Pass);
    let back = wrapped.available().await;
    assert!(
        same_answer(&back, &truth),
        "{}: after the faults, available() answers {back:?}, the store itself {truth:?}",
        h.backend()
    );
}

/// The store's capability flags say what it does, and nothing more: each of `permits`,
/// `partitions`, `membership` and `slots` matches its accessor (a `Capabilities` written by
/// hand or copied from another store, instead of taken from `derived_capabilities`, fails
/// here with the flag named); `watch` comes with hints from
/// [`LeaseStore::changes`](lease_core::LeaseStore::changes); `force_release` and `list_names`
/// come with the operations (not `Unsupported`); the clock granularity leaves room for the
/// harness's TTL.
pub async fn capabilities_agree_with_what_the_store_does(h: &Harness) {
    let caps = h.caps();
    let b = h.backend();
    for (flag, accessor, claimed, has) in [
        (
            "permits",
            "permit",
            caps.permits,
            h.store.permit_store().is_some(),
        ),
        (
            "partitions",
            "partition",
            caps.partitions,
            h.store.partition_store().is_some(),
        ),
        (
            "membership",
            "membership",
            caps.membership,
            h.store.membership_store().is_some(),
        ),
        ("slots", "slot", caps.slots, h.store.slot_store().is_some()),
    ] {
        assert_eq!(
            claimed,
            has,
            "{b}: capabilities().{flag} is {claimed} but {accessor}_store() answers \
             {}: take the four flags permits, partitions, membership and slots from \
             `..derived_capabilities(self)` instead of writing or copying them",
            if has { "Some" } else { "None" }
        );
    }
    let topic = lease_core::backend::notify::Topic::lease(h.name("caps-watch"));
    if caps.watch {
        assert!(
            h.store.changes(&topic).is_some(),
            "{b}: capabilities().watch is true but changes() answers None for a lease's topic: \
             implement LeaseStore::changes, or say watch: false (waiters then poll)"
        );
    }
    let name = h.name("caps-never-claimed");
    if caps.force_release
        && let Err(e) = h.store.force_release(&name).await
    {
        assert!(
            !e.is(ErrorKind::Unsupported),
            "{b}: capabilities().force_release is true but force_release() answers {e}: \
             implement LeaseStore::force_release, or say force_release: false"
        );
    }
    if caps.list_names
        && let Err(e) = h.store.names(&name, None, 1).await
    {
        assert!(
            !e.is(ErrorKind::Unsupported),
            "{b}: capabilities().list_names is true but names() answers {e}: implement \
             LeaseStore::names, or say list_names: false"
        );
    }
    if caps.expiry {
        assert!(
            caps.clock_granularity * 2 <= h.ttl,
            "{b}: the harness's TTL {:?} is less than twice the store's clock granularity {:?}: \
             no claim could be checked before the lease may end; give the harness a longer TTL \
             (Harness::with_ttl)",
            h.ttl,
            caps.clock_granularity
        );
    }
}
