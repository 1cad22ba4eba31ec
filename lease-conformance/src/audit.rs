//! An audit of group workers' assignments, with epochs as fencing tokens: for tests.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lease_core::{Assignment, group::StopAck};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// `true` when the workers whose `assignments` are given hold every partition `0..partitions`
/// exactly once between them, each a fair share (`⌊N/M⌋` or `⌈N/M⌉`); `false` for no workers.
///
/// ```
/// use std::collections::BTreeMap;
/// use lease_core::Assignment;
/// use lease_core::group::StopAck;
/// use lease_conformance::assignments_settled;
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
/// The audit also checks consumers' work: [`work_started`](AssignmentAudit::work_started) and
/// [`work_stopped`](AssignmentAudit::work_stopped) record when a consumer works a partition
/// under which epoch ([`consume`](AssignmentAudit::consume) runs a simulated consumer that
/// does). Starting work on a partition another consumer still works, or under an epoch not
/// above every earlier holding's, is a violation: a worker that handed a partition over
/// without giving its consumer the grace, or that held it twice under one epoch, trips it.
///
/// ```
/// use std::collections::BTreeMap;
/// use lease_core::Assignment;
/// use lease_core::group::StopAck;
/// use lease_conformance::AssignmentAudit;
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
    /// Per partition: the consumers working it now (node, epoch).
    working: HashMap<u32, Vec<(String, u64)>>,
    /// Per partition: the highest epoch any consumer started working it under.
    worked: HashMap<u32, u64>,
    work_intervals: u64,
}

impl State {
    fn violation(&mut self, v: String) {
        self.violation_count += 1;
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(v);
        }
    }
}

/// How a simulated consumer ([`AssignmentAudit::consume`]) stops working a partition that left
/// its worker's assignment.
#[derive(Debug, Clone)]
pub struct ConsumerPlan {
    /// How long the consumer goes on working after it sees the partition leave (keep it within
    /// the timings' `grace`).
    pub stop_after: Duration,
    /// Where it acknowledges its stops; `None` for a consumer that never does.
    pub acks: Option<StopAck>,
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
                Some(v) => st.violation(v),
                None => {
                    st.fences.insert(p, (epoch, node.to_owned()));
                }
            }
        }
    }

    /// Records that `node`'s consumer starts working `partition` under `epoch`: a violation
    /// when another consumer (or this one, under another epoch) still works it, or when the
    /// epoch is not higher than every epoch the partition was worked under before — two
    /// holdings sharing a fencing token.
    pub fn work_started(&self, node: &str, partition: u32, epoch: u64) {
        let mut st = self.lock();
        st.work_intervals += 1;
        let others: Vec<String> = st
            .working
            .get(&partition)
            .into_iter()
            .flatten()
            .map(|(n, e)| format!("{n} (epoch {e})"))
            .collect();
        if !others.is_empty() {
            st.violation(format!(
                "{node} starts working partition {partition} under epoch {epoch} while {} still \
                 works it",
                others.join(" and ")
            ));
        }
        if let Some(&seen) = st.worked.get(&partition)
            && epoch <= seen
        {
            st.violation(format!(
                "{node} starts working partition {partition} under epoch {epoch}, not above \
                 epoch {seen} it was worked under before"
            ));
        }
        let top = st.worked.entry(partition).or_insert(epoch);
        *top = (*top).max(epoch);
        st.working
            .entry(partition)
            .or_default()
            .push((node.to_owned(), epoch));
    }

    /// Records that `node`'s consumer stopped working `partition` under `epoch`.
    pub fn work_stopped(&self, node: &str, partition: u32, epoch: u64) {
        let mut st = self.lock();
        if let Some(open) = st.working.get_mut(&partition) {
            open.retain(|(n, e)| !(n == node && *e == epoch));
            if open.is_empty() {
                st.working.remove(&partition);
            }
        }
    }

    /// How many work intervals consumers started.
    pub fn work_intervals(&self) -> u64 {
        self.lock().work_intervals
    }

    /// Runs a simulated consumer of `node`'s assignment until the channel closes: it starts
    /// working a partition as soon as it sees it (recorded with
    /// [`work_started`](AssignmentAudit::work_started)), and when the partition leaves (or
    /// comes back under another epoch) goes on working it for `plan.stop_after`, then records
    /// the stop and acknowledges it. When the channel closes, it stops everything the same way.
    pub fn consume(
        &self,
        node: &str,
        mut rx: watch::Receiver<Assignment>,
        plan: ConsumerPlan,
    ) -> JoinHandle<()> {
        let audit = self.clone();
        let node = node.to_owned();
        tokio::spawn(async move {
            let mut working: BTreeMap<u32, u64> = BTreeMap::new();
            let mut stopping = Vec::new();
            let stop = |p: u32, e: u64| {
                let (audit, node, plan) = (audit.clone(), node.clone(), plan.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(plan.stop_after).await;
                    audit.work_stopped(&node, p, e);
                    if let Some(acks) = &plan.acks {
                        acks.stopped(p, e);
                    }
                })
            };
            loop {
                let now = rx.borrow_and_update().partitions.clone();
                let gone: Vec<(u32, u64)> = working
                    .iter()
                    .filter(|(p, e)| now.get(p) != Some(e))
                    .map(|(p, e)| (*p, *e))
                    .collect();
                for (p, e) in gone {
                    working.remove(&p);
                    stopping.push(stop(p, e));
                }
                for (p, e) in now {
                    if let std::collections::btree_map::Entry::Vacant(v) = working.entry(p) {
                        audit.work_started(&node, p, e);
                        v.insert(e);
                    }
                }
                if rx.changed().await.is_err() {
                    break;
                }
            }
            for (p, e) in std::mem::take(&mut working) {
                stopping.push(stop(p, e));
            }
            for s in stopping {
                let _ = s.await;
            }
        })
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

    /// Panics with every violation found (assignments and consumers' work), if any.
    pub fn assert_clean(&self) {
        let st = self.lock();
        assert!(
            st.violation_count == 0,
            "{} violations in {} observations and {} work intervals; the first ones:\n{}",
            st.violation_count,
            st.observations,
            st.work_intervals,
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
    fn work_overlaps_and_shared_epochs_are_violations() {
        let audit = AssignmentAudit::new();
        audit.work_started("a", 0, 1);
        audit.work_stopped("a", 0, 1);
        audit.work_started("b", 0, 2); // after a stopped, under a higher epoch: fine
        assert_eq!(audit.violation_count(), 0);
        audit.work_started("c", 0, 3); // b still works it
        assert_eq!(audit.violation_count(), 1);
        audit.work_stopped("b", 0, 2);
        audit.work_stopped("c", 0, 3);
        audit.work_started("a", 0, 3); // epoch 3 again, though nobody works it now
        assert_eq!(audit.violation_count(), 2);
        assert_eq!(audit.work_intervals(), 4);
        assert!(audit.violations()[0].contains("still works it"));
        assert!(audit.violations()[1].contains("not above epoch 3"));
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
