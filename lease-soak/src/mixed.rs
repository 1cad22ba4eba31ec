//! The mixed-count name: claimers of different N (3 and 5) race for permits of one counted
//! name, each on a connection of its own in chaos
//! ([`FaultMode::Chaos`](lease_conformance::FaultMode::Chaos): per request, pass, delay, hold
//! the answer, or lose it after the server carried the request out), and every
//! grant is judged "at most N" for its own claim ([`CountedGrants`]).
//!
//! The claims go through `Coordinator::try_acquire` with a [`Permits`] of the claimer's count,
//! so a claim whose answer was lost or came too late is read back and adopted as a user's
//! would be. Under each grant the claimer runs one to three short sections (recorded in a
//! history with a limit of the larger count: never more than 5 at once, no token entered by
//! two holders), then resigns; a claim answered held waits a few milliseconds and asks again,
//! so claims of both counts keep crossing.
//!
//! Chaos is drawn per connection from a seed derived from `--seed`, the backend and the
//! claimer (`--show-schedule` prints them): the same `--seed` replays the same sequence of
//! faults on each connection (which request meets which depends on timing). On a server each
//! claimer's connection goes through a [`FaultProxy`](lease_conformance::FaultProxy) (chaos per
//! chunk the client sends: a lost answer closes the connection after the server's next bytes,
//! so a claim's create, a re-count or a purge can each be lost or held mid-operation); on the
//! embedded backends through the [`Faults`](lease_conformance::Faults) hook (chaos per store
//! operation).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease::{Coordinator, ErrorKind, LeaseStore, Permits, Timings};
use lease_conformance::History;
use lease_conformance::chaos::WHOLE;
use lease_conformance::history::{CountedGrants, CountedGrantsReport, HistoryReport};
use lease_conformance::{ChaosConfig, ChaosCounts};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::contenders::{SECTION_GUARD, SECTION_MAX};
use crate::schedule::Rng;
use crate::stores::Switch;

/// The counts the claimers ask with, in turn: claimer `i` asks with `COUNTS[i % 2]`.
pub(crate) const COUNTS: [u32; 2] = [3, 5];
/// How many claimers race (half of each count).
pub(crate) const CLAIMERS: usize = 6;
/// The fewest grants of each count a run must see for the name to count as exercised.
const MIN_GRANTS: u64 = 10;
/// How much longer than their end the claimers race while a count has fewer than
/// [`MIN_GRANTS`] grants. A claim of 3 is granted only while at most 2 others are live, so the
/// claims of 5 crowd it out; on a loaded machine whose cluster answered a kill late (seed 2
/// with both cores busy: 9 grants of 3 in 60 s, against 24 on seed 1) the run ends before the
/// name was exercised. Racing on, chaos and all, until both floors are met keeps the floor a
/// statement about the store (one that never grants a claim of 3 still fails, this much later)
/// rather than about the machine's load.
pub(crate) const EXERCISE_EXTRA: Duration = Duration::from_secs(30);

/// The claimers' attempt timeout (and their stores' operation timeout): shorter than the
/// contenders' (a third of the lease, 500 ms), so that an answer the chaos lost or held costs
/// a claimer 150 ms rather than half a second before the coordinator reads the claim back —
/// more claims, more races, in the same run. A claim that times out is no violation; only
/// grants are judged.
pub(crate) const ATTEMPT: Duration = Duration::from_millis(150);

/// What a NATS key create carries, and nothing else the store sends does (a renewal expects
/// the key's revision, not 0).
const NATS_CREATE: &[u8] = b"Nats-Expected-Last-Subject-Sequence: 0\r\n";

/// How much longer than the run the claimers race on `backend`: 20 s on NATS, none elsewhere.
///
/// On a NATS store whose read-back adopts an unknown claim without counting again (lease-nats
/// before df9935b), a claim of 3 breaks its limit only where a lost create's answer meets a
/// claim of 5 slipping a permit in between its count and its create: 0 to 5 times in 20 s
/// (seed 1, 0 in one whole run of six backends). So NATS's claimers race twice as long, for
/// 20 s of the soak's wall time, to give such a store the chance to show itself.
pub(crate) fn extra(backend: &str) -> Duration {
    if backend == "nats" {
        Duration::from_secs(20)
    } else {
        Duration::ZERO
    }
}

/// The claimers' timings: the lease's, with [`ATTEMPT`].
pub(crate) fn timings(lease: Timings) -> Timings {
    lease
        .to_builder()
        .attempt_timeout(ATTEMPT)
        .build()
        .unwrap_or(lease)
}

/// The chaos of claimer `claimer`'s connection (its seed drawn from `--seed`, the backend and
/// the claimer): 15 % of requests delayed 1–20 ms, 5 % with their answers held 20–400 ms (past
/// the attempt timeout, [`ATTEMPT`], now and then: the outcome is unknown and read back, and a
/// purge or a release lands late), 2 % with their answers lost.
///
/// On NATS the chaos is aimed instead: the claimers of 3 lose the answer of 60 % of their permit
/// creates (a focus on the bytes of a key create, [`NATS_CREATE`]; nothing else of theirs is
/// touched), the path where the coordinator reads back a claim whose create's acknowledgement was
/// lost, before the store re-counted; the claimers of 5 meet no chaos. Not every create: a store
/// that, rightly, refuses to adopt a claim it cannot re-count in time would then grant no claim of
/// 3 at all (lease-nats's read-back, which adopts a claim only within its N, gave 2 and 4 grants of
/// 3 in 20 s with every create's answer lost, 24 and 21 with 60 %). A lost answer costs a NATS
/// client a reconnection and a timeout, and a claim of 3 breaks its limit only when a claim of 5
/// slipped a permit in between its count and its create: with losses at random as on the other
/// backends, too few of those creates lost theirs within a 20 s run (none in 5 runs), and any more
/// chaos on either side (delays, held answers, held purges) slows the races down and finds fewer
/// (tried with seeds 1–4). So NATS's schedule has lost answers, but no held or delayed purges.
pub(crate) fn chaos(seed: u64, backend: &str, claimer: usize) -> ChaosConfig {
    let ms = Duration::from_millis;
    let seed = Rng::new(seed, &format!("{backend}/mixed-{claimer}")).next_u64();
    let count = COUNTS[claimer % COUNTS.len()];
    let nats = backend == "nats";
    let config = ChaosConfig::builder(seed);
    let config = if nats && count == COUNTS[0] {
        config
            .delay(0, ms(1), ms(20))
            .hold(0, ms(20), ms(400))
            .lose(WHOLE * 3 / 5)
            .focus(NATS_CREATE)
    } else if nats {
        // The claims of 5 race unhindered: a chaos of theirs slows the races down.
        config
            .delay(0, ms(1), ms(20))
            .hold(0, ms(20), ms(400))
            .lose(0)
    } else {
        config
            .delay(150, ms(1), ms(20))
            .hold(50, ms(20), ms(400))
            .lose(20)
    };
    config
        .build()
        // The settings above are valid; the defaults are the fallback all the same.
        .unwrap_or_else(|_| ChaosConfig::new(seed))
}

/// The claimers' stores, each with the switch that puts its connection in chaos.
pub(crate) struct MixedSetup {
    /// One store per claimer, each on a connection of its own.
    pub(crate) stores: Vec<Arc<dyn LeaseStore>>,
    /// Their switches.
    pub(crate) switches: Vec<Switch>,
}

/// What the claimers record into.
#[derive(Debug, Clone)]
pub(crate) struct Mixed {
    /// Every grant, judged per claim.
    pub(crate) grants: CountedGrants,
    /// The sections, with a limit of the larger count.
    pub(crate) history: History,
    /// Claims that failed (neither granted nor answered held): unknown outcomes not adopted,
    /// connections lost, the server away.
    pub(crate) failed: Arc<AtomicU64>,
}

impl Mixed {
    /// Whether every count has at least [`MIN_GRANTS`] grants.
    pub(crate) fn exercised(&self) -> bool {
        COUNTS
            .iter()
            .all(|&n| self.grants.count_of(n) >= MIN_GRANTS)
    }

    /// Whether a claimer whose run ends at `end` races on now: before `end`, or within
    /// [`EXERCISE_EXTRA`] after it while the name is not yet exercised.
    pub(crate) fn racing(&self, end: Instant) -> bool {
        let now = Instant::now();
        now < end || (now < end + EXERCISE_EXTRA && !self.exercised())
    }

    /// An empty record for claims of a lease of `ttl`.
    pub(crate) fn new(ttl: Duration) -> Mixed {
        Mixed {
            grants: CountedGrants::new(ttl),
            history: History::with_limit(COUNTS[1] as usize),
            failed: Arc::default(),
        }
    }

    /// The report, with what the chaos did on the claimers' connections.
    pub(crate) fn report(&self, chaos: ChaosCounts, seed: u64) -> MixedReport {
        MixedReport {
            grants: self.grants.report(),
            history: self.history.report(),
            chaos,
            failed: self.failed.load(Ordering::Relaxed),
            seed,
        }
    }
}

/// One claimer: its coordinator and the task that claims until the end.
pub(crate) struct Claimer {
    label: String,
    coordinator: Coordinator,
    task: JoinHandle<()>,
}

impl Claimer {
    /// Starts claimer `index` claiming one of `COUNTS[index % 2]` permits of `name` on `store`
    /// until `end` (and on, while [`Mixed::racing`]).
    pub(crate) fn spawn(
        index: usize,
        store: Arc<dyn LeaseStore>,
        timings: Timings,
        (name, seed): (&str, u64),
        mixed: &Mixed,
        end: Instant,
    ) -> lease::Result<Claimer> {
        let count = COUNTS[index % COUNTS.len()];
        let label = format!("mixed-{index}-of-{count}");
        let pool = Permits::new(name, count)?;
        let coordinator = Coordinator::builder(store)
            .instance(&label)
            .timings(timings)
            .build()?;
        let c = coordinator.clone();
        let mixed = mixed.clone();
        let who = label.clone();
        let mut rng = Rng::new(seed, &format!("{name}/{who}"));
        let task = tokio::spawn(async move {
            let max_ms = u64::try_from(SECTION_MAX.as_millis()).unwrap_or(20);
            // Bounded: ends at `end`, or `EXERCISE_EXTRA` after it (each claim is bounded by
            // the attempt timeout, each grant's work by its sections).
            while mixed.racing(end) && !c.is_closed() {
                let sent = std::time::Instant::now();
                let term = match c.try_acquire(&pool).await {
                    Ok(term) => term,
                    Err(e) => {
                        if !e.is(ErrorKind::Held) {
                            mixed.failed.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_millis(rng.between(2, 10))).await;
                        continue;
                    }
                };
                let id = mixed.grants.granted(
                    &who,
                    count,
                    term.token(),
                    sent,
                    std::time::Instant::now(),
                );
                for _ in 0..rng.between(1, 3) {
                    if term.check().is_err() || term.deadline_in() < SECTION_GUARD {
                        break;
                    }
                    let section = mixed.history.enter(&who, term.token());
                    tokio::time::sleep(Duration::from_millis(rng.between(2, max_ms))).await;
                    section.exit();
                }
                // Recorded before the release is sent (resign sends it).
                mixed.grants.ended(id, std::time::Instant::now());
                // A failed release leaves the permit to its TTL, which the judgment allows for.
                let _ = term.resign().await;
            }
        });
        Ok(Claimer {
            label,
            coordinator,
            task,
        })
    }

    /// Closes the coordinator and waits for the claimer to end, up to `within`.
    pub(crate) async fn stop(self, within: Duration) -> std::result::Result<(), String> {
        let closed = self.coordinator.close().await;
        let label = &self.label;
        match tokio::time::timeout(within, self.task).await {
            Err(_) => Err(format!("{label}: did not stop within {within:?}")),
            Ok(Err(e)) => Err(format!("{label}: task failed: {e}")),
            Ok(Ok(())) => closed.map_err(|e| format!("{label}: close: {e}")),
        }
    }
}

/// What the mixed-count name recorded.
#[derive(Debug, Clone)]
pub(crate) struct MixedReport {
    /// The grants, judged per claim.
    pub(crate) grants: CountedGrantsReport,
    /// The sections, with a limit of the larger count.
    pub(crate) history: HistoryReport,
    /// What the chaos did on the claimers' connections, summed.
    pub(crate) chaos: ChaosCounts,
    /// Claims that failed.
    pub(crate) failed: u64,
    /// The `--seed` the chaos seeds were derived from.
    pub(crate) seed: u64,
}

impl MixedReport {
    /// The soak line's part.
    pub(crate) fn line(&self) -> String {
        format!(
            "mixed counts ({} and {}) under chaos: {}; {} sections, at most {} at once; chaos \
             (seeds from --seed {}): {}, {} claims failed",
            COUNTS[0],
            COUNTS[1],
            self.grants,
            self.history.sections,
            self.history.peak_open,
            self.seed,
            self.chaos,
            self.failed
        )
    }

    /// Every reason the mixed-count name fails the run; empty when it passes.
    pub(crate) fn problems(&self) -> Vec<String> {
        let g = &self.grants;
        let mut p = Vec::new();
        if g.over_limit > 0 {
            p.push(format!(
                "{} grants of the mixed-count name made while their claim's N or more others \
                 were live (\"at most N\" broken)",
                g.over_limit
            ));
        }
        if g.reused_tokens > 0 {
            p.push(format!(
                "{} tokens of the mixed-count name granted twice",
                g.reused_tokens
            ));
        }
        if self.history.overlaps > 0 {
            p.push(format!(
                "{} sections of the mixed-count name entered while {} were open",
                self.history.overlaps, COUNTS[1]
            ));
        }
        if self.history.regressions > 0 {
            p.push(format!(
                "{} tokens of the mixed-count name entered by two holders",
                self.history.regressions
            ));
        }
        for n in COUNTS {
            if g.of(n) < MIN_GRANTS {
                p.push(format!(
                    "only {} grants of claims of {n} on the mixed-count name (at least \
                     {MIN_GRANTS} expected)",
                    g.of(n)
                ));
            }
        }
        if self.chaos.lost == 0 {
            p.push("the chaos lost no answer on the mixed-count name: not exercised".to_owned());
        }
        p
    }

    /// The violations in full.
    pub(crate) fn evidence(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .grants
            .violations
            .iter()
            .chain(&self.history.violations)
            .map(|v| format!("mixed counts: {v}"))
            .collect();
        let hidden =
            self.grants.violations_total + self.history.violations_total - lines.len() as u64;
        if hidden > 0 {
            lines.push(format!("mixed counts: ... and {hidden} more violations"));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(over_limit: u64, of_three: u64, lost: u64) -> MixedReport {
        MixedReport {
            grants: CountedGrantsReport {
                grants: of_three + 40,
                by_count: vec![(3, of_three), (5, 40)],
                peak_others: 4,
                over_limit,
                reused_tokens: 0,
                violations: (0..over_limit)
                    .map(|i| {
                        format!("mixed-0-of-3@{i}: a claim of 3 granted while 3 others were live")
                    })
                    .collect(),
                violations_total: over_limit,
            },
            history: History::with_limit(5).report(),
            chaos: ChaosCounts {
                passed: 100,
                delayed: 10,
                held: 5,
                lost,
            },
            failed: 3,
            seed: 1,
        }
    }

    #[test]
    fn a_grant_over_its_limit_fails_the_run_and_is_listed() {
        assert!(report(0, 30, 2).problems().is_empty());
        let over = report(2, 30, 2);
        assert_eq!(
            over.problems(),
            [
                "2 grants of the mixed-count name made while their claim's N or more others were \
              live (\"at most N\" broken)"
            ]
        );
        assert_eq!(over.evidence().len(), 2);
        assert!(
            over.line().contains("2 over their claim's limit"),
            "{}",
            over.line()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn claimers_race_past_the_run_until_the_name_is_exercised_and_no_longer() {
        let end = Instant::now() + Duration::from_secs(1);
        let run_past = |mixed: &Mixed, after: Duration| {
            let mixed = mixed.clone();
            async move {
                tokio::time::sleep_until(end + after).await;
                mixed.racing(end)
            }
        };
        let mixed = Mixed::new(Duration::from_secs(1));
        assert!(mixed.racing(end), "before the end");
        assert!(
            run_past(&mixed, Duration::from_secs(5)).await,
            "past the end, 0 grants: races on"
        );
        let t = std::time::Instant::now();
        for n in COUNTS {
            for token in 0..MIN_GRANTS {
                mixed
                    .grants
                    .granted("c", n, token + u64::from(n) * 100, t, t);
            }
        }
        assert!(mixed.exercised());
        assert!(
            !run_past(&mixed, Duration::from_secs(6)).await,
            "exercised: stops at once"
        );
        let starved = Mixed::new(Duration::from_secs(1));
        for token in 0..MIN_GRANTS {
            starved.grants.granted("c", COUNTS[1], token, t, t);
        }
        assert!(!starved.exercised());
        assert!(run_past(&starved, EXERCISE_EXTRA - Duration::from_millis(1)).await);
        assert!(
            !run_past(&starved, EXERCISE_EXTRA).await,
            "a store that never grants a claim of 3 stops racing at the cap, and fails"
        );
    }

    #[test]
    fn a_name_not_exercised_fails_the_run() {
        let idle = report(0, 3, 0);
        let problems = idle.problems();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("only 3 grants of claims of 3"));
        assert!(problems[1].contains("lost no answer"));
    }

    #[test]
    fn nats_claimers_of_three_lose_every_create_and_others_meet_the_general_chaos() {
        let aimed = chaos(1, "nats", 0);
        assert_eq!(aimed.focus(), Some(NATS_CREATE));
        assert_eq!(aimed.lose_per_mille(), 600);
        assert_eq!(chaos(1, "nats", 1).lose_per_mille(), 0);
        let general = chaos(1, "postgres", 0);
        assert_eq!(general.focus(), None);
        assert_eq!(
            (
                general.delay_per_mille(),
                general.hold_per_mille(),
                general.lose_per_mille()
            ),
            (150, 50, 20)
        );
        // One seed per backend and claimer, the same on every run.
        assert_eq!(chaos(1, "postgres", 0), general);
        assert_ne!(chaos(1, "postgres", 1).seed(), general.seed());
        assert_ne!(chaos(2, "postgres", 0).seed(), general.seed());
    }
}
