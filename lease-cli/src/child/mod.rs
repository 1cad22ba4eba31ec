//! CMD under the watchdog: its own process group, every descendant accounted for, tied to the
//! term's deadline and to `lease`'s life.
//!
//! - The [`watchdog`] is a separate process in a process group of its own, a child subreaper,
//!   and CMD's parent. It ends CMD and every descendant of it at the term's local deadline,
//!   when `lease` orders it, and when `lease` dies (kill -9 included), and tells `lease` when
//!   none is left.
//! - CMD leads a new process group, so signals reach everything it started, and a terminal's
//!   Ctrl-C reaches `lease` (which forwards it) rather than CMD directly.
//! - CMD starts through the [`shim`], which sets the parent-death signal, so CMD itself dies
//!   with the watchdog should the watchdog be killed.

mod group;
mod shim;
mod watchdog;

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

pub(crate) use group::{descendants, signal_group};
pub(crate) use shim::{EXEC_SUBCOMMAND, become_cmd};
pub(crate) use watchdog::{Report, Watchdog, boot_now, watch};

use crate::exit::{CliError, Exit};

/// The command `lease` runs: a program and its arguments.
#[derive(Debug, Clone)]
pub(crate) struct CmdLine {
    program: OsString,
    args: Vec<OsString>,
}

impl CmdLine {
    /// The command from the words after `--`, checked to be runnable: a path to an executable
    /// file, or a name found as one in `PATH`.
    pub(crate) fn new(words: Vec<OsString>) -> Result<CmdLine, CliError> {
        let mut words = words.into_iter();
        let Some(program) = words.next().filter(|p| !p.is_empty()) else {
            return Err(CliError::new(
                Exit::Usage,
                "no command given; write it after `--`",
            ));
        };
        let cmd = CmdLine {
            program,
            args: words.collect(),
        };
        cmd.check_runnable()?;
        Ok(cmd)
    }

    fn check_runnable(&self) -> Result<(), CliError> {
        let shown = self.program.to_string_lossy();
        let program = Path::new(&self.program);
        let found = if program.components().count() > 1 || shown.contains('/') {
            is_executable(program).then(|| program.to_owned())
        } else {
            find_in_path(&self.program)
        };
        match found {
            Some(_) => Ok(()),
            None if shown.contains('/') => Err(CliError::new(
                Exit::CannotStart,
                format!("cannot run '{shown}': {}", why_not_executable(program)),
            )),
            None => Err(CliError::new(
                Exit::CannotStart,
                format!("cannot run '{shown}': not found as an executable in PATH"),
            )),
        }
    }

    /// The program.
    pub(crate) fn program(&self) -> &OsStr {
        &self.program
    }

    /// The arguments after the program.
    pub(crate) fn arguments(&self) -> &[OsString] {
        &self.args
    }
}

/// Why the file at `path`, which [`is_executable`] refused, cannot be run, and what to do.
fn why_not_executable(path: &Path) -> String {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "no such file".to_owned(),
        Err(e) => format!("cannot read it ({e})"),
        Ok(m) if m.is_dir() => "it is a directory, not a program".to_owned(),
        Ok(_) => format!(
            "the file is not executable; make it so (chmod +x {}) or run it through its \
             interpreter (e.g. -- sh {})",
            path.display(),
            path.display()
        ),
    }
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn find_in_path(program: &OsStr) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

/// The path that starts this very binary again (for the watchdog and the shim).
pub(crate) fn self_exe() -> PathBuf {
    if cfg!(target_os = "linux") {
        // Still right if the file was replaced or deleted since `lease` started.
        PathBuf::from("/proc/self/exe")
    } else {
        std::env::current_exe().unwrap_or_else(|_| PathBuf::from("lease"))
    }
}

/// The exit code a shell would report for `status`: the code, or 128 + the signal.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from((128 + sig) & 0xff).unwrap_or(1),
        (None, None) => 1,
    }
}

/// A description of how CMD ended, for messages.
pub(crate) fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        (None, None) => "an unknown status".to_owned(),
    }
}
