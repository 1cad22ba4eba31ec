//! A store written outside `lease`, reached through `lease::open` once its scheme is
//! registered; and the schemes `register_scheme` refuses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::time::Duration;

use lease::backend::membership::MembershipStore;
use lease::backend::notify::{Topic, Wakeups};
use lease::backend::partitions::PartitionStore;
use lease::backend::permits::PermitStore;
use lease::backend::slots::SlotStore;
use lease::backend::{Capabilities, Grant, HolderToken, LeaseInfo, async_trait};
use lease::registry::RegisterError;
use lease::{Backend, Coordinator, ErrorKind, LeaseStore, OpenOptions, Result, UrlError};
use lease_local::MemoryStore;

/// A user's store: an in-process store standing in for a memcached server, keeping the URL it
/// was opened with.
#[derive(Debug)]
struct Memcached {
    url: String,
    inner: MemoryStore,
}

#[async_trait]
impl LeaseStore for Memcached {
    fn backend(&self) -> &'static str {
        "memcached"
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn permit_store(&self) -> Option<&dyn PermitStore> {
        self.inner.permit_store()
    }

    fn partition_store(&self) -> Option<&dyn PartitionStore> {
        self.inner.partition_store()
    }

    fn membership_store(&self) -> Option<&dyn MembershipStore> {
        self.inner.membership_store()
    }

    fn slot_store(&self) -> Option<&dyn SlotStore> {
        self.inner.slot_store()
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.inner.claim(name, holder, instance, ttl).await
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.inner.renew(name, holder, ttl).await
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.inner.release(name, holder).await
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.inner.verify(name, holder).await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.inner.get(name).await
    }

    fn changes(&self, topic: &Topic) -> Option<Wakeups> {
        self.inner.changes(topic)
    }
}

/// How many times the opener ran.
static OPENED: Mutex<u32> = Mutex::new(0);

/// `memcached://` is registered, checked like any URL, opened through its opener with the URL
/// whole, and the store carries leases; its own type is reached by downcast.
#[tokio::test]
async fn a_registered_scheme_is_opened_by_url() {
    lease::registry::register_scheme("memcached", |url: String| async move {
        *OPENED.lock().unwrap() += 1;
        if url.contains("down") {
            return Err(lease::Error::unavailable(
                "memcached: no server at down:11211",
            ));
        }
        Ok(Memcached {
            url,
            inner: MemoryStore::new(),
        })
    })
    .unwrap();

    let url = "MemCached://cache-1:11211,cache-2:11211/?ns=app&&x=1";
    let options = OpenOptions::new();
    assert_eq!(
        lease::check_url(url, &options).unwrap(),
        Backend::Registered("memcached")
    );
    assert_eq!(
        Backend::from_scheme("MEMCACHED"),
        Some(Backend::Registered("memcached"))
    );
    assert_eq!(*OPENED.lock().unwrap(), 0, "checking opens nothing");

    let store = lease::open(url, &options).await.unwrap();
    assert_eq!(*OPENED.lock().unwrap(), 1);
    assert_eq!(store.url_backend(), Backend::Registered("memcached"));
    assert_eq!(store.backend(), "memcached");
    assert_eq!(store.url_backend().to_string(), "memcached");
    let own = store
        .downcast_ref::<Memcached>()
        .expect("the opener's store");
    assert_eq!(own.url, url, "the opener gets the URL as written");
    assert!(store.downcast_ref::<MemoryStore>().is_none());
    assert!(store.partition_store().is_some());

    let coordinator = Coordinator::builder(store.clone())
        .instance("cache-user")
        .build()
        .unwrap();
    let term = coordinator.try_acquire("nightly").await.unwrap();
    assert_eq!(term.token(), 1);
    let seen = own.inner.get("nightly").await.unwrap().expect("claimed");
    assert_eq!(seen.term, 1);
    term.resign().await.unwrap();
    coordinator.close().await.unwrap();

    // The opener's error comes back as it is.
    let e = lease::open("memcached://down:11211", &options)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert_eq!(e.message(), "memcached: no server at down:11211");

    // Another scheme is still unknown, and the message lists the registered one too.
    let e = lease::check_url("couch://db", &options).unwrap_err();
    assert!(matches!(
        UrlError::of(&e),
        Some(UrlError::UnknownScheme { .. })
    ));
    assert!(e.message().contains("memcached://"), "{e}");
    // A URL without `://` names no scheme, registered or not.
    let e = lease::check_url("memcached:cache-1", &options).unwrap_err();
    assert!(
        matches!(UrlError::of(&e), Some(UrlError::NoScheme { .. })),
        "{e}"
    );
}

/// A scheme is registered once; built-in schemes (compiled in or not) and names that are not
/// schemes are refused, each with its own error.
#[test]
fn a_scheme_is_registered_once_and_never_over_a_built_in_one() {
    fn opener(_url: String) -> std::future::Ready<Result<MemoryStore>> {
        std::future::ready(Ok(MemoryStore::new()))
    }
    lease::registry::register_scheme("twice", opener).unwrap();
    let e = lease::registry::register_scheme("TWICE", opener).unwrap_err();
    assert_eq!(
        e,
        RegisterError::Registered {
            scheme: "TWICE".to_owned()
        }
    );
    assert_eq!(
        e.to_string(),
        "cannot register store scheme 'TWICE': it is registered already; register each scheme \
         once, at start-up"
    );

    for (scheme, backend) in [
        ("sqlite", Backend::Sqlite),
        ("postgresql", Backend::Postgres),
        ("MariaDB", Backend::MySql),
        ("rediss", Backend::Redis),
        ("mongodb+srv", Backend::MongoDb),
        ("etcd", Backend::Etcd),
        ("memory", Backend::Memory),
    ] {
        let e = lease::registry::register_scheme(scheme, opener).unwrap_err();
        assert_eq!(
            e,
            RegisterError::BuiltIn {
                scheme: scheme.to_owned(),
                backend
            }
        );
        assert_eq!(
            e.to_string(),
            format!(
                "cannot register store scheme '{scheme}': the built-in {backend} backend takes \
                 it; register another name"
            )
        );
    }
    assert_eq!(Backend::from_scheme("sqlite"), Some(Backend::Sqlite));
    assert_eq!(
        Backend::from_scheme("twice"),
        Some(Backend::Registered("twice"))
    );

    for scheme in ["", "1cache", "mem cached", "mem://", "cache_1"] {
        let e = lease::registry::register_scheme(scheme, opener).unwrap_err();
        assert_eq!(
            e,
            RegisterError::NotAScheme {
                scheme: scheme.to_owned()
            }
        );
        assert!(e.to_string().contains("a URL scheme is a letter"), "{e}");
    }
}
