//! Test servers in Docker containers, started on demand (the `docker` feature).
//!
//! [`server_url`] starts one container per backend and test process, the first time a case
//! asks for that backend, and keeps it for the rest of the process: the handles live in a
//! static registry and are never dropped. Callers are synchronous and often inside a tokio
//! runtime of their own, so every container is started on a private multi-thread runtime that
//! lives as long as the process, and the caller waits on a plain channel.
//!
//! Each backend's image is `LEASE_TEST_<BACKEND>_IMAGE` when set (`name:tag`, e.g.
//! `lease-ci/redis:7.0-…`, the images `ci/docker.sh` builds from Debian's packages), else the
//! public image of the table in [`crate::env`]. An image named in the environment runs with its
//! own command, and is ready when its server's ready line appears once.
//!
//! Because statics are never dropped, testcontainers' remove-on-drop never runs for these
//! containers. A Ryuk reaper (`testcontainers/ryuk`, the reaper every other testcontainers
//! implementation uses) removes them instead: it is started once per process, told the
//! process's session label, and removes every container with that label a few seconds after the
//! process's connection to it closes, that is after the process exits, however it exits.
//! `TESTCONTAINERS_RYUK_DISABLED=true` turns the reaper off (the containers then outlive the
//! process), `TESTCONTAINERS_RYUK_PRIVILEGED=true` runs it privileged (SELinux hosts), and
//! `TESTCONTAINERS_DOCKER_SOCKET_OVERRIDE` names the engine's socket as the engine sees it (by
//! default the path of a `unix://` `DOCKER_HOST`, else `/var/run/docker.sock`).
//!
//! A reaper that cannot be started (its image absent and no registry to pull it from, as in this
//! project's CI) costs one line, not the test run: a watcher process (`sh` and the `docker` CLI)
//! is started instead, which holds a pipe from this process and, when the pipe closes (the
//! process exits, however it exits), removes every container with this process's label. Without
//! a `docker` CLI either, the line says how to remove them by hand. Every container carries the
//! label `org.lease.conformance.session`, so `ci/docker.sh clean` finds any left, and, when
//! `LEASE_TEST_CONTAINER_RUN` is set, `org.lease.conformance.run=<its value>`, so that a run of
//! several test processes (`.ci/run`) can check that none of its own containers is left.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use testcontainers::core::wait::LogWaitStrategy;
use testcontainers::core::{IntoContainerPort, Mount, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a container may take from start to ready (image pulls come before this).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(180);

/// The label every container of this process carries, for the reaper.
const SESSION_LABEL: &str = "org.lease.conformance.session";

/// The label every container carries when [`RUN_VAR`] is set: its value, so that a CI run can
/// check that none of its containers is left, whichever test process started them.
const RUN_LABEL: &str = "org.lease.conformance.run";

/// The environment variable whose value goes into [`RUN_LABEL`].
const RUN_VAR: &str = "LEASE_TEST_CONTAINER_RUN";

/// The reaper's image and the port it listens on.
const REAPER_IMAGE: (&str, &str) = ("testcontainers/ryuk", "0.12.0");
const REAPER_PORT: u16 = 8080;

/// Where a server says it is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
    Either,
}

/// How one backend's test server runs in a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spec {
    /// The backend, as [`crate::env::server_url`] names it.
    backend: &'static str,
    /// The image's name and tag.
    image: &'static str,
    tag: &'static str,
    /// The port the server listens on inside the container.
    port: u16,
    /// Environment variables for the container.
    env: &'static [(&'static str, &'static str)],
    /// The command, or empty for the image's own.
    cmd: &'static [&'static str],
    /// The log line that says the server is ready, where, and how many times it must appear
    /// (images that initialise a database first run a temporary server that says it too).
    ready: (Stream, &'static str, usize),
}

impl Spec {
    /// `image:tag`.
    #[cfg(test)]
    fn image_ref(&self) -> String {
        format!("{}:{}", self.image, self.tag)
    }

    /// The URL of this server at `host:port`, in the form the backend's tests expect.
    fn url(&self, host: &str, port: u16) -> String {
        match self.backend {
            "postgres" => format!("postgres://postgres:postgres@{host}:{port}/postgres"),
            "mysql" => format!("mysql://root@{host}:{port}/test"),
            "mongodb" => format!("mongodb://{host}:{port}/lease"),
            scheme => format!("{scheme}://{host}:{port}"),
        }
    }

    /// The ready line, seen `times` times.
    fn wait_for(&self, times: usize) -> WaitFor {
        let (stream, message, _) = self.ready;
        let strategy = match stream {
            Stream::Stdout => LogWaitStrategy::stdout(message),
            Stream::Stderr => LogWaitStrategy::stderr(message),
            Stream::Either => LogWaitStrategy::stdout_or_stderr(message),
        };
        WaitFor::log(strategy.with_times(times))
    }
}

const SPECS: &[Spec] = &[
    Spec {
        backend: "postgres",
        image: "postgres",
        tag: "16-alpine",
        port: 5432,
        env: &[("POSTGRES_PASSWORD", "postgres")],
        cmd: &[],
        // Once from the temporary server that runs the init scripts, once from the real one.
        ready: (
            Stream::Either,
            "database system is ready to accept connections",
            2,
        ),
    },
    Spec {
        backend: "mysql",
        image: "mariadb",
        tag: "11",
        port: 3306,
        env: &[
            ("MARIADB_ALLOW_EMPTY_ROOT_PASSWORD", "1"),
            ("MARIADB_DATABASE", "test"),
        ],
        cmd: &[],
        // Once from the temporary server (no networking) that creates `test`, once for real.
        ready: (Stream::Either, "ready for connections", 2),
    },
    Spec {
        backend: "redis",
        image: "redis",
        tag: "7",
        port: 6379,
        env: &[],
        // lease-redis refuses a server without AOF unless told otherwise.
        cmd: &["redis-server", "--appendonly", "yes"],
        ready: (Stream::Stdout, "Ready to accept connections", 1),
    },
    Spec {
        backend: "nats",
        image: "nats",
        tag: "2.10",
        port: 4222,
        env: &[],
        cmd: &["-js"],
        ready: (Stream::Stderr, "Server is ready", 1),
    },
    Spec {
        backend: "etcd",
        // etcd's own registry (there is no official Docker Hub image).
        image: "gcr.io/etcd-development/etcd",
        tag: "v3.5.17",
        port: 2379,
        env: &[],
        // A 50 ms heartbeat and a 500 ms election timeout make the shortest lease 1 s, as
        // ci/start-services.sh runs it.
        cmd: &[
            "etcd",
            "--listen-client-urls",
            "http://0.0.0.0:2379",
            "--advertise-client-urls",
            "http://127.0.0.1:2379",
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
        ],
        // Logged once the member serves clients (etcd 3.4 and 3.5 alike).
        ready: (Stream::Either, "serving client traffic", 1),
    },
    Spec {
        // The worked example backend (examples/memcached-store).
        backend: "memcached",
        image: "memcached",
        tag: "1.6",
        port: 11211,
        env: &[],
        // -M: refuse to evict (an evicted lease frees its name while its holder works); -vv
        // makes it say when it listens.
        cmd: &["memcached", "-M", "-vv"],
        ready: (Stream::Stderr, "server listening", 1),
    },
    Spec {
        backend: "mongodb",
        image: "mongo",
        tag: "7",
        port: 27017,
        env: &[],
        cmd: &[],
        ready: (Stream::Stdout, "Waiting for connections", 1),
    },
];

/// The environment variable that names `backend`'s image: `LEASE_TEST_<BACKEND>_IMAGE`.
pub(crate) fn image_var(backend: &str) -> String {
    format!(
        "LEASE_TEST_{}_IMAGE",
        backend.to_ascii_uppercase().replace('-', "_")
    )
}

/// The image a container is started from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Chosen {
    name: String,
    tag: String,
    /// Named by [`image_var`] (its own command, ready at the first ready line), not the default.
    from_env: bool,
}

impl Chosen {
    fn image_ref(&self) -> String {
        format!("{}:{}", self.name, self.tag)
    }
}

/// Splits `name[:tag]` (a registry's `host:port/` prefix is part of the name); the tag is
/// `latest` when absent.
fn split_image(image: &str) -> (String, String) {
    let image = image.trim();
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(colon) => (
            image[..slash + colon].to_owned(),
            image[slash + colon + 1..].to_owned(),
        ),
        None => (image.to_owned(), "latest".to_owned()),
    }
}

/// `spec`'s image: `value` of [`image_var`] when set and not blank, else the default.
fn choose(spec: &Spec, value: Option<&str>) -> Chosen {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        Some(image) => {
            let (name, tag) = split_image(image);
            Chosen {
                name,
                tag,
                from_env: true,
            }
        }
        None => Chosen {
            name: spec.image.to_owned(),
            tag: spec.tag.to_owned(),
            from_env: false,
        },
    }
}

/// The container for `backend`, or `None` for a backend that needs none (sqlite is embedded)
/// or that this crate does not know.
pub(crate) fn spec(backend: &str) -> Option<&'static Spec> {
    SPECS
        .iter()
        .find(|s| s.backend.eq_ignore_ascii_case(backend))
}

/// The host to put in a URL for the engine's `host`: loopback (`localhost`, `127.x`, `::1`)
/// becomes `127.0.0.1`, since the ports are published on IPv4; anything else (a remote engine,
/// the bridge gateway when the tests run in a container) stays as it is.
fn url_host(host: &str) -> String {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        "127.0.0.1".to_owned()
    } else {
        host.to_owned()
    }
}

/// `backend`'s server in a container of this process, started on first use: its URL, or why it
/// could not be started. A failure is remembered, so later cases skip at once.
pub(crate) fn server_url(backend: &str) -> Result<String, String> {
    let Some(spec) = spec(backend) else {
        return Err(format!("no container image is known for {backend}"));
    };
    type Cell = Arc<OnceLock<Result<String, String>>>;
    static CELLS: Mutex<Vec<(&str, Cell)>> = Mutex::new(Vec::new());
    let cell = {
        let mut cells = CELLS.lock().unwrap_or_else(|p| p.into_inner());
        match cells.iter().find(|(b, _)| *b == spec.backend) {
            Some((_, cell)) => Arc::clone(cell),
            None => {
                let cell = Cell::default();
                cells.push((spec.backend, Arc::clone(&cell)));
                cell
            }
        }
    };
    cell.get_or_init(|| start_blocking(spec)).clone()
}

/// The runtime every container is started on; it lives as long as the process.
fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("lease-conformance-docker")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot build a tokio runtime: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Runs [`start`] on the private runtime and waits for it: safe to call from inside another
/// runtime, since this thread only waits on a channel.
fn start_blocking(spec: &'static Spec) -> Result<String, String> {
    let var = image_var(spec.backend);
    let chosen = choose(spec, std::env::var(&var).ok().as_deref());
    let image = chosen.image_ref();
    note(&format!(
        "lease-conformance: starting {image} for {} ({})",
        spec.backend,
        if chosen.from_env {
            format!("from {var}")
        } else {
            format!("the default; {var} names another")
        }
    ));
    let began = Instant::now();
    let (tx, rx) = mpsc::channel();
    runtime()?.spawn(async move {
        let _ = tx.send(start(spec, chosen).await);
    });
    let (url, id) = rx
        .recv()
        .map_err(|_| format!("starting {image} panicked"))??;
    note(&format!(
        "lease-conformance: {image} for {} ready at {url} in {:.1} s (container {})",
        spec.backend,
        began.elapsed().as_secs_f64(),
        id.get(..12).unwrap_or(&id)
    ));
    Ok(url)
}

/// The containers this process started, kept until it exits.
static KEPT: Mutex<Vec<ContainerAsync<GenericImage>>> = Mutex::new(Vec::new());

/// Starts `spec`'s server from `chosen` and waits until it is ready: its URL and container id.
async fn start(spec: &'static Spec, chosen: Chosen) -> Result<(String, String), String> {
    let session = reaper().await;
    let image = chosen.image_ref();
    let times = if chosen.from_env { 1 } else { spec.ready.2 };
    let mut request = GenericImage::new(chosen.name.clone(), chosen.tag.clone())
        .with_exposed_port(spec.port.tcp())
        .with_wait_for(spec.wait_for(times))
        .with_label(SESSION_LABEL, session)
        .with_startup_timeout(STARTUP_TIMEOUT);
    if let Some(run) = run_label() {
        request = request.with_label(RUN_LABEL, run);
    }
    for (name, value) in spec.env {
        request = request.with_env_var(*name, *value);
    }
    if !spec.cmd.is_empty() && !chosen.from_env {
        request = request.with_cmd(spec.cmd.iter().copied());
    }
    let container = request.start().await.map_err(|e| format!("{image}: {e}"))?;
    let id = container.id().to_owned();
    let host = container
        .get_host()
        .await
        .map_err(|e| format!("{image}: cannot tell the engine's host: {e}"))?;
    let port = container
        .get_host_port_ipv4(spec.port.tcp())
        .await
        .map_err(|e| format!("{image}: port {} is not published: {e}", spec.port))?;
    KEPT.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(container);
    Ok((spec.url(&url_host(&host.to_string()), port), id))
}

/// This process's session label value, after making sure (once) that a reaper removes the
/// containers carrying it when the process is gone.
async fn reaper() -> &'static str {
    static SESSION: OnceLock<String> = OnceLock::new();
    let session =
        SESSION.get_or_init(|| format!("{}-{:016x}", std::process::id(), rand::random::<u64>()));
    static REAPER: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    REAPER
        .get_or_init(|| async {
            if env_flag("TESTCONTAINERS_RYUK_DISABLED") {
                return;
            }
            if let Err(why) = start_reaper(session).await {
                let filter = format!("label={SESSION_LABEL}={session}");
                match start_watcher(&filter) {
                    Ok(()) => note(&format!(
                        "lease-conformance: no reaper ({why}); a watcher process removes this \
                         process's containers ({filter}) when it exits"
                    )),
                    Err(no_watcher) => note(&format!(
                        "lease-conformance: no reaper ({why}) and no watcher ({no_watcher}); the \
                         test containers will outlive this process: remove them with \
                         `docker rm -f $(docker ps -aq --filter {filter})`"
                    )),
                }
            }
        })
        .await;
    session
}

/// The reaper's container and the connection that keeps it waiting, kept until the process
/// exits; the connection closing is the reaper's signal.
static REAPER_KEPT: Mutex<Vec<(ContainerAsync<GenericImage>, std::net::TcpStream)>> =
    Mutex::new(Vec::new());

async fn start_reaper(session: &str) -> Result<(), String> {
    let (name, tag) = REAPER_IMAGE;
    let socket = reaper_socket(
        std::env::var("TESTCONTAINERS_DOCKER_SOCKET_OVERRIDE").ok(),
        std::env::var("DOCKER_HOST").ok(),
    );
    let container = GenericImage::new(name, tag)
        .with_exposed_port(REAPER_PORT.tcp())
        .with_wait_for(WaitFor::message_on_either_std("Started"))
        .with_mount(Mount::bind_mount(socket, "/var/run/docker.sock"))
        .with_privileged(env_flag("TESTCONTAINERS_RYUK_PRIVILEGED"))
        // The reaper exits once it has pruned; the engine then removes it.
        .with_host_config_modifier(|config| config.auto_remove = Some(true))
        .with_startup_timeout(Duration::from_secs(60))
        .start()
        .await
        .map_err(|e| format!("{name}:{tag}: {e}"))?;
    let host = container
        .get_host()
        .await
        .map_err(|e| format!("cannot tell the engine's host: {e}"))?;
    let port = container
        .get_host_port_ipv4(REAPER_PORT.tcp())
        .await
        .map_err(|e| format!("port {REAPER_PORT} is not published: {e}"))?;
    let host = url_host(&host.to_string());
    let filter = format!("label={SESSION_LABEL}={session}\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    let stream = loop {
        match register_with_reaper(&host, port, &filter).await {
            Ok(stream) => break stream,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(format!("cannot register with it at {host}:{port}: {e}")),
        }
    };
    REAPER_KEPT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((container, stream));
    Ok(())
}

/// The watcher process, kept (with the write end of its stdin) until this process exits.
static WATCHER: Mutex<Vec<Child>> = Mutex::new(Vec::new());

/// What the watcher runs: it waits for its stdin to close, then removes the containers that
/// `$1` (a `docker ps` filter) selects, one `removed container` line each on stderr.
const WATCHER_SCRIPT: &str = r#"cat >/dev/null
ids=$(docker ps -aq --filter "$1") || exit 1
for id in $ids; do
  if docker rm -f -v "$id" >/dev/null; then
    echo "lease-conformance: removed container $id ($1)" >&2
  fi
done"#;

/// Starts the reaper's stand-in: `sh` running [`WATCHER_SCRIPT`] for `filter`, with a pipe
/// from this process as its stdin. Fails when there is no `docker` CLI (or no `sh`).
fn start_watcher(filter: &str) -> Result<(), String> {
    let probe = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("no docker CLI: {e}"))?;
    if !probe.status.success() {
        return Err(format!(
            "the docker CLI does not reach the engine: {}",
            String::from_utf8_lossy(&probe.stderr).trim()
        ));
    }
    let child = Command::new("sh")
        .args(["-c", WATCHER_SCRIPT, "lease-conformance-watcher", filter])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot run sh: {e}"))?;
    WATCHER
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(child);
    Ok(())
}

/// The engine's socket as the reaper mounts it: `TESTCONTAINERS_DOCKER_SOCKET_OVERRIDE`, else the
/// path of a `unix://` `DOCKER_HOST` (an engine on a socket of its own, as `ci/docker.sh` runs
/// it), else `/var/run/docker.sock`.
fn reaper_socket(over: Option<String>, docker_host: Option<String>) -> String {
    let set = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    set(over)
        .or_else(|| set(docker_host).and_then(|h| h.strip_prefix("unix://").map(str::to_owned)))
        .unwrap_or_else(|| "/var/run/docker.sock".to_owned())
}

/// Connects to the reaper, sends it `filter` and waits for its `ACK`.
async fn register_with_reaper(
    host: &str,
    port: u16,
    filter: &str,
) -> std::io::Result<std::net::TcpStream> {
    let mut stream = tokio::net::TcpStream::connect((host, port)).await?;
    stream.write_all(filter.as_bytes()).await?;
    let mut ack = [0u8; 3];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut ack))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no ACK"))??;
    if &ack != b"ACK" {
        return Err(std::io::Error::other(format!(
            "answered {:?} instead of ACK",
            String::from_utf8_lossy(&ack)
        )));
    }
    stream.into_std()
}

/// The value of [`RUN_VAR`], when set and not blank.
fn run_label() -> Option<String> {
    std::env::var(RUN_VAR)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `true` when the environment variable `name` is `true` (or `1`).
fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.trim().eq_ignore_ascii_case("true") || v.trim() == "1")
}

/// One line straight to the process's stderr, past the test harness's capture.
fn note(line: &str) {
    let _ = std::io::stderr()
        .lock()
        .write_all(format!("\n{line}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_server_backend_has_an_image_and_sqlite_has_none() {
        for backend in [
            "postgres",
            "mysql",
            "redis",
            "nats",
            "mongodb",
            "etcd",
            "memcached",
        ] {
            assert!(spec(backend).is_some(), "{backend}");
        }
        assert!(spec("sqlite").is_none());
        assert!(spec("etcd-cluster").is_none());
        assert_eq!(spec("Postgres").map(|s| s.backend), Some("postgres"));
        assert!(server_url("sqlite").is_err());
    }

    #[test]
    fn images_are_the_documented_ones() {
        let image = |b: &str| spec(b).map(Spec::image_ref);
        assert_eq!(image("postgres").as_deref(), Some("postgres:16-alpine"));
        assert_eq!(image("mysql").as_deref(), Some("mariadb:11"));
        assert_eq!(image("redis").as_deref(), Some("redis:7"));
        assert_eq!(image("nats").as_deref(), Some("nats:2.10"));
        assert_eq!(image("mongodb").as_deref(), Some("mongo:7"));
        assert_eq!(image("memcached").as_deref(), Some("memcached:1.6"));
        assert!(spec("memcached").unwrap().cmd.contains(&"-M"));
        assert_eq!(
            image("etcd").as_deref(),
            Some("gcr.io/etcd-development/etcd:v3.5.17")
        );
        let mysql = spec("mysql").unwrap();
        assert!(
            mysql
                .env
                .contains(&("MARIADB_ALLOW_EMPTY_ROOT_PASSWORD", "1"))
        );
        assert!(mysql.env.contains(&("MARIADB_DATABASE", "test")));
        assert!(
            spec("redis")
                .unwrap()
                .cmd
                .ends_with(&["--appendonly", "yes"])
        );
        assert_eq!(spec("nats").unwrap().cmd, &["-js"]);
    }

    #[test]
    fn urls_have_the_form_the_backends_expect() {
        let url = |b: &str| spec(b).unwrap().url("127.0.0.1", 40000);
        assert_eq!(
            url("postgres"),
            "postgres://postgres:postgres@127.0.0.1:40000/postgres"
        );
        assert_eq!(url("mysql"), "mysql://root@127.0.0.1:40000/test");
        assert_eq!(url("redis"), "redis://127.0.0.1:40000");
        assert_eq!(url("nats"), "nats://127.0.0.1:40000");
        assert_eq!(url("mongodb"), "mongodb://127.0.0.1:40000/lease");
        assert_eq!(url("memcached"), "memcached://127.0.0.1:40000");
    }

    #[test]
    fn an_image_named_in_the_environment_replaces_the_default() {
        assert_eq!(image_var("redis"), "LEASE_TEST_REDIS_IMAGE");
        assert_eq!(image_var("mongodb"), "LEASE_TEST_MONGODB_IMAGE");
        let redis = spec("redis").unwrap();
        let chosen = choose(redis, Some(" lease-ci/redis:7.0-e9838139de "));
        assert_eq!(chosen.image_ref(), "lease-ci/redis:7.0-e9838139de");
        assert!(chosen.from_env);
        for unset in [None, Some(""), Some("  ")] {
            let chosen = choose(redis, unset);
            assert_eq!(chosen.image_ref(), "redis:7", "{unset:?}");
            assert!(!chosen.from_env);
        }
        let split = |i: &str| split_image(i);
        assert_eq!(split("redis"), ("redis".into(), "latest".into()));
        assert_eq!(
            split("registry.local:5000/lease-ci/pg"),
            ("registry.local:5000/lease-ci/pg".into(), "latest".into())
        );
        assert_eq!(
            split("registry.local:5000/lease-ci/pg:15"),
            ("registry.local:5000/lease-ci/pg".into(), "15".into())
        );
    }

    #[test]
    fn the_reaper_mounts_the_engines_own_socket() {
        let s = |o: Option<&str>, h: Option<&str>| {
            reaper_socket(o.map(str::to_owned), h.map(str::to_owned))
        };
        assert_eq!(s(None, None), "/var/run/docker.sock");
        assert_eq!(
            s(None, Some("unix:///run/lease-ci-docker/docker.sock")),
            "/run/lease-ci-docker/docker.sock"
        );
        assert_eq!(s(None, Some("tcp://10.0.0.1:2375")), "/var/run/docker.sock");
        assert_eq!(
            s(Some("/custom.sock"), Some("unix:///other.sock")),
            "/custom.sock"
        );
        assert_eq!(s(Some(" "), None), "/var/run/docker.sock");
    }

    #[test]
    fn loopback_hosts_become_ipv4_and_others_stay() {
        assert_eq!(url_host("localhost"), "127.0.0.1");
        assert_eq!(url_host("127.0.0.1"), "127.0.0.1");
        assert_eq!(url_host("[::1]"), "127.0.0.1");
        assert_eq!(url_host("172.17.0.1"), "172.17.0.1");
        assert_eq!(url_host("docker.example"), "docker.example");
        assert_eq!(url_host("[fd00::1]"), "[fd00::1]");
    }
}
