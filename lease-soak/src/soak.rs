//! One backend's soak: set up the server (or the embedded store), connect each contender and
//! each group worker through its own fault switch, run the contenders and the group phase while
//! their schedules play their faults and the server restarts once, then stop everything and
//! report.

use std::sync::Arc;
use std::time::Duration;

use lease::memory::MemoryStore;
use lease::{LeaseStore, Timings};
use lease_conformance::FaultProxy;
use lease_conformance::GroupStore;
use lease_conformance::faulty;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cli::{Args, BackendKind, ClusterKind};
use crate::cluster::{self, Cluster, Proxies};
use crate::contenders::{
    COUNTED_CONTENDERS, Contender, Counted, Record, StandAside, ZOMBIE, ZombieContender,
    zombie_max_pause,
};
use crate::downstream::{Downstream, RealFences};
use crate::groups::{self, GroupSetup, Restart};
use crate::mixed::{self, Claimer, Mixed, MixedSetup};
use crate::report::{BackendReport, CountedReport, Outcome};
use crate::schedule::{Mode, Schedule};
use crate::servers::{self, Server, SetupError, TempDir};
use crate::stores::{self, LyingRenewals, LyingStore, Reopenable, Switch};

/// How long a contender may take to stop once its coordinator is closed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// The period of the timer that measures scheduling lag.
const LAG_TICK: Duration = Duration::from_millis(10);
/// At most this many zombies per backend.
const MAX_ZOMBIES: usize = 3;
/// How often the zombie driver looks whether the zombie it armed is over.
const ZOMBIE_DRIVER_POLL: Duration = Duration::from_millis(20);

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The schedule `args` gives `kind`.
pub(crate) fn schedule_for(kind: BackendKind, args: &Args) -> Schedule {
    Schedule::generate(
        args.seed,
        kind.name(),
        args.duration(),
        args.contenders(),
        args.lease(),
        kind != BackendKind::Memory,
    )
}

/// Soaks one backend; its writes also go through `fences`.
pub(crate) async fn run(kind: BackendKind, args: &Args, fences: &RealFences) -> Outcome {
    let started = Instant::now();
    let failed = |why: String| Outcome::Failed {
        backend: kind.name(),
        why,
    };
    let timings = match Timings::from_lease(args.lease()) {
        Ok(t) => t,
        Err(e) => return failed(e.to_string()),
    };
    let result = match kind {
        BackendKind::Memory => run_memory(args, timings, fences).await,
        BackendKind::Sqlite => run_sqlite(args, timings, fences).await,
        _ => run_server(kind, args, timings, fences).await,
    };
    match result {
        Ok(mut report) => {
            report.elapsed = started.elapsed();
            Outcome::Ran(Box::new(report))
        }
        Err(SetupError::Missing(why)) => Outcome::Skipped {
            backend: kind.name(),
            why,
            required: kind.required(),
        },
        Err(SetupError::Failed(why)) => failed(why),
    }
}

/// How many claimers of the mixed-count name `args` asks for (they run with the lease phase).
fn mixed_claimers(args: &Args) -> usize {
    if args.leases() { mixed::CLAIMERS } else { 0 }
}

/// How many lease stores and group workers `args` asks for: `(contenders + the zombie
/// contender, workers)`.
fn counts(args: &Args) -> (usize, usize) {
    (
        if args.leases() {
            args.contenders() + 1
        } else {
            0
        },
        if args.groups() {
            args.group_workers()
        } else {
            0
        },
    )
}

async fn run_memory(
    args: &Args,
    timings: Timings,
    fences: &RealFences,
) -> Result<BackendReport, SetupError> {
    let shared: Arc<dyn GroupStore> = Arc::new(MemoryStore::new());
    let (contenders, workers) = counts(args);
    let (stores, switches) = wrap_in_faults((0..contenders).map(|_| shared.clone()));
    let group = args.groups().then(|| {
        let (stores, switches) = wrap_in_faults((0..workers).map(|_| shared.clone()));
        GroupSetup { stores, switches }
    });
    let (mixed_stores, mixed_switches) =
        wrap_in_faults((0..mixed_claimers(args)).map(|_| shared.clone()));
    let mixed = MixedSetup {
        stores: mixed_stores.into_iter().map(lease_store).collect(),
        switches: mixed_switches,
    };
    Ok(drive(
        BackendKind::Memory.name(),
        args,
        timings,
        (stores, switches),
        (group, Some(mixed)),
        Restarter::None,
        fences,
    )
    .await)
}

async fn run_sqlite(
    args: &Args,
    timings: Timings,
    fences: &RealFences,
) -> Result<BackendReport, SetupError> {
    let dir = TempDir::new("sqlite", args.keep)
        .map_err(|e| SetupError::Failed(format!("temporary directory: {e}")))?;
    let url = format!("sqlite://{}", dir.path().join("soak.db").display());
    let (contenders, workers) = counts(args);
    let mut reopenables = Vec::new();
    for _ in 0..contenders + workers + mixed_claimers(args) {
        let store = Reopenable::open(&url)
            .await
            .map_err(|e| SetupError::Failed(format!("opening {url}: {e}")))?;
        reopenables.push(Arc::new(store));
    }
    let (stores, switches) = wrap_in_faults(
        reopenables
            .iter()
            .take(contenders)
            .map(|r| Arc::clone(r) as Arc<dyn GroupStore>),
    );
    let group = args.groups().then(|| {
        let (stores, switches) = wrap_in_faults(
            reopenables
                .iter()
                .skip(contenders)
                .take(workers)
                .map(|r| Arc::clone(r) as Arc<dyn GroupStore>),
        );
        GroupSetup { stores, switches }
    });
    let (mixed_stores, mixed_switches) = wrap_in_faults(
        reopenables
            .iter()
            .skip(contenders + workers)
            .map(|r| Arc::clone(r) as Arc<dyn GroupStore>),
    );
    let mixed = MixedSetup {
        stores: mixed_stores.into_iter().map(lease_store).collect(),
        switches: mixed_switches,
    };
    let report = drive(
        BackendKind::Sqlite.name(),
        args,
        timings,
        (stores, switches),
        (group, Some(mixed)),
        Restarter::Sqlite(reopenables),
        fences,
    )
    .await;
    drop(dir);
    Ok(report)
}

async fn run_server(
    kind: BackendKind,
    args: &Args,
    timings: Timings,
    fences: &RealFences,
) -> Result<BackendReport, SetupError> {
    let mut server = Server::launch(kind, args.keep).await?;
    let url_of = |addr| servers::url(kind, addr).unwrap_or_default();
    let direct = url_of(server.addr());
    let (lease, attempt) = (timings.lease(), timings.attempt_timeout());
    // Creates the table or bucket, and waits out a server still starting up.
    stores::probe(kind, &direct, lease, attempt)
        .await
        .map_err(|e| SetupError::Failed(format!("{e}; {}", server.log_tail())))?;
    let (contenders, workers) = counts(args);
    let mut stores = Vec::new();
    let mut switches = Vec::new();
    for i in 0..contenders + workers {
        let who = if i + 1 == contenders {
            ZOMBIE.to_owned()
        } else if i < contenders {
            format!("contender-{i}")
        } else {
            format!("worker-{}", i - contenders)
        };
        let proxy = FaultProxy::start(server.addr())
            .await
            .map_err(|e| SetupError::Failed(format!("fault proxy: {e}")))?;
        let store = stores::connect(kind, &url_of(proxy.local_addr()), lease, attempt)
            .await
            .map_err(|e| SetupError::Failed(format!("{who} connecting: {e}")))?;
        stores.push(store);
        switches.push(Switch::Proxy(proxy));
    }
    let group = args.groups().then(|| GroupSetup {
        stores: stores.split_off(contenders),
        switches: switches.split_off(contenders),
    });
    // The mixed-count claimers: a proxy and a connection each, put in chaos by `drive`.
    let mut mixed = MixedSetup {
        stores: Vec::new(),
        switches: Vec::new(),
    };
    for i in 0..mixed_claimers(args) {
        let proxy = FaultProxy::start(server.addr())
            .await
            .map_err(|e| SetupError::Failed(format!("fault proxy: {e}")))?;
        let store = stores::connect(kind, &url_of(proxy.local_addr()), lease, mixed::ATTEMPT)
            .await
            .map_err(|e| SetupError::Failed(format!("mixed claimer {i} connecting: {e}")))?;
        mixed.stores.push(lease_store(store));
        mixed.switches.push(Switch::Proxy(proxy));
    }
    let restarter = Restarter::Server {
        server: &mut server,
        kind,
        url: direct,
        lease,
        attempt,
    };
    let mut report = drive(
        kind.name(),
        args,
        timings,
        (stores, switches),
        (group, Some(mixed)),
        restarter,
        fences,
    )
    .await;
    if let Err(e) = server.stop().await {
        report.errors.push(e);
    }
    Ok(report)
}

/// How long a cluster may take to accept a store after its start.
const PROBE_WITHIN: Duration = Duration::from_secs(30);

/// Soaks one 3-node cluster (`--cluster`): starts it with its script (idempotent), connects
/// every contender and group worker to the whole cluster (on etcd and NATS through a fault
/// proxy per node), each through a fault-injecting store wrapper, and drives them as [`run`]
/// does, with the node kills and the cut of [`cluster`] on top.
pub(crate) async fn run_cluster(kind: ClusterKind, args: &Args, fences: &RealFences) -> Outcome {
    let started = Instant::now();
    let failed = |why: String| Outcome::Failed {
        backend: kind.name(),
        why,
    };
    let timings = match Timings::from_lease(args.lease()) {
        Ok(t) => t,
        Err(e) => return failed(e.to_string()),
    };
    if args.seconds < cluster::MIN_SECONDS {
        return failed(format!(
            "a cluster soak needs --seconds {} or more (the node kills must fit between the \
             group phase's events)",
            cluster::MIN_SECONDS
        ));
    }
    let cluster = Cluster { kind };
    let (url, proxies) = match cluster.start().await {
        Ok(started) => started,
        Err(e) => return failed(format!("the cluster does not start: {e}")),
    };
    let (lease, attempt) = (timings.lease(), timings.attempt_timeout());
    if let Err(e) = cluster.probe(&url, lease, attempt, PROBE_WITHIN).await {
        return failed(e);
    }
    let (contenders, workers) = counts(args);
    let mut opened = Vec::new();
    for i in 0..contenders + workers {
        match cluster.connect(&url, lease, attempt).await {
            Ok(store) => opened.push(store),
            Err(e) => return failed(format!("store {i} connecting to {url}: {e}")),
        }
    }
    // The mixed-count claimers: a connection to the whole cluster each, in chaos through the
    // store hook (per operation: no per-node proxy to aim at), with the node kills on top.
    let mut mixed_opened = Vec::new();
    for i in 0..mixed_claimers(args) {
        match cluster.connect(&url, lease, mixed::ATTEMPT).await {
            Ok(store) => mixed_opened.push(store),
            Err(e) => return failed(format!("mixed claimer {i} connecting to {url}: {e}")),
        }
    }
    let (mixed_stores, mixed_switches) = wrap_in_faults(mixed_opened.into_iter());
    let mixed = MixedSetup {
        stores: mixed_stores.into_iter().map(lease_store).collect(),
        switches: mixed_switches,
    };
    let group_stores = opened.split_off(contenders);
    let (stores, switches) = wrap_in_faults(opened.into_iter());
    let group = args.groups().then(|| {
        let (stores, switches) = wrap_in_faults(group_stores.into_iter());
        GroupSetup { stores, switches }
    });
    let restarter = Restarter::Cluster {
        cluster,
        proxies,
        url,
        lease,
        attempt,
    };
    let mut report = drive(
        kind.name(),
        args,
        timings,
        (stores, switches),
        (group, Some(mixed)),
        restarter,
        fences,
    )
    .await;
    report.elapsed = started.elapsed();
    Outcome::Ran(Box::new(report))
}

/// A group store as the lease store it also is.
fn lease_store(store: Arc<dyn GroupStore>) -> Arc<dyn LeaseStore> {
    store
}

/// Wraps each store in a [`FaultyStore`](lease_conformance::FaultyStore), whose switch plays
/// the faults.
fn wrap_in_faults(
    inner: impl Iterator<Item = Arc<dyn GroupStore>>,
) -> (Vec<Arc<dyn GroupStore>>, Vec<Switch>) {
    inner
        .map(|s| {
            let faulty = faulty(s);
            (
                Arc::new(faulty.clone()) as Arc<dyn GroupStore>,
                Switch::Store(faulty),
            )
        })
        .unzip()
}

/// How long a backend stays down during its restart, in leases: longer than a lease, so that
/// every holder's term ends at its local deadline and its lease expires while the server is
/// away (on NATS, the expired entry is gone when the stream is restored).
fn restart_pause(lease: Duration) -> Duration {
    lease * 4 / 3
}

/// How a backend restarts.
enum Restarter<'a> {
    /// It cannot (the in-memory store would lose its terms: no durable state to test).
    None,
    /// A server process: stop it gracefully, start it again on the same port and data, wait
    /// until it accepts a store.
    Server {
        server: &'a mut Server,
        kind: BackendKind,
        url: String,
        lease: Duration,
        attempt: Duration,
    },
    /// Close every connection to the SQLite file, then open new ones.
    Sqlite(Vec<Arc<Reopenable>>),
    /// A 3-node cluster: every node stopped, then started again by its script (the node kills
    /// and the cut are played besides, see [`cluster`]).
    Cluster {
        cluster: Cluster,
        /// The fault proxies the clients reach the nodes through (none on Redis).
        proxies: Arc<Proxies>,
        url: String,
        lease: Duration,
        attempt: Duration,
    },
}

impl Restarter<'_> {
    /// The cluster and its proxies, when this restarts one.
    fn cluster(&self) -> Option<(Cluster, Arc<Proxies>)> {
        match self {
            Restarter::Cluster {
                cluster, proxies, ..
            } => Some((*cluster, Arc::clone(proxies))),
            _ => None,
        }
    }

    /// Restarts, staying down for `pause`; returns how long the backend was away.
    async fn restart(&mut self, pause: Duration) -> Result<Duration, String> {
        let began = Instant::now();
        match self {
            Restarter::None => return Err("this backend cannot restart".to_owned()),
            Restarter::Server {
                server,
                kind,
                url,
                lease,
                attempt,
            } => {
                server.stop().await.map_err(|e| format!("restart: {e}"))?;
                tokio::time::sleep(pause).await;
                server.start().await.map_err(|e| format!("restart: {e}"))?;
                stores::probe(*kind, url, *lease, *attempt)
                    .await
                    .map_err(|e| format!("restart: {e}"))?;
            }
            Restarter::Cluster {
                cluster,
                url,
                lease,
                attempt,
                ..
            } => {
                cluster
                    .restart_all(pause)
                    .await
                    .map_err(|e| format!("restart: {e}"))?;
                cluster
                    .probe(url, *lease, *attempt, PROBE_WITHIN)
                    .await
                    .map_err(|e| format!("restart: {e}"))?;
            }
            Restarter::Sqlite(stores) => {
                for s in stores.iter() {
                    s.close().await;
                }
                tokio::time::sleep(pause).await;
                for s in stores.iter() {
                    s.reopen().await.map_err(|e| format!("restart: {e}"))?;
                }
            }
        }
        Ok(began.elapsed())
    }
}

/// Runs the contenders on their stores while the schedule plays on their switches, and the
/// group phase (when set up) at the same time, while the restarter restarts once; then closes
/// every contender and reports.
async fn drive(
    label: &'static str,
    args: &Args,
    timings: Timings,
    (stores, switches): (Vec<Arc<dyn GroupStore>>, Vec<Switch>),
    (group, mixed_setup): (Option<GroupSetup>, Option<MixedSetup>),
    mut restarter: Restarter<'_>,
    fences: &RealFences,
) -> BackendReport {
    let downstream = if args.leases() {
        fences.for_backend(label, timings.lease())
    } else {
        Arc::new(Downstream::none())
    };
    let record = Record::new(args.break_fencing, downstream);
    let name = format!("soak-{label}-{}", args.seed);
    let mut errors = Vec::new();
    let mut contenders = Vec::new();
    let mut stores = stores;
    let mut notes = Vec::new();
    let permits = stores.first().is_some_and(|s| s.capabilities().permits);
    // The counted name: its contenders share the lease contenders' stores (and switches), on a
    // store with counted leases.
    let counted = match stores.first() {
        Some(s) if s.capabilities().permits => match Counted::new(&format!("{name}-counted")) {
            Ok(c) => Some(c),
            Err(e) => {
                errors.push(format!("counted name: {e}"));
                None
            }
        },
        Some(_) => {
            notes.push("no counted name: the store has no counted leases".to_owned());
            None
        }
        None => None,
    };
    let lease_stores = args.contenders().min(stores.len().saturating_sub(1)).max(1);
    if let Some(c) = &counted {
        for i in 0..COUNTED_CONTENDERS {
            let Some(store) = stores.get(i % lease_stores) else {
                break;
            };
            let store: Arc<dyn LeaseStore> = store.clone();
            let store: Arc<dyn LeaseStore> = if args.break_renewals {
                Arc::new(LyingStore::new(store, LyingRenewals))
            } else {
                store
            };
            match Contender::spawn_counted(i, store, timings, args.seed, c, &record) {
                Ok(c) => contenders.push(c),
                Err(e) => errors.push(format!("counted-{i}: {e}")),
            }
        }
    }
    // The last lease store is the zombie contender's; its switch is never flipped (the
    // schedule hits contenders `0..args.contenders()` only, and the zombie is never the holder
    // the faults aim at).
    let zombie = stores.pop().and_then(|store| {
        let store: Arc<dyn LeaseStore> = if args.break_renewals {
            Arc::new(LyingStore::new(store, LyingRenewals))
        } else {
            store
        };
        ZombieContender::spawn(store, timings, &name, &record)
            .map_err(|e| errors.push(format!("{ZOMBIE}: {e}")))
            .ok()
    });
    for (i, store) in stores.into_iter().enumerate() {
        let store: Arc<dyn LeaseStore> = if args.break_renewals {
            Arc::new(LyingStore::new(store, LyingRenewals))
        } else {
            store
        };
        let store: Arc<dyn LeaseStore> = Arc::new(StandAside::wrap(store, &record));
        match Contender::spawn(i, store, timings, &name, args.seed, &record) {
            Ok(c) => contenders.push(c),
            Err(e) => errors.push(format!("contender-{i}: {e}")),
        }
    }
    // The same schedule as `schedule_for` gives a backend (a restart unless there is nothing
    // to restart).
    let schedule = Schedule::generate(
        args.seed,
        label,
        args.duration(),
        args.contenders(),
        args.lease(),
        !matches!(restarter, Restarter::None),
    );
    let restarter_cluster = restarter.cluster();
    let start = Instant::now();
    let end = start + args.duration();
    // The mixed-count name: claimers of 3 and of 5 on connections of their own, in chaos from
    // the start to the end, on a store with counted leases.
    let mixed_name = format!("{name}-mixed");
    let mixed_end = end + mixed::extra(label);
    let (mixed, mixed_switches, claimers) = match mixed_setup {
        Some(setup) if permits && !setup.stores.is_empty() => {
            let mixed = Mixed::new(timings.lease());
            let mut claimers = Vec::new();
            for (i, (store, switch)) in setup.stores.into_iter().zip(&setup.switches).enumerate() {
                switch.chaos(mixed::chaos(args.seed, label, i));
                let timings = mixed::timings(timings);
                let until = mixed_end;
                match Claimer::spawn(i, store, timings, (&mixed_name, args.seed), &mixed, until) {
                    Ok(c) => claimers.push(c),
                    Err(e) => errors.push(format!("mixed claimer {i}: {e}")),
                }
            }
            (Some(mixed), setup.switches, claimers)
        }
        Some(_) if !permits => {
            notes.push("no mixed-count name: the store has no counted leases".to_owned());
            (None, Vec::new(), Vec::new())
        }
        _ => (None, Vec::new(), Vec::new()),
    };

    let faults = async {
        // Which contender each fault hit, and which fault each contender is under: a fault
        // aimed at the holder may land on a contender already under another one, and the
        // earlier fault's end must not cut the later one short.
        let mut hit = vec![None; schedule.faults.len()];
        let mut under = vec![None; switches.len()];
        for step in schedule.steps() {
            tokio::time::sleep_until(start + step.at).await;
            let Some(fault) = schedule.faults.get(step.fault) else {
                continue;
            };
            if step.start {
                let target = fault
                    .on_holder
                    .then(|| record.holder())
                    .flatten()
                    .unwrap_or(fault.contender);
                if let (Some(switch), Some(slot)) = (switches.get(target), under.get_mut(target)) {
                    switch.set(fault.mode);
                    *slot = Some(step.fault);
                    hit[step.fault] = Some(target);
                }
            } else if let Some(target) = hit[step.fault]
                && under.get(target) == Some(&Some(step.fault))
            {
                under[target] = None;
                if let Some(switch) = switches.get(target) {
                    switch.set(Mode::Pass);
                }
            }
        }
    };
    let (restart_tx, restart_rx) = watch::channel(match schedule.restart_at {
        Some(_) => Restart::Ahead,
        None => Restart::Over,
    });
    let zombies = drive_zombies(
        &record,
        args.leases(),
        timings.lease(),
        (start, end),
        schedule.restart_at.map(|at| start + at),
        restart_tx.subscribe(),
    );
    let restart = async {
        match schedule.restart_at {
            Some(at) => {
                tokio::time::sleep_until(start + at).await;
                restart_tx.send_replace(Restart::Down);
                let restarted = restarter.restart(restart_pause(timings.lease())).await;
                restart_tx.send_replace(Restart::Over);
                Some(restarted)
            }
            None => None,
        }
    };
    let group_phase = async {
        match group {
            Some(setup) => Some(groups::run(label, args, timings, setup, start, restart_rx).await),
            None => None,
        }
    };
    let lag = async {
        let mut max = Duration::ZERO;
        // Bounded: ends at `end`.
        loop {
            let before = Instant::now();
            if before >= end {
                break max;
            }
            tokio::time::sleep(LAG_TICK).await;
            max = max.max(before.elapsed().saturating_sub(LAG_TICK));
        }
    };
    let node_kills = async {
        match &restarter_cluster {
            Some((c, proxies)) => {
                c.kill_nodes(
                    (start, schedule.restart_at.map(|at| start + at)),
                    (timings.lease(), restart_pause(timings.lease())),
                    end.checked_sub(timings.lease() * 2).unwrap_or(start),
                    (
                        proxies,
                        !c.kind.promotes() && (c.kind != ClusterKind::Redis || args.freeze_primary),
                    ),
                    restart_tx.subscribe(),
                )
                .await
            }
            None => (Vec::new(), Vec::new(), Vec::new()),
        }
    };
    let ((), restarted, max_lag, mut group_report, (), (mut outages, kill_errors, kill_notes)) =
        tokio::join!(faults, restart, lag, group_phase, zombies, node_kills);
    if !claimers.is_empty() {
        // The mixed-count name's extra time, where it has some (NATS); the contenders go on,
        // with no fault left to play.
        tokio::time::sleep_until(mixed_end).await;
        // And on while the name is not yet exercised (see `mixed::EXERCISE_EXTRA`); the
        // claimers stop by themselves at the same moment.
        if let Some(m) = &mixed {
            // Bounded: `EXERCISE_EXTRA` after `mixed_end`.
            while m.racing(mixed_end) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let over = Instant::now().saturating_duration_since(mixed_end);
            if over > Duration::from_millis(100) {
                notes.push(format!(
                    "the mixed-count name's claimers raced {:.1} s past the run to reach the \
                     floor of grants of each count",
                    over.as_secs_f64()
                ));
            }
        }
    }
    notes.extend(kill_notes);
    errors.extend(kill_errors);
    cluster::recoveries(&mut outages, &lock(&record.sections), &timings);
    for switch in &switches {
        switch.set(Mode::Pass);
    }
    let chaos = mixed_switches.iter().map(Switch::chaos_counts).fold(
        lease_conformance::ChaosCounts::default(),
        |a, c| lease_conformance::ChaosCounts {
            passed: a.passed + c.passed,
            delayed: a.delayed + c.delayed,
            held: a.held + c.held,
            lost: a.lost + c.lost,
        },
    );
    for switch in &mixed_switches {
        switch.set(Mode::Pass);
    }
    // Every zombie's pause ended before `end`; this only collects their tasks.
    record.zombies.wait().await;

    let mut stopping: Vec<_> = contenders
        .into_iter()
        .map(|c| tokio::spawn(c.stop(STOP_TIMEOUT)))
        .collect();
    stopping.extend(zombie.map(|z| tokio::spawn(z.stop(STOP_TIMEOUT))));
    stopping.extend(
        claimers
            .into_iter()
            .map(|c| tokio::spawn(c.stop(STOP_TIMEOUT))),
    );
    for handle in stopping {
        match handle.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(format!("stopping a contender: {e}")),
        }
    }

    let (restarts, downtime) = match restarted {
        Some(Ok(d)) => (1, Some(d)),
        Some(Err(e)) => {
            errors.push(e);
            (0, None)
        }
        None => (0, None),
    };
    if let Some(g) = group_report.as_mut() {
        g.restarts = restarts;
    }
    BackendReport {
        backend: label,
        leases: args.leases(),
        groups: group_report,
        history: record.history.report(),
        counted: counted.map(|c| CountedReport {
            permits: c.pool.count(),
            history: c.history.report(),
        }),
        mixed: mixed.map(|m| m.report(chaos, args.seed)),
        stalls: schedule.stalls(),
        cuts: schedule.cuts(),
        restarts,
        downtime,
        terms_won: record.terms_won.load(std::sync::atomic::Ordering::Relaxed),
        terms_lost: record.terms_lost.load(std::sync::atomic::Ordering::Relaxed),
        step_down_failures: record.failures(),
        zombies: record.zombies.finished(),
        refused_writes: record.resource.refused(),
        stale_writes: record.resource.stale_accepted(),
        real: record.downstream.reports(),
        errors,
        max_lag,
        elapsed: Duration::ZERO,
        outages,
        notes,
    }
}

/// The zombie phase: arms one zombie at a time (the zombie contender campaigns until it wins,
/// see `contenders`), up to [`MAX_ZOMBIES`], the first a third of a lease after the start, each
/// a lease after the previous one is over. A zombie may only start where its whole pause
/// ([`zombie_max_pause`]) ends before the restart (or starts a lease after the server is back)
/// and a lease before `end`: a successor must be able to win and write while it pauses, and no
/// zombie is still pausing when the contenders are stopped.
async fn drive_zombies(
    record: &Record,
    leases: bool,
    lease: Duration,
    (start, end): (Instant, Instant),
    restart_at: Option<Instant>,
    mut restart: watch::Receiver<Restart>,
) {
    if !leases {
        return;
    }
    let pause = zombie_max_pause(lease);
    let Some(last_start) = end.checked_sub(lease + pause) else {
        return;
    };
    let mut next = start + lease / 3;
    // Bounded: every turn arms a zombie (which the zombie contender takes or which lapses) or
    // waits for
    // the restart to be over, and `next` only grows until it passes the last start.
    while record.zombies.finished().len() < MAX_ZOMBIES {
        tokio::time::sleep_until(next).await;
        let state = *restart.borrow();
        let until = match (state, restart_at) {
            (Restart::Ahead, Some(at)) => at.checked_sub(pause).map(|u| u.min(last_start)),
            (Restart::Down, _) => None,
            _ => Some(last_start),
        };
        let now = Instant::now();
        match until {
            Some(until) if now <= until => {
                record.zombies.arm(until);
                // Bounded: an arm lapses at `until`, a zombie's pause by `pause`.
                while !record.zombies.idle() {
                    tokio::time::sleep(ZOMBIE_DRIVER_POLL).await;
                }
                next = Instant::now() + lease;
            }
            _ if state == Restart::Over => return,
            _ => {
                // Too close to the restart, or during it: wait until the server is back.
                let _ = restart.wait_for(|r| *r == Restart::Over).await;
                next = Instant::now() + lease;
            }
        }
    }
}
