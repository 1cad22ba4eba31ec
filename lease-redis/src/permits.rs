//! Counted leases on Redis (see [`lease_core::backend::permits`] for the rules): a name's permits
//! are one hash, `<prefix>{<name>}:permits`, apart from its lease record, with the field `term`
//! (the greatest term issued for the name across its permits) and one field per permit. Each
//! operation is one Lua script, one round trip (`src/wire/scripts/*_permit.lua`, `permits.lua`),
//! judging time by the server's `TIME`; `replica_acks` applies as to every write.

use std::time::Duration;

use lease_core::backend::async_trait;
use lease_core::backend::notify::Topic;
use lease_core::backend::{Grant, HolderToken, ceil_millis, check};
use lease_core::layer::Operation;
use lease_core::{
    Result,
    backend::permits::{PermitGrant, PermitInfo, PermitStore},
};
use redis::aio::ConnectionLike;

use crate::error::During;
use crate::store::RedisStore;
use crate::wire::codec::{HolderHex, grant};
use crate::wire::keys::permits_key;
use crate::wire::scripts::SCRIPTS;

/// The reply of `permits.lua` for one permit: index, instance, term, live (1/0), remaining ms.
type PermitRow = (u32, String, u64, i64, u64);

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The Redis key of the counted name `name`'s permits, e.g. `lease:{import}:permits`.
    fn permits_key_of(&self, name: &str) -> String {
        permits_key(self.config().get_key_prefix(), name)
    }
}

#[async_trait]
impl<C> PermitStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// [`PermitStore::claim_permit`](lease_core::backend::permits::PermitStore::claim_permit):
    /// `claim_permit.lua`, one round trip, after the start-up check (it hands out a term).
    async fn claim_permit(
        &self,
        name: &str,
        permits: u32,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<PermitGrant>> {
        check::claim_permit(self, name, permits, instance, ttl)?;
        let during = During::Op(Operation::ClaimPermit, name);
        let on = self.started(during).await?;
        let key = self.permits_key_of(name);
        let holder = HolderHex::new(holder);
        let ttl = ceil_millis(ttl);
        let flag = self.config().get_term_scheme().script_flag();
        let reply: Option<(u32, u64, u64)> = on
            .eval_with(
                during,
                &SCRIPTS.claim_permit,
                &[key.as_bytes()],
                5,
                10 + 32 + instance.len() + 20 + 1,
                |cmd| {
                    cmd.arg(permits)
                        .arg(holder.as_bytes())
                        .arg(instance)
                        .arg(ttl)
                        .arg(flag);
                },
            )
            .await?;
        Ok(reply.map(|(permit, term, ttl_ms)| {
            self.changed(&Topic::lease(name));
            PermitGrant {
                permit,
                grant: grant((term, ttl_ms)),
            }
        }))
    }

    /// [`PermitStore::renew_permit`](lease_core::backend::permits::PermitStore::renew_permit):
    /// `renew_permit.lua`.
    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::renew_permit(self, name, permit, ttl)?;
        let key = self.permits_key_of(name);
        let holder = HolderHex::new(holder);
        let ttl = ceil_millis(ttl);
        let reply: Option<(u64, u64)> = self
            .eval_with(
                During::Op(Operation::RenewPermit, name),
                &SCRIPTS.renew_permit,
                &[key.as_bytes()],
                3,
                10 + 32 + 20,
                |cmd| {
                    cmd.arg(permit).arg(holder.as_bytes()).arg(ttl);
                },
            )
            .await?;
        Ok(reply.map(grant))
    }

    /// [`PermitStore::release_permit`](lease_core::backend::permits::PermitStore::release_permit):
    /// `release_permit.lua`, which publishes the hint when it ended a live permit.
    async fn release_permit(&self, name: &str, permit: u32, holder: &HolderToken) -> Result<bool> {
        check::permit(self, name, permit)?;
        let key = self.permits_key_of(name);
        let holder = HolderHex::new(holder);
        let n: i64 = self
            .eval_with(
                During::Op(Operation::ReleasePermit, name),
                &SCRIPTS.release_permit,
                &[key.as_bytes()],
                2,
                10 + 32,
                |cmd| {
                    cmd.arg(permit).arg(holder.as_bytes());
                },
            )
            .await?;
        if n == 1 {
            self.changed(&Topic::lease(name));
        }
        Ok(n == 1)
    }

    /// [`PermitStore::verify_permit`](lease_core::backend::permits::PermitStore::verify_permit):
    /// `verify_permit.lua`, which writes nothing.
    async fn verify_permit(&self, name: &str, holder: &HolderToken) -> Result<Option<PermitGrant>> {
        check::name(self, name)?;
        let key = self.permits_key_of(name);
        let holder = HolderHex::new(holder);
        let reply: Option<(u32, u64, u64)> = self
            .eval_with(
                During::Op(Operation::VerifyPermit, name),
                &SCRIPTS.verify_permit,
                &[key.as_bytes()],
                1,
                32,
                |cmd| {
                    cmd.arg(holder.as_bytes());
                },
            )
            .await?;
        Ok(reply.map(|(permit, term, remaining_ms)| PermitGrant {
            permit,
            grant: grant((term, remaining_ms)),
        }))
    }

    /// [`PermitStore::permits`](lease_core::backend::permits::PermitStore::permits): `permits.lua`,
    /// which writes nothing; sorted by permit here.
    async fn permits(&self, name: &str) -> Result<Vec<PermitInfo>> {
        check::name(self, name)?;
        let key = self.permits_key_of(name);
        let rows: Vec<PermitRow> = self
            .eval(
                During::Op(Operation::Permits, name),
                &SCRIPTS.permits,
                key.as_bytes(),
                &[],
            )
            .await?;
        let mut out: Vec<PermitInfo> = rows
            .into_iter()
            .map(|(permit, instance, term, live, remaining)| PermitInfo {
                permit,
                instance,
                term,
                live: live == 1,
                expires_in: Duration::from_millis(remaining),
            })
            .collect();
        out.sort_by_key(|p| p.permit);
        Ok(out)
    }
}
