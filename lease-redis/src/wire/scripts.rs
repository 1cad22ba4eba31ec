//! The Lua scripts, one per operation, each run with `EVALSHA` and, when the server answers
//! `NOSCRIPT`, once more with `EVAL` (which also caches it for the next `EVALSHA`).
//!
//! The scripts that make a term or a partition epoch (`claim`, `claim_slot`, `claim_rerun`,
//! `acquire_partition`, `claim_permit`) begin with `scripts/prelude.lua`, joined to them when the crate is built
//! (`with_prelude!`): it holds the one copy of the term rule (`next_term`: stored + 1, floored
//! at the server's clock in microseconds under `TermScheme::ClockFloor`). The scripts that can
//! change hands (those five, `release`, `force_release`, `release_partitions`, `finish_slot`,
//! `release_permit`) have `scripts/notify.lua` joined to them too: the one copy of the hint
//! (`changed(kind)`, a `PUBLISH` on `<prefix>changes`; see the crate documentation, *Hints*).
//! The lease scripts among them (`claim`, `release`, `force_release`) also have
//! `scripts/waited.lua` after it, and hint through `changed_if_waited(kind)`: only while the
//! name's waiters' mark, their `KEYS[2]`, lives (a claim and release nobody waits for publish
//! nothing).
//! The scripts on a name's permits (`claim_permit`, `renew_permit`, `release_permit`,
//! `verify_permit`, `permits`) have `scripts/permit.lua` joined to them last: the one copy of
//! the permit record's form (`permit(field, value)`, `permit_value(…)`).
//!
//! Every script that judges time reads "now" from `redis.call('TIME')`, the server's clock, in
//! milliseconds (only `last_slot`, a plain read, needs no clock). Each touches exactly one key,
//! `KEYS[1]`, so Redis Cluster routes it by that key's hash tag — except the membership scripts
//! (`heartbeat`, `members`, `leave`), which touch a service's two keys, `KEYS[1]` and `KEYS[2]`,
//! both under the service's hash tag, the lease scripts that hint (`claim`, `release`,
//! `force_release`), whose `KEYS[2]` is the name's waiters' mark under the name's hash tag: one
//! slot too, and `renew_many`, which renews every name of its `KEYS` (up to 1,000 names, each
//! its own hash tag): one server only — Redis Cluster refuses it (`CROSSSLOT`) and the store then
//! renews the names one by one (`renewals.rs`).

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
    pub(crate) renew_many: LuaScript,
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
    pub(crate) acquire_partition: LuaScript,
    pub(crate) renew_partitions: LuaScript,
    pub(crate) release_partitions: LuaScript,
    pub(crate) owners: LuaScript,
    pub(crate) forget_group: LuaScript,
    pub(crate) heartbeat: LuaScript,
    pub(crate) members: LuaScript,
    pub(crate) leave: LuaScript,
    pub(crate) claim_permit: LuaScript,
    pub(crate) renew_permit: LuaScript,
    pub(crate) release_permit: LuaScript,
    pub(crate) verify_permit: LuaScript,
    pub(crate) permits: LuaScript,
}

impl Scripts {
    /// All of them, for loading at start-up.
    pub(crate) fn all(&self) -> [&LuaScript; 26] {
        [
            &self.claim,
            &self.renew,
            &self.renew_many,
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
            &self.acquire_partition,
            &self.renew_partitions,
            &self.release_partitions,
            &self.owners,
            &self.forget_group,
            &self.heartbeat,
            &self.members,
            &self.leave,
            &self.claim_permit,
            &self.renew_permit,
            &self.release_permit,
            &self.verify_permit,
            &self.permits,
        ]
    }
}

/// The source of `scripts/<file>` with `scripts/prelude.lua` and the hint `scripts/notify.lua`
/// in front, joined at build time.
macro_rules! with_prelude {
    ($file:literal) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            include_str!("scripts/notify.lua"),
            include_str!(concat!("scripts/", $file))
        )
    };
}

/// The source of the lease script `scripts/<file>` with the hint `scripts/notify.lua` and the
/// waiters' check `scripts/waited.lua` in front (and the term prelude before them, for the
/// claim), joined at build time: the lease scripts hint only while a waiter's mark lives.
macro_rules! with_waited {
    ($file:literal) => {
        concat!(
            include_str!("scripts/notify.lua"),
            include_str!("scripts/waited.lua"),
            include_str!(concat!("scripts/", $file))
        )
    };
    (prelude, $file:literal) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            include_str!("scripts/notify.lua"),
            include_str!("scripts/waited.lua"),
            include_str!(concat!("scripts/", $file))
        )
    };
}

/// The source of `scripts/<file>` with the hint `scripts/notify.lua` in front, joined at build
/// time: for the scripts that change hands without making a term.
macro_rules! with_notify {
    ($file:literal) => {
        concat!(
            include_str!("scripts/notify.lua"),
            include_str!(concat!("scripts/", $file))
        )
    };
}

/// The source of `scripts/<file>` with the instant comparison `scripts/instants.lua` and the
/// hint `scripts/notify.lua` in front (and the term prelude before them, for a script that
/// makes terms), joined at build time.
macro_rules! with_instants {
    ($file:literal) => {
        concat!(
            include_str!("scripts/instants.lua"),
            include_str!("scripts/notify.lua"),
            include_str!(concat!("scripts/", $file))
        )
    };
    (prelude, $file:literal) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            include_str!("scripts/instants.lua"),
            include_str!("scripts/notify.lua"),
            include_str!(concat!("scripts/", $file))
        )
    };
}

/// The source of the permit script `scripts/<file>` with the record form `scripts/permit.lua`
/// in front (and the hint `scripts/notify.lua` before it for a script that changes hands, and
/// the term prelude before that for the claim), joined at build time.
macro_rules! with_permit {
    ($file:literal) => {
        concat!(
            include_str!("scripts/permit.lua"),
            include_str!(concat!("scripts/", $file))
        )
    };
    (notify, $file:literal) => {
        concat!(
            include_str!("scripts/notify.lua"),
            include_str!("scripts/permit.lua"),
            include_str!(concat!("scripts/", $file))
        )
    };
    (prelude, $file:literal) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            include_str!("scripts/notify.lua"),
            include_str!("scripts/permit.lua"),
            include_str!(concat!("scripts/", $file))
        )
    };
}

/// The prelude every term-making script begins with.
#[cfg(test)]
const PRELUDE: &str = include_str!("scripts/prelude.lua");

/// The waiters' check joined after the hint to the lease scripts.
#[cfg(test)]
const WAITED: &str = include_str!("scripts/waited.lua");

/// The scripts, hashed once per process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    claim: LuaScript::new("claim", with_waited!(prelude, "claim.lua")),
    renew: LuaScript::new("renew", include_str!("scripts/renew.lua")),
    renew_many: LuaScript::new("renew_many", include_str!("scripts/renew_many.lua")),
    verify: LuaScript::new("verify", include_str!("scripts/verify.lua")),
    release: LuaScript::new("release", with_waited!("release.lua")),
    force_release: LuaScript::new("force_release", with_waited!("force_release.lua")),
    get: LuaScript::new("get", include_str!("scripts/get.lua")),
    forget: LuaScript::new("forget", include_str!("scripts/forget.lua")),
    claim_slot: LuaScript::new("claim_slot", with_instants!(prelude, "claim_slot.lua")),
    finish_slot: LuaScript::new("finish_slot", with_instants!("finish_slot.lua")),
    unfinished: LuaScript::new("unfinished", include_str!("scripts/unfinished.lua")),
    claim_rerun: LuaScript::new("claim_rerun", with_prelude!("claim_rerun.lua")),
    last_slot: LuaScript::new("last_slot", include_str!("scripts/last_slot.lua")),
    acquire_partition: LuaScript::new("acquire_partition", with_prelude!("acquire_partition.lua")),
    renew_partitions: LuaScript::new(
        "renew_partitions",
        include_str!("scripts/renew_partitions.lua"),
    ),
    release_partitions: LuaScript::new(
        "release_partitions",
        with_notify!("release_partitions.lua"),
    ),
    owners: LuaScript::new("owners", include_str!("scripts/owners.lua")),
    forget_group: LuaScript::new("forget_group", include_str!("scripts/forget_group.lua")),
    heartbeat: LuaScript::new("heartbeat", include_str!("scripts/heartbeat.lua")),
    members: LuaScript::new("members", include_str!("scripts/members.lua")),
    leave: LuaScript::new("leave", include_str!("scripts/leave.lua")),
    claim_permit: LuaScript::new("claim_permit", with_permit!(prelude, "claim_permit.lua")),
    renew_permit: LuaScript::new("renew_permit", with_permit!("renew_permit.lua")),
    release_permit: LuaScript::new("release_permit", with_permit!(notify, "release_permit.lua")),
    verify_permit: LuaScript::new("verify_permit", with_permit!("verify_permit.lua")),
    permits: LuaScript::new("permits", with_permit!("permits.lua")),
});

/// The scripts that touch two keys: a service's records and their expiries; a name's record
/// and its waiters' mark.
#[cfg(test)]
const TWO_KEY_SCRIPTS: [&str; 6] = [
    "heartbeat",
    "members",
    "leave",
    "claim",
    "release",
    "force_release",
];

/// The lease scripts that hint only while a waiter's mark lives (`scripts/waited.lua`).
#[cfg(test)]
const WAITED_SCRIPTS: [&str; 3] = ["claim", "release", "force_release"];

/// The scripts that make a term or an epoch: the ones the prelude is joined to.
#[cfg(test)]
const TERM_SCRIPTS: [&str; 5] = [
    "claim",
    "claim_slot",
    "claim_rerun",
    "acquire_partition",
    "claim_permit",
];

/// The scripts on a name's permits: the ones the record form is joined to.
#[cfg(test)]
const PERMIT_SCRIPTS: [&str; 5] = [
    "claim_permit",
    "renew_permit",
    "release_permit",
    "verify_permit",
    "permits",
];

/// The scripts that can change hands: the ones the hint is joined to.
#[cfg(test)]
const HINT_SCRIPTS: [&str; 10] = [
    "claim",
    "claim_permit",
    "release_permit",
    "release",
    "force_release",
    "acquire_partition",
    "release_partitions",
    "claim_slot",
    "finish_slot",
    "claim_rerun",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_term_rule_is_written_once_in_the_prelude() {
        assert!(PRELUDE.contains("local function next_term("));
        for s in SCRIPTS.all() {
            let makes_terms = TERM_SCRIPTS.contains(&s.name);
            assert_eq!(s.source.starts_with(PRELUDE), makes_terms, "{}", s.name);
            let body = s.source.strip_prefix(PRELUDE).unwrap_or(s.source);
            // The clock floor (seconds * 10^6 + microseconds) lives in the prelude alone, and
            // every term-making script calls it exactly once.
            assert!(
                !body.contains("1000000"),
                "{} floors terms by itself",
                s.name
            );
            assert_eq!(
                body.matches("next_term(").count(),
                usize::from(makes_terms),
                "{}",
                s.name
            );
        }
    }

    #[test]
    fn the_hint_is_written_once_and_sent_by_every_change_of_hands() {
        let notify = include_str!("scripts/notify.lua");
        let instants = include_str!("scripts/instants.lua");
        assert!(notify.contains("local function changed("));
        assert!(
            notify.contains("'changes'"),
            "keys.rs names the channel <prefix>changes"
        );
        for s in SCRIPTS.all() {
            let hints = HINT_SCRIPTS.contains(&s.name);
            let waited = WAITED_SCRIPTS.contains(&s.name);
            let body = s.source.strip_prefix(PRELUDE).unwrap_or(s.source);
            let body = body.strip_prefix(instants).unwrap_or(body);
            assert_eq!(body.starts_with(notify), hints, "{}", s.name);
            let own = body.strip_prefix(notify).unwrap_or(body);
            assert_eq!(own.starts_with(WAITED), waited, "{}", s.name);
            let own = own.strip_prefix(WAITED).unwrap_or(own);
            assert!(!own.contains("PUBLISH"), "{} publishes by itself", s.name);
            assert!(!own.contains("EXISTS"), "{} checks marks by itself", s.name);
            // The lease scripts hint only through the waiters' check; the others always.
            assert_eq!(own.contains("changed_if_waited('"), waited, "{}", s.name);
            assert_eq!(own.contains("changed('"), hints && !waited, "{}", s.name);
        }
    }

    #[test]
    fn the_lease_scripts_hint_only_while_a_waiters_mark_lives() {
        assert!(WAITED.contains("local function changed_if_waited("));
        assert!(WAITED.contains("redis.call('EXISTS', KEYS[2])"));
        for s in SCRIPTS.all() {
            assert_eq!(
                s.source.contains("changed_if_waited("),
                WAITED_SCRIPTS.contains(&s.name),
                "{}",
                s.name
            );
        }
    }

    #[test]
    fn renew_many_checks_each_name_as_renew_does() {
        let renew = include_str!("scripts/renew.lua");
        let many = SCRIPTS.renew_many.source;
        // The same liveness and holder check, the holder of the i-th key being ARGV[i + 1].
        assert!(renew.contains("if not exp or exp <= now or rec[1] ~= ARGV[1] then"));
        assert!(many.contains("if not exp or exp <= now or rec[1] ~= ARGV[i + 1] then"));
        assert!(many.contains("redis.call('HMGET', key, 'holder', 'term', 'expires_at_ms')"));
        // It alone walks a list of keys; it never hints (a renewal changes no hands).
        for s in SCRIPTS.all() {
            assert_eq!(
                s.source.contains("ipairs(KEYS)"),
                s.name == "renew_many",
                "{}",
                s.name
            );
        }
        assert!(!many.contains("changed"));
    }

    #[test]
    fn the_permit_record_is_written_once() {
        let notify = include_str!("scripts/notify.lua");
        let permit = include_str!("scripts/permit.lua");
        assert!(permit.contains("local function permit("));
        assert!(!permit.contains("changed('"));
        for s in SCRIPTS.all() {
            let body = s.source.strip_prefix(PRELUDE).unwrap_or(s.source);
            let body = body.strip_prefix(notify).unwrap_or(body);
            let reads_permits = PERMIT_SCRIPTS.contains(&s.name);
            assert_eq!(body.starts_with(permit), reads_permits, "{}", s.name);
            let own = body.strip_prefix(permit).unwrap_or(body);
            assert!(
                !own.contains("function permit"),
                "{} parses permits by itself",
                s.name
            );
            assert_eq!(own.contains("permit("), reads_permits, "{}", s.name);
        }
    }

    #[test]
    fn the_instant_comparison_is_written_once() {
        let instants = include_str!("scripts/instants.lua");
        assert!(instants.contains("local function cmp("));
        for s in SCRIPTS.all() {
            let compares = ["claim_slot", "finish_slot"].contains(&s.name);
            let body = s.source.strip_prefix(PRELUDE).unwrap_or(s.source);
            assert_eq!(body.starts_with(instants), compares, "{}", s.name);
            let own = body.strip_prefix(instants).unwrap_or(body);
            assert!(
                !own.contains("function cmp("),
                "{} compares instants by itself",
                s.name
            );
        }
    }

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
            let keys = s.source.matches("KEYS[").count();
            let one_or_two =
                s.source.matches("KEYS[1]").count() + s.source.matches("KEYS[2]").count();
            assert_eq!(keys, one_or_two, "{} uses a third key", s.name);
            assert_eq!(
                s.source.contains("KEYS[2]"),
                TWO_KEY_SCRIPTS.contains(&s.name),
                "{}",
                s.name
            );
        }
    }
}
