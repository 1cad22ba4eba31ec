//! The metrics the engine publishes (terms, campaigns, group workers), their descriptions, the
//! README's table of them, and the log lines an operator reads: all in paused time, with the
//! test kit's thread-local capture.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use lease_conformance::capture::{LogCapture, MetricsCapture};
use lease_conformance::{FaultMode, HintMode, faulty};
use lease_core::telemetry::{self, METRICS, MetricKind};
use lease_core::{Coordinator, GroupWorker, LeaseStore, Term, Timings};
use lease_local::MemoryStore;
use tokio::time::sleep;
use tracing::Level;

const S: Duration = Duration::from_secs(1);
const NAME: &[(&str, &str)] = &[("name", "metered")];
/// Each test holds a name of its own: the held and term gauges count this process's live terms
/// of a name, so two tests holding one name at once (they run in parallel) would see each
/// other's.
const GAUGED: &[(&str, &str)] = &[("name", "gauged")];

#[tokio::test(start_paused = true)]
async fn holding_claiming_renewing_failing_and_losing_are_recorded() {
    let rec = MetricsCapture::default();
    let _local = rec.install_local();

    let store = faulty(MemoryStore::new());
    let c = Coordinator::builder(store.clone())
        .instance("m")
        .build()
        .unwrap();
    let term = c.try_acquire("metered").await.unwrap();
    assert_eq!(rec.counter(telemetry::CLAIMS, NAME), 1);
    assert_eq!(rec.gauge(telemetry::HELD, NAME), Some(1.0));
    assert_eq!(rec.gauge(telemetry::TERM, NAME), Some(1.0));

    // Two healthy renewals (at 2 and 4 s): each sent with 10 − 2 = 8 s left before the local
    // deadline, answered at once (paused time).
    sleep(5 * S).await;
    assert_eq!(
        rec.histogram(telemetry::RENEW_TIME_LEFT, NAME),
        vec![8.0, 8.0]
    );
    let took = rec.histogram(telemetry::RENEW_SECONDS, NAME);
    assert!(
        took.len() == 2 && took.iter().all(|&s| s < 0.05),
        "{took:?}"
    );

    store.hook().set_mode(FaultMode::Cut);
    term.lost().await;
    // Renewals at 6, 8, 10 and 12 s failed; the deadline ended the term at 14 s.
    assert_eq!(
        rec.counter(
            telemetry::RENEW_FAILURES,
            &[("name", "metered"), ("cause", "error")]
        ),
        4
    );
    assert_eq!(
        rec.counter(
            telemetry::LOSSES,
            &[("name", "metered"), ("cause", "deadline")]
        ),
        1
    );
    assert_eq!(rec.gauge(telemetry::HELD, NAME), Some(0.0));
    assert_eq!(rec.gauge(telemetry::TERM, NAME), Some(0.0));

    store.hook().set_mode(FaultMode::Pass);
    sleep(20 * S).await;
    let again = c.try_acquire("metered").await.unwrap();
    assert_eq!(rec.counter(telemetry::CLAIMS, NAME), 2);
    assert_eq!(rec.gauge(telemetry::HELD, NAME), Some(1.0));
    assert_eq!(rec.gauge(telemetry::TERM, NAME), Some(2.0));
    again.resign().await.unwrap();
    assert_eq!(rec.gauge(telemetry::HELD, NAME), Some(0.0));
    assert_eq!(
        rec.counter(telemetry::LOSSES, NAME),
        1,
        "a resign is not a loss"
    );
}

/// During a close the work winds down under a renewed lease: the held gauge says 1 (and the
/// term gauge the term) until the release is answered, not from the moment the term ended. The
/// leadership watch, which says whether this node may act, turns false at once. The grace the
/// work used is recorded.
#[tokio::test(start_paused = true)]
async fn the_held_gauge_stays_up_until_the_release_is_answered() {
    let rec = MetricsCapture::default();
    let _local = rec.install_local();
    let store = MemoryStore::new();
    let c = Coordinator::builder(store.clone())
        .instance("m")
        .build()
        .unwrap();
    let leadership = c.leadership("gauged");
    let term = c.try_acquire("gauged").await.unwrap();
    let token = term.token();
    assert!(leadership.borrow().held);
    let run = tokio::spawn(term.run(|term: Term| async move {
        term.done().await;
        // Winding down takes 1.5 s.
        sleep(Duration::from_millis(1500)).await;
        Ok::<(), std::io::Error>(())
    }));
    sleep(S).await;
    let closing = {
        let c = c.clone();
        tokio::spawn(async move { c.close().await })
    };
    for _ in 0..14 {
        sleep(Duration::from_millis(100)).await;
        assert_eq!(
            rec.gauge(telemetry::HELD, GAUGED),
            Some(1.0),
            "the store still holds the lease for this process"
        );
        assert_eq!(rec.gauge(telemetry::TERM, GAUGED), Some(token as f64));
        assert!(!leadership.borrow().held, "the node must not act any more");
        assert!(store.get("gauged").await.unwrap().unwrap().live);
    }
    closing.await.unwrap().unwrap();
    run.await.unwrap().unwrap();
    assert!(!store.get("gauged").await.unwrap().unwrap().live);
    assert_eq!(rec.gauge(telemetry::HELD, GAUGED), Some(0.0));
    assert_eq!(rec.gauge(telemetry::TERM, GAUGED), Some(0.0));
    assert_eq!(rec.histogram(telemetry::GRACE_USED, GAUGED), vec![1.5]);
}

/// Every metric is described with its unit and HELP text, named as Prometheus expects, and
/// the README's table is the one `METRICS` gives.
#[test]
fn every_metric_is_described_and_the_readme_lists_them_all() {
    let rec = MetricsCapture::default();
    let _local = rec.install_local();
    telemetry::describe();
    let mut names = BTreeSet::new();
    for m in METRICS {
        assert!(names.insert(m.name), "{} is listed twice", m.name);
        let (unit, help) = rec
            .description(m.name)
            .unwrap_or_else(|| panic!("{} is not described", m.name));
        assert_eq!(help, m.help);
        let seconds = m.unit == "seconds";
        assert_eq!(
            unit,
            Some(if seconds {
                metrics::Unit::Seconds
            } else {
                metrics::Unit::Count
            }),
            "{}",
            m.name
        );
        assert_eq!(
            m.kind == MetricKind::Counter,
            m.name.ends_with("_total"),
            "{}: counters, and only counters, end in _total",
            m.name
        );
        assert_eq!(seconds, m.name.ends_with("_seconds"), "{}", m.name);
        assert!(m.name.starts_with("lease_"), "{}", m.name);
    }
    for constant in [
        telemetry::HELD,
        telemetry::TERM,
        telemetry::CLAIMS,
        telemetry::LOSSES,
        telemetry::RENEW_FAILURES,
        telemetry::RENEW_SECONDS,
        telemetry::RENEW_TIME_LEFT,
        telemetry::GRACE_USED,
        telemetry::CAMPAIGNS,
        telemetry::ELECTIONS_ENDED,
        telemetry::WORK_FAILURES,
        telemetry::GROUP_PARTITIONS_HELD,
        telemetry::GROUP_ACQUIRED,
        telemetry::GROUP_HANDOVERS,
        telemetry::GROUP_REBALANCE_SECONDS,
        lease_core::scheduler::telemetry::ROUNDS_STARTED,
        lease_core::scheduler::telemetry::ROUNDS_FINISHED,
        lease_core::scheduler::telemetry::ROUNDS_FAILED,
        lease_core::scheduler::telemetry::ROUNDS_CUT_SHORT,
        lease_core::scheduler::telemetry::INSTANTS_SKIPPED,
        lease_core::scheduler::telemetry::INSTANTS_SUPERSEDED,
        lease_core::scheduler::telemetry::RERUNS,
        lease_core::scheduler::telemetry::INSTANTS_LATE,
        lease_core::scheduler::telemetry::INSTANTS_MISSED,
    ] {
        assert!(names.contains(constant), "{constant} is not in METRICS");
    }

    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let begin = "<!-- metrics table: lease_core::telemetry::METRICS -->\n";
    let end = "<!-- end of metrics table -->";
    let table = readme
        .split_once(begin)
        .and_then(|(_, rest)| rest.split_once(end))
        .map(|(table, _)| table)
        .expect("the README has the metrics table between its markers");
    let expected = telemetry::markdown_table();
    assert!(
        table == expected,
        "the README's metrics table differs from lease_core::telemetry::METRICS; put this \
         between its markers:\n{expected}"
    );
}

/// A follower says whom it follows, once, and again when the holder changes; a lost term is a
/// warning; a close ends the election without a line that says it campaigns again. The
/// leadership watch tells the follower who leads. Campaigns are counted by outcome, and every
/// series carries the labels METRICS lists.
#[tokio::test(start_paused = true)]
async fn an_elector_logs_whom_it_follows_and_its_losses() {
    let rec = MetricsCapture::default();
    let logs = LogCapture::default();
    let _m = rec.install_local();
    let _l = logs.install_local();
    let mem = MemoryStore::new();
    let b_store = faulty(mem.clone());
    // b polls (hints cut), so what it reads follows the lease periods below; with hints it
    // would see each change within milliseconds (tests/handover.rs).
    b_store.hook().set_hint_mode(HintMode::Cut);
    let a = Coordinator::builder(mem.clone())
        .instance("a")
        .build()
        .unwrap();
    let b = Coordinator::builder(b_store.clone())
        .instance("b")
        .build()
        .unwrap();
    let c = Coordinator::builder(mem.clone())
        .instance("c")
        .build()
        .unwrap();
    let a_term = a.try_acquire("job").await.unwrap();
    let leadership = b.leadership("job");
    let elected = {
        let b = b.clone();
        tokio::spawn(async move {
            b.run_elected("job", |term: Term| async move {
                term.done().await;
                Ok::<(), std::io::Error>(())
            })
            .await
        })
    };
    sleep(7 * S).await;
    let following = logs.find("following: another instance holds the lease");
    assert_eq!(following.len(), 1, "one line, however many campaigns");
    assert_eq!(following[0].level, Level::INFO);
    assert_eq!(following[0].field("holder"), Some("a"));
    assert_eq!(following[0].field("term"), Some("1"));
    assert!(following[0].field("expires_in").is_some());
    let held = rec.counter(telemetry::CAMPAIGNS, &[("outcome", "held")]);
    assert!(held >= 3, "{held} campaigns answered held");
    {
        let l = leadership.borrow();
        assert!(!l.held);
        assert_eq!((l.holder.as_deref(), l.term), (Some("a"), Some(1)));
    }

    // a hands over to c in one instant. b reads the holder again once a's lease, as it read it
    // at 0 s, would have run out (15 s): then it sees the change.
    a_term.resign().await.unwrap();
    let c_term = c.try_acquire("job").await.unwrap();
    sleep(5 * S).await;
    assert!(logs.find("following: the holder changed").is_empty());
    assert_eq!(
        leadership.borrow().holder.as_deref(),
        Some("a"),
        "a hint, up to a lease old"
    );
    sleep(6 * S).await;
    let changed = logs.find("following: the holder changed");
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].field("holder"), Some("c"));
    assert_eq!(changed[0].field("term"), Some("2"));
    assert_eq!(changed[0].field("previous"), Some("a"));

    // c resigns: b leads.
    c_term.resign().await.unwrap();
    sleep(5 * S).await;
    assert_eq!(
        rec.counter(telemetry::CAMPAIGNS, &[("outcome", "claimed")]),
        1
    );
    assert!(leadership.borrow().held);
    assert_eq!(leadership.borrow().term, Some(3));

    // b's store goes away: its term is lost at the deadline, a warning.
    logs.clear();
    b_store.hook().set_mode(FaultMode::Cut);
    sleep(12 * S).await;
    assert!(!leadership.borrow().held);
    let lost = logs.find("term lost; campaigning again");
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].level, Level::WARN);
    let info_about_loss: Vec<_> = logs
        .lines()
        .into_iter()
        .filter(|l| l.level == Level::INFO && l.message.contains("lost"))
        .collect();
    assert!(
        info_about_loss.is_empty(),
        "a loss is a warning: {info_about_loss:?}"
    );
    // Its next campaign comes a retry (2–2.5 s, jittered) after the loss, which came up to 10 s
    // after the cut: wait past it before counting the campaign's error.
    sleep(3 * S).await;
    assert!(rec.counter(telemetry::CAMPAIGNS, &[("outcome", "error")]) >= 1);
    assert_eq!(
        rec.counter(telemetry::LOSSES, &[("name", "job"), ("cause", "deadline")]),
        1
    );

    // The store comes back; once b's old lease has expired it leads again. Then a close.
    b_store.hook().set_mode(FaultMode::Pass);
    sleep(20 * S).await;
    assert!(leadership.borrow().held);
    logs.clear();
    b.close().await.unwrap();
    elected.await.unwrap().unwrap();
    let lines = logs.lines();
    assert!(
        lines
            .iter()
            .all(|l| !l.message.contains("campaigning again")),
        "no line may say the closing elector campaigns again: {lines:?}"
    );
    assert_eq!(
        logs.find("election ended: the coordinator is closed").len(),
        1
    );

    // Every series carries exactly the labels METRICS lists.
    for m in METRICS {
        let want: BTreeSet<&str> = m.labels.iter().copied().collect();
        for labels in rec.series(m.name) {
            let got: BTreeSet<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(got, want, "{}", m.name);
        }
    }
}

/// A group worker's gauge of partitions held, its acquisitions, hand-overs by reason and the
/// time each rebalance took.
#[tokio::test(start_paused = true)]
async fn a_group_worker_records_partitions_handovers_and_rebalances() {
    let rec = MetricsCapture::default();
    let _local = rec.install_local();
    let group: &[(&str, &str)] = &[("group", "orders")];
    let store = MemoryStore::new();
    let timings = Timings::from_lease(Duration::from_secs(3)).unwrap();
    let settle = GroupWorker::settle_time(&timings);
    let a = GroupWorker::builder(store.clone(), "orders", 12)
        .node("a")
        .timings(timings)
        .start()
        .await
        .unwrap();
    sleep(settle).await;
    assert_eq!(
        rec.gauge(telemetry::GROUP_PARTITIONS_HELD, group),
        Some(12.0)
    );
    assert_eq!(rec.counter(telemetry::GROUP_ACQUIRED, group), 12);
    assert_eq!(
        rec.histogram(telemetry::GROUP_REBALANCE_SECONDS, group)
            .len(),
        1
    );

    let b = GroupWorker::builder(store.clone(), "orders", 12)
        .node("b")
        .timings(timings)
        .start()
        .await
        .unwrap();
    sleep(2 * settle).await;
    let (mine, theirs) = (
        a.assignment().borrow().partitions.len(),
        b.assignment().borrow().partitions.len(),
    );
    assert_eq!(mine + theirs, 12);
    // One process, two workers: the gauge is their sum.
    assert_eq!(
        rec.gauge(telemetry::GROUP_PARTITIONS_HELD, group),
        Some(12.0)
    );
    assert_eq!(
        rec.counter(
            telemetry::GROUP_HANDOVERS,
            &[("group", "orders"), ("reason", "rebalance")]
        ),
        12 - mine as u64
    );
    assert_eq!(
        rec.counter(telemetry::GROUP_ACQUIRED, group),
        12 + theirs as u64
    );
    let rebalances = rec.histogram(telemetry::GROUP_REBALANCE_SECONDS, group);
    assert_eq!(rebalances.len(), 3, "a's start, then a's and b's rebalance");
    assert!(
        rebalances.iter().all(|&s| s <= settle.as_secs_f64()),
        "{rebalances:?} within {settle:?}"
    );

    a.leave().await.unwrap();
    assert_eq!(
        rec.counter(
            telemetry::GROUP_HANDOVERS,
            &[("group", "orders"), ("reason", "leave")]
        ),
        mine as u64
    );
    sleep(2 * settle).await;
    assert_eq!(
        rec.gauge(telemetry::GROUP_PARTITIONS_HELD, group),
        Some(12.0)
    );
    assert_eq!(b.assignment().borrow().partitions.len(), 12);
    b.leave().await.unwrap();
    assert_eq!(
        rec.gauge(telemetry::GROUP_PARTITIONS_HELD, group),
        Some(0.0)
    );
    assert_eq!(
        rec.counter(
            telemetry::GROUP_HANDOVERS,
            &[("group", "orders"), ("reason", "lost")]
        ),
        0
    );
}
