//! Partition leases ([`PartitionStore`]) and membership records ([`MembershipStore`]) of the
//! [`MongoStore`], each in a collection of its own. The documents and commands are in
//! [`commands`](crate::commands).

use std::collections::BTreeSet;
use std::future::IntoFuture;
use std::time::Duration;

use futures::TryStreamExt;
use lease_core::LeaseStoreExt;
use lease_core::{
    Error, ErrorKind, Member, MembershipStore, PartitionLease, PartitionStore, Result,
    backend::{
        HolderToken, async_trait, check_member_args, check_partition_args, check_partition_batch,
    },
};
use mongodb::bson::Document;
use mongodb::options::ReturnDocument;

use crate::backend::{MongoStore, ttl_millis};
use crate::commands;
use crate::error::is_duplicate_id;

/// The batch size of reads whose answer has no known bound (owners, members): the first batch
/// then holds everything up to the server's 16 MiB reply limit, so one round trip answers
/// unless the answer is larger (tens of thousands of records).
const READ_BATCH: u32 = 1_000_000;

/// How a partition or member is named in errors.
fn label(first: &str, second: impl std::fmt::Display) -> String {
    format!("{first}/{second}")
}

impl MongoStore {
    fn no_document(&self, op: &str, what: &str) -> Error {
        Error::new(
            ErrorKind::Backend,
            format!(
                "MongoDB at {} answered the upsert of the {op} of '{what}' with no document",
                self.server()
            ),
        )
    }

    /// One `aggregate` on `collection` whose documents all come back in the first batch when
    /// they are fewer than `batch` (then the server closes the cursor: no `getMore`, no
    /// `killCursors`).
    async fn read_all(
        &self,
        collection: &mongodb::Collection<Document>,
        op: &str,
        name: &str,
        pipeline: Vec<Document>,
        batch: u32,
    ) -> Result<Vec<Document>> {
        let fut = async {
            let cursor = collection
                .aggregate(pipeline)
                .batch_size(batch)
                .max_time(self.op_timeout())
                .await?;
            cursor.try_collect::<Vec<Document>>().await
        };
        self.bounded(op, name, fut)
            .await?
            .map_err(|e| self.map(op, name, e))
    }

    /// One heartbeat upsert; the driver's error is left for the caller to read.
    async fn heartbeat_upsert(
        &self,
        op: &str,
        what: &str,
        filter: Document,
        update: Vec<Document>,
    ) -> Result<mongodb::error::Result<Option<Document>>> {
        let fut = self
            .members
            .find_one_and_update(filter, update)
            .upsert(true)
            .return_document(ReturnDocument::After)
            .projection(commands::heartbeat_projection())
            .max_time(self.op_timeout())
            .into_future();
        self.bounded(op, what, fut).await
    }
}

/// Partition leases: one document per `(group, partition)` in the partition collection
/// (`{_id: {g, p}, owner, epoch, expires_at, renewal_id}`), every "now" the server's `$$NOW`.
///
/// | operation | commands (round trips) |
/// |---|---|
/// | acquire | `findAndModify` upsert, filter [`acquire_filter`](crate::commands::acquire_filter) (`_id` only: an upsert refuses `$expr`), conditional pipeline [`acquire_update`](crate::commands::acquire_update), returning the document after the update: acquired when it names the owner; held on a duplicate `_id` (1) |
/// | renew | `update` (multi) filter [`owned_filter`](crate::commands::owned_filter) (`_id` in the batch, owner, live by `$$NOW`), pipeline [`partition_renew_update`](crate::commands::partition_renew_update) (expiry `$$NOW` + TTL, a fresh random renewal id); then, when it matched any, `aggregate` [`renewed_pipeline`](crate::commands::renewed_pipeline) reading back the documents carrying that renewal id, in the same causally consistent session (2 however many partitions; 1 when none was renewed) |
/// | release | `update` (multi) filter [`owned_filter`](crate::commands::owned_filter), update [`release_update`](crate::commands::release_update) (expiry 1970, document and epoch kept); the matched count is the number ended (1) |
/// | owners | `aggregate` [`owners_pipeline`](crate::commands::owners_pipeline) (1 while the answer fits one 16 MiB batch) |
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
        check_partition_args(self, group, owner, Some(ttl))?;
        self.started().await?;
        let op = "partition acquire";
        let what = label(group, partition);
        let fut = self
            .partitions
            .find_one_and_update(
                commands::acquire_filter(group, partition),
                commands::acquire_update(owner, ttl_millis(ttl)),
            )
            .upsert(true)
            .return_document(ReturnDocument::After)
            .projection(commands::acquire_projection())
            .max_time(self.op_timeout())
            .into_future();
        match self.bounded(op, &what, fut).await? {
            Ok(Some(doc)) => {
                let lease = commands::partition_from_acquire(&doc, partition, owner, ttl)?;
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
        check_partition_args(self, group, owner, Some(ttl))?;
        check_partition_batch(partitions)?;
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        let op = "partition renewal";
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
                commands::owned_filter(group, partitions, owner),
                commands::partition_renew_update(ttl_millis(ttl), &renewal_id),
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
                .aggregate(commands::renewed_pipeline(
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
        let renewed = commands::partitions_from_replies(&replies)?;
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
        check_partition_args(self, group, owner, None)?;
        check_partition_batch(partitions)?;
        if partitions.is_empty() {
            return Ok(0);
        }
        let op = "partition release";
        let fut = self
            .partitions
            .update_many(
                commands::owned_filter(group, partitions, owner),
                commands::release_update(),
            )
            .into_future();
        let released = self
            .bounded(op, group, fut)
            .await?
            .map_err(|e| self.map(op, group, e))?;
        Ok(usize::try_from(released.matched_count).unwrap_or(usize::MAX))
    }

    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        self.validate_name(group)?;
        let replies = self
            .read_all(
                &self.partitions,
                "partition owners",
                group,
                commands::owners_pipeline(group),
                READ_BATCH,
            )
            .await?;
        commands::partitions_from_replies(&replies)
    }
}

/// Membership records: one document per `(service, node)` in the membership collection
/// (`{_id: {s, n}, address, groups, expires_at}`), every "now" the server's `$$NOW`.
///
/// | operation | commands (round trips) |
/// |---|---|
/// | heartbeat | `findAndModify` upsert, filter [`member_filter`](crate::commands::member_filter), pipeline [`heartbeat_update`](crate::commands::heartbeat_update) (address, groups, expiry `$$NOW` + TTL), returning the document after the update (1; 2 when a concurrent heartbeat of the same node inserted the record first and the server answered with a duplicate `_id`: it is sent once more, as an update) |
/// | members | `aggregate` [`members_pipeline`](crate::commands::members_pipeline) (1 while the answer fits one 16 MiB batch) |
/// | leave | `update` filter [`leave_filter`](crate::commands::leave_filter) (live by `$$NOW`), update [`release_update`](crate::commands::release_update) (expiry 1970); `true` when it matched (1) |
///
/// Every command is bounded by the operation timeout.
#[async_trait]
impl MembershipStore for MongoStore {
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member> {
        check_member_args(self, service, node, Some(address), Some(ttl), groups)?;
        self.started().await?;
        let op = "heartbeat";
        let what = label(service, node);
        let send = || {
            self.heartbeat_upsert(
                op,
                &what,
                commands::member_filter(service, node),
                commands::heartbeat_update(address, groups, ttl_millis(ttl)),
            )
        };
        let reply = match send().await? {
            // Another heartbeat of this node inserted the record first: the record exists now,
            // so the same upsert is an update.
            Err(e) if is_duplicate_id(&e) => {
                tracing::debug!(
                    service,
                    node,
                    "mongodb heartbeat: duplicate _id, sent again"
                );
                send().await?
            }
            other => other,
        };
        match reply {
            Ok(Some(doc)) => commands::member_from_heartbeat(&doc, node, ttl),
            Ok(None) => Err(self.no_document(op, &what)),
            Err(e) => Err(self.map(op, &what, e)),
        }
    }

    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        check_member_args(self, service, "-", None, None, &[])?;
        let replies = self
            .read_all(
                &self.members,
                "members",
                service,
                commands::members_pipeline(service),
                READ_BATCH,
            )
            .await?;
        commands::members_from_replies(&replies)
    }

    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        check_member_args(self, service, node, None, None, &[])?;
        let op = "leave";
        let what = label(service, node);
        let fut = self
            .members
            .update_one(
                commands::leave_filter(service, node),
                commands::release_update(),
            )
            .into_future();
        let left = self
            .bounded(op, &what, fut)
            .await?
            .map_err(|e| self.map(op, &what, e))?;
        Ok(left.matched_count > 0)
    }
}
