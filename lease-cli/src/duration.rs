//! Durations on the command line: `15s`, `500ms`, `2m`, `1h`, `1m30s`.

use std::time::Duration;

use crate::exit::{CliError, Exit};

/// Parses a positive duration: one or more `<whole number><unit>` parts, the units `ms`, `s`,
/// `m` and `h`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, CliError> {
    let bad = |why: &str| {
        CliError::new(
            Exit::BadDuration,
            format!("bad duration '{text}': {why}; write e.g. 15s, 500ms, 2m or 1m30s"),
        )
    };
    // A message that says itself what to write.
    let bad_exactly =
        |why: String| CliError::new(Exit::BadDuration, format!("bad duration '{text}': {why}"));
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad("it is empty"));
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad("expected a whole number"));
        }
        let (number, after) = rest.split_at(digits);
        if let Some(fraction) = after.strip_prefix(['.', ',']) {
            return Err(bad_exactly(fractional(number, fraction)));
        }
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(unit_len);
        let n: u64 = number.parse().map_err(|_| bad("the number is too large"))?;
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => n
                .checked_mul(60)
                .map(Duration::from_secs)
                .ok_or_else(|| bad("it is too long"))?,
            "h" => n
                .checked_mul(3600)
                .map(Duration::from_secs)
                .ok_or_else(|| bad("it is too long"))?,
            "" if n == 0 && total.is_zero() && after.is_empty() => {
                return Err(bad("it must be longer than zero"));
            }
            "" => {
                return Err(bad_exactly(format!(
                    "a number needs a unit (ms, s, m or h); write e.g. {n}s for {n} seconds"
                )));
            }
            _ => return Err(bad("unknown unit; use ms, s, m or h")),
        };
        total = total
            .checked_add(part)
            .ok_or_else(|| bad("it is too long"))?;
        rest = after;
    }
    if total.is_zero() {
        return Err(bad("it must be longer than zero"));
    }
    Ok(total)
}

/// What to say of a number with a fraction, `whole.fraction_and_unit` (`1` and `5s` of `1.5s`):
/// fractions are not accepted, and the same duration in a smaller unit when there is one
/// (`1500ms`).
fn fractional(whole: &str, fraction_and_unit: &str) -> String {
    let digits = fraction_and_unit
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    let (fraction, rest) = fraction_and_unit.split_at(digits);
    let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
    let unit = &rest[..unit_len];
    let unit_ms: u128 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => 0,
    };
    let exact = (|| {
        let scale = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
        let scaled: u128 = format!("{whole}{fraction}").parse().ok()?;
        let ms = scaled.checked_mul(unit_ms)?;
        (unit_ms > 0 && ms % scale == 0 && ms > 0).then_some(ms / scale)
    })();
    match exact {
        Some(ms) => {
            let write = [(3_600_000, "h"), (60_000, "m"), (1000, "s"), (1, "ms")]
                .into_iter()
                .find(|(size, _)| ms % size == 0)
                .map_or_else(
                    || format!("{ms}ms"),
                    |(size, u)| format!("{}{u}", ms / size),
                );
            format!("fractions are not accepted; write {write}")
        }
        None => "fractions are not accepted; write whole numbers of a smaller unit, e.g. \
                 1500ms for 1.5s"
            .to_owned(),
    }
}

/// A duration for people: `1.5s`, `250ms`, `2m03s`.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        let s = d.as_secs();
        if s < 3600 {
            format!("{}m{:02}s", s / 60, s % 60)
        } else {
            format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(parse_duration("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        for (bad, says) in [
            ("1.5s", "fractions are not accepted; write 1500ms"),
            ("2.5m", "fractions are not accepted; write 150s"),
            ("0.5h", "fractions are not accepted; write 30m"),
            ("1,25s", "fractions are not accepted; write 1250ms"),
            ("1.5ms", "write whole numbers of a smaller unit"),
            ("1.5", "write whole numbers of a smaller unit"),
            ("0", "it must be longer than zero"),
            ("00", "it must be longer than zero"),
            (
                "15",
                "a number needs a unit (ms, s, m or h); write e.g. 15s",
            ),
            ("1m30", "a number needs a unit"),
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert_eq!(e.exit(), Exit::BadDuration, "{bad}");
            assert!(e.message().contains(says), "{bad}: {}", e.message());
        }
        for bad in [
            "",
            "0s",
            "0ms",
            "15",
            "s",
            "1.5s",
            "3d",
            "-1s",
            "99999999999999999999s",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert_eq!(e.exit(), Exit::BadDuration, "{bad}");
        }
    }

    #[test]
    fn humans() {
        assert_eq!(human(Duration::from_millis(250)), "250ms");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
        assert_eq!(human(Duration::from_secs(123)), "2m03s");
    }
}
