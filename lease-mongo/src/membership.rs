//! [`MembershipStore`] on MongoDB: one document per `(service, node)` in the membership
//! collection. The documents are in the `wire` module (`wire/membership.rs`).

use std::future::IntoFuture;
use std::time::Duration;

use lease_core::backend::{async_trait, check};
use lease_core::layer::Operation;
use lease_core::{
    Result,
    backend::membership::{Member, MembershipStore},
};
use mongodb::bson::Document;
use mongodb::options::ReturnDocument;

use crate::error::is_duplicate_id;
use crate::store::{MongoStore, READ_BATCH, label, ttl_millis};
use crate::wire;

impl MongoStore {
    /// One heartbeat upsert; the driver's error is left for the caller to read.
    async fn heartbeat_upsert(
        &self,
        op: Operation,
        what: &str,
        filter: Document,
        update: Vec<Document>,
    ) -> Result<mongodb::error::Result<Option<Document>>> {
        let fut = self
            .members
            .find_one_and_update(filter, update)
            .upsert(true)
            .return_document(ReturnDocument::After)
            .projection(wire::heartbeat_projection())
            .max_time(self.op_timeout())
            .into_future();
        self.bounded(op, what, fut).await
    }
}

/// Membership records: one document per `(service, node)` in the membership collection
/// (`{_id: {s, n}, address, groups, expires_at}`), every "now" the server's `$$NOW`.
///
/// | operation | commands (round trips) |
/// |---|---|
/// | heartbeat | `findAndModify` upsert, filter `member_filter`, pipeline `heartbeat_update` (address, groups, expiry `$$NOW` + TTL), returning the document after the update (1; 2 when a concurrent heartbeat of the same node inserted the record first and the server answered with a duplicate `_id`: it is sent once more, as an update) |
/// | members | `aggregate` `members_pipeline` (1 while the answer fits one 16 MiB batch) |
/// | leave | `update` filter `leave_filter` (live by `$$NOW`), update `release_update` (expiry 1970); `true` when it matched (1) |
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
        check::heartbeat(self, service, node, address, ttl, groups)?;
        self.started().await?;
        let op = Operation::Heartbeat;
        let what = label(service, node);
        let send = || {
            self.heartbeat_upsert(
                op,
                &what,
                wire::member_filter(service, node),
                wire::heartbeat_update(address, groups, ttl_millis(ttl)),
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
            Ok(Some(doc)) => wire::member_from_heartbeat(&doc, node, ttl),
            Ok(None) => Err(self.no_document(op, &what)),
            Err(e) => Err(self.map(op, &what, e)),
        }
    }

    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        check::members(self, service)?;
        let replies = self
            .read_all(
                &self.members,
                Operation::Members,
                service,
                wire::members_pipeline(service),
                READ_BATCH,
            )
            .await?;
        wire::members_from_replies(&replies)
    }

    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        check::leave(self, service, node)?;
        let op = Operation::Leave;
        let what = label(service, node);
        let fut = self
            .members
            .update_one(wire::leave_filter(service, node), wire::release_update())
            .into_future();
        let left = self
            .bounded(op, &what, fut)
            .await?
            .map_err(|e| self.map(op, &what, e))?;
        Ok(left.matched_count > 0)
    }
}
