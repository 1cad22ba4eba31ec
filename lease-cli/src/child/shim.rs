//! The shim that becomes CMD: tied to `lease`'s life before it executes CMD.
//!
//! `lease` starts CMD as `lease __exec --parent <pid> -- CMD…`. This process asks the kernel
//! to SIGKILL it when its parent dies (Linux's parent-death signal, which survives `exec`),
//! checks that its parent is still that `lease` (if `lease` died in between, it stops here),
//! then replaces itself with CMD. No `unsafe` is needed: the setting is made by the process on
//! itself, before `exec`, instead of in a `pre_exec` hook.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::exit::{CliError, Exit};

/// The hidden subcommand that runs the shim.
pub(crate) const EXEC_SUBCOMMAND: &str = "__exec";

/// Becomes `cmd`, or returns the exit code to end with when that fails.
pub(crate) fn become_cmd(parent: i32, cmd: &[OsString]) -> u8 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::process::{Signal, set_parent_process_death_signal};
        if let Err(e) = set_parent_process_death_signal(Some(Signal::KILL)) {
            tracing::debug!(error = %e, "cannot set the parent-death signal; the watchdog alone guards CMD");
        }
    }
    let parent_now = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    if parent_now != Some(parent) {
        // `lease` died before CMD could start: nothing must run.
        return Exit::CannotStart.code();
    }
    let Some((program, args)) = cmd.split_first() else {
        return Exit::Usage.code();
    };
    let error = Command::new(program).args(args).exec();
    let e = CliError::new(
        Exit::CannotStart,
        format!("cannot start '{}': {error}", program.to_string_lossy()),
    );
    crate::redact::eprintln_scrubbed(&e.to_string());
    e.exit().code()
}
