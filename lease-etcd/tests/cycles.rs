//! Claim + release cycles per second of the store against etcd's own lock API, side by side in
//! one run (issue 30's "etcd store ÷ etcd's own lock API"). Ignored by default; run it on an
//! idle machine, in release:
//!
//! ```text
//! LEASE_TEST_ETCD_URL=etcd://127.0.0.1:2379 \
//!   cargo test --release -p lease-etcd --test cycles -- --ignored --nocapture
//! ```
//!
//! The store's cycle is `claim` + `release` of one name (a holder token minted per claim, as the
//! coordinator does) with a 15 s TTL (the coordinator's default); the lock's is `lock` + `unlock` of one name under a lease the client
//! keeps (as lease-bench's `etcd-lock` subject). The store runs twice: with the default settings
//! (every claim sends its session's keep-alive with its transaction) and with
//! `EtcdConfig::session_slack(1 s)` (a claim within a second of the session's last keep-alive
//! sends none). Rounds alternate, `ROUND` each, so drift hits
//! both alike; the figure is the median round.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use lease_conformance::env;
use lease_core::LeaseStore;
use lease_core::backend::HolderToken;
use lease_etcd::etcd_client::{Client, LockOptions};
use lease_etcd::{EtcdConfig, EtcdStore};

const ROUND: Duration = Duration::from_secs(2);
const ROUNDS: usize = 5;

/// This process's CPU time so far (user + system, all threads), from `/proc/self/stat`; zero
/// where there is none.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse().ok())
        .collect();
    // Clock ticks of 10 ms (USER_HZ is 100 on Linux).
    Duration::from_millis(fields.iter().sum::<u64>() * 10)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it alone, in release, with --ignored --nocapture"]
async fn store_cycles_against_etcd_lock() {
    let Some(url) = env::server_url("etcd") else {
        return;
    };
    let store = EtcdStore::connect(&url, EtcdConfig::new().prefix("lease-cycles/"))
        .await
        .unwrap();
    let slack = Duration::from_secs(1);
    let slack_store = EtcdStore::connect(
        &url,
        EtcdConfig::new()
            .prefix("lease-cycles-slack/")
            .session_slack(slack),
    )
    .await
    .unwrap();
    let ttl = Duration::from_secs(15);
    let mut client: Client = store.client().clone();
    let mut lease = client.lease_grant(60, None).await.unwrap().id();
    let mut granted = Instant::now();
    let (mut ours, mut slacked, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    // Client CPU per cycle, in µs, per subject.
    let mut cpu_per_cycle = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        for (i, (store, out)) in [(&store, &mut ours), (&slack_store, &mut slacked)]
            .into_iter()
            .enumerate()
        {
            let start = Instant::now();
            let cpu0 = cpu();
            let mut n = 0u64;
            while start.elapsed() < ROUND {
                // A holder token per claim, as the coordinator mints them.
                let holder = HolderToken::mint();
                let grant = store.claim("cycle", &holder, "bench", ttl).await.unwrap();
                assert!(grant.is_some(), "the name is free");
                assert!(store.release("cycle", &holder).await.unwrap());
                n += 1;
            }
            out.push(n as f64 / start.elapsed().as_secs_f64());
            cpu_per_cycle[i].push((cpu() - cpu0).as_secs_f64() * 1e6 / n as f64);
        }
        let start = Instant::now();
        let cpu0 = cpu();
        let mut n = 0u64;
        while start.elapsed() < ROUND {
            if granted.elapsed() > Duration::from_secs(30) {
                lease = client.lease_grant(60, None).await.unwrap().id();
                granted = Instant::now();
            }
            let locked = client
                .lock(
                    "lease-cycles-lock",
                    Some(LockOptions::new().with_lease(lease)),
                )
                .await
                .unwrap();
            client.unlock(locked.key().to_vec()).await.unwrap();
            n += 1;
        }
        theirs.push(n as f64 / start.elapsed().as_secs_f64());
        cpu_per_cycle[2].push((cpu() - cpu0).as_secs_f64() * 1e6 / n as f64);
    }
    let (ours, slacked, theirs) = (median(ours), median(slacked), median(theirs));
    println!(
        "etcd claim+release cycles/s: store {ours:.0}, store with session_slack({slack:?}) \
         {slacked:.0}, etcd lock {theirs:.0}; store ÷ lock {:.2}×, with the slack {:.2}×",
        ours / theirs,
        slacked / theirs
    );
    let [a, b, c] = cpu_per_cycle.map(median);
    println!(
        "client CPU per cycle: store {a:.0} µs, with the slack {b:.0} µs, etcd lock {c:.0} µs"
    );
}
