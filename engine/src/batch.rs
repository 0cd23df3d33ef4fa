//! `WriteBatch`: writes applied atomically, with consecutive sequence numbers, and their
//! encoding in the write-ahead log.
//!
//! A log record holds one commit group (one or more batches) as:
//!
//! ```text
//! first_seqno: u64 LE  write_time_ms: u64 LE  count: varint  op*
//! op = tag: u8  cf: varint  key: varint-length + bytes  [value: varint-length + bytes]  [ttl_ms: varint]
//! tags: 1 Put, 2 Put with TTL, 3 Delete, 4 SingleDelete, 5 DeleteRange (key = start, value = end)
//! ```
//!
//! Op `i` of the record has sequence number `first_seqno + i`.

use std::time::Duration;

use bytes::Bytes;

use crate::column_family::{ColumnFamily, DEFAULT_CF};
use crate::error::{Error, Result};
use crate::options::{MAX_KEY_LEN, MAX_VALUE_LEN};

/// One write in a batch.
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

    pub(crate) fn approximate_bytes(&self) -> usize {
        match self {
            Self::Put { key, value, .. } => key.len() + value.len() + 16,
            Self::Delete { key, .. } | Self::SingleDelete { key, .. } => key.len() + 8,
            Self::DeleteRange { start, end, .. } => start.len() + end.len() + 8,
        }
    }
}

/// Writes to apply together: all of them or none, across column families, with consecutive
/// sequence numbers.
///
/// ```
/// # fn main() -> cairn::Result<()> {
/// # let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
/// let db = cairn::Db::open(dir.path(), cairn::Options::default())?;
/// let mut batch = cairn::WriteBatch::new();
/// batch.put("a", "1");
/// batch.put("b", "2");
/// batch.delete("a");
/// db.write(batch)?;
/// assert_eq!(db.get("a")?, None);
/// assert_eq!(db.get("b")?.as_deref(), Some(&b"2"[..]));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default, Eq)]
pub struct WriteBatch {
    pub(crate) ops: Vec<BatchOp>,
    bytes: usize,
    /// The database whose column family handles the writes named ([`FOREIGN`] if two).
    database: Option<u64>,
}

/// Two batches are equal when they hold the same writes, whichever handles named them.
impl PartialEq for WriteBatch {
    fn eq(&self, other: &Self) -> bool {
        self.ops == other.ops
    }
}

/// Marks a batch that named families of two databases.
const FOREIGN: u64 = u64::MAX;

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes in the batch.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True if the batch holds no write.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Approximate bytes the batch holds.
    pub fn size_bytes(&self) -> usize {
        self.bytes
    }

    /// Removes every write.
    pub fn clear(&mut self) {
        self.ops.clear();
        self.bytes = 0;
        self.database = None;
    }

    /// Sets `key` to `value` in the default column family.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.push(BatchOp::Put {
            cf: DEFAULT_CF,
            key: bytes(key),
            value: bytes(value),
            ttl: None,
        });
    }

    /// Sets `key` to `value`, expiring `ttl` after the write.
    pub fn put_with_ttl(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, ttl: Duration) {
        self.push(BatchOp::Put {
            cf: DEFAULT_CF,
            key: bytes(key),
            value: bytes(value),
            ttl: Some(millis(ttl)),
        });
    }

    /// Deletes `key`.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) {
        self.push(BatchOp::Delete {
            cf: DEFAULT_CF,
            key: bytes(key),
        });
    }

    /// Deletes `key`, which must have been put exactly once since it was last deleted.
    pub fn single_delete(&mut self, key: impl AsRef<[u8]>) {
        self.push(BatchOp::SingleDelete {
            cf: DEFAULT_CF,
            key: bytes(key),
        });
    }

    /// Deletes every key in `[start, end)`. `start > end` makes the write fail with
    /// `InvalidArgument`; `start == end` deletes nothing.
    pub fn delete_range(&mut self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) {
        self.push(BatchOp::DeleteRange {
            cf: DEFAULT_CF,
            start: bytes(start),
            end: bytes(end),
        });
    }

    /// [`put`](Self::put) in column family `cf`.
    pub fn put_cf(&mut self, cf: &ColumnFamily, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        let cf = self.family(cf);
        self.push(BatchOp::Put {
            cf,
            key: bytes(key),
            value: bytes(value),
            ttl: None,
        });
    }

    /// [`put_with_ttl`](Self::put_with_ttl) in column family `cf`.
    pub fn put_with_ttl_cf(
        &mut self,
        cf: &ColumnFamily,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) {
        let cf = self.family(cf);
        self.push(BatchOp::Put {
            cf,
            key: bytes(key),
            value: bytes(value),
            ttl: Some(millis(ttl)),
        });
    }

    /// [`delete`](Self::delete) in column family `cf`.
    pub fn delete_cf(&mut self, cf: &ColumnFamily, key: impl AsRef<[u8]>) {
        let cf = self.family(cf);
        self.push(BatchOp::Delete {
            cf,
            key: bytes(key),
        });
    }

    /// [`single_delete`](Self::single_delete) in column family `cf`.
    pub fn single_delete_cf(&mut self, cf: &ColumnFamily, key: impl AsRef<[u8]>) {
        let cf = self.family(cf);
        self.push(BatchOp::SingleDelete {
            cf,
            key: bytes(key),
        });
    }

    /// [`delete_range`](Self::delete_range) in column family `cf`.
    pub fn delete_range_cf(
        &mut self,
        cf: &ColumnFamily,
        start: impl AsRef<[u8]>,
        end: impl AsRef<[u8]>,
    ) {
        let cf = self.family(cf);
        self.push(BatchOp::DeleteRange {
            cf,
            start: bytes(start),
            end: bytes(end),
        });
    }

    /// `cf`'s id, noting whose database it belongs to.
    fn family(&mut self, cf: &ColumnFamily) -> u32 {
        let database = cf.db.instance;
        self.database = match self.database {
            Some(d) if d != database => Some(FOREIGN),
            _ => Some(database),
        };
        cf.id()
    }

    pub(crate) fn push(&mut self, op: BatchOp) {
        self.bytes += op.approximate_bytes();
        self.ops.push(op);
    }

    /// Checks every write against the engine's limits; drops empty range deletes.
    pub(crate) fn validate(&mut self, database: u64) -> Result<()> {
        if self.database.is_some_and(|d| d != database) {
            return Err(Error::invalid(
                "the batch names a column family of another database",
            ));
        }
        for op in &self.ops {
            match op {
                BatchOp::Put { key, value, .. } => {
                    check_key(key)?;
                    if value.len() > MAX_VALUE_LEN {
                        return Err(Error::invalid(format!(
                            "value of {} bytes exceeds the limit of {MAX_VALUE_LEN}",
                            value.len()
                        )));
                    }
                }
                BatchOp::Delete { key, .. } | BatchOp::SingleDelete { key, .. } => check_key(key)?,
                BatchOp::DeleteRange { start, end, .. } => {
                    check_key(start)?;
                    check_key(end)?;
                    if start > end {
                        return Err(Error::invalid("delete_range start is after its end"));
                    }
                }
            }
        }
        self.ops
            .retain(|op| !matches!(op, BatchOp::DeleteRange { start, end, .. } if start == end));
        let encoded = self.encoded_len();
        if encoded > cairn_wal::MAX_RECORD_LEN {
            return Err(Error::invalid(format!(
                "the batch encodes to {encoded} bytes, over the log's record limit of {}",
                cairn_wal::MAX_RECORD_LEN
            )));
        }
        Ok(())
    }

    /// The bytes of the log record holding this batch alone (see the module doc).
    pub(crate) fn encoded_len(&self) -> usize {
        RECORD_HEADER_LEN
            + varint_len(self.ops.len() as u64)
            + self.ops.iter().map(BatchOp::encoded_len).sum::<usize>()
    }
}

/// `first_seqno` and `write_time`.
const RECORD_HEADER_LEN: usize = 16;

fn varint_len(v: u64) -> usize {
    let bits = 64 - v.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

fn prefixed_len(bytes: &[u8]) -> usize {
    varint_len(bytes.len() as u64) + bytes.len()
}

impl BatchOp {
    /// The bytes of this op in a log record.
    fn encoded_len(&self) -> usize {
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

fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "key of {} bytes exceeds the limit of {MAX_KEY_LEN}",
            key.len()
        )));
    }
    Ok(())
}

fn bytes(data: impl AsRef<[u8]>) -> Bytes {
    Bytes::copy_from_slice(data.as_ref())
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
        put_varint(out, key.len() as u64);
        out.extend_from_slice(key);
        if let Some(value) = value {
            put_varint(out, value.len() as u64);
            out.extend_from_slice(value);
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

/// Decodes a log record; `None` if it is malformed (the caller names file and offset).
pub(crate) fn decode_record(record: &[u8]) -> Option<Record> {
    let mut r = Reader {
        input: Bytes::copy_from_slice(record),
        pos: 0,
    };
    let first_seqno = r.u64()?;
    let write_time = r.u64()?;
    let count = usize::try_from(r.varint()?).ok()?;
    let mut ops = Vec::with_capacity(count.min(record.len()));
    for _ in 0..count {
        let tag = r.byte()?;
        let cf = u32::try_from(r.varint()?).ok()?;
        let key = r.length_prefixed()?;
        let op = match tag {
            TAG_PUT => BatchOp::Put {
                cf,
                key,
                value: r.length_prefixed()?,
                ttl: None,
            },
            TAG_PUT_TTL => {
                let value = r.length_prefixed()?;
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
                end: r.length_prefixed()?,
            },
            _ => return None,
        };
        ops.push(op);
    }
    (r.pos == r.input.len()).then_some(Record {
        first_seqno,
        write_time,
        ops,
    })
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(u8::try_from(v & 0x7f).unwrap_or(0) | 0x80);
        v >>= 7;
    }
    out.push(u8::try_from(v).unwrap_or(0));
}

/// Decodes fields in order from a shared buffer, slicing byte strings without copying.
pub(crate) struct Reader {
    pub(crate) input: Bytes,
    pub(crate) pos: usize,
}

impl Reader {
    pub(crate) fn byte(&mut self) -> Option<u8> {
        let b = *self.input.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        let bytes = self.input.get(self.pos..self.pos.checked_add(8)?)?;
        self.pos += 8;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }

    pub(crate) fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                return None;
            }
            value |= bits << shift;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    pub(crate) fn length_prefixed(&mut self) -> Option<Bytes> {
        let len = usize::try_from(self.varint()?).ok()?;
        let end = self.pos.checked_add(len)?;
        if end > self.input.len() {
            return None;
        }
        let out = self.input.slice(self.pos..end);
        self.pos = end;
        Some(out)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.input.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_every_op() {
        let ops = [
            BatchOp::Put {
                cf: 0,
                key: Bytes::from_static(b"k"),
                value: Bytes::from_static(b"v"),
                ttl: None,
            },
            BatchOp::Put {
                cf: 3,
                key: Bytes::new(),
                value: Bytes::new(),
                ttl: Some(1000),
            },
            BatchOp::Delete {
                cf: 1,
                key: Bytes::from_static(b"d"),
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
        ];
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
        let mut batch = WriteBatch::new();
        batch.put("k", "v");
        batch.put_with_ttl(vec![1u8; 300], vec![2u8; 70_000], Duration::from_secs(3));
        batch.delete("gone");
        batch.single_delete("");
        batch.delete_range("a", "z");
        let refs: Vec<&BatchOp> = batch.ops.iter().collect();
        let mut record = Vec::new();
        encode_record(u64::MAX, 1, &refs, &mut record);
        assert_eq!(batch.encoded_len(), record.len());
        assert_eq!(WriteBatch::new().encoded_len(), 17);
    }

    #[test]
    fn validation_rejects_oversized_keys_and_backward_ranges() {
        let mut batch = WriteBatch::new();
        batch.put(vec![0u8; MAX_KEY_LEN + 1], "v");
        assert!(matches!(batch.validate(0), Err(Error::InvalidArgument(_))));
        let mut batch = WriteBatch::new();
        batch.delete_range("z", "a");
        assert!(matches!(batch.validate(0), Err(Error::InvalidArgument(_))));
        let mut batch = WriteBatch::new();
        batch.delete_range("m", "m");
        batch.put(vec![0u8; MAX_KEY_LEN], "");
        assert!(batch.validate(0).is_ok());
        assert_eq!(batch.len(), 1, "an empty range is dropped");
    }
}
