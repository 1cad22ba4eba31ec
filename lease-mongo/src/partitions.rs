//! [`PartitionStore`] on MongoDB: one document per `(group, partition)` in the partition
//! collection. The documents are in the `wire` module (`wire/partitions.rs`).

use std::collections::BTreeSet;
use std::future::IntoFuture;
use std::time::Duration;

use futures::TryStreamExt;
use lease_core::backend::{HolderToken, async_trait, check};
use lease_core::layer::Operation;
use lease_core::{
    Result,
    backend::partitions::{PartitionLease, PartitionStore},
};
use mongodb::bson::Document;
use mongodb::options::ReturnDocument;

use crate::error::is_duplicate_id;
use crate::store::{MongoStore, READ_BATCH, label, ttl_millis};
use crate::wire;

/// Partition leases: one document per `(group, partition)` in the partition collection
/// (`{_id: {g, p}, owner, epoch, expires_at, renewal_id}`), every "now" the server's `$$NOW`.
///
/// | operation | commands (round trips) |
/// |---|---|
/// | acquire | `findAndModify` upsert, filter `acquire_filter` (`_id` only: an upsert refuses `$expr`), conditional pipeline `acquire_update`, returning the document after the update: acquired when it names the owner; held on a duplicate `_id` (1) |
/// | renew | `update` (multi) filter `owned_filter` (`_id` in the batch, owner, live by `$$NOW`), pipeline `partition_renew_update` (expiry `$$NOW` + TTL, a fresh random renewal id); then, when it matched any, `aggregate` `renewed_pipeline` reading back the documents carrying that renewal id, in the same causally consistent session (2 however many partitions; 1 when none was renewed) |
/// | release | `update` (multi) filter `owned_filter`, update `release_update` (expiry 1970, document and epoch kept); the matched count is the number ended (1) |
/// | owners | `aggregate` `owners_pipeline` (1 while the answer fits one 16 MiB batch) |
///
/// Every command is bounded by the operation timeout (on the client; the server is told it
/// through `maxTimeMS` on `findAndModify` and `aggregate`, and `wtimeout` on every write), so
/// a renewal takes at most two. Empty batches do no I/O. Writes are `{w: "majority", j:
/// true}`; reads `majority` on the primary.
#[async_trait]
impl PartitionStore for MongoStore {
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<PartitionLease>> {
        check::acquire_partition(self, group, owner, ttl)?;
        self.started().await?;
        let op = Operation::AcquirePartition;
        let what = label(group, partition);
        let fut = self
            .partitions
            .find_one_and_update(
                wire::acquire_filter(group, partition),
                wire::acquire_update(owner, ttl_millis(ttl)),
            )
            .upsert(true)
            .return_document(ReturnDocument::After)
            .projection(wire::acquire_projection())
            .max_time(self.op_timeout())
            .into_future();
        match self.bounded(op, &what, fut).await? {
            Ok(Some(doc)) => {
                let lease = wire::partition_from_acquire(&doc, partition, owner, ttl)?;
                if lease.is_none() {
                    tracing::debug!(group, partition, "mongodb partition acquire: held");
                }
                Ok(lease)
            }
            Ok(None) => Err(self.no_document(op, &what)),
            // Two upserts raced to insert the missing document and the other one won (servers
            // that do not retry the loser as an update answer this way): held by the winner.
            Err(e) if is_duplicate_id(&e) => {
                tracing::debug!(
                    group,
                    partition,
                    "mongodb partition acquire: held (duplicate _id)"
                );
                Ok(None)
            }
            Err(e) => Err(self.map(op, &what, e)),
        }
    }

    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<PartitionLease>> {
        if check::renew_partitions(self, group, partitions, owner, ttl)? == check::Batch::Empty {
            return Ok(Vec::new());
        }
        let op = Operation::RenewPartitions;
        // 128 fresh random bits per call: the documents carry them only if this call's update
        // extended them.
        let renewal_id = HolderToken::mint().to_hex();
        // A causally consistent session (no I/O to start): the read-back is sent with
        // `afterClusterTime` set to the update's operation time, so it sees the update even
        // across a failover between the two commands.
        let start = self
            .client()
            .start_session()
            .causal_consistency(true)
            .into_future();
        let mut session = self
            .bounded(op, group, start)
            .await?
            .map_err(|e| self.map(op, group, e))?;
        let update = self
            .partitions
            .update_many(
                wire::owned_filter(group, partitions, owner),
                wire::partition_renew_update(ttl_millis(ttl), &renewal_id),
            )
            .session(&mut session)
            .into_future();
        let updated = self
            .bounded(op, group, update)
            .await?
            .map_err(|e| self.map(op, group, e))?;
        if updated.matched_count == 0 {
            return Ok(Vec::new());
        }
        let unique = partitions.iter().collect::<BTreeSet<_>>().len();
        // One more than the answer can hold, so the first batch ends the cursor.
        let batch = u32::try_from(unique.saturating_add(1)).unwrap_or(u32::MAX);
        let read = async {
            let mut cursor = self
                .partitions
                .aggregate(wire::renewed_pipeline(
                    group,
                    partitions,
                    owner,
                    &renewal_id,
                ))
                .batch_size(batch)
                .max_time(self.op_timeout())
                .session(&mut session)
                .await?;
            cursor
                .stream(&mut session)
                .try_collect::<Vec<Document>>()
                .await
        };
        let replies = self
            .bounded(op, group, read)
            .await?
            .map_err(|e| self.map(op, group, e))?;
        let renewed = wire::partitions_from_replies(&replies)?;
        if u64::try_from(renewed.len()).unwrap_or(u64::MAX) != updated.matched_count {
            tracing::debug!(
                group,
                extended = updated.matched_count,
                read_back = renewed.len(),
                "mongodb partition renewal: some leases changed between the update and the read"
            );
        }
        Ok(renewed)
    }

    async fn release_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> Result<usize> {
        if check::release_partitions(self, group, partitions, owner)? == check::Batch::Empty {
            return Ok(0);
        }
        let op = Operation::ReleasePartitions;
        let fut = self
            .partitions
            .update_many(
                wire::owned_filter(group, partitions, owner),
                wire::release_update(),
            )
            .into_future();
        let released = self
            .bounded(op, group, fut)
            .await?
            .map_err(|e| self.map(op, group, e))?;
        Ok(usize::try_from(released.matched_count).unwrap_or(usize::MAX))
    }

    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        check::owners(self, group)?;
        let replies = self
            .read_all(
                &self.partitions,
                Operation::Owners,
                group,
                wire::owners_pipeline(group),
                READ_BATCH,
            )
            .await?;
        wire::partitions_from_replies(&replies)
    }
}
