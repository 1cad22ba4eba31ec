//! The global options for watching `lease` itself: the log's format and the metrics' outlets.

use std::path::PathBuf;

use clap::Args;

use crate::log::{FORMAT_VAR, LogFormat};

/// The log format and where the metrics go: options of every subcommand.
#[derive(Debug, Args)]
pub(crate) struct ObserveArgs {
    /// stderr as text (lines starting with "lease: ") or json (one object per line, for
    /// journald or Loki). LEASE_LOG sets the filter, warnings by default: info adds an audit
    /// line per claim, release and loss; debug each renewal.
    #[arg(
        long,
        global = true,
        env = FORMAT_VAR,
        value_enum,
        hide_possible_values = true,
        default_value_t = LogFormat::Text,
        value_name = "FORMAT"
    )]
    pub(crate) log_format: LogFormat,

    /// Write lease's metrics in Prometheus's text format to PATH, replaced atomically on each
    /// change and at exit (for node_exporter's textfile collector: name it *.prom).
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) metrics_textfile: Option<PathBuf>,

    /// Serve the same metrics over HTTP at ADDR (host:port) while lease runs.
    #[arg(long, global = true, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<String>,
}
