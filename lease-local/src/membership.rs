//! The membership records of the in-memory store.

use std::collections::BTreeMap;
use std::time::Duration;

use lease_core::backend::async_trait;
use lease_core::backend::check;
use lease_core::backend::notify::Topic;
use lease_core::{
    Result,
    backend::membership::{Member, MembershipStore},
};
use tokio::time::Instant;

use crate::records::*;
use crate::store::*;

#[async_trait]
impl MembershipStore for MemoryStore {
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member> {
        check::heartbeat(self, service, node, address, ttl, groups)?;
        let now = Instant::now();
        let until = self.until(now, ttl);
        let rec = MemberRecord {
            address: address.to_owned(),
            groups: groups.to_vec(),
            until,
        };
        let member = Member {
            node: node.to_owned(),
            address: rec.address.clone(),
            groups: rec.groups.clone(),
            expires_in: left(until, now),
        };
        let before = self
            .lock()
            .members
            .insert((service.to_owned(), node.to_owned()), rec);
        let joined = before.is_none_or(|r| left(r.until, now).is_zero());
        if joined {
            for g in groups {
                self.notify(&Topic::group(g));
            }
        }
        Ok(member)
    }

    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        check::members(self, service)?;
        let now = Instant::now();
        let st = self.lock();
        let live: BTreeMap<&str, Member> = st
            .members
            .iter()
            .filter(|((s, _), r)| s == service && !left(r.until, now).is_zero())
            .map(|((_, node), r)| {
                let member = Member {
                    node: node.clone(),
                    address: r.address.clone(),
                    groups: r.groups.clone(),
                    expires_in: left(r.until, now),
                };
                (node.as_str(), member)
            })
            .collect();
        Ok(live.into_values().collect())
    }

    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        check::leave(self, service, node)?;
        let now = Instant::now();
        let mut st = self.lock();
        match st.members.get_mut(&(service.to_owned(), node.to_owned())) {
            Some(r) if !left(r.until, now).is_zero() => {
                r.until = Until::At(now);
                let groups = r.groups.clone();
                drop(st);
                for g in &groups {
                    self.notify(&Topic::group(g));
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
