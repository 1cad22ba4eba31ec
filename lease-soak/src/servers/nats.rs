//! NATS: `nats-server` with JetStream on its own port, its store (file storage) in the
//! temporary directory. Stopped with SIGTERM (JetStream flushes its streams).

use std::path::{Path, PathBuf};

use super::{Launch, SetupError, args, find_program};

/// Returns how to start NATS on `port` with its JetStream store in `dir`.
pub(super) fn prepare(dir: &Path, port: u16, log: PathBuf) -> Result<Launch, SetupError> {
    let server = find_program(&["nats-server"])
        .ok_or_else(|| SetupError::Missing("no nats-server".to_owned()))?;
    Ok(Launch {
        program: server,
        args: args([
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string().into(),
            "-js".into(),
            "-sd".into(),
            dir.join("jetstream").into_os_string(),
        ]),
        user: None,
        stop_signal: "TERM",
        log,
    })
}

/// The URL of the server at `addr` (the server itself or a proxy in front of it).
pub(super) fn url(addr: std::net::SocketAddr) -> String {
    format!("nats://{addr}")
}
