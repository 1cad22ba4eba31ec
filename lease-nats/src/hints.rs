//! Store hints ([`LeaseStore::changes`](lease_core::LeaseStore::changes)) on NATS: a KV watch
//! on the lease bucket and on the slot bucket, and a plain NATS subject for releases.
//!
//! - **Claims** are puts that create a key: their record carries term (or epoch) `0`, "this
//!   message's own sequence", which no renewal writes (a renewal names its term). So the watch
//!   turns a put into a hint only when it carries `0`: a claim, or an acquire of a partition by
//!   a new owner. Renewals — puts too — wake nobody.
//! - **Releases** purge the key through the stream's purge API (no delete marker: see the crate
//!   docs), which no watch sees. So a store that purged a message publishes the key on the core
//!   NATS subject [`hint_subject`]`(bucket)` (`_LEASE_HINTS.<bucket>`), fire and forget, and
//!   every store's listener subscribes to it. A hint published by a process that dies before
//!   sending it is lost: waiters then wake at the expiry, as without hints.
//! - Delete and purge markers another tool wrote (`nats kv del`) are hints too.
//! - The slot bucket: any change of a job's slot record hints [`Topic::Slots`] for the job.
//! - **Expiry** (the bucket's max age) removes a message without a trace on nats-server 2.9,
//!   so it is never hinted: waiters wake at the expiry by their own clock.
//!
//! The listener runs on the store's client (the application's, for
//! [`NatsStore::with_client`]); the client reconnects by itself, and the listener, which
//! checks the client's state every [`STATE_CHECK`], says it is disconnected from the moment
//! the client is not connected until it has subscribed and watched again (messages in between
//! are lost; every waiter is woken when it is back).

use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::kv::{self, Operation as KvOperation};
use futures::StreamExt;
use lease_core::backend::listen::{Backoff, Link, Listener};
use lease_core::backend::notify::Hub;
use lease_core::backend::notify::Topic;
use lease_core::{Error, Result};

use crate::wire::codec::{PartitionRecord, Record};
use crate::wire::keys::{decode_key, topic_of};

/// How often the listener looks at the client's connection state.
pub(crate) const STATE_CHECK: Duration = Duration::from_millis(200);

/// The core NATS subject releases are hinted on: `_LEASE_HINTS.<bucket>` (a bucket name is
/// one subject token). Publishing there needs the publish permission on it.
pub(crate) fn hint_subject(bucket: &str) -> String {
    format!("_LEASE_HINTS.{bucket}")
}

/// What the listener watches.
#[derive(Clone)]
pub(crate) struct Watched {
    pub(crate) client: async_nats::Client,
    pub(crate) leases: kv::Store,
    pub(crate) slots: Option<kv::Store>,
    pub(crate) subject: String,
    pub(crate) server: String,
}

/// Starts the listener feeding `hub` from `watched`.
pub(crate) fn listen(hub: &Hub, watched: Watched) -> Result<Listener> {
    let what = format!(
        "nats kv watch {} at {}",
        watched.leases.name, watched.server
    );
    Listener::spawn(what, hub, Backoff::default(), move |link| {
        session(watched.clone(), link)
    })
}

/// The topic a watched entry of the lease bucket hints, if it is a change of hands.
fn lease_entry_topic(entry: &kv::Entry) -> Option<Topic> {
    match entry.operation {
        KvOperation::Delete | KvOperation::Purge => topic_of(&entry.key),
        KvOperation::Put => {
            let new = Record::decode(&entry.value)
                .map(|r| r.term == 0)
                .or_else(|| PartitionRecord::decode(&entry.value).map(|p| p.epoch == 0))
                .unwrap_or(false);
            if new { topic_of(&entry.key) } else { None }
        }
    }
}

fn lost(what: &str) -> Error {
    Error::unavailable(format!("the hint listener's {what} ended"))
}

/// One session: subscribe to the hint subject, watch both buckets, and turn what they carry into
/// hints until one of them ends or the client is not connected.
async fn session(w: Watched, link: Link) -> Result<()> {
    if w.client.connection_state() != State::Connected {
        return Err(Error::unavailable("the NATS client is not connected"));
    }
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        Error::unavailable(format!("the hint listener could not {what}: {e}"))
    };
    let mut released = w
        .client
        .subscribe(w.subject.clone())
        .await
        .map_err(|e| failed("subscribe", &e))?;
    let mut leases = w
        .leases
        .watch_all()
        .await
        .map_err(|e| failed("watch the lease bucket", &e))?;
    let mut slots = match &w.slots {
        Some(kv) => Some(
            kv.watch_all()
                .await
                .map_err(|e| failed("watch the slot bucket", &e))?,
        ),
        None => None,
    };
    // The subscription is in place on the server once a flush has been answered.
    w.client
        .flush()
        .await
        .map_err(|e| failed("flush its subscription", &e))?;
    link.up();
    let mut check = tokio::time::interval(STATE_CHECK);
    loop {
        tokio::select! {
            msg = released.next() => {
                let msg = msg.ok_or_else(|| lost("subscription"))?;
                if let Some(topic) = std::str::from_utf8(&msg.payload).ok().and_then(topic_of) {
                    link.hub().notify(&topic);
                }
            }
            entry = leases.next() => {
                let entry = entry
                    .ok_or_else(|| lost("lease bucket watch"))?
                    .map_err(|e| failed("read the lease bucket watch", &e))?;
                if let Some(topic) = lease_entry_topic(&entry) {
                    link.hub().notify(&topic);
                }
            }
            entry = async {
                match slots.as_mut() {
                    Some(s) => s.next().await,
                    None => std::future::pending().await,
                }
            } => {
                let entry = entry
                    .ok_or_else(|| lost("slot bucket watch"))?
                    .map_err(|e| failed("read the slot bucket watch", &e))?;
                if let Some(job) = decode_key(&entry.key) {
                    link.hub().notify(&Topic::slots(job));
                }
            }
            _ = check.tick() => {
                if w.client.connection_state() != State::Connected {
                    return Err(Error::unavailable("the NATS client lost its connection"));
                }
            }
        }
    }
}
