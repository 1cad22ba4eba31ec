//! The scripts' arguments and replies: holder tokens as hex, grants out of `{term, ms}`.

use std::time::Duration;

use lease_core::backend::{Grant, HolderToken};

/// The hex form of a holder token (32 lowercase hex digits, as `HolderToken::to_hex` writes
/// it), on the stack: the scripts compare it with the `holder` field.
pub(crate) struct HolderHex([u8; 32]);

impl HolderHex {
    pub(crate) fn new(holder: &HolderToken) -> HolderHex {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 32];
        for (pair, b) in out.chunks_exact_mut(2).zip(holder.as_bytes()) {
            pair[0] = DIGITS[usize::from(b >> 4)];
            pair[1] = DIGITS[usize::from(b & 0x0f)];
        }
        HolderHex(out)
    }

    /// The digits, as a script argument.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The digits, as text.
    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The reply `{term, remaining_ms}` of `claim`, `renew`, `verify` and the slot claims.
pub(crate) fn grant((term, remaining_ms): (u64, u64)) -> Grant {
    Grant {
        term,
        expires_in: Duration::from_millis(remaining_ms),
    }
}

/// The reply of `claim_slot.lua`: outcome, term, ttl in ms, an instant.
pub(crate) type ClaimSlotReply = (String, Option<u64>, Option<u64>, Option<i64>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_hex_is_the_token_hex() {
        for _ in 0..100 {
            let h = HolderToken::mint();
            assert_eq!(HolderHex::new(&h).as_str(), h.to_hex());
        }
    }
}
