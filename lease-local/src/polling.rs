//! The polling-lease operations of the in-memory store.

use std::time::Duration;

use lease_core::backend::async_trait;
use lease_core::{Result, backend::polling::PollingStore};
use tokio::time::Instant;

use crate::store::*;

#[async_trait]
impl PollingStore for MemoryStore {
    async fn try_acquire(
        &self,
        name: &str,
        holder: &[u8],
        ttl: Duration,
    ) -> Result<(bool, Vec<u8>)> {
        let now = Instant::now();
        let mut st = self.lock();
        match st.polled.get_mut(name) {
            Some((h, until)) if *until > now && h.as_slice() != holder => Ok((false, h.clone())),
            _ => {
                st.polled
                    .insert(name.to_owned(), (holder.to_vec(), now + ttl));
                Ok((true, holder.to_vec()))
            }
        }
    }

    async fn release(&self, name: &str, holder: &[u8]) -> Result<()> {
        let mut st = self.lock();
        if st
            .polled
            .get(name)
            .is_some_and(|(h, _)| h.as_slice() == holder)
        {
            st.polled.remove(name);
        }
        Ok(())
    }
}
