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
