//! `lease`'s own exit codes, and the error that carries one to `main`.
//!
//! The codes are in the sysexits range (64–78), away from the codes shells and signals use
//! (1, 2, 126–165), so a script can tell `lease`'s own exit from its command's. Whenever `lease`
//! exits with one of them it says so on stderr; when it exits with its command's code it prints
//! nothing of its own.

use std::fmt;

use lease::ErrorKind;

/// One of `lease`'s own exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// The command line is wrong (unknown option, missing CMD, `release` without `--force`), or
    /// an argument is out of range.
    Usage,
    /// The lease, service or group name is empty, too long for the store, or holds control
    /// characters; or the instance label is.
    BadName,
    /// A duration does not parse, is zero, or gives unsafe timings.
    BadDuration,
    /// The store URL is malformed, or names a SQLite file in a directory that does not exist.
    BadUrl,
    /// The store URL's scheme is not supported by this build.
    UnsupportedStore,
    /// The store cannot be reached or refused the connection.
    Unavailable,
    /// The store answered an operation with an error.
    StoreError,
    /// CMD could not be started or supervised.
    CannotStart,
    /// SIGINT, SIGTERM or SIGHUP arrived while no CMD was running.
    Interrupted,
    /// The default store's directory or file cannot be created.
    StateDir,
    /// The lease was lost while CMD ran; CMD was stopped.
    Lost,
    /// `run` without `--wait`: someone else holds the name; CMD was not started.
    Held,
    /// `lease fence`: the fence refused the token, a newer term has written to the resource;
    /// nothing was written.
    Stale,
    /// The store cannot do this as configured (an unsupported operation, or a server that
    /// could lose lease records).
    StoreRefused,
}

impl Exit {
    /// Every code, in order, for the help text and the README.
    pub(crate) const ALL: [Exit; 14] = [
        Exit::Usage,
        Exit::BadName,
        Exit::BadDuration,
        Exit::BadUrl,
        Exit::UnsupportedStore,
        Exit::Unavailable,
        Exit::StoreError,
        Exit::CannotStart,
        Exit::Interrupted,
        Exit::StateDir,
        Exit::Lost,
        Exit::Held,
        Exit::Stale,
        Exit::StoreRefused,
    ];

    /// The process exit code.
    pub(crate) fn code(self) -> u8 {
        match self {
            Exit::Usage => 64,
            Exit::BadName => 65,
            Exit::BadDuration => 66,
            Exit::BadUrl => 67,
            Exit::UnsupportedStore => 68,
            Exit::Unavailable => 69,
            Exit::StoreError => 70,
            Exit::CannotStart => 71,
            Exit::Interrupted => 72,
            Exit::StateDir => 73,
            Exit::Lost => 74,
            Exit::Held => 75,
            Exit::Stale => 76,
            Exit::StoreRefused => 78,
        }
    }

    /// What the code means, in a few words.
    pub(crate) fn meaning(self) -> &'static str {
        match self {
            Exit::Usage => {
                "bad command line (unknown option, missing CMD, release without --force, an \
                 argument out of range, a fencing token that is 0, not a number, or missing)"
            }
            Exit::BadName => {
                "bad lease/service/group name, instance label, fence resource, file or table \
                 name (empty, too long, control characters)"
            }
            Exit::BadDuration => "bad duration (unparsable, zero) or unsafe timings for --ttl",
            Exit::BadUrl => {
                "bad store URL (malformed, or a SQLite file in a directory that does not exist; \
                 or URL of lease fence)"
            }
            Exit::UnsupportedStore => {
                "store scheme not supported by this build (or by that lease fence subcommand)"
            }
            Exit::Unavailable => {
                "store (or fenced database/server) unreachable, or it refused the connection"
            }
            Exit::StoreError => {
                "the store answered with an error (lease fence: the statement, command or file \
                 write failed; nothing was written)"
            }
            Exit::CannotStart => "CMD could not be started or supervised",
            Exit::Interrupted => "SIGINT/SIGTERM/SIGHUP while no CMD was running",
            Exit::StateDir => "cannot create the default store's directory or file",
            Exit::Lost => "the lease was lost while CMD ran; CMD was stopped",
            Exit::Held => {
                "NAME is held by someone else (run without --wait, or --wait-timeout passed); CMD \
                 not started; --conflict-exit N exits N instead"
            }
            Exit::Stale => {
                "lease fence refused: a newer term has written to the resource; nothing was \
                 written, stop"
            }
            Exit::StoreRefused => {
                "the store cannot do this as configured (lease fence: a fence table of another \
                 shape)"
            }
        }
    }

    /// The exit-code table, as plain text for `--help`.
    pub(crate) fn help_table() -> String {
        let mut out = String::from(
            "Exit codes:\n  0       success; or CMD's own exit code (128+N when CMD died of signal N)\n",
        );
        for exit in Exit::ALL {
            out.push_str(&format!("  {:<7} {}\n", exit.code(), exit.meaning()));
        }
        out.push_str(
            "  lease's own codes (64-78) are always announced on stderr with a line starting \
             \"lease:\" (with --log-format json, an object with \"exit\" in its fields), except a\n  conflict under --quiet; any other code is CMD's.\n\n",
        );
        out.push_str(&stop_codes());
        out
    }

    /// The exit code `lease` uses for an error of `kind` from the store or the engine.
    pub(crate) fn for_kind(kind: ErrorKind) -> Exit {
        match kind {
            ErrorKind::InvalidName => Exit::BadName,
            ErrorKind::InvalidTimings => Exit::BadDuration,
            ErrorKind::InvalidArgument => Exit::Usage,
            ErrorKind::Unavailable | ErrorKind::Timeout => Exit::Unavailable,
            ErrorKind::Unsupported | ErrorKind::Schema => Exit::StoreRefused,
            ErrorKind::Held => Exit::Held,
            ErrorKind::Lost => Exit::Lost,
            _ => Exit::StoreError,
        }
    }
}

/// The signal `systemctl stop` sends (systemd's default `KillSignal=`).
const SIGTERM: u8 = 15;

/// The code `lease run` and `lease elect` exit with when SIGTERM stops them while CMD runs and
/// CMD dies of the forwarded signal: 128 + 15, as a shell reports it.
pub(crate) const CMD_ENDED_BY_SIGTERM: u8 = 128 + SIGTERM;

/// The `SuccessExitStatus=` line recommended for systemd units of `lease run` and `lease elect`:
/// the codes of a `systemctl stop` ([`Exit::Interrupted`] when no CMD ran,
/// [`CMD_ENDED_BY_SIGTERM`] when CMD died of the forwarded SIGTERM).
pub(crate) fn success_exit_status() -> String {
    format!(
        "SuccessExitStatus={} {CMD_ENDED_BY_SIGTERM}",
        Exit::Interrupted.code()
    )
}

/// What `lease run` and `lease elect` exit with when stopped by a signal, for the help.
fn stop_codes() -> String {
    format!(
        "Stopped by SIGTERM (systemctl stop), SIGINT or SIGHUP (lease run, lease elect):\n  \
         while CMD runs   the signal is forwarded to CMD's process group once; when CMD and its \
         descendants are gone NAME is released and lease exits with CMD's code: \
         {CMD_ENDED_BY_SIGTERM} (128+15) when CMD dies of SIGTERM, 130 of SIGINT, 129 of SIGHUP, \
         CMD's own code when it handles the signal and exits\n  \
         no CMD running   {} (lease run waiting or opening the store, an elect follower, an \
         elect leader between terms)\n  \
         systemd units:   {} with KillMode=mixed (SIGTERM to lease alone: it ends CMD and \
         every descendant itself, in order)",
        Exit::Interrupted.code(),
        success_exit_status()
    )
}

/// An error that ends `lease` with one of its own exit codes.
#[derive(Debug, Clone)]
pub(crate) struct CliError {
    exit: Exit,
    message: String,
    /// The exit code when the user chose another one than [`Exit::code`] (`--conflict-exit`).
    chosen: Option<u8>,
    /// Nothing is printed (`--quiet` on a conflict).
    quiet: bool,
}

impl CliError {
    /// An error ending `lease` with `exit`, and `message` saying what to fix.
    pub(crate) fn new(exit: Exit, message: impl Into<String>) -> CliError {
        CliError {
            exit,
            message: message.into(),
            chosen: None,
            quiet: false,
        }
    }

    /// The same error, ending `lease` with `code` instead of its own (`--conflict-exit`).
    pub(crate) fn with_code(mut self, code: u8) -> CliError {
        self.chosen = Some(code);
        self
    }

    /// The same error, printed (`quiet` false) or not (`--quiet`).
    pub(crate) fn quiet(mut self, quiet: bool) -> CliError {
        self.quiet = quiet;
        self
    }

    /// The same error, its message led by `what` (the option it is about).
    pub(crate) fn prefixed(mut self, what: &str) -> CliError {
        self.message = format!("{what}: {}", self.message);
        self
    }

    /// The code the process exits with: its own, or the one chosen with
    /// [`with_code`](Self::with_code).
    pub(crate) fn code(&self) -> u8 {
        self.chosen.unwrap_or(self.exit.code())
    }

    /// `true` when nothing is to be printed ([`quiet`](Self::quiet)).
    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet
    }

    /// A store or engine error, with the exit code its kind calls for.
    pub(crate) fn from_lease(e: &lease::Error) -> CliError {
        CliError::new(Exit::for_kind(e.kind()), e.to_string())
    }

    /// A store or engine error with a given exit code.
    pub(crate) fn lease_with(exit: Exit, e: &lease::Error) -> CliError {
        CliError::new(exit, e.to_string())
    }

    /// The exit code.
    pub(crate) fn exit(&self) -> Exit {
        self.exit
    }

    /// The message, without the exit code.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }
}

impl From<lease::Error> for CliError {
    fn from(e: lease::Error) -> CliError {
        CliError::from_lease(&e)
    }
}

impl fmt::Display for CliError {
    /// One line: the message (newlines folded), then the code and a note that it is `lease`'s.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let one_line = self
            .message
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        match self.chosen {
            Some(code) if code != self.exit.code() => write!(
                f,
                "lease: {one_line} (exit code {code}, chosen by --conflict-exit for lease's own {})",
                self.exit.code()
            ),
            _ => write!(
                f,
                "lease: {one_line} (lease's own exit code {})",
                self.exit.code()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_clear_of_shell_codes() {
        let mut seen = std::collections::HashSet::new();
        for exit in Exit::ALL {
            let code = exit.code();
            assert!(seen.insert(code), "{code} used twice");
            assert!((64..=78).contains(&code), "{code}");
        }
        assert!(Exit::help_table().contains("75"));
    }

    #[test]
    fn kinds_map_to_codes() {
        assert_eq!(Exit::for_kind(ErrorKind::InvalidName), Exit::BadName);
        assert_eq!(Exit::for_kind(ErrorKind::InvalidArgument), Exit::Usage);
        assert_eq!(Exit::for_kind(ErrorKind::InvalidTimings), Exit::BadDuration);
        assert_eq!(Exit::for_kind(ErrorKind::Unsupported), Exit::StoreRefused);
        assert_eq!(Exit::for_kind(ErrorKind::Schema), Exit::StoreRefused);
        assert_eq!(Exit::for_kind(ErrorKind::Backend), Exit::StoreError);
    }

    #[test]
    fn errors_are_one_line() {
        let e = CliError::new(Exit::BadName, "a\nb");
        assert_eq!(e.to_string(), "lease: a b (lease's own exit code 65)");
    }
}
