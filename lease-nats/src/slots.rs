//! [`SlotStore`] on NATS: each job's slot record in a second bucket with no max age, written by
//! compare-and-set on its revision, beside the job's lease in the lease bucket. See the crate
//! docs, *Scheduler slots*, for the protocol, the safety argument and the round trips.
//!
//! In short: the slot record (`last`, `unfinished`, `rerun`, and the term and holder of the
//! lease that made the last claim) is the one place where instants are decided, and every
//! change to it is a compare-and-set on the revision read, so of two writers that read the same
//! revision exactly one succeeds. A claim (or a rerun) first creates the job's lease — which
//! fails while any lease on the name is live — and only then writes the record, naming that
//! lease's term. A job's lease (`job1`) is a term only once the record names it: `verify`
//! checks the record, so a claim whose record write was lost is never read back as claimed.

use std::time::Instant;

use async_nats::jetstream::kv;
use lease_core::backend::check::{self, Batch};
use lease_core::backend::{
    Grant, HolderToken, async_trait,
    slots::{SlotClaim, SlotFinish, SlotRecord},
};
use lease_core::layer::Operation;
use lease_core::{Error, ErrorKind, LeaseStore, Result, backend::slots::SlotStore};
use tracing::debug;

use crate::store::{MAX_TRIES, NatsStore, Seen, pipelined};
use crate::wire::codec::{Record, SlotValue};
use crate::wire::keys::encode_key;

/// A job's slot record as read: the revision to compare-and-set against (0: no message) and
/// the value (`None`: the job never ran, or a tool deleted its record).
#[derive(Debug, Clone)]
struct Slot {
    revision: u64,
    value: Option<SlotValue>,
}

impl Slot {
    fn last_ms(&self) -> Option<i64> {
        self.value.as_ref().and_then(|v| v.last_ms)
    }

    /// The record as it stands when `instant_ms` may run a second time: unfinished, the last
    /// instant claimed, and not rerun yet.
    fn rerun_of(&self, instant_ms: i64) -> Option<&SlotValue> {
        self.value.as_ref().filter(|v| {
            v.unfinished_ms == Some(instant_ms)
                && v.last_ms == Some(instant_ms)
                && v.rerun_ms != Some(instant_ms)
        })
    }
}

/// Whether an error leaves the outcome of a write unknown: no answer in time, or no connection
/// (the client may have buffered the write and send it on reconnecting).
fn outcome_unknown(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::Timeout | ErrorKind::Unavailable)
}

/// Milliseconds since the Unix epoch of a server timestamp in nanoseconds, rounded down.
fn stamp_ms(created_ns: i128) -> i64 {
    i64::try_from(created_ns.div_euclid(1_000_000)).unwrap_or(i64::MAX)
}

impl NatsStore {
    /// The slot bucket, or the error that says it is missing.
    fn slot_kv(&self, op: Operation, name: &str) -> Result<&kv::Store> {
        self.inner.slots.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Backend,
                format!(
                    "the NATS slot bucket {0} does not exist and bucket creation is off; create \
                     it (stream KV_{0}, subjects $KV.{0}.>, one message per key, no max age) or \
                     enable create_bucket",
                    self.inner.slot_bucket
                ),
            )
            .during(op, name)
            .at_server(self.server().to_owned())
        })
    }

    /// Reads `name`'s slot record: one direct get in the slot bucket.
    async fn read_slot(&self, op: Operation, name: &str, key: &str) -> Result<Slot> {
        let kv = self.slot_kv(op, name)?;
        match self.read_in(kv, op, name, key, SlotValue::decode).await? {
            Seen::Absent => Ok(Slot {
                revision: 0,
                value: None,
            }),
            Seen::Marker { revision } => Ok(Slot {
                revision,
                value: None,
            }),
            Seen::Live {
                record, revision, ..
            } => Ok(Slot {
                revision,
                value: Some(record),
            }),
            Seen::Foreign { .. } => Err(self.site_in(op, name, &kv.name).foreign_value(key)),
        }
    }

    /// Writes `value` over `name`'s slot record if its revision is still `expected` (one
    /// publish with `Nats-Expected-Last-Subject-Sequence`): the new revision, or `None` when
    /// the record changed since it was read.
    ///
    /// A write whose answer was lost (`Timeout`, `Unavailable`) is read back, never sent again
    /// blindly: when the record carries this write's token, it landed; when the record moved
    /// on under another write, this one can never land (the revision it expects is gone); only
    /// when the record is still at `expected` is the very same compare-and-set sent once more —
    /// of it and the lost one at most one can land, and the answer (or one more read) says
    /// whether one did. When the read-back fails too, the first error is returned: the outcome
    /// is unknown.
    async fn put_slot(
        &self,
        op: Operation,
        name: &str,
        key: &str,
        expected: u64,
        value: &SlotValue,
    ) -> Result<Option<u64>> {
        let kv = self.slot_kv(op, name)?;
        let bytes = value.encode();
        let ours = |slot: &Slot| {
            slot.value
                .as_ref()
                .is_some_and(|v| v.write == value.write)
                .then_some(slot.revision)
        };
        let lost = match self
            .write_in(kv, op, name, key, bytes.clone(), expected)
            .await
        {
            Err(e) if outcome_unknown(&e) => e,
            other => return other,
        };
        let Ok(seen) = self.read_slot(op, name, key).await else {
            return Err(lost);
        };
        if let Some(revision) = ours(&seen) {
            debug!(
                name,
                revision, "a slot write whose answer was lost had landed"
            );
            return Ok(Some(revision));
        }
        if seen.revision != expected {
            debug!(
                name,
                "a slot write whose answer was lost did not land; the record moved on"
            );
            return Ok(None);
        }
        debug!(
            name,
            expected, "a slot write whose answer was lost has not landed: the same write again"
        );
        match self.write_in(kv, op, name, key, bytes, expected).await? {
            Some(revision) => Ok(Some(revision)),
            // The lost write may have landed meanwhile: the record says.
            None => Ok(ours(&self.read_slot(op, name, key).await?)),
        }
    }

    /// Gives a job's lease back after a claim that did not take the instant: a purge through
    /// `term`, the lease's only message. A failure is left to the bucket's max age (the lease
    /// names no slot, so it is no term) and only logged.
    async fn give_back(&self, op: Operation, name: &str, key: &str, term: u64) {
        if let Err(e) = self.purge_lease(op, name, key, term).await {
            debug!(name, term, error = %e, "could not give a job's lease back; it expires with the bucket's max age");
        }
    }

    /// Reads the record again after a write that missed, while holding the job's lease of
    /// `term`; gives the lease back when the read fails.
    async fn read_again(&self, op: Operation, name: &str, key: &str, term: u64) -> Result<Slot> {
        match self.read_slot(op, name, key).await {
            Ok(slot) => Ok(slot),
            Err(e) => {
                self.give_back(op, name, key, term).await;
                Err(e)
            }
        }
    }

    /// Whether `name`'s slot record names `holder`'s lease of `term` (one direct get): a job's
    /// lease is a term only then.
    pub(crate) async fn slot_names(
        &self,
        op: Operation,
        name: &str,
        key: &str,
        holder: &HolderToken,
        term: u64,
    ) -> Result<bool> {
        let slot = self.read_slot(op, name, key).await?;
        Ok(slot
            .value
            .is_some_and(|v| v.term == term && v.holder == *holder))
    }

    /// The rest of a claim once the job's lease of `term` is created: the server's clock, then
    /// the record written. `Err` only when the record's write may have landed.
    async fn claim_created(
        &self,
        name: &str,
        key: &str,
        holder: &HolderToken,
        (term, sent_at): (u64, Instant),
        instant_ms: i64,
        mut slot: Slot,
    ) -> Result<SlotClaim> {
        const OP: Operation = Operation::ClaimSlot;
        // The server's clock: the timestamp it gave the lease's message. The record is written
        // after it, so an instant not later than it is not in the future when it is claimed.
        let now_ms = match self.read(OP, name, key).await {
            Ok(Seen::Live {
                record,
                revision,
                created_ns,
            }) if revision == term && record.holder == *holder => stamp_ms(created_ns),
            Ok(_) => {
                debug!(
                    name,
                    term, "the job's lease was gone before its claim was written"
                );
                self.forget_holder(name, holder);
                return Ok(SlotClaim::Held);
            }
            Err(e) => {
                self.give_back(OP, name, key, term).await;
                return Err(e);
            }
        };
        if instant_ms > now_ms {
            self.give_back(OP, name, key, term).await;
            return Ok(SlotClaim::Early { now_ms });
        }
        let write = HolderToken::mint();
        for _ in 0..MAX_TRIES {
            if let Some(last_ms) = slot.last_ms().filter(|last| instant_ms <= *last) {
                self.give_back(OP, name, key, term).await;
                return Ok(SlotClaim::Taken { last_ms });
            }
            let previous = slot.value.as_ref();
            let value = SlotValue {
                last_ms: Some(instant_ms),
                unfinished_ms: Some(instant_ms),
                rerun_ms: previous.and_then(|v| v.rerun_ms),
                term,
                holder: holder.clone(),
                write: write.clone(),
            };
            let superseded_ms = previous.and_then(|v| v.unfinished_ms);
            if self
                .put_slot(OP, name, key, slot.revision, &value)
                .await?
                .is_some()
            {
                debug!(name, term, instant_ms, "slot claimed");
                return Ok(SlotClaim::Claimed {
                    grant: Grant {
                        term,
                        expires_in: self.left_since(sent_at),
                    },
                    superseded_ms,
                });
            }
            // Another write came first (a late finish, or a claim whose lease had expired):
            // decide again on the record as it is now.
            slot = self.read_again(OP, name, key, term).await?;
        }
        self.give_back(OP, name, key, term).await;
        Err(self.racing(OP, name))
    }
}

/// Scheduler slots: the record in the slot bucket, the lease in the lease bucket. Round trips
/// (see the crate docs, *Scheduler slots*): `claim_slot` 4 when claimed, 1 when taken, 2 when
/// held, 4 when early; `finish_slot` 3 (2 more when `passed` needs a fresher server clock);
/// `unfinished` one pipelined burst of two direct gets per name; `claim_rerun` 3; `last_slot` 1.
#[async_trait]
impl SlotStore for NatsStore {
    async fn claim_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: std::time::Duration,
        instant_ms: i64,
    ) -> Result<SlotClaim> {
        check::claim(self, name, instance, ttl)?;
        const OP: Operation = Operation::ClaimSlot;
        let key = encode_key(name);
        let slot = self.read_slot(OP, name, &key).await?;
        if let Some(last_ms) = slot.last_ms().filter(|last| instant_ms <= *last) {
            return Ok(SlotClaim::Taken { last_ms });
        }
        let Some(created) = self
            .create_lease(OP, name, &key, holder, instance, true)
            .await?
        else {
            return Ok(SlotClaim::Held);
        };
        self.claim_created(name, &key, holder, created, instant_ms, slot)
            .await
    }

    async fn finish_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instant_ms: i64,
        passed_ms: Option<i64>,
    ) -> Result<SlotFinish> {
        check::name(self, name)?;
        const OP: Operation = Operation::FinishSlot;
        let key = encode_key(name);
        self.slot_kv(OP, name)?;
        let write = HolderToken::mint();
        for _ in 0..MAX_TRIES {
            let (lease, slot) =
                futures::join!(self.read(OP, name, &key), self.read_slot(OP, name, &key));
            let (lease, slot) = (lease?, slot?);
            let Some(value) = slot.value.clone() else {
                return Ok(SlotFinish::default());
            };
            // Held: the holder's live lease, and the one the record names.
            let mut held = match lease {
                Seen::Live {
                    record,
                    revision,
                    created_ns,
                } if record.holder == *holder
                    && value.holder == *holder
                    && record.term_at(revision) == value.term =>
                {
                    Some((record, revision, created_ns))
                }
                _ => None,
            };
            let mut out = SlotFinish::default();
            let mut next = value.clone();
            if value.last_ms == Some(instant_ms) {
                out.recorded = true;
                if value.unfinished_ms == Some(instant_ms) {
                    next.unfinished_ms = None;
                }
                let passed = passed_ms.filter(|p| *p > instant_ms);
                if let (Some(passed), Some((record, revision, created_ns))) = (passed, held.clone())
                {
                    // `passed` must not be in the future by the server's clock. The lease's last
                    // message is stamped no later than now; when `passed` is later than that
                    // stamp, the lease is renewed (which also proves it still held) and its new
                    // stamp read.
                    let mut now_ms = stamp_ms(created_ns);
                    if passed > now_ms {
                        let renewal = Record {
                            term: value.term,
                            ..record
                        };
                        held = self
                            .restamp(OP, name, &key, &renewal, revision)
                            .await?
                            .map(|(revision, created_ns)| (renewal, revision, created_ns));
                        now_ms = held.as_ref().map_or(i64::MIN, |h| stamp_ms(h.2));
                    }
                    if passed <= now_ms {
                        next.last_ms = Some(passed);
                        out.passed_taken = true;
                    }
                }
            }
            if next != value {
                next.write = write.clone();
                if self
                    .put_slot(OP, name, &key, slot.revision, &next)
                    .await?
                    .is_none()
                {
                    debug!(
                        name,
                        instant_ms, "the slot record changed under a finish; reading it again"
                    );
                    continue;
                }
            }
            if let Some((_, revision, _)) = held {
                out.released = self.purge_lease(OP, name, &key, revision).await?
                    || self.release(name, holder).await?;
            }
            return Ok(out);
        }
        Err(self.racing(OP, name))
    }

    async fn unfinished(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
        if check::unfinished(self, names)? == Batch::Empty {
            return Ok(Vec::new());
        }
        const OP: Operation = Operation::Unfinished;
        self.slot_kv(OP, "")?;
        let items: Vec<(&str, String)> =
            names.iter().map(|n| (n.as_str(), encode_key(n))).collect();
        let seen = pipelined(&items, |(name, key)| async move {
            futures::join!(self.read(OP, name, key), self.read_slot(OP, name, key))
        })
        .await;
        let mut out = Vec::new();
        for (name, (lease, slot)) in names.iter().zip(seen) {
            let (lease, slot) = (lease?, slot?);
            let Some(u) = slot.value.as_ref().and_then(|v| v.unfinished_ms) else {
                continue;
            };
            // Free: no lease message (a delete marker counts as free, as for a claim).
            let free = matches!(lease, Seen::Absent | Seen::Marker { .. });
            if free && slot.rerun_of(u).is_some() {
                out.push((name.clone(), u));
            }
        }
        Ok(out)
    }

    async fn claim_rerun(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: std::time::Duration,
        instant_ms: i64,
    ) -> Result<Option<Grant>> {
        check::claim(self, name, instance, ttl)?;
        const OP: Operation = Operation::ClaimRerun;
        let key = encode_key(name);
        let slot = self.read_slot(OP, name, &key).await?;
        if slot.rerun_of(instant_ms).is_none() {
            return Ok(None);
        }
        let Some(created) = self
            .create_lease(OP, name, &key, holder, instance, true)
            .await?
        else {
            return Ok(None);
        };
        self.rerun_created(name, &key, holder, created, instant_ms, slot)
            .await
    }

    async fn last_slot(&self, name: &str) -> Result<Option<SlotRecord>> {
        check::name(self, name)?;
        let key = encode_key(name);
        let slot = self.read_slot(Operation::LastSlot, name, &key).await?;
        Ok(slot.value.map(|v| v.instants()))
    }
}

impl NatsStore {
    /// The rest of a rerun claim once the job's lease of `term` is created: the record written
    /// (`rerun` = the instant, this lease's term) while the instant is still eligible. `Err`
    /// only when the record's write may have landed.
    async fn rerun_created(
        &self,
        name: &str,
        key: &str,
        holder: &HolderToken,
        (term, sent_at): (u64, Instant),
        instant_ms: i64,
        mut slot: Slot,
    ) -> Result<Option<Grant>> {
        const OP: Operation = Operation::ClaimRerun;
        let write = HolderToken::mint();
        for _ in 0..MAX_TRIES {
            let Some(value) = slot.rerun_of(instant_ms).cloned() else {
                self.give_back(OP, name, key, term).await;
                return Ok(None);
            };
            let value = SlotValue {
                rerun_ms: Some(instant_ms),
                term,
                holder: holder.clone(),
                write: write.clone(),
                ..value
            };
            if self
                .put_slot(OP, name, key, slot.revision, &value)
                .await?
                .is_some()
            {
                debug!(name, term, instant_ms, "rerun claimed");
                return Ok(Some(Grant {
                    term,
                    expires_in: self.left_since(sent_at),
                }));
            }
            slot = self.read_again(OP, name, key, term).await?;
        }
        self.give_back(OP, name, key, term).await;
        Err(self.racing(OP, name))
    }
}

#[cfg(test)]
mod tests {
    //! Interleavings the conformance suite cannot force: a claimer that read the record, then
    //! lost the race while it waited, writes only by compare-and-set. On the real server
    //! (`LEASE_TEST_NATS_URL`), through the claim's own steps.

    use std::time::Duration;

    use lease_conformance::env;

    use super::*;
    use crate::NatsConfig;

    const TTL: Duration = Duration::from_millis(800);

    async fn store(what: &str) -> Option<(NatsStore, async_nats::jetstream::Context)> {
        let url = env::server_url("nats")?;
        let bucket = format!("lease_test_{what}_{:08x}", rand::random::<u32>());
        let store = match NatsStore::connect(&url, NatsConfig::new(TTL).bucket(&bucket)).await {
            Ok(s) => s,
            Err(e) => {
                env::skip("nats", &format!("cannot open a store at {url}: {e}"));
                return None;
            }
        };
        let js = async_nats::jetstream::new(async_nats::connect(&url).await.unwrap());
        Some((store, js))
    }

    async fn drop_buckets(store: &NatsStore, js: &async_nats::jetstream::Context) {
        let _ = js.delete_stream(format!("KV_{}", store.bucket())).await;
        let _ = js
            .delete_stream(format!("KV_{}", store.slot_bucket()))
            .await;
    }

    async fn now_ms(store: &NatsStore) -> i64 {
        match store
            .claim_slot("probe", &HolderToken::mint(), "p", TTL, i64::MAX / 4)
            .await
            .unwrap()
        {
            SlotClaim::Early { now_ms } => now_ms,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_claim_that_read_before_another_claim_ran_is_taken_not_claimed() {
        let Some((store, js)) = store("stale_claim").await else {
            return;
        };
        let at = now_ms(&store).await - 5_000;
        let key = encode_key("job");
        // R reads the record, then waits; W claims the instant and finishes (lease free again).
        let stale = store
            .read_slot(Operation::ClaimSlot, "job", &key)
            .await
            .unwrap();
        let w = HolderToken::mint();
        assert!(matches!(
            store.claim_slot("job", &w, "w", TTL, at).await.unwrap(),
            SlotClaim::Claimed { .. }
        ));
        assert!(
            store
                .finish_slot("job", &w, at, None)
                .await
                .unwrap()
                .recorded
        );
        // R goes on: its lease create succeeds (the name is free), its record write expects
        // the revision it read, which is gone.
        let r = HolderToken::mint();
        let created = store
            .create_lease(Operation::ClaimSlot, "job", &key, &r, "r", true)
            .await
            .unwrap()
            .expect("the name is free");
        let answer = store
            .claim_created("job", &key, &r, created, at, stale)
            .await
            .unwrap();
        assert_eq!(
            answer,
            SlotClaim::Taken { last_ms: at },
            "an instant was claimed twice"
        );
        assert_eq!(
            store.get("job").await.unwrap(),
            None,
            "R gave its lease back"
        );
        drop_buckets(&store, &js).await;
    }

    #[tokio::test]
    async fn a_rerun_that_read_before_another_rerun_ran_gets_nothing() {
        let Some((store, js)) = store("stale_rerun").await else {
            return;
        };
        let at = now_ms(&store).await - 5_000;
        let key = encode_key("job");
        let a = HolderToken::mint();
        store.claim_slot("job", &a, "a", TTL, at).await.unwrap();
        store.force_release("job").await.unwrap(); // cut short
        let stale = store
            .read_slot(Operation::ClaimRerun, "job", &key)
            .await
            .unwrap();
        assert!(stale.rerun_of(at).is_some());
        let w = HolderToken::mint();
        assert!(
            store
                .claim_rerun("job", &w, "w", TTL, at)
                .await
                .unwrap()
                .is_some()
        );
        store.force_release("job").await.unwrap(); // the rerun is cut short too
        let r = HolderToken::mint();
        let created = store
            .create_lease(Operation::ClaimRerun, "job", &key, &r, "r", true)
            .await
            .unwrap()
            .expect("the name is free");
        let answer = store
            .rerun_created("job", &key, &r, created, at, stale)
            .await
            .unwrap();
        assert_eq!(answer, None, "an instant was rerun twice");
        let rec = store.last_slot("job").await.unwrap().unwrap();
        assert_eq!((rec.unfinished_ms, rec.rerun_ms), (Some(at), Some(at)));
        drop_buckets(&store, &js).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_whose_answer_was_lost_is_read_back_by_its_token() {
        let Some((direct, js)) = store("lost_answer").await else {
            return;
        };
        // A store whose connection goes through a proxy that can hold every byte back.
        let proxy = std::sync::Arc::new(
            lease_conformance::FaultProxy::start(direct.server().to_owned())
                .await
                .unwrap(),
        );
        let bound = Duration::from_millis(1_000);
        let config = NatsConfig::new(TTL)
            .bucket(direct.bucket())
            .op_timeout(bound);
        let via = NatsStore::connect(&format!("nats://{}", proxy.local_addr()), config)
            .await
            .unwrap();
        let key = encode_key("job");
        via.last_slot("job").await.unwrap(); // a warm connection
        let value = SlotValue {
            last_ms: Some(1),
            unfinished_ms: Some(1),
            rerun_ms: None,
            term: 7,
            holder: HolderToken::mint(),
            write: HolderToken::mint(),
        };
        // The write is held back past its bound (its answer is lost), and so is the read-back
        // sent after it; the bytes flow again before the read-back's bound: the write lands,
        // and the read-back finds its token.
        proxy.set_mode(lease_conformance::FaultMode::Stall);
        let release = {
            let proxy = proxy.clone();
            tokio::spawn(async move {
                tokio::time::sleep(bound + bound / 2).await;
                proxy.set_mode(lease_conformance::FaultMode::Pass);
            })
        };
        let written = via
            .put_slot(Operation::ClaimSlot, "job", &key, 0, &value)
            .await
            .unwrap();
        release.await.unwrap();
        let seen = direct
            .read_slot(Operation::ClaimSlot, "job", &key)
            .await
            .unwrap();
        assert_eq!(seen.value, Some(value.clone()));
        assert_eq!(
            written,
            Some(seen.revision),
            "the landed write was not recognised"
        );
        // The same write once more is not taken for this one: it misses.
        assert_eq!(
            direct
                .put_slot(Operation::ClaimSlot, "job", &key, 0, &value)
                .await
                .unwrap(),
            None
        );
        drop_buckets(&direct, &js).await;
    }
}
