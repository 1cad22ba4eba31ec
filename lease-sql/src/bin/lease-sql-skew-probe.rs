//! Test support for the clock-skew test: claims or reads one lease and prints the outcome, so a
//! test can run it under `faketime` with a wall clock hours off.
//!
//! Usage: `lease-sql-skew-probe URL NAME TTL_MS claim|get`. Prints `clock <unix seconds>` (this
//! process's own wall clock, so the test can check the skew took effect), `boot <ms>` (the boot
//! clock as lease-sql reads it on Linux, through rustix — the test checks that `faketime` did not
//! move it) and then one of `claimed <term>`, `held`, `live <term>`, `expired <term>`, `none`,
//! `error <message>`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease_core::{LeaseStore, backend::HolderToken};
use lease_sql::{MySqlStore, PostgresStore, SqlConfig, SqliteStore};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, name, ttl_ms, action] = args.as_slice() else {
        eprintln!("usage: lease-sql-skew-probe URL NAME TTL_MS claim|get");
        std::process::exit(2);
    };
    let clock = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    println!("clock {clock}");
    #[cfg(target_os = "linux")]
    {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        println!("boot {}", ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000);
    }
    let ttl = Duration::from_millis(ttl_ms.parse().unwrap_or(1000));
    let store: Box<dyn LeaseStore> = match open(url).await {
        Ok(s) => s,
        Err(e) => {
            println!("error {e}");
            return;
        }
    };
    let line = match action.as_str() {
        "claim" => match store.claim(name, &HolderToken::mint(), "probe", ttl).await {
            Ok(Some(g)) => format!("claimed {}", g.term),
            Ok(None) => "held".to_owned(),
            Err(e) => format!("error {e}"),
        },
        _ => match store.get(name).await {
            Ok(Some(i)) if i.live => format!("live {}", i.term),
            Ok(Some(i)) => format!("expired {}", i.term),
            Ok(None) => "none".to_owned(),
            Err(e) => format!("error {e}"),
        },
    };
    println!("{line}");
}

async fn open(url: &str) -> lease_core::Result<Box<dyn LeaseStore>> {
    let config = SqlConfig::default();
    Ok(if url.starts_with("postgres") {
        Box::new(PostgresStore::connect(url, config).await?)
    } else if url.starts_with("mysql") || url.starts_with("mariadb") {
        Box::new(MySqlStore::connect(url, config).await?)
    } else {
        Box::new(SqliteStore::connect(url, config).await?)
    })
}
