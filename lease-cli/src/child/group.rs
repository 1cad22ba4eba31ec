//! Signalling CMD's process group, and finding every descendant of a process.

use std::collections::HashMap;
use std::io;

use rustix::process::{Pid, Signal, kill_process_group};

/// Sends `sig` to every process in the group `pgid`. A group that is already gone is not an
/// error.
pub(crate) fn signal_group(pgid: Pid, sig: Signal) -> io::Result<()> {
    match kill_process_group(pgid, sig) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Every live (not zombie) descendant of `root`, from `/proc`: children, their children, and
/// so on. A process that forks while this runs may be missed; callers loop until none is left.
pub(crate) fn descendants(root: Pid) -> Vec<Pid> {
    processes_under(root)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

/// The live descendants of `root` (as [`descendants`] finds them) that are not in the process
/// group `pgid`, as their `/proc` entry shows when it is read: those a signal to that group
/// does not reach (they called `setsid` or `setpgid`).
pub(crate) fn descendants_outside(root: Pid, pgid: Pid) -> Vec<Pid> {
    processes_under(root)
        .into_iter()
        .filter(|&(_, group)| group != Some(pgid))
        .map(|(pid, _)| pid)
        .collect()
}

/// Every live descendant of `root` with its process group (`None` when it cannot be read).
#[cfg(target_os = "linux")]
fn processes_under(root: Pid) -> Vec<(Pid, Option<Pid>)> {
    /// Per parent: its children, each with whether it is a zombie and its process group.
    type Children = HashMap<i32, Vec<(i32, bool, Option<Pid>)>>;
    let mut children: Children = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name.to_str().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // A process may vanish between listing and reading: skip it.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((zombie, ppid, pgrp)) = parse_stat(&stat) else {
            continue;
        };
        children.entry(ppid).or_default().push((pid, zombie, pgrp));
    }
    let mut out = Vec::new();
    let mut todo = vec![root.as_raw_nonzero().get()];
    while let Some(parent) = todo.pop() {
        for &(pid, zombie, pgrp) in children.get(&parent).map(Vec::as_slice).unwrap_or_default() {
            // A zombie's children were re-parented already; it has none to walk.
            if !zombie && let Some(p) = Pid::from_raw(pid) {
                out.push((p, pgrp));
                todo.push(pid);
            }
        }
    }
    out
}

/// From a `/proc/PID/stat` line: whether the process is a zombie (or dead), its parent, and
/// its process group (`None` when not shown). A process in the middle of exiting shows
/// parent 0 and group -1 (the kernel prints its defaults once the process's signal handlers
/// are gone): the group is then `None`, never a `Pid` of -1 (`Pid::from_raw` takes no
/// negative number; a debug build panics on one).
#[cfg(target_os = "linux")]
fn parse_stat(stat: &str) -> Option<(bool, i32, Option<Pid>)> {
    // "pid (comm) state ppid pgrp …"; comm may hold spaces and parentheses.
    let (_, after_comm) = stat.rsplit_once(')')?;
    let mut fields = after_comm.split_whitespace();
    let zombie = matches!(fields.next(), Some("Z" | "X"));
    let ppid = fields.next()?.parse::<i32>().ok()?;
    let pgrp = fields
        .next()
        .and_then(|f| f.parse::<i32>().ok())
        .filter(|&g| g > 0)
        .and_then(Pid::from_raw);
    Some((zombie, ppid, pgrp))
}

/// Without `/proc`, no descendant can be found.
#[cfg(not(target_os = "linux"))]
fn processes_under(_root: Pid) -> Vec<(Pid, Option<Pid>)> {
    Vec::new()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_state_parent_and_group() {
        let line = "4242 (sh (x) y) S 17 4242 4242 0 -1 4194304 99 0 0 0";
        assert_eq!(parse_stat(line), Some((false, 17, Pid::from_raw(4242))));
        assert_eq!(
            parse_stat("4243 (date) Z 4242 4242 4242 0 -1 0"),
            Some((true, 4242, Pid::from_raw(4242)))
        );
    }

    /// A process in the middle of exiting: parent 0, group and session -1.
    #[test]
    fn an_exiting_process_has_no_group() {
        assert_eq!(
            parse_stat("4244 (sleep) X 0 -1 -1 0 -1 0"),
            Some((true, 0, None))
        );
        assert_eq!(
            parse_stat("4245 (sleep) S 0 -1 -1 0 -1 0"),
            Some((false, 0, None))
        );
    }
}
