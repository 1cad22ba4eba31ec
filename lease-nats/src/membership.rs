//! [`MembershipStore`] on the lease bucket: one key per `(service, node)`, expired by the
//! bucket's max age like a lease. See the crate docs, *Membership*, for the protocol and its
//! round trips.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lease_core::backend::{async_trait, check};
use lease_core::layer::Operation;
use lease_core::{
    Result,
    backend::membership::{Member, MembershipStore},
};

use crate::store::{NatsStore, Seen, pipelined};
use crate::wire::codec::MemberRecord;
use crate::wire::keys::{decode_key, encode_key, member_key, member_prefix};

#[async_trait]
impl MembershipStore for NatsStore {
    /// One unconditional publish to the member's key: it replaces the record and starts its
    /// age again. One round trip.
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member> {
        const OP: Operation = Operation::Heartbeat;
        check::heartbeat(self, service, node, address, ttl, groups)?;
        let key = member_key(service, node);
        let record = MemberRecord {
            address: address.to_owned(),
            groups: groups.to_vec(),
        };
        let sent_at = Instant::now();
        self.bounded(OP, service, self.inner.kv.put(&key, record.encode()))
            .await?
            .map_err(|e| self.site(OP, service).put(e))?;
        Ok(Member {
            node: node.to_owned(),
            address: record.address,
            groups: record.groups,
            expires_in: self.left_since(sent_at),
        })
    }

    /// Lists the service's keys with one `STREAM.INFO` request (a subject filter), then reads
    /// them with pipelined direct gets: two bursts (one when the service has no member).
    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        const OP: Operation = Operation::Members;
        check::members(self, service)?;
        let prefix = member_prefix(service);
        let listing = async {
            let keys = self.list_keys(OP, service, &prefix).await?;
            let mut nodes = Vec::with_capacity(keys.len());
            for suffix in &keys {
                // Only a key this store would have made for that node (one escaped token).
                match decode_key(suffix).filter(|node| encode_key(node) == *suffix) {
                    Some(node) => nodes.push((node, format!("{prefix}{suffix}"))),
                    None => {
                        return Err(self.foreign_key(OP, service, &format!("{prefix}{suffix}")));
                    }
                }
            }
            let seen = pipelined(&nodes, |(_, key)| {
                self.read_as(OP, service, key, MemberRecord::decode)
            })
            .await;
            let mut live = BTreeMap::new();
            for ((node, key), s) in nodes.into_iter().zip(seen) {
                match s? {
                    Seen::Live {
                        record, created_ns, ..
                    } => {
                        let member = Member {
                            expires_in: self.estimate_left(created_ns),
                            node: node.clone(),
                            address: record.address,
                            groups: record.groups,
                        };
                        live.insert(node, member);
                    }
                    Seen::Absent | Seen::Marker { .. } => {}
                    Seen::Foreign { .. } => return Err(self.foreign_key(OP, service, &key)),
                }
            }
            Ok(live.into_values().collect())
        };
        self.bounded(OP, service, listing).await?
    }

    /// One purge of the member's key. One round trip.
    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        const OP: Operation = Operation::Leave;
        check::leave(self, service, node)?;
        let key = member_key(service, node);
        let subject = format!("{}{key}", self.inner.subject_prefix);
        let purge = self.inner.kv.stream.purge().filter(subject);
        let purged = self
            .bounded(OP, service, async move { purge.await })
            .await?
            .map_err(|e| self.site(OP, service).purge(e))?;
        Ok(purged.purged > 0)
    }
}
