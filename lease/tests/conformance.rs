//! The shared conformance suite on stores opened through `lease::open`: the facade's `Store`
//! must answer every case as the backend's own store does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use lease_conformance::Harness;

/// A harness on one store `url` opens, for its leases, slots and groups.
#[allow(dead_code)]
async fn harness(url: &str) -> Option<Harness> {
    let store = Arc::new(lease::open(url, &lease::OpenOptions::new()).await.unwrap());
    Some(
        Harness::new(store.clone())
            .with_slots(store.clone())
            .with_groups(store, None),
    )
}

#[cfg(feature = "memory")]
mod memory {
    async fn setup() -> Option<lease_conformance::Harness> {
        super::harness("memory://").await
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
        super::harness(&format!("sqlite://{}", file.display())).await
    }

    lease_conformance::conformance_suite!(setup);
}
