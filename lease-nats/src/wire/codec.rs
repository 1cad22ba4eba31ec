//! Lease, partition and member records as KV values.
//!
//! - A lease: `lease1;<holder: 32 hex digits>;<term>;<instance>` — the instance label last, so
//!   it may hold any character. A term of `0` means "the stream sequence of this very message":
//!   a claim cannot know its own sequence before the server assigns it, so it writes `0`, and
//!   each renewal writes the claim's sequence explicitly.
//! - A job's lease, claimed for a scheduler slot (`claim_slot`, `claim_rerun`): the same fields
//!   behind the tag `job1`. Such a lease is a term only once the slot record names it (see
//!   [`SlotValue`] and the crate docs, *Scheduler slots*).
//! - A slot record, in the slot bucket:
//!   `slots1;<last>;<unfinished>;<rerun>;<term>;<holder>;<write>` — the three instants in
//!   decimal milliseconds (empty for none), the term and holder of the lease that made the last
//!   claim or rerun, and a token minted for each write, so a write whose answer was lost can be
//!   recognised when read back.
//! - A partition: `part1;<epoch>;<owner>` — an epoch of `0` means "the stream sequence of this
//!   very message", as for a lease's term.
//! - A member: `member1`, a line feed, the address, a line feed, and the groups one per line
//!   ([`lease_core::backend::encode_groups`]). Addresses and groups hold no control characters, so
//!   the line feeds are unambiguous.

use bytes::Bytes;
use lease_core::backend::HolderToken;

const VALUE_TAG: &str = "lease1";
const JOB_TAG: &str = "job1";
const SLOTS_TAG: &str = "slots1";
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
    /// Claimed for a scheduler slot (`job1`): a term only once the slot record names it.
    pub(crate) job: bool,
}

impl Record {
    pub(crate) fn encode(&self) -> Bytes {
        let tag = if self.job { JOB_TAG } else { VALUE_TAG };
        Bytes::from(format!(
            "{tag};{};{};{}",
            self.holder.to_hex(),
            self.term,
            self.instance
        ))
    }

    pub(crate) fn decode(value: &[u8]) -> Option<Record> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.splitn(4, ';');
        let job = match parts.next()? {
            VALUE_TAG => false,
            JOB_TAG => true,
            _ => return None,
        };
        let holder = HolderToken::from_hex(parts.next()?)?;
        let term = parts.next()?.parse().ok()?;
        let instance = parts.next()?.to_owned();
        Some(Record {
            holder,
            term,
            instance,
            job,
        })
    }

    /// The term, given the stream sequence of the message this record was read from.
    pub(crate) fn term_at(&self, revision: u64) -> u64 {
        if self.term == 0 { revision } else { self.term }
    }
}

/// What one value of the slot bucket says about a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotValue {
    pub(crate) last_ms: Option<i64>,
    pub(crate) unfinished_ms: Option<i64>,
    pub(crate) rerun_ms: Option<i64>,
    /// The term of the lease that made the last claim or rerun (its stream sequence).
    pub(crate) term: u64,
    /// That lease's holder.
    pub(crate) holder: HolderToken,
    /// Minted for each write: tells this write from every other when read back.
    pub(crate) write: HolderToken,
}

impl SlotValue {
    pub(crate) fn encode(&self) -> Bytes {
        let ms = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
        Bytes::from(format!(
            "{SLOTS_TAG};{};{};{};{};{};{}",
            ms(self.last_ms),
            ms(self.unfinished_ms),
            ms(self.rerun_ms),
            self.term,
            self.holder.to_hex(),
            self.write.to_hex()
        ))
    }

    pub(crate) fn decode(value: &[u8]) -> Option<SlotValue> {
        let text = std::str::from_utf8(value).ok()?;
        let parts: Vec<&str> = text.split(';').collect();
        let [tag, last, unfinished, rerun, term, holder, write] = parts.as_slice() else {
            return None;
        };
        if *tag != SLOTS_TAG {
            return None;
        }
        let ms = |v: &str| -> Option<Option<i64>> {
            if v.is_empty() {
                Some(None)
            } else {
                v.parse().ok().map(Some)
            }
        };
        Some(SlotValue {
            last_ms: ms(last)?,
            unfinished_ms: ms(unfinished)?,
            rerun_ms: ms(rerun)?,
            term: term.parse().ok()?,
            holder: HolderToken::from_hex(holder)?,
            write: HolderToken::from_hex(write)?,
        })
    }

    /// The three instants, as the slot API reports them.
    pub(crate) fn instants(&self) -> lease_core::backend::slots::SlotRecord {
        lease_core::backend::slots::SlotRecord {
            last_ms: self.last_ms,
            unfinished_ms: self.unfinished_ms,
            rerun_ms: self.rerun_ms,
        }
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
    fn slot_values_round_trip() {
        let v = SlotValue {
            last_ms: Some(-5),
            unfinished_ms: None,
            rerun_ms: Some(i64::MAX),
            term: 42,
            holder: HolderToken::mint(),
            write: HolderToken::mint(),
        };
        assert_eq!(SlotValue::decode(&v.encode()), Some(v.clone()));
        let none = SlotValue {
            last_ms: None,
            rerun_ms: None,
            ..v.clone()
        };
        assert_eq!(SlotValue::decode(&none.encode()), Some(none));
        let text = String::from_utf8(v.encode().to_vec()).unwrap();
        for bad in [
            String::new(),
            text.replacen("slots1", "slots2", 1),
            text.replacen(";-5;", ";x;", 1),
            format!("{text};extra"),
            text.rsplit_once(';').unwrap().0.to_owned(),
        ] {
            assert_eq!(SlotValue::decode(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn job_leases_are_told_from_plain_ones() {
        let r = Record {
            holder: HolderToken::mint(),
            term: 0,
            instance: "r;1".into(),
            job: true,
        };
        assert!(r.encode().starts_with(b"job1;"));
        assert_eq!(Record::decode(&r.encode()), Some(r.clone()));
        let plain = Record { job: false, ..r };
        assert!(plain.encode().starts_with(b"lease1;"));
        assert_eq!(Record::decode(&plain.encode()), Some(plain));
    }

    #[test]
    fn records_round_trip() {
        let r = Record {
            holder: HolderToken::mint(),
            term: 0,
            instance: "worker;7 é".into(),
            job: false,
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
