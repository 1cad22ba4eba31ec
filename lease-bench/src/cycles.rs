//! Acquire+release cycles per second and their latency, every subject of a backend side by
//! side: one client loop, one cycle at a time, on a warm connection, in interleaved rounds.

use std::time::Duration;

use anyhow::Result;
use futures::future::BoxFuture;
use rand::seq::SliceRandom;

use crate::backends::Env;
use crate::cli::{Args, Backend};
use crate::peers::{self, Subject, SubjectId};
use crate::stats::{Op, Samples, Summary, measure, warm_up};

/// Warm-up before measuring: at most this many cycles…
const WARMUP_CYCLES: u32 = 500;
/// … and at most this long.
const WARMUP_TIME: Duration = Duration::from_millis(300);

/// One subject's figures.
#[derive(Debug, Clone)]
pub(crate) struct CycleRow {
    /// The backend.
    pub(crate) backend: Backend,
    /// The subject.
    pub(crate) id: SubjectId,
    /// Rate and latencies, when it ran.
    pub(crate) summary: Option<Summary>,
    /// Why it did not run or stopped.
    pub(crate) error: Option<String>,
}

struct Running {
    id: SubjectId,
    subject: Option<Box<dyn Subject>>,
    samples: Samples,
    error: Option<String>,
}

/// Runs every subject of `backend`.
pub(crate) async fn run(args: &Args, env: &Env, backend: Backend) -> Vec<CycleRow> {
    let url = env.url(backend);
    let mut subjects = Vec::new();
    for id in SubjectId::on(backend) {
        let (subject, error) = match peers::build(env, backend, id, &url, "main").await {
            Ok(s) => (Some(s), None),
            Err(e) => {
                eprintln!(
                    "lease-bench: {} {}: {}",
                    backend.label(),
                    id.label(),
                    crate::describe(&e)
                );
                (None, Some(crate::describe(&e)))
            }
        };
        subjects.push(Running {
            id,
            subject,
            samples: Samples::default(),
            error,
        });
    }
    for r in &mut subjects {
        if let Some(s) = r.subject.as_mut()
            && let Err(e) = warm_up(s.as_mut(), WARMUP_CYCLES, WARMUP_TIME).await
        {
            fail(r, e);
        }
    }
    let rounds = args.rounds.max(1);
    let slot = Duration::from_secs_f64(args.seconds / f64::from(rounds));
    let mut order: Vec<usize> = (0..subjects.len()).collect();
    for _ in 0..rounds {
        // A new random order each round: no subject always runs first, or always right after
        // another (a durable commit's flush can spill into the next subject's slot).
        order.shuffle(&mut rand::rng());
        for &i in &order {
            let Some(r) = subjects.get_mut(i) else {
                continue;
            };
            let Some(s) = r.subject.as_mut() else {
                continue;
            };
            if let Err(e) = measure(s.as_mut(), &mut r.samples, slot, args.max_cycles).await {
                fail(r, e);
            }
        }
    }
    let mut rows = Vec::new();
    for r in subjects {
        if let Some(s) = r.subject {
            s.close().await;
        }
        rows.push(CycleRow {
            backend,
            id: r.id,
            summary: (r.samples.count() > 0).then(|| r.samples.summary()),
            error: r.error,
        });
    }
    rows
}

fn fail(r: &mut Running, e: anyhow::Error) {
    eprintln!(
        "lease-bench: {} failed: {}",
        r.id.label(),
        crate::describe(&e)
    );
    r.error = Some(crate::describe(&e));
    r.subject = None;
}

impl Op for dyn Subject + '_ {
    fn once(&mut self) -> BoxFuture<'_, Result<()>> {
        self.cycle()
    }
}
