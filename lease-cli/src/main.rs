//! `lease`: a cluster-wide flock, leader-only daemons, and a view of who holds what.
//!
//! ```text
//! lease run NAME [--ttl D] [--wait] -- CMD…   run CMD only while holding NAME
//! lease elect NAME [--ttl D] -- CMD…          run CMD while leader, forever
//! lease cron NAME --schedule E [--once] -- CMD…  run CMD once per instant across hosts
//! lease status NAME… [--json]                 who holds what
//! lease watch NAME… [--json]                  one line per change of holder
//! lease members SERVICE [--json]              the live members of a service
//! lease owners GROUP [--json]                 the live partition leases of a group
//! lease release NAME --force                  break a lease (unsafe)
//! lease fence sql URL -- STATEMENT…           a fenced write with $LEASE_TERM (also redis,
//!                                             file); exit 76 when a newer term has written
//! ```
//!
//! The store is chosen by URL (`--store` or `LEASE_STORE`); the default is one SQLite file per
//! user under the XDG state directory. Exit codes are in [`exit`]; `lease` announces its own
//! on stderr.

mod campaign;
mod child;
mod cli;
mod commands;
mod duration;
mod exit;
mod open_store;
mod redact;
mod signals;
mod store_url;
mod supervise;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::FromArgMatches;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command};
use crate::exit::{CliError, Exit};
use crate::redact::{MakeScrubbedStderr, eprintln_scrubbed};
use crate::store_url::{STORE_VAR, StoreUrl};

/// The environment variable with the log filter (tracing's `EnvFilter` syntax).
const LOG_VAR: &str = "LEASE_LOG";

/// The log filter when `LEASE_LOG` is unset: warnings from the lease crates, errors from the
/// rest.
const DEFAULT_LOG: &str = "error,lease=warn,lease_core=warn,lease_sql=warn,lease_redis=warn,\
                           lease_mongo=warn";

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    register_secrets(&args);
    let matches = match cli::command().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) => return clap_exit(&e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return clap_exit(&e),
    };
    if let Command::Exec(exec) = &cli.command {
        // The shim: no runtime, no log, straight to `exec`.
        return ExitCode::from(child::become_cmd(exec.parent, &exec.cmd));
    }
    if let Command::Watchdog(args) = &cli.command {
        // The watchdog: no runtime, no log; a loop over poll(2).
        return ExitCode::from(child::watch(args));
    }
    init_log();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let e = CliError::new(Exit::CannotStart, format!("cannot start the runtime: {e}"));
            eprintln_scrubbed(&e.to_string());
            return ExitCode::from(e.exit().code());
        }
    };
    // One thread: CMD is started from the main thread, so its parent-death signal is tied to
    // the life of the whole process, not of a worker thread.
    let result = runtime.block_on(dispatch(cli));
    runtime.shutdown_timeout(Duration::from_millis(500));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln_scrubbed(&e.to_string());
            ExitCode::from(e.exit().code())
        }
    }
}

async fn dispatch(cli: Cli) -> Result<u8, CliError> {
    let store = || StoreUrl::choose(cli.store.as_deref());
    match cli.command {
        Command::Run(args) => commands::run::run(&store()?, args).await,
        Command::Elect(args) => commands::elect::elect(&store()?, args).await,
        Command::Cron(args) => commands::cron::cron(&store()?, args).await,
        Command::Status(args) => commands::status::status(&store()?, args).await,
        Command::Watch(args) => commands::watch::watch(&store()?, args).await,
        Command::Members(args) => commands::members::members(&store()?, args).await,
        Command::Owners(args) => commands::owners::owners(&store()?, args).await,
        Command::Release(args) => commands::release::release(&store()?, args).await,
        Command::Fence(args) => commands::fence::fence(args).await,
        Command::Watchdog(_) => Err(CliError::new(Exit::Usage, "__watchdog is internal")),
        Command::Exec(_) => Err(CliError::new(Exit::Usage, "__exec is internal")),
    }
}

/// Registers the secrets of every URL on the command line and in `LEASE_STORE`, so that even
/// clap's errors and the help never show a password.
fn register_secrets(args: &[OsString]) {
    let env = std::env::var(STORE_VAR).ok();
    for text in args
        .iter()
        .filter_map(|a| a.to_str())
        .map(str::to_owned)
        .chain(env)
    {
        // `--store=URL` as one word.
        let url = text.split_once('=').map_or(text.as_str(), |(_, v)| v);
        for candidate in [text.as_str(), url] {
            if candidate.contains('@') || candidate.contains("://") {
                let _ = StoreUrl::parse(candidate);
            }
        }
    }
}

/// Prints a clap outcome (help, version or a usage error) and picks the exit code.
fn clap_exit(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            let text = e.render().to_string();
            let mut err = std::io::stderr().lock();
            let _ = std::io::Write::write_all(&mut err, redact::scrub(&text).as_bytes());
            drop(err);
            let usage = CliError::new(Exit::Usage, "bad command line; see lease --help");
            eprintln_scrubbed(&usage.to_string());
            ExitCode::from(usage.exit().code())
        }
    }
}

fn init_log() {
    let filter = EnvFilter::try_from_env(LOG_VAR).unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(MakeScrubbedStderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}
