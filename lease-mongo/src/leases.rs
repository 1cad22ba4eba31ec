//! [`LeaseStore`] on MongoDB: one document per lease name in the lease collection, every
//! operation one command on the primary, every "now" the server's `$$NOW`. The documents are
//! in the `wire` module (`wire/leases.rs`).

use std::future::IntoFuture;
use std::time::Duration;

use lease_core::backend::{Grant, HolderToken, async_trait, check, partitions::BatchRenew};
use lease_core::layer::Operation;
use lease_core::{
    LeaseStore, Result,
    backend::{
        Capabilities, LeaseInfo, membership::MembershipStore, partitions::PartitionStore,
        permits::PermitStore, slots::SlotStore,
    },
};
use mongodb::options::ReturnDocument;

use crate::error::is_duplicate_id;
use crate::store::{MAX_NAME_BYTES, MongoStore, ttl_millis};
use crate::wire;

#[async_trait]
impl LeaseStore for MongoStore {
    fn backend(&self) -> &'static str {
        "mongodb"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            consecutive_terms: true,
            keeps_ended_records: true,
            // Expiries by the server's `$$NOW`, in milliseconds: the default granularity.
            force_release: true,
            list_names: true,
            // One document per counted name (see `permits.rs`).
            max_name_bytes: MAX_NAME_BYTES,
            // The multi-document `update`, then the `aggregate` that reads back the documents
            // carrying this renewal's id: two round trips however many partitions.
            batch_renew: BatchRenew::Fixed { round_trips: 2 },
            // Counted leases, slots, partitions and membership: from the accessors.
            ..lease_core::backend::derived_capabilities(self)
        }
    }

    fn permit_store(&self) -> Option<&dyn PermitStore> {
        Some(self)
    }

    fn partition_store(&self) -> Option<&dyn PartitionStore> {
        Some(self)
    }

    fn membership_store(&self) -> Option<&dyn MembershipStore> {
        Some(self)
    }

    fn slot_store(&self) -> Option<&dyn SlotStore> {
        Some(self)
    }

    /// Checks that the server answers and runs MongoDB 4.2 or newer; under
    /// [`Ddl::Auto`](crate::Ddl::Auto) creates the three collections and the two indexes when
    /// missing ([`ensure_schema`](MongoStore::ensure_schema)); checks that none of the three
    /// collections is a view and that each compares names byte for byte (simple collation); and
    /// that majority reads are served. A few commands (eight under [`Ddl::Auto`](crate::Ddl::Auto),
    /// three under [`Ddl::None`](crate::Ddl::None)), at start-up only.
    async fn available(&self) -> Result<()> {
        self.check_available().await
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::claim(self, name, instance, ttl)?;
        self.started().await?;
        // 128 fresh random bits per call: the document comes back with them only if this
        // call's update took the lease.
        let claim_id = HolderToken::mint().to_hex();
        let fut = self
            .leases
            .find_one_and_update(
                wire::claim_filter(name),
                wire::claim_update(&holder.to_hex(), instance, ttl_millis(ttl), &claim_id),
            )
            .upsert(true)
            .return_document(ReturnDocument::After)
            .projection(wire::claim_projection())
            .max_time(self.op_timeout())
            .into_future();
        match self.bounded(Operation::Claim, name, fut).await? {
            Ok(Some(doc)) => {
                let grant = wire::grant_from_claim(&doc, &claim_id, ttl)?;
                if grant.is_none() {
                    tracing::debug!(name, "mongodb claim: held");
                }
                Ok(grant)
            }
            Ok(None) => Err(self.no_document(Operation::Claim, name)),
            // Two upserts raced to insert a missing document and the other one won (servers
            // that do not retry the upsert themselves answer this way): held.
            Err(e) if is_duplicate_id(&e) => {
                tracing::debug!(name, "mongodb claim: held (duplicate _id)");
                Ok(None)
            }
            Err(e) => Err(self.map(Operation::Claim, name, e)),
        }
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::renew(self, name, ttl)?;
        let doc = self
            .modify(
                Operation::Renew,
                name,
                wire::held_filter(name, &holder.to_hex()),
                wire::renew_update(ttl_millis(ttl)),
                wire::grant_projection(),
            )
            .await?;
        doc.map(|d| wire::grant_from_update(&d, ttl)).transpose()
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        check::name(self, name)?;
        let doc = self
            .modify(
                Operation::Release,
                name,
                wire::held_filter(name, &holder.to_hex()),
                wire::release_update(),
                wire::release_projection(),
            )
            .await?;
        Ok(doc.is_some())
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        check::name(self, name)?;
        let doc = self
            .read_one(
                Operation::Verify,
                name,
                wire::verify_pipeline(name, &holder.to_hex()),
            )
            .await?;
        match doc {
            Some(d) => wire::grant_from_verify(&d),
            None => Ok(None),
        }
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        check::name(self, name)?;
        let doc = self
            .read_one(Operation::Get, name, wire::get_pipeline(name))
            .await?;
        doc.map(|d| wire::info_from_get(name, &d)).transpose()
    }

    /// Two `aggregate`s, one per kind of document, each a range of strings (`_id` through its
    /// index, and the counted names' `_id.c`; see `wire/names.rs`), at most `limit + 1` each, sent
    /// together. The lease
    /// documents are kept after release and expiry, so every name ever claimed shows.
    async fn names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<lease_core::backend::names::NamePage> {
        use lease_core::backend::names::{NamePage, counted_name, lease_name, prefix_end};
        check::names(self, prefix, after, limit)?;
        let op = Operation::Names;
        let end = prefix_end(prefix);
        let n = i32::try_from(limit + 1).unwrap_or(i32::MAX);
        let batch = u32::try_from(limit + 2).unwrap_or(u32::MAX);
        let leases = wire::lease_names_pipeline(prefix, end.as_deref(), after, n);
        let counted = wire::counted_names_pipeline(prefix, end.as_deref(), after, n);
        let (leases, counted) = futures::try_join!(
            self.read_all(&self.leases, op, prefix, leases, batch),
            self.read_all(&self.leases, op, prefix, counted, batch),
        )?;
        let found = leases
            .iter()
            .filter_map(wire::listed_name)
            .map(lease_name)
            .chain(
                counted
                    .iter()
                    .filter_map(wire::listed_name)
                    .map(counted_name),
            );
        Ok(NamePage::from_found(found, limit))
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        check::name(self, name)?;
        let doc = self
            .modify(
                Operation::ForceRelease,
                name,
                wire::live_filter(name),
                wire::release_update(),
                wire::release_projection(),
            )
            .await?;
        Ok(doc.is_some())
    }
}
