//! A server slower to accept a connection than an operation may last is still reached: the
//! store's lease connections open on tasks of their own, which outlive the operation that gave
//! up on them (see `wire/conns.rs`).
//!
//! Seen failing before: every operation after the connection was lost started a connect of its
//! own and was cut at its timeout, so no operation ever reached the server again (a `lease run
//! --permits 3 --wait` on PostgreSQL hung for a minute on a loaded machine, where a connect took
//! 3 s and a claim's attempt 666 ms).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_conformance::env;
use lease_core::LeaseStore;
use lease_core::backend::HolderToken;
use lease_sql::{MySqlStore, PostgresStore, SqlConfig};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// How long the forwarder holds each new connection before it reaches the server.
const ACCEPT_DELAY: Duration = Duration::from_millis(1500);

/// What each operation of the case may take: less than a connect.
const OPERATION: Duration = Duration::from_millis(300);

/// A TCP forwarder that holds each new connection for [`ACCEPT_DELAY`] before connecting it to
/// the server, and cuts every open one on demand.
struct SlowAccept {
    addr: SocketAddr,
    open: Arc<Mutex<Vec<AbortHandle>>>,
}

impl SlowAccept {
    async fn start(target: (String, u16)) -> SlowAccept {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(Mutex::new(Vec::new()));
        let tracked = Arc::clone(&open);
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let target = target.clone();
                let task = tokio::spawn(async move {
                    tokio::time::sleep(ACCEPT_DELAY).await;
                    let Ok(mut server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
                tracked.lock().unwrap().push(task.abort_handle());
            }
        });
        SlowAccept { addr, open }
    }

    /// Closes every connection open through the forwarder.
    fn cut(&self) {
        for task in self.open.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// Cuts the store's one lease connection, then asks with operations bounded by [`OPERATION`]
/// until one is answered: within a few connects' time.
async fn reached_again(backend: &str, store: &dyn LeaseStore, slow: &SlowAccept) {
    let name = format!("slow-connect-{:x}", support::rand_u64());
    store.get(&name).await.unwrap();
    slow.cut();
    // The first operation finds its connection cut (an error of the transport).
    let _ = tokio::time::timeout(OPERATION, store.get(&name)).await;
    let started = std::time::Instant::now();
    let mut timed_out = 0;
    loop {
        match tokio::time::timeout(OPERATION, store.get(&name)).await {
            Ok(Ok(_)) => break,
            Ok(Err(e)) => panic!("{backend}: an operation failed: {e}"),
            Err(_) => timed_out += 1,
        }
        assert!(
            started.elapsed() < ACCEPT_DELAY * 10,
            "{backend}: no operation bounded by {OPERATION:?} reached the server in {:?} \
             ({timed_out} timed out) while each connect takes {ACCEPT_DELAY:?}",
            started.elapsed()
        );
    }
    eprintln!(
        "{backend}: reached again {:?} after the cut ({timed_out} operations timed out)",
        started.elapsed()
    );
    let h = HolderToken::mint();
    let claimed = store.claim(&name, &h, "a", Duration::from_secs(5)).await;
    assert!(
        matches!(claimed, Ok(Some(_))),
        "{backend}: a claim on the reopened connection: {claimed:?}"
    );
    store.release(&name, &h).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_is_reached_although_a_connect_outlasts_an_operation() {
    let Some(url) = env::server_url("postgres") else {
        return;
    };
    let opts = PgConnectOptions::from_str(&url).unwrap();
    let slow = SlowAccept::start((opts.get_host().to_owned(), opts.get_port())).await;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_lazy_with(opts.host("127.0.0.1").port(slow.addr.port()));
    let store = PostgresStore::with_client(pool, SqlConfig::default().lease_connections(1))
        .await
        .unwrap();
    reached_again("postgres", &store, &slow).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_is_reached_although_a_connect_outlasts_an_operation() {
    let Some(url) = env::server_url("mysql") else {
        return;
    };
    let opts = MySqlConnectOptions::from_str(&url).unwrap();
    let slow = SlowAccept::start((opts.get_host().to_owned(), opts.get_port())).await;
    let pool = MySqlPoolOptions::new()
        .max_connections(2)
        .connect_lazy_with(opts.host("127.0.0.1").port(slow.addr.port()));
    let store = MySqlStore::with_client(pool, SqlConfig::default().lease_connections(1))
        .await
        .unwrap();
    reached_again("mysql", &store, &slow).await;
}
