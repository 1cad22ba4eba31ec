//! Lease, partition and member records as KV values.
//!
//! - A lease: `lease1;<holder: 32 hex digits>;<term>;<instance>` — the instance label last, so
//!   it may hold any character. A term of `0` means "the stream sequence of this very message":
//!   a claim cannot know its own sequence before the server assigns it, so it writes `0`, and
//!   each renewal writes the claim's sequence explicitly.
//! - A partition: `part1;<epoch>;<owner>` — an epoch of `0` means "the stream sequence of this
//!   very message", as for a lease's term.
//! - A member: `member1`, a line feed, the address, a line feed, and the groups one per line
//!   ([`lease_core::backend::encode_groups`]). Addresses and groups hold no control characters, so the
//!   line feeds are unambiguous.

use bytes::Bytes;
use lease_core::backend::HolderToken;

const VALUE_TAG: &str = "lease1";
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
