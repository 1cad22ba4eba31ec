//! Redis: `redis-server` on its own port with the append-only file on and `appendfsync
//! always`, so every claim is on disk before its answer and a restart keeps the last term.
//! Stopped with SIGTERM (the AOF is flushed; no RDB snapshot).

use std::path::{Path, PathBuf};

use super::{Launch, SetupError, args, find_program};

/// Returns how to start Redis on `port` with its data in `dir`.
pub(super) fn prepare(dir: &Path, port: u16, log: PathBuf) -> Result<Launch, SetupError> {
    let server = find_program(&["redis-server"])
        .ok_or_else(|| SetupError::Missing("no redis-server".to_owned()))?;
    Ok(Launch {
        program: server,
        args: args([
            "--port".into(),
            port.to_string().into(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            dir.as_os_str().to_owned(),
            "--appendonly".into(),
            "yes".into(),
            "--appendfsync".into(),
            "always".into(),
            "--save".into(),
            "".into(),
            "--daemonize".into(),
            "no".into(),
            "--protected-mode".into(),
            "no".into(),
        ]),
        user: None,
        stop_signal: "TERM",
        log,
    })
}

/// The URL of the server at `addr` (the server itself or a proxy in front of it).
pub(super) fn url(addr: std::net::SocketAddr) -> String {
    format!("redis://{addr}")
}
