//! How lease names become Redis keys.
//!
//! A name's record lives at `<prefix>{<escaped name>}`. The braces make the whole escaped name
//! the key's Redis Cluster hash tag, so every operation on one name goes to one slot. Redis takes
//! as the tag whatever lies between the first `{` and the first `}` after it, so:
//!
//! - the prefix may hold neither `{` nor `}` (checked when the configuration is built), so the
//!   first `{` is ours;
//! - the name is escaped so that it holds no `}`: `%` becomes `%25`, `{` becomes `%7B` and `}`
//!   becomes `%7D`; every other character is kept as it is. The escape is one-to-one, so two
//!   names never share a key, and names stay readable in `redis-cli --scan`.
//!
//! Partition groups and membership services use the same tag with a fixed suffix after it:
//!
//! - `<prefix>{<escaped group>}:partitions`: a group's partition leases (one hash);
//! - `<prefix>{<escaped name>}:permits`: a counted name's permits (one hash);
//! - `<prefix>{<escaped name>}:waiting`: the mark that the name has waiters (a plain key with a
//!   TTL of [`MARK_TTL`](crate::hint_state::MARK_TTL), set by the stores that wait on it);
//! - `<prefix>{<escaped service>}:members`: a service's member records (one hash), and
//!   `<prefix>{<escaped service>}:members:expiry`: their expiries (one sorted set).
//!
//! A lease record key ends with the `}` the store adds and these never do (the escaped name
//! holds no `}`), so no group or service key is ever a lease record key, whatever the names, and
//! `SCAN … MATCH <prefix>{*}` (the pattern of [`scan_pattern`]) never lists them. All the keys of
//! one group, or of one service, share the group's (service's) hash tag, so a script on them is
//! one Redis Cluster slot.

use std::fmt::Write as _;

/// The record key of `name` under `prefix`.
pub(crate) fn record_key(prefix: &str, name: &str) -> String {
    tagged(prefix, name, "")
}

/// The mark that `name` has waiters: `<prefix>{<escaped name>}:waiting`, a plain key with a
/// short TTL that every store with waiters on `name` keeps set from its subscriber connection
/// (see `hints.rs`); the lease scripts publish their hint only while it lives.
pub(crate) fn waiting_key(prefix: &str, name: &str) -> String {
    tagged(prefix, name, ":waiting")
}

/// The hash holding every partition lease of `group`.
pub(crate) fn partitions_key(prefix: &str, group: &str) -> String {
    tagged(prefix, group, ":partitions")
}

/// The hash holding every permit of the counted name `name` and the name's greatest term.
pub(crate) fn permits_key(prefix: &str, name: &str) -> String {
    tagged(prefix, name, PERMITS_SUFFIX)
}

/// The hash holding `service`'s member records (node id → address and groups).
pub(crate) fn members_key(prefix: &str, service: &str) -> String {
    tagged(prefix, service, ":members")
}

/// The sorted set of `service`'s member expiries (node id, scored by expiry in ms).
pub(crate) fn member_expiry_key(prefix: &str, service: &str) -> String {
    tagged(prefix, service, ":members:expiry")
}

/// `<prefix>{<escaped name>}<suffix>`.
fn tagged(prefix: &str, name: &str, suffix: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + name.len() + suffix.len() + 2);
    key.push_str(prefix);
    key.push('{');
    escape_into(&mut key, name);
    key.push('}');
    key.push_str(suffix);
    key
}

/// `name` escaped (`%`, `{`, `}` as `%25`, `%7B`, `%7D`) onto `key`. Each character escapes
/// on its own, and no escape is the start of another, so a name starts with a prefix exactly
/// when its escape starts with the prefix's.
fn escape_into(key: &mut String, name: &str) {
    // Most names hold nothing to escape: copy them whole.
    let mut rest = name;
    while let Some(at) = rest.find(['%', '{', '}']) {
        let (plain, tail) = rest.split_at(at);
        key.push_str(plain);
        let mut tail = tail.chars();
        match tail.next() {
            Some('%') => key.push_str("%25"),
            Some('{') => key.push_str("%7B"),
            _ => key.push_str("%7D"),
        }
        rest = tail.as_str();
    }
    key.push_str(rest);
}

/// The lease name held in `key`, when `key` is a record key under `prefix`.
pub(crate) fn name_of(prefix: &str, key: &str) -> Option<String> {
    let escaped = key
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    let mut name = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find(['%', '{', '}']) {
        name.push_str(rest.get(..at)?);
        let tail = rest.get(at..)?;
        let (c, len) = if tail.starts_with("%25") {
            ('%', 3)
        } else if tail.starts_with("%7B") {
            ('{', 3)
        } else if tail.starts_with("%7D") {
            ('}', 3)
        } else {
            return None;
        };
        name.push(c);
        rest = tail.get(len..)?;
    }
    name.push_str(rest);
    Some(name)
}

/// What the scripts' hints end the channel name with (`scripts/notify.lua` derives the same
/// name from the key it runs on: everything before the key's first `{` is the prefix).
const CHANNEL_SUFFIX: &str = "changes";

/// The channel the store's scripts publish their hints on: `<prefix>changes`, e.g.
/// `lease:changes`. Channels are not keys, so this never meets a record.
pub(crate) fn changes_channel(prefix: &str) -> String {
    format!("{prefix}{CHANNEL_SUFFIX}")
}

/// The channel [`RedisConfig::replica_acks`](crate::RedisConfig::replica_acks) publishes on
/// in each operation's pipeline, so that the `WAIT` after it covers every write the primary
/// applied: `<prefix>replica-sync`. Nobody subscribes to it.
pub(crate) fn replica_sync_channel(prefix: &str) -> String {
    format!("{prefix}replica-sync")
}

/// The topics a hint names: its payload is `<kind> <key>` (`scripts/notify.lua`), the kind `lease`
/// (a lease record changed hands), `slots` (a job's record: its slots, and its lease with them),
/// `group` (a group's partitions changed hands) or `permits` (a counted name's permits changed
/// hands: the name's lease topic, which permit waiters watch). Nothing for a payload this store did
/// not write.
pub(crate) fn hinted_topics(
    prefix: &str,
    payload: &[u8],
) -> Vec<lease_core::backend::notify::Topic> {
    use lease_core::backend::notify::Topic;
    let Some((kind, key)) = std::str::from_utf8(payload)
        .ok()
        .and_then(|p| p.split_once(' '))
    else {
        return Vec::new();
    };
    match kind {
        "lease" => name_of(prefix, key).map(Topic::lease).into_iter().collect(),
        "slots" => name_of(prefix, key)
            .map(|job| vec![Topic::slots(job.clone()), Topic::lease(job)])
            .unwrap_or_default(),
        "permits" => key
            .strip_suffix(":permits")
            .and_then(|k| name_of(prefix, k))
            .map(Topic::lease)
            .into_iter()
            .collect(),
        "group" => key
            .strip_suffix(":partitions")
            .and_then(|k| name_of(prefix, k))
            .map(Topic::group)
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

/// A `SCAN … MATCH` pattern for every record key under `prefix`.
pub(crate) fn scan_pattern(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 4);
    glob_escape_into(&mut pattern, prefix);
    let _ = write!(pattern, "{{*}}");
    pattern
}

/// A `SCAN … MATCH` pattern for every key under the key prefix `prefix` of a name that starts
/// with `name_prefix`: `<prefix>{<escaped name prefix>*`, with the glob's special characters
/// (`*`, `?`, `[`, `]`, `\`) of both taken literally. It matches the record keys and the permit
/// keys of those names, and their partition and member keys too: [`listed_name`] tells them
/// apart.
pub(crate) fn names_pattern(prefix: &str, name_prefix: &str) -> String {
    let mut escaped = String::with_capacity(name_prefix.len());
    escape_into(&mut escaped, name_prefix);
    let mut pattern = String::with_capacity(prefix.len() + escaped.len() + 4);
    glob_escape_into(&mut pattern, prefix);
    pattern.push('{');
    glob_escape_into(&mut pattern, &escaped);
    pattern.push('*');
    pattern
}

/// The name a key holds, and whether it is a counted name's (its permits' key) rather than a
/// lease's (its record key); `None` for any other key.
pub(crate) fn listed_name(prefix: &str, key: &str) -> Option<(String, bool)> {
    if let Some(record) = key.strip_suffix(PERMITS_SUFFIX) {
        return name_of(prefix, record).map(|name| (name, true));
    }
    name_of(prefix, key).map(|name| (name, false))
}

/// What a permit key ends with, after its tag.
const PERMITS_SUFFIX: &str = ":permits";

/// `text` onto `pattern` with every glob character escaped.
fn glob_escape_into(pattern: &mut String, text: &str) {
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_tag_is_always_the_whole_name() {
        for name in ["a", "orders/{x}", "}{", "%7D", "{}", "é{ü}%"] {
            let key = record_key("lease:", name);
            let open = key.find('{').unwrap();
            let close = open + 1 + key[open + 1..].find('}').unwrap();
            assert_eq!(close, key.len() - 1, "{key}: the tag ends early");
            assert_eq!(name_of("lease:", &key).as_deref(), Some(name), "{key}");
        }
        assert_eq!(record_key("lease:", "a{b}c%"), "lease:{a%7Bb%7Dc%25}");
        assert_ne!(record_key("p:", "%7D"), record_key("p:", "}"));
        assert_eq!(name_of("lease:", "other:{a}"), None);
        assert_eq!(name_of("lease:", "lease:{a%zz}"), None);
    }

    /// The Redis Cluster hash tag of `key`: between the first `{` and the next `}`.
    fn tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = open + 1 + key[open + 1..].find('}').unwrap();
        &key[open + 1..close]
    }

    #[test]
    fn group_and_service_keys_share_their_tag_and_are_never_record_keys() {
        for name in [
            "a",
            "orders/{x}",
            "}{",
            "%7D",
            "{}",
            "é{ü}%",
            "a}:partitions",
        ] {
            let record = record_key("lease:", name);
            let parts = partitions_key("lease:", name);
            let members = members_key("lease:", name);
            let expiry = member_expiry_key("lease:", name);
            let permits = permits_key("lease:", name);
            for key in [&parts, &members, &expiry, &permits] {
                assert_eq!(tag(key), tag(&record), "{key}");
                assert_eq!(name_of("lease:", key), None, "{key} parses as a record key");
                assert!(!key.ends_with('}'), "{key} matches the SCAN pattern");
            }
            assert_eq!(parts, format!("{record}:partitions"));
            assert_eq!(permits, format!("{record}:permits"));
            assert_eq!(expiry, format!("{members}:expiry"));
            for other in ["b", "a}", "a}:partitions", "a%7D:partitions"] {
                if other != name {
                    assert_ne!(partitions_key("lease:", other), parts, "{other} vs {name}");
                    assert_ne!(record_key("lease:", other), parts, "{other} vs {name}");
                    assert_ne!(members_key("lease:", other), members, "{other} vs {name}");
                }
            }
        }
        assert_eq!(
            partitions_key("p:", "orders{eu}"),
            "p:{orders%7Beu%7D}:partitions"
        );
    }

    #[test]
    fn hints_name_their_topics() {
        use lease_core::backend::notify::Topic;
        let key = record_key("p:", "a{b}");
        assert_eq!(
            hinted_topics("p:", format!("lease {key}").as_bytes()),
            vec![Topic::lease("a{b}")]
        );
        assert_eq!(
            hinted_topics("p:", format!("slots {key}").as_bytes()),
            vec![Topic::slots("a{b}"), Topic::lease("a{b}")]
        );
        let group = partitions_key("p:", "g}:partitions");
        assert_eq!(
            hinted_topics("p:", format!("group {group}").as_bytes()),
            vec![Topic::group("g}:partitions")]
        );
        assert_eq!(
            hinted_topics(
                "p:",
                format!("permits {}", permits_key("p:", "a{b}")).as_bytes()
            ),
            vec![Topic::lease("a{b}")]
        );
        for junk in [
            "",
            "lease",
            "lease other:{a}",
            "group p:{a}",
            "permits p:{a}",
            "what p:{a}",
        ] {
            assert!(hinted_topics("p:", junk.as_bytes()).is_empty(), "{junk}");
        }
        assert!(hinted_topics("p:", b"lease \xff").is_empty());
        assert_eq!(changes_channel("lease:"), "lease:changes");
    }

    #[test]
    fn name_patterns_escape_both_prefixes_and_keys_tell_their_kind() {
        assert_eq!(names_pattern("lease:", "a*b"), "lease:{a\\*b*");
        assert_eq!(
            names_pattern("k[", "%{}?[]\\"),
            "k\\[{%25%7B%7D\\?\\[\\]\\\\*"
        );
        let name = "x*{y}%";
        assert_eq!(
            listed_name("p:", &record_key("p:", name)),
            Some((name.to_owned(), false))
        );
        assert_eq!(
            listed_name("p:", &permits_key("p:", name)),
            Some((name.to_owned(), true))
        );
        assert_eq!(listed_name("p:", &partitions_key("p:", name)), None);
        assert_eq!(listed_name("p:", &members_key("p:", name)), None);
        assert_eq!(listed_name("p:", &member_expiry_key("p:", name)), None);
    }

    #[test]
    fn scan_patterns_escape_the_prefix() {
        assert_eq!(scan_pattern("lease:"), "lease:{*}");
        assert_eq!(scan_pattern("a*b?[c]\\:"), "a\\*b\\?\\[c\\]\\\\:{*}");
    }
}
