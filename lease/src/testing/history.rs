//! [`FencedHistory`]: a record of the writes holders make, and what a fence would say of them.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;

/// One write recorded by a [`FencedHistory`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// Who wrote: the label the test gave (an instance label, say).
    pub holder: String,
    /// The fencing token it wrote with: the term it believed it held
    /// ([`Term::token`](crate::Term::token)).
    pub token: u64,
    /// When it wrote (a long write: when it began), by tokio's clock.
    pub at: Instant,
    /// Whether a fence would have taken it: its token was at least the highest token taken
    /// before. A write that is not taken is out of token order.
    pub accepted: bool,
}

impl fmt::Display for Write {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.holder, self.token)
    }
}

/// A write that broke what a lease must give, found by a [`FencedHistory`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// `second` began while `first`, by another holder or under another token, was still in
    /// progress: two holders wrote at once.
    Overlap {
        /// The write in progress.
        first: Write,
        /// The write that began meanwhile.
        second: Write,
    },
    /// `stale` came after `newer` but carried a lower token, or the same token from another
    /// holder: the write of a holder that had lost its term (a fence turns it away; an unfenced
    /// resource takes it, over the newer holder's writes).
    OutOfOrder {
        /// The late write.
        stale: Write,
        /// The first write with the highest token before it.
        newer: Write,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap { first, second } => write!(
                f,
                "overlap: {second} began a write while {first} (since {:?} before) was still \
                 writing",
                second.at.saturating_duration_since(first.at)
            ),
            Violation::OutOfOrder { stale, newer } => write!(
                f,
                "out of token order: {stale} wrote {:?} after {newer} had written",
                stale.at.saturating_duration_since(newer.at)
            ),
        }
    }
}

/// What a [`FencedHistory`] found: how many writes, and every violation in the order it
/// happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Writes recorded.
    pub writes: usize,
    /// The violations, in the order they happened.
    pub violations: Vec<Violation>,
}

impl Report {
    /// `true` when no two holders wrote at once and every write came in token order.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// The number of [`Violation::Overlap`]s.
    pub fn overlaps(&self) -> usize {
        self.violations
            .iter()
            .filter(|v| matches!(v, Violation::Overlap { .. }))
            .count()
    }

    /// The number of [`Violation::OutOfOrder`] writes.
    pub fn out_of_order(&self) -> usize {
        self.violations
            .iter()
            .filter(|v| matches!(v, Violation::OutOfOrder { .. }))
            .count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} writes, {} overlaps, {} out of token order",
            self.writes,
            self.overlaps(),
            self.out_of_order()
        )?;
        for v in self.violations.iter().take(10) {
            write!(f, "\n  {v}")?;
        }
        if self.violations.len() > 10 {
            write!(f, "\n  ... and {} more", self.violations.len() - 10)?;
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct State {
    writes: Vec<Write>,
    /// The first write with the highest token so far.
    newest: Option<Write>,
    /// Long writes in progress, by id.
    open: Vec<(u64, Write)>,
    next_id: u64,
    violations: Vec<Violation>,
}

/// A record of the writes the holders of one name make to the resource the name guards, which
/// says whether two holders' writes overlapped or went out of token order.
///
/// The code under test calls [`write`](FencedHistory::write) where it writes (or
/// [`begin`](FencedHistory::begin) around a write that takes time) with its label and its
/// term's token; a test writes as another holder the same way, with the token
/// [`TestStore::hand_over`](crate::testing::TestStore::hand_over) gave it. Times are tokio's, so
/// they follow paused time. Clones share one record.
///
/// A write is out of token order when its token is lower than a token written before it, or
/// equal to it from another holder: what a fenced resource (`UPDATE … WHERE fence <= $token`)
/// turns away, and an unfenced one takes over a newer holder's data. Two writes overlap when
/// one begins while a long write of another holder or token is in progress.
///
/// ```
/// use lease::testing::FencedHistory;
///
/// let history = FencedHistory::new();
/// assert!(history.write("node-a", 1));
/// assert!(history.write("node-b", 2));
/// assert!(!history.write("node-a", 1)); // node-a wrote on after losing its term
/// let report = history.report();
/// assert_eq!(report.out_of_order(), 1);
/// assert!(report.to_string().contains("out of token order: node-a@1"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct FencedHistory {
    state: Arc<Mutex<State>>,
}

impl FencedHistory {
    /// An empty history.
    pub fn new() -> FencedHistory {
        FencedHistory::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a write by `holder` with fencing token `token`, now. Returns whether a fence
    /// would take it (`false`: out of token order). It overlaps any long write of another
    /// holder or token in progress.
    pub fn write(&self, holder: &str, token: u64) -> bool {
        self.record(holder, token).1.accepted
    }

    /// Records the beginning of a write that takes time, by `holder` with `token`; it is in
    /// progress until the returned guard is dropped or [`end`](Writing::end)ed. Any write of
    /// another holder or token that begins meanwhile overlaps it.
    pub fn begin(&self, holder: &str, token: u64) -> Writing {
        let (id, write) = self.record(holder, token);
        self.lock().open.push((id, write.clone()));
        Writing {
            history: self.clone(),
            id,
            write,
        }
    }

    fn record(&self, holder: &str, token: u64) -> (u64, Write) {
        let mut st = self.lock();
        let id = st.next_id;
        st.next_id += 1;
        let mut write = Write {
            holder: holder.to_owned(),
            token,
            at: Instant::now(),
            accepted: true,
        };
        let stale = match &st.newest {
            Some(newer)
                if token < newer.token || (token == newer.token && holder != newer.holder) =>
            {
                Some(newer.clone())
            }
            Some(newer) if token == newer.token => None,
            _ => {
                st.newest = Some(write.clone());
                None
            }
        };
        if let Some(newer) = stale {
            write.accepted = false;
            st.violations.push(Violation::OutOfOrder {
                stale: write.clone(),
                newer,
            });
        }
        let overlapped: Vec<Write> = st
            .open
            .iter()
            .filter(|(_, w)| w.holder != holder || w.token != token)
            .map(|(_, w)| w.clone())
            .collect();
        for first in overlapped {
            st.violations.push(Violation::Overlap {
                first,
                second: write.clone(),
            });
        }
        st.writes.push(write.clone());
        (id, write)
    }

    /// Every write so far, in order.
    pub fn writes(&self) -> Vec<Write> {
        self.lock().writes.clone()
    }

    /// The last write by `holder`, if any.
    pub fn last_write_by(&self, holder: &str) -> Option<Write> {
        self.lock()
            .writes
            .iter()
            .rev()
            .find(|w| w.holder == holder)
            .cloned()
    }

    /// What was found so far (long writes still in progress included).
    pub fn report(&self) -> Report {
        let st = self.lock();
        Report {
            writes: st.writes.len(),
            violations: st.violations.clone(),
        }
    }

    /// Panics with the [`report`](FencedHistory::report) when two holders' writes overlapped
    /// or a write went out of token order.
    #[track_caller]
    pub fn assert_clean(&self) {
        let report = self.report();
        assert!(
            report.is_clean(),
            "the fenced history is not clean: {report}"
        );
    }
}

/// A write in progress, recorded by [`FencedHistory::begin`]; it ends when dropped.
#[derive(Debug)]
#[must_use = "the write ends as soon as its guard is dropped"]
pub struct Writing {
    history: FencedHistory,
    id: u64,
    write: Write,
}

impl Writing {
    /// The write as recorded when it began (`accepted` says whether a fence took it).
    pub fn write(&self) -> &Write {
        &self.write
    }

    /// Ends the write now; the same as dropping the guard.
    pub fn end(self) {}
}

impl Drop for Writing {
    fn drop(&mut self) {
        let id = self.id;
        self.history.lock().open.retain(|(open, _)| *open != id);
    }
}
