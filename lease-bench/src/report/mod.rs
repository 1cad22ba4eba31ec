//! The results of one run, written as a markdown report (`results.md`) and an SVG chart of the
//! cycle rates (`cycles.svg`).

mod fences;
mod handover;
mod markdown;
mod svg;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::cli::Backend;
use crate::cli_wait::CliRow;
use crate::contention::ContentionRow;
use crate::cycles::CycleRow;
use crate::failover::FailoverRow;
use crate::fences::FenceRow;
use crate::handover::HandoverRow;
use crate::held::HeldRow;
use crate::machine::Machine;
use crate::peers::SubjectId;
use crate::renew_cost::{PartitionRow, RenewRow};
use crate::round_trips::{CycleRoundTrips, OpRoundTrips};

/// Everything one run measured.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// The command line.
    pub(crate) command: String,
    /// The machine.
    pub(crate) machine: Machine,
    /// Unix time of the start.
    pub(crate) started_unix: u64,
    /// How long the run took.
    pub(crate) elapsed: Duration,
    /// Measured seconds per cycle subject, and rounds.
    pub(crate) seconds: f64,
    /// Interleaved rounds.
    pub(crate) rounds: u32,
    /// Most rounds per K of the partitions run.
    pub(crate) partition_rounds: u32,
    /// Time budget per K and backend of the partitions run, in seconds.
    pub(crate) partition_seconds: f64,
    /// Backends measured.
    pub(crate) backends: Vec<Backend>,
    /// Backends skipped, and why.
    pub(crate) skipped: Vec<(Backend, String)>,
    /// Cycle figures.
    pub(crate) cycles: Vec<CycleRow>,
    /// Round trips per operation.
    pub(crate) op_rts: Vec<OpRoundTrips>,
    /// Round trips per cycle.
    pub(crate) cycle_rts: Vec<CycleRoundTrips>,
    /// Failover.
    pub(crate) failover: Vec<FailoverRow>,
    /// Renew cost.
    pub(crate) renew: Vec<RenewRow>,
    /// Held names, per term against coalesced.
    pub(crate) held: Vec<HeldRow>,
    /// Contention.
    pub(crate) contention: Vec<ContentionRow>,
    /// Batch renewal of partitions against single renewals.
    pub(crate) partitions: Vec<PartitionRow>,
    /// Hand-over, push against poll.
    pub(crate) handover: Vec<HandoverRow>,
    /// `lease run --wait` hand-over through the CLI.
    pub(crate) handover_cli: Vec<CliRow>,
    /// Fenced writes against plain ones, per resource.
    pub(crate) fences: Vec<FenceRow>,
}

impl Report {
    /// The cycle rate of `id` on `backend`, when measured.
    pub(crate) fn rate(&self, backend: Backend, id: SubjectId) -> Option<f64> {
        self.cycles
            .iter()
            .find(|r| r.backend == backend && r.id == id)
            .and_then(|r| r.summary)
            .map(|s| s.rate)
            .filter(|r| *r > 0.0)
    }

    /// Round trips per cycle of `id` on `backend`, as a table cell.
    pub(crate) fn cycle_rt(&self, backend: Backend, id: SubjectId) -> String {
        let Some(row) = self
            .cycle_rts
            .iter()
            .find(|r| r.backend == backend && r.id == id)
        else {
            return "–".to_owned();
        };
        match (row.per_cycle, &row.error) {
            (Some(v), _) if row.connections > 0 => {
                format!("{v:.2} (+{} connections)", row.connections)
            }
            (Some(v), _) => format!("{v:.2}"),
            (None, Some(e)) => format!("error: {e}"),
            (None, None) => "–".to_owned(),
        }
    }

    /// Writes `results.md` and `cycles.svg` into `dir`; returns the markdown.
    pub(crate) fn write(&self, dir: &Path) -> Result<String> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the output folder {}", dir.display()))?;
        let md = markdown::render(self);
        let md_path = dir.join("results.md");
        std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
        let svg_path = dir.join("cycles.svg");
        svg::render(self, &svg_path)?;
        Ok(md)
    }
}

/// A rate with thousands separators.
pub(crate) fn fmt_rate(r: f64) -> String {
    let n = r.round() as u64;
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A target's verdict in the report's tables: met, or missed (in bold).
fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

/// A duration in the unit that suits it.
pub(crate) fn fmt_dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10.0 {
        format!("{us:.1} µs")
    } else if us < 1_000.0 {
        format!("{us:.0} µs")
    } else if us < 1_000_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_rate(1234567.4), "1,234,567");
        assert_eq!(fmt_rate(999.0), "999");
        assert_eq!(fmt_dur(Duration::from_micros(250)), "250 µs");
        assert_eq!(fmt_dur(Duration::from_millis(1500)), "1.50 s");
        assert_eq!(fmt_dur(Duration::from_nanos(2500)), "2.5 µs");
    }
}
