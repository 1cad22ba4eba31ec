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

use bytes::Bytes;
use lease_core::HolderToken;

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
#[cfg(test)]
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
