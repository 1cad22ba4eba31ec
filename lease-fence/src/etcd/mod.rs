//! Fenced writes on etcd: the check, the raise and the writes in one transaction, one round
//! trip.
//!
//! A resource's fence is the key `<prefix><resource>` (prefix [`DEFAULT_PREFIX`] unless set),
//! holding the highest token accepted as 20 decimal digits, zero-padded, so that etcd's byte
//! comparison of values orders every `u64` as numbers. A fenced write is one `Txn`:
//!
//! ```text
//! IF   value(<fence key>) > <token, 20 digits>
//! THEN get <fence key>                               -- refused: FenceError::Stale
//! ELSE put <fence key> = <token>, <your operations>  -- accepted (equal or higher)
//! ```
//!
//! (A value comparison on a key that does not exist is false in etcd, so the first write of a
//! resource takes the `ELSE` branch.) etcd runs a transaction atomically and serializably,
//! replicated by raft: an accepted write and its fence are committed together on a quorum, and
//! once a higher token's transaction has been answered, every transaction under a lower token
//! is refused. The operations are any etcd `TxnOp`s (puts, deletes, even reads), at most the
//! server's `--max-txn-ops` (128 by default) less one for the fence.
//!
//! **What it cannot do.** It fences the keys written in the same transaction only; a write
//! elsewhere is not transactional with the fence. Restoring an etcd snapshot takes the fences
//! back with everything else.

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use lease_core::{Error, ErrorKind, Result};

use crate::error::{FenceError, Stale};

/// The fence key's default prefix: the fence of resource `orders/7` is the key
/// `lease-fence/orders/7`.
pub const DEFAULT_PREFIX: &str = "lease-fence/";

/// The longest key prefix taken, in bytes.
pub const MAX_PREFIX_BYTES: usize = 256;

/// Fenced writes on etcd, on the application's own `etcd_client::Client` (see the [module
/// docs](self) for the transaction and what it guarantees).
///
/// ```no_run
/// # async fn f(mut client: etcd_client::Client, term: lease_core::Term)
/// # -> Result<(), lease_fence::FenceError> {
/// use etcd_client::TxnOp;
/// use lease_fence::etcd::EtcdFence;
///
/// let fence = EtcdFence::new();
/// fence.put(&mut client, "config", term.token(), "config/active", "v2").await?;
/// // Several operations under one fence, in one transaction:
/// fence
///     .write(&mut client, "config", term.token(), vec![
///         TxnOp::put("config/active", "v3", None),
///         TxnOp::delete("config/draft", None),
///     ])
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct EtcdFence {
    prefix: String,
    compare: bool,
}

impl Default for EtcdFence {
    fn default() -> Self {
        EtcdFence::new()
    }
}

impl EtcdFence {
    /// Fences whose keys start with [`DEFAULT_PREFIX`].
    pub fn new() -> EtcdFence {
        EtcdFence {
            prefix: DEFAULT_PREFIX.to_owned(),
            compare: true,
        }
    }

    /// Fences whose keys start with `prefix` (at most [`MAX_PREFIX_BYTES`]); `InvalidName`
    /// when longer.
    pub fn with_prefix(prefix: &str) -> Result<EtcdFence> {
        if prefix.len() > MAX_PREFIX_BYTES {
            return Err(Error::invalid_name(format!(
                "a fence key prefix of {} bytes is too long; use at most {MAX_PREFIX_BYTES}",
                prefix.len()
            )));
        }
        Ok(EtcdFence {
            prefix: prefix.to_owned(),
            compare: true,
        })
    }

    /// Test support: the same fence with its check left out — the transaction puts the offered
    /// token and runs the operations whatever the fence holds, as a resource that does not
    /// compare tokens would. Tests use it to show that their zombie's write gets through without
    /// the check. Never use it for data.
    #[doc(hidden)]
    pub fn break_check_for_tests(mut self) -> EtcdFence {
        self.compare = false;
        self
    }

    /// The fence key of `resource`.
    pub fn key(&self, resource: &str) -> String {
        format!("{}{resource}", self.prefix)
    }

    /// Runs `ops` only if `token` is at least the fence of `resource`, raising the fence to
    /// `token` in the same transaction: one round trip. Answers the responses of `ops`, in
    /// order.
    ///
    /// [`FenceError::Stale`] when a higher token has written (nothing ran); `InvalidArgument`
    /// for a token of 0 or no operation, `InvalidName` for an empty, oversized or
    /// control-character resource name, before any I/O. etcd's errors are mapped as
    /// lease-etcd maps its own (`lease_etcd::classify`).
    pub async fn write(
        &self,
        client: &mut Client,
        resource: &str,
        token: u64,
        ops: Vec<TxnOp>,
    ) -> Result<Vec<TxnOpResponse>, FenceError> {
        crate::check::token(token)?;
        crate::check::resource(resource, crate::MAX_RESOURCE_BYTES)?;
        if ops.is_empty() {
            return Err(Error::invalid_argument(
                "a fenced etcd write needs at least one operation; pass the puts or deletes \
                 the fence guards",
            )
            .into());
        }
        let key = self.key(resource);
        let value = encode(token);
        let mut writes = Vec::with_capacity(ops.len() + 1);
        writes.push(TxnOp::put(key.clone(), value.clone(), None));
        writes.extend(ops);
        let txn = if self.compare {
            Txn::new()
                .when([Compare::value(key.clone(), CompareOp::Greater, value)])
                .and_then([TxnOp::get(key, None::<GetOptions>)])
                .or_else(writes)
        } else {
            Txn::new().and_then(writes)
        };
        let doing = format!("fenced write to '{resource}'");
        let answer = client
            .txn(txn)
            .await
            .map_err(|e| lease_etcd::classify(e, &doing))?;
        let mut responses = answer.op_responses();
        // With the check, `succeeded` means the fence was higher: refused.
        if self.compare && answer.succeeded() {
            let fence = match responses.first() {
                Some(TxnOpResponse::Get(get)) => {
                    get.kvs().first().and_then(|kv| decode(kv.value()))
                }
                _ => None,
            };
            let fence = fence.ok_or_else(|| foreign(resource))?;
            return Err(FenceError::Stale(Stale::new(resource, token, fence)));
        }
        if responses.is_empty() {
            return Err(Error::new(
                ErrorKind::Backend,
                format!("{doing}: etcd answered the transaction without its responses"),
            )
            .into());
        }
        responses.remove(0);
        Ok(responses)
    }

    /// `put key value` under the fence of `resource` (see [`write`](EtcdFence::write)).
    pub async fn put(
        &self,
        client: &mut Client,
        resource: &str,
        token: u64,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Result<(), FenceError> {
        self.write(client, resource, token, vec![TxnOp::put(key, value, None)])
            .await
            .map(|_| ())
    }

    /// The fence's token for `resource`: the highest token it has accepted, `None` before the
    /// first fenced write. For monitoring and tests: a write never needs it.
    pub async fn token(&self, client: &mut Client, resource: &str) -> Result<Option<u64>> {
        crate::check::resource(resource, crate::MAX_RESOURCE_BYTES)?;
        let doing = format!("read the fence of '{resource}'");
        let answer = client
            .get(self.key(resource), None)
            .await
            .map_err(|e| lease_etcd::classify(e, &doing))?;
        match answer.kvs().first() {
            None => Ok(None),
            Some(kv) => decode(kv.value())
                .map(Some)
                .ok_or_else(|| foreign(resource)),
        }
    }
}

/// A token as the fence key holds it: 20 decimal digits, zero-padded (every `u64` fits, and
/// byte order is numeric order).
fn encode(token: u64) -> String {
    format!("{token:020}")
}

fn decode(value: &[u8]) -> Option<u64> {
    if value.len() != 20 {
        return None;
    }
    std::str::from_utf8(value)
        .ok()?
        .parse()
        .ok()
        .filter(|t| *t > 0)
}

fn foreign(resource: &str) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!(
            "the fence key of '{resource}' holds a value no fence writes; something else wrote \
             it: give the fence a key prefix of its own"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_order_of_encoded_tokens_is_numeric_order() {
        let tokens = [1, 9, 10, 99, 1 << 53, (1 << 53) + 1, u64::MAX - 1, u64::MAX];
        for pair in tokens.windows(2) {
            assert!(encode(pair[0]) < encode(pair[1]), "{pair:?}");
        }
        for t in tokens {
            assert_eq!(decode(encode(t).as_bytes()), Some(t));
        }
        assert_eq!(decode(b"7"), None);
        assert_eq!(decode(encode(0).as_bytes()), None);
    }
}
