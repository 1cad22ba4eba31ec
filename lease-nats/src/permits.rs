//! Counted leases on the lease bucket (see [`lease_core::backend::permits`] for the rules): one key
//! per permit, `permit.<name escaped>.<index>`, apart from the name's lease key, its value a lease
//! record (`lease1;<holder>;<term>;<instance>`), expired by the bucket's max age like a lease. The
//! term is the stream sequence of the message that created the permit, so terms strictly increase
//! per name across all its permits (and across the bucket), and a renewal copies it into the value.
//! Every change is a compare-and-set on one key's revision. See the crate docs, *Counted leases*,
//! for the round trips.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use lease_core::backend::async_trait;
use lease_core::backend::{Grant, HolderToken, check};
use lease_core::layer::Operation;
use lease_core::{
    Result,
    backend::permits::{PermitGrant, PermitInfo, PermitStore},
};
use tracing::debug;

use crate::store::{MAX_TRIES, NatsStore, Seen, pipelined};
use crate::wire::codec::Record;
use crate::wire::keys::{decode_partition, permit_key, permit_prefix};

/// A permit key read back: its index and what it held.
type Scanned = (u32, Seen);

impl NatsStore {
    /// Every permit key of `name`: one `STREAM.INFO` request with a subject filter lists them,
    /// then pipelined direct gets read them (no second burst when the name has none). A key of
    /// another form, or a value this store did not write, is an error.
    async fn scan_permits(&self, op: Operation, name: &str) -> Result<Vec<Scanned>> {
        let permits = self.list_permits(op, name).await?;
        self.read_permits(op, name, &permits).await
    }

    /// The permit keys of `name`, by index: one `STREAM.INFO` request with a subject filter
    /// (answered by the stream's leader).
    async fn list_permits(&self, op: Operation, name: &str) -> Result<Vec<u32>> {
        let prefix = permit_prefix(name);
        let keys = self.list_keys(op, name, &prefix).await?;
        let mut permits = Vec::with_capacity(keys.len());
        for suffix in &keys {
            match decode_partition(suffix) {
                Some(p) => permits.push(p),
                None => return Err(self.foreign_key(op, name, &format!("{prefix}{suffix}"))),
            }
        }
        Ok(permits)
    }

    /// The permit keys `permits` of `name` read, pipelined.
    async fn read_permits(
        &self,
        op: Operation,
        name: &str,
        permits: &[u32],
    ) -> Result<Vec<Scanned>> {
        let keys: Vec<String> = permits.iter().map(|&p| permit_key(name, p)).collect();
        let seen = pipelined(&keys, |key| self.read(op, name, key)).await;
        let mut out = Vec::with_capacity(permits.len());
        for (&p, s) in permits.iter().zip(seen) {
            match s? {
                Seen::Foreign { .. } => {
                    return Err(self.foreign_key(op, name, &permit_key(name, p)));
                }
                s => out.push((p, s)),
            }
        }
        Ok(out)
    }

    /// After the create of permit `own` for a claim with count `permits`: whether `permits` or
    /// more *other* permits are live, so that the claim must not be granted. The scan before
    /// the create counted them, but a claim with a larger count may have created a permit at
    /// or above `permits` since (the keys below `permits` have one holder each, so only those
    /// above can make the count too many): one listing, then — only when the name has a key at
    /// or above `permits` — the reads of the others.
    async fn outnumbered(&self, name: &str, permits: u32, own: u32) -> Result<bool> {
        const OP: Operation = Operation::ClaimPermit;
        let listed = self.list_permits(OP, name).await?;
        if listed.iter().all(|&p| p < permits) {
            return Ok(false);
        }
        let others: Vec<u32> = listed.into_iter().filter(|&p| p != own).collect();
        let live = self
            .read_permits(OP, name, &others)
            .await?
            .iter()
            .filter(|(_, seen)| matches!(seen, Seen::Live { .. }))
            .count();
        Ok(live >= usize::try_from(permits).unwrap_or(usize::MAX))
    }
}

#[async_trait]
impl PermitStore for NatsStore {
    /// [`PermitStore::claim_permit`](lease_core::backend::permits::PermitStore::claim_permit): a
    /// scan, then a create of the lowest free permit below `permits`; a create that finds the key
    /// taken counts that permit live and tries the next free one, so one scan bounds the claim.
    /// After the create, a re-count (`outnumbered`): a claim with a larger count may have created a
    /// permit at or above `permits` since the scan, and then the permit is taken back and the claim
    /// answers full.
    async fn claim_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: std::time::Duration,
    ) -> Result<Option<PermitGrant>> {
        const OP: Operation = Operation::ClaimPermit;
        check::claim_permit(self, name, permits, instance, ttl)?;
        let claiming = async {
            let mut live = BTreeSet::new();
            // The revision a free permit's key must still have: a marker another tool left.
            let mut markers = BTreeMap::new();
            for (p, seen) in self.scan_permits(OP, name).await? {
                match seen {
                    Seen::Live { record, .. } if record.holder == *holder => return Ok(None),
                    Seen::Live { .. } => {
                        live.insert(p);
                    }
                    Seen::Marker { revision } => {
                        markers.insert(p, revision);
                    }
                    Seen::Absent | Seen::Foreign { .. } => {}
                }
            }
            // Each create lost to a racing claim is one more live permit: try at most as many
            // free permits as N leaves room for.
            let room = usize::try_from(permits)
                .unwrap_or(usize::MAX)
                .saturating_sub(live.len());
            let record = Record {
                holder: holder.clone(),
                term: 0,
                instance: instance.to_owned(),
                job: false,
            }
            .encode();
            for p in (0..permits).filter(|p| !live.contains(p)).take(room) {
                let key = permit_key(name, p);
                let expected = markers.get(&p).copied().unwrap_or(0);
                let sent_at = Instant::now();
                if let Some(revision) = self.write(OP, name, &key, record.clone(), expected).await?
                {
                    match self.outnumbered(name, permits, p).await {
                        Ok(false) => {}
                        checked => {
                            // Not granted: the permit is taken back before the answer. A
                            // purge that fails answers full, and the permit expires at its
                            // TTL under a token nobody uses. A claim cut short here (by the
                            // operation timeout, or by its caller's) has an unknown outcome
                            // and is read back: `read_back_permit` counts again and adopts
                            // only through an update at the revision it read, so a purge
                            // still on its way either removed the permit first (nothing to
                            // adopt) or finds its message superseded.
                            let undone = self.purge_through(OP, name, &key, revision).await;
                            debug!(
                                name,
                                permit = p,
                                term = revision,
                                ?undone,
                                "a permit created while permits of a larger count were live: taken back"
                            );
                            return match (checked, undone) {
                                (Err(e), Ok(true)) => Err(e),
                                _ => Ok(None),
                            };
                        }
                    }
                    debug!(name, permit = p, term = revision, "claimed a permit");
                    return Ok(Some(PermitGrant {
                        permit: p,
                        grant: Grant {
                            term: revision,
                            expires_in: self.left_since(sent_at),
                        },
                    }));
                }
            }
            Ok(None)
        };
        self.bounded(OP, name, claiming).await?
    }

    /// [`PermitStore::renew_permit`](lease_core::backend::permits::PermitStore::renew_permit): a
    /// direct get, then an update at the revision read, the term copied into the value.
    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &HolderToken,
        ttl: std::time::Duration,
    ) -> Result<Option<Grant>> {
        const OP: Operation = Operation::RenewPermit;
        check::renew_permit(self, name, permit, ttl)?;
        let key = permit_key(name, permit);
        for _ in 0..MAX_TRIES {
            let (record, revision) = match self.read(OP, name, &key).await? {
                Seen::Live {
                    record, revision, ..
                } if record.holder == *holder && !record.job => (record, revision),
                Seen::Foreign { .. } => return Err(self.foreign_key(OP, name, &key)),
                _ => return Ok(None),
            };
            let term = record.term_at(revision);
            let renewed = Record { term, ..record }.encode();
            let sent_at = Instant::now();
            if self
                .write(OP, name, &key, renewed, revision)
                .await?
                .is_some()
            {
                return Ok(Some(Grant {
                    term,
                    expires_in: self.left_since(sent_at),
                }));
            }
        }
        Err(self.racing(OP, name))
    }

    /// [`PermitStore::release_permit`](lease_core::backend::permits::PermitStore::release_permit):
    /// a direct get, then a purge of the key up to the revision read (a compare-and-set that leaves
    /// no marker), which hints the release.
    async fn release_permit(&self, name: &str, permit: u32, holder: &HolderToken) -> Result<bool> {
        const OP: Operation = Operation::ReleasePermit;
        check::permit(self, name, permit)?;
        let key = permit_key(name, permit);
        for _ in 0..MAX_TRIES {
            let revision = match self.read(OP, name, &key).await? {
                Seen::Live {
                    record, revision, ..
                } if record.holder == *holder => revision,
                Seen::Foreign { .. } => return Err(self.foreign_key(OP, name, &key)),
                _ => return Ok(false),
            };
            if self.purge_through(OP, name, &key, revision).await? {
                return Ok(true);
            }
        }
        Err(self.racing(OP, name))
    }

    /// [`PermitStore::verify_permit`](lease_core::backend::permits::PermitStore::verify_permit): a
    /// scan, the live permit under `holder` found by its token. Time left is estimated from the
    /// server's timestamp, clamped to the lease duration.
    async fn verify_permit(&self, name: &str, holder: &HolderToken) -> Result<Option<PermitGrant>> {
        const OP: Operation = Operation::VerifyPermit;
        check::name(self, name)?;
        let scanned = self
            .bounded(OP, name, self.scan_permits(OP, name))
            .await??;
        Ok(scanned.into_iter().find_map(|(p, seen)| match seen {
            Seen::Live {
                record,
                revision,
                created_ns,
            } if record.holder == *holder => Some(PermitGrant {
                permit: p,
                grant: Grant {
                    term: record.term_at(revision),
                    expires_in: self.estimate_left(created_ns),
                },
            }),
            _ => None,
        }))
    }

    /// [`PermitStore::read_back_permit`](lease_core::backend::permits::PermitStore::read_back_permit):
    /// the read-back after a claim for `permits` whose outcome is unknown. That claim may have
    /// ended after its create and before its re-count (`outnumbered`) — its create's answer lost,
    /// or the claim cut by a timeout — or while it took its permit back. So the permit found under
    /// `holder` is adopted only as a claim grants one:
    ///
    /// - the scan that finds it counts the others, and with `permits` or more of them live
    ///   (a claim with a larger count took one since the claim's own scan) the answer is
    ///   `None`, the permit left to expire under a token nobody uses;
    /// - otherwise the permit is renewed by an update at the revision read, and adopted only
    ///   when that lands. A take-back purge still on its way then either landed first (the
    ///   update fails: `None`) or comes after it and removes only the superseded message,
    ///   never the adopted permit.
    ///
    /// Three round trips (the scan's two, the update) when the permit is adopted.
    async fn read_back_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
    ) -> Result<Option<PermitGrant>> {
        const OP: Operation = Operation::ReadBackPermit;
        check::name(self, name)?;
        let reading = async {
            let scanned = self.scan_permits(OP, name).await?;
            let mut own = None;
            let mut others = 0usize;
            for (p, seen) in scanned {
                match seen {
                    Seen::Live {
                        record, revision, ..
                    } if record.holder == *holder => own = Some((p, record, revision)),
                    Seen::Live { .. } => others += 1,
                    Seen::Absent | Seen::Marker { .. } | Seen::Foreign { .. } => {}
                }
            }
            let Some((p, record, revision)) = own else {
                return Ok(None);
            };
            let term = record.term_at(revision);
            if others >= usize::try_from(permits).unwrap_or(usize::MAX) {
                debug!(
                    name,
                    permit = p,
                    term,
                    others,
                    "a permit read back with too many others live: not adopted"
                );
                return Ok(None);
            }
            let key = permit_key(name, p);
            let renewed = Record { term, ..record }.encode();
            let sent_at = Instant::now();
            if self
                .write(OP, name, &key, renewed, revision)
                .await?
                .is_none()
            {
                debug!(
                    name,
                    permit = p,
                    term,
                    "a permit read back was taken back: not adopted"
                );
                return Ok(None);
            }
            Ok(Some(PermitGrant {
                permit: p,
                grant: Grant {
                    term,
                    expires_in: self.left_since(sent_at),
                },
            }))
        };
        self.bounded(OP, name, reading).await?
    }

    /// [`PermitStore::permits`](lease_core::backend::permits::PermitStore::permits): a scan. The
    /// server removes a permit's key when it expires and a release purges it, so every record
    /// listed is live.
    async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
        const OP: Operation = Operation::Permits;
        check::name(self, name)?;
        let scanned = self
            .bounded(OP, name, self.scan_permits(OP, name))
            .await??;
        let mut out: Vec<PermitInfo> = scanned
            .into_iter()
            .filter_map(|(p, seen)| match seen {
                Seen::Live {
                    record,
                    revision,
                    created_ns,
                } => Some(PermitInfo {
                    permit: p,
                    term: record.term_at(revision),
                    instance: record.instance,
                    live: true,
                    expires_in: self.estimate_left(created_ns),
                }),
                _ => None,
            })
            .collect();
        out.sort_by_key(|p| p.permit);
        Ok(out)
    }
}
