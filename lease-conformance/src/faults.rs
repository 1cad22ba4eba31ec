//! Faults injected into a store in process: the [`Faults`] hook, and [`FaultyStore`], a store
//! wrapped in it, that stalls, cuts or loses its answers on demand.
//!
//! [`FaultMode`] is shared with the TCP [`FaultProxy`](crate::FaultProxy): the same mode means
//! the same fault on either, with the differences each mode's documentation names (the hook
//! acts per operation, the proxy per connection, and in [`FaultMode::Chaos`] per chunk read
//! from a client).
//!
//! ```
//! use lease_conformance::faults::{FaultMode, faulty};
//! use lease_core::{ErrorKind, LeaseStore};
//! use lease_local::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lease_core::Result<()> {
//! let store = faulty(MemoryStore::new());
//! store.hook().set_mode(FaultMode::Cut);
//! assert!(store.available().await.is_err_and(|e| e.is(ErrorKind::Unavailable)));
//! store.hook().set_mode(FaultMode::Pass);
//! store.available().await?;
//! assert_eq!(store.get("jobs").await?, None);
//! assert_eq!(store.hook().counts().gets, 1);
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use lease_core::backend::notify::Hub;
use lease_core::backend::notify::{Topic, Wakeups};
use lease_core::layer::{Answer, Call, Hook, Intercept, Operation};
use lease_core::{Error, Result};
use tokio::sync::watch;

use crate::chaos::{ChaosAction, ChaosConfig, ChaosCounts, Dice};

/// A fault to inject, into a store by the [`Faults`] hook or into a connection by the
/// [`FaultProxy`](crate::FaultProxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultMode {
    /// Everything passes through unchanged. The mode a hook and a proxy start in.
    #[default]
    Pass,
    /// Nothing is answered until the mode changes; then what was held back goes through (a
    /// network that stopped answering).
    ///
    /// The hook holds each operation before it reaches the store and carries it out once the
    /// mode leaves `Stall`. The proxy stops reading from both sides of every connection, so
    /// bytes wait in its buffers and the kernel's: held back, never dropped.
    Stall,
    /// The connection is cut.
    ///
    /// The hook fails every operation with `Unavailable` before it reaches the store
    /// (`available()` too). The proxy closes every open connection on both sides and closes
    /// each new one right after accepting it; a client sees end of file or a reset, not a
    /// refused connection.
    Cut,
    /// Requests reach the store, their answers never come back: the caller cannot tell whether
    /// an operation took effect.
    ///
    /// The hook carries out every operation on the store, then never answers. The proxy
    /// forwards what clients send and discards what the server answers; a connection that lost
    /// an answer is closed when the mode leaves `LoseAnswers` (its byte stream no longer lines
    /// up with its requests), so the client reconnects as it would after such a network fault.
    LoseAnswers,
    /// Each request, at random from the configuration's seed, passes, is delayed, has its
    /// answer held back for a while, or has its answer lost after the store carried it out
    /// (see [`ChaosAction`] for what each does on the hook and on the proxy).
    ///
    /// The hook draws once per operation (for the claim mode: once per operation that takes a
    /// lease), the proxy once per chunk it reads from a client (a TCP read, not a protocol
    /// message). Each switch to this mode starts the seed's sequence again: see
    /// [`chaos`](crate::chaos) for what the seed does and does not make reproducible.
    Chaos(ChaosConfig),
}

/// What a [`Faults`] hook does to the store's hints
/// ([`LeaseStore::changes`](lease_core::LeaseStore::changes)).
///
/// Every subscription taken through the hook is relayed by a task of its own, which applies
/// the mode current when each hint arrives, so switching the mode affects subscriptions
/// taken before. A store without hints has none to relay: its `changes` stays `None` in every
/// mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HintMode {
    /// Hints pass unchanged.
    #[default]
    Pass,
    /// Hints are cut, as when a store's listener connection is down: every subscription
    /// reports [`is_connected`](Wakeups::is_connected) `false` and gets no hint, so waiters
    /// fall back to polling.
    Cut,
    /// Hints misbehave while the link reports connected: each is dropped with
    /// `drop_percent` % probability, and each one passed is delivered twice (a millisecond
    /// apart) with `duplicate_percent` % probability.
    Chaos {
        /// The share of hints lost, in percent.
        drop_percent: u8,
        /// The share of hints passed that arrive twice, in percent.
        duplicate_percent: u8,
    },
}

/// How many operations reached a [`Faults`] hook, by kind (whatever the mode did with them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// `claim`, `acquire_partition`, `claim_permit` and the polling `try_acquire` calls.
    pub claims: u64,
    /// `renew`, `renew_partitions` and `renew_permit` calls.
    pub renews: u64,
    /// `release`, `release_partitions`, `release_permit` and the polling `release` calls.
    pub releases: u64,
    /// `verify`, `verify_permit` and `read_back_permit` calls.
    pub verifies: u64,
    /// `get`, `owners` and `permits` calls.
    pub gets: u64,
}

#[derive(Debug, Default)]
struct Counters {
    claims: AtomicU64,
    renews: AtomicU64,
    releases: AtomicU64,
    verifies: AtomicU64,
    gets: AtomicU64,
}

#[derive(Debug)]
struct Shared {
    mode: watch::Sender<FaultMode>,
    claim_mode: watch::Sender<FaultMode>,
    hints: watch::Sender<HintMode>,
    counters: Counters,
    /// The chaos of the store-wide mode.
    dice: Dice,
    /// The chaos of the claim mode.
    claim_dice: Dice,
}

/// A [`Hook`] that injects faults into every operation of the store it wraps, switchable at
/// any time, and counts the operations.
///
/// The store-wide mode ([`set_mode`](Faults::set_mode)) applies to every operation, including
/// `available()`; the claim mode ([`set_claim_mode`](Faults::set_claim_mode)) applies, after it, to
/// the operations that take a lease: `claim`, `acquire_partition`, `claim_permit` and the polling
/// `try_acquire`. Clones share the modes and the counters, so a test keeps one to switch the store
/// it handed away.
#[derive(Debug, Clone)]
pub struct Faults {
    shared: Arc<Shared>,
}

/// A store with the [`Faults`] hook around it: it implements every store trait `S` implements
/// and reports `S`'s backend name and capabilities.
pub type FaultyStore<S> = Intercept<S, Faults>;

/// `inner` with a fresh [`Faults`] hook (passing everything through) around it.
pub fn faulty<S>(inner: S) -> FaultyStore<S> {
    Intercept::new(inner, Faults::new())
}

impl Default for Faults {
    fn default() -> Self {
        Faults::new()
    }
}

impl Faults {
    /// A hook that passes everything through.
    pub fn new() -> Faults {
        Faults {
            shared: Arc::new(Shared {
                mode: watch::Sender::new(FaultMode::Pass),
                claim_mode: watch::Sender::new(FaultMode::Pass),
                hints: watch::Sender::new(HintMode::Pass),
                counters: Counters::default(),
                dice: Dice::default(),
                claim_dice: Dice::default(),
            }),
        }
    }

    /// Switches the store-wide fault mode; operations stalled so far proceed when it leaves
    /// [`FaultMode::Stall`]. A switch to [`FaultMode::Chaos`] starts its seed's sequence from
    /// the beginning and its counts ([`chaos_counts`](Faults::chaos_counts)) from zero.
    pub fn set_mode(&self, mode: FaultMode) {
        if let FaultMode::Chaos(config) = mode {
            self.shared.dice.reset(config);
        }
        self.shared.mode.send_replace(mode);
    }

    /// Switches the fault mode of the operations that take a lease alone (applied after the
    /// store-wide mode). In [`FaultMode::Chaos`] its sequence is drawn only by those
    /// operations, apart from the store-wide one's.
    pub fn set_claim_mode(&self, mode: FaultMode) {
        if let FaultMode::Chaos(config) = mode {
            self.shared.claim_dice.reset(config);
        }
        self.shared.claim_mode.send_replace(mode);
    }

    /// What the store-wide chaos did since the mode was last switched to
    /// [`FaultMode::Chaos`] (all zero before).
    pub fn chaos_counts(&self) -> ChaosCounts {
        self.shared.dice.counts()
    }

    /// What the claim mode's chaos did since it was last switched to [`FaultMode::Chaos`].
    pub fn claim_chaos_counts(&self) -> ChaosCounts {
        self.shared.claim_dice.counts()
    }

    /// Switches what happens to the store's hints (see [`HintMode`]), for subscriptions taken
    /// before as well as later ones.
    pub fn set_hint_mode(&self, mode: HintMode) {
        self.shared.hints.send_replace(mode);
    }

    /// The current hint mode.
    pub fn hint_mode(&self) -> HintMode {
        *self.shared.hints.borrow()
    }

    /// The current store-wide fault mode.
    pub fn mode(&self) -> FaultMode {
        *self.shared.mode.borrow()
    }

    /// The operations seen so far.
    pub fn counts(&self) -> OpCounts {
        let c = &self.shared.counters;
        OpCounts {
            claims: c.claims.load(Ordering::SeqCst),
            renews: c.renews.load(Ordering::SeqCst),
            releases: c.releases.load(Ordering::SeqCst),
            verifies: c.verifies.load(Ordering::SeqCst),
            gets: c.gets.load(Ordering::SeqCst),
        }
    }

    fn count(&self, operation: Operation) {
        let c = &self.shared.counters;
        let counter = match operation {
            Operation::Claim
            | Operation::AcquirePartition
            | Operation::PollAcquire
            | Operation::ClaimPermit => &c.claims,
            Operation::Renew
            | Operation::RenewMany
            | Operation::RenewPartitions
            | Operation::RenewPermit => &c.renews,
            Operation::Release
            | Operation::ReleasePartitions
            | Operation::PollRelease
            | Operation::ReleasePermit => &c.releases,
            Operation::Verify | Operation::VerifyPermit | Operation::ReadBackPermit => &c.verifies,
            Operation::Get | Operation::Owners | Operation::Permits => &c.gets,
            _ => return,
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

/// Waits out a stall in `mode`, then runs `op` as the mode says (in chaos: as the next action
/// drawn from `dice` says).
async fn apply<T>(
    mode: &watch::Sender<FaultMode>,
    dice: &Dice,
    op: impl Future<Output = Result<T>>,
) -> Result<T> {
    let mut rx = mode.subscribe();
    let mode = match rx.wait_for(|m| *m != FaultMode::Stall).await {
        Ok(m) => *m,
        Err(_) => FaultMode::Pass,
    };
    match mode {
        FaultMode::Cut => Err(Error::unavailable("injected fault: connection cut")),
        FaultMode::LoseAnswers => {
            let _ = op.await;
            std::future::pending().await
        }
        FaultMode::Chaos(config) => match dice.draw(config, true) {
            ChaosAction::Pass => op.await,
            ChaosAction::Delay(d) => {
                tokio::time::sleep(d).await;
                op.await
            }
            ChaosAction::Hold(d) => {
                let answer = op.await;
                tokio::time::sleep(d).await;
                answer
            }
            ChaosAction::Lose => {
                let _ = op.await;
                Err(Error::unavailable(
                    "injected fault (chaos): the answer was lost after the store carried the \
                     operation out",
                ))
            }
        },
        FaultMode::Pass | FaultMode::Stall => op.await,
    }
}

impl Hook for Faults {
    fn around<'a, T: Send + 'static>(&'a self, call: Call<'a>, op: Answer<'a, T>) -> Answer<'a, T> {
        self.count(call.operation);
        let takes_lease = matches!(
            call.operation,
            Operation::Claim
                | Operation::AcquirePartition
                | Operation::PollAcquire
                | Operation::ClaimPermit
        );
        let shared = &self.shared;
        if takes_lease {
            Box::pin(apply(
                &shared.mode,
                &shared.dice,
                apply(&shared.claim_mode, &shared.claim_dice, op),
            ))
        } else {
            Box::pin(apply(&shared.mode, &shared.dice, op))
        }
    }

    fn changes(&self, topic: &Topic, hints: Option<Wakeups>) -> Option<Wakeups> {
        let inner = hints?;
        let hub = Hub::new();
        // Connected as the mode says before anyone subscribes, so no first hint is spurious.
        hub.set_connected(inner.is_connected() && self.hint_mode() != HintMode::Cut);
        let out = hub.subscribe(topic);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(relay(
                    inner,
                    hub,
                    topic.clone(),
                    self.shared.hints.subscribe(),
                ));
            }
            // No runtime to relay on: a cut link is all this hook can give.
            Err(_) => hub.set_connected(false),
        }
        Some(out)
    }
}

/// `true` with `percent` % probability.
fn roll(percent: u8) -> bool {
    rand::random::<f64>() * 100.0 < f64::from(percent)
}

/// Relays `inner`'s hints for `topic` to `hub`'s subscribers as the hint mode says, until they
/// are all gone.
async fn relay(mut inner: Wakeups, hub: Hub, topic: Topic, mut modes: watch::Receiver<HintMode>) {
    let mut hook_gone = false;
    loop {
        let mode = *modes.borrow_and_update();
        hub.set_connected(inner.is_connected() && mode != HintMode::Cut);
        if hub.subscribed_topics() == 0 {
            return;
        }
        tokio::select! {
            () = inner.changed() => match mode {
                HintMode::Pass => hub.notify(&topic),
                HintMode::Cut => {}
                HintMode::Chaos { drop_percent, duplicate_percent } => {
                    if !roll(drop_percent) {
                        hub.notify(&topic);
                        if roll(duplicate_percent) {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            hub.notify(&topic);
                        }
                    }
                }
            },
            r = modes.changed(), if !hook_gone => hook_gone = r.is_err(),
            // Look now and then whether anyone still listens.
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

impl crate::FaultSwitch for Faults {
    fn pass(&self) {
        self.set_mode(FaultMode::Pass);
    }
    fn stall(&self) {
        self.set_mode(FaultMode::Stall);
    }
    fn cut(&self) {
        self.set_mode(FaultMode::Cut);
    }
    fn chaos(&self, config: ChaosConfig) {
        self.set_mode(FaultMode::Chaos(config));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::GroupStore;
    use lease_core::{
        ErrorKind, LeaseStore,
        backend::{partitions::PartitionStore, polling::PollingStore, slots::SlotStore},
    };
    use lease_local::MemoryStore;

    fn stores_of_every_kind<S: LeaseStore + SlotStore + GroupStore + PollingStore>(_: &S) {}

    #[tokio::test]
    async fn the_faulty_memory_store_is_what_the_memory_store_is() {
        let store = faulty(MemoryStore::new());
        // A SlotStore (and a group and polling store) as the memory store is: checked at
        // compile time.
        stores_of_every_kind(&store);
        assert_eq!(store.capabilities(), MemoryStore::new().capabilities());
        assert_eq!(store.backend(), MemoryStore::new().backend());
        store.available().await.unwrap();
        store.hook().set_mode(FaultMode::Cut);
        let cut = store.available().await;
        assert!(cut.is_err_and(|e| e.is(ErrorKind::Unavailable)));
        store.hook().set_mode(FaultMode::Pass);
        store.available().await.unwrap();
    }

    #[tokio::test]
    async fn the_claim_mode_hits_only_the_operations_that_take_a_lease() {
        let store = faulty(MemoryStore::new());
        let holder = lease_core::backend::HolderToken::mint();
        store.hook().set_claim_mode(FaultMode::Cut);
        let ttl = std::time::Duration::from_secs(5);
        assert!(store.claim("a", &holder, "i", ttl).await.is_err());
        assert!(store.acquire_partition("g", 0, "o", ttl).await.is_err());
        assert!(store.try_acquire("p", b"h", ttl).await.is_err());
        assert_eq!(store.get("a").await.unwrap(), None);
        assert!(store.owners("g").await.unwrap().is_empty());
        store.hook().set_claim_mode(FaultMode::Pass);
        assert!(store.claim("a", &holder, "i", ttl).await.unwrap().is_some());
        let counts = store.hook().counts();
        assert_eq!((counts.claims, counts.gets), (4, 2));
    }

    /// What a caller sees of one operation under chaos: whether it answered `Ok`, and how
    /// long it took (in paused time: exactly what the hook waited, to the timer's millisecond).
    async fn chaos_run(config: ChaosConfig, ops: usize) -> Vec<(bool, Duration)> {
        let store = faulty(MemoryStore::new());
        store.hook().set_mode(FaultMode::Chaos(config));
        let mut seen = Vec::new();
        for i in 0..ops {
            let began = tokio::time::Instant::now();
            let answer = store.get(&format!("name-{i}")).await;
            seen.push((answer.is_ok(), began.elapsed()));
        }
        assert_eq!(store.hook().chaos_counts().total(), ops as u64);
        seen
    }

    #[tokio::test(start_paused = true)]
    async fn chaos_replays_the_same_faults_for_the_same_seed() {
        let ms = Duration::from_millis;
        let config = ChaosConfig::builder(9)
            .delay(250, ms(1), ms(20))
            .hold(250, ms(50), ms(500))
            .lose(250)
            .build()
            .unwrap();
        let first = chaos_run(config, 200).await;
        let again = chaos_run(config, 200).await;
        assert_eq!(first, again, "the same seed met other faults");
        assert_ne!(first, chaos_run(config.with_seed(10), 200).await);
        // And they are the configuration's own sequence: a delay or a hold waits its length
        // (the timer rounds up to the millisecond), a lost answer fails at once.
        for (i, (action, (ok, took))) in config.actions().zip(&first).enumerate() {
            let (want_ok, wait) = match action {
                ChaosAction::Pass => (true, Duration::ZERO),
                ChaosAction::Delay(d) | ChaosAction::Hold(d) => (true, d),
                ChaosAction::Lose => (false, Duration::ZERO),
            };
            assert_eq!(*ok, want_ok, "operation {i}: {action:?}");
            assert!(
                *took >= wait && *took <= wait + ms(2),
                "operation {i}: {action:?} took {took:?}"
            );
        }
        let lost = first.iter().filter(|(ok, _)| !ok).count();
        assert!((20..90).contains(&lost), "{lost} of 200 lost at 25 %");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_answer_was_carried_out_and_a_held_one_comes_late() {
        let ms = Duration::from_millis;
        let store = faulty(MemoryStore::new());
        let holder = lease_core::backend::HolderToken::mint();
        let ttl = Duration::from_secs(5);
        let lose_all = ChaosConfig::builder(1)
            .delay(0, ms(0), ms(0))
            .hold(0, ms(0), ms(0))
            .lose(1000)
            .build()
            .unwrap();
        // Only the claims meet the chaos.
        store.hook().set_claim_mode(FaultMode::Chaos(lose_all));
        let lost = store.claim("a", &holder, "i", ttl).await;
        assert!(lost.is_err_and(|e| e.is(ErrorKind::Unavailable)));
        let held = store.get("a").await.unwrap();
        assert!(
            held.is_some_and(|info| info.live),
            "the claim whose answer was lost took no effect"
        );
        assert_eq!(store.hook().claim_chaos_counts().lost, 1);
        assert_eq!(store.hook().chaos_counts().total(), 0);

        let hold_all = lose_all
            .to_builder()
            .lose(0)
            .hold(1000, ms(300), ms(300))
            .build()
            .unwrap();
        store.hook().set_claim_mode(FaultMode::Pass);
        store.hook().set_mode(FaultMode::Chaos(hold_all));
        let began = tokio::time::Instant::now();
        let late = tokio::time::timeout(ms(100), LeaseStore::release(&store, "a", &holder)).await;
        assert!(late.is_err(), "a held answer came at once");
        // The release was carried out before its answer was held.
        store.hook().set_mode(FaultMode::Pass);
        let after = store.get("a").await.unwrap();
        assert!(
            after.as_ref().is_none_or(|info| !info.live),
            "not released: {after:?}"
        );
        assert!(began.elapsed() < ms(300));
    }
}
