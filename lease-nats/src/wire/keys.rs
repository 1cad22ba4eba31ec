//! Lease names, partitions and members as KV keys.
//!
//! A KV key may hold only `[-/_=.a-zA-Z0-9]`, and `.` separates subject tokens. A lease name may
//! hold any printable UTF-8, so the store escapes it: ASCII letters, digits, `-`, `_` and `/`
//! stay as they are, and every other byte becomes `=` and two upper-case hex digits (`.` is
//! `=2E`, a space `=20`, `é` `=C3=A9`). The escape is one-to-one, so names are compared byte for
//! byte, `orders/compactor` stays readable in `nats kv ls`, and no key holds a `.`, a wildcard
//! or an empty token. A name of [`MAX_NAME_BYTES`] bytes becomes a key of at most three times
//! as many characters, well within the subject limits of the server.
//!
//! A lease key is one subject token (it never holds a `.`); partition, permit and member keys
//! hold three, so they never collide with a lease: `part.<group escaped>.<partition in
//! decimal>`, `permit.<name escaped>.<permit in decimal>` and `member.<service escaped>.<node
//! escaped>`. The escape is the lease names' one, so a group's
//! or a service's keys are exactly those under `part.<group>.` or `member.<service>.`: a
//! subject filter `….>` lists them and nothing else.

/// The longest lease name, in bytes. 255 bytes escape to at most 765 key characters.
pub const MAX_NAME_BYTES: usize = 255;

/// The KV key for `name`.
pub(crate) fn encode_key(name: &str) -> String {
    let mut key = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'/') {
            key.push(char::from(b));
        } else {
            key.push('=');
            key.push(hex_digit(b >> 4));
            key.push(hex_digit(b & 0x0f));
        }
    }
    key
}

fn hex_digit(n: u8) -> char {
    char::from(if n < 10 { b'0' + n } else { b'A' + n - 10 })
}

/// The name a key was made from, or `None` when `key` is not an escaped name.
pub(crate) fn decode_key(key: &str) -> Option<String> {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'=' {
            let hex = key.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The first token of every partition key.
const PARTITION_TOKEN: &str = "part";

/// The first token of every member key.
const MEMBER_TOKEN: &str = "member";

/// The first token of every permit key.
const PERMIT_TOKEN: &str = "permit";

/// The key of `partition` of `group`.
pub(crate) fn partition_key(group: &str, partition: u32) -> String {
    format!("{}{partition}", partition_prefix(group))
}

/// The start every key of `group`'s partitions has, ending with `.`.
pub(crate) fn partition_prefix(group: &str) -> String {
    format!("{PARTITION_TOKEN}.{}.", encode_key(group))
}

/// The partition number a key suffix (after [`partition_prefix`]) names, if it is one this
/// store writes (decimal, no leading zero).
pub(crate) fn decode_partition(suffix: &str) -> Option<u32> {
    let n: u32 = suffix.parse().ok()?;
    (n.to_string() == suffix).then_some(n)
}

/// The key of permit `permit` of the counted name `name`.
pub(crate) fn permit_key(name: &str, permit: u32) -> String {
    format!("{}{permit}", permit_prefix(name))
}

/// The start every permit key of `name` has, ending with `.`.
pub(crate) fn permit_prefix(name: &str) -> String {
    format!("{PERMIT_TOKEN}.{}.", encode_key(name))
}

/// The key prefix and subject filter under which a listing of names finds the lease keys
/// (`*`: one token, which a lease key is and no other key is) and the permit keys
/// (`permit.*.*`). A subject filter matches whole tokens only, and a lease key is one token, so
/// the server cannot narrow either to a name prefix: the store decodes each key and compares
/// the name.
pub(crate) const NAME_FILTERS: [(&str, &str); 2] = [("", "*"), ("permit.", "*.*")];

/// The name a key listed under [`NAME_FILTERS`] holds (after the filter's prefix), and whether
/// it is a counted name's (a permit key) rather than a lease's; `None` for a key of another
/// form.
pub(crate) fn listed_name(filter_prefix: &str, key: &str) -> Option<(String, bool)> {
    if filter_prefix.is_empty() {
        if key.contains('.') {
            return None;
        }
        return decode_key(key).map(|name| (name, false));
    }
    let (name, permit) = key.rsplit_once('.')?;
    decode_partition(permit)?;
    decode_key(name).map(|name| (name, true))
}

/// The key of `node`'s membership of `service`.
pub(crate) fn member_key(service: &str, node: &str) -> String {
    format!("{}{}", member_prefix(service), encode_key(node))
}

/// The start every member key of `service` has, ending with `.`.
pub(crate) fn member_prefix(service: &str) -> String {
    format!("{MEMBER_TOKEN}.{}.", encode_key(service))
}

/// The topic a key of the lease bucket is about: a lease key (one token) is its name's lease,
/// a partition key its group, a permit key its name's lease (which permit waiters watch); a
/// member key, or a key this store does not write, none.
pub(crate) fn topic_of(key: &str) -> Option<lease_core::backend::notify::Topic> {
    use lease_core::backend::notify::Topic;
    match key.split_once('.') {
        None => decode_key(key).map(Topic::lease),
        Some((PARTITION_TOKEN, rest)) => {
            let (group, partition) = rest.rsplit_once('.')?;
            decode_partition(partition)?;
            decode_key(group).map(Topic::group)
        }
        Some((PERMIT_TOKEN, rest)) => {
            let (name, permit) = rest.rsplit_once('.')?;
            decode_partition(permit)?;
            decode_key(name).map(Topic::lease)
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_escaped_one_to_one() {
        assert_eq!(encode_key("orders/compactor"), "orders/compactor");
        assert_eq!(encode_key("a.b"), "a=2Eb");
        assert_eq!(encode_key("a=b"), "a=3Db");
        assert_eq!(encode_key("job "), "job=20");
        assert_eq!(encode_key("jöb"), "j=C3=B6b");
        assert_eq!(encode_key("*>"), "=2A=3E");
        let names = [
            "Job",
            "job",
            "job ",
            "jöb",
            "jo\u{308}b",
            ".",
            "..",
            "a.",
            "=2E",
            "=",
        ];
        let keys: std::collections::HashSet<String> = names.iter().map(|n| encode_key(n)).collect();
        assert_eq!(keys.len(), names.len(), "two names share a key");
        for n in names {
            let k = encode_key(n);
            assert!(
                k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-/_=".contains(&b)),
                "{k}"
            );
            assert_eq!(decode_key(&k).as_deref(), Some(n));
        }
        let longest = "ü".repeat(MAX_NAME_BYTES / 2);
        assert!(encode_key(&longest).len() <= 3 * MAX_NAME_BYTES);
    }

    #[test]
    fn listed_keys_tell_their_kind() {
        let name = "a.b*>";
        assert_eq!(
            listed_name("", &encode_key(name)),
            Some((name.to_owned(), false))
        );
        let permit = permit_key(name, 3);
        let tail = permit.strip_prefix(NAME_FILTERS[1].0).unwrap();
        assert_eq!(listed_name("permit.", tail), Some((name.to_owned(), true)));
        assert_eq!(listed_name("permit.", "x.03"), None);
        assert_eq!(listed_name("", "part.x.1"), None);
    }

    #[test]
    fn keys_name_their_topics() {
        use lease_core::backend::notify::Topic;
        assert_eq!(topic_of(&encode_key("a.b c")), Some(Topic::lease("a.b c")));
        assert_eq!(
            topic_of(&partition_key("g.1", 7)),
            Some(Topic::group("g.1"))
        );
        assert_eq!(topic_of(&permit_key("g.1", 2)), Some(Topic::lease("g.1")));
        for other in [
            member_key("svc", "n"),
            "permit.g".into(),
            "permit.g.01".into(),
            "part.g".into(),
            "part.g.x".into(),
            "=zz".into(),
        ] {
            assert_eq!(topic_of(&other), None, "{other}");
        }
    }

    #[test]
    fn partition_and_member_keys_stay_apart() {
        assert_eq!(partition_key("orders", 7), "part.orders.7");
        assert_eq!(partition_key("a.b", 0), "part.a=2Eb.0");
        assert_eq!(member_key("svc", "node 1"), "member.svc.node=201");
        assert_eq!(permit_key("a.b", 3), "permit.a=2Eb.3");
        assert!(!permit_key("ab", 1).starts_with(&permit_prefix("a")));
        assert_ne!(permit_key("a", 1), partition_key("a", 1));
        assert!(partition_key("a", 1).starts_with(&partition_prefix("a")));
        assert!(!partition_key("ab", 1).starts_with(&partition_prefix("a")));
        assert!(!member_key("a.b", "c").starts_with(&member_prefix("a")));
        // A lease key never holds a '.', so it is never a partition or member key.
        assert!(!encode_key("part.a.1").contains('.'));
        assert_eq!(decode_partition("12"), Some(12));
        assert_eq!(decode_partition("4294967295"), Some(u32::MAX));
        for bad in ["", "012", "+1", "-1", "1.2", "x", "4294967296"] {
            assert_eq!(decode_partition(bad), None, "{bad:?}");
        }
    }
}
