//! A `redis-server` process of a test, on a free port with a directory of its own: shared by
//! the failover cases (`tests/failover.rs`) and the Sentinel unit tests (`src/sentinel.rs`,
//! which include this file by path).

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

/// A `redis-server` process of the test, killed and its directory removed on drop.
pub(crate) struct Node {
    child: Child,
    pub(crate) port: u16,
    dir: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Node {
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A connection of its own to this server.
    pub(crate) async fn conn(&self) -> MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    l.local_addr().unwrap().port()
}

/// Starts `redis-server` on a free port (loopback, no RDB snapshots, AOF synced on every write
/// when it is on) with `args` added, and waits until it answers; `None` after a `SKIPPED
/// <skip_as>` line when the binary is missing.
pub(crate) async fn spawn(skip_as: &str, tag: &str, args: &[String]) -> Option<Node> {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!(
        "lease-redis-{skip_as}-{tag}-{}-{port}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let spawned = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendfsync",
            "always",
        ])
        .arg("--dir")
        .arg(&dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let child = match spawned {
        Ok(child) => child,
        Err(e) => {
            lease_conformance::env::skip(skip_as, &format!("cannot start redis-server: {e}"));
            return None;
        }
    };
    let node = Node { child, port, dir };
    let until = Instant::now() + Duration::from_secs(10);
    while redis::Client::open(node.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .is_err()
    {
        assert!(
            Instant::now() < until,
            "redis-server does not answer on {port}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Some(node)
}
