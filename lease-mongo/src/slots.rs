//! [`SlotStore`] on MongoDB: the scheduler slots of a name kept on its lease document. The
//! documents are in the `wire` module (`wire/slots.rs`).

use std::future::IntoFuture;
use std::time::Duration;

use futures::TryStreamExt;
use lease_core::backend::{
    Grant, HolderToken, async_trait, check,
    slots::{SlotClaim, SlotFinish, SlotRecord},
};
use lease_core::layer::Operation;
use lease_core::{Error, Result, backend::slots::SlotStore};
use mongodb::bson::Document;
use mongodb::options::ReturnDocument;

use crate::error::is_duplicate_id;
use crate::store::{MongoStore, ttl_millis};
use crate::wire;

/// Scheduler slots on the lease document: `slot_ms`, `unfinished_ms` and `rerun_ms` (numbers,
/// milliseconds since the Unix epoch), compared with the server's `$$NOW`.
///
/// | operation | commands (round trips) |
/// |---|---|
/// | claim slot | `aggregate` `slot_read_pipeline` (the record and `$$NOW`), decided by `slot_plan`; then, unless held, taken or early, `findAndModify` filter `slot_claim_filter` (term compared), pipeline `slot_claim_update`, returning the document before the update (2) |
/// | finish slot | `findAndModify`, filter `name_filter`, conditional pipeline `finish_update` (1) |
/// | unfinished | `aggregate` `unfinished_pipeline` over `_id: {$in: names}` (1; none for no names) |
/// | claim rerun | `findAndModify`, filter `rerun_filter`, pipeline `rerun_update` (1) |
/// | last slot | `find` `name_filter`, projection `last_slot_projection` (1) |
///
/// Each command is bounded by the operation timeout, so a slot claim takes at most two.
#[async_trait]
impl SlotStore for MongoStore {
    async fn claim_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<SlotClaim> {
        check::claim(self, name, instance, ttl)?;
        self.started().await?;
        let op = Operation::ClaimSlot;
        let read = self
            .read_one(op, name, wire::slot_read_pipeline(name))
            .await?
            .ok_or_else(|| {
                Error::new(
                    lease_core::ErrorKind::Backend,
                    "MongoDB answered the slot read (an aggregate that always gives one document) \
                     with none",
                )
                .during(op, name)
                .at_server(self.server())
            })?;
        let term = match wire::slot_plan(&read, instant_ms)? {
            wire::SlotPlan::Refuse(refused) => return Ok(refused),
            wire::SlotPlan::Write { term } => term,
        };
        let fut = self
            .leases
            .find_one_and_update(
                wire::slot_claim_filter(name, term, instant_ms),
                wire::slot_claim_update(&holder.to_hex(), instance, ttl_millis(ttl), instant_ms),
            )
            .upsert(term.is_none())
            .return_document(ReturnDocument::Before)
            .projection(wire::slot_claim_projection())
            .max_time(self.op_timeout())
            .into_future();
        match self.bounded(op, name, fut).await? {
            Ok(Some(before)) => wire::slot_claimed(Some(&before), ttl),
            // The upsert inserted the document: there was nothing before it.
            Ok(None) if term.is_none() => wire::slot_claimed(None, ttl),
            // The term moved (another replica's claim matched first) or the record changed.
            Ok(None) => {
                tracing::debug!(name, instant_ms, "mongodb slot claim: lost the race");
                Ok(SlotClaim::Held)
            }
            // Another replica inserted the first record meanwhile.
            Err(e) if is_duplicate_id(&e) => {
                tracing::debug!(name, instant_ms, "mongodb slot claim: held (duplicate _id)");
                Ok(SlotClaim::Held)
            }
            Err(e) => Err(self.map(op, name, e)),
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
        // Fresh per call: the document comes back with it only if this finish changed it.
        let finish_id = HolderToken::mint().to_hex();
        let doc = self
            .modify(
                Operation::FinishSlot,
                name,
                wire::name_filter(name),
                wire::finish_update(&holder.to_hex(), instant_ms, passed_ms, &finish_id),
                wire::finish_projection(),
            )
            .await?;
        Ok(wire::finish_from_reply(doc.as_ref(), &finish_id))
    }

    async fn unfinished(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
        if check::unfinished(self, names)? == check::Batch::Empty {
            return Ok(Vec::new());
        }
        let op = Operation::Unfinished;
        // One more than the answer can hold, so the first batch ends the cursor: no getMore
        // (unless the answer passes 16 MiB).
        let batch = u32::try_from(names.len().saturating_add(1)).unwrap_or(u32::MAX);
        let fut = async {
            let cursor = self
                .leases
                .aggregate(wire::unfinished_pipeline(names))
                .batch_size(batch)
                .max_time(self.op_timeout())
                .await?;
            cursor.try_collect::<Vec<Document>>().await
        };
        let replies = self
            .bounded(op, "", fut)
            .await?
            .map_err(|e| self.map(op, "", e))?;
        wire::unfinished_from_replies(names, &replies)
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
        self.started().await?;
        let doc = self
            .modify(
                Operation::ClaimRerun,
                name,
                wire::rerun_filter(name, instant_ms),
                wire::rerun_update(&holder.to_hex(), instance, ttl_millis(ttl), instant_ms),
                wire::grant_projection(),
            )
            .await?;
        doc.map(|d| wire::grant_from_update(&d, ttl)).transpose()
    }

    async fn last_slot(&self, name: &str) -> Result<Option<SlotRecord>> {
        check::name(self, name)?;
        let op = Operation::LastSlot;
        let fut = self
            .leases
            .find_one(wire::name_filter(name))
            .projection(wire::last_slot_projection())
            .max_time(self.op_timeout())
            .into_future();
        let doc = self
            .bounded(op, name, fut)
            .await?
            .map_err(|e| self.map(op, name, e))?;
        doc.map(|d| wire::slot_record_from(&d)).transpose()
    }
}
