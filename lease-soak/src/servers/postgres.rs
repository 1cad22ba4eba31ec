//! PostgreSQL: `initdb` into the temporary directory (trust authentication), then `postgres`
//! in the foreground on its own port, as the `postgres` user when the soak runs as root.
//! Stopped with SIGINT (fast shutdown: open sessions are ended, committed data kept).

use std::fs;
use std::os::unix::fs::chown;
use std::path::{Path, PathBuf};

use super::{Launch, SetupError, args, lookup_user, run_setup, running_as_root};

/// The newest installed server's binary directory, `/usr/lib/postgresql/<version>/bin`.
fn bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Creates the cluster in `dir/data` and returns how to start it on `port`.
pub(super) fn prepare(dir: &Path, port: u16, log: PathBuf) -> Result<Launch, SetupError> {
    let bin = bin_dir().ok_or_else(|| {
        SetupError::Missing("no /usr/lib/postgresql/<version>/bin/{initdb,postgres}".to_owned())
    })?;
    let user = if running_as_root() {
        let ids = lookup_user("postgres").ok_or_else(|| {
            SetupError::Missing("running as root and there is no postgres user".to_owned())
        })?;
        chown(dir, Some(ids.0), Some(ids.1))
            .map_err(|e| SetupError::Failed(format!("chown {}: {e}", dir.display())))?;
        Some(ids)
    } else {
        None
    };
    let data = dir.join("data");
    run_setup(
        &bin.join("initdb"),
        &args([
            "-D".into(),
            data.clone().into_os_string(),
            "-U".into(),
            "postgres".into(),
            "-A".into(),
            "trust".into(),
            "-E".into(),
            "UTF8".into(),
            "--no-sync".into(),
        ]),
        user,
    )?;
    Ok(Launch {
        program: bin.join("postgres"),
        args: args([
            "-D".into(),
            data.into_os_string(),
            "-p".into(),
            port.to_string().into(),
            "-k".into(),
            dir.as_os_str().to_owned(),
            "-c".into(),
            "listen_addresses=127.0.0.1".into(),
            "-c".into(),
            "fsync=on".into(),
            "-c".into(),
            "synchronous_commit=on".into(),
        ]),
        user,
        stop_signal: "INT",
        log,
    })
}

/// The URL of the server at `addr` (the server itself or a proxy in front of it).
pub(super) fn url(addr: std::net::SocketAddr) -> String {
    format!("postgres://postgres@{addr}/postgres")
}
