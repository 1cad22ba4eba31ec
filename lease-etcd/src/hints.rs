//! Store hints ([`LeaseStore::changes`](lease_core::LeaseStore::changes)) on etcd: one watch
//! on the store's key prefix, run by [`lease_core::backend::listen`].
//!
//! etcd reports every change under the prefix in revision order, whoever made it; the listener
//! turns into hints only the changes of hands:
//!
//! - a lease key **created** (a claim: the event's `version` is 1) or **deleted** (a release,
//!   a forced release, or etcd deleting it when its etcd lease ran out — so etcd hints expiry
//!   too, within its 500 ms expiry sweep) hints [`Topic::Lease`];
//! - a permit key created or deleted hints [`Topic::Lease`] of its counted name (which permit
//!   waiters watch);
//! - a partition key created or deleted hints [`Topic::Group`] of its group;
//! - a member key created or deleted hints [`Topic::Group`] of each group in its record (the
//!   watch asks for the previous value, which a deletion carries).
//!
//! A put on an existing key — a renewal moving the key onto a longer etcd lease, a member's
//! heartbeat, an owner acquiring its own partition again — wakes nobody, and keep-alives are no
//! events at all.
//!
//! The watch also remembers when it first saw a lease key put on each etcd lease, which bounds
//! that lease's expiry for `get` (see the crate docs, *Expiry: the server's clock*).
//!
//! The watch starts on the first wait and runs until the store is dropped, on the store's
//! client (or the one given to [`EtcdStore::with_watch_client`]). Every [`PROGRESS_EVERY`] it
//! asks etcd for a progress report; a watch that got no answer to the last one by the next is
//! taken as lost (a silently dead connection), as is one etcd cancels (a compaction) or whose
//! stream fails. While it is lost the hints say so and waiters keep their polling pace; once
//! it is back every waiter is woken.

use std::time::Duration;

use etcd_client::{Client, Event, EventType, WatchOptions};
use lease_core::backend::clock::Stamp;
use lease_core::backend::listen::{Backoff, Link, Listener};
use lease_core::backend::notify::Topic;
use lease_core::{Error, Result};

use crate::hint_state::PutsSeen;
use crate::store::{EtcdStore, lock};
use crate::wire::codec::decode_member;

/// How often the listener asks etcd for a progress report (its check that the watch is alive).
pub(crate) const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// How many etcd leases [`PutsSeen`] remembers at most (then it forgets them all).
const MAX_PUTS_SEEN: usize = 10_000;

impl EtcdStore {
    /// Runs this store's watch (its hints, see
    /// [`LeaseStore::changes`](lease_core::LeaseStore::changes)) on `client` instead of the
    /// store's own client: e.g. straight to the cluster when the store's requests go through a
    /// proxy. The client must reach the same cluster. Replaces a running watch of this store
    /// (and of its clones); the new one starts on the next wait.
    pub fn with_watch_client(self, client: Client) -> EtcdStore {
        {
            let mut watch = lock(&self.inner.hints.watch);
            watch.client = client;
            watch.listener = None;
        }
        self.inner.hints.hub.set_connected(false);
        self
    }

    /// The hints of `topic`, the watch started on the first call.
    pub(crate) fn watch(&self, topic: &Topic) -> lease_core::backend::notify::Wakeups {
        let hints = &self.inner.hints;
        {
            let mut watch = lock(&hints.watch);
            if watch.listener.is_none() {
                let what = format!("etcd watch {:?} at {}", self.inner.prefix, self.server());
                let client = watch.client.clone();
                let prefix = self.inner.prefix.clone().into_bytes();
                let puts = hints.puts_seen.clone();
                match Listener::spawn(what, &hints.hub, Backoff::default(), move |link| {
                    session(client.clone(), prefix.clone(), puts.clone(), link)
                }) {
                    Ok(listener) => watch.listener = Some(listener),
                    // Outside a runtime: no watch (the hints say they are disconnected); the
                    // next wait tries again.
                    Err(e) => tracing::debug!(error = %e, "lease-etcd hints: no watch"),
                }
            }
        }
        hints.hub.subscribe(topic)
    }
}

/// A watch failure as the listener's error: temporary but for refused credentials or
/// permissions and a server without the watch API.
fn failed(what: &str, e: etcd_client::Error) -> Error {
    use tonic::Code;
    let permanent = matches!(
        &e,
        etcd_client::Error::GRpcStatus(s)
            if matches!(s.code(), Code::Unauthenticated | Code::PermissionDenied | Code::Unimplemented)
    );
    let message = format!("the etcd watch could not {what}");
    if permanent {
        Error::unsupported(message).with_source(e)
    } else {
        Error::unavailable(message).with_source(e)
    }
}

/// One session: watch the prefix, say so once etcd confirms it, then turn events into hints
/// until the watch ends, fails or stops answering progress requests.
async fn session(mut client: Client, prefix: Vec<u8>, puts: PutsSeen, link: Link) -> Result<()> {
    let options = WatchOptions::new().with_prefix().with_prev_key();
    let mut stream =
        tokio::time::timeout(PROGRESS_EVERY, client.watch(prefix.clone(), Some(options)))
            .await
            .map_err(|_| Error::unavailable("the etcd watch was not answered within 5 s"))?
            .map_err(|e| failed("start", e))?;
    let mut check = tokio::time::interval(PROGRESS_EVERY);
    check.tick().await;
    // Whether anything came since the last progress request (the creation counts as one).
    let mut heard = false;
    let mut created = false;
    loop {
        tokio::select! {
            msg = stream.message() => {
                let msg = msg
                    .map_err(|e| failed("read its stream", e))?
                    .ok_or_else(|| Error::unavailable("etcd ended the watch stream"))?;
                heard = true;
                if msg.canceled() {
                    return Err(Error::unavailable(format!(
                        "etcd canceled the watch ({})",
                        if msg.cancel_reason().is_empty() { "no reason given" } else { msg.cancel_reason() }
                    )));
                }
                if msg.created() && !created {
                    created = true;
                    link.up();
                }
                let now = Stamp::now();
                for event in msg.events() {
                    remember_put(&puts, &prefix, event, now);
                    for topic in topics(&prefix, event) {
                        link.hub().notify(&topic);
                    }
                }
            }
            _ = check.tick() => {
                if !heard {
                    return Err(Error::unavailable(format!(
                        "the etcd watch answered nothing within {PROGRESS_EVERY:?}"
                    )));
                }
                heard = false;
                stream
                    .request_progress()
                    .await
                    .map_err(|e| failed("ask for progress", e))?;
            }
        }
    }
}

/// Remembers `at` as the first sighting of the etcd lease a lease key was put on by `event`.
fn remember_put(puts: &PutsSeen, prefix: &[u8], event: &Event, at: Stamp) {
    let Some(kv) = event.kv() else {
        return;
    };
    let lease_key = kv
        .key()
        .strip_prefix(prefix)
        .is_some_and(|k| k.starts_with(b"l/"));
    if event.event_type() != EventType::Put || kv.lease() == 0 || !lease_key {
        return;
    }
    let mut puts = lock(puts);
    if puts.len() >= MAX_PUTS_SEEN && !puts.contains_key(&kv.lease()) {
        puts.clear();
    }
    puts.entry(kv.lease()).or_insert(at);
}

/// The topics an event under the store's `prefix` hints: none for a put on an existing key.
fn topics(prefix: &[u8], event: &Event) -> Vec<Topic> {
    let Some(kv) = event.kv() else {
        return Vec::new();
    };
    let created = match event.event_type() {
        EventType::Put if kv.version() == 1 => true,
        EventType::Put => return Vec::new(),
        EventType::Delete => false,
    };
    let Some(key) = kv.key().strip_prefix(prefix) else {
        return Vec::new();
    };
    let text = |b: &[u8]| std::str::from_utf8(b).ok().map(str::to_owned);
    let scoped = |b: &[u8]| -> Option<String> {
        let end = b.iter().position(|c| *c == 0)?;
        text(&b[..end])
    };
    if let Some(name) = key.strip_prefix(b"l/") {
        return text(name).map(Topic::lease).into_iter().collect();
    }
    if let Some(rest) = key.strip_prefix(b"c/") {
        return scoped(rest).map(Topic::lease).into_iter().collect();
    }
    if let Some(rest) = key.strip_prefix(b"p/") {
        return scoped(rest).map(Topic::group).into_iter().collect();
    }
    if key.starts_with(b"m/") {
        let record = if created {
            Some(kv.value())
        } else {
            event.prev_kv().map(|p| p.value())
        };
        return record
            .and_then(decode_member)
            .map(|(_, groups)| groups.into_iter().map(Topic::group).collect())
            .unwrap_or_default();
    }
    Vec::new()
}
