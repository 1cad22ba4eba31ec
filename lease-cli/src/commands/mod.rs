//! The subcommands, and what they share: checking input, opening the store, building the
//! coordinator.

pub(crate) mod cron;
pub(crate) mod elect;
pub(crate) mod fence;
pub(crate) mod members;
pub(crate) mod output;
pub(crate) mod owners;
pub(crate) mod release;
pub(crate) mod run;
pub(crate) mod status;
pub(crate) mod watch;

use std::sync::Arc;
use std::time::Duration;

use lease::backend::MAX_TTL;
use lease::backend::permits::MAX_PERMITS;
use lease::{
    Coordinator, LeaseStore, Permits, Store, Timings, backend::LeaseStoreExt, coordinator::Target,
};

use crate::cli::HoldArgs;
use crate::duration::{human, parse_duration};
use crate::exit::{CliError, Exit};
use crate::open_store;
use crate::signals::StopSignals;
use crate::store_url::StoreUrl;

/// Checks what can be checked of a name before the store is known: non-empty, no control
/// characters. Its length is checked against the store once open ([`check_name`]).
pub(crate) fn precheck_name(name: &str) -> Result<(), CliError> {
    precheck_name_of(Named::Lease, name)
}

/// Checks a name against the store's limits.
pub(crate) fn check_name(store: &dyn LeaseStore, name: &str) -> Result<(), CliError> {
    check_name_of(store, Named::Lease, name)
}

/// What a name on the command line names, for the messages about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Named {
    /// A lease (`run`, `elect`, `status`, `release`).
    Lease,
    /// A service of members (`members`).
    Service,
    /// A partition group (`owners`).
    Group,
}

impl Named {
    fn word(self) -> &'static str {
        match self {
            Named::Lease => "lease",
            Named::Service => "service",
            Named::Group => "group",
        }
    }

    /// A name error of lease-core (which speaks of a "lease name") about this kind of name.
    fn bad(self, e: &lease::Error) -> CliError {
        let text = e
            .to_string()
            .replace("lease name", &format!("{} name", self.word()));
        CliError::new(Exit::BadName, text)
    }
}

/// [`precheck_name`] for a name of `what`.
pub(crate) fn precheck_name_of(what: Named, name: &str) -> Result<(), CliError> {
    lease::backend::validate_name(name, usize::MAX).map_err(|e| what.bad(&e))
}

/// [`check_name`] for a name of `what`.
pub(crate) fn check_name_of(
    store: &dyn LeaseStore,
    what: Named,
    name: &str,
) -> Result<(), CliError> {
    store.validate_name(name).map_err(|e| what.bad(&e))
}

/// What `run` claims: NAME, or one permit of it with `--permits N` (a whole number from 1 to
/// [`MAX_PERMITS`]; anything else is a usage error saying so).
pub(crate) fn target(name: &str, permits: Option<&str>) -> Result<Target, CliError> {
    let Some(text) = permits else {
        return Ok(Target::from(name));
    };
    let bad = |why: String| {
        CliError::new(
            Exit::Usage,
            format!("--permits {text}: {why}; give a whole number from 1 to {MAX_PERMITS}"),
        )
    };
    let n: u64 = text
        .trim()
        .parse()
        .map_err(|_| bad("not a whole number".to_owned()))?;
    let n = u32::try_from(n).map_err(|_| bad(format!("more than {MAX_PERMITS} permits")))?;
    Permits::new(name, n)
        .map(Target::from)
        .map_err(|e| bad(e.to_string()))
}

/// The shortest `--ttl` `lease` accepts. Shorter leases pass lease-core's checks, but their
/// renewals (every 2/15 of the TTL, each bounded by a third of it) would race the store's round
/// trips and the start of CMD.
pub(crate) const MIN_TTL: Duration = Duration::from_millis(500);

/// The timings for `--ttl`, all scaled from it; unsafe ones are refused.
pub(crate) fn timings(ttl: &str) -> Result<Timings, CliError> {
    let lease = parse_duration(ttl)?;
    if lease < MIN_TTL {
        return Err(CliError::new(
            Exit::BadDuration,
            format!(
                "--ttl {ttl} is shorter than lease's minimum of {}: renewals every 2/15 of it \
                 could not keep up; choose {} or more",
                human(MIN_TTL),
                human(MIN_TTL)
            ),
        ));
    }
    if lease > MAX_TTL {
        return Err(CliError::new(
            Exit::BadDuration,
            format!(
                "--ttl {ttl} is longer than lease's maximum of {}: a lease is kept alive by \
                 renewal, so it need not outlast the work; choose a shorter --ttl (seconds to \
                 minutes, e.g. the default 15s)",
                human(MAX_TTL)
            ),
        ));
    }
    Timings::from_lease(lease).map_err(|e| {
        CliError::new(
            Exit::BadDuration,
            format!("--ttl {ttl} gives unsafe timings: {e}; choose another --ttl, e.g. 15s"),
        )
    })
}

/// Everything `run` and `elect` need before campaigning.
pub(crate) struct Holding {
    /// The coordinator over the store.
    pub(crate) coordinator: Coordinator,
    /// The stop signals, caught from before the store is opened.
    pub(crate) signals: StopSignals,
}

/// Checks the name, timings and instance label, catches stop signals, opens the store and
/// builds the coordinator. A stop signal while the store opens ends `lease` with
/// [`Exit::Interrupted`].
pub(crate) async fn prepare(
    url: &StoreUrl,
    name: &str,
    hold: &HoldArgs,
) -> Result<Holding, CliError> {
    precheck_name(name)?;
    let timings = timings(&hold.ttl)?;
    if let Some(instance) = &hold.instance {
        lease::backend::validate_instance(instance)
            .map_err(|e| CliError::lease_with(Exit::BadName, &e))?;
    }
    let mut signals = StopSignals::install()?;
    let store: Arc<dyn LeaseStore> = tokio::select! {
        store = open_store::open(url, timings.lease()) => store?,
        sig = signals.recv() => return Err(interrupted(sig, "while opening the store")),
    };
    check_name(store.as_ref(), name)?;
    let mut builder = Coordinator::builder(store)
        .timings(timings)
        // `lease` stops CMD itself on loss; the engine's own fail action is never reached.
        .fail_action(|failure| {
            tracing::error!(name = %failure.name, term = failure.term, "work under a lost lease did not return within the grace");
        });
    if let Some(instance) = &hold.instance {
        builder = builder.instance(instance.clone());
    }
    let coordinator = builder.build().map_err(|e| CliError::from_lease(&e))?;
    Ok(Holding {
        coordinator,
        signals,
    })
}

/// The error for a stop signal that arrived while no CMD was running.
pub(crate) fn interrupted(sig: rustix::process::Signal, when: &str) -> CliError {
    CliError::new(
        Exit::Interrupted,
        format!(
            "stopped by {} {when}; CMD was not running",
            crate::signals::name(sig)
        ),
    )
}

/// Opens the store for `status` and `release` and checks every name against it.
pub(crate) async fn open_for(
    url: &StoreUrl,
    names: &[String],
) -> Result<Arc<dyn LeaseStore>, CliError> {
    for name in names {
        precheck_name(name)?;
    }
    // They claim nothing: a Redis server that may lose records is not refused.
    let store = open_store::open_to_read(url, lease::Timings::default().lease()).await?;
    for name in names {
        check_name(store.as_ref(), name)?;
    }
    Ok(store)
}

/// Opens the store for `members` and `owners` and checks `name` (a name of
/// `what`) before and after.
pub(crate) async fn open_group_for(
    url: &StoreUrl,
    what: Named,
    name: &str,
) -> Result<Arc<Store>, CliError> {
    precheck_name_of(what, name)?;
    let store = open_store::open_group_to_read(url, lease::Timings::default().lease()).await?;
    check_name_of(store.as_ref(), what, name)?;
    Ok(store)
}
