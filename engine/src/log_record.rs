//! The write-ahead log's record: one commit group of writes, and the checks a write passes
//! before it may be logged.
//!
//! A log record holds one commit group (one or more batches) as:
//!
//! ```text
//! first_seqno: u64 LE  write_time_ms: u64 LE  count: varint  op*
//! op = tag: u8  cf: varint  key: varint-length + bytes  [value: varint-length + bytes]  [ttl_ms: varint]
//! tags: 1 Put, 2 Put with TTL, 3 Delete, 4 SingleDelete, 5 DeleteRange (key = start, value = end)
//! ```
//!
//! Op `i` of the record has sequence number `first_seqno + i`. The varints are those of
//! `cairn_sstable::coding`, which MANIFEST edits use too.

use bytes::Bytes;
use cairn_sstable::coding::{Cursor, put_length_prefixed, put_varint, varint_len};

use crate::error::{Error, Result};
use crate::options::{MAX_KEY_LEN, MAX_VALUE_LEN};

/// One write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BatchOp {
    Put {
        cf: u32,
        key: Bytes,
        value: Bytes,
        ttl: Option<u64>,
    },
    Delete {
        cf: u32,
        key: Bytes,
    },
    SingleDelete {
        cf: u32,
        key: Bytes,
    },
    DeleteRange {
        cf: u32,
        start: Bytes,
        end: Bytes,
    },
}

impl BatchOp {
    pub(crate) fn cf(&self) -> u32 {
        match self {
            Self::Put { cf, .. }
            | Self::Delete { cf, .. }
            | Self::SingleDelete { cf, .. }
            | Self::DeleteRange { cf, .. } => *cf,
        }
    }

    pub(crate) fn is_range_delete(&self) -> bool {
        matches!(self, Self::DeleteRange { .. })
    }

    pub(crate) fn approximate_bytes(&self) -> usize {
        match self {
            Self::Put { key, value, .. } => key.len() + value.len() + 16,
            Self::Delete { key, .. } | Self::SingleDelete { key, .. } => key.len() + 8,
            Self::DeleteRange { start, end, .. } => start.len() + end.len() + 8,
        }
    }

    /// Checks the write against the engine's limits.
    ///
    /// # Errors
    /// `InvalidArgument` for a key or value over its limit, or a range whose start is after
    /// its end.
    pub(crate) fn validate(&self) -> Result<()> {
        match self {
            Self::Put { key, value, .. } => {
                check_key(key)?;
                if value.len() > MAX_VALUE_LEN {
                    return Err(Error::invalid(format!(
                        "value of {} bytes exceeds the limit of {MAX_VALUE_LEN}",
                        value.len()
                    )));
                }
            }
            Self::Delete { key, .. } | Self::SingleDelete { key, .. } => check_key(key)?,
            Self::DeleteRange { start, end, .. } => {
                check_key(start)?;
                check_key(end)?;
                if start > end {
                    return Err(Error::invalid("delete_range start is after its end"));
                }
            }
        }
        Ok(())
    }

    /// True for a range delete that covers nothing (`start == end`): it is not written.
    pub(crate) fn is_empty_range(&self) -> bool {
        matches!(self, Self::DeleteRange { start, end, .. } if start == end)
    }

    /// The bytes of this op in a log record.
    pub(crate) fn encoded_len(&self) -> usize {
        let body = match self {
            Self::Put {
                key, value, ttl, ..
            } => prefixed_len(key) + prefixed_len(value) + ttl.map_or(0, varint_len),
            Self::Delete { key, .. } | Self::SingleDelete { key, .. } => prefixed_len(key),
            Self::DeleteRange { start, end, .. } => prefixed_len(start) + prefixed_len(end),
        };
        1 + varint_len(u64::from(self.cf())) + body
    }
}

/// An owned copy of a caller's key or value, as ops hold them.
pub(crate) fn bytes(data: impl AsRef<[u8]>) -> Bytes {
    Bytes::copy_from_slice(data.as_ref())
}

/// The bytes of a record holding `ops` (see the module doc).
pub(crate) fn encoded_len<'a>(ops: impl ExactSizeIterator<Item = &'a BatchOp>) -> usize {
    RECORD_HEADER_LEN + varint_len(ops.len() as u64) + ops.map(BatchOp::encoded_len).sum::<usize>()
}

/// Fails if a record holding `ops` alone would exceed the log's record limit.
///
/// # Errors
/// `InvalidArgument` naming the size and the limit.
pub(crate) fn check_record_len<'a>(ops: impl ExactSizeIterator<Item = &'a BatchOp>) -> Result<()> {
    let encoded = encoded_len(ops);
    if encoded > cairn_wal::MAX_RECORD_LEN {
        return Err(Error::invalid(format!(
            "the batch encodes to {encoded} bytes, over the log's record limit of {}",
            cairn_wal::MAX_RECORD_LEN
        )));
    }
    Ok(())
}

/// `first_seqno` and `write_time`.
const RECORD_HEADER_LEN: usize = 16;

fn prefixed_len(bytes: &[u8]) -> usize {
    varint_len(bytes.len() as u64) + bytes.len()
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "key of {} bytes exceeds the limit of {MAX_KEY_LEN}",
            key.len()
        )));
    }
    Ok(())
}

const TAG_PUT: u8 = 1;
const TAG_PUT_TTL: u8 = 2;
const TAG_DELETE: u8 = 3;
const TAG_SINGLE_DELETE: u8 = 4;
const TAG_DELETE_RANGE: u8 = 5;

/// Encodes a commit group as one log record.
pub(crate) fn encode_record(
    first_seqno: u64,
    write_time: u64,
    ops: &[&BatchOp],
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(&first_seqno.to_le_bytes());
    out.extend_from_slice(&write_time.to_le_bytes());
    put_varint(out, ops.len() as u64);
    for op in ops {
        let (tag, key, value, ttl) = match op {
            BatchOp::Put {
                key,
                value,
                ttl: None,
                ..
            } => (TAG_PUT, key, Some(value), None),
            BatchOp::Put {
                key,
                value,
                ttl: Some(ttl),
                ..
            } => (TAG_PUT_TTL, key, Some(value), Some(*ttl)),
            BatchOp::Delete { key, .. } => (TAG_DELETE, key, None, None),
            BatchOp::SingleDelete { key, .. } => (TAG_SINGLE_DELETE, key, None, None),
            BatchOp::DeleteRange { start, end, .. } => (TAG_DELETE_RANGE, start, Some(end), None),
        };
        out.push(tag);
        put_varint(out, u64::from(op.cf()));
        put_length_prefixed(out, key);
        if let Some(value) = value {
            put_length_prefixed(out, value);
        }
        if let Some(ttl) = ttl {
            put_varint(out, ttl);
        }
    }
}

/// A decoded log record.
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) first_seqno: u64,
    pub(crate) write_time: u64,
    pub(crate) ops: Vec<BatchOp>,
}

/// Decodes a log record; `None` if it is malformed (the caller names file and offset). Keys and
/// values share one copy of the record.
pub(crate) fn decode_record(record: &[u8]) -> Option<Record> {
    let input = Bytes::copy_from_slice(record);
    let mut r = Cursor::new(&input);
    let bytes = |r: &mut Cursor<'_>| r.length_prefixed().map(|b| input.slice_ref(b));
    let first_seqno = r.u64_le()?;
    let write_time = r.u64_le()?;
    let count = r.varint_usize()?;
    let mut ops = Vec::with_capacity(count.min(record.len()));
    for _ in 0..count {
        let tag = r.byte()?;
        let cf = u32::try_from(r.varint()?).ok()?;
        let key = bytes(&mut r)?;
        let op = match tag {
            TAG_PUT => BatchOp::Put {
                cf,
                key,
                value: bytes(&mut r)?,
                ttl: None,
            },
            TAG_PUT_TTL => {
                let value = bytes(&mut r)?;
                BatchOp::Put {
                    cf,
                    key,
                    value,
                    ttl: Some(r.varint()?),
                }
            }
            TAG_DELETE => BatchOp::Delete { cf, key },
            TAG_SINGLE_DELETE => BatchOp::SingleDelete { cf, key },
            TAG_DELETE_RANGE => BatchOp::DeleteRange {
                cf,
                start: key,
                end: bytes(&mut r)?,
            },
            _ => return None,
        };
        ops.push(op);
    }
    r.is_empty().then_some(Record {
        first_seqno,
        write_time,
        ops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_op() -> Vec<BatchOp> {
        vec![
            BatchOp::Put {
                cf: 0,
                key: Bytes::from_static(b"k"),
                value: Bytes::from_static(b"v"),
                ttl: None,
            },
            BatchOp::Put {
                cf: 3,
                key: Bytes::new(),
                value: Bytes::from(vec![2u8; 70_000]),
                ttl: Some(1000),
            },
            BatchOp::Delete {
                cf: 1,
                key: Bytes::from(vec![1u8; 300]),
            },
            BatchOp::SingleDelete {
                cf: 0,
                key: Bytes::from_static(b"s"),
            },
            BatchOp::DeleteRange {
                cf: 2,
                start: Bytes::from_static(b"a"),
                end: Bytes::from_static(b"z"),
            },
        ]
    }

    #[test]
    fn records_round_trip_every_op_and_every_cut_is_an_error() {
        let ops = every_op();
        let refs: Vec<&BatchOp> = ops.iter().collect();
        let mut buf = Vec::new();
        encode_record(77, 123_456, &refs, &mut buf);
        let record = decode_record(&buf).expect("valid record");
        assert_eq!((record.first_seqno, record.write_time), (77, 123_456));
        assert_eq!(record.ops, ops);
        for cut in 0..buf.len() {
            assert!(
                decode_record(buf.get(..cut).unwrap_or_default()).is_none(),
                "cut at {cut} decoded"
            );
        }
    }

    #[test]
    fn encoded_len_is_the_record_length() {
        let ops = every_op();
        let refs: Vec<&BatchOp> = ops.iter().collect();
        let mut record = Vec::new();
        encode_record(u64::MAX, 1, &refs, &mut record);
        assert_eq!(encoded_len(ops.iter()), record.len());
        assert_eq!(encoded_len([].iter()), 17);
    }

    #[test]
    fn validation_rejects_oversized_keys_and_values_and_backward_ranges() {
        let put = |key: usize, value: usize| BatchOp::Put {
            cf: 0,
            key: Bytes::from(vec![0u8; key]),
            value: Bytes::from(vec![0u8; value]),
            ttl: None,
        };
        assert!(matches!(
            put(MAX_KEY_LEN + 1, 0).validate(),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            put(0, MAX_VALUE_LEN + 1).validate(),
            Err(Error::InvalidArgument(_))
        ));
        assert!(put(MAX_KEY_LEN, MAX_VALUE_LEN).validate().is_ok());
        let range = |start: &'static [u8], end: &'static [u8]| BatchOp::DeleteRange {
            cf: 0,
            start: Bytes::from_static(start),
            end: Bytes::from_static(end),
        };
        assert!(matches!(
            range(b"z", b"a").validate(),
            Err(Error::InvalidArgument(_))
        ));
        assert!(range(b"m", b"m").validate().is_ok());
        assert!(range(b"m", b"m").is_empty_range());
        assert!(!range(b"a", b"m").is_empty_range());
    }
}
