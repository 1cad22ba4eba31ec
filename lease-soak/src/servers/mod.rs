//! Servers the soak starts itself: one process per backend, on a free loopback port, with its
//! data in a temporary directory, stopped with the server's own graceful signal and started
//! again on the same port and data for the mid-run restart.
//!
//! Every process and directory is owned by a guard: dropping a [`Server`] (the normal end, an
//! error, a panic, or Ctrl-C dropping the soak's future) stops the process — gracefully, then
//! with SIGKILL after a few seconds — and removes the directory.

mod mariadb;
mod nats;
mod postgres;
mod redis;

use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cli::BackendKind;

/// How long a graceful stop may take before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a fresh process may take to listen on its port.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a server could not be set up.
#[derive(Debug)]
pub(crate) enum SetupError {
    /// A binary is missing: the backend is skipped (unless required).
    Missing(String),
    /// Something else failed: the backend fails.
    Failed(String),
}

/// A temporary directory, removed when dropped (unless kept).
#[derive(Debug)]
pub(crate) struct TempDir {
    path: PathBuf,
    keep: bool,
}

impl TempDir {
    /// A new directory `lease-soak-<label>-<pid>-<nanos>` under the system's temporary
    /// directory, readable by every user (server processes may run as their own user).
    pub(crate) fn new(label: &str, keep: bool) -> io::Result<TempDir> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "lease-soak-{label}-{}-{nanos:09}",
            std::process::id()
        ));
        fs::create_dir(&path)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
        Ok(TempDir { path, keep })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("soak: kept {}", self.path.display());
        } else if let Err(e) = fs::remove_dir_all(&self.path) {
            eprintln!("soak: could not remove {}: {e}", self.path.display());
        }
    }
}

/// How to start one server process.
#[derive(Debug, Clone)]
struct Launch {
    program: PathBuf,
    args: Vec<OsString>,
    /// Run as this (uid, gid) instead of ours.
    user: Option<(u32, u32)>,
    /// The signal of a graceful stop, as `kill -s` names it.
    stop_signal: &'static str,
    log: PathBuf,
}

impl Launch {
    fn spawn(&self) -> io::Result<Child> {
        let log = File::options().create(true).append(true).open(&self.log)?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a Ctrl-C at the terminal reaches the soak only, which then
            // stops the server itself.
            .process_group(0);
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        cmd.spawn()
    }
}

/// A server process the soak started, with its data directory.
#[derive(Debug)]
pub(crate) struct Server {
    // Field order matters: the process is stopped before its directory is removed.
    child: Option<Child>,
    kind: BackendKind,
    port: u16,
    launch: Launch,
    /// Held for its `Drop`: removed once the process is gone.
    _dir: TempDir,
}

impl Server {
    /// Prepares the server's data directory on a free port and starts it; returns once it
    /// listens.
    pub(crate) async fn launch(kind: BackendKind, keep: bool) -> Result<Server, SetupError> {
        let dir = TempDir::new(kind.name(), keep)
            .map_err(|e| SetupError::Failed(format!("temporary directory: {e}")))?;
        let port = free_port().map_err(|e| SetupError::Failed(format!("free port: {e}")))?;
        let log = dir.path().join("server.log");
        let launch = match kind {
            BackendKind::Postgres => postgres::prepare(dir.path(), port, log)?,
            BackendKind::Mariadb => mariadb::prepare(dir.path(), port, log)?,
            BackendKind::Redis => redis::prepare(dir.path(), port, log)?,
            BackendKind::Nats => nats::prepare(dir.path(), port, log)?,
            BackendKind::Memory | BackendKind::Sqlite => {
                return Err(SetupError::Failed(format!("{kind} has no server")));
            }
        };
        let mut server = Server {
            child: None,
            kind,
            port,
            launch,
            _dir: dir,
        };
        server.start().await.map_err(SetupError::Failed)?;
        Ok(server)
    }

    /// The server's loopback address.
    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// Starts the process and waits until it accepts TCP connections.
    pub(crate) async fn start(&mut self) -> Result<(), String> {
        let child = self
            .launch
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.launch.program.display()))?;
        self.child = Some(child);
        let until = Instant::now() + LISTEN_TIMEOUT;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!(
                    "{} exited at start-up ({status}): {}",
                    self.kind,
                    self.log_tail()
                ));
            }
            if tokio::net::TcpStream::connect(self.addr()).await.is_ok() {
                return Ok(());
            }
            if Instant::now() > until {
                return Err(format!(
                    "{} does not listen on {} after {LISTEN_TIMEOUT:?}: {}",
                    self.kind,
                    self.addr(),
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the process with its graceful signal and waits for it to exit (SIGKILL after
    /// [`STOP_TIMEOUT`], reported as an error: a restart must be clean).
    pub(crate) async fn stop(&mut self) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        signal(&child, self.launch.stop_signal);
        let until = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{} did not stop within {STOP_TIMEOUT:?} of SIG{}; killed",
                        self.kind, self.launch.stop_signal
                    ));
                }
            }
        }
    }

    /// The last lines of the server's log, for error messages.
    pub(crate) fn log_tail(&self) -> String {
        log_tail(&self.launch.log)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        // Blocking is fine here: this runs at the end of a backend's soak or on the way out.
        signal(&child, self.launch.stop_signal);
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Sends `sig` (a name such as `TERM`) to the child, through the `kill` command (no unsafe
/// code, no libc binding).
fn signal(child: &Child, sig: &str) {
    let sent = Command::new("kill")
        .arg("-s")
        .arg(sig)
        .arg(child.id().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !sent.is_ok_and(|s| s.success()) {
        eprintln!("soak: kill -s {sig} {} failed", child.id());
    }
}

/// The last lines of a log file, on one line.
fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    if tail.is_empty() {
        format!("(log {} is empty)", path.display())
    } else {
        format!("log: {tail}")
    }
}

/// The URL of a `kind` server at `addr` (the server itself, or a proxy in front of it).
pub(crate) fn url(kind: BackendKind, addr: SocketAddr) -> Option<String> {
    match kind {
        BackendKind::Postgres => Some(postgres::url(addr)),
        BackendKind::Mariadb => Some(mariadb::url(addr)),
        BackendKind::Redis => Some(redis::url(addr)),
        BackendKind::Nats => Some(nats::url(addr)),
        BackendKind::Memory | BackendKind::Sqlite => None,
    }
}

/// A loopback port nobody listens on right now.
pub(crate) fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Whether this process runs as root (the owner of `/proc/self` is the effective user).
fn running_as_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The (uid, gid) of a system user, from `/etc/passwd`.
fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        let uid = fields.next()?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some((uid, gid))
    })
}

/// The first of `names` found on `PATH` or in the usual system directories.
fn find_program(names: &[&str]) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for extra in [
        "/usr/local/sbin",
        "/usr/sbin",
        "/sbin",
        "/usr/local/bin",
        "/usr/bin",
    ] {
        dirs.push(PathBuf::from(extra));
    }
    names.iter().find_map(|name| {
        dirs.iter()
            .map(|d| d.join(name))
            .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
    })
}

/// Runs a set-up command to completion (as `user` when given), failing with its output.
fn run_setup(
    program: &Path,
    args: &[OsString],
    user: Option<(u32, u32)>,
) -> Result<(), SetupError> {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    if let Some((uid, gid)) = user {
        cmd.uid(uid).gid(gid);
    }
    let out = cmd
        .output()
        .map_err(|e| SetupError::Failed(format!("running {}: {e}", program.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let text = if text.trim().is_empty() {
        String::from_utf8_lossy(&out.stdout)
    } else {
        text
    };
    let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    Err(SetupError::Failed(format!(
        "{} failed ({}): {}",
        program.display(),
        out.status,
        tail[tail.len().saturating_sub(3)..].join(" | ")
    )))
}

/// Shorthand for an argument list.
fn args<I, S>(items: I) -> Vec<OsString>
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    items.into_iter().map(Into::into).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_dirs_are_removed_unless_kept() {
        let dir = TempDir::new("test", false).unwrap();
        let path = dir.path().to_owned();
        assert!(path.is_dir());
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    fn root_is_in_passwd_and_sh_is_found() {
        assert_eq!(lookup_user("root"), Some((0, 0)));
        assert!(lookup_user("no-such-user-here").is_none());
        assert!(find_program(&["no-such-program", "sh"]).is_some());
    }

    #[test]
    fn free_ports_are_bindable() {
        let port = free_port().unwrap();
        assert!(TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok());
    }
}
