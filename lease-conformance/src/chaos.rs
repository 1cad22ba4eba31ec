//! The chaos fault mode, [`FaultMode::Chaos`](crate::FaultMode::Chaos): per request, at random
//! from a seed, pass, delay, hold the answer for a while, or lose the answer after the server
//! carried the request out.
//!
//! A [`ChaosConfig`] holds the seed, the chance of each action and the bounds of the delays and
//! holds; it is built checked ([`ChaosConfig::builder`]) and is `Copy`, so it travels inside a
//! [`FaultMode`](crate::FaultMode). Each time a hook or a proxy is switched to chaos it starts
//! the seed's sequence of actions from its beginning and draws the next action for each request
//! in the order the requests reach it ([`ChaosConfig::actions`] lists the same sequence). A
//! sequential client therefore meets the same faults on every run with the same seed; with
//! concurrent requests the sequence of actions is the same but which request meets which
//! depends on the order they arrive in, which no seed fixes. Print the seed with a failure so
//! it can be replayed.
//!
//! What "a request" is differs: the [`Faults`](crate::Faults) hook draws once per store
//! operation; the [`FaultProxy`](crate::FaultProxy) sees bytes, not protocol messages, and draws
//! once per chunk it reads from a client (one read of up to 16 KiB), which may hold several
//! pipelined requests or part of one.
//!
//! ```
//! use std::time::Duration;
//! use lease_conformance::chaos::{ChaosAction, ChaosConfig};
//!
//! let config = ChaosConfig::builder(7)
//!     .delay(200, Duration::from_millis(1), Duration::from_millis(20))
//!     .hold(50, Duration::from_millis(50), Duration::from_millis(500))
//!     .lose(30)
//!     .build()?;
//! let first: Vec<ChaosAction> = config.actions().take(20).collect();
//! // The same seed, the same sequence.
//! assert_eq!(first, config.actions().take(20).collect::<Vec<_>>());
//! assert!(ChaosConfig::builder(7).lose(1001).build().is_err());
//! # Ok::<(), lease_conformance::chaos::ChaosConfigError>(())
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Chances are given in per mille: 1000 is every request.
pub const WHOLE: u16 = 1000;

/// The longest delay or hold a [`ChaosConfig`] accepts: a fault longer than this is no longer
/// a slow network but a dead one (use [`FaultMode::Stall`](crate::FaultMode::Stall)).
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// What chaos does to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChaosAction {
    /// The request and its answer pass unchanged.
    Pass,
    /// The request waits this long before it goes on to the server (the hook: before the
    /// operation starts; the proxy: before the chunk is forwarded).
    Delay(Duration),
    /// The request goes on at once; its answer is held back this long after the server gave
    /// it (the hook: after the operation finished; the proxy: everything the server sends on
    /// that connection waits until then), so the caller may give up on an operation that took
    /// effect, and a caller that waits gets a late answer.
    Hold(Duration),
    /// The request goes on; its answer is lost. The hook carries the operation out and then
    /// fails it with `Unavailable` ("the answer was lost"): the caller cannot tell whether it
    /// took effect. The proxy forwards the chunk, drops the next bytes the server sends on that
    /// connection and closes the connection (its byte stream no longer lines up with its
    /// requests), as a network that lost the answer and reset the connection; a server that
    /// never answers leaves the client to its own timeout.
    Lose,
}

/// How many requests met each [`ChaosAction`] since the mode was last switched to chaos.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChaosCounts {
    /// Passed unchanged.
    pub passed: u64,
    /// Delayed before going on.
    pub delayed: u64,
    /// Whose answers were held back.
    pub held: u64,
    /// Whose answers were lost.
    pub lost: u64,
}

impl ChaosCounts {
    /// Requests that met any action.
    pub fn total(&self) -> u64 {
        self.passed + self.delayed + self.held + self.lost
    }
}

impl fmt::Display for ChaosCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} passed, {} delayed, {} held, {} answers lost",
            self.passed, self.delayed, self.held, self.lost
        )
    }
}

/// Why a [`ChaosBuilder`] refused its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChaosConfigError {
    /// The chances of delay, hold and loss add up to more than [`WHOLE`] (1000 per mille).
    ChancesOverWhole {
        /// Their sum, in per mille.
        total: u32,
    },
    /// A lower bound is above its upper bound.
    BoundsReversed {
        /// `"delay"` or `"hold"`.
        what: &'static str,
        /// The lower bound given.
        min: Duration,
        /// The upper bound given.
        max: Duration,
    },
    /// An upper bound is longer than [`MAX_WAIT`].
    TooLong {
        /// `"delay"` or `"hold"`.
        what: &'static str,
        /// The bound given.
        max: Duration,
    },
    /// The focus is empty (it would match every request: leave it out instead).
    EmptyFocus,
}

impl fmt::Display for ChaosConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChaosConfigError::ChancesOverWhole { total } => write!(
                f,
                "chaos: the chances of delay, hold and loss add up to {total} per mille, more \
                 than the whole ({WHOLE})"
            ),
            ChaosConfigError::BoundsReversed { what, min, max } => write!(
                f,
                "chaos: the {what}'s lower bound {min:?} is above its upper bound {max:?}"
            ),
            ChaosConfigError::TooLong { what, max } => write!(
                f,
                "chaos: the {what}'s upper bound {max:?} is longer than {MAX_WAIT:?} (use a \
                 stall for a network that stops answering)"
            ),
            ChaosConfigError::EmptyFocus => write!(
                f,
                "chaos: the focus is empty (it would match every request; leave it out)"
            ),
        }
    }
}

impl std::error::Error for ChaosConfigError {}

/// The settings of [`FaultMode::Chaos`](crate::FaultMode::Chaos): a seed, the chance of each
/// [`ChaosAction`] in per mille (passing takes what is left), and the bounds of the delays and
/// holds (drawn evenly between them, to the microsecond).
///
/// Built checked by [`ChaosConfig::builder`]; [`ChaosConfig::new`] gives the defaults: 20 %
/// delayed 1–20 ms, 5 % held 50–500 ms, 3 % answers lost, 72 % passed, no focus.
///
/// A **focus** ([`ChaosBuilder::focus`]) aims the lost answers at some requests on the
/// [`FaultProxy`](crate::FaultProxy): only a chunk containing the focus bytes can lose its
/// answer (a loss drawn for any other chunk passes it, and counts as passed); delays and holds
/// still hit every chunk. Say a backend's protocol marks the requests a test wants to hit (a
/// NATS key create carries `Nats-Expected-Last-Subject-Sequence: 0`): a focus on those bytes
/// loses their answers often without losing every other answer as often (each lost answer
/// costs the client a reconnection and a timeout). The [`Faults`](crate::Faults) hook sees
/// operations, not bytes, and ignores the focus (aim it at the operations that take a lease
/// with [`set_claim_mode`](crate::Faults::set_claim_mode)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChaosConfig {
    seed: u64,
    delay_per_mille: u16,
    delay: (Duration, Duration),
    hold_per_mille: u16,
    hold: (Duration, Duration),
    lose_per_mille: u16,
    focus: Option<&'static [u8]>,
}

impl Default for ChaosConfig {
    /// The defaults of [`ChaosConfig::new`] with seed 1.
    fn default() -> Self {
        ChaosConfig::new(1)
    }
}

impl ChaosConfig {
    /// The default chances and bounds (see [`ChaosConfig`]) with `seed`.
    pub const fn new(seed: u64) -> ChaosConfig {
        ChaosConfig {
            seed,
            delay_per_mille: 200,
            delay: (Duration::from_millis(1), Duration::from_millis(20)),
            hold_per_mille: 50,
            hold: (Duration::from_millis(50), Duration::from_millis(500)),
            lose_per_mille: 30,
            focus: None,
        }
    }

    /// A builder starting from the defaults with `seed`.
    pub fn builder(seed: u64) -> ChaosBuilder {
        ChaosBuilder {
            config: ChaosConfig::new(seed),
        }
    }

    /// A builder starting from these settings.
    pub fn to_builder(self) -> ChaosBuilder {
        ChaosBuilder { config: self }
    }

    /// The same settings with another seed.
    pub fn with_seed(self, seed: u64) -> ChaosConfig {
        ChaosConfig { seed, ..self }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The chance of a delay, in per mille.
    pub fn delay_per_mille(&self) -> u16 {
        self.delay_per_mille
    }

    /// The bounds of a delay.
    pub fn delay_bounds(&self) -> (Duration, Duration) {
        self.delay
    }

    /// The chance of a held answer, in per mille.
    pub fn hold_per_mille(&self) -> u16 {
        self.hold_per_mille
    }

    /// The bounds of a hold.
    pub fn hold_bounds(&self) -> (Duration, Duration) {
        self.hold
    }

    /// The chance of a lost answer, in per mille.
    pub fn lose_per_mille(&self) -> u16 {
        self.lose_per_mille
    }

    /// The bytes a chunk must contain to lose its answer on a proxy, if losses are aimed.
    pub fn focus(&self) -> Option<&'static [u8]> {
        self.focus
    }

    /// Whether `chunk`, read from a client, may lose its answer: it contains the focus, or
    /// there is none.
    pub fn may_lose(&self, chunk: &[u8]) -> bool {
        match self.focus {
            None => true,
            Some(focus) => chunk.windows(focus.len()).any(|w| w == focus),
        }
    }

    /// The endless sequence of actions this seed gives, in the order a hook or a proxy
    /// switched to this configuration hands them out.
    pub fn actions(&self) -> ChaosActions {
        ChaosActions {
            config: *self,
            rng: SplitMix64(self.seed),
        }
    }
}

impl fmt::Display for ChaosConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per_cent = |p: u16| f64::from(p) / 10.0;
        write!(
            f,
            "chaos seed {}: {}% delayed {:?}–{:?}, {}% held {:?}–{:?}, {}% answers lost",
            self.seed,
            per_cent(self.delay_per_mille),
            self.delay.0,
            self.delay.1,
            per_cent(self.hold_per_mille),
            self.hold.0,
            self.hold.1,
            per_cent(self.lose_per_mille)
        )?;
        if let Some(focus) = self.focus {
            write!(
                f,
                " (only of chunks containing \"{}\")",
                focus.escape_ascii()
            )?;
        }
        Ok(())
    }
}

/// Settings of a [`ChaosConfig`], checked by [`build`](ChaosBuilder::build).
#[derive(Debug, Clone, Copy)]
#[must_use = "a builder does nothing until built"]
pub struct ChaosBuilder {
    config: ChaosConfig,
}

impl ChaosBuilder {
    /// The seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self
    }

    /// The chance of a delay (per mille) and its bounds.
    pub fn delay(mut self, per_mille: u16, min: Duration, max: Duration) -> Self {
        self.config.delay_per_mille = per_mille;
        self.config.delay = (min, max);
        self
    }

    /// The chance of a held answer (per mille) and the bounds of the hold.
    pub fn hold(mut self, per_mille: u16, min: Duration, max: Duration) -> Self {
        self.config.hold_per_mille = per_mille;
        self.config.hold = (min, max);
        self
    }

    /// The chance of a lost answer (per mille).
    pub fn lose(mut self, per_mille: u16) -> Self {
        self.config.lose_per_mille = per_mille;
        self
    }

    /// Aims the lost answers on a proxy at the chunks containing `bytes` (see
    /// [`ChaosConfig`]).
    pub fn focus(mut self, bytes: &'static [u8]) -> Self {
        self.config.focus = Some(bytes);
        self
    }

    /// The configuration, once its settings are checked.
    ///
    /// # Errors
    ///
    /// [`ChaosConfigError::ChancesOverWhole`] when the chances add up to more than 1000 per
    /// mille, [`BoundsReversed`](ChaosConfigError::BoundsReversed) when a lower bound is above
    /// its upper bound, [`TooLong`](ChaosConfigError::TooLong) when a bound is over
    /// [`MAX_WAIT`], [`EmptyFocus`](ChaosConfigError::EmptyFocus) for an empty focus.
    pub fn build(self) -> Result<ChaosConfig, ChaosConfigError> {
        let c = self.config;
        let total = u32::from(c.delay_per_mille)
            + u32::from(c.hold_per_mille)
            + u32::from(c.lose_per_mille);
        if total > u32::from(WHOLE) {
            return Err(ChaosConfigError::ChancesOverWhole { total });
        }
        if c.focus.is_some_and(<[u8]>::is_empty) {
            return Err(ChaosConfigError::EmptyFocus);
        }
        for (what, (min, max)) in [("delay", c.delay), ("hold", c.hold)] {
            if min > max {
                return Err(ChaosConfigError::BoundsReversed { what, min, max });
            }
            if max > MAX_WAIT {
                return Err(ChaosConfigError::TooLong { what, max });
            }
        }
        Ok(c)
    }
}

/// SplitMix64: small, fast, and the same on every build and platform (a seed replays
/// anywhere).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The endless sequence of [`ChaosAction`]s of one [`ChaosConfig`] ([`ChaosConfig::actions`]).
#[derive(Debug, Clone)]
pub struct ChaosActions {
    config: ChaosConfig,
    rng: SplitMix64,
}

impl ChaosActions {
    fn between(&mut self, (min, max): (Duration, Duration)) -> Duration {
        let lo = u64::try_from(min.as_micros()).unwrap_or(u64::MAX);
        let hi = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
        let span = hi.saturating_sub(lo).saturating_add(1);
        Duration::from_micros(lo.saturating_add(self.rng.next_u64() % span))
    }

    /// The next action.
    pub fn draw(&mut self) -> ChaosAction {
        let c = self.config;
        let roll = self.rng.next_u64() % u64::from(WHOLE);
        let lose = u64::from(c.lose_per_mille);
        let hold = lose + u64::from(c.hold_per_mille);
        let delay = hold + u64::from(c.delay_per_mille);
        if roll < lose {
            ChaosAction::Lose
        } else if roll < hold {
            ChaosAction::Hold(self.between(c.hold))
        } else if roll < delay {
            ChaosAction::Delay(self.between(c.delay))
        } else {
            ChaosAction::Pass
        }
    }
}

impl Iterator for ChaosActions {
    type Item = ChaosAction;

    fn next(&mut self) -> Option<ChaosAction> {
        Some(self.draw())
    }
}

/// What a hook or a proxy keeps for its chaos: the sequence of the configuration last switched
/// to, and the counts of what it handed out.
#[derive(Debug, Default)]
pub(crate) struct Dice {
    actions: std::sync::Mutex<Option<ChaosActions>>,
    passed: AtomicU64,
    delayed: AtomicU64,
    held: AtomicU64,
    lost: AtomicU64,
}

impl Dice {
    /// Starts `config`'s sequence from its beginning and the counts from zero.
    pub(crate) fn reset(&self, config: ChaosConfig) {
        let mut actions = self
            .actions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *actions = Some(config.actions());
        for c in [&self.passed, &self.delayed, &self.held, &self.lost] {
            c.store(0, Ordering::SeqCst);
        }
        tracing::info!(%config, "chaos mode");
    }

    /// The next action of the sequence (`config`'s, started now when none was started); a loss
    /// drawn where `may_lose` is false passes instead.
    pub(crate) fn draw(&self, config: ChaosConfig, may_lose: bool) -> ChaosAction {
        let action = {
            let mut actions = self
                .actions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match actions.as_mut() {
                Some(a) if a.config == config => a.draw(),
                _ => {
                    let mut fresh = config.actions();
                    let action = fresh.draw();
                    *actions = Some(fresh);
                    action
                }
            }
        };
        let action = match action {
            ChaosAction::Lose if !may_lose => ChaosAction::Pass,
            a => a,
        };
        let counter = match action {
            ChaosAction::Pass => &self.passed,
            ChaosAction::Delay(_) => &self.delayed,
            ChaosAction::Hold(_) => &self.held,
            ChaosAction::Lose => &self.lost,
        };
        counter.fetch_add(1, Ordering::SeqCst);
        action
    }

    /// The counts so far.
    pub(crate) fn counts(&self) -> ChaosCounts {
        ChaosCounts {
            passed: self.passed.load(Ordering::SeqCst),
            delayed: self.delayed.load(Ordering::SeqCst),
            held: self.held.load(Ordering::SeqCst),
            lost: self.lost.load(Ordering::SeqCst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused_with_their_reason() {
        let ms = Duration::from_millis;
        assert_eq!(
            ChaosConfig::builder(1)
                .delay(600, ms(1), ms(2))
                .hold(300, ms(1), ms(2))
                .lose(200)
                .build(),
            Err(ChaosConfigError::ChancesOverWhole { total: 1100 })
        );
        assert_eq!(
            ChaosConfig::builder(1).hold(10, ms(5), ms(4)).build(),
            Err(ChaosConfigError::BoundsReversed {
                what: "hold",
                min: ms(5),
                max: ms(4)
            })
        );
        let err = ChaosConfig::builder(1)
            .delay(10, ms(1), MAX_WAIT + ms(1))
            .build()
            .err();
        assert!(
            matches!(err, Some(ChaosConfigError::TooLong { what: "delay", .. })),
            "{err:?}"
        );
        assert!(err.is_some_and(|e| e.to_string().contains("longer than")));
        // The whole is allowed: every request faulted.
        assert!(
            ChaosConfig::builder(1)
                .delay(0, ms(0), ms(0))
                .hold(0, ms(0), ms(0))
                .lose(WHOLE)
                .build()
                .is_ok_and(|c| c.actions().take(50).all(|a| a == ChaosAction::Lose))
        );
    }

    #[test]
    fn a_seed_gives_one_sequence_with_the_chances_asked() {
        let config = ChaosConfig::new(42);
        let a: Vec<_> = config.actions().take(10_000).collect();
        assert_eq!(a, config.actions().take(10_000).collect::<Vec<_>>());
        assert_ne!(
            a,
            config
                .with_seed(43)
                .actions()
                .take(10_000)
                .collect::<Vec<_>>()
        );
        let count = |f: fn(&ChaosAction) -> bool| a.iter().filter(|x| f(x)).count();
        let lost = count(|x| *x == ChaosAction::Lose);
        let held = count(|x| matches!(x, ChaosAction::Hold(_)));
        let delayed = count(|x| matches!(x, ChaosAction::Delay(_)));
        // 3 %, 5 % and 20 % of 10 000, give or take.
        assert!((200..400).contains(&lost), "{lost}");
        assert!((380..620).contains(&held), "{held}");
        assert!((1_800..2_200).contains(&delayed), "{delayed}");
        for x in &a {
            match *x {
                ChaosAction::Delay(d) => {
                    assert!((Duration::from_millis(1)..=Duration::from_millis(20)).contains(&d))
                }
                ChaosAction::Hold(d) => {
                    assert!((Duration::from_millis(50)..=Duration::from_millis(500)).contains(&d))
                }
                _ => {}
            }
        }
    }
}
