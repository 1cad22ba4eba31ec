//! An audit of group workers' assignments, with epochs as fencing tokens: for tests.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lease_core::Assignment;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// `true` when the workers whose `assignments` are given hold every partition `0..partitions`
/// exactly once between them, each a fair share (`⌊N/M⌋` or `⌈N/M⌉`); `false` for no workers.
///
/// ```
/// use std::collections::BTreeMap;
/// use lease_core::Assignment;
/// use lease_local::assignments_settled;
///
/// let holds = |ps: &[u32]| Assignment { partitions: ps.iter().map(|&p| (p, 1)).collect(), members: vec![] };
/// assert!(assignments_settled(&[holds(&[0, 1]), holds(&[2, 3, 4])], 5));
/// assert!(!assignments_settled(&[holds(&[0, 1, 2]), holds(&[2, 3, 4])], 5)); // 2 twice
/// ```
pub fn assignments_settled(assignments: &[Assignment], partitions: u32) -> bool {
    if assignments.is_empty() {
        return false;
    }
    let mut count = BTreeMap::<u32, usize>::new();
    for a in assignments {
        for p in a.partitions.keys() {
            *count.entry(*p).or_default() += 1;
        }
    }
    let n = partitions as usize;
    let (lo, hi) = (n / assignments.len(), n.div_ceil(assignments.len()));
    count.len() == n
        && count.values().all(|&c| c == 1)
        && assignments
            .iter()
            .all(|a| (lo..=hi).contains(&a.partitions.len()))
}

/// How many violations the audit keeps in full.
const MAX_VIOLATIONS: usize = 20;

/// Watches the assignments of many [`GroupWorker`](lease_core::GroupWorker)s and checks that no
/// partition is ever held by two nodes at once, with the epochs as fencing tokens.
///
/// Each partition has a fence: the highest epoch seen for it and the node that held it. Every
/// observation of a node's assignment is checked against the fences, under one lock, reading
/// the watch channel's current value while holding it:
///
/// - a node holding a partition under an epoch **lower** than one already seen is a stale
///   holder still working after the partition changed hands;
/// - two nodes holding a partition under the **same** epoch is two holders of one lease.
///
/// Because a worker takes a partition out of its assignment before it releases it, and the
/// successor can only acquire it after that, a correct worker never trips the audit however the
/// observations interleave.
///
/// ```
/// use std::collections::BTreeMap;
/// use lease_core::Assignment;
/// use lease_local::AssignmentAudit;
///
/// let audit = AssignmentAudit::new();
/// let holds = |p: u32, e: u64| Assignment { partitions: BTreeMap::from([(p, e)]), members: vec![] };
/// audit.check("a", &holds(0, 1));
/// audit.check("b", &holds(0, 2)); // handed over under a higher epoch: fine
/// assert!(audit.violations().is_empty());
/// audit.check("a", &holds(0, 1)); // a still holds it: a violation
/// assert_eq!(audit.violations().len(), 1);
/// ```
#[derive(Debug, Clone, Default)]
pub struct AssignmentAudit {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    fences: HashMap<u32, (u64, String)>,
    violations: Vec<String>,
    violation_count: usize,
    observations: u64,
}

impl AssignmentAudit {
    /// An empty audit.
    pub fn new() -> AssignmentAudit {
        AssignmentAudit::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks one observation of `node`'s assignment.
    pub fn check(&self, node: &str, assignment: &Assignment) {
        Self::check_locked(&mut self.lock(), node, assignment);
    }

    fn check_locked(st: &mut State, node: &str, assignment: &Assignment) {
        st.observations += 1;
        for (&p, &epoch) in &assignment.partitions {
            let violation = match st.fences.get(&p) {
                Some((seen, holder)) if epoch < *seen => Some(format!(
                    "{node} holds partition {p} under epoch {epoch} after {holder} held it under \
                     epoch {seen}"
                )),
                Some((seen, holder)) if epoch == *seen && holder != node => Some(format!(
                    "{node} and {holder} both hold partition {p} under epoch {epoch}"
                )),
                _ => None,
            };
            match violation {
                Some(v) => {
                    st.violation_count += 1;
                    if st.violations.len() < MAX_VIOLATIONS {
                        st.violations.push(v);
                    }
                }
                None => {
                    st.fences.insert(p, (epoch, node.to_owned()));
                }
            }
        }
    }

    /// Watches `node`'s assignment until the channel closes: checks it on every change and at
    /// least every `every`, reading the current value under the audit's lock.
    pub fn watch(
        &self,
        node: &str,
        mut rx: watch::Receiver<Assignment>,
        every: Duration,
    ) -> JoinHandle<()> {
        let audit = self.clone();
        let node = node.to_owned();
        tokio::spawn(async move {
            loop {
                {
                    let mut st = audit.lock();
                    let current = rx.borrow_and_update();
                    Self::check_locked(&mut st, &node, &current);
                }
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { break },
                    () = tokio::time::sleep(every) => {}
                }
            }
        })
    }

    /// The violations found so far (the first few in full).
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// How many violations were found (all of them, not only those kept in full).
    pub fn violation_count(&self) -> usize {
        self.lock().violation_count
    }

    /// How many observations were checked.
    pub fn observations(&self) -> u64 {
        self.lock().observations
    }

    /// The highest epoch seen for `partition`.
    pub fn epoch(&self, partition: u32) -> Option<u64> {
        self.lock().fences.get(&partition).map(|(e, _)| *e)
    }

    /// Panics with every violation found, if any.
    pub fn assert_clean(&self) {
        let st = self.lock();
        assert!(
            st.violation_count == 0,
            "{} assignment violations in {} observations; the first ones:\n{}",
            st.violation_count,
            st.observations,
            st.violations.join("\n")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds(partitions: &[u32]) -> Assignment {
        Assignment {
            partitions: partitions.iter().map(|&p| (p, 1)).collect(),
            members: Vec::new(),
        }
    }

    #[test]
    fn settled_means_each_partition_once_in_fair_shares() {
        assert!(assignments_settled(&[holds(&[0, 1]), holds(&[2, 3, 4])], 5));
        assert!(
            !assignments_settled(&[holds(&[0, 1]), holds(&[2, 3])], 5),
            "4 missing"
        );
        assert!(
            !assignments_settled(&[holds(&[0, 1, 2]), holds(&[2, 3, 4])], 5),
            "2 twice"
        );
        assert!(
            !assignments_settled(&[holds(&[0]), holds(&[1, 2, 3, 4])], 5),
            "unfair"
        );
        assert!(!assignments_settled(&[], 5));
    }
}
