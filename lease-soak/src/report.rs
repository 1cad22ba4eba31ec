//! What a soak found, per backend and in total, and whether it passes.

use std::fmt::Write as _;
use std::time::Duration;

use lease_conformance::HistoryReport;

/// A backend must see at least this many terms: a soak that did nothing fails.
pub(crate) const MIN_TERMS: u64 = 5;

/// What one backend's soak recorded.
#[derive(Debug, Clone)]
pub(crate) struct BackendReport {
    /// The backend's name.
    pub(crate) backend: &'static str,
    /// The history checker's report.
    pub(crate) history: HistoryReport,
    /// Stalls played.
    pub(crate) stalls: usize,
    /// Cuts played.
    pub(crate) cuts: usize,
    /// Restarts done.
    pub(crate) restarts: usize,
    /// How long the server was away during the restart (stop to accepting a store again).
    pub(crate) downtime: Option<Duration>,
    /// Terms won by a contender.
    pub(crate) terms_won: u64,
    /// Terms whose work stopped because the term was lost or about to be.
    pub(crate) terms_lost: u64,
    /// Step-down failures recorded by the fail action.
    pub(crate) step_down_failures: Vec<String>,
    /// Anything else that went wrong: a contender's error, a failed restart.
    pub(crate) errors: Vec<String>,
    /// The worst lateness of a 10 ms timer during the run: how long the process was unable to
    /// run its tasks (a pause longer than the lease's margin could fake an overlap).
    pub(crate) max_lag: Duration,
    /// How long the soak of this backend took, set-up and tear-down included.
    pub(crate) elapsed: Duration,
}

impl BackendReport {
    /// Faults of every kind.
    pub(crate) fn faults(&self) -> usize {
        self.stalls + self.cuts + self.restarts
    }

    /// The soak line: terms, faults, sections and violations.
    pub(crate) fn line(&self) -> String {
        let h = &self.history;
        format!(
            "soak {}: {} terms, {} faults ({} stalls, {} cuts, {} restart{}), {} sections, {} \
             overlaps, {} regressions, {} step-down failures",
            self.backend,
            h.distinct_terms,
            self.faults(),
            self.stalls,
            self.cuts,
            self.restarts,
            if self.restarts == 1 { "" } else { "s" },
            h.sections,
            h.overlaps,
            h.regressions,
            self.step_down_failures.len()
        )
    }

    /// A second line of detail.
    pub(crate) fn details(&self) -> String {
        let mut s = format!(
            "  {}: {} terms won, {} ended by a fault, {} fenced writes refused",
            self.backend, self.terms_won, self.terms_lost, self.history.rejected_writes
        );
        if let Some(d) = self.downtime {
            let _ = write!(s, ", server away {:.1} s", d.as_secs_f64());
        }
        let _ = write!(
            s,
            ", max timer lag {} ms, {:.1} s",
            self.max_lag.as_millis(),
            self.elapsed.as_secs_f64()
        );
        s
    }

    /// Every reason this backend fails; empty when it passes.
    pub(crate) fn problems(&self) -> Vec<String> {
        let h = &self.history;
        let mut p = Vec::new();
        if h.overlaps > 0 {
            p.push(format!("{} overlaps", h.overlaps));
        }
        if h.regressions > 0 {
            p.push(format!("{} term regressions", h.regressions));
        }
        if !self.step_down_failures.is_empty() {
            p.push(format!(
                "{} step-down failures",
                self.step_down_failures.len()
            ));
        }
        if h.distinct_terms < MIN_TERMS {
            p.push(format!(
                "only {} terms (at least {MIN_TERMS} expected): the soak did not exercise the lease",
                h.distinct_terms
            ));
        }
        p.extend(self.errors.iter().cloned());
        p
    }

    /// The violations and failures in full, for the output.
    pub(crate) fn evidence(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.history.violations.clone();
        let hidden = self
            .history
            .violations_total
            .saturating_sub(self.history.violations.len() as u64);
        if hidden > 0 {
            lines.push(format!("... and {hidden} more violations"));
        }
        lines.extend(
            self.step_down_failures
                .iter()
                .map(|f| format!("step-down failure: {f}")),
        );
        lines.extend(self.errors.iter().cloned());
        lines
    }
}

/// How one backend's soak ended.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// It ran; the report says whether it passes.
    Ran(Box<BackendReport>),
    /// It could not run for want of a server binary.
    Skipped {
        backend: &'static str,
        why: String,
        required: bool,
    },
    /// Setting it up failed.
    Failed { backend: &'static str, why: String },
}

impl Outcome {
    /// Why this outcome fails the soak; empty when it does not.
    pub(crate) fn problems(&self) -> Vec<String> {
        match self {
            Outcome::Ran(r) => r.problems(),
            Outcome::Skipped { why, required, .. } if *required => {
                vec![format!("skipped but required by LEASE_TEST_REQUIRE: {why}")]
            }
            Outcome::Skipped { .. } => Vec::new(),
            Outcome::Failed { why, .. } => vec![why.clone()],
        }
    }

    /// The backend's name.
    pub(crate) fn backend(&self) -> &'static str {
        match self {
            Outcome::Ran(r) => r.backend,
            Outcome::Skipped { backend, .. } | Outcome::Failed { backend, .. } => backend,
        }
    }
}

/// The final summary line, and whether the whole soak passes.
pub(crate) fn summary(outcomes: &[Outcome], seed: u64, seconds: u64) -> (String, bool) {
    let ran: Vec<&BackendReport> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Ran(r) => Some(r.as_ref()),
            _ => None,
        })
        .collect();
    let sum = |f: &dyn Fn(&BackendReport) -> u64| ran.iter().map(|r| f(r)).sum::<u64>();
    let terms = sum(&|r| r.history.distinct_terms);
    let sections = sum(&|r| r.history.sections);
    let overlaps = sum(&|r| r.history.overlaps);
    let regressions = sum(&|r| r.history.regressions);
    let faults = sum(&|r| r.faults() as u64);
    let restarts = sum(&|r| r.restarts as u64);
    let failures = sum(&|r| r.step_down_failures.len() as u64);
    let failing: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            let p = o.problems();
            (!p.is_empty()).then(|| format!("{}: {}", o.backend(), p.join("; ")))
        })
        .collect();
    let skipped: Vec<&str> = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Skipped { .. }))
        .map(Outcome::backend)
        .collect();
    let pass = failing.is_empty() && !ran.is_empty();
    let mut line = format!(
        "soak {}: {} backends × {seconds} s (seed {seed}), {terms} terms, {faults} faults \
         ({restarts} restarts), {sections} sections, {overlaps} overlaps, {regressions} \
         regressions, {failures} step-down failures",
        if pass { "PASSED" } else { "FAILED" },
        ran.len(),
    );
    if !skipped.is_empty() {
        let _ = write!(line, "; skipped: {}", skipped.join(", "));
    }
    if ran.is_empty() {
        line.push_str("; no backend ran");
    }
    for f in failing {
        let _ = write!(line, "\n  FAILED {f}");
    }
    (line, pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(terms: u64, overlaps: u64) -> BackendReport {
        BackendReport {
            backend: "postgres",
            history: HistoryReport {
                sections: 1840,
                distinct_terms: terms,
                overlaps,
                regressions: 0,
                accepted_writes: 1840,
                rejected_writes: 0,
                violations: Vec::new(),
                violations_total: overlaps,
            },
            stalls: 12,
            cuts: 10,
            restarts: 1,
            downtime: Some(Duration::from_millis(2100)),
            terms_won: terms,
            terms_lost: 3,
            step_down_failures: Vec::new(),
            errors: Vec::new(),
            max_lag: Duration::from_millis(4),
            elapsed: Duration::from_secs(31),
        }
    }

    #[test]
    fn line_has_the_documented_shape() {
        assert_eq!(
            report(212, 0).line(),
            "soak postgres: 212 terms, 23 faults (12 stalls, 10 cuts, 1 restart), 1840 sections, \
             0 overlaps, 0 regressions, 0 step-down failures"
        );
    }

    #[test]
    fn violations_and_idle_soaks_fail() {
        assert!(report(212, 0).problems().is_empty());
        assert!(!report(212, 1).problems().is_empty());
        assert!(!report(2, 0).problems().is_empty());
        let (line, pass) = summary(&[Outcome::Ran(Box::new(report(212, 0)))], 1, 30);
        assert!(pass, "{line}");
        assert!(line.starts_with("soak PASSED: 1 backends"), "{line}");
        let (line, pass) = summary(
            &[
                Outcome::Ran(Box::new(report(212, 0))),
                Outcome::Skipped {
                    backend: "nats",
                    why: "no nats-server".into(),
                    required: true,
                },
            ],
            1,
            30,
        );
        assert!(!pass);
        assert!(line.contains("FAILED nats"), "{line}");
        let (_, pass) = summary(&[], 1, 30);
        assert!(!pass);
    }
}
