//! The metrics a holder publishes: a held gauge, and counters of claims, renew failures and
//! losses, each labelled with the lease's name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_conformance::{FaultMode, faulty};
use lease_core::{Coordinator, telemetry};
use lease_local::MemoryStore;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// A recorder that keeps every counter and gauge in an atomic, readable by name and label.
#[derive(Clone, Default)]
struct Rec(Arc<Mutex<HashMap<String, Arc<AtomicU64>>>>);

impl Rec {
    fn cell(&self, key: &Key) -> Arc<AtomicU64> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let id = format!("{}{{{}}}", key.name(), labels.join(","));
        self.0.lock().unwrap().entry(id).or_default().clone()
    }

    fn read(&self, metric: &str, name: &str) -> u64 {
        let id = format!("{metric}{{name={name}}}");
        self.0
            .lock()
            .unwrap()
            .get(&id)
            .map_or(u64::MAX, |c| c.load(Ordering::SeqCst))
    }

    fn gauge(&self, metric: &str, name: &str) -> f64 {
        f64::from_bits(self.read(metric, name))
    }
}

impl Recorder for Rec {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[tokio::test(start_paused = true)]
async fn holding_claiming_failing_and_losing_are_counted() {
    let rec = Rec::default();
    metrics::set_global_recorder(rec.clone()).unwrap();

    let store = faulty(MemoryStore::new());
    let c = Coordinator::builder(store.clone())
        .instance("m")
        .build()
        .unwrap();
    let term = c.try_acquire("metered").await.unwrap();
    assert_eq!(rec.read(telemetry::CLAIMS, "metered"), 1);
    assert_eq!(rec.gauge(telemetry::HELD, "metered"), 1.0);

    store.hook().set_mode(FaultMode::Cut);
    term.lost().await;
    // Renewals at 2, 4, 6 and 8 s failed; the deadline ended the term at 10 s.
    assert_eq!(rec.read(telemetry::RENEW_FAILURES, "metered"), 4);
    assert_eq!(rec.read(telemetry::LOSSES, "metered"), 1);
    assert_eq!(rec.gauge(telemetry::HELD, "metered"), 0.0);

    store.hook().set_mode(FaultMode::Pass);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let again = c.try_acquire("metered").await.unwrap();
    assert_eq!(rec.read(telemetry::CLAIMS, "metered"), 2);
    assert_eq!(rec.gauge(telemetry::HELD, "metered"), 1.0);
    again.resign().await.unwrap();
    assert_eq!(rec.gauge(telemetry::HELD, "metered"), 0.0);
    assert_eq!(
        rec.read(telemetry::LOSSES, "metered"),
        1,
        "a resign is not a loss"
    );
}
