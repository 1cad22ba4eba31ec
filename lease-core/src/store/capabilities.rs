//! What a store can do: its [`Capabilities`], so callers and the conformance suite choose what
//! to use.

use std::time::Duration;

use crate::store::validate::DEFAULT_MAX_NAME_BYTES;
use crate::timings::STORE_CLOCK_GRANULARITY;

/// What a store can do, so callers and the conformance suite choose what to use.
///
/// The [`Default`] claims only what every [`LeaseStore`](crate::LeaseStore) must do anyway
/// (leases that expire, strictly increasing terms, a millisecond clock, names up to
/// [`DEFAULT_MAX_NAME_BYTES`]): every stronger guarantee or extra operation is `false` until the
/// store opts in, so a store that forgets a flag is tested for less, never accused of more. A
/// store writes the flags it has and `..derived_capabilities(self)`
/// ([`derived_capabilities`](crate::backend::derived_capabilities)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Leases expire when not renewed. `false` only for stores whose terms never expire.
    pub expiry: bool,
    /// Read nowhere, and kept only so that existing struct literals compile: every
    /// [`LeaseStore`](crate::LeaseStore) must issue strictly increasing terms (its contract),
    /// and the conformance suite checks that on every store whatever this says. A store with
    /// no fencing token implements [`PollingStore`](crate::backend::polling::PollingStore)
    /// instead. To be removed in the next breaking release.
    #[deprecated(
        since = "0.1.0",
        note = "read nowhere: every LeaseStore fences (its contract); a store without fencing \
                tokens implements PollingStore"
    )]
    pub fencing: bool,
    /// Terms start at 1 and go up by exactly one per change of hands (opt in). `false` (the
    /// default) where the term is taken from elsewhere, e.g. a stream sequence or a revision:
    /// still strictly increasing, with gaps.
    pub consecutive_terms: bool,
    /// After release or expiry, [`LeaseStore::get`](crate::LeaseStore::get) still reports the
    /// name's last term (the record is kept; opt in). `false` (the default) where the server
    /// removes ended records itself.
    pub keeps_ended_records: bool,
    /// The coarsest step of the clock the store judges expiry by: a lease claimed or renewed
    /// for `ttl` may end up to this much before `ttl` has passed since the request was sent
    /// (a store whose clock ticks in whole seconds, such as memcached's, says 1 s), and never
    /// earlier. The default is [`STORE_CLOCK_GRANULARITY`] (1 ms), what [`Timings`](crate::Timings)
    /// keep back anyway; a [`Coordinator`](crate::Coordinator) over a store with a coarser clock
    /// refuses timings that do not keep back the whole step (see
    /// [`Timings::check_clock_granularity`](crate::Timings::check_clock_granularity)). The
    /// conformance suite refuses any claim of an unrenewed lease sooner than `ttl − clock_granularity`
    /// after the claim was sent.
    pub clock_granularity: Duration,
    /// A transaction can verify the lease as its first statement (SQL stores).
    pub verify_in_transaction: bool,
    /// The store pushes hints of changes ([`LeaseStore::changes`](crate::LeaseStore::changes)
    /// answers `Some`), so waiters wake when a name is released instead of at their next retry.
    pub watch: bool,
    /// Partitioned leases are supported:
    /// [`LeaseStore::partition_store`](crate::LeaseStore::partition_store) answers `Some`
    /// (derived from it by [`derived_capabilities`](crate::backend::derived_capabilities)).
    pub partitions: bool,
    /// Membership records are supported:
    /// [`LeaseStore::membership_store`](crate::LeaseStore::membership_store) answers `Some`
    /// (derived from it).
    pub membership: bool,
    /// Scheduler slots are supported: [`LeaseStore::slot_store`](crate::LeaseStore::slot_store)
    /// answers `Some` (derived from it).
    pub slots: bool,
    /// [`LeaseStore::force_release`](crate::LeaseStore::force_release) is supported.
    pub force_release: bool,
    /// [`LeaseStore::names`](crate::LeaseStore::names) lists the names under a prefix (the
    /// default of the trait answers `Unsupported`).
    pub list_names: bool,
    /// Counted leases are supported: [`LeaseStore::permit_store`](crate::LeaseStore::permit_store)
    /// answers `Some`, with
    /// [`PermitStore::claim_permit`](crate::backend::permits::PermitStore::claim_permit) and the
    /// other permit operations (see [`permits`](crate::backend::permits); derived from the
    /// accessor).
    pub permits: bool,
    /// The longest name, in bytes.
    pub max_name_bytes: usize,
    /// How a batch renewal of partitions reaches the server (see
    /// [`PartitionStore::renew_partitions`](crate::backend::partitions::PartitionStore::renew_partitions)).
    pub batch_renew: BatchRenew,
    /// [`LeaseStore::renew_many`](crate::LeaseStore::renew_many) reaches the server in a fixed
    /// number of requests however many names it renews (one statement, one script per hash
    /// slot), or in requests all sent before any answer is awaited (pipelined bursts, NATS),
    /// rather than the trait's default of one `renew` after the other, a round trip per name. A coordinator built with
    /// [`Renewals::Auto`](crate::coordinator::Renewals::Auto) renews the terms it holds in
    /// batches exactly when this is `true`.
    pub renew_many: bool,
    /// When set, the only lease duration the store accepts (a store whose expiry is fixed
    /// server-side, such as a bucket's max age).
    pub fixed_ttl: Option<Duration>,
}

impl Default for Capabilities {
    /// Leases that expire, by a clock of [`STORE_CLOCK_GRANULARITY`], names up to
    /// [`DEFAULT_MAX_NAME_BYTES`], one-round-trip batch renewal, and nothing else: terms not
    /// claimed consecutive, ended records not claimed kept, no optional operation.
    #[allow(deprecated)]
    fn default() -> Self {
        Capabilities {
            expiry: true,
            fencing: true,
            consecutive_terms: false,
            keeps_ended_records: false,
            clock_granularity: STORE_CLOCK_GRANULARITY,
            verify_in_transaction: false,
            watch: false,
            partitions: false,
            membership: false,
            slots: false,
            force_release: false,
            list_names: false,
            permits: false,
            max_name_bytes: DEFAULT_MAX_NAME_BYTES,
            batch_renew: BatchRenew::default(),
            renew_many: false,
            fixed_ttl: None,
        }
    }
}

/// How a store's
/// [`PartitionStore::renew_partitions`](crate::backend::partitions::PartitionStore::renew_partitions)
/// reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchRenew {
    /// A fixed number of round trips, however many partitions are renewed.
    Fixed {
        /// Round trips per call.
        round_trips: u32,
    },
    /// One request per partition, sent without waiting for the answers (a server with no
    /// multi-key operation); each renewal is atomic on its own.
    Pipelined,
}

impl Default for BatchRenew {
    /// One round trip.
    fn default() -> Self {
        BatchRenew::Fixed { round_trips: 1 }
    }
}
