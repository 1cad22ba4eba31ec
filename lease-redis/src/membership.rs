//! [`MembershipStore`] on Redis: per service, one hash of member records and one sorted set of
//! their expiries, both under the service's hash tag; one Lua script per operation. See the
//! crate documentation, *Membership*, and `src/wire/scripts/{heartbeat,members,leave}.lua`.

use std::time::Duration;

use lease_core::backend::{async_trait, ceil_millis, check, decode_groups, encode_groups};
use lease_core::layer::Operation;
use lease_core::{
    Result,
    backend::membership::{Member, MembershipStore},
};
use redis::aio::ConnectionLike;

use crate::error::During;
use crate::store::RedisStore;
use crate::wire::keys::{member_expiry_key, members_key};
use crate::wire::scripts::SCRIPTS;

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The two Redis keys of `service`'s membership: the hash of member records, e.g.
    /// `lease:{billing}:members`, and the sorted set of their expiries,
    /// `lease:{billing}:members:expiry` (see the crate documentation, *Membership*). Refuses a
    /// service name the store cannot hold; no I/O.
    pub fn membership_keys(&self, service: &str) -> Result<(String, String)> {
        check::members(self, service)?;
        let prefix = self.config().get_key_prefix();
        Ok((
            members_key(prefix, service),
            member_expiry_key(prefix, service),
        ))
    }
}

/// A member record's value: the address, a line feed, then the groups one per line (addresses
/// and names hold no control characters, so neither holds a line feed).
fn encode_member(address: &str, groups: &[String]) -> String {
    let mut value = String::with_capacity(address.len() + 1 + groups.len() * 16);
    value.push_str(address);
    value.push('\n');
    value.push_str(&encode_groups(groups));
    value
}

/// The address and groups [`encode_member`] wrote.
fn decode_member(value: &str) -> (String, Vec<String>) {
    match value.split_once('\n') {
        Some((address, groups)) => (address.to_owned(), decode_groups(groups)),
        None => (value.to_owned(), Vec::new()),
    }
}

/// Membership records, each operation one Lua script (one `EVALSHA`, one round trip) on the
/// service's two keys. See the crate documentation, *Membership*.
#[async_trait]
impl<C> MembershipStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// One round trip (`heartbeat.lua`, which also drops up to 100 expired records of the
    /// service).
    async fn heartbeat(
        &self,
        service: &str,
        node: &str,
        address: &str,
        ttl: Duration,
        groups: &[String],
    ) -> Result<Member> {
        check::heartbeat(self, service, node, address, ttl, groups)?;
        let during = During::Op(Operation::Heartbeat, service);
        let on = self.started(during).await?;
        let prefix = self.config().get_key_prefix();
        let (records, expiries) = (
            members_key(prefix, service),
            member_expiry_key(prefix, service),
        );
        let ttl = ceil_millis(ttl).to_string();
        let ttl_ms: u64 = on
            .eval_keys(
                during,
                &SCRIPTS.heartbeat,
                &[records.as_bytes(), expiries.as_bytes()],
                &[node, &ttl, &encode_member(address, groups)],
            )
            .await?;
        Ok(Member {
            node: node.to_owned(),
            address: address.to_owned(),
            groups: groups.to_vec(),
            expires_in: Duration::from_millis(ttl_ms),
        })
    }

    /// One round trip (`members.lua`: the live node ids from the sorted set, their records from
    /// the hash); never a `SCAN`.
    async fn members(&self, service: &str) -> Result<Vec<Member>> {
        let (records, expiries) = self.membership_keys(service)?;
        let reply: Vec<(String, u64, String)> = self
            .eval_keys(
                During::Op(Operation::Members, service),
                &SCRIPTS.members,
                &[records.as_bytes(), expiries.as_bytes()],
                &[],
            )
            .await?;
        let mut members: Vec<Member> = reply
            .into_iter()
            .map(|(node, remaining_ms, value)| {
                let (address, groups) = decode_member(&value);
                Member {
                    node,
                    address,
                    groups,
                    expires_in: Duration::from_millis(remaining_ms),
                }
            })
            .collect();
        members.sort_by(|a, b| a.node.as_bytes().cmp(b.node.as_bytes()));
        Ok(members)
    }

    /// One round trip (`leave.lua`, which deletes the node's record).
    async fn leave(&self, service: &str, node: &str) -> Result<bool> {
        check::leave(self, service, node)?;
        let prefix = self.config().get_key_prefix();
        let (records, expiries) = (
            members_key(prefix, service),
            member_expiry_key(prefix, service),
        );
        let n: i64 = self
            .eval_keys(
                During::Op(Operation::Leave, service),
                &SCRIPTS.leave,
                &[records.as_bytes(), expiries.as_bytes()],
                &[node],
            )
            .await?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_values_round_trip() {
        let groups = vec!["orders".to_owned(), "mail{eu}".to_owned()];
        for (address, groups) in [
            ("10.0.0.1:7000", groups.clone()),
            ("", groups),
            ("host", Vec::new()),
            ("", Vec::new()),
        ] {
            let value = encode_member(address, &groups);
            assert_eq!(decode_member(&value), (address.to_owned(), groups));
        }
        assert_eq!(encode_member("a", &[]), "a\n");
    }
}
