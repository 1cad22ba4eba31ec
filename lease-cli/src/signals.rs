//! The signals `lease` catches to stop gracefully (SIGINT, SIGTERM and SIGHUP), and SIGTSTP
//! (Ctrl-Z), which stops CMD before `lease` stops itself.

use rustix::process::Signal;
use tokio::signal::unix::{SignalKind, signal};

use crate::exit::{CliError, Exit};

/// Listens for SIGINT, SIGTERM, SIGHUP and SIGTSTP from the moment it is installed.
#[derive(Debug)]
pub(crate) struct StopSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    tstp: tokio::signal::unix::Signal,
}

/// A signal caught while CMD runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caught {
    /// SIGINT, SIGTERM or SIGHUP.
    Stop(Signal),
    /// SIGTSTP (Ctrl-Z).
    Suspend,
}

/// Stops this process (SIGSTOP, which cannot be caught) and returns once it is continued.
pub(crate) fn stop_self() {
    let _ = rustix::process::kill_process(rustix::process::getpid(), Signal::STOP);
}

impl StopSignals {
    /// Installs the handlers: from now on these signals no longer end the process at once.
    pub(crate) fn install() -> Result<StopSignals, CliError> {
        let on = |kind: SignalKind| {
            signal(kind).map_err(|e| {
                CliError::new(Exit::CannotStart, format!("cannot listen for signals: {e}"))
            })
        };
        Ok(StopSignals {
            int: on(SignalKind::interrupt())?,
            term: on(SignalKind::terminate())?,
            hup: on(SignalKind::hangup())?,
            tstp: on(SignalKind::from_raw(Signal::TSTP.as_raw()))?,
        })
    }

    /// The next stop signal received. SIGTSTP meanwhile (no CMD runs) stops `lease` at once,
    /// as it would without a handler.
    pub(crate) async fn recv(&mut self) -> Signal {
        loop {
            match self.recv_or_suspend().await {
                Caught::Stop(sig) => return sig,
                Caught::Suspend => stop_self(),
            }
        }
    }

    /// The next stop signal or SIGTSTP received.
    pub(crate) async fn recv_or_suspend(&mut self) -> Caught {
        tokio::select! {
            _ = self.int.recv() => Caught::Stop(Signal::INT),
            _ = self.term.recv() => Caught::Stop(Signal::TERM),
            _ = self.hup.recv() => Caught::Stop(Signal::HUP),
            _ = self.tstp.recv() => Caught::Suspend,
        }
    }

    /// A signal already received and not yet taken, without waiting.
    pub(crate) async fn pending(&mut self) -> Option<Signal> {
        tokio::select! {
            biased;
            sig = self.recv() => Some(sig),
            () = std::future::ready(()) => None,
        }
    }
}

/// The usual name of a signal, for messages.
pub(crate) fn name(sig: Signal) -> &'static str {
    if sig == Signal::INT {
        "SIGINT"
    } else if sig == Signal::TERM {
        "SIGTERM"
    } else if sig == Signal::HUP {
        "SIGHUP"
    } else if sig == Signal::KILL {
        "SIGKILL"
    } else {
        "a signal"
    }
}
