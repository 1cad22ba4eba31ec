//! SQLite's clock for expiries: the host's boot clock, read by the process.
//!
//! SQLite has no server, so whatever clock a statement reads is the clock of the process that
//! runs it. `unixepoch()` reads the wall clock, which differs between processes under
//! `faketime` and jumps for all of them when the host's clock is stepped: a contender would
//! then see a live lease as expired. `CLOCK_BOOTTIME` is one clock for every process of the
//! host: it is never stepped (NTP and `date -s` move only the wall clock), it counts through a
//! suspend (as the holders' local deadlines do), and it is read here through rustix, which
//! calls the kernel (its vDSO or the system call) directly: an `LD_PRELOAD` shim such as
//! libfaketime, which replaces libc's `clock_gettime`, cannot move it.
//!
//! The boot clock starts again at each boot, so every expiry is recorded with the boot it was
//! measured in (the kernel's boot id): a lease recorded under another boot has expired, since
//! its holder died with that boot.
//!
//! On other platforms than Linux, the wall clock stands in for it (and the boot id is a
//! constant): the behaviour of before, with its limits.

/// The boot clock in milliseconds (Linux: `CLOCK_BOOTTIME`; elsewhere the wall clock since the
/// Unix epoch).
#[cfg(target_os = "linux")]
pub(crate) fn now_ms() -> i64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    ts.tv_sec
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec / 1_000_000)
}

/// The boot clock in milliseconds (Linux: `CLOCK_BOOTTIME`; elsewhere the wall clock since the
/// Unix epoch).
#[cfg(not(target_os = "linux"))]
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The kernel's boot id, which changes at every boot.
#[cfg(target_os = "linux")]
pub(crate) async fn boot_id() -> std::io::Result<String> {
    const PATH: &str = "/proc/sys/kernel/random/boot_id";
    let read = tokio::task::spawn_blocking(|| std::fs::read_to_string(PATH)).await;
    match read {
        Ok(r) => r.map(|s| s.trim().to_owned()),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

/// A constant: the wall clock stands in for the boot clock.
#[cfg(not(target_os = "linux"))]
pub(crate) async fn boot_id() -> std::io::Result<String> {
    Ok("wall-clock".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_clock_moves_and_stays_below_the_wall_clock_floor() {
        let a = now_ms();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = now_ms();
        assert!(b - a >= 19 && b - a < 5000, "{a} {b}");
        if cfg!(target_os = "linux") {
            assert!(b < crate::config::WALL_CLOCK_FLOOR_MS, "{b}");
        }
    }
}
