//! The backend contract: a small store of atomic lease operations.
//!
//! Every backend implements [`LeaseStore`]; [`Coordinator`](crate::Coordinator), the keeper,
//! `run` and `run_elected` are written once over it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::notify::{Topic, Wakeups};
use crate::permits::{PermitGrant, PermitInfo};
use crate::validate::{DEFAULT_MAX_NAME_BYTES, validate_name, validate_ttl};

/// The longest instance label, in bytes, every store must keep.
pub const MAX_INSTANCE_BYTES: usize = 128;

/// A holder token: 128 random bits minted for one claim and never reused.
///
/// The store keeps it in the lease's record; renew, verify and release match on it, so a claim
/// made by an earlier incarnation of the same process is never taken for this one. It is a
/// capability: whoever has it can renew or release the lease, so it is never shown by
/// [`LeaseStore::get`] and its `Debug` form shows only a prefix.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HolderToken([u8; 16]);

impl HolderToken {
    /// A fresh random token: 128 bits read from the operating system's random source
    /// (`getrandom(2)` on Linux) on every call.
    ///
    /// No generator state lives in the process, so a child made by `fork()` never mints a
    /// token its parent minted or will mint (a per-process or per-thread generator, such as
    /// `rand`'s thread-local one, is copied by `fork()` and would make both processes mint the
    /// same tokens). Should the operating system's source fail, which it does not on any
    /// supported platform, the token comes from the thread-local generator with the process
    /// id mixed in, which still tells a forked child's tokens from its parent's.
    pub fn mint() -> HolderToken {
        use rand::TryRngCore;
        let mut bytes = [0u8; 16];
        if rand::rngs::OsRng.try_fill_bytes(&mut bytes).is_err() {
            bytes = rand::random();
            for (b, p) in bytes.iter_mut().zip(std::process::id().to_le_bytes()) {
                *b ^= p;
            }
        }
        HolderToken(bytes)
    }

    /// A token from its 16 bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> HolderToken {
        HolderToken(bytes)
    }

    /// The token's 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The token as 32 lower-case hex digits, for stores that keep text.
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(32);
        for b in self.0 {
            out.push(char::from(DIGITS[usize::from(b >> 4)]));
            out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
        }
        out
    }

    /// Parses 32 hex digits.
    pub fn from_hex(s: &str) -> Option<HolderToken> {
        if s.len() != 32 || !s.is_ascii() {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(HolderToken(out))
    }
}

impl fmt::Debug for HolderToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.to_hex();
        write!(f, "HolderToken({}…)", hex.get(..8).unwrap_or(&hex))
    }
}

/// What a store tells the holder after a claim, renewal or verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The fencing token: it strictly increases every time the name changes hands.
    pub term: u64,
    /// Time left on the lease by the store's clock when the store answered.
    pub expires_in: Duration,
}

/// What anyone can learn about a name (the holder token excepted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The lease's name.
    pub name: String,
    /// The instance label of the last holder.
    pub instance: String,
    /// The last term issued for the name.
    pub term: u64,
    /// `true` when the lease is live by the store's clock.
    pub live: bool,
    /// Time left by the store's clock; zero when not live.
    pub expires_in: Duration,
}

/// What a store can do, so callers and the conformance suite choose what to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Leases expire when not renewed. `false` only for stores whose terms never expire.
    pub expiry: bool,
    /// Terms strictly increase every time a name changes hands, across release and expiry.
    pub fencing: bool,
    /// Terms start at 1 and go up by exactly one per change of hands. `false` where the term is
    /// taken from elsewhere, e.g. a stream sequence: still strictly increasing, with gaps.
    pub consecutive_terms: bool,
    /// After release or expiry, [`LeaseStore::get`] still reports the name's last term (the
    /// record is kept). `false` where the server removes expired records itself.
    pub keeps_ended_records: bool,
    /// A transaction can verify the lease as its first statement (SQL stores).
    pub verify_in_transaction: bool,
    /// The store pushes hints of changes ([`LeaseStore::changes`] answers `Some`), so waiters
    /// wake when a name is released instead of at their next retry.
    pub watch: bool,
    /// Partitioned leases are supported.
    pub partitions: bool,
    /// Membership records are supported.
    pub membership: bool,
    /// Scheduler slots are supported.
    pub slots: bool,
    /// [`LeaseStore::force_release`] is supported.
    pub force_release: bool,
    /// Counted leases are supported: [`LeaseStore::claim_permit`] and the other permit
    /// operations (see [`permits`](crate::permits)).
    pub permits: bool,
    /// The longest name, in bytes.
    pub max_name_bytes: usize,
    /// How a batch renewal of partitions reaches the server (see
    /// [`PartitionStore::renew_partitions`](crate::PartitionStore::renew_partitions)).
    pub batch_renew: crate::backend::BatchRenew,
    /// When set, the only lease duration the store accepts (a store whose expiry is fixed
    /// server-side, such as a bucket's max age).
    pub fixed_ttl: Option<Duration>,
}

impl Default for Capabilities {
    /// Leases with expiry and fencing, names up to [`DEFAULT_MAX_NAME_BYTES`], nothing else.
    fn default() -> Self {
        Capabilities {
            expiry: true,
            fencing: true,
            consecutive_terms: true,
            keeps_ended_records: true,
            verify_in_transaction: false,
            watch: false,
            partitions: false,
            membership: false,
            slots: false,
            force_release: false,
            permits: false,
            max_name_bytes: DEFAULT_MAX_NAME_BYTES,
            batch_renew: crate::backend::BatchRenew::default(),
            fixed_ttl: None,
        }
    }
}

/// The backend contract: atomic lease operations, each one round trip to the store.
///
/// # The rules every store keeps
///
/// - One record per name, updated in place; its term (fencing token) starts at 1 and goes up
///   by one on every claim that changes hands. Release and expiry keep the record, so the
///   term keeps growing. (A store that takes its terms from elsewhere, such as a stream
///   sequence, says so with `consecutive_terms: false`; its terms still strictly increase. A
///   store whose server removes ended records says so with `keeps_ended_records: false`.)
/// - Expiry is judged by the **store's clock** alone. The caller's clock never decides whether
///   a lease is live.
/// - A lease is live while its expiry is in the future by the store's clock. Renew, verify and
///   release act only on a live lease held under the given holder token.
/// - Every argument is checked before any I/O, with the one check per operation in
///   [`backend::check`](crate::backend::check), and refused with `InvalidName`,
///   `InvalidTimings` or `InvalidArgument`.
/// - Errors from the driver keep their source; connection failures are `Unavailable`.
///
/// # Cancel safety
///
/// Every operation is a single atomic statement or script. If its future is dropped or times
/// out after the request was sent, the operation either took effect whole or not at all, and
/// the caller cannot tell which. The engine never guesses: after an unknown claim it reads back
/// with [`verify`](LeaseStore::verify) and adopts the claim if it took effect under its holder
/// token; an unknown renewal is simply retried (the deadline counts from the last renewal known
/// to have succeeded); release is idempotent and may be repeated; verify and get only read.
#[async_trait]
pub trait LeaseStore: Send + Sync + fmt::Debug + 'static {
    /// A short name of the backend, e.g. `"postgres"`, for logs and test output.
    fn backend(&self) -> &'static str;

    /// What this store can do.
    fn capabilities(&self) -> Capabilities;

    /// Checks at start-up that the store can carry leases (reachable, writable, clock
    /// present, schema in place), failing fast with a message that says what to fix.
    async fn available(&self) -> Result<()> {
        Ok(())
    }

    /// Claims `name` for `holder` for `ttl`, if it is free (never claimed, released, or
    /// expired by the store's clock). Returns the new term, one more than the last, and the
    /// time left; `None` when someone holds it live — including this same holder token: a
    /// claim never extends a live lease, [`renew`](LeaseStore::renew) does.
    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>>;

    /// Extends the live lease `holder` has on `name` to `ttl` from now by the store's clock.
    /// `None` when the lease is not live under this holder (lost): an expired lease is never
    /// revived, even if nobody claimed it since.
    async fn renew(&self, name: &str, holder: &HolderToken, ttl: Duration)
    -> Result<Option<Grant>>;

    /// Ends the live lease `holder` has on `name`, keeping the record and its term, so the next
    /// claim gets a higher term at once. `true` when this call ended a live lease.
    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool>;

    /// The term and time left when `holder` holds `name` live; `None` otherwise.
    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>>;

    /// What the store knows of `name`; `None` when it was never claimed.
    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>>;

    /// Ends whoever's live lease on `name`: an administrator's break. **Unsafe**: the holder
    /// may still be working. The record and its term are kept, so the next claim still gets a
    /// higher term and a fenced resource refuses the old holder. `true` when a live lease was
    /// ended.
    async fn force_release(&self, name: &str) -> Result<bool> {
        let _ = name;
        Err(Error::unsupported(format!(
            "the {} store does not support force release",
            self.backend()
        )))
    }

    /// Claims one permit of the counted name `name` for `holder`, when fewer than `permits`
    /// of its permits are live by the store's clock: the lowest free permit below `permits`,
    /// with a term one more than the greatest ever issued for the name across its permits.
    /// `None` when the name is full, or when `holder` already holds a live permit of it. The
    /// count and the claim are one atomic step (see [`permits`](crate::permits) for every
    /// rule). Unsupported unless [`Capabilities::permits`].
    async fn claim_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<PermitGrant>> {
        let _ = (name, permits, holder, instance, ttl);
        Err(self.permits_unsupported())
    }

    /// Extends the live permit `permit` of `name` that `holder` holds, keeping its term, as
    /// [`renew`](LeaseStore::renew) does a lease. `None` when it is not live under `holder`.
    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        let _ = (name, permit, holder, ttl);
        Err(self.permits_unsupported())
    }

    /// Ends the live permit `permit` of `name` that `holder` holds, keeping the name's term
    /// sequence. `true` when this call ended a live permit.
    async fn release_permit(&self, name: &str, permit: u32, holder: &HolderToken) -> Result<bool> {
        let _ = (name, permit, holder);
        Err(self.permits_unsupported())
    }

    /// The live permit of `name` that `holder` holds, found by the token alone; `None` when it
    /// holds none. A term checks with it that it still holds its permit; the read-back after a
    /// claim whose outcome is unknown goes through
    /// [`read_back_permit`](LeaseStore::read_back_permit).
    async fn verify_permit(&self, name: &str, holder: &HolderToken) -> Result<Option<PermitGrant>> {
        let _ = (name, holder);
        Err(self.permits_unsupported())
    }

    /// The read-back after a [`claim_permit`](LeaseStore::claim_permit) of one of `permits`
    /// permits of `name` whose outcome is unknown (its answer was lost, or it timed out): the
    /// live permit `holder` holds when that claim took effect *and* the claim's "at most
    /// `permits`" rule was checked for it; `None` otherwise. The coordinator adopts what it
    /// returns, so a permit this answers must be one nothing can still take back.
    ///
    /// The default is [`verify_permit`](LeaseStore::verify_permit), which is right for a store
    /// whose claim counts the live permits and takes one in a single atomic step: a permit
    /// found under the claim's token was counted when it was taken. A store that counts and
    /// takes in separate steps (NATS) counts again here.
    async fn read_back_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
    ) -> Result<Option<PermitGrant>> {
        let _ = permits;
        self.verify_permit(name, holder).await
    }

    /// Every permit record of `name`, live or not, by permit index; empty when the name was
    /// never claimed counted.
    async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
        let _ = name;
        Err(self.permits_unsupported())
    }

    /// Hints that `topic` may change hands, when this store can push them (see
    /// [`notify`](crate::notify)); `None` when it cannot, and waiters poll. Hints are never the
    /// basis of a decision: a woken waiter claims as usual. A store that answers `Some` for
    /// some topic says so with [`Capabilities::watch`].
    fn changes(&self, topic: &Topic) -> Option<Wakeups> {
        let _ = topic;
        None
    }
}

macro_rules! forward_lease_store {
    ($($ptr:ty),*) => {$(
        #[deny(clippy::missing_trait_methods)]
        #[async_trait]
        impl<S: LeaseStore + ?Sized> LeaseStore for $ptr {
            fn backend(&self) -> &'static str {
                (**self).backend()
            }
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
            async fn available(&self) -> Result<()> {
                (**self).available().await
            }
            async fn claim(
                &self,
                name: &str,
                holder: &HolderToken,
                instance: &str,
                ttl: Duration,
            ) -> Result<Option<Grant>> {
                (**self).claim(name, holder, instance, ttl).await
            }
            async fn renew(
                &self,
                name: &str,
                holder: &HolderToken,
                ttl: Duration,
            ) -> Result<Option<Grant>> {
                (**self).renew(name, holder, ttl).await
            }
            async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
                (**self).release(name, holder).await
            }
            async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
                (**self).verify(name, holder).await
            }
            async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
                (**self).get(name).await
            }
            async fn force_release(&self, name: &str) -> Result<bool> {
                (**self).force_release(name).await
            }
            async fn claim_permit(
                &self,
                name: &str,
                permits: u32,
                holder: &HolderToken,
                instance: &str,
                ttl: Duration,
            ) -> Result<Option<PermitGrant>> {
                (**self).claim_permit(name, permits, holder, instance, ttl).await
            }
            async fn renew_permit(
                &self,
                name: &str,
                permit: u32,
                holder: &HolderToken,
                ttl: Duration,
            ) -> Result<Option<Grant>> {
                (**self).renew_permit(name, permit, holder, ttl).await
            }
            async fn release_permit(
                &self,
                name: &str,
                permit: u32,
                holder: &HolderToken,
            ) -> Result<bool> {
                (**self).release_permit(name, permit, holder).await
            }
            async fn verify_permit(
                &self,
                name: &str,
                holder: &HolderToken,
            ) -> Result<Option<PermitGrant>> {
                (**self).verify_permit(name, holder).await
            }
            async fn read_back_permit(
                &self,
                name: &str,
                permits: u32,
                holder: &HolderToken,
            ) -> Result<Option<PermitGrant>> {
                (**self).read_back_permit(name, permits, holder).await
            }
            async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
                (**self).permits(name).await
            }
            fn changes(&self, topic: &Topic) -> Option<Wakeups> {
                (**self).changes(topic)
            }
        }
    )*};
}

forward_lease_store!(Arc<S>, Box<S>);

/// Methods every store has, derived from [`LeaseStore`]'s own: no backend overrides them, so
/// they live here, implemented once for every store (`dyn LeaseStore` included).
pub trait LeaseStoreExt: LeaseStore {
    /// Refuses a name this store cannot hold: empty, longer than the store's
    /// [`max_name_bytes`](Capabilities::max_name_bytes), or holding a control character; no
    /// I/O.
    fn validate_name(&self, name: &str) -> Result<()> {
        validate_name(name, self.capabilities().max_name_bytes)
    }

    /// Refuses a lease duration this store cannot keep: outside
    /// [`MIN_TTL`](crate::backend::MIN_TTL)..=[`MAX_TTL`](crate::backend::MAX_TTL), or other
    /// than the store's [`fixed_ttl`](Capabilities::fixed_ttl) where it has one; no I/O.
    fn validate_ttl(&self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl)?;
        match self.capabilities().fixed_ttl {
            Some(fixed) if fixed != ttl => Err(Error::invalid_timings(format!(
                "this {} store keeps every lease for exactly {fixed:?}; asked for {ttl:?}",
                self.backend()
            ))),
            _ => Ok(()),
        }
    }

    /// The error of a permit operation on a store without counted leases.
    fn permits_unsupported(&self) -> Error {
        Error::unsupported(format!(
            "the {} store does not support counted leases (permits)",
            self.backend()
        ))
    }

    /// This store with `hook` run around every operation (see [`crate::layer`]).
    fn with_hook<H: crate::layer::Hook>(self, hook: H) -> crate::layer::Intercept<Self, H>
    where
        Self: Sized,
    {
        crate::layer::Intercept::new(self, hook)
    }
}

impl<S: LeaseStore + ?Sized> LeaseStoreExt for S {}

/// Checks an instance label: non-empty, at most [`MAX_INSTANCE_BYTES`], printable.
pub fn validate_instance(instance: &str) -> Result<()> {
    validate_name(instance, MAX_INSTANCE_BYTES).map_err(|e| {
        Error::invalid_name(format!(
            "instance label: {}",
            e.message().replace("lease name", "label")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_tokens_are_fresh_and_round_trip() {
        let a = HolderToken::mint();
        let b = HolderToken::mint();
        assert_ne!(a, b);
        assert_eq!(HolderToken::from_hex(&a.to_hex()), Some(a.clone()));
        assert_eq!(HolderToken::from_hex("zz"), None);
        let fixed = HolderToken::from_bytes([
            0x01, 0xab, 0xff, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x9c,
        ]);
        assert_eq!(fixed.to_hex(), "01abff0000000000000000000000009c");
        assert!(format!("{a:?}").len() < 30);
    }
}
