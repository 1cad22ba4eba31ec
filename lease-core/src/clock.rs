//! Local time for deadlines: monotonic, and on Linux counting through suspend.
//!
//! Process clocks are used only for local deadlines, never to judge a lease's expiry, which
//! belongs to the store's clock. A [`Stamp`] records two clocks at once: tokio's (so tests in
//! paused tokio time drive every deadline) and, on Linux, `CLOCK_BOOTTIME`, which keeps
//! counting while the machine is suspended. Elapsed time is the larger of the two, so a holder
//! resumed after a suspend longer than its deadline sees at once that its time ran out.

use std::time::Duration;

use tokio::time::Instant;

/// A point in local time, for measuring deadlines.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    tokio: Instant,
    boot: Option<Duration>,
}

impl Stamp {
    /// Now.
    pub fn now() -> Stamp {
        Stamp {
            tokio: Instant::now(),
            boot: boot_time(),
        }
    }

    /// Time elapsed since this stamp: the larger of tokio's and the boot clock's.
    pub fn elapsed(&self) -> Duration {
        let tokio = self.tokio.elapsed();
        match (self.boot, boot_time()) {
            (Some(then), Some(now)) => tokio.max(now.saturating_sub(then)),
            _ => tokio,
        }
    }

    /// The tokio instant `d` after this stamp, for timers.
    pub fn tokio_instant_after(&self, d: Duration) -> Instant {
        self.tokio + d
    }

    /// Time left until `d` after this stamp has elapsed (zero once it has).
    pub fn remaining(&self, d: Duration) -> Duration {
        d.saturating_sub(self.elapsed())
    }
}

#[cfg(target_os = "linux")]
fn boot_time() -> Option<Duration> {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    Some(Duration::new(secs, nanos))
}

#[cfg(not(target_os = "linux"))]
fn boot_time() -> Option<Duration> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn paused_time_drives_elapsed() {
        let s = Stamp::now();
        tokio::time::advance(Duration::from_secs(60)).await;
        let e = s.elapsed();
        assert!(
            e >= Duration::from_secs(60) && e < Duration::from_secs(61),
            "{e:?}"
        );
        assert_eq!(s.remaining(Duration::from_secs(30)), Duration::ZERO);
    }

    #[test]
    fn boot_clock_is_read() {
        if cfg!(target_os = "linux") {
            assert!(boot_time().is_some());
        }
    }
}
