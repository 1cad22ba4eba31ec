//! Counted leases on MongoDB (see [`lease_core::backend::permits`] for the rules): one document per
//! counted name in the lease collection, `_id: {c: <name>}`, apart from the name's lease
//! document, holding the name's greatest term and an array of its permits; every operation is
//! one command on the primary, every "now" the server's `$$NOW`. The documents are in
//! `wire/permits.rs`.

use std::future::IntoFuture;
use std::time::Duration;

use lease_core::backend::async_trait;
use lease_core::backend::{Grant, HolderToken, check};
use lease_core::layer::Operation;
use lease_core::{
    Result,
    backend::permits::{PermitGrant, PermitInfo, PermitStore},
};
use mongodb::options::ReturnDocument;

use crate::error::is_duplicate_id;
use crate::store::{MongoStore, ttl_millis};
use crate::wire;

impl MongoStore {
    /// Every permit of `name` with the time left by the server's clock: one `aggregate`.
    async fn read_counted(&self, op: Operation, name: &str) -> Result<Vec<wire::PermitDoc>> {
        check::name(self, name)?;
        match self
            .read_one(op, name, wire::permits_pipeline(name))
            .await?
        {
            Some(doc) => wire::permits_from_reply(&doc),
            None => Ok(Vec::new()),
        }
    }
}

#[async_trait]
impl PermitStore for MongoStore {
    /// [`PermitStore::claim_permit`](lease_core::backend::permits::PermitStore::claim_permit): one
    /// `findAndModify` upsert whose update pipeline counts the live permits and takes the
    /// lowest free one in the same step; won when the document after it carries this call's
    /// fresh `op_id`.
    async fn claim_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<PermitGrant>> {
        const OP: Operation = Operation::ClaimPermit;
        check::claim_permit(self, name, permits, instance, ttl)?;
        self.started().await?;
        let op_id = HolderToken::mint().to_hex();
        let fut = self
            .leases
            .find_one_and_update(
                wire::counted_filter(name),
                wire::permit_claim_update(
                    permits,
                    &holder.to_hex(),
                    instance,
                    ttl_millis(ttl),
                    &op_id,
                ),
            )
            .upsert(true)
            .return_document(ReturnDocument::After)
            .projection(wire::permits_projection())
            .max_time(self.op_timeout())
            .into_future();
        match self.bounded(OP, name, fut).await? {
            Ok(Some(doc)) => Ok(wire::changed_by(&doc, &op_id)?.map(|p| PermitGrant {
                permit: p.permit,
                grant: Grant {
                    term: p.term,
                    expires_in: ttl,
                },
            })),
            Ok(None) => Err(self.no_document(OP, name)),
            // Two upserts raced to insert the name's document and the other one won: this
            // claim took nothing (the caller tries again as after any refusal).
            Err(e) if is_duplicate_id(&e) => Ok(None),
            Err(e) => Err(self.map(OP, name, e)),
        }
    }

    /// [`PermitStore::renew_permit`](lease_core::backend::permits::PermitStore::renew_permit): one
    /// `findAndModify`; renewed when the document after it carries this call's `op_id`.
    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::renew_permit(self, name, permit, ttl)?;
        let op_id = HolderToken::mint().to_hex();
        let doc = self
            .modify(
                Operation::RenewPermit,
                name,
                wire::counted_filter(name),
                wire::permit_renew_update(permit, &holder.to_hex(), ttl_millis(ttl), &op_id),
                wire::permits_projection(),
            )
            .await?;
        let Some(doc) = doc else { return Ok(None) };
        Ok(wire::changed_by(&doc, &op_id)?.map(|p| Grant {
            term: p.term,
            expires_in: ttl,
        }))
    }

    /// [`PermitStore::release_permit`](lease_core::backend::permits::PermitStore::release_permit):
    /// one `findAndModify`; `true` when the document after it carries this call's `op_id`.
    async fn release_permit(&self, name: &str, permit: u32, holder: &HolderToken) -> Result<bool> {
        check::permit(self, name, permit)?;
        let op_id = HolderToken::mint().to_hex();
        let doc = self
            .modify(
                Operation::ReleasePermit,
                name,
                wire::counted_filter(name),
                wire::permit_release_update(permit, &holder.to_hex(), &op_id),
                wire::permits_projection(),
            )
            .await?;
        match doc {
            Some(doc) => Ok(wire::changed_by(&doc, &op_id)?.is_some()),
            None => Ok(false),
        }
    }

    /// [`PermitStore::verify_permit`](lease_core::backend::permits::PermitStore::verify_permit):
    /// one `aggregate`.
    async fn verify_permit(&self, name: &str, holder: &HolderToken) -> Result<Option<PermitGrant>> {
        let holder = holder.to_hex();
        let permits = self.read_counted(Operation::VerifyPermit, name).await?;
        Ok(permits.into_iter().find_map(|p| {
            let left = p.remaining.unwrap_or_default();
            (p.holder == holder && !left.is_zero()).then_some(PermitGrant {
                permit: p.permit,
                grant: Grant {
                    term: p.term,
                    expires_in: left,
                },
            })
        }))
    }

    /// [`PermitStore::permits`](lease_core::backend::permits::PermitStore::permits): one
    /// `aggregate`; released and expired permits are listed too, with their last term.
    async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
        let permits = self.read_counted(Operation::Permits, name).await?;
        Ok(permits
            .into_iter()
            .map(|p| {
                let left = p.remaining.unwrap_or_default();
                PermitInfo {
                    permit: p.permit,
                    instance: p.instance,
                    term: p.term,
                    live: !left.is_zero(),
                    expires_in: left,
                }
            })
            .collect())
    }
}
