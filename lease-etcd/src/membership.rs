//! [`MembershipStore`] on etcd: one key per `(service, node)`, hung on an etcd lease granted
//! for each heartbeat.

use std::time::Duration;

use etcd_client::{DeleteOptions, PutOptions};
use lease_core::backend::{async_trait, check, clock::Stamp};
use lease_core::layer::Operation;
use lease_core::{
    Result,
    backend::membership::{Member, MembershipStore},
};

use crate::store::EtcdStore;
use crate::wire::codec::{decode_member, encode_member};
use crate::wire::keys;

#[async_trait]
impl MembershipStore for EtcdStore {
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member> {
        check::heartbeat(self, service, node, address, ttl, groups)?;
        let site = self.site(Operation::Heartbeat, service);
        let sent = Stamp::now();
        let (lease, granted) = self.grant(site, ttl).await?;
        let mut kv = self.inner.client.kv_client();
        let mut resp = self
            .bounded(
                site,
                kv.put(
                    keys::member(&self.inner.prefix, service, node),
                    encode_member(address, groups),
                    Some(PutOptions::new().with_lease(lease).with_prev_key()),
                ),
            )
            .await?;
        // The record moved to the new etcd lease; the one before hangs on nothing now.
        if let Some(prev) = resp.take_prev_key()
            && prev.lease() != 0
            && prev.lease() != lease
        {
            self.revoke_later(prev.lease());
        }
        Ok(Member {
            node: node.to_owned(),
            address: address.to_owned(),
            groups: groups.to_vec(),
            expires_in: sent.remaining(ttl.min(granted)),
        })
    }

    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        check::members(self, service)?;
        let site = self.site(Operation::Members, service);
        let service_prefix = keys::members(&self.inner.prefix, service);
        let kvs = self.range(site, &service_prefix).await?;
        let mut found = Vec::new();
        for (kv, expires_in) in self.live(site, kvs).await? {
            let Some(node) = keys::member_of(&service_prefix, kv.key()) else {
                continue;
            };
            let Some((address, groups)) = decode_member(kv.value()) else {
                return Err(site.foreign_value(kv.key()));
            };
            found.push(Member {
                node,
                address,
                groups,
                expires_in,
            });
        }
        Ok(found)
    }

    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        check::leave(self, service, node)?;
        let site = self.site(Operation::Leave, service);
        let mut kv = self.inner.client.kv_client();
        let mut resp = self
            .bounded(
                site,
                kv.delete(
                    keys::member(&self.inner.prefix, service, node),
                    Some(DeleteOptions::new().with_prev_key()),
                ),
            )
            .await?;
        let Some(prev) = resp.take_prev_kvs().into_iter().next() else {
            return Ok(false);
        };
        if prev.lease() != 0 {
            self.revoke_later(prev.lease());
        }
        Ok(true)
    }
}
