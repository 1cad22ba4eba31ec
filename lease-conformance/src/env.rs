//! Where test servers come from, and what happens when one is missing.
//!
//! The policy, the same for every backend:
//!
//! 1. `LEASE_TEST_<BACKEND>_URL` (e.g. `LEASE_TEST_POSTGRES_URL`) names a running server: use it.
//!    A backend name may name a deployment (`etcd-cluster`: `LEASE_TEST_ETCD_CLUSTER_URL`, the
//!    3-member cluster of `ci/cluster/etcd.sh`), required by that name like any other.
//! 2. Otherwise, when a Docker engine answers (see [`docker_available`]) and this crate is built
//!    with its `docker` feature, [`server_url`] starts one with testcontainers: one container per
//!    backend and test process, started on first use and kept until the process exits (a Ryuk
//!    reaper then removes it). Without the feature nothing is started, and the skip line says
//!    to build with `--features lease-conformance/docker`.
//! 3. Otherwise the case prints one loud `SKIPPED <backend>: <why>` line (once per backend and
//!    test process, on the real stderr, past the test harness's capture) and returns.
//!
//! `LEASE_TEST_REQUIRE=postgres,mysql,…` (or `all`) turns such a skip into a failure, so a
//! server that CI has can never be skipped silently.
//!
//! The images the `docker` feature starts, and the URLs [`server_url`] then returns. Each image
//! is replaced by `LEASE_TEST_<BACKEND>_IMAGE` when set (`name:tag`, e.g. the
//! `lease-ci/redis:…` images `ci/docker.sh` builds from Debian's packages); such an image runs
//! with its own command, must start the server as the table says, and is ready when the server's
//! ready line appears once.
//!
//! | backend    | default image                                | URL                                                      |
//! |------------|----------------------------------------------|----------------------------------------------------------|
//! | `postgres` | `postgres:16-alpine`                         | `postgres://postgres:postgres@127.0.0.1:<port>/postgres` |
//! | `mysql`    | `mariadb:11`, empty root password, db `test` | `mysql://root@127.0.0.1:<port>/test`                     |
//! | `redis`    | `redis:7 redis-server --appendonly yes`      | `redis://127.0.0.1:<port>`                               |
//! | `nats`     | `nats:2.10 -js`                              | `nats://127.0.0.1:<port>`                                |
//! | `mongodb`  | `mongo:7` (standalone)                       | `mongodb://127.0.0.1:<port>/lease`                       |
//! | `etcd`     | `gcr.io/etcd-development/etcd:v3.5.17`, 1 s minimum lease | `etcd://127.0.0.1:<port>`                   |
//! | `memcached`| `memcached:1.6 memcached -M -vv` (never evicts) | `memcached://127.0.0.1:<port>`                      |
//!
//! The host is the engine's: `127.0.0.1` for a local socket, the bridge's gateway when the tests
//! themselves run in a container (testcontainers' rule), the engine's host for a remote one.
//!
//! `sqlite` is embedded and never gets a container. A container that cannot be started is a
//! skip like any other, with the reason in the `SKIPPED` line.

use std::collections::HashSet;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// The environment variable naming the backends that must not be skipped.
pub const REQUIRE_VAR: &str = "LEASE_TEST_REQUIRE";

/// The environment variable that gives `backend`'s server URL: `LEASE_TEST_<BACKEND>_URL`, a
/// `-` in the name written `_` (`etcd-cluster` → `LEASE_TEST_ETCD_CLUSTER_URL`).
pub fn url_var(backend: &str) -> String {
    format!(
        "LEASE_TEST_{}_URL",
        backend.to_ascii_uppercase().replace('-', "_")
    )
}

/// `true` when `LEASE_TEST_REQUIRE` lists `backend` (or `all`).
pub fn required(backend: &str) -> bool {
    std::env::var(REQUIRE_VAR).is_ok_and(|v| {
        v.split(',')
            .map(str::trim)
            .any(|b| b.eq_ignore_ascii_case(backend) || b.eq_ignore_ascii_case("all"))
    })
}

/// `true` when a Docker engine looks reachable (`DOCKER_HOST` set, or the default socket
/// exists).
pub fn docker_available() -> bool {
    std::env::var_os("DOCKER_HOST").is_some()
        || std::path::Path::new("/var/run/docker.sock").exists()
}

/// The URL of `backend`'s test server: `LEASE_TEST_<BACKEND>_URL`, else (with the `docker`
/// feature, when a Docker engine answers) a container started for this process, else `None`
/// after [`skip`]ping (which panics when the backend is required).
///
/// Synchronous, and safe to call from inside a tokio runtime: a container is started on a
/// runtime of its own while the caller waits, at most once per backend and process.
pub fn server_url(backend: &str) -> Option<String> {
    let var = url_var(backend);
    match std::env::var(&var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if docker_available() => from_docker(backend, &var),
        _ => {
            skip(
                backend,
                &format!("{var} is not set and no Docker engine answers"),
            );
            None
        }
    }
}

/// `backend`'s server in a container started for this process, or `None` after [`skip`]ping.
#[cfg(feature = "docker")]
fn from_docker(backend: &str, var: &str) -> Option<String> {
    match crate::docker::server_url(backend) {
        Ok(url) => Some(url),
        Err(why) => {
            skip(
                backend,
                &format!(
                    "{var} is not set and a Docker engine is present, but the {backend} \
                     container could not be started: {why}"
                ),
            );
            None
        }
    }
}

/// Without the `docker` feature, no container is started: [`skip`], saying how to get one.
#[cfg(not(feature = "docker"))]
fn from_docker(backend: &str, var: &str) -> Option<String> {
    skip(
        backend,
        &format!(
            "{var} is not set; a Docker engine is present, but this build starts no \
             containers: set {var}, or build with `--features lease-conformance/docker` to \
             start one"
        ),
    );
    None
}

/// Reports that `backend`'s cases cannot run, for `why`.
///
/// Prints one `SKIPPED <backend>: <why>` line per backend and process, straight to the
/// process's stderr so the test harness does not swallow it.
///
/// # Panics
///
/// When `LEASE_TEST_REQUIRE` lists `backend`: a required server must never be skipped.
pub fn skip(backend: &str, why: &str) {
    if required(backend) {
        panic!("{backend} is listed in {REQUIRE_VAR} but cannot be tested: {why}");
    }
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Mutex::default);
    let first = seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(backend.to_owned());
    if first {
        let line = format!("\nSKIPPED {backend}: {why}\n");
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// Reports that one case cannot run on `backend`'s server, for `why`, in one line
/// `NOT RUN <backend> <case>: <why>` on the process's stderr (past the test harness's capture).
/// Unlike [`skip`], never a failure: the backend's other cases run, and the line names what
/// they do not cover.
pub fn skip_case(backend: &str, case: &str, why: &str) {
    let line = format!("\nNOT RUN {backend} {case}: {why}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Reports that `case` does not apply to `backend` (the store lacks what it tests), in one line
/// `NOT APPLICABLE <backend> <case>: <why>` on the process's stderr (past the test harness's
/// capture). Never a failure.
pub fn not_applicable(backend: &str, case: &str, why: &str) {
    let line = format!("\nNOT APPLICABLE {backend} {case}: {why}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
