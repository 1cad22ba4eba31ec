//! [`SlotStore`] on Redis: one Lua script per slot operation, the slot instants in the name's
//! hash (`slot_ms`, `unfinished_ms`, `rerun_ms`). See the crate documentation, *Scheduler
//! slots*, and the scripts in `src/wire/scripts/*_slot.lua`, `unfinished.lua`, `claim_rerun.lua`.

use std::time::Duration;

use lease_core::backend::check::{self, Batch};
use lease_core::backend::{
    Grant, HolderToken, async_trait, ceil_millis,
    slots::{SlotClaim, SlotFinish, SlotRecord},
};
use lease_core::layer::Operation;
use lease_core::{Result, backend::slots::SlotStore};
use redis::RedisResult;
use redis::ServerErrorKind;
use redis::aio::ConnectionLike;

use crate::error::{self, During, unexpected_reply};
use crate::store::RedisStore;
use crate::wire::codec::{ClaimSlotReply as ClaimReply, HolderHex, grant};
use crate::wire::keys::record_key;
use crate::wire::script_cmd;
use crate::wire::scripts::SCRIPTS;

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn key(&self, name: &str) -> String {
        record_key(self.config().get_key_prefix(), name)
    }

    /// The `unfinished` script on every key, pipelined: one round trip (two when the server
    /// had not cached the script). `Err` as it came, so the caller can see a cross-slot refusal.
    async fn unfinished_pipelined(&self, keys: &[String]) -> RedisResult<Vec<Option<i64>>> {
        let script = &SCRIPTS.unfinished;
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for key in keys {
            pipe.add_command(script_cmd("EVALSHA", &script.sha, key.as_bytes(), &[]));
        }
        let mut conn = self.connection().clone();
        let first: Vec<RedisResult<Option<i64>>> = pipe.query_async(&mut conn).await?;
        let no_script = |r: &RedisResult<Option<i64>>| matches!(r, Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript));
        if !first.iter().any(no_script) {
            return first.into_iter().collect();
        }
        // NOSCRIPT: send the source for the calls that missed it (the script only reads).
        tracing::debug!(
            script = script.name,
            "script not cached; sending EVAL in the pipeline"
        );
        let mut retry = redis::pipe();
        retry.ignore_errors();
        let missed: Vec<usize> = (0..first.len()).filter(|&i| no_script(&first[i])).collect();
        for &i in &missed {
            if let Some(key) = keys.get(i) {
                retry.add_command(script_cmd("EVAL", script.source, key.as_bytes(), &[]));
            }
        }
        let second: Vec<RedisResult<Option<i64>>> = retry.query_async(&mut conn).await?;
        let mut out = first;
        for (i, r) in missed.into_iter().zip(second) {
            if let Some(slot) = out.get_mut(i) {
                *slot = r;
            }
        }
        out.into_iter().collect()
    }

    /// The `unfinished` script once per key, all at once: for cluster connections, which refuse
    /// a pipeline whose keys lie in different hash slots.
    async fn unfinished_one_by_one(&self, keys: Vec<String>) -> Result<Vec<Option<i64>>> {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, key) in keys.into_iter().enumerate() {
            let store = self.clone();
            tasks.spawn(async move {
                let found: Result<Option<i64>> = store
                    .eval(
                        During::Op(Operation::Unfinished, ""),
                        &SCRIPTS.unfinished,
                        key.as_bytes(),
                        &[],
                    )
                    .await;
                (i, found)
            });
        }
        let mut out = vec![None; tasks.len()];
        while let Some(joined) = tasks.join_next().await {
            let (i, found) =
                joined.map_err(|e| error::task_failed(During::Op(Operation::Unfinished, ""), e))?;
            if let Some(slot) = out.get_mut(i) {
                *slot = found?;
            }
        }
        Ok(out)
    }
}

/// Scheduler slots, each operation one Lua script (one `EVALSHA`, one round trip); `unfinished`
/// pipelines one script call per name (one round trip on one server). See the crate
/// documentation, *Scheduler slots*.
#[async_trait]
impl<C> SlotStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn claim_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<SlotClaim> {
        check::claim(self, name, instance, ttl)?;
        let during = During::Op(Operation::ClaimSlot, name);
        let on = self.started(during).await?;
        let key = self.key(name);
        let ttl = ceil_millis(ttl).to_string();
        let reply: ClaimReply = on
            .eval(
                during,
                &SCRIPTS.claim_slot,
                key.as_bytes(),
                &[
                    HolderHex::new(holder).as_str(),
                    instance,
                    &ttl,
                    self.config().get_term_scheme().script_flag(),
                    &instant_ms.to_string(),
                ],
            )
            .await?;
        match reply {
            (ref outcome, _, _, _) if outcome == "held" => Ok(SlotClaim::Held),
            (ref outcome, _, _, Some(last_ms)) if outcome == "taken" => {
                Ok(SlotClaim::Taken { last_ms })
            }
            (ref outcome, _, _, Some(now_ms)) if outcome == "early" => {
                Ok(SlotClaim::Early { now_ms })
            }
            (ref outcome, Some(term), Some(ttl_ms), superseded_ms) if outcome == "claimed" => {
                self.changed_job(name);
                Ok(SlotClaim::Claimed {
                    grant: grant((term, ttl_ms)),
                    superseded_ms,
                })
            }
            other => Err(unexpected_reply(during, self.label(), other)),
        }
    }

    async fn finish_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instant_ms: i64,
        passed_ms: Option<i64>,
    ) -> Result<SlotFinish> {
        check::name(self, name)?;
        let key = self.key(name);
        let passed = passed_ms.map(|p| p.to_string()).unwrap_or_default();
        let (recorded, passed_taken, released): (i64, i64, i64) = self
            .eval(
                During::Op(Operation::FinishSlot, name),
                &SCRIPTS.finish_slot,
                key.as_bytes(),
                &[
                    HolderHex::new(holder).as_str(),
                    &instant_ms.to_string(),
                    &passed,
                ],
            )
            .await?;
        if recorded == 1 || released == 1 {
            self.changed_job(name);
        }
        Ok(SlotFinish {
            recorded: recorded == 1,
            passed_taken: passed_taken == 1,
            released: released == 1,
        })
    }

    async fn unfinished(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
        if check::unfinished(self, names)? == Batch::Empty {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = names.iter().map(|n| self.key(n)).collect();
        let during = During::Op(Operation::Unfinished, "");
        let pipelined = self
            .bounded(during, async {
                Ok::<_, redis::RedisError>(self.unfinished_pipelined(&keys).await)
            })
            .await?;
        let found = match pipelined {
            Ok(found) => found,
            Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::CrossSlot) => {
                tracing::debug!("the connection refused a cross-slot pipeline; one call per name");
                self.unfinished_one_by_one(keys).await?
            }
            Err(e) => return Err(error::from_redis(e, during, self.label())),
        };
        if found.len() != names.len() {
            return Err(unexpected_reply(during, self.label(), found));
        }
        Ok(names
            .iter()
            .zip(found)
            .filter_map(|(name, u)| u.map(|u| (name.clone(), u)))
            .collect())
    }

    async fn claim_rerun(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<Option<Grant>> {
        check::claim(self, name, instance, ttl)?;
        let during = During::Op(Operation::ClaimRerun, name);
        let on = self.started(during).await?;
        let key = self.key(name);
        let ttl = ceil_millis(ttl).to_string();
        let reply: Option<(u64, u64)> = on
            .eval(
                during,
                &SCRIPTS.claim_rerun,
                key.as_bytes(),
                &[
                    HolderHex::new(holder).as_str(),
                    instance,
                    &ttl,
                    self.config().get_term_scheme().script_flag(),
                    &instant_ms.to_string(),
                ],
            )
            .await?;
        if reply.is_some() {
            self.changed_job(name);
        }
        Ok(reply.map(grant))
    }

    async fn last_slot(&self, name: &str) -> Result<Option<SlotRecord>> {
        check::name(self, name)?;
        let key = self.key(name);
        let reply: Option<(Option<i64>, Option<i64>, Option<i64>)> = self
            .eval(
                During::Op(Operation::LastSlot, name),
                &SCRIPTS.last_slot,
                key.as_bytes(),
                &[],
            )
            .await?;
        Ok(reply.map(|(last_ms, unfinished_ms, rerun_ms)| SlotRecord {
            last_ms,
            unfinished_ms,
            rerun_ms,
        }))
    }
}
