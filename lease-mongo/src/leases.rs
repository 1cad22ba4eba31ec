//! [`LeaseStore`] on MongoDB: one document per lease name in the lease collection, every
//! operation one command on the primary, every "now" the server's `$$NOW`. The documents are
//! in the `wire` module (`wire/leases.rs`).

use std::collections::HashMap;
use std::future::IntoFuture;
use std::time::Duration;

use futures::TryStreamExt;

use lease_core::backend::{
    Grant, HolderToken, RenewItem, async_trait, check, partitions::BatchRenew,
};
use lease_core::layer::Operation;
use lease_core::{
    LeaseStore, Result,
    backend::{
        Capabilities, LeaseInfo, membership::MembershipStore, partitions::PartitionStore,
        permits::PermitStore, slots::SlotStore,
    },
};
use mongodb::bson::Document;
use mongodb::options::ReturnDocument;

use crate::error::is_duplicate_id;
use crate::store::{MAX_NAME_BYTES, MongoStore, ttl_millis};
use crate::wire;

/// The most bytes of statements one `update` command of `renew_many` carries: half of the
/// server's 16 MiB limit on a command, so the command and its envelope always fit.
const BATCH_COMMAND_BYTES: usize = 8 << 20;

/// `renew_many`'s statements from the start of `items` (with their holder tokens `hexes`), as
/// many as fit in [`BATCH_COMMAND_BYTES`] (one at least), and how many were taken.
fn renew_statements(
    items: &[RenewItem<'_>],
    hexes: &[String],
    ttl_ms: i64,
    renewal_id: &str,
) -> (Vec<Document>, usize) {
    let mut statements = Vec::new();
    let mut bytes = 0;
    for (item, hex) in items.iter().zip(hexes) {
        let statement = wire::renew_many_statement(item.name, hex, ttl_ms, renewal_id);
        // The encoded size; a statement that cannot be encoded is sized as the largest.
        let size = mongodb::bson::to_vec(&statement).map_or(BATCH_COMMAND_BYTES, |v| v.len());
        if !statements.is_empty() && bytes + size > BATCH_COMMAND_BYTES {
            break;
        }
        bytes += size;
        statements.push(statement);
    }
    let taken = statements.len();
    (statements, taken)
}

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
            // `renew_many`: one `update` command of one statement per name, then one
            // `aggregate` reading back the documents it renewed (two round trips per 8 MiB of
            // statements).
            renew_many: true,
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

    /// One `update` command carrying one statement per name (each with its holder check,
    /// `held_filter`, and this call's fresh random `renewal_id`),
    /// then, when it renewed any, one `aggregate` reading back the documents carrying that
    /// renewal id in the same causally consistent session: two round trips per
    /// 8 MiB of statements (one command for 10,000 names of up to about
    /// 300 bytes). A statement the server failed answers that item's error; a write concern
    /// error fails the whole call (every outcome unknown); a name the read-back does not find
    /// live under its holder with this renewal id is answered `None`.
    async fn renew_many(
        &self,
        items: &[RenewItem<'_>],
        ttl: Duration,
    ) -> Result<Vec<Result<Option<Grant>>>> {
        if check::renew_many(self, items, ttl)? == check::Batch::Empty {
            return Ok(Vec::new());
        }
        let op = Operation::RenewMany;
        let first = items.first().map_or("", |i| i.name);
        let ttl_ms = ttl_millis(ttl);
        let wtimeout = i64::try_from(self.op_timeout().as_millis()).unwrap_or(i64::MAX);
        // 128 fresh random bits per call: the documents carry them only if this call renewed
        // them.
        let renewal_id = HolderToken::mint().to_hex();
        let hexes: Vec<String> = items.iter().map(|i| i.holder.to_hex()).collect();
        let start = self
            .client()
            .start_session()
            .causal_consistency(true)
            .into_future();
        let mut session = self
            .bounded(op, first, start)
            .await?
            .map_err(|e| self.map(op, first, e))?;
        let mut answers: Vec<Option<Result<Option<Grant>>>> =
            std::iter::repeat_with(|| None).take(items.len()).collect();
        let db = self.database();
        let mut from = 0;
        while from < items.len() {
            let (statements, to) =
                renew_statements(&items[from..], &hexes[from..], ttl_ms, &renewal_id);
            let to = from + to;
            let command = wire::renew_many_command(self.leases.name(), statements, wtimeout);
            let update = db.run_command(command).session(&mut session).into_future();
            let reply = self
                .bounded(op, first, update)
                .await?
                .map_err(|e| self.map(op, first, e))?;
            let failures = wire::update_failures(&reply);
            if let Some(concern) = &failures.write_concern {
                return Err(crate::error::write_concern_error(
                    concern,
                    op,
                    first,
                    self.server(),
                ));
            }
            for (i, failure) in &failures.statements {
                if let Some(item) = items.get(from + i) {
                    answers[from + i] = Some(Err(crate::error::statement_error(
                        failure,
                        op,
                        item.name,
                        self.server(),
                    )));
                }
            }
            let matched = reply
                .get("n")
                .and_then(|n| n.as_i64().or(n.as_i32().map(i64::from)));
            if matched != Some(0) {
                let names: Vec<&str> = items[from..to].iter().map(|i| i.name).collect();
                let batch = u32::try_from(names.len().saturating_add(1)).unwrap_or(u32::MAX);
                let read = async {
                    let mut cursor = self
                        .leases
                        .aggregate(wire::renewed_many_pipeline(&names, &renewal_id))
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
                    .bounded(op, first, read)
                    .await?
                    .map_err(|e| self.map(op, first, e))?;
                let place: HashMap<&str, usize> = names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (*n, from + i))
                    .collect();
                for (name, holder, term) in wire::renewed_many_from_replies(&replies)
                    .map_err(|e| e.during(op, first).at_server(self.server()))?
                {
                    let Some(&i) = place.get(name.as_str()) else {
                        continue;
                    };
                    if hexes[i] == holder && answers[i].is_none() {
                        answers[i] = Some(Ok(Some(Grant {
                            term,
                            expires_in: ttl,
                        })));
                    }
                }
            }
            from = to;
        }
        Ok(answers.into_iter().map(|a| a.unwrap_or(Ok(None))).collect())
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
