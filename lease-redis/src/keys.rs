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

use std::fmt::Write as _;

/// The record key of `name` under `prefix`.
pub(crate) fn record_key(prefix: &str, name: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + name.len() + 2);
    key.push_str(prefix);
    key.push('{');
    for c in name.chars() {
        match c {
            '%' => key.push_str("%25"),
            '{' => key.push_str("%7B"),
            '}' => key.push_str("%7D"),
            c => key.push(c),
        }
    }
    key.push('}');
    key
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

/// A `SCAN … MATCH` pattern for every record key under `prefix`.
pub(crate) fn scan_pattern(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 4);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    let _ = write!(pattern, "{{*}}");
    pattern
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

    #[test]
    fn scan_patterns_escape_the_prefix() {
        assert_eq!(scan_pattern("lease:"), "lease:{*}");
        assert_eq!(scan_pattern("a*b?[c]\\:"), "a\\*b\\?\\[c\\]\\\\:{*}");
    }
}
