//! Node ids too long for the owner id a group worker makes of them are refused up front, by
//! `backend::check::leave` (and every membership check), naming the node id and its limit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use lease_core::{
    ErrorKind, GroupWorker,
    backend::{MAX_INSTANCE_BYTES, check, membership::MembershipStore, partitions::owner_id},
};
use lease_local::MemoryStore;

/// The longest node id: its owner id (`node@` + 16 hex digits) is exactly an instance label.
const LONGEST: usize = MAX_INSTANCE_BYTES - 17;

#[test]
fn node_ids_whose_owner_id_would_not_fit_are_refused_naming_the_node_id() {
    let store = MemoryStore::new();
    let ok = "n".repeat(LONGEST);
    check::leave(&store, "svc", &ok).unwrap();
    // The owner id made of the longest node id is a valid owner.
    check::owners(&store, "g").unwrap();
    let _ = check::release_partitions(&store, "g", &[0], &owner_id(&ok)).unwrap();
    for len in [LONGEST + 1, 120, MAX_INSTANCE_BYTES] {
        let node = "n".repeat(len);
        let e = check::leave(&store, "svc", &node).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName, "{len} bytes: {e}");
        let m = e.message();
        assert!(m.contains("node id"), "{len} bytes: {e}");
        assert!(m.contains(&format!("{len} bytes")), "{len} bytes: {e}");
        assert!(m.contains(&LONGEST.to_string()), "{len} bytes: {e}");
        assert!(!m.starts_with("owner"), "{len} bytes: {e}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_group_worker_refuses_a_long_node_id_as_a_node_id() {
    let store = MemoryStore::new();
    let node = "n".repeat(120);
    let e = GroupWorker::builder(store.clone(), "g", 4)
        .node(node.clone())
        .start()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName, "{e}");
    assert!(e.message().contains("node id"), "{e}");
    assert!(!e.message().contains("owner is"), "{e}");
    // And the store itself refuses the heartbeat the same way.
    let e = store
        .heartbeat("svc", &node, "", std::time::Duration::from_secs(5), &[])
        .await
        .unwrap_err();
    assert!(e.message().contains("node id"), "{e}");
}
