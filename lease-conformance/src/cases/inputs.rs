//! Bad input is refused before any I/O, and empty batches cost no round trip: run on the
//! fault path with the connection stalled, where any request would hang.

use std::future::Future;
use std::time::Duration;

use lease_core::backend::{HolderToken, partitions::MAX_PARTITIONS_PER_CALL};
use lease_core::{ErrorKind, Result};

use crate::Harness;

/// How long an answer that needs no I/O may take.
const NO_IO: Duration = Duration::from_secs(2);

async fn answered<T>(h: &Harness, what: &str, op: impl Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(NO_IO, op).await {
        Ok(answer) => answer,
        Err(_) => panic!(
            "{}: {what} waited on the stalled connection: the store did I/O for an answer it \
             can give without any",
            h.backend()
        ),
    }
}

async fn refused<T: std::fmt::Debug>(
    h: &Harness,
    what: &str,
    kind: ErrorKind,
    op: impl Future<Output = Result<T>>,
) {
    match answered(h, what, op).await {
        Err(e) => assert_eq!(e.kind(), kind, "{}: {what}: {e}", h.backend()),
        Ok(v) => panic!("{}: {what} was accepted: {v:?}", h.backend()),
    }
}

/// Every lease, partition and membership operation refuses a bad name, label, duration or
/// batch with its typed kind while the store's connection is stalled — so the check ran before
/// any request — and an empty batch renewal or release answers at once with nothing done.
pub async fn bad_input_is_refused_before_any_io(h: &Harness) {
    let case = "bad_input_is_refused_before_any_io";
    let Some(faults) = h.faults.clone() else {
        h.not_applicable(case, "the backend provides no fault path");
        return;
    };
    if faults.switch.round_trips().is_none() {
        // An in-process fault switch wraps the store, so it stalls a call before the store's
        // own checks run: only a switch on the wire tells "checked first" from "sent".
        h.not_applicable(case, "its fault switch is not on the wire");
        return;
    }
    let store = faults.store.as_ref();
    let ttl = h.ttl;
    let holder = HolderToken::mint();
    let long = "n".repeat(h.caps().max_name_bytes + 1);
    faults.switch.stall();

    use ErrorKind::{InvalidArgument, InvalidName, InvalidTimings};
    refused(
        h,
        "claim ''",
        InvalidName,
        store.claim("", &holder, "i", ttl),
    )
    .await;
    refused(
        h,
        "claim of a long name",
        InvalidName,
        store.claim(&long, &holder, "i", ttl),
    )
    .await;
    refused(
        h,
        "claim, empty label",
        InvalidName,
        store.claim("n", &holder, "", ttl),
    )
    .await;
    refused(
        h,
        "claim, zero ttl",
        InvalidTimings,
        store.claim("n", &holder, "i", Duration::ZERO),
    )
    .await;
    refused(h, "renew ''", InvalidName, store.renew("", &holder, ttl)).await;
    let day = Duration::from_secs(86_401);
    refused(
        h,
        "renew, ttl > 1 day",
        InvalidTimings,
        store.renew("n", &holder, day),
    )
    .await;
    refused(h, "release ''", InvalidName, store.release("", &holder)).await;
    refused(h, "verify ''", InvalidName, store.verify("", &holder)).await;
    refused(
        h,
        "get of a name with a line feed",
        InvalidName,
        store.get("a\nb"),
    )
    .await;
    refused(h, "force_release ''", InvalidName, store.force_release("")).await;
    if h.caps().list_names {
        refused(
            h,
            "names under a prefix with a line feed",
            InvalidName,
            store.names("a\nb", None, 10),
        )
        .await;
        refused(
            h,
            "names under a long prefix",
            InvalidName,
            store.names(&long, None, 10),
        )
        .await;
        refused(
            h,
            "names, limit 0",
            InvalidArgument,
            store.names("a", None, 0),
        )
        .await;
    }

    if let Some(g) = h.groups_via_faults.clone() {
        let g = g.as_ref();
        let huge = vec![0u32; MAX_PARTITIONS_PER_CALL + 1];
        refused(
            h,
            "acquire ''",
            InvalidName,
            g.acquire_partition("", 0, "o", ttl),
        )
        .await;
        refused(
            h,
            "renew huge",
            InvalidArgument,
            g.renew_partitions("g", &huge, "o", ttl),
        )
        .await;
        refused(
            h,
            "release huge",
            InvalidArgument,
            g.release_partitions("g", &huge, "o"),
        )
        .await;
        refused(h, "owners ''", InvalidName, g.owners("")).await;
        refused(
            h,
            "heartbeat ''",
            InvalidName,
            g.heartbeat("", "n", "a", ttl, &[]),
        )
        .await;
        refused(h, "members ''", InvalidName, g.members("")).await;
        refused(h, "leave, empty node", InvalidName, g.leave("s", "")).await;
        let renewed = answered(h, "empty renewal", g.renew_partitions("g", &[], "o", ttl)).await;
        assert_eq!(
            renewed.map(|v| v.len()).ok(),
            Some(0),
            "{}: empty renewal",
            h.backend()
        );
        let released = answered(h, "empty release", g.release_partitions("g", &[], "o")).await;
        assert_eq!(released.ok(), Some(0), "{}: empty release", h.backend());
    }
    faults.switch.pass();
}
