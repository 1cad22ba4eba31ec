//! The scheduler's wall clock: when an instant has come, locally.
//!
//! The store has the last word (a claim before the instant by the *store's* clock is answered
//! `Early` and retried), so this clock only decides when to ask. It must follow tokio's clock in
//! paused-time tests, hence the trait.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// A wall clock in milliseconds since the Unix epoch (UTC).
pub trait WallClock: Send + Sync + fmt::Debug + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system clock: the default, and what production should use.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_ms(&self) -> i64 {
        system_ms()
    }
}

fn system_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// A wall clock anchored once and then moved on by tokio's clock, so it follows paused time:
/// for tests (`#[tokio::test(start_paused = true)]`), where the system clock stands still.
///
/// Anchor it to the store's clock (`TokioClock::starting_at(store.now_ms())` for `lease-local`'s
/// `MemoryStore`) and the two agree to the millisecond. Not for production: tokio's clock stops
/// while the machine is suspended and does not follow steps of the system clock.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    wall_ms: i64,
    at: Instant,
}

impl TokioClock {
    /// Anchored to the system clock now.
    pub fn new() -> TokioClock {
        TokioClock::starting_at(system_ms())
    }

    /// Reads `wall_ms` now, and moves on with tokio's clock.
    pub fn starting_at(wall_ms: i64) -> TokioClock {
        TokioClock {
            wall_ms,
            at: Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl WallClock for TokioClock {
    fn now_ms(&self) -> i64 {
        let since = i64::try_from(self.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.wall_ms.saturating_add(since)
    }
}
