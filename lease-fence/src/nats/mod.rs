//! Fenced puts on NATS JetStream KV: the fence travels in the value, and a put is a
//! compare-and-set on the key's revision.
//!
//! NATS KV has no transaction over two keys and compares revisions, not values, so the fence
//! of a key is kept **in the key's own value**: `<token, 20 digits>\n` before the caller's
//! bytes ([`NatsFence::get`] splits them again). A fenced put:
//!
//! 1. reads the key's last entry (its value and revision);
//! 2. refuses a token lower than the one in that value with [`FenceError::Stale`];
//! 3. writes `<token>\n<bytes>` with `update(key, value, revision)` — accepted by the server
//!    only if the key is still at that revision (`create` for a key never written) — and, when
//!    another write got in between, starts again at 1.
//!
//! So a put lands only on the exact value it checked: once a put under a higher token has
//! landed, every put under a lower one is refused. **Two round trips** (the read and the
//! compare-and-set), more when writers race; NATS KV offers no single-request form.
//!
//! **What it cannot do.** The fence is per key and lives as long as the key's value: a plain
//! `delete` or `purge`, a bucket max age or a re-created bucket removes it, after which any
//! token is accepted again — to remove data under a fence, put an empty value
//! ([`NatsFence::put`] with no bytes). Readers that read the key directly see the token line in
//! front of the data. A replicated bucket on servers older than 2.12.0 can lose acknowledged
//! writes across node failures (the README's "Guarantees per backend"), fences included.

use async_nats::jetstream::kv::{
    CreateErrorKind, EntryErrorKind, Operation, Store, UpdateErrorKind,
};
use lease_core::{Error, ErrorKind, Result};

use crate::error::{FenceError, Stale};

/// How many compare-and-set conflicts in a row a put takes before it gives up with a
/// temporary error (other writers kept changing the key between its read and its write).
pub const MAX_CONFLICTS: usize = 64;

/// Fenced puts on a NATS KV bucket, on the application's own `async_nats::jetstream::kv::Store`
/// (see the [module docs](self) for the steps and what they guarantee).
///
/// ```no_run
/// # async fn f(kv: async_nats::jetstream::kv::Store, term: lease_core::Term)
/// # -> Result<(), lease_fence::FenceError> {
/// use lease_fence::nats::NatsFence;
///
/// let fence = NatsFence::new();
/// fence.put(&kv, "report.today", term.token(), "42 rows").await?;
/// let (token, value) = fence.get(&kv, "report.today").await?.expect("written");
/// assert_eq!((token, &value[..]), (term.token(), &b"42 rows"[..]));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct NatsFence {
    compare: bool,
}

impl Default for NatsFence {
    fn default() -> Self {
        NatsFence::new()
    }
}

impl NatsFence {
    /// A NATS KV fence.
    pub fn new() -> NatsFence {
        NatsFence { compare: true }
    }

    /// Test support: the same fence with its check left out — a put writes whatever token the
    /// key holds, as a writer that does not compare tokens would. Tests use it to show that
    /// their zombie's put gets through without the check. Never use it for data.
    #[doc(hidden)]
    pub fn break_check_for_tests(mut self) -> NatsFence {
        self.compare = false;
        self
    }

    /// Puts `value` under `key` if `token` is at least the token the key holds, writing
    /// `token` with it (the steps are in the [module docs](self)): answers the new revision.
    ///
    /// [`FenceError::Stale`] when a higher token has written the key (nothing changed);
    /// `InvalidArgument` for a token of 0, `InvalidName` for an empty, oversized or
    /// control-character key, before any I/O; `Backend` when the key holds a value no fence
    /// wrote; `Timeout` (temporary, the outcome unknown) or `Backend` for NATS's errors.
    pub async fn put(
        &self,
        kv: &Store,
        key: &str,
        token: u64,
        value: impl AsRef<[u8]>,
    ) -> Result<u64, FenceError> {
        crate::check::token(token)?;
        crate::check::resource(key, crate::MAX_RESOURCE_BYTES)?;
        let mut framed = Vec::with_capacity(21 + value.as_ref().len());
        framed.extend_from_slice(format!("{token:020}\n").as_bytes());
        framed.extend_from_slice(value.as_ref());
        let framed = bytes::Bytes::from(framed);
        for _ in 0..MAX_CONFLICTS {
            let entry = kv
                .entry(key)
                .await
                .map_err(|e| nats_err(key, "read", e.kind() == EntryErrorKind::TimedOut, e))?;
            let written = match entry {
                None => match kv.create(key, framed.clone()).await {
                    Ok(revision) => return Ok(revision),
                    Err(e) if e.kind() == CreateErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(nats_err(key, "create", false, e).into()),
                },
                Some(entry) => {
                    // A delete or purge marker holds no token (see the module docs).
                    let fence = match entry.operation {
                        Operation::Put => Some(split(key, &entry.value)?.0),
                        Operation::Delete | Operation::Purge => None,
                    };
                    if let Some(fence) = fence.filter(|f| self.compare && token < *f) {
                        return Err(FenceError::Stale(Stale::new(key, token, fence)));
                    }
                    kv.update(key, framed.clone(), entry.revision).await
                }
            };
            match written {
                Ok(revision) => return Ok(revision),
                Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => continue,
                Err(e) => {
                    let timed_out = e.kind() == UpdateErrorKind::TimedOut;
                    return Err(nats_err(key, "update", timed_out, e).into());
                }
            }
        }
        Err(Error::new(
            ErrorKind::Backend,
            format!(
                "fenced put of '{key}': other writers changed the key {MAX_CONFLICTS} times in a \
                 row between this put's read and its write; nothing was written, try again"
            ),
        )
        .with_temporary(true)
        .into())
    }

    /// The key's token and value as a fenced put wrote them; `None` when the key was never
    /// written, or was deleted or purged. `Backend` when the key holds a value no fence wrote.
    pub async fn get(&self, kv: &Store, key: &str) -> Result<Option<(u64, bytes::Bytes)>> {
        crate::check::resource(key, crate::MAX_RESOURCE_BYTES)?;
        let entry = kv
            .entry(key)
            .await
            .map_err(|e| nats_err(key, "read", e.kind() == EntryErrorKind::TimedOut, e))?;
        match entry {
            Some(entry) if entry.operation == Operation::Put => {
                let (token, at) = split(key, &entry.value)?;
                Ok(Some((token, entry.value.slice(at..))))
            }
            _ => Ok(None),
        }
    }
}

/// The token of a fenced value and where the caller's bytes start.
fn split(key: &str, value: &[u8]) -> Result<(u64, usize)> {
    let token = value
        .get(..21)
        .filter(|head| head[20] == b'\n')
        .and_then(|head| std::str::from_utf8(&head[..20]).ok())
        .and_then(|digits| digits.parse::<u64>().ok())
        .filter(|t| *t > 0);
    match token {
        Some(token) => Ok((token, 21)),
        None => Err(Error::new(
            ErrorKind::Backend,
            format!(
                "the key '{key}' holds a value no fenced put wrote (it does not start with a \
                 token line); write it only through the fence, or fence another key"
            ),
        )),
    }
}

/// Creates the KV bucket `bucket` for fenced values, or opens it when it already exists with
/// the same configuration: history 1, direct gets, no max age (a fence must outlive any lease;
/// see the [module docs](self) on what removes one).
///
/// It creates the bucket's stream itself, configured as `create_key_value` would configure
/// it, because async-nats's `create_key_value` first reads the account's JetStream info, which
/// it cannot parse from nats-server 2.9. A name outside `[A-Za-z0-9_-]` is refused with
/// [`InvalidArgument`](ErrorKind::InvalidArgument); a bucket of that name with another
/// configuration, or a server that fails, with a temporary `Backend` error.
///
/// ```no_run
/// # async fn f(js: async_nats::jetstream::Context) -> lease_core::Result<()> {
/// let kv = lease_fence::nats::create_bucket(&js, "reports").await?;
/// # Ok(()) }
/// ```
pub async fn create_bucket(js: &async_nats::jetstream::Context, bucket: &str) -> Result<Store> {
    if bucket.is_empty()
        || !bucket
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(Error::invalid_argument(format!(
            "{bucket:?} is not a NATS KV bucket name: use letters, digits, '_' and '-' only"
        )));
    }
    js.create_stream(async_nats::jetstream::stream::Config {
        name: format!("KV_{bucket}"),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        allow_direct: true,
        allow_rollup: true,
        deny_delete: true,
        discard: async_nats::jetstream::stream::DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .map_err(|e| Error::backend(format!("creating the KV bucket '{bucket}' failed"), e, true))?;
    js.get_key_value(bucket)
        .await
        .map_err(|e| Error::backend(format!("opening the KV bucket '{bucket}' failed"), e, true))
}

/// A NATS error met while doing `what` to `key`: `Timeout` (temporary, the outcome unknown)
/// when the request timed out, `Backend` (temporary: a connection or JetStream failure that a
/// retry may get past) otherwise.
fn nats_err(
    key: &str,
    what: &str,
    timed_out: bool,
    e: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    if timed_out {
        return Error::new(
            ErrorKind::Timeout,
            format!("fenced put of '{key}': the {what} timed out; the outcome is unknown"),
        )
        .with_source(e);
    }
    Error::backend(format!("fenced put of '{key}': the {what} failed"), e, true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_fenced_value_splits_into_its_token_and_bytes() {
        let value = b"00000000000000000042\nrows";
        assert_eq!(super::split("k", value).unwrap(), (42, 21));
        for bad in [
            &b"42\nrows"[..],
            b"0000000000000000004x\n",
            b"00000000000000000000\n",
        ] {
            assert!(super::split("k", bad).is_err(), "{bad:?}");
        }
    }
}
