//! Signalling CMD's process group, and telling when it is gone.

use std::io;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group, test_kill_process_group};
use tokio::time::{Instant, sleep};

/// How often a group is checked while waiting for it to go.
const POLL: Duration = Duration::from_millis(20);

/// Sends `sig` to every process in the group `pgid`. A group that is already gone is not an
/// error.
pub(crate) fn signal_group(pgid: Pid, sig: Signal) -> io::Result<()> {
    match kill_process_group(pgid, sig) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `true` while some process of the group `pgid` is alive. Zombies do not count: a process
/// that has exited is gone even if nobody has reaped it yet (orphans whose new parent never
/// reaps them stay zombies).
pub(crate) fn group_alive(pgid: Pid) -> bool {
    if let Err(rustix::io::Errno::SRCH) = test_kill_process_group(pgid) {
        return false;
    }
    live_members(pgid).unwrap_or(true)
}

/// Whether any non-zombie process belongs to the group, from `/proc`; `None` where `/proc`
/// cannot tell.
#[cfg(target_os = "linux")]
fn live_members(pgid: Pid) -> Option<bool> {
    let want = pgid.as_raw_nonzero().get();
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name.to_str() else {
            continue;
        };
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // A process may vanish between listing and reading: skip it.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp …"; comm may hold spaces and parentheses.
        let Some((_, after_comm)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = after_comm.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
        if pgrp == Some(want) && !matches!(state, Some("Z") | Some("X")) {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(not(target_os = "linux"))]
fn live_members(_pgid: Pid) -> Option<bool> {
    None
}

/// Waits until the group `pgid` is gone or `within` has passed; `true` when it is gone.
pub(crate) async fn wait_group_gone(pgid: Pid, within: Duration) -> bool {
    let until = Instant::now() + within;
    loop {
        if !group_alive(pgid) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        sleep(POLL.min(until.saturating_duration_since(Instant::now()))).await;
    }
}

/// Ends what is left of the group: SIGTERM, then SIGKILL once `grace` has passed. `true` when
/// the group is gone at the end.
pub(crate) async fn end_group(pgid: Pid, grace: Duration) -> bool {
    if !group_alive(pgid) {
        return true;
    }
    let _ = signal_group(pgid, Signal::TERM);
    if wait_group_gone(pgid, grace).await {
        return true;
    }
    kill_group(pgid).await
}

/// SIGKILLs the group and waits (up to a second) until it is gone; `true` when it is.
pub(crate) async fn kill_group(pgid: Pid) -> bool {
    let _ = signal_group(pgid, Signal::KILL);
    wait_group_gone(pgid, Duration::from_secs(1)).await
}
