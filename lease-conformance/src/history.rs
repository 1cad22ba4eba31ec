//! A history checker for fenced critical sections.
//!
//! Tests start many contenders (tokio tasks in one process), each of which
//! takes a lease and, while it believes it holds it, runs short critical
//! sections tagged with its name and the lease's fencing token (the term).
//! [`History`] records every section as it starts and ends and checks the two
//! properties a lease must give:
//!
//! - **mutual exclusion**: no section starts while another one is open;
//! - **terms never go back**: a section whose holder or term differs from the
//!   previous one must carry a term strictly higher than every term seen so
//!   far. The same holder may run several sections in one term; another
//!   holder reusing that term, or anyone entering with a lower term, is a
//!   violation.
//!
//! A counted name (at most N holders, see `lease_core::backend::permits`) gets the same checker
//! with a limit, [`History::with_limit`]: a section may start while fewer than N are open, and a
//! term is never entered by two holders. Terms of concurrent holders need not come in order (a
//! holder granted earlier may enter its section later), so "going back" is not judged there; the
//! store-level cases check that every grant's token is above all earlier ones.
//!
//! A counted name claimed with different counts (claims of 3 and of 5 on one name) is judged
//! per grant by [`CountedGrants`]: a claim of N granted while N or more others were live, by
//! what the claimers can know of it, is a violation.
//!
//! It also models a fenced resource ([`History::fenced_write`]), the way a
//! real store would guard writes with `UPDATE … WHERE fence <= $term`, and
//! counts the stale writes it turns away.
//!
//! The checker sees what the contenders report, in the order in which their
//! calls take its lock: it checks the real exclusion of the code it wraps,
//! not of the store. A contender that enters a section only after it has
//! verified its lease, and leaves it before doing anything else, gives the
//! checker exactly the intervals the lease must keep apart.
//!
//! ```
//! use lease_conformance::history::History;
//!
//! let history = History::new();
//! {
//!     let section = history.enter("node-a", 1);
//!     assert!(section.fenced_write());
//! } // the section ends here
//! let section = history.enter("node-b", 2);
//! assert!(section.fenced_write());
//! section.exit();
//! assert!(!history.fenced_write(1)); // a stale writer is turned away
//! history.assert_clean();
//! println!("{}", history.report()); // history: 2 sections, 2 terms, 0 overlaps, 0 regressions, 1 rejected writes
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How many violations a report keeps in full.
const MAX_VIOLATIONS: usize = 20;

/// A shared record of critical sections and fenced writes.
///
/// Cheap to clone: every clone records into the same history, so each
/// contender can own one. All methods are safe to call from many threads and
/// tasks at once; each call holds a short internal lock and never awaits.
#[derive(Debug, Clone, Default)]
pub struct History {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// How many sections may be open at once: 1 for a plain lease, N for a counted name.
    limit: usize,
    /// The most sections open at once so far.
    peak_open: usize,
    /// For a limit above 1: the holder that first entered each term.
    owners: HashMap<u64, String>,
    next_id: u64,
    /// Sections open now, by id: (who, term).
    open: HashMap<u64, (String, u64)>,
    /// The highest term entered so far and the holder that entered it first.
    top: Option<(u64, String)>,
    sections: u64,
    terms: HashSet<u64>,
    overlaps: u64,
    regressions: u64,
    /// Highest term a fenced write was accepted with.
    fence: Option<u64>,
    accepted_writes: u64,
    rejected_writes: u64,
    violations: Vec<String>,
    violations_total: u64,
}

impl State {
    fn violation(&mut self, message: String) {
        self.violations_total += 1;
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(message);
        }
    }
}

impl History {
    /// An empty history of a plain lease: one section open at most, terms never go back.
    pub fn new() -> Self {
        Self::with_limit(1)
    }

    /// An empty history of a counted name with `limit` permits: at most `limit` sections open
    /// at once, and no term entered by two holders. `with_limit(1)` is [`History::new`].
    pub fn with_limit(limit: usize) -> Self {
        let history = History::default();
        history.lock().limit = limit.max(1);
        history
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while the lock was held (a failed assertion in a
        // contender) leaves the counters consistent: keep recording.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `who` enters a critical section under fencing token
    /// `term`, and returns the guard that ends it when dropped or passed to
    /// [`Section::exit`].
    ///
    /// Never blocks the caller on other sections and never fails: a section
    /// that breaks the rules is counted and described in the
    /// [`HistoryReport`]. It is an overlap when the limit's worth of sections
    /// (one, for [`History::new`]) is still open, even of the same `who`. With a
    /// limit of one it is a regression when its `(who, term)` differs from the
    /// section entered just before and `term` is not higher than every term
    /// entered so far; re-entering the highest term by the holder that first
    /// entered it is allowed (one holder, several sections in one term). With a
    /// higher limit it is a regression when another holder entered `term` first.
    pub fn enter(&self, who: &str, term: u64) -> Section {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.sections += 1;
        state.terms.insert(term);

        let limit = state.limit.max(1);
        if state.open.len() >= limit {
            state.overlaps += 1;
            let mut others: Vec<(u64, String)> = state
                .open
                .iter()
                .map(|(other_id, (other, other_term))| {
                    (*other_id, format!("#{other_id} {other}@{other_term}"))
                })
                .collect();
            others.sort();
            let listed: Vec<String> = others.into_iter().take(3).map(|(_, s)| s).collect();
            let more = state.open.len().saturating_sub(listed.len());
            let tail = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            let message = if limit == 1 {
                format!(
                    "overlap: #{id} {who}@{term} entered while {}{tail} open",
                    listed.join(", ")
                )
            } else {
                format!(
                    "overlap: #{id} {who}@{term} entered while {} sections were open, more \
                     than the limit of {limit} allows: {}{tail}",
                    state.open.len(),
                    listed.join(", ")
                )
            };
            state.violation(message);
        }

        if limit > 1 {
            let first = state
                .owners
                .entry(term)
                .or_insert_with(|| who.to_owned())
                .clone();
            if first != who {
                let message = format!(
                    "regression: #{id} {who}@{term} reuses term {term}, first entered by {first}"
                );
                state.regressions += 1;
                state.violation(message);
            }
        } else {
            match state.top.as_ref() {
                None => state.top = Some((term, who.to_owned())),
                Some((top, _)) if term > *top => state.top = Some((term, who.to_owned())),
                Some((top, holder)) if term == *top => {
                    if holder != who {
                        let message = format!(
                            "regression: #{id} {who}@{term} reuses term {term}, first entered by {holder}"
                        );
                        state.regressions += 1;
                        state.violation(message);
                    }
                }
                Some((top, holder)) => {
                    let message = format!(
                        "regression: #{id} {who}@{term} entered after term {top} (entered by {holder})"
                    );
                    state.regressions += 1;
                    state.violation(message);
                }
            }
        }

        state.open.insert(id, (who.to_owned(), term));
        state.peak_open = state.peak_open.max(state.open.len());
        drop(state);
        Section {
            history: self.clone(),
            id,
            who: who.to_owned(),
            term,
            open: true,
        }
    }

    /// A write to the fenced resource with fencing token `term`: accepted,
    /// and `true` returned, when `term` is at least the highest term accepted
    /// so far (the fence then moves up to `term`); otherwise rejected and
    /// counted, and `false` returned.
    ///
    /// This is the guard a real store applies (`UPDATE … WHERE fence <=
    /// $term`). A rejection is the fence doing its job, not a violation by
    /// itself; the report counts rejections so a test can tell how often a
    /// stale holder still tried to write.
    pub fn fenced_write(&self, term: u64) -> bool {
        let mut state = self.lock();
        match state.fence {
            Some(fence) if term < fence => {
                state.rejected_writes += 1;
                false
            }
            _ => {
                state.fence = Some(term);
                state.accepted_writes += 1;
                true
            }
        }
    }

    /// A snapshot of what was recorded so far.
    ///
    /// Sections still open are included in the counts; their overlap with
    /// sections entered later is detected when those enter.
    pub fn report(&self) -> HistoryReport {
        let state = self.lock();
        HistoryReport {
            sections: state.sections,
            distinct_terms: state.terms.len() as u64,
            limit: state.limit.max(1) as u64,
            peak_open: state.peak_open as u64,
            overlaps: state.overlaps,
            regressions: state.regressions,
            accepted_writes: state.accepted_writes,
            rejected_writes: state.rejected_writes,
            violations: state.violations.clone(),
            violations_total: state.violations_total,
        }
    }

    /// Panics, listing the violations, when any section overlapped another or
    /// a term went back. Rejected fenced writes alone do not panic.
    ///
    /// Meant for tests: call it after every contender has finished.
    #[track_caller]
    pub fn assert_clean(&self) {
        let report = self.report();
        if !report.is_clean() {
            let mut message = format!("{report}\n");
            for violation in &report.violations {
                message.push_str("  ");
                message.push_str(violation);
                message.push('\n');
            }
            let hidden = report
                .violations_total
                .saturating_sub(report.violations.len() as u64);
            if hidden > 0 {
                message.push_str(&format!("  ... and {hidden} more\n"));
            }
            panic!("{message}");
        }
    }

    fn exit(&self, id: u64) {
        self.lock().open.remove(&id);
    }
}

/// An open critical section; it ends when dropped or passed to
/// [`Section::exit`].
///
/// Keep it alive for exactly as long as the work the lease protects: drop it
/// before the contender does anything that is not covered by the lease.
#[derive(Debug)]
#[must_use = "a section ends as soon as its guard is dropped"]
pub struct Section {
    history: History,
    id: u64,
    who: String,
    term: u64,
    open: bool,
}

impl Section {
    /// The holder that entered the section.
    pub fn who(&self) -> &str {
        &self.who
    }

    /// The fencing token the section was entered with.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// [`History::fenced_write`] with this section's term.
    pub fn fenced_write(&self) -> bool {
        self.history.fenced_write(self.term)
    }

    /// Ends the section now; the same as dropping it.
    pub fn exit(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if self.open {
            self.open = false;
            self.history.exit(self.id);
        }
    }
}

impl Drop for Section {
    fn drop(&mut self) {
        self.finish();
    }
}

/// What a [`History`] recorded, as returned by [`History::report`].
///
/// Displays as one line: `history: 812 sections, 37 terms, 0 overlaps, 0
/// regressions, 0 rejected writes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryReport {
    /// Sections entered.
    pub sections: u64,
    /// Distinct terms sections were entered with.
    pub distinct_terms: u64,
    /// How many sections may be open at once: 1, or a counted name's permits.
    pub limit: u64,
    /// The most sections that were open at once.
    pub peak_open: u64,
    /// Sections entered while `limit` sections were already open (for a plain
    /// lease: while another section was open).
    pub overlaps: u64,
    /// Sections entered with a term that went back, or with the highest term
    /// by a holder other than the one that first entered it (with a limit
    /// above 1: with a term another holder entered first).
    pub regressions: u64,
    /// Fenced writes accepted.
    pub accepted_writes: u64,
    /// Fenced writes turned away because a higher term had already written.
    pub rejected_writes: u64,
    /// The first 20 overlaps and regressions, in the order they happened, in
    /// plain words.
    pub violations: Vec<String>,
    /// Overlaps plus regressions, including those not kept in `violations`.
    pub violations_total: u64,
}

impl HistoryReport {
    /// True when no section broke the limit and no term went back or was reused.
    pub fn is_clean(&self) -> bool {
        self.violations_total == 0
    }
}

impl fmt::Display for HistoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "history: {} sections, {} terms, {} overlaps, {} regressions, {} rejected writes",
            self.sections,
            self.distinct_terms,
            self.overlaps,
            self.regressions,
            self.rejected_writes
        )
    }
}

/// The grants of one counted name claimed with different counts, judged "at most N" per
/// claim: a claim of N must be granted only while fewer than N others hold a permit.
///
/// Sections alone cannot judge this: a holder of 3 may go on working while claims of 5 bring
/// the name to 5 holders; what matters is the count when each claim was granted. The store's
/// own view is not at hand (nor to be trusted), so each grant is judged from what its claimers
/// can know:
///
/// - a grant with a smaller token began before one with a larger: the store issues tokens in
///   the order it grants, or (NATS) in the order it creates the permits it then grants;
/// - a holder was live, in the store, from its grant (or its permit's creation) until at least
///   its claim's send plus the TTL (renewals only move its expiry later), unless its release
///   was sent before (a holder's release goes out after [`ended`](CountedGrants::ended) is
///   recorded);
/// - a grant was decided no later than its claimer learned of it.
///
/// So another grant counts against a claim of N when its token is smaller and, at the instant
/// the claim's grant was learned of, it had not ended and was not past its send plus the TTL:
/// it was live in the store from before the claim began until after the claim was decided,
/// so the store had it in view when it decided. A grant with N or more such others is a
/// violation. A token granted twice is a violation too.
///
/// The judgment can miss; it never accuses a correct store. It misses a grant decided while
/// others were live that all ended before the claimer learned of it — a claim whose answer was
/// lost and that its claimer adopted by a read-back an attempt timeout later. Tokens cannot
/// place such a grant earlier: a read-back adoption keeps the token of a create that came
/// before it and decides at its own, later, instant. Grants the checker never learns of (a
/// claim given up on whose outcome stayed unknown) are not counted.
///
/// ```
/// use std::time::{Duration, Instant};
/// use lease_conformance::history::CountedGrants;
///
/// let grants = CountedGrants::new(Duration::from_secs(10));
/// let t = Instant::now();
/// for (term, who) in [(1, "a"), (2, "b"), (3, "c")] {
///     grants.granted(who, 5, term, t, t); // three holders of claims of 5
/// }
/// grants.granted("d", 3, 4, t, t); // a claim of 3 granted while 3 others were live
/// let report = grants.report();
/// assert_eq!(report.violations_total, 1);
/// assert!(report.violations[0].contains("d@4"));
/// ```
#[derive(Debug, Clone)]
pub struct CountedGrants {
    inner: Arc<Mutex<GrantsState>>,
}

#[derive(Debug)]
struct GrantsState {
    ttl: Duration,
    grants: Vec<GrantEntry>,
}

#[derive(Debug, Clone)]
struct GrantEntry {
    who: String,
    permits: u32,
    term: u64,
    sent: Instant,
    granted: Instant,
    ended: Option<Instant>,
}

/// A grant recorded in a [`CountedGrants`], to mark its end with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantId(usize);

impl CountedGrants {
    /// An empty record of a counted name whose permits are granted for `ttl` (the lease the
    /// claimers ask for).
    pub fn new(ttl: Duration) -> CountedGrants {
        CountedGrants {
            inner: Arc::new(Mutex::new(GrantsState {
                ttl,
                grants: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, GrantsState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `who`'s claim of one of `permits` permits was granted under token `term`:
    /// `sent` is an instant no later than the claim was sent (the TTL counts from it), `granted`
    /// when the claimer learned of the grant.
    pub fn granted(
        &self,
        who: &str,
        permits: u32,
        term: u64,
        sent: Instant,
        granted: Instant,
    ) -> GrantId {
        let mut state = self.lock();
        state.grants.push(GrantEntry {
            who: who.to_owned(),
            permits,
            term,
            sent,
            granted,
            ended: None,
        });
        GrantId(state.grants.len() - 1)
    }

    /// Records that the holder of `id` ended at `at`: it sends no renewal after, and its
    /// release (if any) goes out after. The first end recorded counts.
    pub fn ended(&self, id: GrantId, at: Instant) {
        let mut state = self.lock();
        if let Some(g) = state.grants.get_mut(id.0) {
            g.ended = Some(g.ended.map_or(at, |e| e.min(at)));
        }
    }

    /// How many grants of claims of `permits` were recorded so far (cheap, unlike
    /// [`CountedGrants::report`], which judges every grant).
    pub fn count_of(&self, permits: u32) -> u64 {
        let state = self.lock();
        state.grants.iter().filter(|g| g.permits == permits).count() as u64
    }

    /// Judges every grant recorded so far (a holder not yet ended counts as live up to now).
    pub fn report(&self) -> CountedGrantsReport {
        let state = self.lock();
        let now = Instant::now();
        let ttl = state.ttl;
        let grants = &state.grants;
        // Live until: the end recorded (or now), and no later than its send plus the TTL.
        let live_until = |g: &GrantEntry| {
            let end = g.ended.unwrap_or(now);
            g.sent
                .checked_add(ttl)
                .map_or(end, |expiry| end.min(expiry))
        };
        // Sorted by send, so that each grant looks only at those sent within a TTL before its
        // own grant.
        let mut by_sent: Vec<usize> = (0..grants.len()).collect();
        by_sent.sort_by_key(|&i| grants[i].sent);
        let mut report = CountedGrantsReport {
            grants: grants.len() as u64,
            ..CountedGrantsReport::default()
        };
        let mut counts: HashMap<u32, u64> = HashMap::new();
        let mut owners: HashMap<u64, usize> = HashMap::new();
        let mut violations = Vec::new();
        for (i, g) in grants.iter().enumerate() {
            *counts.entry(g.permits).or_default() += 1;
            if let Some(&first) = owners.get(&g.term) {
                let f = &grants[first];
                violations.push((
                    g.granted,
                    format!(
                        "token {} granted twice: to {} (a claim of {}) and to {} (a claim of {})",
                        g.term, f.who, f.permits, g.who, g.permits
                    ),
                ));
                report.reused_tokens += 1;
            } else {
                owners.insert(g.term, i);
            }
            // Those sent within a TTL before g's grant was learned of.
            let made = g.granted;
            let from = made.checked_sub(ttl);
            let start = by_sent.partition_point(|&j| from.is_some_and(|f| grants[j].sent <= f));
            let mut live: Vec<&GrantEntry> = by_sent[start..]
                .iter()
                .map(|&j| &grants[j])
                .take_while(|o| o.sent <= made)
                .filter(|o| o.term < g.term && live_until(o) > made)
                .collect();
            report.peak_others = report.peak_others.max(live.len() as u64);
            if live.len() >= usize::try_from(g.permits).unwrap_or(usize::MAX) {
                live.sort_by_key(|o| o.term);
                let listed: Vec<String> = live
                    .iter()
                    .map(|o| format!("{}@{} (a claim of {})", o.who, o.term, o.permits))
                    .collect();
                violations.push((
                    g.granted,
                    format!(
                        "{}@{}: a claim of {} granted while {} others were live: {}",
                        g.who,
                        g.term,
                        g.permits,
                        live.len(),
                        listed.join(", ")
                    ),
                ));
                report.over_limit += 1;
            }
        }
        violations.sort_by_key(|(at, _)| *at);
        report.violations_total = violations.len() as u64;
        report.violations = violations
            .into_iter()
            .take(MAX_VIOLATIONS)
            .map(|(_, v)| v)
            .collect();
        let mut by_count: Vec<(u32, u64)> = counts.into_iter().collect();
        by_count.sort_unstable();
        report.by_count = by_count;
        report
    }
}

/// What a [`CountedGrants`] judged, as returned by [`CountedGrants::report`].
///
/// Displays as one line: `grants: 120 of 3, 140 of 5, at most 4 others live at a grant, 0 over
/// their claim's limit, 0 tokens granted twice`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CountedGrantsReport {
    /// Grants recorded.
    pub grants: u64,
    /// Grants by the count their claim asked for, by count.
    pub by_count: Vec<(u32, u64)>,
    /// The most other holders known live at one grant.
    pub peak_others: u64,
    /// Grants of a claim of N made while N or more others were known live.
    pub over_limit: u64,
    /// Grants whose token an earlier grant had.
    pub reused_tokens: u64,
    /// The first 20 violations, in the order the grants were learned of, in plain words.
    pub violations: Vec<String>,
    /// Every violation, including those not kept in `violations`.
    pub violations_total: u64,
}

impl CountedGrantsReport {
    /// True when no grant broke its claim's limit and no token was granted twice.
    pub fn is_clean(&self) -> bool {
        self.violations_total == 0
    }

    /// Grants of claims of `permits`.
    pub fn of(&self, permits: u32) -> u64 {
        self.by_count
            .iter()
            .find(|(n, _)| *n == permits)
            .map_or(0, |(_, c)| *c)
    }
}

impl fmt::Display for CountedGrantsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts: Vec<String> = self
            .by_count
            .iter()
            .map(|(n, c)| format!("{c} of {n}"))
            .collect();
        let counts = if counts.is_empty() {
            "none".to_owned()
        } else {
            counts.join(", ")
        };
        write!(
            f,
            "grants: {counts}, at most {} others live at a grant, {} over their claim's limit, \
             {} tokens granted twice",
            self.peak_others, self.over_limit, self.reused_tokens
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_sequential_history_passes() {
        let history = History::new();
        for (who, term) in [("a", 1), ("b", 2), ("a", 5), ("c", 6)] {
            let section = history.enter(who, term);
            assert!(section.fenced_write());
            section.exit();
        }
        history.assert_clean();
        let report = history.report();
        assert_eq!(report.sections, 4);
        assert_eq!(report.distinct_terms, 4);
        assert_eq!(report.accepted_writes, 4);
        assert_eq!(
            report.to_string(),
            "history: 4 sections, 4 terms, 0 overlaps, 0 regressions, 0 rejected writes"
        );
    }

    #[test]
    fn overlap_is_caught() {
        let history = History::new();
        let first = history.enter("a", 1);
        let second = history.enter("b", 2);
        drop(second);
        drop(first);
        // The same holder overlapping itself is an overlap too.
        let third = history.enter("b", 2);
        let fourth = history.enter("b", 2);
        drop((third, fourth));
        let report = history.report();
        assert_eq!(report.overlaps, 2);
        assert_eq!(report.regressions, 0);
        assert!(!report.is_clean());
        assert!(
            report.violations[0].contains("#1 b@2 entered while #0 a@1 open"),
            "{:?}",
            report.violations
        );
    }

    #[test]
    fn regression_is_caught() {
        let history = History::new();
        history.enter("a", 5).exit();
        history.enter("b", 4).exit(); // went back
        history.enter("c", 7).exit();
        history.enter("d", 7).exit(); // term 7 reused by another holder
        history.enter("c", 6).exit(); // the old holder comes back with an older term
        let report = history.report();
        assert_eq!(report.regressions, 3, "{:?}", report.violations);
        assert_eq!(report.overlaps, 0);
        assert!(report.violations[0].contains("b@4 entered after term 5"));
        assert!(report.violations[1].contains("reuses term 7, first entered by c"));
    }

    #[test]
    fn same_term_reentry_by_same_holder_is_fine() {
        let history = History::new();
        for _ in 0..3 {
            history.enter("a", 3).exit();
        }
        history.enter("b", 4).exit();
        history.enter("b", 4).exit();
        history.assert_clean();
        assert_eq!(history.report().distinct_terms, 2);
    }

    #[test]
    fn fenced_write_rejects_stale_terms() {
        let history = History::new();
        assert!(history.fenced_write(2));
        assert!(history.fenced_write(2));
        assert!(history.fenced_write(3));
        assert!(!history.fenced_write(2));
        let report = history.report();
        assert_eq!((report.accepted_writes, report.rejected_writes), (3, 1));
        // Rejections alone are the fence working, not a violation.
        history.assert_clean();
    }

    #[test]
    fn violations_list_is_capped() {
        let history = History::new();
        history.enter("a", 100).exit();
        for term in 0..30 {
            history.enter("b", term).exit();
        }
        let report = history.report();
        assert_eq!(report.regressions, 30);
        assert_eq!(report.violations.len(), 20);
        assert_eq!(report.violations_total, 30);
    }

    #[test]
    #[should_panic(expected = "overlap: #1 b@2 entered while #0 a@1 open")]
    fn assert_clean_panics_with_violations() {
        let history = History::new();
        let _first = history.enter("a", 1);
        let _second = history.enter("b", 2);
        history.assert_clean();
    }

    #[test]
    fn a_limit_allows_that_many_open_sections_and_no_more() {
        let history = History::with_limit(3);
        let a = history.enter("a", 4);
        let b = history.enter("b", 2); // an earlier grant entering later is fine
        let c = history.enter("c", 7);
        history.assert_clean();
        let d = history.enter("d", 8); // the fourth at once
        drop((a, b, c, d));
        history.enter("e", 9).exit();
        history.enter("f", 7).exit(); // c's term by another holder
        history.enter("c", 7).exit(); // c again in its own term
        let report = history.report();
        assert_eq!((report.limit, report.peak_open), (3, 4));
        assert_eq!((report.overlaps, report.regressions), (1, 1), "{report:?}");
        assert!(
            report.violations[0].contains("#3 d@8 entered while 3 sections were open"),
            "{:?}",
            report.violations
        );
        assert!(report.violations[1].contains("f@7 reuses term 7, first entered by c"));
        assert_eq!(History::new().report().limit, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_tasks_under_a_mutex_stay_clean() {
        // A correct "lease" (a mutex with a counter as the term) gives a clean history.
        let history = History::new();
        let lock = Arc::new(tokio::sync::Mutex::new(0u64));
        let mut tasks = Vec::new();
        for n in 0..8 {
            let history = history.clone();
            let lock = Arc::clone(&lock);
            tasks.push(tokio::spawn(async move {
                let who = format!("task-{n}");
                for _ in 0..20 {
                    let mut term = lock.lock().await;
                    *term += 1;
                    for _ in 0..3 {
                        let section = history.enter(&who, *term);
                        assert!(section.fenced_write());
                        tokio::task::yield_now().await;
                        drop(section);
                    }
                }
            }));
        }
        for task in tasks {
            assert!(task.await.is_ok());
        }
        history.assert_clean();
        let report = history.report();
        assert_eq!(report.sections, 8 * 20 * 3);
        assert_eq!(report.distinct_terms, 8 * 20);
    }

    #[test]
    fn a_grant_is_judged_at_the_instant_its_claimer_learned_of_it() {
        let ms = Duration::from_millis;
        let t = Instant::now();
        // a, b and c hold claims of 5 from 5 ms to 50 ms; d's claim of 3 (token 4) is learned
        // of at `learned`; e's claim of 5 (token 5) was learned of at 10 ms.
        let judge = |learned: Duration| {
            let grants = CountedGrants::new(ms(1500));
            for (who, term) in [("a", 1), ("b", 2), ("c", 3)] {
                let id = grants.granted(who, 5, term, t, t + ms(5));
                grants.ended(id, t + ms(50));
            }
            let d = grants.granted("d", 3, 4, t + ms(1), t + learned);
            grants.ended(d, t + learned + ms(100));
            let e = grants.granted("e", 5, 5, t + ms(2), t + ms(10));
            grants.ended(e, t + ms(20));
            grants.report()
        };
        // Learned of while a, b and c were live: the store granted it with 3 others in view
        // (e, a claim of 5, then had 4 others live: within its limit).
        let prompt = judge(ms(8));
        assert_eq!(prompt.over_limit, 1, "{:?}", prompt.violations);
        assert_eq!(
            prompt.violations,
            [
                "d@4: a claim of 3 granted while 3 others were live: a@1 (a claim of 5), b@2 (a \
              claim of 5), c@3 (a claim of 5)"
            ]
        );
        assert_eq!(
            prompt.to_string(),
            "grants: 1 of 3, 4 of 5, at most 4 others live at a grant, 1 over their claim's \
             limit, 0 tokens granted twice"
        );
        // Learned of 600 ms later, when a, b and c had ended: a claim whose answer was lost and
        // that a read-back adopted. A correct store (NATS) decides that adoption at the
        // read-back, after a, b and c ended, under the token of its earlier create — so token
        // 5, learned of at 10 ms, must not place d's grant before 10 ms. Not a violation.
        let late = judge(ms(600));
        assert!(late.is_clean(), "{:?}", late.violations);
    }

    #[test]
    fn counted_grants_of_one_token_and_within_the_limit() {
        let ms = Duration::from_millis;
        let t = Instant::now();
        let grants = CountedGrants::new(ms(1500));
        // Two others live at a claim of 3: within its limit.
        grants.granted("a", 5, 1, t, t + ms(1));
        grants.granted("b", 3, 2, t, t + ms(2));
        grants.granted("c", 3, 3, t, t + ms(3));
        // A token granted twice.
        grants.granted("d", 5, 3, t, t + ms(4));
        let report = grants.report();
        assert_eq!(
            (report.over_limit, report.reused_tokens),
            (0, 1),
            "{report:?}"
        );
        assert_eq!((report.of(3), report.of(5)), (2, 2));
        assert!(report.violations[0].contains("token 3 granted twice: to c"));
    }
}
