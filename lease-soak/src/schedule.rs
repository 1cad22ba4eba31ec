//! The fault schedule: which contender's connection is stalled or cut, when and for how long,
//! and when the server restarts — all drawn from the seed, so a run can be repeated.
//!
//! The generator is a SplitMix64 of our own, not `rand`'s `StdRng`, whose stream may change
//! between releases: the same seed gives the same schedule on every build.

use std::fmt;
use std::time::Duration;

/// A small deterministic pseudo-random generator (SplitMix64).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for `seed`, mixed with `label` so that each backend and each contender gets
    /// its own stream from one seed.
    pub(crate) fn new(seed: u64, label: &str) -> Rng {
        // FNV-1a of the label.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in label.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        let mut rng = Rng(seed ^ h);
        rng.next_u64();
        rng
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `[lo, hi]` (both included; `lo` when `hi <= lo`).
    pub(crate) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        let span = hi - lo + 1;
        lo + self.next_u64() % span
    }

    /// `true` with a chance of `percent` in 100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// A duration in `[lo, hi]`, to the millisecond.
    pub(crate) fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        Duration::from_millis(self.between(millis(lo), millis(hi)))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What a fault does to one contender's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Everything flows.
    Pass,
    /// Nothing flows, nothing is dropped: the server stops answering.
    Stall,
    /// Every connection is closed, and new ones too.
    Cut,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Mode::Pass => "pass",
            Mode::Stall => "stall",
            Mode::Cut => "cut",
        })
    }
}

/// One fault: from `at` (since the start of the soak), for `lasts`, on one contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fault {
    pub(crate) at: Duration,
    /// The contender hit, unless `on_holder` finds a holder.
    pub(crate) contender: usize,
    /// Hit whoever holds the lease when the fault starts (if anyone does), instead of
    /// `contender`: most hand-overs under faults happen this way. Which contender that is
    /// depends on the run; the times, kinds and durations do not.
    pub(crate) on_holder: bool,
    pub(crate) mode: Mode,
    pub(crate) lasts: Duration,
}

/// The start or the end of a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) at: Duration,
    /// The index of the fault in [`Schedule::faults`].
    pub(crate) fault: usize,
    /// `true` at the start, `false` at the end.
    pub(crate) start: bool,
}

/// Every fault of one backend's soak, and the restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Schedule {
    pub(crate) faults: Vec<Fault>,
    /// When the server restarts, for backends that have one.
    pub(crate) restart_at: Option<Duration>,
}

impl Schedule {
    /// The schedule for one backend.
    ///
    /// Faults start after a quiet second and end two leases before `duration`, so the soak
    /// starts and ends calm. One starts every 1/5 to 1 lease; it hits a contender that has no
    /// fault going on, or (half of them) whoever holds the lease then. Stalls and cuts
    /// alternate: stalls of 1/15 to 5/3 leases (long ones outlast the local deadline, so a
    /// holder loses its term), cuts of 1/30 to 1 lease. The restart comes between 40 % and 60 %
    /// of the run.
    pub(crate) fn generate(
        seed: u64,
        backend: &str,
        duration: Duration,
        contenders: usize,
        lease: Duration,
        restart: bool,
    ) -> Schedule {
        let mut rng = Rng::new(seed, &format!("schedule/{backend}"));
        let mut faults = Vec::new();
        let mut busy_until = vec![Duration::ZERO; contenders.max(1)];
        let end = duration.saturating_sub(lease * 2);
        let mut at = Duration::from_secs(1);
        let mut stall_next = rng.chance(50);
        // Bounded: every turn moves `at` forward by at least lease / 5 ≥ 60 ms.
        while at < end {
            let first = usize::try_from(rng.between(0, contenders.max(1) as u64 - 1)).unwrap_or(0);
            let free = (0..busy_until.len())
                .map(|k| (first + k) % busy_until.len())
                .find(|&c| busy_until[c] <= at);
            let on_holder = rng.chance(50);
            // Stalls and cuts alternate, so that even a short run sees both.
            stall_next = !stall_next;
            let (mode, lasts) = if stall_next {
                (Mode::Stall, rng.duration(lease / 15, lease * 5 / 3))
            } else {
                (Mode::Cut, rng.duration(lease / 30, lease))
            };
            if let Some(contender) = free {
                let lasts = lasts.min(end.saturating_sub(at));
                if !lasts.is_zero() {
                    faults.push(Fault {
                        at,
                        contender,
                        on_holder,
                        mode,
                        lasts,
                    });
                    busy_until[contender] = at + lasts;
                }
            }
            at += rng.duration(lease / 5, lease);
        }
        let restart_at = restart.then(|| {
            let lo = duration * 2 / 5;
            let hi = duration * 3 / 5;
            rng.duration(lo, hi)
        });
        Schedule { faults, restart_at }
    }

    /// How many stalls.
    pub(crate) fn stalls(&self) -> usize {
        self.faults.iter().filter(|f| f.mode == Mode::Stall).count()
    }

    /// How many cuts.
    pub(crate) fn cuts(&self) -> usize {
        self.faults.iter().filter(|f| f.mode == Mode::Cut).count()
    }

    /// The starts and ends of the faults, in time order (at equal times, ends first).
    pub(crate) fn steps(&self) -> Vec<Step> {
        let mut steps: Vec<Step> = self
            .faults
            .iter()
            .enumerate()
            .flat_map(|(fault, f)| {
                [
                    Step {
                        at: f.at,
                        fault,
                        start: true,
                    },
                    Step {
                        at: f.at + f.lasts,
                        fault,
                        start: false,
                    },
                ]
            })
            .collect();
        steps.sort_by_key(|s| (s.at, s.start));
        steps
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for fault in &self.faults {
            let target = if fault.on_holder {
                format!("the holder, else contender-{}", fault.contender)
            } else {
                format!("contender-{}", fault.contender)
            };
            writeln!(
                f,
                "  {:>7.3}s  {:<5}  for {:.3}s  {target}",
                fault.at.as_secs_f64(),
                fault.mode,
                fault.lasts.as_secs_f64()
            )?;
        }
        if let Some(at) = self.restart_at {
            writeln!(f, "  {:>7.3}s  restart  the server", at.as_secs_f64())?;
        }
        Ok(())
    }
}

/// One fault on one group worker's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupFault {
    pub(crate) at: Duration,
    pub(crate) worker: usize,
    pub(crate) mode: Mode,
    pub(crate) lasts: Duration,
    /// A short blip (shorter than a tick) rather than a long stall or a cut.
    pub(crate) blip: bool,
}

/// What happens to the group workers at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupAction {
    /// Fault `fault` (an index in [`GroupSchedule::faults`]) starts.
    FaultStarts(usize),
    /// Fault `fault` ends.
    FaultEnds(usize),
    /// The worker leaves gracefully.
    Leave(usize),
    /// The worker starts again, same node id, new incarnation.
    Rejoin(usize),
    /// The worker's connection is cut for good and the worker dropped without a leave.
    Crash(usize),
    /// No fault and no event comes after this: the assignment must settle.
    Calm,
}

/// The group phase's schedule of one backend: faults on one worker at a time each, a graceful
/// leave and re-join, and a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupSchedule {
    pub(crate) faults: Vec<GroupFault>,
    /// The worker that leaves, when it leaves, and when it joins again.
    pub(crate) leave: (usize, Duration, Duration),
    /// The worker that crashes, and when.
    pub(crate) crash: (usize, Duration),
}

impl GroupSchedule {
    /// The group schedule for one backend.
    ///
    /// One worker leaves gracefully between 15 % and 22 % of the run and joins again between
    /// 28 % and 36 % (before the server restart, which comes at 40 % to 60 %); another crashes
    /// between 65 % and 75 %. Faults, as for the contenders, start after a quiet second, one
    /// every 1/5 to 1 lease, and end two leases before `duration`; they come in turn as stalls
    /// longer than the local deadline (11/15 to 5/3 leases: the worker loses its partitions and,
    /// past a lease, its membership), cuts (1/30 to 1 lease) and blips (a stall or a cut of
    /// 10 ms to 1/15 lease, shorter than a tick). A fault hits a worker that has no fault going
    /// on and is a member for all of it: never the leaving worker within a lease of its leave,
    /// never the crashing worker across its crash.
    pub(crate) fn generate(
        seed: u64,
        backend: &str,
        duration: Duration,
        workers: usize,
        lease: Duration,
    ) -> GroupSchedule {
        let mut rng = Rng::new(seed, &format!("groups/{backend}"));
        let workers = workers.max(2);
        let last = workers as u64 - 1;
        let leaver = usize::try_from(rng.between(0, last)).unwrap_or(0);
        let crasher = (leaver + usize::try_from(rng.between(1, last)).unwrap_or(1)) % workers;
        let leave_at = rng.duration(duration * 15 / 100, duration * 22 / 100);
        let rejoin_at = rng.duration(duration * 28 / 100, duration * 36 / 100);
        let crash_at = rng.duration(duration * 65 / 100, duration * 75 / 100);
        // Whether `worker` is a member, and free of the leave's margin, over `[from, to]`.
        let member = |worker: usize, from: Duration, to: Duration| {
            if worker == leaver {
                to + lease <= leave_at || from >= rejoin_at
            } else if worker == crasher {
                to <= crash_at
            } else {
                true
            }
        };
        let deadline = lease * 2 / 3;
        let mut faults = Vec::new();
        let mut busy_until = vec![Duration::ZERO; workers];
        let end = duration.saturating_sub(lease * 2);
        let mut at = Duration::from_secs(1);
        let mut turn = rng.between(0, 2);
        // Bounded: every turn moves `at` forward by at least lease / 5 ≥ 60 ms.
        while at < end {
            let first = usize::try_from(rng.between(0, last)).unwrap_or(0);
            turn = (turn + 1) % 3;
            let (mode, lasts, blip) = match turn {
                0 => (
                    Mode::Stall,
                    rng.duration(deadline + lease / 15, lease * 5 / 3),
                    false,
                ),
                1 => (Mode::Cut, rng.duration(lease / 30, lease), false),
                _ => {
                    let mode = if rng.chance(50) {
                        Mode::Stall
                    } else {
                        Mode::Cut
                    };
                    let lasts = rng.duration(Duration::from_millis(10), lease / 15);
                    (mode, lasts, true)
                }
            };
            let lasts = lasts.min(end.saturating_sub(at));
            // A stall cut short by the end of the faults would no longer outlast the deadline.
            let too_short = mode == Mode::Stall && !blip && lasts <= deadline;
            let free = (0..workers)
                .map(|k| (first + k) % workers)
                .find(|&w| busy_until[w] <= at && member(w, at, at + lasts));
            if let Some(worker) = free
                && !lasts.is_zero()
                && !too_short
            {
                faults.push(GroupFault {
                    at,
                    worker,
                    mode,
                    lasts,
                    blip,
                });
                busy_until[worker] = at + lasts;
            }
            at += rng.duration(lease / 5, lease);
        }
        GroupSchedule {
            faults,
            leave: (leaver, leave_at, rejoin_at),
            crash: (crasher, crash_at),
        }
    }

    /// Long stalls.
    pub(crate) fn stalls(&self) -> usize {
        self.faults
            .iter()
            .filter(|f| !f.blip && f.mode == Mode::Stall)
            .count()
    }

    /// Cuts.
    pub(crate) fn cuts(&self) -> usize {
        self.faults
            .iter()
            .filter(|f| !f.blip && f.mode == Mode::Cut)
            .count()
    }

    /// Blips.
    pub(crate) fn blips(&self) -> usize {
        self.faults.iter().filter(|f| f.blip).count()
    }

    /// Every action in time order (at equal times, a fault's end before anything else), the
    /// last one [`GroupAction::Calm`] after every fault and event.
    pub(crate) fn actions(&self) -> Vec<(Duration, GroupAction)> {
        let (leaver, leave_at, rejoin_at) = self.leave;
        let (crasher, crash_at) = self.crash;
        let mut actions: Vec<(Duration, GroupAction)> = self
            .faults
            .iter()
            .enumerate()
            .flat_map(|(i, f)| {
                [
                    (f.at, GroupAction::FaultStarts(i)),
                    (f.at + f.lasts, GroupAction::FaultEnds(i)),
                ]
            })
            .collect();
        actions.push((leave_at, GroupAction::Leave(leaver)));
        actions.push((rejoin_at, GroupAction::Rejoin(leaver)));
        actions.push((crash_at, GroupAction::Crash(crasher)));
        let order = |a: &GroupAction| match a {
            GroupAction::FaultEnds(_) => 0,
            _ => 1,
        };
        actions.sort_by_key(|(at, a)| (*at, order(a)));
        let calm = actions.last().map_or(Duration::ZERO, |(at, _)| *at);
        actions.push((calm, GroupAction::Calm));
        actions
    }
}

impl fmt::Display for GroupSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (at, action) in self.actions() {
            let what = match action {
                GroupAction::FaultStarts(i) => match self.faults.get(i) {
                    Some(fault) => format!(
                        "{:<5}  for {:.3}s  worker-{}{}",
                        fault.mode,
                        fault.lasts.as_secs_f64(),
                        fault.worker,
                        if fault.blip { " (blip)" } else { "" }
                    ),
                    None => continue,
                },
                GroupAction::FaultEnds(_) => continue,
                GroupAction::Leave(w) => format!("leave  worker-{w}"),
                GroupAction::Rejoin(w) => format!("rejoin worker-{w}"),
                GroupAction::Crash(w) => format!("crash  worker-{w} (cut for good, dropped)"),
                GroupAction::Calm => "calm   (the assignment must settle)".to_owned(),
            };
            writeln!(f, "  {:>7.3}s  {what}", at.as_secs_f64())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_millis(1500);

    fn schedule(seed: u64) -> Schedule {
        Schedule::generate(seed, "postgres", Duration::from_secs(30), 5, LEASE, true)
    }

    #[test]
    fn same_seed_same_schedule_other_seed_other_schedule() {
        assert_eq!(schedule(42), schedule(42));
        assert_ne!(schedule(42), schedule(43));
        let other_backend =
            Schedule::generate(42, "redis", Duration::from_secs(30), 5, LEASE, true);
        assert_ne!(schedule(42), other_backend);
    }

    #[test]
    fn faults_stay_inside_the_run_and_never_overlap_per_contender() {
        for seed in 0..50 {
            let s = schedule(seed);
            assert!(s.faults.len() >= 10, "seed {seed}: {}", s.faults.len());
            assert!(s.stalls() > 0 && s.cuts() > 0, "seed {seed}");
            let end = Duration::from_secs(30) - LEASE * 2;
            let mut last_end = [Duration::ZERO; 5];
            for f in &s.faults {
                assert!(f.at >= Duration::from_secs(1));
                assert!(f.at + f.lasts <= end, "seed {seed}: {f:?}");
                assert!(f.at >= last_end[f.contender], "seed {seed}: {f:?}");
                last_end[f.contender] = f.at + f.lasts;
            }
            let r = s.restart_at.unwrap();
            assert!(r >= Duration::from_secs(12) && r <= Duration::from_secs(18));
        }
    }

    #[test]
    fn steps_pair_every_fault_with_its_end() {
        let s = schedule(3);
        let steps = s.steps();
        assert_eq!(steps.len(), s.faults.len() * 2);
        assert!(steps.windows(2).all(|w| w[0].at <= w[1].at));
        for (i, f) in s.faults.iter().enumerate() {
            let start = steps.iter().position(|x| x.fault == i && x.start).unwrap();
            let end = steps.iter().position(|x| x.fault == i && !x.start).unwrap();
            assert!(start < end);
            assert_eq!(steps[end].at, f.at + f.lasts);
        }
        assert!(s.faults.iter().any(|f| f.on_holder));
        assert!(s.faults.iter().any(|f| !f.on_holder));
    }

    fn group_schedule(seed: u64) -> GroupSchedule {
        GroupSchedule::generate(seed, "postgres", Duration::from_secs(20), 4, LEASE)
    }

    #[test]
    fn group_schedules_are_seeded_and_keep_faults_off_leaving_and_crashed_workers() {
        assert_eq!(group_schedule(42), group_schedule(42));
        assert_ne!(group_schedule(42), group_schedule(43));
        for seed in 0..50 {
            let s = group_schedule(seed);
            assert!(
                s.stalls() > 0 && s.cuts() > 0 && s.blips() > 0,
                "seed {seed}"
            );
            let (leaver, leave_at, rejoin_at) = s.leave;
            let (crasher, crash_at) = s.crash;
            assert_ne!(leaver, crasher);
            let timings = lease::Timings::from_lease(LEASE).unwrap();
            let settle = lease::GroupWorker::settle_time(&timings);
            assert!(leave_at + settle <= rejoin_at, "seed {seed}");
            assert!(
                rejoin_at < Duration::from_secs(8),
                "before the restart: seed {seed}"
            );
            let mut last_end = [Duration::ZERO; 4];
            for f in &s.faults {
                let end = f.at + f.lasts;
                assert!(f.at >= Duration::from_secs(1) && end <= Duration::from_secs(17));
                assert!(f.at >= last_end[f.worker], "seed {seed}: {f:?}");
                last_end[f.worker] = end;
                if f.worker == leaver {
                    assert!(
                        end + LEASE <= leave_at || f.at >= rejoin_at,
                        "seed {seed}: {f:?}"
                    );
                }
                if f.worker == crasher {
                    assert!(end <= crash_at, "seed {seed}: {f:?}");
                }
                if f.blip {
                    assert!(f.lasts <= LEASE / 15);
                } else if f.mode == Mode::Stall {
                    assert!(
                        f.lasts > LEASE * 2 / 3,
                        "stalls outlast the deadline: {f:?}"
                    );
                }
            }
            let actions = s.actions();
            assert_eq!(actions.len(), s.faults.len() * 2 + 4);
            assert!(actions.windows(2).all(|w| w[0].0 <= w[1].0));
            assert_eq!(actions.last().map(|a| a.1), Some(GroupAction::Calm));
        }
    }

    #[test]
    fn rng_ranges() {
        let mut rng = Rng::new(1, "x");
        for _ in 0..1000 {
            let v = rng.between(3, 7);
            assert!((3..=7).contains(&v));
        }
        assert_eq!(rng.between(5, 5), 5);
        assert_eq!(rng.between(6, 5), 6);
    }
}
