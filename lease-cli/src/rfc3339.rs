//! Wall-clock times as RFC 3339 text in UTC, to the millisecond (`2026-12-07T13:45:01.123Z`):
//! what `lease watch` and the JSON log print.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `at` as RFC 3339 in UTC with milliseconds, e.g. `2026-12-07T13:45:01.123Z`. Times before
/// 1970 (a clock set far back) print as the epoch.
pub(crate) fn format(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since.as_secs();
    let millis = since.subsec_millis();
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Now, as [`format`] prints it.
pub(crate) fn now() -> String {
    format(SystemTime::now())
}

/// The proleptic Gregorian date of `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
    }

    #[test]
    fn known_instants() {
        assert_eq!(format(at(0, 0)), "1970-01-01T00:00:00.000Z");
        // `date -u -d @1796651101` → Mon Dec  7 13:45:01 UTC 2026.
        assert_eq!(format(at(1_796_651_101, 123)), "2026-12-07T13:45:01.123Z");
        // A leap day, and the last millisecond of a leap year.
        assert_eq!(format(at(951_782_400, 0)), "2000-02-29T00:00:00.000Z");
        assert_eq!(format(at(1_735_689_599, 999)), "2024-12-31T23:59:59.999Z");
        assert_eq!(
            format(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00.000Z"
        );
    }
}
