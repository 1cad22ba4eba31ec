//! The shared conformance suite every lease store runs, with the tools it needs: a
//! fault-injecting TCP [`proxy`], the in-process [`faults`] hook sharing its [`FaultMode`]
//! (with a seeded random [`chaos`] mode), an
//! [`audit`] of group workers' assignments, a [`history`] checker for fenced critical sections,
//! [`capture`] of metrics and log lines, and the [`env`](mod@env) policy for finding test
//! servers.
//!
//! Every case is a plain `pub async fn case(h: &Harness)` in [`cases`]; a backend runs them all,
//! each as its own `#[tokio::test]`, with one macro call:
//!
//! ```
//! use std::sync::Arc;
//! use lease_conformance::Harness;
//!
//! async fn setup() -> Option<Harness> {
//!     // A backend connects here (or returns `None` after `env::skip`).
//!     Some(Harness::new(Arc::new(lease_local::MemoryStore::new())))
//! }
//!
//! lease_conformance::conformance_suite!(setup);
//! # fn main() {}
//! ```
//!
//! Each case works under its own random name prefix, so cases run in parallel against one
//! database, and uses TTLs of a few hundred milliseconds, so a backend's suite runs in seconds.
//! Cases that need a capability the store lacks (expiry, force release, a fault path) return
//! early with a `NOT APPLICABLE` line, and the suite's last test prints a `CONFORMANCE SUMMARY`
//! line that counts them (see [`suite`]): libtest itself counts such a case as passed. The
//! macro needs no `tokio` in the caller's dependencies: it runs each case on a runtime of this
//! crate's.
//!
//! Test servers come from `LEASE_TEST_<BACKEND>_URL`; when that is unset and a Docker engine
//! answers, the opt-in `docker` feature (off by default; CI's main run builds without
//! testcontainers) makes [`env::server_url`] start the backend's server in a container with
//! testcontainers — `postgres:16-alpine`, `mariadb:11`, `redis:7` with AOF, `nats:2.10` with
//! JetStream, `mongo:7` or etcd 3.5, each replaceable by `LEASE_TEST_<BACKEND>_IMAGE` — once per
//! backend and test process, kept until the process exits; run a backend's tests with
//! `--features lease-conformance/docker` to get it. Without a URL or a container, the
//! cases skip loudly (see [`env`](mod@env)).

pub mod audit;
pub mod capture;
pub mod cases;
pub mod chaos;
#[cfg(feature = "docker")]
mod docker;
pub mod env;
pub mod faults;
pub mod hints;
pub mod history;
pub mod polling;
pub mod proxy;
pub mod suite;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::{
    Coordinator, LeaseStore, Timings,
    backend::{
        Capabilities, membership::MembershipStore, partitions::PartitionStore, slots::SlotStore,
    },
    coordinator::StepDownFailure,
};

pub use audit::{AssignmentAudit, ConsumerPlan, assignments_settled};
pub use chaos::{ChaosAction, ChaosConfig, ChaosConfigError, ChaosCounts};
pub use faults::{FaultMode, Faults, FaultyStore, HintMode, OpCounts, faulty};
pub use history::{History, HistoryReport};
pub use proxy::{FaultProxy, ProxyStats};

/// The longest one case may run before it fails as hung.
pub const CASE_TIME_LIMIT: Duration = Duration::from_secs(60);

/// Something that can stall or cut the connection of a store on the fault path.
pub trait FaultSwitch: Send + Sync {
    /// Let everything through.
    fn pass(&self);
    /// Hold every request without an answer.
    fn stall(&self);
    /// Fail every request as if the connection were cut.
    fn cut(&self);
    /// Pass, delay, hold or lose the answer of each request at random from `config`'s seed
    /// ([`FaultMode::Chaos`]): per operation on the in-process hook, per chunk read from the
    /// client on a TCP proxy.
    fn chaos(&self, config: ChaosConfig);
    /// Request/answer exchanges seen since the last [`reset_round_trips`](Self::reset_round_trips),
    /// when the switch can count them (a TCP proxy can; an in-process fault store cannot).
    fn round_trips(&self) -> Option<u64> {
        None
    }
    /// Starts counting round trips from zero.
    fn reset_round_trips(&self) {}
}

impl FaultSwitch for FaultProxy {
    fn pass(&self) {
        self.set_mode(FaultMode::Pass);
    }
    fn stall(&self) {
        self.set_mode(FaultMode::Stall);
    }
    fn cut(&self) {
        self.set_mode(FaultMode::Cut);
    }
    fn chaos(&self, config: ChaosConfig) {
        self.set_mode(FaultMode::Chaos(config));
    }
    fn round_trips(&self) -> Option<u64> {
        Some(self.stats().round_trips)
    }
    fn reset_round_trips(&self) {
        self.reset_stats();
    }
}

/// A store reached through a fault switch: the same database, another connection.
#[derive(Clone)]
pub struct FaultPath {
    /// The store whose connection the switch controls.
    pub store: Arc<dyn LeaseStore>,
    /// The switch.
    pub switch: Arc<dyn FaultSwitch>,
}

/// A store with both partitions and membership, called on one handle: what the group cases
/// hold (and the soak, the benchmarks and the backends' own tests). Every type that implements
/// both traits implements it. A [`GroupWorker`](lease_core::GroupWorker) needs no such handle:
/// it takes any store and reaches both through
/// [`LeaseStore::partition_store`] and [`LeaseStore::membership_store`].
pub trait GroupStore: LeaseStore + PartitionStore + MembershipStore {}

impl<S: LeaseStore + PartitionStore + MembershipStore + ?Sized> GroupStore for S {}

/// A store with scheduler slots, called on one handle: what the slot cases hold. Every type
/// that implements [`LeaseStore`] and [`SlotStore`] implements it. A
/// [`Scheduler`](lease_core::Scheduler) needs no such handle: it takes any store and reaches
/// the slots through [`LeaseStore::slot_store`].
pub trait SchedulerStore: LeaseStore + SlotStore {}

impl<S: LeaseStore + SlotStore + ?Sized> SchedulerStore for S {}

/// What a case gets: the store under test and how to test it.
#[derive(Clone)]
pub struct Harness {
    /// The store under test.
    pub store: Arc<dyn LeaseStore>,
    /// The same database through a fault switch, when the backend provides one.
    pub faults: Option<FaultPath>,
    /// The store's slot operations, when it has them (see [`Harness::with_slots`]).
    pub slots: Option<Arc<dyn SchedulerStore>>,
    /// The store's partition and membership operations, when it has them (see
    /// [`Harness::with_groups`]).
    pub groups: Option<Arc<dyn GroupStore>>,
    /// The same, on the fault path's store, so round trips can be counted.
    pub groups_via_faults: Option<Arc<dyn GroupStore>>,
    /// A random prefix for this case's names.
    pub prefix: String,
    /// The TTL store-level cases use.
    pub ttl: Duration,
    /// The timings coordinator-level cases use.
    pub timings: Timings,
    /// How far apart the store's clock and the test's measurement may be, for expiry checks.
    pub slack: Duration,
    failures: Arc<Mutex<Vec<StepDownFailure>>>,
    /// Cases this backend's server cannot run, with the reason (see [`Harness::skipping`]).
    skips: Vec<(&'static str, String)>,
    /// Kept until the last clone of the harness drops (see [`Harness::holding`]).
    held: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// What did not apply in the case running on this harness (see [`Harness::not_applicable`]).
    notes: Arc<Mutex<Vec<String>>>,
}

impl Harness {
    /// A harness over `store`: TTL 600 ms (or the store's fixed TTL), timings derived from a
    /// 1.5 s lease, 150 ms of slack, a fresh random prefix.
    pub fn new(store: Arc<dyn LeaseStore>) -> Harness {
        let fixed = store.capabilities().fixed_ttl;
        let ttl = fixed.unwrap_or(Duration::from_millis(600));
        let lease = fixed.unwrap_or(Duration::from_millis(1500));
        let timings = Timings::from_lease(lease).unwrap_or_default();
        Harness {
            store,
            faults: None,
            slots: None,
            groups: None,
            groups_via_faults: None,
            prefix: format!("lc{:08x}-", rand::random::<u32>()),
            ttl,
            timings,
            slack: Duration::from_millis(150),
            failures: Arc::default(),
            skips: Vec::new(),
            held: None,
            notes: Arc::default(),
        }
    }

    /// Marks `case` (a case's function name) as one this server cannot run, for `why`: the
    /// suite then prints one `NOT RUN <backend> <case>: <why>` line (past the test harness's
    /// capture) instead of running it. For a server that is a stand-in, such as an emulator,
    /// whose limits are known; never for a failure of the backend itself.
    pub fn skipping(mut self, case: &'static str, why: impl Into<String>) -> Self {
        self.skips.push((case, why.into()));
        self
    }

    /// Why `case` is skipped on this server, when it is (see [`Harness::skipping`]).
    pub fn skip_reason(&self, case: &str) -> Option<&str> {
        self.skips
            .iter()
            .find(|(c, _)| *c == case)
            .map(|(_, why)| why.as_str())
    }

    /// Keeps `guard` until the harness (and every clone of it) is dropped, that is for the
    /// whole case: e.g. a lock guard, so that a backend's cases run one at a time.
    pub fn holding(mut self, guard: impl std::any::Any + Send + Sync) -> Self {
        self.held = Some(Arc::new(guard));
        self
    }

    /// Adds a fault path: `store` must reach the same server as [`Harness::store`] (see
    /// [`Harness::checked_fault_path`]).
    pub fn with_faults(mut self, store: Arc<dyn LeaseStore>, switch: Arc<dyn FaultSwitch>) -> Self {
        self.faults = Some(FaultPath { store, switch });
        self
    }

    /// Checks that the fault path's store reaches the same server as the store under test: a
    /// lease claimed through the store under test is read back through the fault path's store
    /// (same term, same instance label), then released. Panics, saying what to change, when
    /// it is not: a proxy pointed at another server (one at the same address as the server
    /// reports of itself, say, when that is a container's own) makes every case on the fault
    /// path fail in ways that look like the store's bugs. Without a fault path, does nothing.
    /// The probe is one claim, one read and one release under this harness's name prefix,
    /// with the switch as the case finds it (passing, on a fresh harness).
    pub async fn checked_fault_path(self) -> Self {
        let Some(faults) = &self.faults else {
            return self;
        };
        let name = self.name("fault-path-probe");
        let holder = lease_core::backend::HolderToken::mint();
        let instance = format!("probe-{:08x}", rand::random::<u32>());
        let backend = self.backend();
        let grant = match self.store.claim(&name, &holder, &instance, self.ttl).await {
            Ok(Some(grant)) => grant,
            Ok(None) => {
                panic!("{backend}: the fault path check could not claim the new name {name}")
            }
            Err(e) => panic!("{backend}: the fault path check could not claim {name}: {e}"),
        };
        let seen = faults.store.get(&name).await;
        // Released before judging, so a failed check leaves nothing held.
        let _ = self.store.release(&name, &holder).await;
        match seen {
            Ok(Some(info)) if info.term == grant.term && info.instance == instance => self,
            Ok(other) => panic!(
                "{backend}: the fault path's store does not reach the store under test's \
                 server: {name}, claimed through the store under test (term {}, instance \
                 {instance}), reads through the fault path's store as {other:?}. Point the \
                 fault path (its proxy) at the server the store under test connected to: the \
                 address in the test server's URL, not one the server reports of itself",
                grant.term
            ),
            Err(e) => panic!(
                "{backend}: the fault path check could not read {name} through the fault \
                 path's store: {e}"
            ),
        }
    }

    /// Adds the store's slot operations (the same store as [`Harness::store`]).
    pub fn with_slots(mut self, slots: Arc<dyn SchedulerStore>) -> Self {
        self.slots = Some(slots);
        self
    }

    /// Adds the store's partition and membership operations: `groups` is the same store as
    /// [`Harness::store`], `via_faults` (when given) the fault path's store, through which the
    /// suite counts the round trips of a batch renewal.
    pub fn with_groups(
        mut self,
        groups: Arc<dyn GroupStore>,
        via_faults: Option<Arc<dyn GroupStore>>,
    ) -> Self {
        self.groups = Some(groups);
        self.groups_via_faults = via_faults;
        self
    }

    /// Sets the store-level TTL.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets the coordinator timings.
    pub fn with_timings(mut self, timings: Timings) -> Self {
        self.timings = timings;
        self
    }

    /// Sets the clock slack.
    pub fn with_slack(mut self, slack: Duration) -> Self {
        self.slack = slack;
        self
    }

    /// The store's capabilities.
    pub fn caps(&self) -> Capabilities {
        self.store.capabilities()
    }

    /// The backend's name.
    pub fn backend(&self) -> &'static str {
        self.store.backend()
    }

    /// A name unique to this case.
    pub fn name(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    /// A coordinator over the store under test, labelled `instance`, with the harness timings
    /// and a fail action that records instead of ending the process.
    pub fn coordinator(&self, instance: &str) -> Coordinator {
        self.coordinator_over(self.store.clone(), instance)
    }

    /// A coordinator over `store` with the harness timings and recording fail action.
    pub fn coordinator_over(&self, store: Arc<dyn LeaseStore>, instance: &str) -> Coordinator {
        self.coordinator_timed(store, instance, self.timings)
    }

    /// A coordinator over `store` with `timings` (which must suit the store) and the recording
    /// fail action.
    pub fn coordinator_timed(
        &self,
        store: Arc<dyn LeaseStore>,
        instance: &str,
        timings: Timings,
    ) -> Coordinator {
        let failures = self.failures.clone();
        let built = Coordinator::builder(store)
            .instance(instance)
            .timings(timings)
            // The cases' work asserts: a failed assertion must end `run_elected` with the
            // panic, not be restarted (the default).
            .on_work_error(lease_core::coordinator::OnWorkError::Return)
            .fail_action(move |f| {
                failures
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(f.clone());
            })
            .build();
        match built {
            Ok(c) => c,
            Err(e) => panic!("the harness timings must suit the store: {e}"),
        }
    }

    /// Step-down failures recorded by coordinators from this harness.
    pub fn step_down_failures(&self) -> Vec<StepDownFailure> {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Notes that a case (or the part of it named `case`) does not apply to this backend, for
    /// `why`: one `NOT APPLICABLE <backend> <case>: <why>` line on the process's stderr, past
    /// the test harness's capture, and the case counts as "did not apply" in the suite's
    /// summary (see [`suite`]).
    pub fn not_applicable(&self, case: &str, why: &str) {
        env::not_applicable(self.backend(), case, why);
        self.notes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!("{case}: {why}"));
    }

    /// The same as [`Harness::not_applicable`] (which is now as loud).
    pub fn not_applicable_loudly(&self, case: &str, why: &str) {
        self.not_applicable(case, why);
    }

    /// What the case that ran on this harness did: [`suite::CaseOutcome::Ran`], or
    /// [`suite::CaseOutcome::NotApplicable`] with the notes of what did not apply.
    pub fn outcome(&self) -> suite::CaseOutcome {
        let notes = self.notes.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if notes.is_empty() {
            suite::CaseOutcome::Ran
        } else {
            suite::CaseOutcome::NotApplicable(notes)
        }
    }
}

/// Runs `case` on a task of its own and returns its panic message (empty when it did not
/// panic): for tests that show a case fails over a deliberately broken store.
pub async fn panic_of<F>(case: F) -> String
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    match tokio::spawn(case).await {
        Ok(()) => String::new(),
        Err(e) if e.is_panic() => {
            let p = e.into_panic();
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default()
        }
        Err(e) => format!("the case's task ended without finishing: {e}"),
    }
}

/// Stamps out every case in [`cases`] as its own `#[test]`, each calling `setup()` for a fresh
/// [`Harness`] (an `async fn() -> Option<Harness>`; `None` skips) and running the case on a
/// two-worker tokio runtime of this crate's (the caller needs no `tokio` of its own), within
/// [`CASE_TIME_LIMIT`]; then a last test, `zz_conformance_summary`, that prints the suite's
/// [`suite`] summary: how many cases ran in full, did not apply, were not run on this server
/// or failed.
#[macro_export]
macro_rules! conformance_suite {
    ($setup:path) => {
        $crate::conformance_suite!(@each $setup;
            claim_of_a_free_name_reports_term_and_expiry,
            claim_of_a_held_name_fails_and_changes_nothing,
            one_winner_among_many_concurrent_claimers,
            terms_increase_across_claim_release_and_expiry,
            renew_extends_the_expiry,
            renew_after_expiry_fails,
            renew_by_a_non_holder_fails_and_changes_nothing,
            renew_many_answers_item_by_item,
            renew_many_never_revives_an_expired_lease,
            renew_many_refuses_bad_batches,
            release_by_a_non_holder_fails_and_changes_nothing,
            release_frees_at_once_and_keeps_the_term,
            unrenewed_lease_is_claimable_after_ttl_and_not_before,
            verify_tells_the_holder_from_others,
            get_tells_the_truth,
            names_are_compared_byte_for_byte,
            longest_name_works_and_bad_names_are_refused,
            bad_ttls_are_refused,
            bad_input_is_refused_before_any_io,
            force_release_ends_a_live_lease_and_keeps_the_term,
            names_under_a_prefix_are_listed_literally_in_byte_order,
            coordinator_reports_held_and_the_observer_names_the_holder,
            coordinator_resign_hands_over_at_once,
            coordinator_close_signals_and_releases,
            coordinator_keeps_the_lease_well_past_its_ttl,
            loss_is_detected_within_the_deadline_when_the_store_stalls,
            loss_is_detected_within_the_deadline_when_the_connection_is_cut,
            a_stalled_holder_is_replaced_only_after_the_store_expires_it,
            fenced_history_of_many_contenders_is_clean,
            slot_claims_follow_the_rules,
            a_superseded_instant_is_reported,
            overrun_instants_are_skipped,
            finish_after_the_lease_was_lost,
            unfinished_for_many_names_and_one_rerun,
            each_instant_starts_once_among_replicas,
            scheduled_rounds_start_once_across_replicas,
            partition_epochs_follow_the_rules,
            batch_renewal_extends_only_the_owners_live_leases,
            batch_renewal_of_1000_partitions_takes_fixed_round_trips,
            membership_expires_and_leave_is_immediate,
            bad_partition_and_member_inputs_are_refused,
            three_nodes_rebalance_without_overlap,
            a_release_wakes_a_waiter_at_once,
            without_hints_a_waiter_still_takes_over_within_the_retry,
            lost_or_duplicated_hints_never_break_exclusivity,
            a_crashed_holder_is_succeeded_at_the_stores_expiry_not_before,
            permit_claims_take_the_lowest_free_permit_up_to_n,
            at_most_n_permits_are_granted_among_concurrent_claimers,
            at_most_n_holders_among_many_contenders,
            permit_terms_increase_per_name_across_release_and_expiry,
            a_dead_holders_permit_frees_itself_at_its_ttl,
            an_unknown_permit_claim_never_leaves_one_acquirer_two_permits,
            bad_permit_input_is_refused,
            changing_the_permit_count_applies_to_new_claims_only,
            claims_of_different_counts_keep_each_claims_limit,
            claims_of_different_counts_keep_each_claims_limit_under_chaos,
            a_permit_release_wakes_a_waiter_at_once,
            wrappers_report_the_stores_capabilities_and_availability,
            capabilities_agree_with_what_the_store_does
        );
    };
    (@each $setup:path; $($case:ident),* $(,)?) => {
        static __LEASE_CONFORMANCE_SUITE: $crate::suite::SuiteRecord =
            $crate::suite::SuiteRecord::new();
        $(
            #[test]
            fn $case() {
                $crate::suite::run_case(&__LEASE_CONFORMANCE_SUITE, stringify!($case), async {
                    let Some(harness) = $setup().await else {
                        return (None, $crate::suite::CaseOutcome::NoServer);
                    };
                    let backend = Some(harness.backend());
                    if let Some(why) = harness.skip_reason(stringify!($case)) {
                        $crate::env::skip_case(harness.backend(), stringify!($case), why);
                        return (backend, $crate::suite::CaseOutcome::NotRun(why.to_owned()));
                    }
                    $crate::cases::$case(&harness).await;
                    (backend, harness.outcome())
                });
            }
        )*
        /// Prints the suite's summary once its other cases are done (its name sorts last).
        #[test]
        fn zz_conformance_summary() {
            let total = [$(stringify!($case)),*].len();
            $crate::suite::summarize(&__LEASE_CONFORMANCE_SUITE, module_path!(), total);
        }
    };
}
