//! The shared conformance suite on the in-memory store (with a fault path) and on the
//! never-expiring store of single-node mode.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use lease_conformance::{FaultSwitch, Harness};
use lease_local::{FaultMode, FaultyStore, MemoryStore};

struct Switch(FaultyStore<MemoryStore>);

impl FaultSwitch for Switch {
    fn pass(&self) {
        self.0.set_mode(FaultMode::Pass);
    }
    fn stall(&self) {
        self.0.set_mode(FaultMode::Stall);
    }
    fn cut(&self) {
        self.0.set_mode(FaultMode::Fail);
    }
}

mod memory {
    use super::*;

    async fn setup() -> Option<Harness> {
        let store = MemoryStore::new();
        let faulty = FaultyStore::new(store.clone());
        Some(
            Harness::new(Arc::new(store.clone()))
                .with_slots(Arc::new(store.clone()))
                .with_groups(Arc::new(store), Some(Arc::new(faulty.clone())))
                .with_faults(Arc::new(faulty.clone()), Arc::new(Switch(faulty))),
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
