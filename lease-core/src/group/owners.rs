//! A worker's owner ids, one per generation.

use crate::store::partitions::owner_id;

/// The owner ids of one worker: one per generation, all sharing the prefix `node@` + 12 hex
/// digits minted at start, and ending in the generation as 4 hex digits (so an owner id keeps
/// the shape of [`owner_id`]'s). A new generation starts whenever a release under the current
/// one had no answer: such a release may still reach the store later, and must not end a
/// later holding — so nothing is acquired again under an owner id it could still hit.
#[derive(Debug)]
pub(super) struct Owners {
    prefix: String,
    generation: std::sync::atomic::AtomicU32,
}

impl Owners {
    pub(super) fn new(node: &str) -> Owners {
        let base = owner_id(node);
        let prefix = base
            .get(..base.len().saturating_sub(4))
            .unwrap_or(&base)
            .to_owned();
        Owners {
            prefix,
            generation: std::sync::atomic::AtomicU32::new(0),
        }
    }

    pub(super) fn id(&self, generation: u32) -> String {
        format!("{}{:04x}", self.prefix, generation.min(0xffff))
    }

    pub(super) fn current(&self) -> String {
        self.id(self.generation.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Moves to the next generation and returns its owner id.
    pub(super) fn next(&self) -> String {
        let g = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.id(g.saturating_add(1))
    }

    pub(super) fn owns(&self, owner: &str) -> bool {
        owner.len() == self.prefix.len() + 4 && owner.starts_with(&self.prefix)
    }
}
