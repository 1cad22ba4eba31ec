//! Latency samples and their percentiles.

use std::time::{Duration, Instant};

use anyhow::Result;
use futures::future::BoxFuture;

/// Latencies of one subject, in nanoseconds, and the time they were measured over.
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples {
    nanos: Vec<u64>,
    busy: Duration,
    cpu: Duration,
}

/// CPU time this process has used so far (every thread).
pub(crate) fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

impl Samples {
    /// Adds one latency.
    pub(crate) fn push(&mut self, d: Duration) {
        self.nanos
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Adds measured wall time (the denominator of the rate).
    pub(crate) fn add_busy(&mut self, d: Duration) {
        self.busy += d;
    }

    /// Adds CPU time this process spent while measuring.
    pub(crate) fn add_cpu(&mut self, d: Duration) {
        self.cpu += d;
    }

    /// How many latencies.
    pub(crate) fn count(&self) -> usize {
        self.nanos.len()
    }

    /// Operations per second over the measured wall time.
    pub(crate) fn rate(&self) -> f64 {
        let secs = self.busy.as_secs_f64();
        if secs > 0.0 {
            self.nanos.len() as f64 / secs
        } else {
            0.0
        }
    }

    /// The summary: rate and percentiles.
    pub(crate) fn summary(&self) -> Summary {
        let mut sorted = self.nanos.clone();
        sorted.sort_unstable();
        Summary {
            count: sorted.len() as u64,
            rate: self.rate(),
            p50: percentile(&sorted, 0.50),
            p99: percentile(&sorted, 0.99),
            cpu_per_op: u32::try_from(sorted.len())
                .ok()
                .filter(|n| *n > 0)
                .map(|n| self.cpu / n),
        }
    }
}

/// What a table shows of a set of latencies.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Summary {
    /// How many operations.
    pub(crate) count: u64,
    /// Operations per second.
    pub(crate) rate: f64,
    /// Median latency.
    pub(crate) p50: Option<Duration>,
    /// 99th percentile latency.
    pub(crate) p99: Option<Duration>,
    /// CPU time of the benchmark process per operation (client-side cost).
    pub(crate) cpu_per_op: Option<Duration>,
}

/// The `q` quantile of sorted nanoseconds (nearest rank).
fn percentile(sorted: &[u64], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted.len()) - 1;
    sorted.get(i).copied().map(Duration::from_nanos)
}

/// Mean, smallest and largest of a few durations.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spread {
    /// Mean.
    pub(crate) mean: Duration,
    /// Smallest.
    pub(crate) min: Duration,
    /// Largest.
    pub(crate) max: Duration,
}

impl Spread {
    /// `None` for no samples.
    pub(crate) fn of(samples: &[Duration]) -> Option<Spread> {
        let min = samples.iter().min().copied()?;
        let max = samples.iter().max().copied()?;
        let n = u32::try_from(samples.len()).ok()?;
        let total: Duration = samples.iter().sum();
        Some(Spread {
            mean: total / n,
            min,
            max,
        })
    }
}

/// One unit of measured work: an acquire+release cycle, a write.
pub(crate) trait Op: Send {
    /// Runs the work once; an error when it did not happen.
    fn once(&mut self) -> BoxFuture<'_, Result<()>>;
}

/// Runs `op` at most `most` times and for at most `time`, unmeasured: connections and caches
/// warm before the first measured round.
pub(crate) async fn warm_up<O: Op + ?Sized>(op: &mut O, most: u32, time: Duration) -> Result<()> {
    let start = Instant::now();
    for _ in 0..most {
        op.once().await?;
        if start.elapsed() >= time {
            break;
        }
    }
    Ok(())
}

/// Runs `op` one at a time for `slot` or `max` times, whichever ends first, adding each
/// latency, the time measured and the process's CPU time to `samples`.
pub(crate) async fn measure<O: Op + ?Sized>(
    op: &mut O,
    samples: &mut Samples,
    slot: Duration,
    max: u64,
) -> Result<()> {
    let start = Instant::now();
    let cpu = process_cpu();
    let deadline = start + slot;
    let mut n = 0u64;
    let outcome = loop {
        let t0 = Instant::now();
        if let Err(e) = op.once().await {
            break Err(e);
        }
        let t1 = Instant::now();
        samples.push(t1 - t0);
        n += 1;
        if n >= max || t1 >= deadline {
            break Ok(());
        }
    };
    samples.add_busy(start.elapsed());
    samples.add_cpu(process_cpu().saturating_sub(cpu));
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut s = Samples::default();
        for i in 1..=100 {
            s.push(Duration::from_micros(i));
        }
        s.add_busy(Duration::from_secs(1));
        let sum = s.summary();
        assert_eq!(sum.p50, Some(Duration::from_micros(50)));
        assert_eq!(sum.p99, Some(Duration::from_micros(99)));
        assert_eq!(sum.count, 100);
        assert!((sum.rate - 100.0).abs() < 1e-9);
        let sp = Spread::of(&[Duration::from_secs(1), Duration::from_secs(3)]).unwrap();
        assert_eq!(sp.mean, Duration::from_secs(2));
    }
}
