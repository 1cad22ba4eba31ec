//! The watchdog: a helper process that kills CMD's process group when `lease` dies, however it
//! dies (kill -9 included).
//!
//! `lease` starts its own binary as a hidden `__watchdog` child, in a process group of its own
//! (so a terminal's Ctrl-C or a signal to `lease`'s group does not reach it), with a pipe as
//! its stdin whose write end only `lease` holds. `lease` tells it which group to guard
//! (`arm <pgid>`) and when that group is gone (`disarm`). When `lease` dies, the kernel closes
//! the pipe; the watchdog reads end-of-file and SIGKILLs the armed group.

use std::io;
use std::process::Stdio;
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::signal::unix::{SignalKind, signal};

use super::group::{group_alive, signal_group};
use super::self_exe;
use crate::exit::{CliError, Exit};

/// The hidden subcommand that runs the watchdog (see `cli::Command::Watchdog`).
const WATCHDOG_SUBCOMMAND: &str = "__watchdog";

/// `lease`'s handle on its watchdog.
#[derive(Debug)]
pub(crate) struct Watchdog {
    /// Kept so the process is reaped; never waited for.
    _child: Child,
    stdin: ChildStdin,
}

impl Watchdog {
    /// Starts the watchdog.
    pub(crate) fn spawn() -> Result<Watchdog, CliError> {
        let cannot = |e: io::Error| {
            CliError::new(
                Exit::CannotStart,
                format!("cannot start lease's watchdog process: {e}"),
            )
        };
        let mut child = Command::new(self_exe())
            .arg0("lease")
            .arg(WATCHDOG_SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .map_err(cannot)?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| cannot(io::Error::other("no pipe to the watchdog")))?;
        Ok(Watchdog {
            _child: child,
            stdin,
        })
    }

    /// Tells the watchdog to kill the group `pgid` if `lease` dies.
    pub(crate) async fn arm(&mut self, pgid: Pid) -> io::Result<()> {
        let line = format!("arm {}\n", pgid.as_raw_nonzero());
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await
    }

    /// Tells the watchdog that the armed group is gone.
    pub(crate) async fn disarm(&mut self) -> io::Result<()> {
        self.stdin.write_all(b"disarm\n").await?;
        self.stdin.flush().await
    }
}

/// The watchdog's main loop (the `__watchdog` subcommand). Returns its exit code.
pub(crate) async fn watch() -> u8 {
    // Stop signals are for `lease`, which forwards them; the watchdog outlives them so it can
    // still act if `lease` dies. Installing handlers keeps them from ending this process.
    let _ignored = [
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ];
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut armed: Option<Pid> = None;
    while let Ok(Some(line)) = lines.next_line().await {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("arm"), Some(pgid)) => {
                armed = pgid.parse::<i32>().ok().and_then(Pid::from_raw);
            }
            (Some("disarm"), None) => armed = None,
            _ => {}
        }
    }
    let Some(pgid) = armed else {
        return 0;
    };
    // `lease` is gone while CMD's group may live: kill it, and keep at it briefly in case a
    // member was forking.
    for _ in 0..200 {
        let _ = signal_group(pgid, Signal::KILL);
        if !group_alive(pgid) {
            return 0;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("lease watchdog: process group {pgid:?} survived SIGKILL\n").as_bytes(),
    );
    1
}
