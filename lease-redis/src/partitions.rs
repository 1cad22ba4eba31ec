//! [`PartitionStore`] on Redis: one hash per group, one field per partition, one Lua script per
//! operation. See the crate documentation, *Partitions*, and the scripts
//! `src/wire/scripts/{acquire_partition,renew_partitions,release_partitions,owners,forget_group}.lua`.

use std::collections::BTreeSet;
use std::time::Duration;

use lease_core::backend::LeaseStoreExt;
use lease_core::backend::check::{self, Batch};
use lease_core::backend::{async_trait, ceil_millis};
use lease_core::layer::Operation;
use lease_core::{
    Error, Result,
    backend::partitions::{PartitionLease, PartitionStore},
};
use redis::aio::ConnectionLike;

use crate::error::{During, unexpected_reply};
use crate::store::RedisStore;
use crate::wire::keys::partitions_key;
use crate::wire::scripts::SCRIPTS;

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The Redis key of `group`'s partition leases, e.g. `lease:{orders}:partitions` (see the
    /// crate documentation, *Partitions*). Refuses a group name the store cannot hold; no I/O.
    pub fn partitions_key(&self, group: &str) -> Result<String> {
        self.validate_name(group)
            .map_err(|e| Error::invalid_name(format!("group: {}", e.message())))?;
        Ok(partitions_key(self.config().get_key_prefix(), group))
    }

    /// Deletes `group`'s partition records when every lease in it ended (released or expired)
    /// at least `idle` ago by the server's clock; a group with a lease live, or ended more
    /// recently, is kept whole. `true` when the records were deleted. One round trip.
    ///
    /// **Deleting the records forgets the epochs.** With [`TermScheme::Counter`] the next
    /// acquire of each partition gets epoch 1 again, so do this only for groups that will not be
    /// used again, or whose fenced resources no longer remember epochs issued under them.
    ///
    /// [`TermScheme::Counter`]: crate::TermScheme::Counter
    pub async fn forget_group(&self, group: &str, idle: Duration) -> Result<bool> {
        let key = self.partitions_key(group)?;
        let idle = ceil_millis(idle).to_string();
        let what = format!("forget of partition group '{group}'");
        let n: i64 = self
            .eval(
                During::Task(&what),
                &SCRIPTS.forget_group,
                key.as_bytes(),
                &[&idle],
            )
            .await?;
        Ok(n == 1)
    }
}

/// The partitions as script arguments: each once, in increasing order.
fn partition_args(partitions: &[u32]) -> Vec<String> {
    partitions
        .iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(u32::to_string)
        .collect()
}

/// Partitioned leases, each operation one Lua script (one `EVALSHA`, one round trip) on the
/// group's hash, however many partitions a renewal or a release names. See the crate
/// documentation, *Partitions*.
#[async_trait]
impl<C> PartitionStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// One round trip (`acquire_partition.lua`).
    async fn acquire_partition(
        &self,
        group: &str,
        partition: u32,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<PartitionLease>> {
        check::acquire_partition(self, group, owner, ttl)?;
        let during = During::Op(Operation::AcquirePartition, group);
        let on = self.started(during).await?;
        let key = partitions_key(self.config().get_key_prefix(), group);
        let ttl = ceil_millis(ttl).to_string();
        let reply: Option<(u64, u64)> = on
            .eval(
                during,
                &SCRIPTS.acquire_partition,
                key.as_bytes(),
                &[
                    &partition.to_string(),
                    owner,
                    &ttl,
                    self.config().get_term_scheme().script_flag(),
                ],
            )
            .await?;
        Ok(reply.map(|(epoch, ttl_ms)| PartitionLease {
            partition,
            owner: owner.to_owned(),
            epoch,
            expires_in: Duration::from_millis(ttl_ms),
        }))
    }

    /// One round trip (`renew_partitions.lua`), whatever the number of partitions (up to
    /// [`MAX_PARTITIONS_PER_CALL`](lease_core::backend::partitions::MAX_PARTITIONS_PER_CALL)); none
    /// for an empty slice.
    async fn renew_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<PartitionLease>> {
        if check::renew_partitions(self, group, partitions, owner, ttl)? == Batch::Empty {
            return Ok(Vec::new());
        }
        let key = partitions_key(self.config().get_key_prefix(), group);
        let ttl = ceil_millis(ttl).to_string();
        let numbers = partition_args(partitions);
        let mut args: Vec<&str> = Vec::with_capacity(numbers.len() + 2);
        args.push(owner);
        args.push(&ttl);
        args.extend(numbers.iter().map(String::as_str));
        let during = During::Op(Operation::RenewPartitions, group);
        let unexpected =
            |reply: &dyn std::fmt::Debug| unexpected_reply(during, self.label(), reply);
        let reply: Vec<u64> = self
            .eval(during, &SCRIPTS.renew_partitions, key.as_bytes(), &args)
            .await?;
        let Some((&ttl_ms, pairs)) = reply.split_first() else {
            return Err(unexpected(&reply));
        };
        if pairs.len() % 2 != 0 {
            return Err(unexpected(&reply));
        }
        pairs
            .chunks_exact(2)
            .map(|pair| match *pair {
                [partition, epoch] => Ok(PartitionLease {
                    partition: u32::try_from(partition).map_err(|_| unexpected(&pair))?,
                    owner: owner.to_owned(),
                    epoch,
                    expires_in: Duration::from_millis(ttl_ms),
                }),
                _ => Err(unexpected(&pair)),
            })
            .collect()
    }

    /// One round trip (`release_partitions.lua`), whatever the number of partitions; none for
    /// an empty slice.
    async fn release_partitions(
        &self,
        group: &str,
        partitions: &[u32],
        owner: &str,
    ) -> Result<usize> {
        if check::release_partitions(self, group, partitions, owner)? == Batch::Empty {
            return Ok(0);
        }
        let key = partitions_key(self.config().get_key_prefix(), group);
        let numbers = partition_args(partitions);
        let mut args: Vec<&str> = Vec::with_capacity(numbers.len() + 1);
        args.push(owner);
        args.extend(numbers.iter().map(String::as_str));
        let ended: usize = self
            .eval(
                During::Op(Operation::ReleasePartitions, group),
                &SCRIPTS.release_partitions,
                key.as_bytes(),
                &args,
            )
            .await?;
        if ended > 0 {
            self.changed(&lease_core::backend::notify::Topic::group(group));
        }
        Ok(ended)
    }

    /// One round trip (`owners.lua`, which reads the group's whole hash).
    async fn owners(&self, group: &str) -> Result<Vec<PartitionLease>> {
        check::owners(self, group)?;
        let key = partitions_key(self.config().get_key_prefix(), group);
        let reply: Vec<(u32, u64, u64, String)> = self
            .eval(
                During::Op(Operation::Owners, group),
                &SCRIPTS.owners,
                key.as_bytes(),
                &[],
            )
            .await?;
        let mut leases: Vec<PartitionLease> = reply
            .into_iter()
            .map(|(partition, epoch, remaining_ms, owner)| PartitionLease {
                partition,
                owner,
                epoch,
                expires_in: Duration::from_millis(remaining_ms),
            })
            .collect();
        leases.sort_by_key(|l| l.partition);
        Ok(leases)
    }
}
