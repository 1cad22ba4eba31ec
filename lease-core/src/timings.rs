//! The protocol's durations, validated together so that a holder always stops before anyone
//! else can start.

use std::time::Duration;

use crate::store::error::{Error, Result};
use crate::store::validate::validate_ttl;

/// The share of the lease kept back for clock-rate drift between this process and the store,
/// in percent: `deadline + grace + STORE_CLOCK_GRANULARITY ≤ lease − lease ×
/// DRIFT_MARGIN_PERCENT / 100`.
pub const DRIFT_MARGIN_PERCENT: u32 = 1;

/// The coarsest clock a store keeps expiries in: one millisecond. A store records a claim at
/// its "now" truncated to the millisecond, so the lease can expire up to this much before
/// `start of the request + lease` by the caller's clock; [`Timings`] keep it back in full, on
/// top of the drift margin (which alone covers it only for leases of 100 ms or more).
pub const STORE_CLOCK_GRANULARITY: Duration = Duration::from_millis(1);

/// The durations that drive holding a lease.
///
/// | timing | default | meaning |
/// |---|---|---|
/// | `lease` | 15 s | how long the store keeps the lease after a claim or renewal |
/// | `renew_every` | 2 s | cadence of renewals, failed ones retried at the same cadence |
/// | `deadline` | 10 s | the term ends when no renewal succeeded within this long of the start of the last one that did |
/// | `attempt_timeout` | 5 s | bound on one store operation (also cut at the deadline) |
/// | `grace` | 4 s | once the lease is lost, how long the work has to return before the fail action |
/// | `retry` | 2 s | pause between campaigns in [`run_elected`](crate::Coordinator::run_elected) |
/// | `jitter` | 0.5 s | up to this much is added to each pause, at random |
///
/// A `Timings` value is validated when built; it always satisfies:
///
/// - `renew_every < deadline`: a failed renewal is retried before the deadline;
/// - `attempt_timeout ≤ deadline / 2`: at least two attempts fit in the deadline (each attempt is
///   further cut to the time left before the deadline, and attempts never overlap);
/// - `deadline + grace + 1 ms ≤ lease − 1 %`: the work has stopped before the store lets anyone
///   else claim, with a margin of [`DRIFT_MARGIN_PERCENT`] for clock-rate drift and
///   [`STORE_CLOCK_GRANULARITY`] for a store clock truncated to the millisecond. (So a lease
///   needs at least about 18 ms in the default proportions.)
///
/// ```
/// use std::time::Duration;
/// use lease_core::Timings;
///
/// let t = Timings::default();
/// assert_eq!(t.lease(), Duration::from_secs(15));
///
/// // Every timing derived from one lease duration, in the default proportions.
/// let short = Timings::from_lease(Duration::from_millis(300)).unwrap();
/// assert_eq!(short.renew_every(), Duration::from_millis(40));
///
/// // Unsafe values are refused, naming the inequality they break.
/// let err = Timings::builder().grace(Duration::from_secs(5)).build().unwrap_err();
/// assert!(err.to_string().contains("deadline + grace"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    lease: Duration,
    renew_every: Duration,
    deadline: Duration,
    attempt_timeout: Duration,
    grace: Duration,
    retry: Duration,
    jitter: Duration,
}

impl Default for Timings {
    /// The protocol's defaults: lease 15 s, renew every 2 s, deadline 10 s, attempts 5 s,
    /// grace 4 s, retry 2 s with up to 0.5 s of jitter.
    fn default() -> Self {
        Timings {
            lease: Duration::from_secs(15),
            renew_every: Duration::from_secs(2),
            deadline: Duration::from_secs(10),
            attempt_timeout: Duration::from_secs(5),
            grace: Duration::from_secs(4),
            retry: Duration::from_secs(2),
            jitter: Duration::from_millis(500),
        }
    }
}

impl Timings {
    /// All timings derived from one lease duration in the default proportions (renew 2/15,
    /// deadline 10/15, attempt half the deadline, grace 4/15, retry 2/15, jitter a quarter of
    /// the retry), then validated.
    pub fn from_lease(lease: Duration) -> Result<Timings> {
        validate_ttl(lease)?;
        let part = |n: u32| lease * n / 15;
        let deadline = part(10);
        let retry = part(2);
        TimingsBuilder {
            t: Timings {
                lease,
                renew_every: part(2),
                deadline,
                attempt_timeout: deadline / 2,
                grace: part(4),
                retry,
                jitter: retry / 4,
            },
        }
        .build()
    }

    /// A builder starting from the defaults.
    pub fn builder() -> TimingsBuilder {
        TimingsBuilder {
            t: Timings::default(),
        }
    }

    /// A builder starting from these timings.
    pub fn to_builder(&self) -> TimingsBuilder {
        TimingsBuilder { t: *self }
    }

    /// Checks that these timings keep back a store clock of `granularity` in full:
    /// `deadline + grace + granularity ≤ lease − 1 % drift margin`. Every valid `Timings` keeps
    /// back [`STORE_CLOCK_GRANULARITY`]; a store whose clock is coarser (it says so in
    /// [`Capabilities::clock_granularity`](crate::backend::Capabilities::clock_granularity):
    /// memcached's ticks in whole seconds) can end a lease up to `granularity` early, and a
    /// [`Coordinator`](crate::Coordinator) over it is built only when this holds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::Timings;
    ///
    /// let t = Timings::default(); // lease 15 s, deadline 10 s, grace 4 s
    /// assert!(t.check_clock_granularity(Duration::from_millis(500)).is_ok());
    /// let err = t.check_clock_granularity(Duration::from_secs(1)).unwrap_err();
    /// assert!(err.to_string().contains("clock granularity"), "{err}");
    /// ```
    pub fn check_clock_granularity(&self, granularity: Duration) -> Result<()> {
        let margin = self.lease * DRIFT_MARGIN_PERCENT / 100;
        let kept_back = margin + granularity.max(STORE_CLOCK_GRANULARITY);
        if self.deadline + self.grace > self.lease.saturating_sub(kept_back) {
            return Err(Error::invalid_timings(format!(
                "deadline + grace ≤ lease − {DRIFT_MARGIN_PERCENT}% drift margin − store clock \
                 granularity does not hold: {:?} + {:?} > {:?} − {margin:?} − {granularity:?} \
                 (the store's clock ticks in steps of {granularity:?}, so a lease can end that \
                 much early); lengthen the lease or shorten the deadline or grace",
                self.deadline, self.grace, self.lease
            )));
        }
        Ok(())
    }

    /// How long the store keeps the lease after a claim or a renewal.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The cadence of renewals.
    pub fn renew_every(&self) -> Duration {
        self.renew_every
    }

    /// The local deadline, from the start of the last successful renewal.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The bound on one store operation.
    pub fn attempt_timeout(&self) -> Duration {
        self.attempt_timeout
    }

    /// The step-down grace: how long work has to return once its lease is lost.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// The pause between campaigns.
    pub fn retry(&self) -> Duration {
        self.retry
    }

    /// The most added to each campaign pause, at random.
    pub fn jitter(&self) -> Duration {
        self.jitter
    }

    /// A campaign pause: `retry` plus a random share of `jitter`, in `[retry, retry + jitter]`.
    ///
    /// The pause is never shorter than `retry`, so N candidates issue at most N / `retry`
    /// claims per second between them.
    pub fn retry_delay(&self) -> Duration {
        self.retry_delay_at(rand::random::<f64>())
    }

    /// The campaign pause for a given point `unit` in `[0, 1]` of the jitter range.
    pub fn retry_delay_at(&self, unit: f64) -> Duration {
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.retry + self.jitter.mul_f64(unit)
    }
}

/// Builds a [`Timings`], checking the inequalities in [`build`](TimingsBuilder::build).
#[derive(Debug, Clone)]
pub struct TimingsBuilder {
    t: Timings,
}

impl TimingsBuilder {
    /// Sets the lease duration (the others are kept; see [`Timings::from_lease`] to scale all).
    pub fn lease(mut self, d: Duration) -> Self {
        self.t.lease = d;
        self
    }

    /// Sets the renewal cadence.
    pub fn renew_every(mut self, d: Duration) -> Self {
        self.t.renew_every = d;
        self
    }

    /// Sets the local deadline.
    pub fn deadline(mut self, d: Duration) -> Self {
        self.t.deadline = d;
        self
    }

    /// Sets the bound on one store operation.
    pub fn attempt_timeout(mut self, d: Duration) -> Self {
        self.t.attempt_timeout = d;
        self
    }

    /// Sets the step-down grace.
    pub fn grace(mut self, d: Duration) -> Self {
        self.t.grace = d;
        self
    }

    /// Sets the pause between campaigns.
    pub fn retry(mut self, d: Duration) -> Self {
        self.t.retry = d;
        self
    }

    /// Sets the most added at random to each campaign pause.
    pub fn jitter(mut self, d: Duration) -> Self {
        self.t.jitter = d;
        self
    }

    /// Validates and returns the timings, or an [`InvalidTimings`](crate::ErrorKind) error
    /// naming the inequality that failed.
    pub fn build(self) -> Result<Timings> {
        let t = self.t;
        validate_ttl(t.lease)?;
        if t.renew_every.is_zero() {
            return Err(Error::invalid_timings("renew interval must be positive"));
        }
        if t.renew_every >= t.deadline {
            return Err(Error::invalid_timings(format!(
                "renew interval < local deadline does not hold: renew every {:?}, deadline {:?}; \
                 renew more often or lengthen the deadline",
                t.renew_every, t.deadline
            )));
        }
        if t.attempt_timeout.is_zero() {
            return Err(Error::invalid_timings("attempt timeout must be positive"));
        }
        if t.attempt_timeout > t.deadline / 2 {
            return Err(Error::invalid_timings(format!(
                "attempt timeout ≤ deadline / 2 does not hold: attempt timeout {:?}, deadline {:?}; \
                 shorten the attempt timeout",
                t.attempt_timeout, t.deadline
            )));
        }
        let margin = t.lease * DRIFT_MARGIN_PERCENT / 100;
        let kept_back = margin + STORE_CLOCK_GRANULARITY;
        if t.deadline + t.grace > t.lease.saturating_sub(kept_back) {
            return Err(Error::invalid_timings(format!(
                "deadline + grace ≤ lease − {DRIFT_MARGIN_PERCENT}% drift margin − \
                 {STORE_CLOCK_GRANULARITY:?} store clock granularity does not hold: \
                 {:?} + {:?} > {:?} − {:?} − {STORE_CLOCK_GRANULARITY:?} (a store keeps its \
                 clock in whole milliseconds, so a lease can end up to 1 ms early); lengthen \
                 the lease or shorten the deadline or grace",
                t.deadline, t.grace, t.lease, margin
            )));
        }
        if t.retry.is_zero() {
            return Err(Error::invalid_timings("campaign retry must be positive"));
        }
        if t.retry > crate::store::validate::MAX_TTL || t.jitter > crate::store::validate::MAX_TTL {
            return Err(Error::invalid_timings(format!(
                "campaign retry {:?} + jitter {:?} is absurd; keep each under a day",
                t.retry, t.jitter
            )));
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_protocol() {
        let d = Timings::default();
        assert_eq!(Timings::builder().build().unwrap(), d);
        assert_eq!(Timings::from_lease(Duration::from_secs(15)).unwrap(), d);
        assert_eq!(d.attempt_timeout(), d.deadline() / 2);
    }

    #[test]
    fn each_inequality_is_named() {
        let cases = [
            (
                Timings::builder().renew_every(Duration::from_secs(10)),
                "renew interval < local deadline",
            ),
            (
                Timings::builder().attempt_timeout(Duration::from_millis(5001)),
                "attempt timeout ≤ deadline / 2",
            ),
            (
                Timings::builder().grace(Duration::from_millis(4851)),
                "deadline + grace",
            ),
            (
                Timings::builder().lease(Duration::ZERO),
                "shorter than the minimum",
            ),
            (
                Timings::builder().lease(Duration::from_secs(90_000)),
                "exceeds the maximum",
            ),
            (
                Timings::builder().retry(Duration::ZERO),
                "retry must be positive",
            ),
            (
                Timings::builder().renew_every(Duration::ZERO),
                "renew interval must be positive",
            ),
        ];
        for (b, needle) in cases {
            let e = b.build().unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidTimings);
            assert!(
                e.to_string().contains(needle),
                "{e} should mention {needle}"
            );
        }
        // The boundary itself is allowed: 10 s + 4.849 s = 15 s − 150 ms − 1 ms.
        assert!(
            Timings::builder()
                .grace(Duration::from_millis(4849))
                .build()
                .is_ok()
        );
    }

    /// Stores keep their clocks in whole milliseconds: a claim recorded at a truncated "now"
    /// can expire up to 1 ms before `start + lease` by the caller's clock. Timings whose
    /// deadline and grace fit only within the drift margin, not within that millisecond too,
    /// would let the work run past the store's expiry.
    #[test]
    fn deadlines_leave_room_for_millisecond_truncation() {
        let ms = Duration::from_millis;
        // lease 50 ms: drift margin 0.5 ms; deadline + grace = 49.5 ms fits the drift margin
        // but a store expiry truncated by 1 ms comes at 49 ms.
        let tight = Timings::builder()
            .lease(ms(50))
            .renew_every(ms(5))
            .deadline(ms(30))
            .attempt_timeout(ms(15))
            .grace(Duration::from_micros(19_500))
            .retry(ms(5))
            .jitter(ms(1));
        let e = tight.clone().build().unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidTimings);
        assert!(e.to_string().contains("1ms"), "{e}");
        // With the millisecond left over it is accepted.
        assert!(tight.grace(Duration::from_micros(18_500)).build().is_ok());
        // The same holds for derived timings: a 10 ms lease leaves 0.67 ms after the grace.
        let e = Timings::from_lease(ms(10)).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidTimings);
        assert!(Timings::from_lease(ms(20)).is_ok());
        // Default proportions: the boundary moves by the millisecond.
        assert!(Timings::builder().grace(ms(4849)).build().is_ok());
        assert!(Timings::builder().grace(ms(4850)).build().is_err());
    }

    #[test]
    fn jitter_stays_in_bounds() {
        let t = Timings::default();
        assert_eq!(t.retry_delay_at(0.0), t.retry());
        assert_eq!(t.retry_delay_at(1.0), t.retry() + t.jitter());
        assert_eq!(t.retry_delay_at(f64::NAN), t.retry());
        let samples: Vec<Duration> = (0..2000).map(|_| t.retry_delay()).collect();
        let lo = samples.iter().min().copied().unwrap();
        let hi = samples.iter().max().copied().unwrap();
        assert!(lo >= t.retry() && hi <= t.retry() + t.jitter());
        // Spread over the range, not stuck at one point (fails with odds below 1e-100).
        assert!(lo < t.retry() + t.jitter() / 8, "{lo:?}");
        assert!(hi > t.retry() + t.jitter() * 7 / 8, "{hi:?}");
    }
}
