//! A log entry's bytes in `raft.log`: compact and binary, so an entry of a 4 KiB value costs
//! about 4 KiB on disk, not the 15 KiB JSON would spend on a byte array.
//!
//! `term` (u64), `node_id` (u64), `index` (u64), then a payload tag: 0 blank; 1 a request
//! (its own tag, then each byte string as a u32 length and its bytes, and a u64 expiry for a
//! put with a TTL); 2 a membership, as JSON (rare, and openraft's type). Integers are
//! big-endian. Decoding checks every length against what is left: a damaged entry is an
//! error, never a wrong one.

use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

use crate::error::Malformed;
use crate::types::{Request, TypeConfig};

const BLANK: u8 = 0;
const NORMAL: u8 = 1;
const MEMBERSHIP: u8 = 2;

const PUT: u8 = 0;
const PUT_WITH_TTL: u8 = 1;
const DELETE: u8 = 2;
const DELETE_RANGE: u8 = 3;

fn bytes(out: &mut Vec<u8>, part: &[u8]) {
    let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(part);
}

/// The bytes of `entry`.
///
/// # Errors
/// A membership that does not encode as JSON.
pub fn encode(entry: &Entry<TypeConfig>) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&entry.log_id.leader_id.term.to_be_bytes());
    out.extend_from_slice(&entry.log_id.leader_id.node_id.to_be_bytes());
    out.extend_from_slice(&entry.log_id.index.to_be_bytes());
    match &entry.payload {
        EntryPayload::Blank => out.push(BLANK),
        EntryPayload::Normal(request) => {
            out.push(NORMAL);
            match request {
                Request::Put { key, value } => {
                    out.push(PUT);
                    bytes(&mut out, key);
                    bytes(&mut out, value);
                }
                Request::PutWithTtl {
                    key,
                    value,
                    expires_at_ms,
                } => {
                    out.push(PUT_WITH_TTL);
                    bytes(&mut out, key);
                    bytes(&mut out, value);
                    out.extend_from_slice(&expires_at_ms.to_be_bytes());
                }
                Request::Delete { key } => {
                    out.push(DELETE);
                    bytes(&mut out, key);
                }
                Request::DeleteRange { start, end } => {
                    out.push(DELETE_RANGE);
                    bytes(&mut out, start);
                    bytes(&mut out, end);
                }
            }
        }
        EntryPayload::Membership(m) => {
            out.push(MEMBERSHIP);
            out.extend_from_slice(&serde_json::to_vec(m)?);
        }
    }
    Ok(out)
}

/// Reads what [`encode`] wrote.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let (head, rest) = self.0.split_at_checked(n).ok_or_else(|| {
            Malformed(format!(
                "log entry cut short: {n} bytes wanted, {} left",
                self.0.len()
            ))
        })?;
        self.0 = rest;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64, Malformed> {
        let head = self.take(8)?;
        let array: [u8; 8] = head.try_into().map_err(|_| Malformed("u64".to_owned()))?;
        Ok(u64::from_be_bytes(array))
    }

    fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?.first().copied().unwrap_or_default())
    }

    fn bytes(&mut self) -> Result<Vec<u8>, Malformed> {
        let head = self.take(4)?;
        let array: [u8; 4] = head.try_into().map_err(|_| Malformed("u32".to_owned()))?;
        let len = usize::try_from(u32::from_be_bytes(array))
            .map_err(|_| Malformed("length".to_owned()))?;
        Ok(self.take(len)?.to_vec())
    }

    fn done(&self) -> Result<(), Malformed> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Malformed(format!(
                "{} bytes after the log entry",
                self.0.len()
            )))
        }
    }
}

/// The entry in `bytes`.
///
/// # Errors
/// An error naming what is wrong, for bytes [`encode`] did not write.
pub fn decode(bytes: &[u8]) -> Result<Entry<TypeConfig>, Box<dyn std::error::Error + Send + Sync>> {
    decode_entry(bytes).map_err(Into::into)
}

pub(crate) fn decode_entry(bytes: &[u8]) -> Result<Entry<TypeConfig>, Malformed> {
    let mut r = Reader(bytes);
    let term = r.u64()?;
    let node_id = r.u64()?;
    let index = r.u64()?;
    let log_id = LogId::new(CommittedLeaderId::new(term, node_id), index);
    let payload = match r.u8()? {
        BLANK => EntryPayload::Blank,
        NORMAL => EntryPayload::Normal(match r.u8()? {
            PUT => Request::Put {
                key: r.bytes()?,
                value: r.bytes()?,
            },
            PUT_WITH_TTL => Request::PutWithTtl {
                key: r.bytes()?,
                value: r.bytes()?,
                expires_at_ms: r.u64()?,
            },
            DELETE => Request::Delete { key: r.bytes()? },
            DELETE_RANGE => Request::DeleteRange {
                start: r.bytes()?,
                end: r.bytes()?,
            },
            tag => return Err(Malformed(format!("unknown request tag {tag}"))),
        }),
        MEMBERSHIP => {
            let json = r.take(r.0.len())?;
            EntryPayload::Membership(
                serde_json::from_slice(json).map_err(|e| Malformed(format!("membership: {e}")))?,
            )
        }
        tag => return Err(Malformed(format!("unknown payload tag {tag}"))),
    };
    r.done()?;
    Ok(Entry { log_id, payload })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use openraft::Membership;

    use super::*;

    fn entry(index: u64, payload: EntryPayload<TypeConfig>) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 7), index),
            payload,
        }
    }

    #[test]
    fn every_kind_of_entry_round_trips_and_damage_is_an_error() {
        let members = Membership::new(vec![BTreeSet::from([1, 2, 3])], None);
        let entries = [
            entry(1, EntryPayload::Blank),
            entry(2, EntryPayload::Membership(members)),
            entry(
                3,
                EntryPayload::Normal(Request::Put {
                    key: b"k".to_vec(),
                    value: vec![0; 4096],
                }),
            ),
            entry(
                4,
                EntryPayload::Normal(Request::PutWithTtl {
                    key: vec![],
                    value: b"v".to_vec(),
                    expires_at_ms: 99,
                }),
            ),
            entry(
                5,
                EntryPayload::Normal(Request::Delete { key: vec![0xff; 3] }),
            ),
            entry(
                6,
                EntryPayload::Normal(Request::DeleteRange {
                    start: b"a".to_vec(),
                    end: b"b".to_vec(),
                }),
            ),
        ];
        for e in &entries {
            let bytes = encode(e).expect("encode");
            let back = decode(&bytes).expect("decode");
            assert_eq!(back.log_id, e.log_id);
            assert_eq!(format!("{:?}", back.payload), format!("{:?}", e.payload));
            for cut in 0..bytes.len() {
                assert!(
                    decode(bytes.get(..cut).unwrap_or_default()).is_err(),
                    "cut at {cut}"
                );
            }
            let mut longer = bytes.clone();
            longer.push(1);
            // A membership's JSON reads to the end: a stray byte breaks the JSON instead.
            assert!(decode(&longer).is_err());
        }
        let put = encode(entries.get(2).expect("put")).expect("encode");
        assert!(
            put.len() < 4096 + 40,
            "{} bytes for a 4 KiB value",
            put.len()
        );
    }
}
