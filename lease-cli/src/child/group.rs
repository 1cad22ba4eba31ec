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
#[cfg(target_os = "linux")]
pub(crate) fn descendants(root: Pid) -> Vec<Pid> {
    let mut children: HashMap<i32, Vec<(i32, bool)>> = HashMap::new();
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
        // "pid (comm) state ppid …"; comm may hold spaces and parentheses.
        let Some((_, after_comm)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = after_comm.split_whitespace();
        let zombie = matches!(fields.next(), Some("Z" | "X"));
        let Some(ppid) = fields.next().and_then(|f| f.parse::<i32>().ok()) else {
            continue;
        };
        children.entry(ppid).or_default().push((pid, zombie));
    }
    let mut out = Vec::new();
    let mut todo = vec![root.as_raw_nonzero().get()];
    while let Some(parent) = todo.pop() {
        for &(pid, zombie) in children.get(&parent).map(Vec::as_slice).unwrap_or_default() {
            // A zombie's children were re-parented already; it has none to walk.
            if !zombie && let Some(p) = Pid::from_raw(pid) {
                out.push(p);
                todo.push(pid);
            }
        }
    }
    out
}

/// Without `/proc`, no descendant can be found.
#[cfg(not(target_os = "linux"))]
pub(crate) fn descendants(_root: Pid) -> Vec<Pid> {
    Vec::new()
}
