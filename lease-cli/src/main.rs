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
mod help;
mod log;
mod mismatch;
mod observe;
mod open_store;
mod prom;
mod redact;
mod rfc3339;
mod signals;
mod store_url;
mod supervise;
#[cfg(test)]
mod units;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::FromArgMatches;

use crate::cli::{Cli, Command};
use crate::exit::{CliError, Exit};
use crate::redact::write_line_scrubbed;
use crate::store_url::{STORE_VAR, StoreUrl};

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    register_secrets(&args);
    let matches = match cli::command().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) => return clap_exit(&e, &args),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return clap_exit(&e, &args),
    };
    if let Err(e) = name_before_dashes(&args, &cli.command) {
        write_line_scrubbed(&log::exit_line(&e));
        return ExitCode::from(e.code());
    }
    if let Command::Exec(exec) = &cli.command {
        // The shim: no runtime, no log, straight to `exec`.
        return ExitCode::from(child::become_cmd(exec.parent, &exec.cmd));
    }
    if let Command::Watchdog(args) = &cli.command {
        // The watchdog: no runtime, no log; a loop over poll(2).
        return ExitCode::from(child::watch(args));
    }
    log::init(cli.observe.log_format);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let e = CliError::new(Exit::CannotStart, format!("cannot start the runtime: {e}"));
            write_line_scrubbed(&log::exit_line(&e));
            return ExitCode::from(e.exit().code());
        }
    };
    // One thread: CMD is started from the main thread, so its parent-death signal is tied to
    // the life of the whole process, not of a worker thread.
    let result = runtime.block_on(async {
        let exporter = prom::start(&cli.observe).await?;
        let result = dispatch(cli).await;
        if let Some(exporter) = exporter {
            exporter.finish();
        }
        result
    });
    runtime.shutdown_timeout(Duration::from_millis(500));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if !e.is_quiet() {
                write_line_scrubbed(&log::exit_line(&e));
            }
            ExitCode::from(e.code())
        }
    }
}

async fn dispatch(cli: Cli) -> Result<u8, CliError> {
    let quiet = match &cli.command {
        Command::Run(args) => args.quiet,
        Command::Elect(args) => args.quiet,
        _ => false,
    };
    // The default store's note is said when the store is opened (after the arguments are
    // checked), unless --quiet.
    let store = || StoreUrl::choose(cli.store.as_deref()).map(|url| url.noting_default(!quiet));
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
        Command::Help(args) => help::print(&args.words).map(|()| 0),
        Command::Watchdog(_) => Err(CliError::new(Exit::Usage, "__watchdog is internal")),
        Command::Exec(_) => Err(CliError::new(Exit::Usage, "__exec is internal")),
    }
}

/// `lease run -- echo hi` parses as NAME `echo` and CMD `hi`: a NAME left out before a `--` that
/// CMD follows. Then every word after the first `--` went to NAME and CMD (with NAME before
/// `--`, only CMD's words follow it), which is refused with a usage error saying so.
fn name_before_dashes(args: &[OsString], command: &Command) -> Result<(), CliError> {
    let (sub, name, cmd) = match command {
        Command::Run(run) => ("run", &run.name, &run.cmd),
        Command::Elect(elect) => ("elect", &elect.name, &elect.cmd),
        _ => return Ok(()),
    };
    let Some(dashes) = args.iter().position(|a| a == "--") else {
        return Ok(());
    };
    if args.len() - dashes - 1 != cmd.len() + 1 {
        return Ok(());
    }
    let words: Vec<String> = std::iter::once(name.clone())
        .chain(cmd.iter().map(|w| w.to_string_lossy().into_owned()))
        .collect();
    Err(CliError::new(
        Exit::Usage,
        format!(
            "lease {sub}: NAME is missing before `--`: '{name}' would be taken as the lease name \
             and the rest as CMD; give the name first: lease {sub} NAME -- {}",
            words.join(" ")
        ),
    ))
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

/// Prints a clap outcome (help, version or a usage error) and picks the exit code; a usage
/// error is one JSON object when `args` or the environment ask for the JSON log.
fn clap_exit(e: &clap::Error, args: &[OsString]) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ if log::json_asked(args) => {
            // One JSON object, clap's text folded into its message.
            log::choose(log::LogFormat::Json);
            let text = e.render().to_string();
            let text: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
                .collect();
            let usage = CliError::new(
                Exit::Usage,
                format!("bad command line: {}; see lease --help", text.join(" ")),
            );
            write_line_scrubbed(&log::exit_line(&usage));
            ExitCode::from(usage.exit().code())
        }
        _ => {
            let text = e.render().to_string();
            let mut err = std::io::stderr().lock();
            let _ = std::io::Write::write_all(&mut err, redact::scrub(&text).as_bytes());
            drop(err);
            let usage = CliError::new(Exit::Usage, "bad command line; see lease --help");
            write_line_scrubbed(&usage.to_string());
            ExitCode::from(usage.exit().code())
        }
    }
}
