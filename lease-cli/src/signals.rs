//! The signals `lease` catches to stop gracefully: SIGINT, SIGTERM and SIGHUP.

use rustix::process::Signal;
use tokio::signal::unix::{SignalKind, signal};

use crate::exit::{CliError, Exit};

/// Listens for SIGINT, SIGTERM and SIGHUP from the moment it is installed.
#[derive(Debug)]
pub(crate) struct StopSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
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
        })
    }

    /// The next signal received.
    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::INT,
            _ = self.term.recv() => Signal::TERM,
            _ = self.hup.recv() => Signal::HUP,
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
