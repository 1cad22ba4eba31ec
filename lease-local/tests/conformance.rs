//! The shared conformance suite on the in-memory store (with a fault path) and on the
//! never-expiring store of single-node mode.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use lease_conformance::{Harness, faulty};
use lease_local::MemoryStore;

mod memory {
    use super::*;

    async fn setup() -> Option<Harness> {
        let store = MemoryStore::new();
        let faulty = faulty(store.clone());
        Some(
            Harness::new(Arc::new(store.clone()))
                .with_slots(Arc::new(store.clone()))
                .with_groups(Arc::new(store), Some(Arc::new(faulty.clone())))
                .with_faults(Arc::new(faulty.clone()), Arc::new(faulty.hook().clone())),
        )
    }

    lease_conformance::conformance_suite!(setup);
}

mod never_expiring {
    use super::*;

    async fn setup() -> Option<Harness> {
        let store = MemoryStore::never_expiring();
        Some(
            Harness::new(Arc::new(store.clone()))
                .with_slots(Arc::new(store.clone()))
                .with_groups(Arc::new(store), None),
        )
    }

    lease_conformance::conformance_suite!(setup);
}

/// The `PollingStore` suite on the in-memory store's polling leases.
mod polling {
    use lease_conformance::polling::PollingHarness;

    use super::*;

    async fn setup() -> Option<PollingHarness> {
        Some(PollingHarness::new(Arc::new(MemoryStore::new())).with_backend("memory"))
    }

    lease_conformance::polling_suite!(setup);
}
