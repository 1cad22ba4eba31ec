//! What a soak found, per backend and in total, and whether it passes.

use std::fmt::Write as _;
use std::time::Duration;

use lease_conformance::HistoryReport;

use crate::contenders::Zombie;
use crate::downstream::Written;
use crate::downstream::{Kind, RealReport};
use crate::mixed::MixedReport;

/// A backend must see at least this many terms: a soak that did nothing fails.
pub(crate) const MIN_TERMS: u64 = 5;

/// How long the assignment took to settle after one event of the group phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settle {
    /// The event: `start`, `leave`, `join`, `restart`, `crash`.
    pub(crate) after: &'static str,
    /// How long until every partition was held by exactly one live worker, fair shares; `None`
    /// when another event (or the server going down) came first.
    pub(crate) took: Option<Duration>,
}

/// What one backend's group phase recorded.
#[derive(Debug, Clone)]
pub(crate) struct GroupReport {
    /// The backend's name.
    pub(crate) backend: &'static str,
    /// Group workers at the start.
    pub(crate) workers: usize,
    /// Partitions in the group.
    pub(crate) partitions: u32,
    /// Long stalls played (longer than the local deadline).
    pub(crate) stalls: usize,
    /// Cuts played.
    pub(crate) cuts: usize,
    /// Blips played (stalls or cuts shorter than a tick).
    pub(crate) blips: usize,
    /// Server restarts the workers went through.
    pub(crate) restarts: usize,
    /// Graceful leaves followed by a re-join.
    pub(crate) rejoins: usize,
    /// Workers dropped without a leave, their connection cut.
    pub(crate) crashes: usize,
    /// Observations of the workers' assignments checked by the audit.
    pub(crate) observations: u64,
    /// Work intervals the simulated consumers recorded (start to stop, per partition and epoch).
    pub(crate) work_intervals: u64,
    /// Epoch increases seen in the assignments: each a partition changing hands (or coming back
    /// to its owner after a lapse).
    pub(crate) handovers: u64,
    /// The audit's violations (the first few in full).
    pub(crate) violations: Vec<String>,
    /// Settle times after each event, measured under whatever faults were going on
    /// (informational).
    pub(crate) settles: Vec<Settle>,
    /// How long, once the faults had stopped, until every live worker's store answered again;
    /// `None` when one did not.
    pub(crate) stores_back: Option<Duration>,
    /// How long the assignment then took to settle; `None` when it did not within `bound`.
    pub(crate) final_settle: Option<Duration>,
    /// What each live worker held and saw when the final settle ran out of time.
    pub(crate) unsettled: Option<String>,
    /// The bound on `final_settle`: `GroupWorker::crash_settle_time` plus a second.
    pub(crate) bound: Duration,
    /// How long the settled assignment was then watched staying settled.
    pub(crate) steady: Duration,
    /// Anything else that went wrong: a worker that did not start or leave, the store
    /// disagreeing with the assignment, an assignment coming apart after settling.
    pub(crate) errors: Vec<String>,
}

/// How many violations the assignment audit keeps in full.
const AUDIT_KEEPS: usize = 20;

impl GroupReport {
    /// Faults of every kind.
    pub(crate) fn faults(&self) -> usize {
        self.stalls + self.cuts + self.blips + self.restarts
    }

    /// The violation count as known: the audit keeps the first [`AUDIT_KEEPS`].
    fn violation_count(&self) -> String {
        let n = self.violations.len();
        if n >= AUDIT_KEEPS {
            format!("{n}+")
        } else {
            n.to_string()
        }
    }

    /// The group line: workers, faults, events, observations, hand-overs and violations.
    pub(crate) fn line(&self) -> String {
        format!(
            "group {}: {} workers × {} partitions, {} faults ({} stalls, {} cuts, {} blips, {} \
             restart{}), {} leave + re-join, {} crash, {} observations, {} work intervals, {} \
             hand-overs, {} violations",
            self.backend,
            self.workers,
            self.partitions,
            self.faults(),
            self.stalls,
            self.cuts,
            self.blips,
            self.restarts,
            if self.restarts == 1 { "" } else { "s" },
            self.rejoins,
            self.crashes,
            self.observations,
            self.work_intervals,
            self.handovers,
            self.violation_count()
        )
    }

    /// A second line: the settle times.
    pub(crate) fn details(&self) -> String {
        let settles: Vec<String> = self
            .settles
            .iter()
            .map(|s| match s.took {
                Some(d) => format!("{} {:.1} s", s.after, d.as_secs_f64()),
                None => format!("{} (interrupted)", s.after),
            })
            .collect();
        let mut line = format!("  {}: settled after {}", self.backend, settles.join(", "));
        line.push_str("; after the faults: ");
        match self.stores_back {
            Some(d) => {
                let _ = write!(line, "stores answering in {:.1} s, ", d.as_secs_f64());
            }
            None => line.push_str("a store NOT answering, "),
        }
        match self.final_settle {
            Some(d) => {
                let _ = write!(
                    line,
                    "settled {:.1} s later (bound {:.1} s), steady for {:.1} s",
                    d.as_secs_f64(),
                    self.bound.as_secs_f64(),
                    self.steady.as_secs_f64()
                );
            }
            None => {
                let _ = write!(line, "NOT settled within {:.1} s", self.bound.as_secs_f64());
            }
        }
        line
    }

    /// Every reason the group phase fails; empty when it passes.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if !self.violations.is_empty() {
            p.push(format!("{} assignment violations", self.violation_count()));
        }
        if self.final_settle.is_none() {
            p.push(format!(
                "the assignment did not settle within {:.1} s of the faults' end and the stores \
                 answering",
                self.bound.as_secs_f64()
            ));
        }
        p.extend(self.errors.iter().cloned());
        p
    }

    /// The violations (each once: the audit sees a stale holder on every observation until it
    /// stops) and failures in full, for the output.
    pub(crate) fn evidence(&self) -> Vec<String> {
        let mut lines: Vec<String> = Vec::new();
        for v in &self.violations {
            let line = format!("assignment violation: {v}");
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
        if let Some(view) = &self.unsettled {
            lines.push(format!("not settled: {view}"));
        }
        lines.extend(self.errors.iter().cloned());
        lines
    }
}

/// What one backend's soak recorded.
#[derive(Debug, Clone)]
pub(crate) struct BackendReport {
    /// The backend's name.
    pub(crate) backend: &'static str,
    /// Whether the lease phase ran (contenders); when not, the lease fields are empty.
    pub(crate) leases: bool,
    /// The group phase, when it ran.
    pub(crate) groups: Option<GroupReport>,
    /// The history checker's report.
    pub(crate) history: HistoryReport,
    /// The counted name's phase, on a store with counted leases.
    pub(crate) counted: Option<CountedReport>,
    /// The mixed-count name (claims of 3 and 5 under chaos), on a store with counted leases.
    pub(crate) mixed: Option<MixedReport>,
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
    /// Step-down failures recorded by the fail action (zombies' expected ones excepted).
    pub(crate) step_down_failures: Vec<String>,
    /// The zombies: holders paused past their lease that then wrote with their old token.
    pub(crate) zombies: Vec<Zombie>,
    /// Writes the fenced resource refused (zombies' and any other).
    pub(crate) refused_writes: u64,
    /// Writes the fenced resource accepted with a token lower than one it had accepted:
    /// violations, in plain words.
    pub(crate) stale_writes: Vec<String>,
    /// What each real resource (PostgreSQL table, Redis key, HTTP service) saw of the same
    /// writes; empty when none was set up.
    pub(crate) real: Vec<RealReport>,
    /// Anything else that went wrong: a contender's error, a failed restart.
    pub(crate) errors: Vec<String>,
    /// The worst lateness of a 10 ms timer during the run: how long the process was unable to
    /// run its tasks (a pause longer than the lease's margin could fake an overlap).
    pub(crate) max_lag: Duration,
    /// How long the soak of this backend took, set-up and tear-down included.
    pub(crate) elapsed: Duration,
    /// The node outages of a cluster soak (`--cluster`): its node kills and its cut, with
    /// their recovery times.
    pub(crate) outages: Vec<Outage>,
    /// What the run left out and why (not failures), e.g. a node kill that did not fit.
    pub(crate) notes: Vec<String>,
}

/// What the contenders of the counted name recorded: at most `permits` holders at once.
#[derive(Debug, Clone)]
pub(crate) struct CountedReport {
    /// The permit count.
    pub(crate) permits: u32,
    /// The history with a limit of `permits`: an overlap is a section entered while `permits`
    /// were open, a violation of "at most N".
    pub(crate) history: HistoryReport,
}

impl CountedReport {
    /// The soak line's part: terms, sections, the most holders at once, violations.
    pub(crate) fn line(&self) -> String {
        let h = &self.history;
        format!(
            "counted name ({} permits): {} terms, {} sections, at most {} at once, {} violations \
             of \"at most {}\", {} reused tokens",
            self.permits,
            h.distinct_terms,
            h.sections,
            h.peak_open,
            h.overlaps,
            self.permits,
            h.regressions
        )
    }

    /// Every reason the counted phase fails; empty when it passes.
    pub(crate) fn problems(&self) -> Vec<String> {
        let h = &self.history;
        let mut p = Vec::new();
        if h.overlaps > 0 {
            p.push(format!(
                "{} violations of \"at most {}\" holders of the counted name",
                h.overlaps, self.permits
            ));
        }
        if h.regressions > 0 {
            p.push(format!(
                "{} tokens of the counted name entered by two holders",
                h.regressions
            ));
        }
        if h.distinct_terms < MIN_TERMS {
            p.push(format!(
                "only {} terms on the counted name (at least {MIN_TERMS} expected)",
                h.distinct_terms
            ));
        }
        if h.peak_open < 2 {
            p.push(
                "the counted name never had two holders at once: its permits were not exercised"
                    .to_owned(),
            );
        }
        p
    }
}

/// What a cluster soak did to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutageKind {
    /// SIGKILLed, then restarted.
    Kill,
    /// Cut off from the clients for a while (its fault proxy in `Cut`), then reconnected; it
    /// kept running and talking to the other nodes.
    Cut,
    /// Stopped with SIGSTOP for a while (cut off from clients and the other nodes alike), then
    /// continued with SIGCONT: the cut of a Redis + Sentinel cluster, whose clients learn the
    /// primary's real address from the Sentinels, so no client-side proxy sits in front of it.
    Freeze,
}

/// One node outage of a cluster soak: a kill, or a cut.
#[derive(Debug, Clone)]
pub(crate) struct Outage {
    /// What was done to the node.
    pub(crate) kind: OutageKind,
    /// The node (the leader or primary then).
    pub(crate) node: String,
    /// When: the node was gone (killed), cut off or frozen from this moment.
    pub(crate) at: tokio::time::Instant,
    /// When, from the start of the run.
    pub(crate) offset: Duration,
    /// How long a cut or a freeze lasted (a killed node's time down is the run's restart pause).
    pub(crate) length: Duration,
    /// A cut's client connections the node's fault proxy held when it cut them (`None` for a
    /// kill or a freeze): shows that the cut hit clients.
    pub(crate) dropped: Option<usize>,
    /// From the outage until a holder worked again: the first fenced section entered under a
    /// claim or renewal sent after `at`; `None` when none came before the end.
    pub(crate) back: Option<Duration>,
}

impl Outage {
    /// What happened to the node, in words: `killed`, `cut off`, `frozen`.
    fn verb(&self) -> &'static str {
        match self.kind {
            OutageKind::Kill => "killed",
            OutageKind::Cut => "cut off",
            OutageKind::Freeze => "frozen",
        }
    }
}

/// The median and the largest of `d` (`None` when empty).
pub(crate) fn p50_max(d: &[Duration]) -> Option<(Duration, Duration)> {
    let mut d = d.to_vec();
    d.sort();
    Some((*d.get(d.len() / 2)?, *d.last()?))
}

impl BackendReport {
    /// Faults of every kind.
    pub(crate) fn faults(&self) -> usize {
        self.stalls + self.cuts + self.restarts
    }

    /// Zombie writes that reached the fenced resource (a zombie whose successor had not
    /// written when its pause ran out gave up without writing).
    pub(crate) fn zombie_writes(&self) -> u64 {
        self.zombies.iter().filter(|z| z.written.is_some()).count() as u64
    }

    /// Zombie writes the fenced resource refused.
    pub(crate) fn zombie_refused(&self) -> u64 {
        self.zombies
            .iter()
            .filter(|z| z.written == Some(Written::Refused))
            .count() as u64
    }

    /// The soak line: terms, faults, sections, violations and zombie writes refused.
    pub(crate) fn line(&self) -> String {
        let h = &self.history;
        format!(
            "soak {}: {} terms, {} faults ({} stalls, {} cuts, {} restart{}), {} sections, {} \
             overlaps, {} regressions, {} step-down failures, {} of {} zombie writes refused",
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
            self.step_down_failures.len(),
            self.zombie_refused(),
            self.zombie_writes()
        ) + &self
            .counted
            .as_ref()
            .map(|c| format!("; {}", c.line()))
            .unwrap_or_default()
    }

    /// A second line of detail.
    pub(crate) fn details(&self) -> String {
        let mut s = format!(
            "  {}: {} terms won, {} ended by a fault",
            self.backend, self.terms_won, self.terms_lost
        );
        if self.leases {
            let fired = self.zombies.iter().filter(|z| z.fail_action_fired).count();
            let gave_up = self.zombies.len() - self.zombie_writes() as usize;
            let _ = write!(s, ", {} zombies", self.zombies.len());
            let paused = self.zombies.iter().map(|z| z.paused);
            if let (Some(lo), Some(hi)) = (paused.clone().min(), paused.max()) {
                let _ = write!(
                    s,
                    " (paused {:.1}–{:.1} s, fail action fired for {fired}, {gave_up} without a \
                     successor)",
                    lo.as_secs_f64(),
                    hi.as_secs_f64()
                );
            }
            let _ = write!(
                s,
                ", {} fenced writes refused, {} stale writes accepted",
                self.refused_writes,
                self.stale_writes.len()
            );
        }
        if let Some(d) = self.downtime {
            let _ = write!(s, ", server away {:.1} s", d.as_secs_f64());
        }
        let kills: Vec<&Outage> = self
            .outages
            .iter()
            .filter(|k| k.kind == OutageKind::Kill)
            .collect();
        if !kills.is_empty() {
            let back: Vec<Duration> = kills.iter().filter_map(|k| k.back).collect();
            let each: Vec<String> = kills
                .iter()
                .map(|k| match k.back {
                    Some(b) => format!(
                        "{} at {:.1} s: {} ms",
                        k.node,
                        k.offset.as_secs_f64(),
                        b.as_millis()
                    ),
                    None => format!("{} at {:.1} s: never", k.node, k.offset.as_secs_f64()),
                })
                .collect();
            let _ = write!(s, ", {} node kills ({})", kills.len(), each.join(", "));
            if let Some((p50, max)) = p50_max(&back) {
                let _ = write!(
                    s,
                    ", a holder working again after a kill: p50 {} ms, max {} ms",
                    p50.as_millis(),
                    max.as_millis()
                );
            }
        }
        for k in self.outages.iter().filter(|k| k.kind != OutageKind::Kill) {
            let how = match k.kind {
                OutageKind::Freeze => " (SIGSTOP: the Sentinel cluster's cut)",
                _ => "",
            };
            let back = match k.back {
                Some(b) => format!("{} ms", b.as_millis()),
                None => "never".to_owned(),
            };
            let dropped = k
                .dropped
                .map(|n| format!(" ({n} client connections dropped)"))
                .unwrap_or_default();
            let _ = write!(
                s,
                ", {} {} at {:.1} s for {:.1} s{how}{dropped}, a holder working again after the \
                 cut: {back}",
                k.node,
                k.verb(),
                k.offset.as_secs_f64(),
                k.length.as_secs_f64()
            );
        }
        for note in &self.notes {
            let _ = write!(s, "; {note}");
        }
        let _ = write!(
            s,
            ", max timer lag {} ms, {:.1} s",
            self.max_lag.as_millis(),
            self.elapsed.as_secs_f64()
        );
        s
    }

    /// The real fences' line: per resource, its writes, the zombie writes it refused and the
    /// stale writes it accepted; `None` when no real resource was set up.
    pub(crate) fn real_line(&self) -> Option<String> {
        if self.real.is_empty() {
            return None;
        }
        let each: Vec<String> = self.real.iter().map(RealReport::line).collect();
        Some(format!(
            "  {}: real fences: {}",
            self.backend,
            each.join("; ")
        ))
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
        if !self.stale_writes.is_empty() {
            p.push(format!(
                "{} stale writes accepted by the fenced resource (a zombie's old token got in \
                 after a higher one)",
                self.stale_writes.len()
            ));
        }
        for r in &self.real {
            p.extend(r.problems(self.zombie_writes()));
        }
        if self.leases && self.zombie_writes() == 0 {
            p.push(format!(
                "no zombie write reached the fenced resource ({} zombies, none with a successor \
                 that wrote in time): fencing was not exercised",
                self.zombies.len()
            ));
        }
        let unfired = self.zombies.iter().filter(|z| !z.fail_action_fired).count();
        if unfired > 0 {
            p.push(format!(
                "{unfired} zombies woke before their coordinator's fail action fired (the \
                 step-down grace was not enforced)"
            ));
        }
        if self.leases && h.distinct_terms < MIN_TERMS {
            p.push(format!(
                "only {} terms (at least {MIN_TERMS} expected): the soak did not exercise the lease",
                h.distinct_terms
            ));
        }
        for k in self.outages.iter().filter(|k| k.back.is_none()) {
            p.push(format!(
                "no holder worked again after {} was {} at {:.1} s",
                k.node,
                k.verb(),
                k.offset.as_secs_f64()
            ));
        }
        if let Some(c) = &self.counted {
            p.extend(c.problems());
        }
        if let Some(m) = &self.mixed {
            p.extend(m.problems());
        }
        p.extend(self.errors.iter().cloned());
        if let Some(g) = &self.groups {
            p.extend(g.problems().into_iter().map(|e| format!("groups: {e}")));
        }
        p
    }

    /// The violations and failures of the lease phase in full, for the output.
    pub(crate) fn evidence(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.stale_writes.clone();
        for r in &self.real {
            lines.extend(r.evidence());
        }
        lines.extend(self.history.violations.iter().cloned());
        if let Some(c) = &self.counted {
            lines.extend(
                c.history
                    .violations
                    .iter()
                    .map(|v| format!("counted name: {v}")),
            );
        }
        if let Some(m) = &self.mixed {
            lines.extend(m.evidence());
        }
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
        lines.extend(
            self.zombies
                .iter()
                .filter(|z| !z.fail_action_fired)
                .map(|z| {
                    format!(
                        "zombie {} term {} woke after {:.1} s without its fail action having fired",
                        z.who,
                        z.token,
                        z.paused.as_secs_f64()
                    )
                }),
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

/// The final summary line, and whether the whole soak passes; `setup` lists failures outside
/// any backend (a real fence skipped although `LEASE_TEST_REQUIRE` names its server).
pub(crate) fn summary(
    outcomes: &[Outcome],
    setup: &[String],
    seed: u64,
    seconds: u64,
) -> (String, bool) {
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
    let zombie_writes = sum(&|r| r.zombie_writes());
    let zombie_refused = sum(&|r| r.zombie_refused());
    let stale = sum(&|r| r.stale_writes.len() as u64);
    let mut failing: Vec<String> = setup.to_vec();
    failing.extend(outcomes.iter().filter_map(|o| {
        let p = o.problems();
        (!p.is_empty()).then(|| format!("{}: {}", o.backend(), p.join("; ")))
    }));
    let skipped: Vec<&str> = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Skipped { .. }))
        .map(Outcome::backend)
        .collect();
    let pass = failing.is_empty() && !ran.is_empty();
    let mut line = format!(
        "soak {}: {} backends × {seconds} s (seed {seed}), {terms} terms, {faults} faults \
         ({restarts} restarts), {sections} sections, {overlaps} overlaps, {regressions} \
         regressions, {failures} step-down failures, {zombie_refused} of {zombie_writes} zombie \
         writes refused",
        if pass { "PASSED" } else { "FAILED" },
        ran.len(),
    );
    if stale > 0 {
        let _ = write!(line, ", {stale} stale writes ACCEPTED");
    }
    let _ = write!(line, "{}", real_summary(&ran));
    let groups: Vec<&GroupReport> = ran.iter().filter_map(|r| r.groups.as_ref()).collect();
    if !groups.is_empty() {
        let handovers: u64 = groups.iter().map(|g| g.handovers).sum();
        let violations: usize = groups.iter().map(|g| g.violations.len()).sum();
        let slowest = groups
            .iter()
            .filter_map(|g| g.final_settle.map(|d| (d, g.bound)))
            .max();
        let _ = write!(
            line,
            "; groups on {} backends: {handovers} hand-overs, {violations} violations",
            groups.len()
        );
        let back = groups.iter().filter_map(|g| g.stores_back).max();
        if let (Some(back), Some((d, bound))) = (back, slowest) {
            let _ = write!(
                line,
                "; after the faults, stores answering within {:.1} s, settled within {:.1} s more \
                 (bound {:.1} s)",
                back.as_secs_f64(),
                d.as_secs_f64(),
                bound.as_secs_f64()
            );
        }
    }
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

/// The summary's part on the real fences: per resource, over every backend, the zombie writes
/// it refused and the stale writes it accepted (empty when none was set up).
fn real_summary(ran: &[&BackendReport]) -> String {
    let mut kinds: Vec<Kind> = ran
        .iter()
        .flat_map(|r| r.real.iter().map(|x| x.kind))
        .collect();
    kinds.sort();
    kinds.dedup();
    let each: Vec<String> = kinds
        .iter()
        .map(|&k| {
            let of = ran
                .iter()
                .flat_map(|r| r.real.iter().filter(move |x| x.kind == k));
            let (refused, writes, stale) = of.fold((0, 0, 0), |(a, b, c), x| {
                (a + x.zombie_refused, b + x.zombie_writes, c + x.stale_total)
            });
            let stale = if stale > 0 {
                format!(" ({stale} stale writes ACCEPTED)")
            } else {
                String::new()
            };
            format!("{} {refused} of {writes}{stale}", k.name())
        })
        .collect();
    if each.is_empty() {
        String::new()
    } else {
        format!(
            "; zombie writes refused by real fences: {}",
            each.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(terms: u64, overlaps: u64) -> BackendReport {
        BackendReport {
            backend: "postgres",
            leases: true,
            groups: None,
            history: HistoryReport {
                sections: 1840,
                distinct_terms: terms,
                limit: 1,
                peak_open: 1,
                overlaps,
                regressions: 0,
                accepted_writes: 1840,
                rejected_writes: 0,
                violations: Vec::new(),
                violations_total: overlaps,
            },
            counted: None,
            mixed: None,
            stalls: 12,
            cuts: 10,
            restarts: 1,
            downtime: Some(Duration::from_millis(2100)),
            terms_won: terms,
            terms_lost: 3,
            step_down_failures: Vec::new(),
            zombies: (0..2).map(|k| zombie(k, Some(Written::Refused))).collect(),
            refused_writes: 2,
            stale_writes: Vec::new(),
            real: Vec::new(),
            errors: Vec::new(),
            max_lag: Duration::from_millis(4),
            elapsed: Duration::from_secs(31),
            outages: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn zombie(k: u64, written: Option<Written>) -> Zombie {
        Zombie {
            who: format!("contender-{k}"),
            token: 10 + k,
            paused: Duration::from_millis(2000 + 100 * k),
            written,
            fail_action_fired: true,
        }
    }

    #[test]
    fn the_counted_name_fails_the_run_on_a_violation_of_at_most_n() {
        let mut r = report(20, 0);
        let clean = HistoryReport {
            limit: 3,
            peak_open: 3,
            ..r.history.clone()
        };
        r.counted = Some(CountedReport {
            permits: 3,
            history: clean.clone(),
        });
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        assert!(
            r.line().ends_with(
                "; counted name (3 permits): 20 terms, 1840 sections, at most 3 at once, 0 \
                 violations of \"at most 3\", 0 reused tokens"
            ),
            "{}",
            r.line()
        );
        r.counted = Some(CountedReport {
            permits: 3,
            history: HistoryReport {
                peak_open: 4,
                overlaps: 1,
                violations_total: 1,
                violations: vec![
                    "overlap: #9 counted-4@12 entered while 3 sections were open".into(),
                ],
                ..clean
            },
        });
        let problems = r.problems();
        assert_eq!(
            problems,
            ["1 violations of \"at most 3\" holders of the counted name"],
            "{problems:?}"
        );
        assert!(
            r.evidence()
                .iter()
                .any(|l| l.starts_with("counted name: overlap"))
        );
    }

    #[test]
    fn line_has_the_documented_shape() {
        assert_eq!(
            report(212, 0).line(),
            "soak postgres: 212 terms, 23 faults (12 stalls, 10 cuts, 1 restart), 1840 sections, \
             0 overlaps, 0 regressions, 0 step-down failures, 2 of 2 zombie writes refused"
        );
        assert_eq!(
            report(212, 0).details(),
            "  postgres: 212 terms won, 3 ended by a fault, 2 zombies (paused 2.0–2.1 s, fail \
             action fired for 2, 0 without a successor), 2 fenced writes refused, 0 stale writes \
             accepted, server away 2.1 s, max timer lag 4 ms, 31.0 s"
        );
    }

    fn outage(kind: OutageKind, node: &str, offset_ms: u64, back_ms: Option<u64>) -> Outage {
        Outage {
            kind,
            node: node.to_owned(),
            at: tokio::time::Instant::now(),
            offset: Duration::from_millis(offset_ms),
            length: Duration::from_millis(2500),
            dropped: (kind == OutageKind::Cut).then_some(7),
            back: back_ms.map(Duration::from_millis),
        }
    }

    #[test]
    fn kills_and_the_cut_are_reported_and_a_cut_without_recovery_fails() {
        let mut r = report(212, 0);
        r.outages = vec![
            outage(OutageKind::Kill, "e1", 500, Some(900)),
            outage(OutageKind::Cut, "e2", 14_000, Some(300)),
            outage(OutageKind::Kill, "e2", 40_000, Some(1100)),
        ];
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        let details = r.details();
        assert!(
            details.contains(
                ", 2 node kills (e1 at 0.5 s: 900 ms, e2 at 40.0 s: 1100 ms), a holder working \
                 again after a kill: p50 1100 ms, max 1100 ms, e2 cut off at 14.0 s for 2.5 s \
                 (7 client connections dropped), a holder working again after the cut: 300 ms,"
            ),
            "{details}"
        );
        r.outages[1].back = None;
        r.outages
            .push(outage(OutageKind::Freeze, "r1", 15_000, None));
        assert!(r.details().contains(
            "r1 frozen at 15.0 s for 2.5 s (SIGSTOP: the Sentinel cluster's cut), a holder \
             working again after the cut: never"
        ));
        assert_eq!(
            r.problems(),
            vec![
                "no holder worked again after e2 was cut off at 14.0 s".to_owned(),
                "no holder worked again after r1 was frozen at 15.0 s".to_owned(),
            ]
        );
    }

    #[test]
    fn an_accepted_stale_write_fails_the_soak() {
        // What `--break-fencing` produces: a zombie's write accepted after a successor's, which
        // the resource also entered into the history (an overlap here: the successor's section
        // was open).
        let mut r = report(212, 1);
        r.history.regressions = 1;
        r.history.violations_total = 2;
        r.zombies[1].written = Some(Written::AcceptedStale);
        r.refused_writes = 1;
        r.stale_writes = vec![
            "stale write accepted: contender-1 wrote with token 11 after token 12 had written; \
             contender-2 holds the lease"
                .into(),
        ];
        let problems = r.problems();
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("1 stale writes accepted by the fenced resource")),
            "{problems:?}"
        );
        assert!(
            r.line().ends_with("1 of 2 zombie writes refused"),
            "{}",
            r.line()
        );
        assert!(r.evidence()[0].starts_with("stale write accepted: contender-1"));
        let (line, pass) = summary(&[Outcome::Ran(Box::new(r))], &[], 1, 20);
        assert!(!pass);
        assert!(
            line.contains("1 of 2 zombie writes refused, 1 stale writes ACCEPTED"),
            "{line}"
        );
        assert!(line.contains("FAILED postgres: 1 overlaps; 1 term regressions; 1 stale writes"));

        // The stale write alone (no section open, history not consulted) fails too.
        let mut r = report(212, 0);
        r.stale_writes = vec!["stale write accepted: …".into()];
        assert_eq!(r.problems().len(), 1, "{:?}", r.problems());
    }

    /// A real resource that saw `writes` section writes and refused `refused` of the 2 zombie
    /// writes (accepting the rest after a higher token).
    fn real(kind: Kind, refused: u64) -> RealReport {
        use crate::downstream::Outcome;
        let ms = Duration::from_millis(3);
        let mut r = RealReport::new(kind);
        r.judge(
            ("contender-0", 12, "contender-0@12#0"),
            false,
            Written::Accepted,
            &Outcome::Accepted,
            ms,
        );
        for k in 0..2 {
            let value = format!("contender-{k}@1{k}#9");
            let (model, outcome) = if k < refused {
                (Written::Refused, Outcome::Refused { fence: 12 })
            } else {
                (Written::AcceptedStale, Outcome::Accepted)
            };
            r.judge(
                (&format!("contender-{k}"), 10 + k, &value),
                true,
                model,
                &outcome,
                ms,
            );
        }
        r
    }

    #[test]
    fn real_fences_are_reported_per_resource_and_each_fails_on_its_own() {
        let mut r = report(212, 0);
        r.real = vec![
            real(Kind::Postgres, 2),
            real(Kind::Redis, 2),
            real(Kind::Http, 2),
        ];
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        assert_eq!(
            r.real_line().as_deref(),
            Some(
                "  postgres: real fences: postgres table 3 writes, 2 of 2 zombie writes refused \
                 (0 read back unchanged), 0 stale accepted, slowest 3 ms; redis key 3 writes, 2 \
                 of 2 zombie writes refused (0 read back unchanged), 0 stale accepted, slowest 3 \
                 ms; http service 3 writes, 2 of 2 zombie writes refused (0 read back \
                 unchanged), 0 stale accepted, slowest 3 ms"
            )
        );
        let (line, pass) = summary(&[Outcome::Ran(Box::new(r.clone()))], &[], 1, 30);
        assert!(pass, "{line}");
        assert!(
            line.ends_with(
                "; zombie writes refused by real fences: postgres table 2 of 2, redis key 2 of \
                 2, http service 2 of 2"
            ),
            "{line}"
        );
        // The Redis key alone lets both zombies in: the run fails, naming it.
        r.real[1] = real(Kind::Redis, 0);
        assert_eq!(
            r.problems(),
            [
                "redis key: 2 stale writes accepted (a zombie's old token got in after a higher \
                 one)",
                "redis key refused 0 of 2 zombie writes"
            ]
        );
        assert!(r.evidence()[0].starts_with("redis key: stale write accepted: contender-0"));
        let (line, pass) = summary(&[Outcome::Ran(Box::new(r))], &[], 1, 30);
        assert!(!pass);
        assert!(
            line.contains("redis key 0 of 2 (2 stale writes ACCEPTED)"),
            "{line}"
        );
        assert!(
            line.contains("FAILED postgres: redis key: 2 stale writes"),
            "{line}"
        );
        // No real resource: no line.
        assert!(report(212, 0).real_line().is_none());
    }

    #[test]
    fn a_soak_without_zombie_writes_fails() {
        let mut r = report(212, 0);
        r.zombies = vec![zombie(0, None)];
        assert!(
            r.problems()[0].starts_with("no zombie write reached the fenced resource (1 zombies"),
            "{:?}",
            r.problems()
        );
        r.zombies.clear();
        assert_eq!(r.problems().len(), 1);
        r.zombies = vec![zombie(0, Some(Written::Refused))];
        r.zombies[0].fail_action_fired = false;
        assert!(r.problems()[0].contains("before their coordinator's fail action fired"));
        // A groups-only soak has no zombies and needs none.
        r.leases = false;
        r.zombies.clear();
        assert!(r.problems().is_empty());
    }

    fn group(violations: usize, settled: bool) -> GroupReport {
        GroupReport {
            backend: "postgres",
            workers: 4,
            partitions: 16,
            stalls: 9,
            cuts: 9,
            blips: 8,
            restarts: 1,
            rejoins: 1,
            crashes: 1,
            observations: 15230,
            work_intervals: 120,
            handovers: 88,
            violations: vec![
                "worker-1 holds partition 3 under epoch 4 after …".into();
                violations
            ],
            settles: vec![
                Settle {
                    after: "start",
                    took: Some(Duration::from_millis(620)),
                },
                Settle {
                    after: "crash",
                    took: None,
                },
            ],
            stores_back: Some(Duration::from_millis(20)),
            final_settle: settled.then_some(Duration::from_millis(840)),
            unsettled: None,
            bound: Duration::from_millis(3100),
            steady: Duration::from_millis(1500),
            errors: Vec::new(),
        }
    }

    #[test]
    fn group_lines_have_the_documented_shape() {
        assert_eq!(
            group(0, true).line(),
            "group postgres: 4 workers × 16 partitions, 27 faults (9 stalls, 9 cuts, 8 blips, 1 \
             restart), 1 leave + re-join, 1 crash, 15230 observations, 120 work intervals, 88 \
             hand-overs, 0 violations"
        );
        assert_eq!(
            group(0, true).details(),
            "  postgres: settled after start 0.6 s, crash (interrupted); after the faults: stores \
             answering in 0.0 s, settled 0.8 s later (bound 3.1 s), steady for 1.5 s"
        );
        assert!(group(20, true).line().ends_with("20+ violations"));
        assert_eq!(
            group(20, true).evidence().len(),
            1,
            "repeated violations shown once"
        );
        assert!(group(0, true).problems().is_empty());
        assert!(!group(1, true).problems().is_empty());
        assert!(!group(0, false).problems().is_empty());
        let mut r = report(212, 0);
        r.groups = Some(group(2, true));
        assert_eq!(r.problems(), ["groups: 2 assignment violations"]);
        let (line, pass) = summary(&[Outcome::Ran(Box::new(r))], &[], 1, 30);
        assert!(!pass);
        assert!(
            line.contains("groups on 1 backends: 88 hand-overs, 2 violations"),
            "{line}"
        );
        let mut groups_only = report(0, 0);
        groups_only.leases = false;
        groups_only.groups = Some(group(0, true));
        assert!(groups_only.problems().is_empty());
    }

    #[test]
    fn violations_and_idle_soaks_fail() {
        assert!(report(212, 0).problems().is_empty());
        assert!(!report(212, 1).problems().is_empty());
        assert!(!report(2, 0).problems().is_empty());
        let (line, pass) = summary(&[Outcome::Ran(Box::new(report(212, 0)))], &[], 1, 30);
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
            &[],
            1,
            30,
        );
        assert!(!pass);
        assert!(line.contains("FAILED nats"), "{line}");
        let (_, pass) = summary(&[], &[], 1, 30);
        assert!(!pass);
        // A real fence skipped although required fails the run.
        let (line, pass) = summary(
            &[Outcome::Ran(Box::new(report(212, 0)))],
            &["real fence redis: skipped but required by LEASE_TEST_REQUIRE: …".to_owned()],
            1,
            30,
        );
        assert!(!pass);
        assert!(
            line.contains("FAILED real fence redis: skipped but required"),
            "{line}"
        );
    }
}
