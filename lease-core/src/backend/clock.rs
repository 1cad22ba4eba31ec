//! Local time for deadlines: monotonic, and on Linux counting through suspend.
//!
//! Process clocks are used only for local deadlines, never to judge a lease's expiry, which
//! belongs to the store's clock. A [`Stamp`] records two clocks at once: tokio's (so tests in
//! paused tokio time drive every deadline) and, on Linux, `CLOCK_BOOTTIME`, which keeps
//! counting while the machine is suspended. Elapsed time is the larger of the two, so a holder
//! resumed after a suspend longer than its deadline sees at once that its time ran out.
//!
//! Every local deadline in the workspace is a [`Deadline`]: a span after a [`Stamp`]. Waiting
//! for one ([`Deadline::reached`]) sleeps on tokio's timer, which does not count time spent
//! suspended, so it is also woken when the process notices a resume: a watcher thread compares
//! the boot clock with the monotonic clock every [`RESUME_CHECK`] and wakes every waiter when
//! they drift apart. A deadline that passed while the machine slept therefore fires within
//! `RESUME_CHECK` of the resume, not up to a whole tokio sleep later.
//!
//! Tests move the boot clock with `testing::suspend` (feature `test-util`): it jumps the
//! calling thread's boot clock forward, as a suspend would, and wakes every waiter.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How often the resume watcher compares the boot clock with the monotonic clock.
pub const RESUME_CHECK: Duration = Duration::from_millis(100);

/// A drift between the two clocks larger than this, between two checks, counts as a resume.
const RESUME_DRIFT: Duration = Duration::from_millis(20);

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

    /// The tokio instant `d` after this stamp, for timers (far in the future when `d` does not
    /// fit). It does not count a suspend; prefer [`Deadline::reached`] to sleep until it.
    pub fn tokio_instant_after(&self, d: Duration) -> Instant {
        self.tokio.checked_add(d).unwrap_or_else(far_future)
    }

    /// Time left until `d` after this stamp has elapsed (zero once it has).
    pub fn remaining(&self, d: Duration) -> Duration {
        d.saturating_sub(self.elapsed())
    }

    /// The deadline `d` after this stamp.
    pub fn deadline_after(self, d: Duration) -> Deadline {
        Deadline::after(self, d)
    }
}

/// A local deadline: a span of local time after a [`Stamp`], measured on the boot clock where
/// there is one (so time spent suspended counts) and on tokio's clock in paused-time tests.
///
/// `Deadline::after(stamp, Duration::MAX)` never passes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use lease_core::backend::clock::Deadline;
///
/// let deadline = Deadline::in_(Duration::from_secs(2));
/// assert!(!deadline.has_passed());
/// deadline.reached().await;
/// assert!(deadline.has_passed());
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    start: Stamp,
    after: Duration,
}

impl Deadline {
    /// The deadline `after` past `start`.
    pub fn after(start: Stamp, after: Duration) -> Deadline {
        Deadline { start, after }
    }

    /// The deadline `after` from now.
    pub fn in_(after: Duration) -> Deadline {
        Deadline::after(Stamp::now(), after)
    }

    /// A deadline that never passes.
    pub fn never() -> Deadline {
        Deadline::in_(Duration::MAX)
    }

    /// The stamp this deadline counts from.
    pub fn start(&self) -> Stamp {
        self.start
    }

    /// The span after [`start`](Deadline::start).
    pub fn span(&self) -> Duration {
        self.after
    }

    /// Time left (zero once passed; `Duration::MAX`-ish for [`never`](Deadline::never)).
    pub fn remaining(&self) -> Duration {
        self.start.remaining(self.after)
    }

    /// `true` once the deadline has passed. Reads the clock, so it is right at once after a
    /// resume.
    pub fn has_passed(&self) -> bool {
        self.remaining().is_zero()
    }

    /// The earlier of two deadlines (by time left now).
    pub fn min(self, other: Deadline) -> Deadline {
        if other.remaining() < self.remaining() {
            other
        } else {
            self
        }
    }

    /// Resolves once the deadline has passed. Woken early when the process notices a resume
    /// from suspend (within [`RESUME_CHECK`]), so it never fires late by the time slept.
    pub async fn reached(&self) {
        loop {
            let resumed = resume_notify().notified();
            tokio::pin!(resumed);
            // Register before reading the clock, so a resume noticed in between is not missed.
            resumed.as_mut().enable();
            let left = self.remaining();
            if left.is_zero() {
                return;
            }
            ensure_resume_watcher();
            tokio::select! {
                () = tokio::time::sleep_until(Instant::now().checked_add(left).unwrap_or_else(far_future)) => {}
                () = &mut resumed => {}
            }
        }
    }

    /// Like [`reached`](Deadline::reached), but also resolves at tokio instant `wake` if that
    /// comes first (for a loop that has other work due). Returns `true` when the deadline has
    /// passed.
    pub async fn reached_or(&self, wake: Instant) -> bool {
        tokio::select! {
            biased;
            () = self.reached() => true,
            () = tokio::time::sleep_until(wake) => self.has_passed(),
        }
    }
}

fn far_future() -> Instant {
    // About 30 years: what tokio itself uses for "never".
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

fn resume_notify() -> &'static Notify {
    static RESUMED: OnceLock<Notify> = OnceLock::new();
    RESUMED.get_or_init(Notify::new)
}

/// Starts the resume watcher thread once per process (Linux only: elsewhere there is no boot
/// clock to compare).
fn ensure_resume_watcher() {
    #[cfg(target_os = "linux")]
    {
        static STARTED: OnceLock<()> = OnceLock::new();
        STARTED.get_or_init(|| {
            let spawned = std::thread::Builder::new()
                .name("lease-resume-watch".into())
                .spawn(watch_resumes);
            if let Err(e) = spawned {
                // Without the watcher, deadlines still hold when read (`has_passed`), and
                // waiters fire when their tokio sleep ends: late after a suspend, never early.
                tracing::warn!(error = %e, "cannot start the resume watcher thread; after a suspend, terms end when their timers fire");
            }
        });
    }
}

#[cfg(target_os = "linux")]
fn watch_resumes() {
    let drift = || {
        let boot = real_boot_time()?;
        let mono = clock_duration(rustix::time::ClockId::Monotonic)?;
        Some(boot.saturating_sub(mono))
    };
    let mut last = drift();
    loop {
        std::thread::sleep(RESUME_CHECK);
        let now = drift();
        if let (Some(then), Some(now)) = (last, now)
            && now.saturating_sub(then) > RESUME_DRIFT
        {
            resume_notify().notify_waiters();
        }
        last = now;
    }
}

thread_local! {
    /// Simulated suspends on this thread (tests only; zero otherwise).
    static SUSPENDED: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

fn boot_time() -> Option<Duration> {
    let real = real_boot_time()?;
    Some(real + SUSPENDED.with(Cell::get))
}

#[cfg(target_os = "linux")]
fn real_boot_time() -> Option<Duration> {
    clock_duration(rustix::time::ClockId::Boottime)
}

#[cfg(target_os = "linux")]
fn clock_duration(id: rustix::time::ClockId) -> Option<Duration> {
    let ts = rustix::time::clock_gettime(id);
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    Some(Duration::new(secs, nanos))
}

#[cfg(not(target_os = "linux"))]
fn real_boot_time() -> Option<Duration> {
    None
}

/// Test tools for local time (feature `test-util`).
#[cfg(any(test, feature = "test-util"))]
pub mod testing {
    use std::cell::Cell;
    use std::time::Duration;

    use super::{SUSPENDED, resume_notify};

    /// Simulates a suspend of `d` on the calling thread: its boot clock jumps forward by `d`
    /// while tokio's clock stands still (as a real suspend looks to a process), and every
    /// deadline waiter is woken as the resume watcher would.
    ///
    /// Per thread, so tests running in parallel do not see each other's suspends: use it on a
    /// current-thread runtime (`#[tokio::test(start_paused = true)]`), where every task runs on
    /// the test's thread. On a platform without a boot clock it has no effect.
    pub fn suspend(d: Duration) {
        SUSPENDED.with(|s| s.set(s.get() + d));
        resume_notify().notify_waiters();
    }

    /// `true` where [`suspend`] moves the clock (Linux).
    pub fn can_suspend() -> bool {
        super::real_boot_time().is_some()
    }

    #[doc(hidden)]
    pub fn suspended_total() -> Duration {
        SUSPENDED.with(Cell::get)
    }
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

    #[tokio::test(start_paused = true)]
    async fn a_deadline_fires_at_once_after_a_suspend() {
        if !testing::can_suspend() {
            return;
        }
        let deadline = Deadline::in_(Duration::from_secs(10));
        let waiter = tokio::spawn(async move {
            deadline.reached().await;
            Instant::now()
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!deadline.has_passed());
        let resumed_at = Instant::now();
        testing::suspend(Duration::from_secs(30));
        assert!(deadline.has_passed(), "the clock reads the suspend at once");
        let fired_at = waiter.await.unwrap();
        assert_eq!(fired_at, resumed_at, "the waiter fired at the resume");
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_fires_on_time_without_a_suspend() {
        let start = Instant::now();
        let deadline = Deadline::in_(Duration::from_millis(1500));
        deadline.reached().await;
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(1500) && took < Duration::from_millis(1502),
            "{took:?}"
        );
        Deadline::in_(Duration::ZERO).reached().await;
        assert!(!Deadline::never().has_passed());
        assert!(
            Deadline::in_(Duration::from_secs(1))
                .min(Deadline::in_(Duration::from_secs(2)))
                .span()
                == Duration::from_secs(1)
        );
    }
}
