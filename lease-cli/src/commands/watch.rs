//! `lease watch NAME… [--json]`: one line per change of each name's holder, until stopped —
//! of its plain lease and, on a store with counted leases, of each of its permits.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lease::backend::clock::{Deadline, Stamp};
use lease::backend::notify::Topic;
use lease::backend::wait::{EXPIRY_MARGIN, Waiter, Wake};
use lease::{
    LeaseStore, Observer, Timings,
    backend::{LeaseStoreExt, permits::PermitInfo},
    coordinator::HolderChange,
};
use tokio::sync::mpsc;

use crate::cli::WatchArgs;
use crate::commands::open_for;
use crate::commands::output::{self, json_string, printable};
use crate::duration::human;
use crate::exit::CliError;
use crate::rfc3339;
use crate::signals::StopSignals;
use crate::store_url::StoreUrl;

/// One line of the watch: a name's state as first read, or a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// Nobody held the name at the first read — neither its plain lease nor any permit;
    /// `term` is the last one issued, if any.
    Free {
        /// The last term issued (`None`: never claimed, or the store keeps no ended record).
        term: Option<u64>,
    },
    /// A change of the plain lease.
    Change(HolderChange),
    /// A change of one permit of a counted name (its holder found by the first read is
    /// reported as `Claimed` too).
    Permit {
        /// The permit's index.
        permit: u32,
        /// What happened to it.
        change: HolderChange,
        /// How many of the name's permits were live at the read that saw the change.
        held: usize,
    },
}

/// Runs the `watch` subcommand: until SIGINT, SIGTERM or SIGHUP, which end it with code 0.
pub(crate) async fn watch(url: &StoreUrl, args: WatchArgs) -> Result<u8, CliError> {
    let mut signals = StopSignals::install()?;
    let store = open_for(url, &args.names).await?;
    let counted = store.capabilities().permits;
    let timings = Timings::default();
    let observer = Observer::from_arc(store.clone()).with_timings(timings);
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let mut tasks = tokio::task::JoinSet::new();
    for name in &args.names {
        let mut watch = observer.watch(name).map_err(|e| CliError::from_lease(&e))?;
        // Subscribed before the first read, as the holder's watch is.
        let mut permits = counted.then(|| PermitWatch::new(store.clone(), name, timings));
        let first = observer.get(name).await?;
        let first_permits = match &mut permits {
            Some(p) => p.read().await?,
            None => Vec::new(),
        };
        let json = args.json;
        let name = name.clone();
        let plain_live = first.as_ref().is_some_and(|i| i.live);
        if !plain_live && !first_permits.iter().any(|p| p.live) {
            let term = first
                .map(|i| i.term)
                .into_iter()
                .chain(first_permits.iter().map(|p| p.term))
                .max();
            let _ = tx.send(line(&name, &Event::Free { term }, json, SystemTime::now()));
        }
        let plain_tx = tx.clone();
        let plain_name = name.clone();
        tasks.spawn(async move {
            let mut failing = false;
            loop {
                match watch.next().await {
                    Ok(change) => {
                        failing = false;
                        if plain_tx
                            .send(line(
                                &plain_name,
                                &Event::Change(change),
                                json,
                                SystemTime::now(),
                            ))
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!(name = %plain_name, error = %e, "reading the holder failed; retrying");
                        }
                        failing = true;
                    }
                }
            }
        });
        if let Some(mut permits) = permits {
            let tx = tx.clone();
            tasks.spawn(async move {
                let mut failing = false;
                loop {
                    match permits.next().await {
                        Ok(event) => {
                            failing = false;
                            if tx.send(line(&name, &event, json, SystemTime::now())).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            if !failing {
                                tracing::warn!(name = %name, error = %e, "reading the permits failed; retrying");
                            }
                            failing = true;
                        }
                    }
                }
            });
        }
    }
    drop(tx);
    loop {
        tokio::select! {
            text = rx.recv() => match text {
                Some(text) => output::write_stdout(&text, "the watch")?,
                None => return Ok(0),
            },
            _ = signals.recv() => return Ok(0),
        }
    }
}

/// A watch of the permits of one name: each permit's holder, compared read by read as
/// [`lease::coordinator::HolderWatch`] compares a plain lease's (changes between two reads are
/// coalesced; an end is `Released` before the holder's expiry as last read, `Expired` after
/// it).
///
/// It reads the permits ([`PermitStore::permits`](lease::backend::permits::PermitStore::permits),
/// bounded by the attempt timeout) at a hint of the name's topic (every store hints permit claims
/// and releases there), at the first expiry of a live permit as last read, at the retry pace while
/// hints may be missing or a read failed, and at least once per lease of its timings whatever the
/// hints say.
struct PermitWatch {
    store: Arc<dyn LeaseStore>,
    name: String,
    waiter: Waiter,
    timings: Timings,
    /// The live permits at the last read: permit → (term, when its lease runs out).
    last: BTreeMap<u32, (u64, Deadline)>,
    pending: VecDeque<Event>,
    /// Why the last wait ended (`None` before the first).
    woke: Option<Wake>,
    /// Reads in a row, each after waking at a permit's expiry, that found a live permit with
    /// no more time left than the pause before them (a record that outlives its expiry).
    overdue: u32,
}

impl PermitWatch {
    /// A watch of `name`'s permits, subscribed to the store's hints at once.
    fn new(store: Arc<dyn LeaseStore>, name: &str, timings: Timings) -> PermitWatch {
        PermitWatch {
            waiter: Waiter::new(store.clone(), Topic::lease(name), timings),
            store,
            name: name.to_owned(),
            timings,
            last: BTreeMap::new(),
            pending: VecDeque::new(),
            woke: None,
            overdue: 0,
        }
    }

    /// The next change of a permit. Waits for as long as nothing changes; a failed read
    /// returns its error and the next call reads again (at the retry pace).
    async fn next(&mut self) -> lease::Result<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(event);
            }
            let limit = Deadline::in_(self.timings.lease());
            self.woke = Some(self.waiter.wait(limit).await);
            self.read().await?;
        }
    }

    /// Reads the permits, queues what changed since the last read and sets the next expiry
    /// to wake at; returns every permit as read. The first read queues each live permit as
    /// claimed.
    async fn read(&mut self) -> lease::Result<Vec<PermitInfo>> {
        self.waiter.before_attempt();
        let t = self.timings;
        let read =
            match tokio::time::timeout(t.attempt_timeout(), self.store.permits(&self.name)).await {
                Ok(r) => r,
                Err(_) => Err(lease::Error::timeout(
                    format_args!("reading the permits of '{}'", self.name),
                    t.attempt_timeout(),
                )),
            };
        let answered = Stamp::now();
        let permits = match read {
            Ok(p) => p,
            Err(e) => {
                self.waiter.clear_expiry();
                self.waiter.failed();
                return Err(e);
            }
        };
        self.compare(&permits, answered);
        match permits
            .iter()
            .filter(|p| p.live)
            .map(|p| p.expires_in)
            .min()
        {
            Some(left) if left != Duration::MAX => {
                let pause = self.overdue_pause();
                let left = if self.woke == Some(Wake::Expiry) && left <= pause {
                    // Woken at the expiry the store reported, and it still says live with
                    // (almost) nothing left: ask again after a pause that doubles.
                    self.overdue = self.overdue.saturating_add(1);
                    left.max(pause)
                } else {
                    self.overdue = 0;
                    left
                };
                self.waiter.expires_in(answered, left);
            }
            _ => {
                self.overdue = 0;
                self.waiter.clear_expiry();
            }
        }
        Ok(permits)
    }

    /// [`EXPIRY_MARGIN`] doubled per overdue read, at most the retry.
    fn overdue_pause(&self) -> Duration {
        EXPIRY_MARGIN
            .saturating_mul(1u32 << self.overdue.min(20))
            .min(self.timings.retry())
    }

    /// Queues what changed between the last read and `permits`, read at `at`.
    fn compare(&mut self, permits: &[PermitInfo], at: Stamp) {
        let live: BTreeMap<u32, &PermitInfo> = permits
            .iter()
            .filter(|p| p.live)
            .map(|p| (p.permit, p))
            .collect();
        let held = live.len();
        let last = std::mem::take(&mut self.last);
        for (&permit, &(term, ends)) in &last {
            if live.get(&permit).map(|p| p.term) != Some(term) {
                let change = if ends.has_passed() {
                    HolderChange::Expired { term }
                } else {
                    HolderChange::Released { term }
                };
                self.pending.push_back(Event::Permit {
                    permit,
                    change,
                    held,
                });
            }
        }
        for (&permit, p) in &live {
            self.last
                .insert(permit, (p.term, Deadline::after(at, p.expires_in)));
            if last.get(&permit).map(|l| l.0) != Some(p.term) {
                self.pending.push_back(Event::Permit {
                    permit,
                    change: HolderChange::Claimed {
                        instance: p.instance.clone(),
                        term: p.term,
                        expires_in: p.expires_in,
                    },
                    held,
                });
            }
        }
    }
}

/// One line for `event` of `name`, read at `at` (this host's wall clock), with its line feed.
///
/// Every line starts with `at` in RFC 3339 (UTC, milliseconds); a claim also gives its expiry
/// as an absolute time: `at` plus the time the store said was left (the contract reads no
/// store clock, so the store's view is its expiry, placed on this host's clock).
/// A permit's line names the permit and how many of the name's permits were held at the read
/// that saw the change: `T NAME: permit P claimed by I (term T, expires in D at E); H permits
/// held`; in JSON, the plain lease's object with `"permit":P` after the name and
/// `"permits_held":H` at the end. A JSON object starts with `"time"` (`at`) and has
/// `"expires_at"` after `"expires_in_ms"` (null unless claimed).
pub(crate) fn line(name: &str, event: &Event, json: bool, at: SystemTime) -> String {
    let time = rfc3339::format(at);
    let expires_at = |left: &Duration| rfc3339::format(at.checked_add(*left).unwrap_or(at));
    if json {
        let n = json_string(name);
        let change_json = |change: &HolderChange| match change {
            HolderChange::Claimed {
                instance,
                term,
                expires_in,
            } => format!(
                "\"event\":\"claimed\",\"holder\":{},\"term\":{term},\"expires_in_ms\":{},\
                 \"expires_at\":\"{}\"",
                json_string(instance),
                expires_in.as_millis(),
                expires_at(expires_in)
            ),
            HolderChange::Released { term } => format!(
                "\"event\":\"released\",\"holder\":null,\"term\":{term},\"expires_in_ms\":null,\
                 \"expires_at\":null"
            ),
            HolderChange::Expired { term } => format!(
                "\"event\":\"expired\",\"holder\":null,\"term\":{term},\"expires_in_ms\":null,\
                 \"expires_at\":null"
            ),
            _ => "\"event\":\"unknown\"".to_owned(),
        };
        let body = match event {
            Event::Free { term } => format!(
                "\"event\":\"free\",\"holder\":null,\"term\":{},\"expires_in_ms\":null,\
                 \"expires_at\":null",
                term.map_or_else(|| "null".to_owned(), |t| t.to_string())
            ),
            Event::Change(change) => change_json(change),
            Event::Permit {
                permit,
                change,
                held,
            } => format!(
                "\"permit\":{permit},{},\"permits_held\":{held}",
                change_json(change)
            ),
        };
        return format!("{{\"time\":\"{time}\",\"name\":{n},{body}}}\n");
    }
    let n = printable(name);
    let change_text = |change: &HolderChange| match change {
        HolderChange::Claimed {
            instance,
            term,
            expires_in,
        } => format!(
            "claimed by {} (term {term}, expires in {} at {})",
            printable(instance),
            human(*expires_in),
            expires_at(expires_in)
        ),
        HolderChange::Released { term } => format!("released (term {term})"),
        HolderChange::Expired { term } => {
            format!("expired (term {term}): the holder stopped renewing")
        }
        other => format!("{other:?}"),
    };
    match event {
        Event::Free { term: Some(t) } => format!("{time} {n}: free (last term {t})\n"),
        Event::Free { term: None } => format!("{time} {n}: free\n"),
        Event::Change(change) => format!("{time} {n}: {}\n", change_text(change)),
        Event::Permit {
            permit,
            change,
            held,
        } => {
            let s = if *held == 1 { "" } else { "s" };
            format!(
                "{time} {n}: permit {permit} {}; {held} permit{s} held\n",
                change_text(change)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// 2026-12-07T13:45:01.123Z.
    fn at() -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_796_651_101_123)
    }

    #[test]
    fn lines_in_both_forms() {
        let claimed = Event::Change(HolderChange::Claimed {
            instance: "web-1".into(),
            term: 7,
            expires_in: Duration::from_millis(14_900),
        });
        assert_eq!(
            line("job", &claimed, false, at()),
            "2026-12-07T13:45:01.123Z job: claimed by web-1 (term 7, expires in 14.9s at 2026-12-07T13:45:16.023Z)\n"
        );
        assert_eq!(
            line("job", &claimed, true, at()),
            "{\"time\":\"2026-12-07T13:45:01.123Z\",\"name\":\"job\",\"event\":\"claimed\",\"holder\":\"web-1\",\"term\":7,\"expires_in_ms\":14900,\
             \"expires_at\":\"2026-12-07T13:45:16.023Z\"}\n"
        );
        let released = Event::Change(HolderChange::Released { term: 7 });
        assert_eq!(
            line("job", &released, false, at()),
            "2026-12-07T13:45:01.123Z job: released (term 7)\n"
        );
        assert_eq!(
            line("job", &released, true, at()),
            "{\"time\":\"2026-12-07T13:45:01.123Z\",\"name\":\"job\",\"event\":\"released\",\"holder\":null,\"term\":7,\"expires_in_ms\":null,\
             \"expires_at\":null}\n"
        );
        let expired = Event::Change(HolderChange::Expired { term: 8 });
        assert!(
            line("job", &expired, false, at())
                .starts_with("2026-12-07T13:45:01.123Z job: expired (term 8)")
        );
        assert_eq!(
            line("a\nb", &Event::Free { term: None }, false, at()),
            "2026-12-07T13:45:01.123Z a\\nb: free\n"
        );
        assert_eq!(
            line("job", &Event::Free { term: Some(3) }, true, at()),
            "{\"time\":\"2026-12-07T13:45:01.123Z\",\"name\":\"job\",\"event\":\"free\",\"holder\":null,\"term\":3,\"expires_in_ms\":null,\
             \"expires_at\":null}\n"
        );
    }

    #[test]
    fn permit_lines_name_the_permit_and_the_count_held() {
        let claimed = Event::Permit {
            permit: 2,
            change: HolderChange::Claimed {
                instance: "web-1".into(),
                term: 9,
                expires_in: Duration::from_millis(1_900),
            },
            held: 3,
        };
        assert_eq!(
            line("pool", &claimed, false, at()),
            "2026-12-07T13:45:01.123Z pool: permit 2 claimed by web-1 (term 9, expires in 1.9s at 2026-12-07T13:45:03.023Z); 3 permits held\n"
        );
        assert_eq!(
            line("pool", &claimed, true, at()),
            "{\"time\":\"2026-12-07T13:45:01.123Z\",\"name\":\"pool\",\"permit\":2,\"event\":\"claimed\",\"holder\":\"web-1\",\"term\":9,\
             \"expires_in_ms\":1900,\"expires_at\":\"2026-12-07T13:45:03.023Z\",\"permits_held\":3}\n"
        );
        let released = Event::Permit {
            permit: 0,
            change: HolderChange::Released { term: 4 },
            held: 1,
        };
        assert_eq!(
            line("pool", &released, false, at()),
            "2026-12-07T13:45:01.123Z pool: permit 0 released (term 4); 1 permit held\n"
        );
        let expired = Event::Permit {
            permit: 1,
            change: HolderChange::Expired { term: 5 },
            held: 0,
        };
        assert_eq!(
            line("pool", &expired, false, at()),
            "2026-12-07T13:45:01.123Z pool: permit 1 expired (term 5): the holder stopped renewing; 0 permits held\n"
        );
        assert_eq!(
            line("pool", &expired, true, at()),
            "{\"time\":\"2026-12-07T13:45:01.123Z\",\"name\":\"pool\",\"permit\":1,\"event\":\"expired\",\"holder\":null,\"term\":5,\
             \"expires_in_ms\":null,\"expires_at\":null,\"permits_held\":0}\n"
        );
    }

    fn permit(permit: u32, term: u64, live: bool, ms: u64) -> PermitInfo {
        PermitInfo {
            permit,
            instance: format!("i{permit}"),
            term,
            live,
            expires_in: Duration::from_millis(ms),
        }
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn permit_changes_are_read_from_each_read() {
        let store: Arc<dyn LeaseStore> = Arc::new(lease_local::MemoryStore::new());
        let mut w = PermitWatch::new(store, "pool", Timings::default());
        let at = Stamp::now();
        w.compare(&[permit(0, 1, true, 5_000), permit(1, 2, false, 0)], at);
        let first: Vec<Event> = w.pending.drain(..).collect();
        assert_eq!(
            first,
            [Event::Permit {
                permit: 0,
                change: HolderChange::Claimed {
                    instance: "i0".into(),
                    term: 1,
                    expires_in: Duration::from_millis(5_000)
                },
                held: 1
            }]
        );
        // Renewed: no line. Permit 1 claimed: one.
        w.compare(&[permit(0, 1, true, 5_000), permit(1, 3, true, 5_000)], at);
        assert_eq!(w.pending.len(), 1);
        assert!(matches!(
            w.pending.pop_front(),
            Some(Event::Permit {
                permit: 1,
                held: 2,
                change: HolderChange::Claimed { term: 3, .. }
            })
        ));
        // Permit 0 released before its expiry, permit 1 taken over by a new term.
        w.compare(&[permit(0, 1, false, 0), permit(1, 4, true, 5_000)], at);
        let changes: Vec<Event> = w.pending.drain(..).collect();
        assert_eq!(changes.len(), 3, "{changes:?}");
        assert!(matches!(
            changes[0],
            Event::Permit {
                permit: 0,
                held: 1,
                change: HolderChange::Released { term: 1 }
            }
        ));
        assert!(matches!(
            changes[1],
            Event::Permit {
                permit: 1,
                held: 1,
                change: HolderChange::Released { term: 3 }
            }
        ));
        assert!(matches!(
            changes[2],
            Event::Permit {
                permit: 1,
                held: 1,
                change: HolderChange::Claimed { term: 4, .. }
            }
        ));
        // Permit 1 gone after its expiry as last read: expired.
        tokio::time::advance(Duration::from_secs(6)).await;
        w.compare(&[], Stamp::now());
        assert!(matches!(
            w.pending.pop_front(),
            Some(Event::Permit {
                permit: 1,
                held: 0,
                change: HolderChange::Expired { term: 4 }
            })
        ));
        assert!(w.pending.is_empty());
    }
}
