//! The Lua scripts, one per operation, each run with `EVALSHA` and, when the server answers
//! `NOSCRIPT`, once more with `EVAL` (which also caches it for the next `EVALSHA`).
//!
//! Every script that judges time reads "now" from `redis.call('TIME')`, the server's clock, in
//! milliseconds (only `last_slot`, a plain read, needs no clock). Each touches exactly one key,
//! `KEYS[1]`, so Redis Cluster routes it by that key's hash tag.

use std::sync::LazyLock;

/// One script: its source and its SHA-1.
#[derive(Debug)]
pub(crate) struct LuaScript {
    /// A short name, for logs.
    pub(crate) name: &'static str,
    /// The source, sent with `EVAL` after a `NOSCRIPT`.
    pub(crate) source: &'static str,
    /// The SHA-1 of the source, sent with `EVALSHA`.
    pub(crate) sha: String,
}

impl LuaScript {
    fn new(name: &'static str, source: &'static str) -> LuaScript {
        let sha = redis::Script::new(source).get_hash().to_owned();
        LuaScript { name, source, sha }
    }
}

/// Every script the store runs.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) claim: LuaScript,
    pub(crate) renew: LuaScript,
    pub(crate) verify: LuaScript,
    pub(crate) release: LuaScript,
    pub(crate) force_release: LuaScript,
    pub(crate) get: LuaScript,
    pub(crate) forget: LuaScript,
    pub(crate) claim_slot: LuaScript,
    pub(crate) finish_slot: LuaScript,
    pub(crate) unfinished: LuaScript,
    pub(crate) claim_rerun: LuaScript,
    pub(crate) last_slot: LuaScript,
}

impl Scripts {
    /// All of them, for loading at start-up.
    pub(crate) fn all(&self) -> [&LuaScript; 12] {
        [
            &self.claim,
            &self.renew,
            &self.verify,
            &self.release,
            &self.force_release,
            &self.get,
            &self.forget,
            &self.claim_slot,
            &self.finish_slot,
            &self.unfinished,
            &self.claim_rerun,
            &self.last_slot,
        ]
    }
}

/// The scripts, hashed once per process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    claim: LuaScript::new("claim", include_str!("scripts/claim.lua")),
    renew: LuaScript::new("renew", include_str!("scripts/renew.lua")),
    verify: LuaScript::new("verify", include_str!("scripts/verify.lua")),
    release: LuaScript::new("release", include_str!("scripts/release.lua")),
    force_release: LuaScript::new("force_release", include_str!("scripts/force_release.lua")),
    get: LuaScript::new("get", include_str!("scripts/get.lua")),
    forget: LuaScript::new("forget", include_str!("scripts/forget.lua")),
    claim_slot: LuaScript::new("claim_slot", include_str!("scripts/claim_slot.lua")),
    finish_slot: LuaScript::new("finish_slot", include_str!("scripts/finish_slot.lua")),
    unfinished: LuaScript::new("unfinished", include_str!("scripts/unfinished.lua")),
    claim_rerun: LuaScript::new("claim_rerun", include_str!("scripts/claim_rerun.lua")),
    last_slot: LuaScript::new("last_slot", include_str!("scripts/last_slot.lua")),
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_reads_the_server_clock_and_sets_no_key_ttl() {
        for s in SCRIPTS.all() {
            assert_eq!(s.sha.len(), 40, "{}", s.name);
            // last_slot only reads the slot fields back: no clock decides anything there.
            assert_eq!(
                s.source.contains("redis.call('TIME')"),
                s.name != "last_slot",
                "{}",
                s.name
            );
            let upper = s.source.to_ascii_uppercase();
            for ttl_cmd in [
                "'EXPIRE'",
                "'PEXPIRE'",
                "'EXPIREAT'",
                "'PEXPIREAT'",
                "'SET'",
                "'SETEX'",
                "'PSETEX'",
                "'HEXPIRE'",
                "'HPEXPIRE'",
            ] {
                assert!(!upper.contains(ttl_cmd), "{} uses {ttl_cmd}", s.name);
            }
            assert_eq!(
                s.source.matches("KEYS[").count(),
                s.source.matches("KEYS[1]").count()
            );
        }
    }
}
