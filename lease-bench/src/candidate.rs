//! A candidate campaigning for one name through `Coordinator::run_elected`, reporting the
//! instant its work starts: the successor of the failover and hand-over sections, and the idle
//! waiters of the hand-over section.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use lease::{Coordinator, LeaseStore, Term, Timings};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::peers::library::coordinator;

/// A coordinator campaigning for one name with `run_elected`.
pub(crate) struct Candidate {
    coordinator: Coordinator,
    task: JoinHandle<lease::Result<()>>,
}

impl Candidate {
    /// Starts campaigning for `name` on `store`; sends the instant its work starts to `won`, then
    /// works until its term ends.
    pub(crate) fn start(
        store: Arc<dyn LeaseStore>,
        instance: &str,
        t: Timings,
        name: &str,
        won: mpsc::UnboundedSender<Instant>,
    ) -> Result<Candidate> {
        let coordinator = coordinator(store, instance, t)?;
        let c = coordinator.clone();
        let name = name.to_owned();
        let task = tokio::spawn(async move {
            c.run_elected(&name, move |term: Term| {
                let won = won.clone();
                async move {
                    let _ = won.send(Instant::now());
                    term.done().await;
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
        });
        Ok(Candidate { coordinator, task })
    }

    /// Closes the coordinator (its term, if any, is resigned) and waits for the campaign to end.
    pub(crate) async fn stop(self) {
        let _ = self.coordinator.close().await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}

/// One candidate and the channel its work start arrives on.
pub(crate) struct Successor {
    candidate: Candidate,
    won: mpsc::UnboundedReceiver<Instant>,
}

impl Successor {
    /// A candidate for `name` on `store`.
    pub(crate) fn start(store: Arc<dyn LeaseStore>, t: Timings, name: &str) -> Result<Successor> {
        let (tx, won) = mpsc::unbounded_channel();
        Ok(Successor {
            candidate: Candidate::start(store, "candidate", t, name, tx)?,
            won,
        })
    }

    /// `true` when its work has started already.
    pub(crate) fn has_won(&mut self) -> bool {
        self.won.try_recv().is_ok()
    }

    /// The instant the work started, waiting at most `expected` plus a margin.
    pub(crate) async fn wait(&mut self, expected: Duration) -> Result<Instant> {
        let bound = expected + Duration::from_secs(5);
        match tokio::time::timeout(bound, self.won.recv()).await {
            Ok(Some(at)) => Ok(at),
            Ok(None) => bail!("the candidate stopped campaigning"),
            Err(_) => bail!("the candidate did not take over within {bound:?}"),
        }
    }

    /// Stops the candidate.
    pub(crate) async fn stop(self) {
        self.candidate.stop().await;
    }
}
