//! The contenders: each campaigns for one lease through `Coordinator::run_elected` and, under
//! every term it wins, runs a few fenced critical sections recorded in the shared [`History`].
//!
//! A section is entered only while the term is live with at least [`SECTION_GUARD`] left before
//! its local deadline, and lasts at most [`SECTION_MAX`]: a section never outlives the local
//! deadline, and the deadline comes at least `lease − deadline` (a third of the lease) before
//! the store lets anyone else claim. So the checker sees exactly the intervals the lease must
//! keep apart, with a margin far larger than the sections.
//!
//! How many sections a term runs is drawn from the seed and the term: most terms are short
//! (the holder resigns and the name changes hands at once), some run for a second or two, so
//! that renewals run and faults hit holders.
//!
//! **Zombies.** One more contender, `zombie`, campaigns only when the soak arms it (a few times
//! per backend, see [`Zombies`]). Once it wins, it runs one section like the others, then pauses
//! as in a stop-the-world pause (a GC pause, a suspended VM): its store is frozen
//! ([`Pausable`]: no renewal leaves the "process"), and its pause runs on a task of its own,
//! which ignores `done()` and `lost()` and which the coordinator's abort cannot reach, as a
//! thread of a paused process would be. The term is lost at its local deadline, the
//! coordinator's fail action fires after the grace (recorded as expected, not as a step-down
//! failure: the soak's fail action does not exit), the store lets the lease expire and another
//! contender wins a higher term and writes. Then the zombie wakes and writes with its old token:
//! the fenced [`Resource`] must refuse it, and so must every real fence the write goes through
//! first ([`crate::downstream`]). With `--break-fencing` the resource accepts stale
//! tokens, and every such write is a violation. Being a contender of its own, the zombie only
//! ever takes a free lease: it never ends another contender's term, so the terms the faults and
//! the restart hit are the same as without it. While it is armed the other contenders' claims
//! wait ([`StandAside`]), so it takes the next vacancy instead of winning one by chance.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lease::layer::{Answer, Call, Hook, Intercept, Operation};
use lease::{Coordinator, ErrorKind, LeaseStore, Permits, Term, Timings};
use lease_conformance::History;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::downstream::{Downstream, Written};
use crate::schedule::Rng;

/// The longest critical section.
pub(crate) const SECTION_MAX: Duration = Duration::from_millis(20);
/// No section starts with less than this left before the term's local deadline.
pub(crate) const SECTION_GUARD: Duration = Duration::from_millis(100);
/// How often a zombie looks whether a successor has written yet, whether it is armed, and
/// campaigns while armed.
const ZOMBIE_POLL: Duration = Duration::from_millis(10);
/// How long the zombie contender pauses after a failed claim while armed.
const ZOMBIE_CAMPAIGN: Duration = Duration::from_millis(50);
/// How long one wait of the armed zombie contender lasts before it looks at the arm again.
const ZOMBIE_WAIT: Duration = Duration::from_millis(250);
/// The zombie contender's instance label.
pub(crate) const ZOMBIE: &str = "zombie";

/// No contender holds the lease.
const NO_HOLDER: usize = usize::MAX;

/// The shortest zombie pause, in leases: past the store's TTL counted from the pause's start
/// (the last renewal came before it), and past the local deadline plus the grace, so that the
/// coordinator's fail action has fired before the zombie wakes.
pub(crate) fn zombie_min_pause(lease: Duration) -> Duration {
    lease * 4 / 3
}

/// The longest zombie pause: a zombie whose successor has not written by then gives up
/// without writing (reported; a backend where no zombie wrote fails).
pub(crate) fn zombie_max_pause(lease: Duration) -> Duration {
    lease * 3
}

/// The fenced model every contender writes to, as a real store would guard its rows with
/// `UPDATE … WHERE fence <= $token`: a write is accepted when its token is at least the highest
/// token accepted so far, refused otherwise.
///
/// Built broken (`accept_stale`, for `--break-fencing`), it accepts every token. Any write it
/// accepts with a token lower than one it had already accepted is a violation: it is recorded
/// as a violation here and entered into the [`History`] as an instant section, which the
/// history counts as an overlap when another holder's section is open, and always as a term
/// regression.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    state: Arc<Mutex<ResourceState>>,
    accept_stale: bool,
    history: History,
}

#[derive(Debug, Default)]
struct ResourceState {
    /// The highest token accepted.
    fence: Option<u64>,
    accepted: u64,
    refused: u64,
    /// Writes accepted with a token lower than the fence: violations, in plain words.
    stale_accepted: Vec<String>,
}

impl Resource {
    /// A resource with no write yet, recording accepted stale writes into `history`.
    pub(crate) fn new(history: History, accept_stale: bool) -> Resource {
        Resource {
            state: Arc::default(),
            accept_stale,
            history,
        }
    }

    fn lock(&self) -> MutexGuard<'_, ResourceState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The highest token accepted so far (0 before any write).
    pub(crate) fn fence(&self) -> u64 {
        self.lock().fence.unwrap_or(0)
    }

    /// A write by `who` with `token`; `holder` names whoever holds the lease now, for the
    /// message of a violation.
    pub(crate) fn write(&self, who: &str, token: u64, holder: Option<&str>) -> Written {
        let mut state = self.lock();
        let fence = state.fence.unwrap_or(0);
        let stale = state.fence.is_some_and(|f| token < f);
        if stale && !self.accept_stale {
            state.refused += 1;
            return Written::Refused;
        }
        state.accepted += 1;
        state.fence = Some(fence.max(token));
        if !stale {
            return Written::Accepted;
        }
        // The stale write took effect: to the history it is a section under an old term, now.
        self.history.enter(who, token).exit();
        let live = match holder {
            Some(h) if h != who => format!("; {h} holds the lease"),
            _ => String::new(),
        };
        state.stale_accepted.push(format!(
            "stale write accepted: {who} wrote with token {token} after token {fence} had \
             written{live}"
        ));
        Written::AcceptedStale
    }

    /// A section's write with its own term.
    #[cfg(test)]
    pub(crate) fn write_in(
        &self,
        section: &lease_conformance::history::Section,
        holder: Option<&str>,
    ) -> Written {
        self.write(section.who(), section.term(), holder)
    }

    /// Writes refused so far.
    pub(crate) fn refused(&self) -> u64 {
        self.lock().refused
    }

    /// The stale writes accepted so far (violations).
    pub(crate) fn stale_accepted(&self) -> Vec<String> {
        self.lock().stale_accepted.clone()
    }
}

/// What became of one zombie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Zombie {
    /// The contender's instance label.
    pub(crate) who: String,
    /// Its old token.
    pub(crate) token: u64,
    /// How long it paused.
    pub(crate) paused: Duration,
    /// What the fenced resource did with its write; `None` when no successor wrote within
    /// [`zombie_max_pause`] and the zombie gave up.
    pub(crate) written: Option<Written>,
    /// Whether the coordinator's fail action had fired for its term when it wrote (or gave up).
    pub(crate) fail_action_fired: bool,
}

/// Where the zombie phase stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ZombieState {
    /// No zombie asked for.
    Idle,
    /// The zombie contender campaigns, up to this instant.
    Armed(Instant),
    /// A zombie is pausing.
    Running,
}

/// The zombies of one backend: the driver arms one at a time, the zombie contender takes it
/// with the term it wins, the fail action recognises that term.
#[derive(Debug)]
pub(crate) struct Zombies {
    state: Mutex<ZombieState>,
    /// `(instance, term)` of every zombie, for the fail action.
    terms: Mutex<HashSet<(String, u64)>>,
    /// `(instance, term)` of every zombie whose fail action fired.
    fired: Mutex<HashSet<(String, u64)>>,
    done: Mutex<Vec<Zombie>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Default for Zombies {
    fn default() -> Self {
        Zombies {
            state: Mutex::new(ZombieState::Idle),
            terms: Mutex::default(),
            fired: Mutex::default(),
            done: Mutex::default(),
            tasks: Mutex::default(),
        }
    }
}

impl Zombies {
    /// Asks for a zombie: the zombie contender campaigns until it wins or `until` passes.
    pub(crate) fn arm(&self, until: Instant) {
        let mut state = lock(&self.state);
        if *state == ZombieState::Idle {
            *state = ZombieState::Armed(until);
        }
    }

    /// Whether no zombie is armed or running (an arm past its instant lapses here).
    pub(crate) fn idle(&self) -> bool {
        let mut state = lock(&self.state);
        if let ZombieState::Armed(until) = *state
            && Instant::now() > until
        {
            *state = ZombieState::Idle;
        }
        *state == ZombieState::Idle
    }

    /// Whether an arm is set and not lapsed.
    fn armed(&self) -> bool {
        matches!(*lock(&self.state), ZombieState::Armed(until) if Instant::now() <= until)
    }

    /// Gives a taken arm back without a zombie (its term ended before its first section).
    fn cancel(&self) {
        *lock(&self.state) = ZombieState::Idle;
    }

    /// Takes the arm, if one is set and not lapsed, for `(who, token)`.
    fn take(&self, who: &str, token: u64) -> bool {
        let mut state = lock(&self.state);
        match *state {
            ZombieState::Armed(until) if Instant::now() <= until => {
                *state = ZombieState::Running;
                lock(&self.terms).insert((who.to_owned(), token));
                true
            }
            ZombieState::Armed(_) => {
                *state = ZombieState::Idle;
                false
            }
            _ => false,
        }
    }

    /// Called by the fail action: `true` (and noted) when the term is a zombie's, whose
    /// step-down failure is the point of the exercise.
    fn fail_action(&self, who: &str, token: u64) -> bool {
        let key = (who.to_owned(), token);
        if !lock(&self.terms).contains(&key) {
            return false;
        }
        lock(&self.fired).insert(key);
        true
    }

    fn fired(&self, who: &str, token: u64) -> bool {
        lock(&self.fired).contains(&(who.to_owned(), token))
    }

    fn finish(&self, zombie: Zombie) {
        lock(&self.done).push(zombie);
        *lock(&self.state) = ZombieState::Idle;
    }

    /// Every zombie that finished.
    pub(crate) fn finished(&self) -> Vec<Zombie> {
        lock(&self.done).clone()
    }

    /// Waits for every zombie's pause to end (each is bounded by [`zombie_max_pause`]).
    pub(crate) async fn wait(&self) {
        let tasks: Vec<JoinHandle<()>> = lock(&self.tasks).drain(..).collect();
        for task in tasks {
            let _ = task.await;
        }
    }
}

/// The hook of a store that can be frozen: while frozen, every operation waits (without an
/// answer) until it thaws — the store as seen from a process in a stop-the-world pause. The
/// coordinator's attempt timeout gives up on the operations held, so renewals fail and the
/// term runs out.
#[derive(Debug)]
pub(crate) struct Pause {
    frozen: watch::Sender<bool>,
}

/// A store that can be frozen ([`Pause`]).
pub(crate) type Pausable = Intercept<Arc<dyn LeaseStore>, Pause>;

impl Pause {
    /// `inner`, not frozen.
    pub(crate) fn wrap(inner: Arc<dyn LeaseStore>) -> Pausable {
        Intercept::new(
            inner,
            Pause {
                frozen: watch::Sender::new(false),
            },
        )
    }

    /// Freezes (`true`) or thaws (`false`) the store.
    pub(crate) fn freeze(&self, frozen: bool) {
        self.frozen.send_replace(frozen);
    }
}

impl Hook for Pause {
    fn around<'a, T: Send + 'static>(
        &'a self,
        _call: Call<'a>,
        op: Answer<'a, T>,
    ) -> Answer<'a, T> {
        let mut rx = self.frozen.subscribe();
        Box::pin(async move {
            // The sender lives as long as `self`.
            let _ = rx.wait_for(|frozen| !frozen).await;
            op.await
        })
    }
}

/// The hook on every other contender's store while a zombie is armed: their claims wait at the
/// door until the zombie contender has taken the arm (or it lapsed), so the zombie takes the
/// next vacancy. Without it the zombie won a hand-over only by chance against the other
/// contenders, and a backend could run without one zombie (`.ci/run`, Redis, seed 1: "fencing
/// was not exercised"). Nothing else is held back: renewals, releases and reads pass, so no
/// term ends for it and the faults hit the same holders.
#[derive(Debug)]
pub(crate) struct StandAside {
    zombies: Arc<Zombies>,
}

/// A contender's store that stands aside for an armed zombie ([`StandAside`]).
pub(crate) type Courteous = Intercept<Arc<dyn LeaseStore>, StandAside>;

impl StandAside {
    /// `inner`, standing aside whenever `record`'s zombie is armed.
    pub(crate) fn wrap(inner: Arc<dyn LeaseStore>, record: &Record) -> Courteous {
        Intercept::new(
            inner,
            StandAside {
                zombies: Arc::clone(&record.zombies),
            },
        )
    }
}

impl Hook for StandAside {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        if call.operation != Operation::Claim {
            return op;
        }
        Box::pin(async move {
            // Bounded: an arm lapses at its instant, and the coordinator's attempt timeout
            // gives up on a claim held here (the campaign asks again at its pace).
            while self.zombies.armed() {
                tokio::time::sleep(ZOMBIE_POLL).await;
            }
            op.await
        })
    }
}

/// What every contender of one backend records into.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    /// The history checker.
    pub(crate) history: History,
    /// The fenced model every section and every zombie writes to, last.
    pub(crate) resource: Resource,
    /// The real resources every write goes through first (see [`downstream`]).
    ///
    /// [`downstream`]: crate::downstream
    pub(crate) downstream: Arc<Downstream>,
    /// The zombie phase.
    pub(crate) zombies: Arc<Zombies>,
    /// Terms won (the work started).
    pub(crate) terms_won: Arc<AtomicU64>,
    /// Terms whose work stopped because the term was lost or about to be.
    pub(crate) terms_lost: Arc<AtomicU64>,
    /// Step-down failures: work under a lost term that did not return within the grace
    /// (zombies' terms excepted: theirs are expected, see [`Zombies`]).
    pub(crate) step_down_failures: Arc<Mutex<Vec<String>>>,
    /// The contender whose work runs under a term now, or [`NO_HOLDER`].
    holder: Arc<AtomicUsize>,
    /// Each contender section's entry time and its term's local deadline then (the cluster
    /// soak's recovery times are read from it).
    pub(crate) sections: Arc<Mutex<Vec<(Instant, Instant)>>>,
}

impl Record {
    /// An empty record; `break_fencing` builds the fenced model broken (it accepts stale
    /// tokens); `downstream`: the real resources every write goes through first (their fences
    /// broken alike, by whoever set them up).
    pub(crate) fn new(break_fencing: bool, downstream: Arc<Downstream>) -> Record {
        let history = History::new();
        Record {
            resource: Resource::new(history.clone(), break_fencing),
            downstream,
            history,
            zombies: Arc::default(),
            terms_won: Arc::default(),
            terms_lost: Arc::default(),
            step_down_failures: Arc::default(),
            holder: Arc::new(AtomicUsize::new(NO_HOLDER)),
            sections: Arc::default(),
        }
    }

    /// The contender whose work runs under a term now, if any.
    pub(crate) fn holder(&self) -> Option<usize> {
        Some(self.holder.load(Ordering::SeqCst)).filter(|&h| h != NO_HOLDER)
    }

    fn holder_label(&self) -> Option<String> {
        self.holder().map(|h| format!("contender-{h}"))
    }

    /// One fenced write by `who` under `token`: through every real resource, then the model
    /// (see [`Downstream::write`]); answers the model's verdict. `holder` names whoever holds
    /// the lease now, for the message of a violation.
    async fn write(&self, who: &str, token: u64, holder: Option<&str>, zombie: bool) -> Written {
        self.downstream
            .write(who, token, zombie, || {
                self.resource.write(who, token, holder)
            })
            .await
    }

    /// How long before its term's local deadline a section must start ([`SECTION_GUARD`],
    /// plus the real resources' bound).
    fn guard(&self) -> Duration {
        self.downstream.guard(SECTION_GUARD)
    }

    /// The step-down failures so far.
    pub(crate) fn failures(&self) -> Vec<String> {
        lock(&self.step_down_failures).clone()
    }
}

/// A contender's coordinator on `store`, labelled `label`, whose fail action records into
/// `record`'s step-down failures.
fn coordinator(
    label: &str,
    store: Arc<dyn LeaseStore>,
    timings: Timings,
    record: &Record,
) -> lease::Result<Coordinator> {
    let failures = Arc::clone(&record.step_down_failures);
    Coordinator::builder(store)
        .instance(label)
        .timings(timings)
        .fail_action(move |f| {
            lock(&failures).push(format!(
                "{} term {} of '{}': {}",
                f.instance, f.term, f.name, f.error
            ));
        })
        .build()
}

/// One contender: its coordinator and the task running `run_elected`.
pub(crate) struct Contender {
    label: String,
    coordinator: Coordinator,
    task: JoinHandle<lease::Result<()>>,
}

impl Contender {
    /// Starts contender `index` campaigning for `name` on `store`.
    pub(crate) fn spawn(
        index: usize,
        store: Arc<dyn LeaseStore>,
        timings: Timings,
        name: &str,
        seed: u64,
        record: &Record,
    ) -> lease::Result<Contender> {
        let label = format!("contender-{index}");
        let coordinator = coordinator(&label, store, timings, record)?;
        let c = coordinator.clone();
        let name = name.to_owned();
        let record = record.clone();
        let task = tokio::spawn(async move {
            c.run_elected(&name, move |term: Term| {
                let rng = Rng::new(seed, &format!("{}/term-{}", term.instance(), term.token()));
                work(index, term, rng, record.clone())
            })
            .await
        });
        Ok(Contender {
            label,
            coordinator,
            task,
        })
    }

    /// Closes the coordinator (work is told to stop, leases released) and waits for
    /// `run_elected` to return, up to `within`; any error is returned as a message.
    pub(crate) async fn stop(self, within: Duration) -> std::result::Result<(), String> {
        let closed = self.coordinator.close().await;
        let joined = tokio::time::timeout(within, self.task).await;
        let label = &self.label;
        match joined {
            Err(_) => Err(format!(
                "{label}: run_elected did not return within {within:?}"
            )),
            Ok(Err(e)) => Err(format!("{label}: task failed: {e}")),
            Ok(Ok(Err(e))) => Err(format!("{label}: run_elected returned an error: {e}")),
            Ok(Ok(Ok(()))) => closed.map_err(|e| format!("{label}: close: {e}")),
        }
    }
}

/// How many permits the soak's counted name has.
pub(crate) const PERMITS: u32 = 3;
/// How many contenders campaign for the counted name (on the lease contenders' stores, so the
/// same faults hit them).
pub(crate) const COUNTED_CONTENDERS: usize = 6;

/// What the contenders of the counted name record into: sections in a history with a limit of
/// [`PERMITS`] (never more open at once, no token by two holders).
#[derive(Debug, Clone)]
pub(crate) struct Counted {
    /// The counted name.
    pub(crate) pool: Permits,
    /// The history checker, with a limit of the permit count.
    pub(crate) history: History,
}

impl Counted {
    /// An empty record for `name` with [`PERMITS`] permits.
    pub(crate) fn new(name: &str) -> lease::Result<Counted> {
        Ok(Counted {
            pool: Permits::new(name, PERMITS)?,
            history: History::with_limit(PERMITS as usize),
        })
    }
}

impl Contender {
    /// Starts contender `index` of the counted name campaigning for one of its permits on
    /// `store`; its step-down failures go into `record`'s.
    pub(crate) fn spawn_counted(
        index: usize,
        store: Arc<dyn LeaseStore>,
        timings: Timings,
        seed: u64,
        counted: &Counted,
        record: &Record,
    ) -> lease::Result<Contender> {
        let label = format!("counted-{index}");
        let coordinator = coordinator(&label, store, timings, record)?;
        let c = coordinator.clone();
        let counted = counted.clone();
        let task = tokio::spawn(async move {
            let pool = counted.pool.clone();
            c.run_elected(&pool, move |term: Term| {
                let rng = Rng::new(seed, &format!("{}/term-{}", term.instance(), term.token()));
                counted_work(term, rng, counted.clone())
            })
            .await
        });
        Ok(Contender {
            label,
            coordinator,
            task,
        })
    }
}

/// The work under one permit of the counted name: sections as [`work`] runs them, recorded in
/// the counted history (no fenced resource: N holders write side by side).
async fn counted_work(
    term: Term,
    mut rng: Rng,
    counted: Counted,
) -> std::result::Result<(), Infallible> {
    let who = term.instance().to_owned();
    let sections = sections_of_a_term(&mut rng);
    let max_ms = u64::try_from(SECTION_MAX.as_millis()).unwrap_or(20);
    // Bounded: at most `sections` turns.
    for _ in 0..sections {
        if term.check().is_err() || term.deadline_in() < SECTION_GUARD {
            break;
        }
        let section = counted.history.enter(&who, term.token());
        tokio::time::sleep(Duration::from_millis(rng.between(2, max_ms))).await;
        section.exit();
        let gap = Duration::from_millis(rng.between(1, 10));
        tokio::select! {
            biased;
            _ = term.done() => {}
            _ = tokio::time::sleep(gap) => {}
        }
    }
    Ok(())
}

/// How many sections a term runs: mostly 1–10, in 30 % of terms 40–150, so that renewals run
/// and faults hit holders.
fn sections_of_a_term(rng: &mut Rng) -> u64 {
    if rng.chance(30) {
        rng.between(40, 150)
    } else {
        rng.between(1, 10)
    }
}

/// The work under one term.
async fn work(
    index: usize,
    term: Term,
    mut rng: Rng,
    record: Record,
) -> std::result::Result<(), Infallible> {
    record.terms_won.fetch_add(1, Ordering::Relaxed);
    record.holder.store(index, Ordering::SeqCst);
    let who = term.instance().to_owned();
    let sections = sections_of_a_term(&mut rng);
    let max_ms = u64::try_from(SECTION_MAX.as_millis()).unwrap_or(20);
    let guard = record.guard();
    // Bounded: at most `sections` turns.
    for _ in 0..sections {
        if term.check().is_err() || term.deadline_in() < guard {
            let lost = match term.check() {
                Err(e) => e.is(ErrorKind::Lost),
                // Live, but too close to its deadline: renewals are failing.
                Ok(()) => true,
            };
            if lost {
                record.terms_lost.fetch_add(1, Ordering::Relaxed);
            }
            break;
        }
        let entered = Instant::now();
        lock(&record.sections).push((entered, entered + term.deadline_in()));
        let section = record.history.enter(&who, term.token());
        // A refused write is counted by the model and each real resource (and a refused
        // section's write can only come from a term regression, which the history reports).
        let _written = record.write(&who, section.term(), Some(&who), false).await;
        tokio::time::sleep(Duration::from_millis(rng.between(2, max_ms))).await;
        section.exit();
        let gap = Duration::from_millis(rng.between(1, 10));
        tokio::select! {
            biased;
            _ = term.done() => {}
            _ = tokio::time::sleep(gap) => {}
        }
    }
    let _ = record
        .holder
        .compare_exchange(index, NO_HOLDER, Ordering::SeqCst, Ordering::SeqCst);
    Ok(())
}

/// The zombie contender: campaigns while armed, and runs [`zombie`] under each term it wins.
pub(crate) struct ZombieContender {
    coordinator: Coordinator,
    task: JoinHandle<()>,
}

impl ZombieContender {
    /// Starts the zombie contender for `name` on `store` (which it wraps in a [`Pausable`]).
    pub(crate) fn spawn(
        store: Arc<dyn LeaseStore>,
        timings: Timings,
        name: &str,
        record: &Record,
    ) -> lease::Result<ZombieContender> {
        let failures = Arc::clone(&record.step_down_failures);
        let zombies = Arc::clone(&record.zombies);
        let store = Arc::new(Pause::wrap(store));
        // The fail action records instead of exiting: a zombie's is expected, any other (a
        // term of the zombie contender that was not taken as a zombie) a step-down failure.
        let coordinator = Coordinator::builder(store.clone())
            .instance(ZOMBIE)
            .timings(timings)
            .fail_action(move |f| {
                if zombies.fail_action(&f.instance, f.term) {
                    return;
                }
                lock(&failures).push(format!(
                    "{} term {} of '{}': {}",
                    f.instance, f.term, f.name, f.error
                ));
            })
            .build()?;
        let c = coordinator.clone();
        let name = name.to_owned();
        let record = record.clone();
        let task = tokio::spawn(async move {
            // Bounded: ends once the coordinator is closed.
            while !c.is_closed() {
                if !record.zombies.armed() {
                    tokio::time::sleep(ZOMBIE_POLL).await;
                    continue;
                }
                // Waits as every contender does (the store's hints, the holder's expiry), so the
                // zombie gets its turn at a hand-over as often as they do; a held name answers
                // Timeout after ZOMBIE_WAIT and the arm is looked at again.
                match c.acquire(&name, ZOMBIE_WAIT).await {
                    Ok(term) => {
                        if record.zombies.take(term.instance(), term.token()) {
                            let store = Arc::clone(&store);
                            let record = record.clone();
                            // Lost, by design; the outcome is in `record.zombies`.
                            let _ = term.run(move |t| zombie(t, record, store)).await;
                        } else {
                            // The arm lapsed while the claim was on its way.
                            let _ = term.resign().await;
                        }
                    }
                    Err(e) if e.is(ErrorKind::Closed) => break,
                    Err(e) if e.is(ErrorKind::Timeout) => {}
                    Err(_) => tokio::time::sleep(ZOMBIE_CAMPAIGN).await,
                }
            }
        });
        Ok(ZombieContender { coordinator, task })
    }

    /// Closes the coordinator and waits for the campaign to end, up to `within`.
    pub(crate) async fn stop(self, within: Duration) -> std::result::Result<(), String> {
        let closed = self.coordinator.close().await;
        match tokio::time::timeout(within, self.task).await {
            Err(_) => Err(format!("{ZOMBIE}: did not stop within {within:?}")),
            Ok(Err(e)) => Err(format!("{ZOMBIE}: task failed: {e}")),
            Ok(Ok(())) => closed.map_err(|e| format!("{ZOMBIE}: close: {e}")),
        }
    }
}

/// The work of the zombie under the term it won: one section like any contender's (so that its
/// token is on the fence), then the pause. Its store freezes, its pause runs on a task of its
/// own, and the work waits for it while ignoring `done()` and `lost()` — until the coordinator
/// gives up on it after the grace, fires the fail action and aborts it (the pause goes on).
async fn zombie(
    term: Term,
    record: Record,
    store: Arc<Pausable>,
) -> std::result::Result<(), Infallible> {
    let who = term.instance().to_owned();
    let token = term.token();
    let lease = term.timings().lease();
    if term.check().is_err() || term.deadline_in() < record.guard() {
        record.zombies.cancel();
        return Ok(());
    }
    let section = record.history.enter(&who, token);
    let _written = record.write(&who, token, Some(&who), false).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    section.exit();
    store.hook().freeze(true);
    drop(term);
    let (woke_tx, woke_rx) = oneshot::channel::<()>();
    let zombies = Arc::clone(&record.zombies);
    let task = tokio::spawn(async move {
        let began = Instant::now();
        // The pause: no look at the term, no renewal (the store is frozen).
        tokio::time::sleep(zombie_min_pause(lease)).await;
        let give_up = began + zombie_max_pause(lease);
        // Bounded by `give_up`.
        while record.resource.fence() <= token && Instant::now() < give_up {
            tokio::time::sleep(ZOMBIE_POLL).await;
        }
        // The model's fence is above the token only once a successor's write went through
        // every real resource too (they are written first): each must refuse this one.
        let written = if record.resource.fence() > token {
            let holder = record.holder_label();
            Some(record.write(&who, token, holder.as_deref(), true).await)
        } else {
            None
        };
        let fail_action_fired = record.zombies.fired(&who, token);
        store.hook().freeze(false);
        record.zombies.finish(Zombie {
            who,
            token,
            paused: began.elapsed(),
            written,
            fail_action_fired,
        });
        let _ = woke_tx.send(());
    });
    lock(&zombies.tasks).push(task);
    // Ignores done() and lost(): only the end of the pause (or the coordinator's abort) ends
    // this.
    let _ = woke_rx.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_refuses_a_stale_write() {
        let history = History::new();
        let resource = Resource::new(history.clone(), false);
        assert_eq!(resource.write("contender-0", 3, None), Written::Accepted);
        assert_eq!(
            resource.write("contender-1", 4, Some("contender-1")),
            Written::Accepted
        );
        assert_eq!(
            resource.write("contender-0", 3, Some("contender-1")),
            Written::Refused
        );
        assert_eq!(resource.refused(), 1);
        assert!(resource.stale_accepted().is_empty());
        history.assert_clean();
    }

    #[test]
    fn an_accepted_stale_write_is_a_violation() {
        let history = History::new();
        let resource = Resource::new(history.clone(), true);
        history.enter("contender-0", 3).exit();
        assert_eq!(resource.write("contender-0", 3, None), Written::Accepted);
        let live = history.enter("contender-1", 4);
        assert_eq!(
            resource.write_in(&live, Some("contender-1")),
            Written::Accepted
        );
        // The zombie writes with its old token while contender-1's section is open.
        assert_eq!(
            resource.write("contender-0", 3, Some("contender-1")),
            Written::AcceptedStale
        );
        live.exit();
        assert_eq!(resource.refused(), 0);
        assert_eq!(
            resource.stale_accepted(),
            [
                "stale write accepted: contender-0 wrote with token 3 after token 4 had written; \
              contender-1 holds the lease"
            ]
        );
        let report = history.report();
        assert_eq!((report.overlaps, report.regressions), (1, 1), "{report}");
        assert_eq!(
            resource.fence(),
            4,
            "a stale write does not move the fence back"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn zombie_arms_lapse_and_are_taken_once() {
        let zombies = Zombies::default();
        assert!(zombies.idle());
        zombies.arm(Instant::now() + Duration::from_secs(1));
        assert!(!zombies.idle());
        assert!(zombies.take("contender-2", 7));
        assert!(!zombies.take("contender-3", 8), "one zombie at a time");
        assert!(zombies.fail_action("contender-2", 7));
        assert!(!zombies.fail_action("contender-3", 8));
        assert!(zombies.fired("contender-2", 7));
        zombies.finish(Zombie {
            who: "contender-2".into(),
            token: 7,
            paused: Duration::from_secs(2),
            written: Some(Written::Refused),
            fail_action_fired: true,
        });
        assert!(zombies.idle());
        zombies.arm(Instant::now() + Duration::from_secs(1));
        tokio::time::advance(Duration::from_millis(1001)).await;
        assert!(!zombies.take("contender-3", 8), "a lapsed arm is not taken");
        assert!(zombies.idle());
    }
}
