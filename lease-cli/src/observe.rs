//! The global options for watching `lease` itself: the log's format and the metrics' outlets.

use std::path::PathBuf;

use clap::Args;

use crate::log::{FORMAT_VAR, LogFormat};

/// The log format and where the metrics go: options of every subcommand.
#[derive(Debug, Args)]
pub(crate) struct ObserveArgs {
    /// How lease writes to stderr: text (lines starting with "lease: ") or json (one object
    /// per line: timestamp, level, target, message, fields). LEASE_LOG sets the log filter
    /// (tracing's syntax, e.g. info, or warn,lease_core=debug); by default warnings only.
    /// At info lease logs an audit line per claim ("lease claimed", with name, term, instance),
    /// release ("lease released") and loss; at debug also each renewal and each claim that
    /// found the name held.
    #[arg(
        long,
        global = true,
        env = FORMAT_VAR,
        value_enum,
        default_value_t = LogFormat::Text,
        value_name = "FORMAT"
    )]
    pub(crate) log_format: LogFormat,

    /// Write this process's metrics (claims, terms held, renewals, losses, time held, the
    /// current term, per name) to PATH in Prometheus's text format, replaced atomically on
    /// each change and at exit: for node_exporter's textfile collector, which reads
    /// *.prom files (one file per lease process).
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) metrics_textfile: Option<PathBuf>,

    /// Serve the same metrics over HTTP at ADDR (host:port, e.g. 127.0.0.1:9464), on any
    /// path, for Prometheus to scrape while lease runs.
    #[arg(long, global = true, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<String>,
}
