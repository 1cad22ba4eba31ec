//! Checks every name and duration passes before any I/O.

use std::time::Duration;

use crate::store::error::{Error, Result};

/// The longest name, in bytes, a store accepts unless it says otherwise.
pub const DEFAULT_MAX_NAME_BYTES: usize = 255;

/// The shortest lease a store accepts: stores keep expiry in whole milliseconds.
pub const MIN_TTL: Duration = Duration::from_millis(1);

/// The longest lease a store accepts: one day. A lease is kept alive by renewal; a longer one
/// only delays the takeover after a crash.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Checks that `name` can be stored by a store that holds at most `max_bytes` bytes per name.
///
/// A name must be non-empty, at most `max_bytes` bytes of UTF-8, and free of control characters
/// (U+0000–U+001F, U+007F), which several stores cannot keep or compare reliably. Names are
/// compared byte for byte: `"Job"`, `"job"` and `"job "` are three names.
///
/// ```
/// use lease_core::backend::validate_name;
/// assert!(validate_name("orders/compactor", 255).is_ok());
/// assert!(validate_name("", 255).is_err());
/// assert!(validate_name(&"x".repeat(256), 255).is_err());
/// ```
pub fn validate_name(name: &str, max_bytes: usize) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid_name(
            "lease name is empty; give a non-empty name",
        ));
    }
    if name.len() > max_bytes {
        return Err(Error::invalid_name(format!(
            "lease name is {} bytes long; this store holds names of at most {max_bytes} bytes",
            name.len()
        )));
    }
    if let Some((at, c)) = name.char_indices().find(|(_, c)| c.is_control()) {
        return Err(Error::invalid_name(format!(
            "lease name holds the control character {:?} at byte {at}; use printable characters",
            c
        )));
    }
    Ok(())
}

/// Checks a lease duration: at least [`MIN_TTL`], at most [`MAX_TTL`].
///
/// ```
/// use std::time::Duration;
/// use lease_core::backend::validate_ttl;
/// assert!(validate_ttl(Duration::from_secs(15)).is_ok());
/// assert!(validate_ttl(Duration::ZERO).is_err());
/// ```
pub fn validate_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL {
        return Err(Error::invalid_timings(format!(
            "lease duration {ttl:?} is shorter than the minimum {MIN_TTL:?}; give a positive duration"
        )));
    }
    if ttl > MAX_TTL {
        return Err(Error::invalid_timings(format!(
            "lease duration {ttl:?} exceeds the maximum {MAX_TTL:?}; a lease is kept alive by \
             renewal, so choose seconds to minutes"
        )));
    }
    Ok(())
}

/// Milliseconds in `d`, rounded up, as stores keep them.
pub fn ceil_millis(d: Duration) -> u64 {
    let ms = d.as_millis();
    let extra = u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(ms + extra).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn names() {
        assert!(validate_name("a", 1).is_ok());
        assert!(validate_name("é", 2).is_ok());
        let e = validate_name("é", 1).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName);
        assert!(e.to_string().contains("2 bytes"), "{e}");
        assert!(validate_name("a\0b", 10).is_err());
        assert!(validate_name("a\nb", 10).is_err());
        assert!(validate_name("job ", 10).is_ok());
    }

    #[test]
    fn ttls() {
        assert_eq!(
            validate_ttl(Duration::ZERO).unwrap_err().kind(),
            ErrorKind::InvalidTimings
        );
        assert!(validate_ttl(Duration::from_micros(999)).is_err());
        assert!(validate_ttl(MIN_TTL).is_ok());
        assert!(validate_ttl(MAX_TTL).is_ok());
        assert!(validate_ttl(MAX_TTL + Duration::from_millis(1)).is_err());
        assert_eq!(ceil_millis(Duration::from_micros(1500)), 2);
        assert_eq!(ceil_millis(Duration::from_millis(15)), 15);
    }
}
