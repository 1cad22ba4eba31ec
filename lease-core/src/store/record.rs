//! The records of the lease protocol: the holder token a claim is made under, the grant a store
//! answers with, what anyone can read of a name, and the instance label's check.

use std::fmt;
use std::time::Duration;

use crate::store::error::{Error, Result};
use crate::store::validate::validate_name;

/// The longest instance label, in bytes, every store must keep.
pub const MAX_INSTANCE_BYTES: usize = 128;

/// The most items one [`LeaseStore::renew_many`](crate::LeaseStore::renew_many) takes; a
/// caller with more sends several calls (the engine chunks at this size).
pub const MAX_RENEWALS_PER_CALL: usize = 10_000;

/// One lease to renew in a [`LeaseStore::renew_many`](crate::LeaseStore::renew_many): its name
/// and the holder token it was claimed under.
#[derive(Debug, Clone, Copy)]
pub struct RenewItem<'a> {
    /// The lease's name.
    pub name: &'a str,
    /// The holder token the lease was claimed under.
    pub holder: &'a HolderToken,
}

/// The rules of a [`RenewItem`] list: at most [`MAX_RENEWALS_PER_CALL`] items, each name one a
/// store of `max_name_bytes` can hold, no name twice.
pub(crate) fn check_renewals(items: &[RenewItem<'_>], max_name_bytes: usize) -> Result<()> {
    if items.len() > MAX_RENEWALS_PER_CALL {
        return Err(Error::invalid_argument(format!(
            "{} leases to renew in one call; at most {MAX_RENEWALS_PER_CALL} are taken, so send \
             them in several calls",
            items.len()
        )));
    }
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    for item in items {
        validate_name(item.name, max_name_bytes)?;
        if !seen.insert(item.name) {
            return Err(Error::invalid_argument(format!(
                "the lease '{}' is named twice in one renew_many; name each lease once",
                item.name
            )));
        }
    }
    Ok(())
}

/// A holder token: 128 random bits minted for one claim and never reused.
///
/// The store keeps it in the lease's record; renew, verify and release match on it, so a claim
/// made by an earlier incarnation of the same process is never taken for this one. It is a
/// capability: whoever has it can renew or release the lease, so it is never shown by
/// [`LeaseStore::get`](crate::LeaseStore::get) and its `Debug` form shows only a prefix.
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
