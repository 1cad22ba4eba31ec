//! Counted leases on etcd (see [`lease_core::backend::permits`] for the rules): one key per permit,
//! `<prefix>c/<name>\0<permit, 10 digits>`, apart from the name's lease key, each hung on an
//! etcd lease granted for its claim, so etcd deletes it when the TTL runs out by the server's
//! clock. The term is the permit key's create revision: the cluster's revision at the claim,
//! which strictly increases across the cluster, so across all of a name's permits, and never
//! repeats after a release or an expiry deleted the key. See the crate docs, *Counted leases*.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use lease_core::backend::async_trait;
use lease_core::backend::{Grant, HolderToken, check, clock::Stamp};
use lease_core::layer::Operation;
use lease_core::{
    Result,
    backend::permits::{PermitGrant, PermitInfo, PermitStore},
};

use crate::error::{Site, lease_not_found};
use crate::leases::{held_by, term_of};
use crate::store::{EtcdStore, revision};
use crate::wire::codec::LeaseValue;
use crate::wire::keys;

/// How many times a claim sends its transaction, at most, when other claims keep changing the
/// name's permits between its read and its write (each failed transaction reads them again).
/// Every failure means another claim or release landed, so a claim is refused as full long
/// before this unless permits keep changing hands.
const MAX_CLAIM_TRIES: usize = 16;

/// The permits of a name as a read found them, and the revision the read was made at.
struct Snapshot {
    kvs: Vec<KeyValue>,
    revision: i64,
}

impl EtcdStore {
    /// Every permit key of `name`, by a linearizable range read, and its revision.
    async fn read_permits(&self, site: Site<'_>, prefix: &[u8]) -> Result<Snapshot> {
        let mut kv = self.inner.client.kv_client();
        let mut resp = self
            .bounded(
                site,
                kv.get(prefix.to_vec(), Some(GetOptions::new().with_prefix())),
            )
            .await?;
        let revision = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| site.malformed("a header"))?;
        Ok(Snapshot {
            kvs: resp.take_kvs(),
            revision,
        })
    }

    /// The permits of a snapshot: (index, key-value); an error for a key or value this store
    /// did not write.
    fn permit_kvs<'k>(
        site: Site<'_>,
        prefix: &[u8],
        kvs: &'k [KeyValue],
    ) -> Result<Vec<(u32, &'k KeyValue)>> {
        kvs.iter()
            .map(|kv| match keys::partition_of(prefix, kv.key()) {
                Some(p) if LeaseValue::decode(kv.value()).is_some() => Ok((p, kv)),
                _ => Err(site.foreign_value(kv.key())),
            })
            .collect()
    }

    /// The permit key `permit` of `name` when `holder` holds it live.
    async fn own_permit(
        &self,
        site: Site<'_>,
        key: &[u8],
        holder: &HolderToken,
    ) -> Result<Option<KeyValue>> {
        Ok(self
            .get_key(site, key)
            .await?
            .filter(|kv| kv.lease() != 0 && held_by(kv, holder)))
    }
}

#[async_trait]
impl PermitStore for EtcdStore {
    /// [`PermitStore::claim_permit`](lease_core::backend::permits::PermitStore::claim_permit).
    ///
    /// A range read of the name's permits (sent together with the `LeaseGrant` for the claim's
    /// etcd lease), then `Txn(if mod_revision(every permit key) < read revision + 1 and
    /// create_revision(key of the lowest free permit) == 0 then put(key, holder, etcd lease)
    /// else range read)`: the count and the take are one transaction, since any permit created
    /// or changed after the read fails the comparison. A failed transaction carries the new
    /// read, and the claim decides again on it.
    async fn claim_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<PermitGrant>> {
        check::claim_permit(self, name, permits, instance, ttl)?;
        let site = self.site(Operation::ClaimPermit, name);
        let prefix = keys::permits(&self.inner.prefix, name);
        let mut sent = Stamp::now();
        let (granted, read) = tokio::join!(self.grant(site, ttl), self.read_permits(site, &prefix));
        let (mut lease, granted) = granted?;
        let mut bound = ttl.min(granted);
        let mut snapshot = match read {
            Ok(s) => s,
            Err(e) => {
                self.revoke_later(lease);
                return Err(e);
            }
        };
        let value = LeaseValue::encode(holder, instance);
        for _ in 0..MAX_CLAIM_TRIES {
            let taken = match Self::permit_kvs(site, &prefix, &snapshot.kvs) {
                Ok(taken) => taken,
                Err(e) => {
                    self.revoke_later(lease);
                    return Err(e);
                }
            };
            let full = taken.len() >= usize::try_from(permits).unwrap_or(usize::MAX);
            if full || taken.iter().any(|(_, kv)| held_by(kv, holder)) {
                self.revoke_later(lease);
                return Ok(None);
            }
            // Fewer than N are live, so one of 0 .. N-1 is free.
            let Some(free) = (0..permits).find(|i| taken.iter().all(|(p, _)| p != i)) else {
                self.revoke_later(lease);
                return Ok(None);
            };
            let key = keys::permit(&self.inner.prefix, name, free);
            let txn = Txn::new()
                .when([
                    Compare::mod_revision(prefix.clone(), CompareOp::Less, snapshot.revision + 1)
                        .with_prefix(),
                    Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                ])
                .and_then([TxnOp::put(
                    key,
                    value.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(
                    prefix.clone(),
                    Some(GetOptions::new().with_prefix()),
                )]);
            let resp = match self.txn_raw(site, txn).await? {
                Ok(resp) => resp,
                // The etcd lease ended before the transaction landed (etcd refused it whole,
                // nothing was written): decide again on the same read, on a new etcd lease.
                Err(e) if lease_not_found(&e) => {
                    sent = Stamp::now();
                    let (again, granted) = self.grant(site, ttl).await?;
                    lease = again;
                    bound = ttl.min(granted);
                    continue;
                }
                Err(e) => return Err(site.etcd(e)),
            };
            if resp.succeeded() {
                return Ok(Some(PermitGrant {
                    permit: free,
                    grant: Grant {
                        term: revision(site, &resp)?,
                        expires_in: sent.remaining(bound),
                    },
                }));
            }
            snapshot = reread(site, &resp)?;
        }
        self.revoke_later(lease);
        Err(site.racing(MAX_CLAIM_TRIES))
    }

    /// [`PermitStore::renew_permit`](lease_core::backend::permits::PermitStore::renew_permit): a
    /// read of the permit's key, then a keep-alive of its etcd lease (and, when the server's TTL is
    /// shorter than `ttl`, a move onto a longer one, the key and its create revision kept).
    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::renew_permit(self, name, permit, ttl)?;
        let site = self.site(Operation::RenewPermit, name);
        let key = keys::permit(&self.inner.prefix, name, permit);
        let Some(kv) = self.own_permit(site, &key, holder).await? else {
            return Ok(None);
        };
        let sent = Stamp::now();
        let Some(granted) = self.keep_alive(site, kv.lease()).await? else {
            return Ok(None);
        };
        let Some((_, granted, since)) =
            self.fit(site, &key, kv.lease(), granted, sent, ttl).await?
        else {
            return Ok(None);
        };
        Ok(Some(Grant {
            term: term_of(&kv),
            expires_in: since.remaining(ttl.min(granted)),
        }))
    }

    /// [`PermitStore::release_permit`](lease_core::backend::permits::PermitStore::release_permit):
    /// a read of the permit's key, then `Txn(if mod_revision(key) == the one read then
    /// delete(key))`; the etcd lease is revoked in the background.
    async fn release_permit(&self, name: &str, permit: u32, holder: &HolderToken) -> Result<bool> {
        check::permit(self, name, permit)?;
        let site = self.site(Operation::ReleasePermit, name);
        let key = keys::permit(&self.inner.prefix, name, permit);
        let Some(kv) = self.own_permit(site, &key, holder).await? else {
            return Ok(false);
        };
        let resp = self
            .txn(
                site,
                Txn::new()
                    .when([Compare::mod_revision(
                        key.clone(),
                        CompareOp::Equal,
                        kv.mod_revision(),
                    )])
                    .and_then([TxnOp::delete(key, None)]),
            )
            .await?;
        if resp.succeeded() {
            self.revoke_later(kv.lease());
        }
        Ok(resp.succeeded())
    }

    /// [`PermitStore::verify_permit`](lease_core::backend::permits::PermitStore::verify_permit): a
    /// range read of the name's permits, then `LeaseTimeToLive` of the holder's etcd lease (the
    /// server's time left, whole seconds rounded down).
    async fn verify_permit(&self, name: &str, holder: &HolderToken) -> Result<Option<PermitGrant>> {
        check::name(self, name)?;
        let site = self.site(Operation::VerifyPermit, name);
        let prefix = keys::permits(&self.inner.prefix, name);
        let snapshot = self.read_permits(site, &prefix).await?;
        let permits = Self::permit_kvs(site, &prefix, &snapshot.kvs)?;
        let Some((permit, kv)) = permits.into_iter().find(|(_, kv)| held_by(kv, holder)) else {
            return Ok(None);
        };
        let Some(left) = self.held_time_left(site, kv, holder).await? else {
            return Ok(None);
        };
        Ok(Some(PermitGrant {
            permit,
            grant: Grant {
                term: term_of(kv),
                expires_in: left,
            },
        }))
    }

    /// [`PermitStore::permits`](lease_core::backend::permits::PermitStore::permits): a range read,
    /// then `LeaseTimeToLive` of every etcd lease found, together, following a key that moved onto
    /// another etcd lease meanwhile (`EtcdStore::live`). etcd deletes a permit's key when it is
    /// released or its TTL runs out, so every record listed is live.
    async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
        check::name(self, name)?;
        let site = self.site(Operation::Permits, name);
        let prefix = keys::permits(&self.inner.prefix, name);
        let snapshot = self.read_permits(site, &prefix).await?;
        // Every key under the prefix is a permit this store wrote.
        Self::permit_kvs(site, &prefix, &snapshot.kvs)?;
        let mut out = Vec::with_capacity(snapshot.kvs.len());
        for (kv, expires_in) in self.live(site, snapshot.kvs).await? {
            let Some(permit) = keys::partition_of(&prefix, kv.key()) else {
                continue;
            };
            let value =
                LeaseValue::decode(kv.value()).ok_or_else(|| site.foreign_value(kv.key()))?;
            out.push(PermitInfo {
                permit,
                instance: value.instance,
                term: term_of(&kv),
                live: true,
                expires_in,
            });
        }
        out.sort_by_key(|p| p.permit);
        Ok(out)
    }
}

/// The read a failed claim transaction carries (its `else` branch), at the transaction's
/// revision.
fn reread(site: Site<'_>, resp: &TxnResponse) -> Result<Snapshot> {
    let revision = resp
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| site.malformed("a header"))?;
    let kvs = resp
        .op_responses()
        .into_iter()
        .find_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
            _ => None,
        })
        .ok_or_else(|| site.malformed("the read of a failed claim"))?;
    Ok(Snapshot { kvs, revision })
}
