//! [`LeaseStore::renew_many`](lease_core::LeaseStore::renew_many) on Redis: the names in calls
//! of `renew_many.lua` of at most [`CHUNK`] names each, every call of a batch in **one
//! pipeline: one round trip** for up to 10,000 names (two when the server had not cached the
//! script: the calls answered `NOSCRIPT` are sent again with `EVAL`). Each call is atomic and
//! checks each of its names exactly as `renew.lua` checks one, so each name gets its own answer:
//! renewed (its term), lost (not live under its holder token: exactly that lease ends), or an
//! error of its own.
//!
//! Every name is its own hash tag, so a call's keys lie in many hash slots: one server (or a
//! Sentinel-followed primary) runs it, Redis Cluster refuses it (`CROSSSLOT`). The store then
//! renews those names one by one, concurrently, as `renew` does: one request per name, about one
//! round trip of latency.
//!
//! Redis runs nothing else while a script runs, so a batch is cut into calls of [`CHUNK`] names
//! and other clients' commands run between the calls of its pipeline. A call of 1,000 names held
//! a private `redis-server` for 5–7 ms in `INFO commandstats` on the loaded 2-vCPU test machine
//! (load average 10), where one `renew.lua` call took 26 µs measured the same way (26 ms for
//! 1,000 names one by one): each name costs the server about a quarter of a renewal of its own.

use std::ops::Range;
use std::time::Duration;

use lease_core::backend::check::{self, Batch};
use lease_core::backend::{Grant, RenewItem, ceil_millis};
use lease_core::layer::Operation;
use lease_core::{Error, ErrorKind, LeaseStore, Result};
use redis::aio::ConnectionLike;
use redis::{Cmd, RedisError, RedisResult, ServerErrorKind, Value};

use crate::error::{self, During, unexpected_reply};
use crate::store::RedisStore;
use crate::wire::codec::{HolderHex, grant};
use crate::wire::keys::{record_key, replica_sync_channel};
use crate::wire::scripts::SCRIPTS;

/// The most names one `renew_many.lua` call renews; a batch is cut into calls of this many,
/// all sent in one pipeline, so the server runs other clients' commands between them.
pub(crate) const CHUNK: usize = 1_000;

/// One answer per item, in order.
type Answers = Vec<Result<Option<Grant>>>;

/// What the pipeline of a batch answered: one reply per call, and, with
/// [`RedisConfig::replica_acks`](crate::RedisConfig::replica_acks), the fewest replicas that
/// acknowledged a pipeline of it (asked, acknowledged, waited).
struct Sent {
    replies: Vec<RedisResult<Value>>,
    acks: Option<(u32, u64, Duration)>,
}

fn cross_slot(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(ServerErrorKind::CrossSlot)
}

fn no_script(r: &RedisResult<Value>) -> bool {
    matches!(r, Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript))
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// `renew_many`: see the module documentation.
    pub(crate) async fn renew_batch(
        &self,
        items: &[RenewItem<'_>],
        ttl: Duration,
    ) -> Result<Answers> {
        if check::renew_many(self, items, ttl)? == Batch::Empty {
            return Ok(Vec::new());
        }
        let during = During::Op(Operation::RenewMany, "");
        let prefix = self.config().get_key_prefix();
        let keys: Vec<String> = items.iter().map(|i| record_key(prefix, i.name)).collect();
        let holders: Vec<HolderHex> = items.iter().map(|i| HolderHex::new(i.holder)).collect();
        let ttl_ms = ceil_millis(ttl);
        let chunks: Vec<Range<usize>> = (0..items.len())
            .step_by(CHUNK)
            .map(|start| start..items.len().min(start + CHUNK))
            .collect();
        let sent = self
            .bounded(during, async {
                Ok::<_, RedisError>(self.renew_pipelined(&keys, &holders, ttl_ms, &chunks).await)
            })
            .await?;
        let sent = match sent {
            Ok(sent) => sent,
            // A cluster connection refuses the whole pipeline: nothing was sent.
            Err(e) if cross_slot(&e) => {
                tracing::debug!("the connection refused a cross-slot renewal; one per name");
                return Ok(self.renew_one_by_one(items, ttl).await);
            }
            Err(e) => return Err(error::from_redis(e, during, self.label())),
        };
        let mut answers: Answers = Vec::with_capacity(items.len());
        let mut alone: Vec<usize> = Vec::new();
        for (range, reply) in chunks.iter().zip(sent.replies) {
            let chunk = items.get(range.clone()).unwrap_or_default();
            let keys = keys.get(range.clone()).unwrap_or_default();
            match reply {
                Ok(Value::Array(terms)) if terms.len() == chunk.len() => {
                    for ((item, key), term) in chunk.iter().zip(keys).zip(terms) {
                        answers.push(self.answer(item.name, key, term, ttl_ms));
                    }
                }
                Ok(other) => {
                    for item in chunk {
                        let during = During::Op(Operation::RenewMany, item.name);
                        answers.push(Err(unexpected_reply(during, self.label(), &other)));
                    }
                }
                // A server refused this call alone (a cluster node behind a proxy): the call ran
                // nothing, so its names are renewed one by one below.
                Err(e) if cross_slot(&e) => {
                    alone.extend(range.clone());
                    for _ in chunk {
                        answers.push(Ok(None));
                    }
                }
                Err(e) => {
                    for item in chunk {
                        let during = During::Op(Operation::RenewMany, item.name);
                        answers.push(Err(error::from_redis(e.clone(), during, self.label())));
                    }
                }
            }
        }
        if let Some((replicas, acked, wait)) = sent.acks
            && acked < u64::from(replicas)
        {
            // Applied on the primary, maybe not on enough replicas: no renewal is reported done.
            for (answer, item) in answers.iter_mut().zip(items) {
                if answer.is_ok() {
                    let during = During::Op(Operation::RenewMany, item.name);
                    *answer = Err(error::too_few_acks(
                        during,
                        self.label(),
                        (replicas, acked),
                        wait,
                    ));
                }
            }
        }
        if !alone.is_empty() {
            let some: Vec<RenewItem<'_>> = alone
                .iter()
                .filter_map(|&i| items.get(i))
                .copied()
                .collect();
            let renewed = self.renew_one_by_one(&some, ttl).await;
            for (i, answer) in alone.into_iter().zip(renewed) {
                if let Some(slot) = answers.get_mut(i) {
                    *slot = answer;
                }
            }
        }
        Ok(answers)
    }

    /// One name's answer out of its call's reply: the term when renewed, 0 when lost, -1 when
    /// the record's term is not a number.
    fn answer(&self, name: &str, key: &str, term: Value, ttl_ms: u64) -> Result<Option<Grant>> {
        let during = During::Op(Operation::RenewMany, name);
        match term {
            Value::Int(0) => Ok(None),
            Value::Int(-1) => Err(during.attach(
                Error::new(
                    ErrorKind::Backend,
                    format!(
                        "the lease record {key} holds a term that is not a number; the record \
                         was written by something else than this store: give the store a key \
                         prefix of its own"
                    ),
                )
                .with_temporary(false),
                self.label(),
            )),
            Value::Int(t) => match u64::try_from(t) {
                Ok(t) => Ok(Some(grant((t, ttl_ms)))),
                Err(_) => Err(unexpected_reply(during, self.label(), t)),
            },
            other => Err(unexpected_reply(during, self.label(), other)),
        }
    }

    /// Every call of the batch in one pipeline (`EVALSHA`; `EVAL` again for the calls answered
    /// `NOSCRIPT`, in a second pipeline), each followed by `PUBLISH` and `WAIT` under
    /// [`RedisConfig::replica_acks`](crate::RedisConfig::replica_acks) as every operation is.
    /// `Err` as it came, so the caller can see a cross-slot refusal.
    async fn renew_pipelined(
        &self,
        keys: &[String],
        holders: &[HolderHex],
        ttl_ms: u64,
        chunks: &[Range<usize>],
    ) -> RedisResult<Sent> {
        let script = &SCRIPTS.renew_many;
        let acks = self.config().get_replica_acks();
        let prefix = self.config().get_key_prefix();
        let pipeline = |verb: &str, body: &str, calls: &[usize]| {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for range in calls.iter().filter_map(|&c| chunks.get(c)) {
                let keys = keys.get(range.clone()).unwrap_or_default();
                let holders = holders.get(range.clone()).unwrap_or_default();
                let bytes = keys.iter().map(String::len).sum::<usize>() + 32 * holders.len();
                let mut cmd = Cmd::with_capacity(4 + 2 * keys.len(), 40 + body.len() + bytes);
                cmd.arg(verb).arg(body).arg(keys.len());
                for key in keys {
                    cmd.arg(key.as_bytes());
                }
                cmd.arg(ttl_ms);
                for holder in holders {
                    cmd.arg(holder.as_bytes());
                }
                pipe.add_command(cmd);
            }
            if let Some((replicas, wait)) = acks {
                pipe.cmd("PUBLISH")
                    .arg(replica_sync_channel(prefix))
                    .arg("");
                pipe.cmd("WAIT")
                    .arg(replicas)
                    .arg(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
            }
            pipe
        };
        let mut conn = self.connection().clone();
        let every: Vec<usize> = (0..chunks.len()).collect();
        let mut replies: Vec<RedisResult<Value>> = pipeline("EVALSHA", &script.sha, &every)
            .query_async(&mut conn)
            .await?;
        let mut acked = take_acks(&mut replies, acks)?;
        let missed: Vec<usize> = (0..replies.len())
            .filter(|&c| replies.get(c).is_some_and(no_script))
            .collect();
        if !missed.is_empty() {
            // NOSCRIPT: those calls ran nothing; send them again with the source.
            tracing::debug!(
                script = script.name,
                "script not cached; sending EVAL in the pipeline"
            );
            let mut again: Vec<RedisResult<Value>> = pipeline("EVAL", script.source, &missed)
                .query_async(&mut conn)
                .await?;
            let acked_again = take_acks(&mut again, acks)?;
            acked = match (acked, acked_again) {
                (Some((r, a, w)), Some((_, b, _))) => Some((r, a.min(b), w)),
                (a, b) => a.or(b),
            };
            for (c, reply) in missed.into_iter().zip(again) {
                if let Some(slot) = replies.get_mut(c) {
                    *slot = reply;
                }
            }
        }
        Ok(Sent {
            replies,
            acks: acked,
        })
    }

    /// `renew` for each item, all at once: for connections that refuse a call whose keys lie in
    /// different hash slots.
    async fn renew_one_by_one(&self, items: &[RenewItem<'_>], ttl: Duration) -> Answers {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, item) in items.iter().enumerate() {
            let store = self.clone();
            let name = item.name.to_owned();
            let holder = item.holder.clone();
            tasks.spawn(async move { (i, store.renew(&name, &holder, ttl).await) });
        }
        let mut answers: Answers = items
            .iter()
            .map(|item| {
                Err(error::unexpected_reply(
                    During::Op(Operation::RenewMany, item.name),
                    self.label(),
                    "no answer from the renewal task",
                ))
            })
            .collect();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((i, answer)) => {
                    if let Some(slot) = answers.get_mut(i) {
                        *slot = answer;
                    }
                }
                Err(e) => {
                    // The slot keeps its error: that name's outcome is unknown.
                    tracing::debug!(error = %e, "a renewal task failed");
                }
            }
        }
        answers
    }
}

/// Takes the `PUBLISH` and `WAIT` replies off the end of a pipeline's replies when
/// `replica_acks` asked for them: (replicas asked, replicas that acknowledged, wait).
fn take_acks(
    replies: &mut Vec<RedisResult<Value>>,
    acks: Option<(u32, Duration)>,
) -> RedisResult<Option<(u32, u64, Duration)>> {
    let Some((replicas, wait)) = acks else {
        return Ok(None);
    };
    let waited = replies.pop();
    let _published = replies.pop();
    let acked = match waited {
        Some(Ok(Value::Int(n))) => u64::try_from(n).unwrap_or(0),
        Some(Err(e)) => return Err(e),
        _ => 0,
    };
    Ok(Some((replicas, acked, wait)))
}
