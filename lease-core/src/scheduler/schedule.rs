//! When a job runs: a cron expression in a time zone, or a fixed interval on the Unix epoch.
//!
//! A [`Schedule`] maps the absolute time line (milliseconds since the Unix epoch, UTC) to the
//! job's instants. Every replica computes the same instants from the same schedule, whatever
//! its own time zone, so an instant names one round cluster-wide.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

use crate::store::error::{Error, Result};

/// The instants a job runs at.
///
/// - [`Schedule::cron`]: a cron expression read on the wall clock of a named IANA time zone
///   (or [`Tz::UTC`]), with the daylight-saving rules below.
/// - [`Schedule::every`]: every `period`, at the multiples of the period since the Unix epoch
///   (plus an optional [`offset`](Schedule::offset)). Such instants live on the absolute time
///   line: no time zone or daylight-saving change ever moves them. To run at local times, use
///   cron.
///
/// # Cron expressions
///
/// Five fields (`minute hour day-of-month month day-of-week`), or six with seconds first, or
/// seven with a year last; names (`MON`, `JAN`), ranges, lists, steps (`*/5`, `10-50/10`),
/// `L`, `W`, `#` and the nicknames (`@hourly`, `@daily`, …), as parsed by the
/// [croner](https://docs.rs/croner) crate. Day-of-month and day-of-week combine with OR, as
/// in Vixie cron (prefix the weekday with `+` for AND).
///
/// # Daylight-saving time
///
/// A cron expression is read on the zone's wall clock, and wall clocks skip or repeat an hour
/// when daylight-saving time starts or ends. The rules (croner's, after Vixie cron and the Open
/// Cron Pattern Specification) depend on whether the expression names one fixed time of day:
///
/// | | fixed time (`0 30 2 * * *`: single second, minute and hour) | intervals and wildcards (`0 */15 * * * *`, `0 0 * * * *`) |
/// |---|---|---|
/// | **skipped hour** (spring forward, 02:00 → 03:00) | runs **once**, at the first time after the gap (03:00) | the instants in the gap do not exist and are **skipped** |
/// | **repeated hour** (fall back, 03:00 → 02:00) | runs **once**, at the first pass (02:30 summer time) | runs in **both** passes: every wall-clock match, in real-time order |
///
/// So a daily report at 02:30 in `Europe/Berlin` runs every day exactly once, even on the two
/// days a year when 02:30 happens zero or two times; a job every 15 minutes keeps running every
/// 15 real minutes through both changes. A job in [`Tz::UTC`] never meets a change.
///
/// ```
/// use lease_core::Schedule;
/// use lease_core::scheduler::Tz;
///
/// let report = Schedule::cron("0 30 2 * * *", Tz::Europe__Berlin)?;
/// // 2026-03-29 in Berlin: 02:30 does not exist, the run moves to 03:00 CEST (01:00 UTC).
/// let before = 1_774_656_000_000; // 2026-03-28T00:00:00Z
/// let first = report.next_after(before).unwrap();
/// let second = report.next_after(first).unwrap();
/// assert_eq!(Schedule::format(first), "2026-03-28T01:30:00.000Z");
/// assert_eq!(Schedule::format(second), "2026-03-29T01:00:00.000Z");
///
/// let tick = Schedule::every(std::time::Duration::from_secs(2))?;
/// assert_eq!(tick.next_after(1_001), Some(2_000));
/// # Ok::<(), lease_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Schedule {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Cron {
        expr: String,
        cron: Box<Cron>,
        tz: Tz,
    },
    Every {
        period_ms: i64,
        offset_ms: i64,
    },
}

/// The longest interval accepted by [`Schedule::every`]: 366 days.
const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);

impl Schedule {
    /// A cron expression (5, 6 or 7 fields: see the type's docs) on the wall clock of `tz`.
    ///
    /// Refused with [`InvalidTimings`](crate::ErrorKind::InvalidTimings) when it does not parse,
    /// or when it never matches an instant.
    pub fn cron(expr: &str, tz: Tz) -> Result<Schedule> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expr)
            .map_err(|e| {
                Error::invalid_timings(format!("cron expression '{expr}' is invalid: {e}"))
                    .with_source(e)
            })?;
        let schedule = Schedule {
            kind: Kind::Cron {
                expr: expr.trim().to_owned(),
                cron: Box::new(cron),
                tz,
            },
        };
        // A pattern such as "0 0 30 2 *" (30 February) parses but never matches.
        if schedule.next_after(0).is_none() {
            return Err(Error::invalid_timings(format!(
                "cron expression '{expr}' never matches an instant"
            )));
        }
        Ok(schedule)
    }

    /// A cron expression in UTC: `Schedule::cron(expr, Tz::UTC)`.
    pub fn cron_utc(expr: &str) -> Result<Schedule> {
        Schedule::cron(expr, Tz::UTC)
    }

    /// Every `period`, at the multiples of it since the Unix epoch (1970-01-01T00:00:00Z), so
    /// every replica computes the same instants: `every(1 h)` runs at the top of each UTC hour.
    ///
    /// The period must be a whole, positive number of milliseconds, at most 366 days; otherwise
    /// [`InvalidTimings`](crate::ErrorKind::InvalidTimings).
    pub fn every(period: Duration) -> Result<Schedule> {
        if period.is_zero()
            || period > MAX_PERIOD
            || !period.subsec_nanos().is_multiple_of(1_000_000)
        {
            return Err(Error::invalid_timings(format!(
                "a schedule's period must be a whole number of milliseconds between 1 ms and \
                 366 days; got {period:?}"
            )));
        }
        let period_ms = i64::try_from(period.as_millis())
            .map_err(|_| Error::invalid_timings(format!("period {period:?} is too long")))?;
        Ok(Schedule {
            kind: Kind::Every {
                period_ms,
                offset_ms: 0,
            },
        })
    }

    /// Shifts an interval's instants by `offset` from the epoch's multiples: `every(1 h)` with
    /// `offset(30 min)` runs at half past each UTC hour. The offset is taken modulo the period.
    /// No effect on a cron schedule.
    pub fn offset(mut self, offset: Duration) -> Schedule {
        if let Kind::Every {
            period_ms,
            offset_ms,
        } = &mut self.kind
        {
            let millis = i64::try_from(offset.as_millis()).unwrap_or(i64::MAX);
            *offset_ms = millis.rem_euclid(*period_ms);
        }
        self
    }

    /// The time zone a cron schedule is read in; UTC for an interval.
    pub fn time_zone(&self) -> Tz {
        match &self.kind {
            Kind::Cron { tz, .. } => *tz,
            Kind::Every { .. } => Tz::UTC,
        }
    }

    /// The interval's period, `None` for a cron schedule.
    pub fn period(&self) -> Option<Duration> {
        match self.kind {
            Kind::Every { period_ms, .. } => Some(Duration::from_millis(period_ms.unsigned_abs())),
            Kind::Cron { .. } => None,
        }
    }

    /// The first instant strictly after `ms` (milliseconds since the epoch); `None` when the
    /// schedule has no more instants (a cron expression limited to past years, or past year
    /// 4999).
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        match &self.kind {
            Kind::Every {
                period_ms,
                offset_ms,
            } => {
                let k = ms.checked_sub(*offset_ms)?.div_euclid(*period_ms);
                k.checked_add(1)?
                    .checked_mul(*period_ms)?
                    .checked_add(*offset_ms)
            }
            Kind::Cron { cron, tz, .. } => {
                // Cron instants fall on whole seconds: search from the second `ms` is in.
                let start = at_second(ms, *tz)?;
                let next = cron.find_next_occurrence(&start, false).ok()?;
                Some(next.timestamp_millis()).filter(|n| *n > ms)
            }
        }
    }

    /// The last instant at or before `ms`; `None` when there is none.
    pub fn latest_at_or_before(&self, ms: i64) -> Option<i64> {
        match &self.kind {
            Kind::Every {
                period_ms,
                offset_ms,
            } => {
                let k = ms.checked_sub(*offset_ms)?.div_euclid(*period_ms);
                k.checked_mul(*period_ms)?.checked_add(*offset_ms)
            }
            Kind::Cron { cron, tz, .. } => {
                let start = at_second(ms, *tz)?;
                let prev = cron.find_previous_occurrence(&start, true).ok()?;
                Some(prev.timestamp_millis()).filter(|p| *p <= ms)
            }
        }
    }

    /// The instants in `(after, until]`, in order, at most `limit` of them.
    pub fn between(&self, after: i64, until: i64, limit: usize) -> Vec<i64> {
        let mut out = Vec::new();
        let mut cursor = after;
        while out.len() < limit {
            match self.next_after(cursor) {
                Some(next) if next <= until => {
                    out.push(next);
                    cursor = next;
                }
                _ => break,
            }
        }
        out
    }

    /// How many instants fall in `(after, until]`, counting at most `limit`.
    pub(crate) fn count_between(&self, after: i64, until: i64, limit: u64) -> u64 {
        if until <= after {
            return 0;
        }
        match self.kind {
            Kind::Every { .. } => {
                let first = self.next_after(after);
                let last = self.latest_at_or_before(until);
                match (first, last, self.kind_period_ms()) {
                    (Some(f), Some(l), Some(p)) if l >= f => u64::try_from((l - f) / p + 1)
                        .unwrap_or(u64::MAX)
                        .min(limit),
                    _ => 0,
                }
            }
            Kind::Cron { .. } => {
                let cap = usize::try_from(limit).unwrap_or(usize::MAX);
                u64::try_from(self.between(after, until, cap).len()).unwrap_or(u64::MAX)
            }
        }
    }

    fn kind_period_ms(&self) -> Option<i64> {
        match self.kind {
            Kind::Every { period_ms, .. } => Some(period_ms),
            Kind::Cron { .. } => None,
        }
    }

    /// An instant as a UTC date and time (`None` outside chrono's range).
    pub fn to_utc(ms: i64) -> Option<DateTime<Utc>> {
        DateTime::<Utc>::from_timestamp_millis(ms)
    }

    /// An instant as RFC 3339 in UTC with milliseconds (`2026-03-29T01:00:00.000Z`), as the
    /// scheduler's log lines show it; the raw number when out of range.
    pub fn format(ms: i64) -> String {
        match Schedule::to_utc(ms) {
            Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            None => format!("{ms} ms"),
        }
    }
}

/// `ms` rounded down to its second, in `tz`.
fn at_second(ms: i64, tz: Tz) -> Option<DateTime<Tz>> {
    let secs = ms.div_euclid(1000);
    Utc.timestamp_opt(secs, 0)
        .single()
        .map(|t| t.with_timezone(&tz))
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Cron { expr, tz, .. } => write!(f, "cron '{expr}' in {}", tz.name()),
            Kind::Every {
                period_ms,
                offset_ms: 0,
            } => write!(f, "every {period_ms} ms"),
            Kind::Every {
                period_ms,
                offset_ms,
            } => write!(f, "every {period_ms} ms + {offset_ms} ms"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use chrono_tz::America::New_York;
    use chrono_tz::Europe::Berlin;

    /// Milliseconds of a UTC date and time.
    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> i64 {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
            .single()
            .unwrap()
            .timestamp_millis()
    }

    fn fmt_all(v: &[i64]) -> Vec<String> {
        v.iter().map(|ms| Schedule::format(*ms)).collect()
    }

    fn local(ms: i64, tz: Tz) -> String {
        Schedule::to_utc(ms)
            .unwrap()
            .with_timezone(&tz)
            .format("%Y-%m-%d %H:%M:%S %Z")
            .to_string()
    }

    #[test]
    fn intervals_align_to_the_epoch() {
        let s = Schedule::every(Duration::from_secs(2)).unwrap();
        assert_eq!(s.next_after(0), Some(2000));
        assert_eq!(s.next_after(1999), Some(2000));
        assert_eq!(s.next_after(2000), Some(4000));
        assert_eq!(s.latest_at_or_before(3999), Some(2000));
        assert_eq!(s.latest_at_or_before(4000), Some(4000));
        assert_eq!(s.next_after(-1), Some(0));
        assert_eq!(s.latest_at_or_before(-1), Some(-2000));
        assert_eq!(s.between(1000, 9000, 100), vec![2000, 4000, 6000, 8000]);
        assert_eq!(s.count_between(1000, 9000, 100), 4);
        assert_eq!(s.count_between(1000, 9000, 2), 2);
        assert_eq!(s.count_between(2000, 2000, 100), 0);
        let hourly = Schedule::every(Duration::from_secs(3600))
            .unwrap()
            .offset(Duration::from_secs(1800));
        let at = utc(2026, 5, 1, 10, 0, 0);
        assert_eq!(hourly.next_after(at), Some(utc(2026, 5, 1, 10, 30, 0)));
        assert_eq!(hourly.to_string(), "every 3600000 ms + 1800000 ms");
        assert_eq!(hourly.period(), Some(Duration::from_secs(3600)));
    }

    #[test]
    fn bad_schedules_are_refused() {
        for bad in [
            Duration::ZERO,
            Duration::from_micros(1500),
            Duration::from_secs(400 * 86_400),
        ] {
            let e = Schedule::every(bad).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidTimings, "{bad:?}");
        }
        for bad in ["", "not cron", "61 * * * *", "0 0 30 2 *"] {
            let e = Schedule::cron(bad, Tz::UTC).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidTimings, "{bad:?}: {e}");
        }
    }

    #[test]
    fn cron_with_and_without_seconds() {
        let five = Schedule::cron_utc("*/5 * * * *").unwrap();
        let at = utc(2026, 5, 1, 10, 2, 30) + 250;
        assert_eq!(five.next_after(at), Some(utc(2026, 5, 1, 10, 5, 0)));
        assert_eq!(
            five.latest_at_or_before(at),
            Some(utc(2026, 5, 1, 10, 0, 0))
        );
        let six = Schedule::cron_utc("*/20 * * * * *").unwrap();
        assert_eq!(six.next_after(at), Some(utc(2026, 5, 1, 10, 2, 40)));
        // An instant itself is "at or before", not "after".
        let on = utc(2026, 5, 1, 10, 2, 40);
        assert_eq!(six.latest_at_or_before(on), Some(on));
        assert_eq!(six.next_after(on), Some(utc(2026, 5, 1, 10, 3, 0)));
        assert_eq!(six.to_string(), "cron '*/20 * * * * *' in UTC");
    }

    // Europe/Berlin in 2026: summer time starts on 29 March at 02:00 CET (01:00 UTC), clocks
    // jump to 03:00 CEST; it ends on 25 October at 03:00 CEST (01:00 UTC), clocks go back to
    // 02:00 CET.

    #[test]
    fn fixed_time_in_the_skipped_hour_runs_once_after_the_gap() {
        let s = Schedule::cron("0 30 2 * * *", Berlin).unwrap();
        let got = s.between(utc(2026, 3, 27, 0, 0, 0), utc(2026, 3, 31, 0, 0, 0), 10);
        let shown: Vec<String> = got.iter().map(|ms| local(*ms, Berlin)).collect();
        assert_eq!(
            shown,
            [
                "2026-03-27 02:30:00 CET",
                "2026-03-28 02:30:00 CET",
                "2026-03-29 03:00:00 CEST", // 02:30 does not exist: first time after the gap
                "2026-03-30 02:30:00 CEST",
            ]
        );
        // Going backwards finds the same instants.
        for w in got.windows(2) {
            assert_eq!(s.latest_at_or_before(w[1] - 1), Some(w[0]));
        }
    }

    #[test]
    fn fixed_time_in_the_repeated_hour_runs_once_at_the_first_pass() {
        let s = Schedule::cron("0 30 2 * * *", Berlin).unwrap();
        let got = s.between(utc(2026, 10, 24, 0, 0, 0), utc(2026, 10, 27, 0, 0, 0), 10);
        assert_eq!(
            fmt_all(&got),
            [
                "2026-10-24T00:30:00.000Z", // 02:30 CEST
                "2026-10-25T00:30:00.000Z", // 02:30 CEST, the first pass; not again at 02:30 CET
                "2026-10-26T01:30:00.000Z", // 02:30 CET
            ]
        );
        for w in got.windows(2) {
            assert_eq!(s.latest_at_or_before(w[1] - 1), Some(w[0]));
        }
    }

    #[test]
    fn wildcard_jobs_skip_the_gap_and_run_in_both_passes() {
        let s = Schedule::cron("0 */30 * * * *", Berlin).unwrap();
        // Spring: 01:00, 01:30 CET, then 03:00 CEST: the 02:xx instants do not exist. The UTC
        // instants stay 30 minutes apart.
        let spring = s.between(utc(2026, 3, 28, 23, 59, 0), utc(2026, 3, 29, 2, 0, 0), 10);
        let shown: Vec<String> = spring.iter().map(|ms| local(*ms, Berlin)).collect();
        assert_eq!(
            shown,
            [
                "2026-03-29 01:00:00 CET",
                "2026-03-29 01:30:00 CET",
                "2026-03-29 03:00:00 CEST",
                "2026-03-29 03:30:00 CEST",
                "2026-03-29 04:00:00 CEST",
            ]
        );
        assert!(spring.windows(2).all(|w| w[1] - w[0] == 30 * 60 * 1000));
        // Autumn: 02:00 and 02:30 happen twice, and run twice, in real-time order.
        let autumn = s.between(utc(2026, 10, 24, 23, 59, 0), utc(2026, 10, 25, 2, 0, 0), 10);
        let shown: Vec<String> = autumn.iter().map(|ms| local(*ms, Berlin)).collect();
        assert_eq!(
            shown,
            [
                "2026-10-25 02:00:00 CEST",
                "2026-10-25 02:30:00 CEST",
                "2026-10-25 02:00:00 CET",
                "2026-10-25 02:30:00 CET",
                "2026-10-25 03:00:00 CET",
            ]
        );
        assert!(autumn.windows(2).all(|w| w[1] - w[0] == 30 * 60 * 1000));
        for w in autumn.windows(2) {
            assert_eq!(s.latest_at_or_before(w[1] - 1), Some(w[0]));
        }
    }

    #[test]
    fn hourly_in_new_york_across_both_changes() {
        let s = Schedule::cron("0 0 * * * *", New_York).unwrap();
        // 8 March 2026: 02:00 EST → 03:00 EDT. 1 November 2026: 02:00 EDT → 01:00 EST.
        let spring = s.between(utc(2026, 3, 8, 5, 30, 0), utc(2026, 3, 8, 8, 0, 0), 10);
        let shown: Vec<String> = spring.iter().map(|ms| local(*ms, New_York)).collect();
        assert_eq!(
            shown,
            [
                "2026-03-08 01:00:00 EST",
                "2026-03-08 03:00:00 EDT",
                "2026-03-08 04:00:00 EDT",
            ]
        );
        let autumn = s.between(utc(2026, 11, 1, 4, 30, 0), utc(2026, 11, 1, 7, 0, 0), 10);
        let shown: Vec<String> = autumn.iter().map(|ms| local(*ms, New_York)).collect();
        assert_eq!(
            shown,
            [
                "2026-11-01 01:00:00 EDT",
                "2026-11-01 01:00:00 EST",
                "2026-11-01 02:00:00 EST",
            ]
        );
        // Every hour of real time, through both changes.
        assert!(spring.windows(2).all(|w| w[1] - w[0] == 3_600_000));
        assert!(autumn.windows(2).all(|w| w[1] - w[0] == 3_600_000));
    }

    #[test]
    fn the_same_expression_differs_by_zone_only() {
        let utc_daily = Schedule::cron_utc("0 0 3 * * *").unwrap();
        let berlin_daily = Schedule::cron("0 0 3 * * *", Berlin).unwrap();
        let at = utc(2026, 6, 1, 0, 0, 0);
        assert_eq!(utc_daily.next_after(at), Some(utc(2026, 6, 1, 3, 0, 0)));
        assert_eq!(berlin_daily.next_after(at), Some(utc(2026, 6, 1, 1, 0, 0)));
        assert_eq!(berlin_daily.time_zone(), Berlin);
    }
}
