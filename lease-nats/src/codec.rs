//! Lease names as KV keys, and lease records as KV values.
//!
//! # Keys
//!
//! A KV key may hold only `[-/_=.a-zA-Z0-9]`, and `.` separates subject tokens. A lease name may
//! hold any printable UTF-8, so the store escapes it: ASCII letters, digits, `-`, `_` and `/`
//! stay as they are, and every other byte becomes `=` and two upper-case hex digits (`.` is
//! `=2E`, a space `=20`, `é` `=C3=A9`). The escape is one-to-one, so names are compared byte for
//! byte, `orders/compactor` stays readable in `nats kv ls`, and no key holds a `.`, a wildcard
//! or an empty token. A name of [`MAX_NAME_BYTES`] bytes becomes a key of at most three times
//! as many characters, well within the subject limits of the server.
//!
//! # Values
//!
//! `lease1;<holder: 32 hex digits>;<term>;<instance>` — the instance label last, so it may hold
//! any character. A term of `0` means "the stream sequence of this very message": a claim cannot
//! know its own sequence before the server assigns it, so it writes `0`, and each renewal writes
//! the claim's sequence explicitly.
//!
//! # Partition and member records
//!
//! A lease key is one subject token (it never holds a `.`); partition and member keys hold
//! three, so they never collide with a lease:
//!
//! - `part.<group escaped>.<partition in decimal>`, value `part1;<epoch>;<owner>` — an epoch of
//!   `0` means "the stream sequence of this very message", as for a lease's term;
//! - `member.<service escaped>.<node escaped>`, value `member1`, a line feed, the address, a line
//!   feed, and the groups one per line ([`lease_core::backend::encode_groups`]). Addresses and groups hold
//!   no control characters, so the line feeds are unambiguous.
//!
//! The escape is the lease names' one, so a group's or a service's keys are exactly those under
//! `part.<group>.` or `member.<service>.`: a subject filter `….>` lists them and nothing else.

use bytes::Bytes;
use lease_core::backend::HolderToken;

/// The longest lease name, in bytes. 255 bytes escape to at most 765 key characters.
pub const MAX_NAME_BYTES: usize = 255;

const VALUE_TAG: &str = "lease1";

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

/// The key of `node`'s membership of `service`.
pub(crate) fn member_key(service: &str, node: &str) -> String {
    format!("{}{}", member_prefix(service), encode_key(node))
}

/// The start every member key of `service` has, ending with `.`.
pub(crate) fn member_prefix(service: &str) -> String {
    format!("{MEMBER_TOKEN}.{}.", encode_key(service))
}

const PARTITION_TAG: &str = "part1";
const MEMBER_TAG: &str = "member1";

/// What one KV value says about a partition lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionRecord {
    /// The epoch, or 0 for "this message's own sequence".
    pub(crate) epoch: u64,
    pub(crate) owner: String,
}

impl PartitionRecord {
    pub(crate) fn encode(&self) -> Bytes {
        Bytes::from(format!("{PARTITION_TAG};{};{}", self.epoch, self.owner))
    }

    pub(crate) fn decode(value: &[u8]) -> Option<PartitionRecord> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.splitn(3, ';');
        if parts.next()? != PARTITION_TAG {
            return None;
        }
        let epoch = parts.next()?.parse().ok()?;
        let owner = parts.next()?.to_owned();
        Some(PartitionRecord { epoch, owner })
    }

    /// The epoch, given the stream sequence of the message this record was read from.
    pub(crate) fn epoch_at(&self, revision: u64) -> u64 {
        if self.epoch == 0 {
            revision
        } else {
            self.epoch
        }
    }
}

/// What one KV value says about a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberRecord {
    pub(crate) address: String,
    pub(crate) groups: Vec<String>,
}

impl MemberRecord {
    pub(crate) fn encode(&self) -> Bytes {
        Bytes::from(format!(
            "{MEMBER_TAG}\n{}\n{}",
            self.address,
            lease_core::backend::encode_groups(&self.groups)
        ))
    }

    pub(crate) fn decode(value: &[u8]) -> Option<MemberRecord> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.splitn(3, '\n');
        if parts.next()? != MEMBER_TAG {
            return None;
        }
        let address = parts.next()?.to_owned();
        let groups = lease_core::backend::decode_groups(parts.next()?);
        Some(MemberRecord { address, groups })
    }
}

/// What one KV value says about a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) holder: HolderToken,
    /// The claim's stream sequence, or 0 for "this message's own sequence".
    pub(crate) term: u64,
    pub(crate) instance: String,
}

impl Record {
    pub(crate) fn encode(&self) -> Bytes {
        Bytes::from(format!(
            "{VALUE_TAG};{};{};{}",
            self.holder.to_hex(),
            self.term,
            self.instance
        ))
    }

    pub(crate) fn decode(value: &[u8]) -> Option<Record> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.splitn(4, ';');
        if parts.next()? != VALUE_TAG {
            return None;
        }
        let holder = HolderToken::from_hex(parts.next()?)?;
        let term = parts.next()?.parse().ok()?;
        let instance = parts.next()?.to_owned();
        Some(Record {
            holder,
            term,
            instance,
        })
    }

    /// The term, given the stream sequence of the message this record was read from.
    pub(crate) fn term_at(&self, revision: u64) -> u64 {
        if self.term == 0 { revision } else { self.term }
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
    fn partition_and_member_keys_stay_apart() {
        assert_eq!(partition_key("orders", 7), "part.orders.7");
        assert_eq!(partition_key("a.b", 0), "part.a=2Eb.0");
        assert_eq!(member_key("svc", "node 1"), "member.svc.node=201");
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

    #[test]
    fn partition_and_member_records_round_trip() {
        let r = PartitionRecord {
            epoch: 0,
            owner: "node;a@1".into(),
        };
        let back = PartitionRecord::decode(&r.encode()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.epoch_at(9), 9);
        let r = PartitionRecord { epoch: 5, ..r };
        assert_eq!(PartitionRecord::decode(&r.encode()).unwrap().epoch_at(9), 5);
        for bad in [&b"part1;x;o"[..], b"part1;1", b"lease1;1;o", b"\xff"] {
            assert_eq!(PartitionRecord::decode(bad), None);
        }
        for (address, groups) in [
            (
                "10.0.0.1:7000",
                vec!["orders".to_string(), "mail".to_string()],
            ),
            ("", vec![]),
            ("a;b", vec!["g".to_string()]),
        ] {
            let m = MemberRecord {
                address: address.into(),
                groups,
            };
            assert_eq!(MemberRecord::decode(&m.encode()), Some(m));
        }
        assert_eq!(MemberRecord::decode(b"member1"), None);
        assert_eq!(MemberRecord::decode(b"part1;1;o"), None);
    }

    #[test]
    fn records_round_trip() {
        let r = Record {
            holder: HolderToken::mint(),
            term: 0,
            instance: "worker;7 é".into(),
        };
        let back = Record::decode(&r.encode()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.term_at(42), 42);
        let r2 = Record { term: 7, ..r };
        assert_eq!(Record::decode(&r2.encode()).unwrap().term_at(42), 7);
        for bad in [
            &b""[..],
            b"lease1;zz;1;a",
            b"other;x",
            b"lease1;00;1",
            b"\xff",
        ] {
            assert_eq!(Record::decode(bad), None);
        }
    }
}
