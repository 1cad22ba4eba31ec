//! Store hints ([`LeaseStore::changes`](lease_core::LeaseStore::changes)) on Redis: the
//! scripts that change hands `PUBLISH` on the store's channel (`wire/scripts/notify.lua`), and
//! a subscriber connection of the store's own turns each message into a hint.
//!
//! The subscriber is a RESP3 connection (Redis 6 or later) opened from a `redis::Client`:
//! the store's URL for [`RedisStore::connect`], or the client given to
//! [`RedisStore::with_listener`]. It names itself with `CLIENT SETNAME`
//! ([`RedisStore::listener_name`]), pings every [`PING_EVERY`] so a silently dead link is
//! found within the operation timeout after that, and is opened again with a back-off after
//! any loss ([`lease_core::backend::listen`]); meanwhile the hints say they are disconnected.
//! A store built with [`RedisStore::with_client`] alone has no client to open one from: its
//! hints cover only the changes made through the store itself, and say so (disconnected).
//!
//! **Waiters' marks.** The lease scripts (`claim`, `release`, `force_release`) publish only
//! while the name's mark `<prefix>{<name>}:waiting` lives (`wire/scripts/waited.lua`), so a
//! claim and release nobody waits for cost no `PUBLISH`. Every waiter on a name's
//! [`Topic::Lease`] registers the name ([`Marks`]); the subscriber connection sets the mark
//! (`SET … PX` [`MARK_TTL`]) at once, on every (re)subscription for all names, and again at each
//! ping while anyone still waits on the name, before it says it is connected. A mark write
//! that fails ends the session like a failed ping: the hints say they are disconnected (and
//! waiters poll) until a new session has set them. The subscriber sets a new waiter's mark
//! about a round trip after the waiter subscribed: a change in that window is not hinted, and
//! the waiter finds it at the holder's expiry or its poll, as with any lost hint.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::backend::listen::{Backoff, Link, Listener};
use lease_core::backend::notify::{Topic, Wakeups};
use lease_core::{Error, Result};
use redis::aio::ConnectionLike;
use redis::{AsyncConnectionConfig, Client, ProtocolVersion, PushKind, Value};

use crate::error::{self, During};
use crate::hint_state::{LinkState, MARK_TTL, Marks, PING_EVERY, Subscribed};
use crate::store::RedisStore;
use crate::wire::keys::{changes_channel, hinted_topics, waiting_key};

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Opens the store's subscriber connection from `client` (to the server the store's
    /// connection reaches, with the same credentials), so its hints
    /// ([`LeaseStore::changes`](lease_core::LeaseStore::changes)) cover changes made by every
    /// process, not only through this store; see the crate documentation, *Hints*.
    /// [`RedisStore::connect`] does this itself. Replaces an earlier listener of this store
    /// (and of its clones). The connection is opened in the background: until it has
    /// subscribed, and whenever it is down, the hints say they are disconnected.
    ///
    /// # Errors
    ///
    /// `Unsupported` outside a tokio runtime.
    pub fn with_listener(self, client: Client) -> Result<RedisStore<C>> {
        let channel = changes_channel(self.config().get_key_prefix());
        let prefix = self.config().get_key_prefix().to_owned();
        let name = format!(
            "lease-hints-{}",
            &lease_core::backend::HolderToken::mint().to_hex()[..12]
        );
        let label = self.label().map(str::to_owned);
        let what = format!(
            "redis pub/sub {} on {channel}",
            label.as_deref().unwrap_or("(server)")
        );
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = Client::open(info.set_redis_settings(settings))
            .map_err(|e| error::from_redis(e, During::Task("hint listener"), label.as_deref()))?;
        let timeouts = (
            self.config().get_connect_timeout(),
            self.config().get_operation_timeout(),
        );
        let session_name = name.clone();
        let state = self.inner.hints.link.clone();
        let marks = self.inner.hints.marks.clone();
        let listener = Listener::spawn(
            what,
            &self.inner.hints.hub,
            Backoff::default(),
            move |link| {
                session(
                    client.clone(),
                    channel.clone(),
                    prefix.clone(),
                    session_name.clone(),
                    label.clone(),
                    timeouts,
                    (state.clone(), marks.clone(), link),
                )
            },
        )?;
        *self.inner.hints.lock() = Some((listener, name));
        Ok(self)
    }

    /// The name the store's subscriber connection gives itself (`CLIENT SETNAME`), e.g.
    /// `lease-hints-0f3c9a…`, as `CLIENT LIST` shows it; `None` without a listener.
    pub fn listener_name(&self) -> Option<String> {
        self.inner
            .hints
            .lock()
            .as_ref()
            .map(|(_, name)| name.clone())
    }

    /// `true` when a listener covers changes made by other processes.
    pub(crate) fn listens(&self) -> bool {
        self.inner.hints.lock().is_some()
    }

    /// Hints `topic` to this process's waiters at once (the listener echoes it a moment later).
    pub(crate) fn changed(&self, topic: &Topic) {
        self.inner.hints.hub.notify(topic);
    }

    /// Hints a job's slots and its lease (a slot script changed both) to this process's waiters.
    pub(crate) fn changed_job(&self, name: &str) {
        self.changed(&Topic::slots(name));
        self.changed(&Topic::lease(name));
    }

    /// [`LeaseStore::changes`](lease_core::LeaseStore::changes): a waiter on a lease name also
    /// registers the name, so the subscriber keeps its waiters' mark set (see the module
    /// documentation).
    pub(crate) fn wakeups(&self, topic: &Topic) -> Wakeups {
        let wakeups = self.inner.hints.hub.subscribe(topic);
        if let Topic::Lease(name) = topic {
            self.inner.hints.marks.add(name);
        }
        wakeups
    }
}

/// One subscription: connect (RESP3), name the connection, `SUBSCRIBE`, then turn each message
/// into hints until the connection drops or a ping fails.
async fn session(
    client: Client,
    channel: String,
    prefix: String,
    name: String,
    label: Option<String>,
    (connect_timeout, op_timeout): (Duration, Option<Duration>),
    (state, marks, link): (Arc<Mutex<LinkState>>, Arc<Marks>, Link),
) -> Result<()> {
    let failed = |e: redis::RedisError| {
        error::from_redis(e, During::Task("hint listener"), label.as_deref())
    };
    let (tx, mut pushes) = tokio::sync::mpsc::unbounded_channel();
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(op_timeout)
        .set_push_sender(tx);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(failed)?;
    let named: redis::RedisResult<()> = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(&name)
        .query_async(&mut conn)
        .await;
    if let Err(e) = named {
        tracing::debug!(error = %e, "the hint listener could not name its connection");
    }
    conn.subscribe(&channel).await.map_err(failed)?;
    let waited = |name: &str| link.hub().is_subscribed(&Topic::lease(name));
    set_marks(&mut conn, &prefix, &marks.refresh(waited))
        .await
        .map_err(failed)?;
    let _subscribed = Subscribed::up(&state, &link);
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    loop {
        tokio::select! {
            push = pushes.recv() => {
                let Some(push) = push else { return Ok(()) };
                match push.kind {
                    PushKind::Message => {
                        if let [_, Value::BulkString(payload)] = push.data.as_slice() {
                            for topic in hinted_topics(&prefix, payload) {
                                link.hub().notify(&topic);
                            }
                        }
                    }
                    PushKind::Disconnection => {
                        return Err(Error::unavailable("the hint listener's connection was closed"));
                    }
                    _ => {}
                }
            }
            () = marks.added.notified() => {
                set_marks(&mut conn, &prefix, &marks.take_new()).await.map_err(failed)?;
            }
            _ = ping.tick() => {
                let pong: redis::RedisResult<Value> = redis::cmd("PING").query_async(&mut conn).await;
                pong.map_err(failed)?;
                set_marks(&mut conn, &prefix, &marks.refresh(waited)).await.map_err(failed)?;
            }
        }
    }
}

/// Sets the waiters' mark of each of `names` (`SET <prefix>{<name>}:waiting 1 PX` [`MARK_TTL`]),
/// in one pipeline; nothing for no names.
async fn set_marks(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    names: &[String],
) -> redis::RedisResult<()> {
    if names.is_empty() {
        return Ok(());
    }
    let ttl = u64::try_from(MARK_TTL.as_millis()).unwrap_or(u64::MAX);
    let mut pipe = redis::pipe();
    for name in names {
        pipe.cmd("SET")
            .arg(waiting_key(prefix, name))
            .arg(1)
            .arg("PX")
            .arg(ttl)
            .ignore();
    }
    pipe.query_async(conn).await
}
