//! The shared conformance suite on stores opened through `lease::open`: the facade's `Store`
//! must answer every case as the backend's own store does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use lease_conformance::Harness;

/// A harness on one store `url` opens, for its leases, slots and groups. The facade's store
/// reaches slots and groups through its accessors, which answer with the backend's own store
/// (`T`): the harness takes that store for them.
#[allow(dead_code)]
async fn harness<T>(url: &str) -> Option<Harness>
where
    T: lease::LeaseStore
        + lease::backend::slots::SlotStore
        + lease::backend::partitions::PartitionStore
        + lease::backend::membership::MembershipStore,
{
    let store = lease::open(url, &lease::OpenOptions::new()).await.unwrap();
    let own = store.downcast_arc::<T>().expect("the backend's own store");
    Some(
        Harness::new(Arc::new(store))
            .with_slots(own.clone())
            .with_groups(own, None),
    )
}

#[cfg(feature = "memory")]
mod memory {
    async fn setup() -> Option<lease_conformance::Harness> {
        super::harness::<lease::memory::MemoryStore>("memory://").await
    }

    lease_conformance::conformance_suite!(setup);
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use std::sync::atomic::{AtomicU32, Ordering};

    async fn setup() -> Option<lease_conformance::Harness> {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join("lease-facade-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!(
            "conformance-{}-{}.db",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&file);
        super::harness::<lease::sql::SqliteStore>(&format!("sqlite://{}", file.display())).await
    }

    lease_conformance::conformance_suite!(setup);
}
