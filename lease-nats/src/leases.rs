//! [`LeaseStore`] on the bucket: one key per lease name, compare-and-set on the key's revision,
//! and the memory of this store object's own last writes that spares renew and release a read.

use std::sync::MutexGuard;
use std::time::{Duration, Instant};

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
use tracing::debug;

use crate::known_writes::{Known, KnownLeases};
use crate::store::{MAX_TRIES, NatsStore, Seen, pipelined};
use crate::wire::codec::Record;
use crate::wire::keys::{MAX_NAME_BYTES, encode_key};

/// How many recent lease writes a store remembers before it first drops those older than a
/// lease (see [`Recent`](crate::known_writes::Recent) and "Round trips" in the crate docs).
pub(crate) const KNOWN_FLOOR: usize = 4096;

impl NatsStore {
    /// Reads the key of `name`: one direct get.
    pub(crate) async fn read(&self, op: Operation, name: &str, key: &str) -> Result<Seen> {
        self.read_as(op, name, key, Record::decode).await
    }

    /// The live lease `holder` has on `name`: (revision, term, instance, job).
    async fn read_own(
        &self,
        op: Operation,
        name: &str,
        key: &str,
        holder: &HolderToken,
    ) -> Result<Option<(u64, u64, String, bool)>> {
        Ok(match self.read(op, name, key).await? {
            Seen::Live {
                record, revision, ..
            } if record.holder == *holder => Some((
                revision,
                record.term_at(revision),
                record.instance,
                record.job,
            )),
            _ => None,
        })
    }

    /// Creates the key of a free `name` for `holder` (one publish that expects no message on
    /// the key): its term (the message's stream sequence) and when it was sent, or `None` when
    /// the name is held. `job` marks a lease claimed for a scheduler slot.
    pub(crate) async fn create_lease(
        &self,
        op: Operation,
        name: &str,
        key: &str,
        holder: &HolderToken,
        instance: &str,
        job: bool,
    ) -> Result<Option<(u64, Instant)>> {
        let record = Record {
            holder: holder.clone(),
            term: 0,
            instance: instance.to_owned(),
            job,
        };
        let sent_at = Instant::now();
        let Some(revision) = self.write(op, name, key, record.encode(), 0).await? else {
            return Ok(None);
        };
        self.remember(
            name,
            Known {
                holder: holder.clone(),
                revision,
                term: revision,
                instance: record.instance,
                job,
                sent_at,
            },
        );
        Ok(Some((revision, sent_at)))
    }

    /// Rewrites `holder`'s live lease on `name` at `revision` (a renewal: a compare-and-set
    /// that fails once the lease changed or expired), then reads it back for the server's
    /// timestamp of the new message: `(revision, ns since the Unix epoch)`, or `None` when the
    /// lease is no longer `holder`'s. Two round trips.
    pub(crate) async fn restamp(
        &self,
        op: Operation,
        name: &str,
        key: &str,
        record: &Record,
        revision: u64,
    ) -> Result<Option<(u64, i128)>> {
        let sent_at = Instant::now();
        let Some(new) = self.write(op, name, key, record.encode(), revision).await? else {
            return Ok(None);
        };
        self.remember(
            name,
            Known {
                holder: record.holder.clone(),
                revision: new,
                term: record.term,
                instance: record.instance.clone(),
                job: record.job,
                sent_at,
            },
        );
        Ok(match self.read(op, name, key).await? {
            Seen::Live {
                record: r,
                revision,
                created_ns,
            } if revision == new && r.holder == record.holder => Some((new, created_ns)),
            _ => None,
        })
    }

    /// Removes `name`'s key if `revision` is still its last message (a purge limited to the
    /// key and the revision), and forgets this store's write: `true` when removed.
    pub(crate) async fn purge_lease(
        &self,
        op: Operation,
        name: &str,
        key: &str,
        revision: u64,
    ) -> Result<bool> {
        let purged = self.purge_through(op, name, key, revision).await?;
        if purged {
            self.forget(name);
        }
        Ok(purged)
    }

    fn known_map(&self) -> MutexGuard<'_, KnownLeases> {
        self.inner.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn known(&self, name: &str) -> Option<Known> {
        self.known_map().get(name).cloned()
    }

    fn remember(&self, name: &str, known: Known) {
        let ttl = self.inner.ttl;
        self.known_map().remember(name.to_owned(), known, ttl);
    }

    pub(crate) fn forget(&self, name: &str) {
        self.known_map().remove(name);
    }

    pub(crate) fn forget_holder(&self, name: &str, holder: &HolderToken) {
        let mut map = self.known_map();
        if map.get(name).is_some_and(|k| k.holder == *holder) {
            map.remove(name);
        }
    }

    /// Time left on a message read back: by the monotonic clock when this store wrote it,
    /// otherwise an estimate from the server's timestamp and this host's wall clock.
    fn left_of(&self, name: &str, revision: u64, created_ns: i128) -> Duration {
        if let Some(k) = self.known(name).filter(|k| k.revision == revision) {
            return self.left_since(k.sent_at);
        }
        self.estimate_left(created_ns)
    }
}

#[async_trait]
impl LeaseStore for NatsStore {
    fn backend(&self) -> &'static str {
        "nats"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            expiry: true,
            // The term is the stream sequence of the claim: strictly increasing, with gaps.
            consecutive_terms: false,
            // The server removes an expired entry, and release purges it.
            keeps_ended_records: false,
            verify_in_transaction: false,
            // A KV watch and the release subject (see the crate docs, *Hints*).
            watch: true,
            force_release: true,
            list_names: true,
            // A key per permit (see the crate docs, *Counted leases*).
            max_name_bytes: MAX_NAME_BYTES,
            // No multi-key operation: one compare-and-set per partition, all sent before any
            // answer is awaited.
            batch_renew: BatchRenew::Pipelined,
            // `renew_many`: likewise, one compare-and-set per name, all sent before any answer
            // is awaited (bursts of 1,000).
            renew_many: true,
            fixed_ttl: Some(self.inner.ttl),
            // Counted leases, partitions, membership and slots: derived from the accessors.
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

    /// Checks that the bucket answers and can still carry this store's leases (one message
    /// per key, purge allowed, the max age this store runs with), and that the slot bucket, when
    /// there is one, can still keep slot records (no max age). One stream-info request per
    /// bucket, sent together.
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
        let key = encode_key(name);
        let Some((revision, sent_at)) = self
            .create_lease(Operation::Claim, name, &key, holder, instance, false)
            .await?
        else {
            return Ok(None);
        };
        debug!(name, term = revision, "claimed");
        Ok(Some(Grant {
            term: revision,
            expires_in: self.left_since(sent_at),
        }))
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::renew(self, name, ttl)?;
        let key = encode_key(name);
        let mut target = self
            .known(name)
            .filter(|k| k.holder == *holder)
            .map(|k| (k.revision, k.term, k.instance, k.job));
        for _ in 0..MAX_TRIES {
            let (revision, term, instance, job) = match target.take() {
                Some(t) => t,
                None => match self.read_own(Operation::Renew, name, &key, holder).await? {
                    Some(t) => t,
                    None => {
                        self.forget_holder(name, holder);
                        return Ok(None);
                    }
                },
            };
            let record = Record {
                holder: holder.clone(),
                term,
                instance,
                job,
            };
            let sent_at = Instant::now();
            if let Some(new) = self
                .write(Operation::Renew, name, &key, record.encode(), revision)
                .await?
            {
                self.remember(
                    name,
                    Known {
                        holder: holder.clone(),
                        revision: new,
                        term,
                        instance: record.instance,
                        job,
                        sent_at,
                    },
                );
                return Ok(Some(Grant {
                    term,
                    expires_in: self.left_since(sent_at),
                }));
            }
            debug!(
                name,
                revision, "renewal found the key changed; reading it again"
            );
        }
        Err(self.racing(Operation::Renew, name))
    }

    /// Each item as [`renew`](LeaseStore::renew) renews it — a compare-and-set on the key's
    /// revision, so a lease that changed hands, expired or was released is never renewed — but
    /// pipelined: the direct gets of the names this store object did not write last are all
    /// sent before any answer is awaited, then the compare-and-sets likewise (bursts of at most
    /// 1,000 requests, one after the other). One burst of writes when this store object made
    /// each lease's last write (a coordinator's renewals), reads first otherwise; a key that
    /// changed between the read and the write is read and written again, at most three times
    /// in all, then answered with an error. Each item gets its own answer: its term, `None`
    /// when the key is not live under its holder, or the error of its own request.
    async fn renew_many(
        &self,
        items: &[RenewItem<'_>],
        ttl: Duration,
    ) -> Result<Vec<Result<Option<Grant>>>> {
        if check::renew_many(self, items, ttl)? == check::Batch::Empty {
            return Ok(Vec::new());
        }
        const OP: Operation = Operation::RenewMany;
        let keys: Vec<String> = items.iter().map(|i| encode_key(i.name)).collect();
        let mut answers: Vec<Option<Result<Option<Grant>>>> =
            std::iter::repeat_with(|| None).take(items.len()).collect();
        // Each item's (revision, term, instance, job) to compare-and-set against, when known.
        let mut targets: Vec<Option<(u64, u64, String, bool)>> = items
            .iter()
            .map(|i| {
                self.known(i.name)
                    .filter(|k| k.holder == *i.holder)
                    .map(|k| (k.revision, k.term, k.instance, k.job))
            })
            .collect();
        for _ in 0..MAX_TRIES {
            // Read, pipelined, what this store does not know.
            let unknown: Vec<usize> = (0..items.len())
                .filter(|&i| answers[i].is_none() && targets[i].is_none())
                .collect();
            let seen = pipelined(&unknown, |&i| {
                self.read_own(OP, items[i].name, &keys[i], items[i].holder)
            })
            .await;
            for (&i, s) in unknown.iter().zip(seen) {
                match s {
                    Ok(Some(t)) => targets[i] = Some(t),
                    Ok(None) => {
                        self.forget_holder(items[i].name, items[i].holder);
                        answers[i] = Some(Ok(None));
                    }
                    Err(e) => answers[i] = Some(Err(e)),
                }
            }
            // Write, pipelined: each a compare-and-set on the revision read or remembered.
            let jobs: Vec<(usize, u64, Record)> = (0..items.len())
                .filter(|&i| answers[i].is_none())
                .filter_map(|i| {
                    let (revision, term, instance, job) = targets[i].take()?;
                    let record = Record {
                        holder: items[i].holder.clone(),
                        term,
                        instance,
                        job,
                    };
                    Some((i, revision, record))
                })
                .collect();
            if jobs.is_empty() {
                break;
            }
            let sent_at = Instant::now();
            let written = pipelined(&jobs, |(i, revision, record)| {
                self.write(OP, items[*i].name, &keys[*i], record.encode(), *revision)
            })
            .await;
            for ((i, revision, record), w) in jobs.into_iter().zip(written) {
                match w {
                    Ok(Some(new)) => {
                        let term = record.term;
                        self.remember(
                            items[i].name,
                            Known {
                                holder: record.holder,
                                revision: new,
                                term,
                                instance: record.instance,
                                job: record.job,
                                sent_at,
                            },
                        );
                        answers[i] = Some(Ok(Some(Grant {
                            term,
                            expires_in: self.left_since(sent_at),
                        })));
                    }
                    // The key changed since it was read or written: read it again.
                    Ok(None) => debug!(
                        name = items[i].name,
                        revision, "renewal found the key changed; reading it again"
                    ),
                    Err(e) => answers[i] = Some(Err(e)),
                }
            }
        }
        Ok(answers
            .into_iter()
            .zip(items)
            .map(|(a, item)| a.unwrap_or_else(|| Err(self.racing(OP, item.name))))
            .collect())
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        check::name(self, name)?;
        let key = encode_key(name);
        let mut target = self
            .known(name)
            .filter(|k| k.holder == *holder)
            .map(|k| k.revision);
        for _ in 0..MAX_TRIES {
            let revision = match target.take() {
                Some(r) => r,
                None => match self
                    .read_own(Operation::Release, name, &key, holder)
                    .await?
                {
                    Some((r, ..)) => r,
                    None => {
                        self.forget_holder(name, holder);
                        return Ok(false);
                    }
                },
            };
            if self
                .purge_through(Operation::Release, name, &key, revision)
                .await?
            {
                self.forget(name);
                return Ok(true);
            }
        }
        Err(self.racing(Operation::Release, name))
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        check::name(self, name)?;
        let key = encode_key(name);
        Ok(match self.read(Operation::Verify, name, &key).await? {
            Seen::Live {
                record,
                revision,
                created_ns,
            } if record.holder == *holder => {
                let term = record.term_at(revision);
                // A job's lease is a term only once the slot record names it (crate docs,
                // *Scheduler slots*): one more read.
                if record.job
                    && !self
                        .slot_names(Operation::Verify, name, &key, holder, term)
                        .await?
                {
                    return Ok(None);
                }
                Some(Grant {
                    term,
                    expires_in: self.left_of(name, revision, created_ns),
                })
            }
            _ => None,
        })
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        check::name(self, name)?;
        let key = encode_key(name);
        match self.read(Operation::Get, name, &key).await? {
            Seen::Absent | Seen::Marker { .. } => Ok(None),
            Seen::Foreign { .. } => Err(self.site(Operation::Get, name).foreign_value(&key)),
            Seen::Live {
                record,
                revision,
                created_ns,
            } => Ok(Some(LeaseInfo {
                name: name.to_owned(),
                term: record.term_at(revision),
                instance: record.instance,
                live: true,
                expires_in: self.left_of(name, revision, created_ns),
            })),
        }
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        check::name(self, name)?;
        let key = encode_key(name);
        for _ in 0..MAX_TRIES {
            let (revision, live) = match self.read(Operation::ForceRelease, name, &key).await? {
                Seen::Absent => {
                    self.forget(name);
                    return Ok(false);
                }
                Seen::Live { revision, .. } | Seen::Foreign { revision } => (revision, true),
                Seen::Marker { revision } => (revision, false),
            };
            if self
                .purge_through(Operation::ForceRelease, name, &key, revision)
                .await?
            {
                self.forget(name);
                return Ok(live);
            }
        }
        Err(self.racing(Operation::ForceRelease, name))
    }

    /// Two `STREAM.INFO` requests with a subject filter (see `wire::keys::NAME_FILTERS`): the
    /// lease keys (`*`) and the permit keys (`permit.*.*`), sent together. A subject filter
    /// matches whole tokens and a name is one escaped token, so the server cannot narrow them to
    /// the prefix: every key of the kind is listed, decoded, and compared with the prefix byte
    /// for byte (no character of the prefix is special). A key has a message only while its
    /// record is live (release purges it, the bucket's max age removes an expired one), so only
    /// held names show.
    async fn names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<lease_core::backend::names::NamePage> {
        use lease_core::backend::names::{self, ListedName, NamePage};
        check::names(self, prefix, after, limit)?;
        let [(leases_at, leases), (permits_at, permits)] = crate::wire::keys::NAME_FILTERS;
        let (lease_keys, permit_keys) = futures::try_join!(
            self.list_matching(Operation::Names, prefix, leases_at, leases),
            self.list_matching(Operation::Names, prefix, permits_at, permits),
        )?;
        let listed = |at: &'static str| {
            move |key: &String| {
                let (name, counted) = crate::wire::keys::listed_name(at, key)?;
                names::in_range(&name, prefix, after).then_some(ListedName {
                    name,
                    lease: !counted,
                    counted,
                })
            }
        };
        let found = lease_keys
            .iter()
            .filter_map(listed(leases_at))
            .chain(permit_keys.iter().filter_map(listed(permits_at)));
        Ok(NamePage::from_found(found, limit))
    }

    /// Hints from the bucket's KV watch and the release subject (see the crate docs,
    /// *Hints*): claims and releases by any store on the bucket; renewals and expiries wake
    /// nobody.
    fn changes(
        &self,
        topic: &lease_core::backend::notify::Topic,
    ) -> Option<lease_core::backend::notify::Wakeups> {
        Some(self.inner.hub.subscribe(topic))
    }
}
