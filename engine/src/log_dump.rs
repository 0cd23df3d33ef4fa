//! A write-ahead log read record by record, for operators (`cairn dump-log`, RocksDB's `ldb
//! dump_wal`).
//!
//! [`read_log`] decodes every record of one log file without opening the database: each commit
//! group with its first sequence number, write time and operations. Damaged regions are
//! skipped and listed, so a damaged log still shows what can be read.

use std::path::Path;

use bytes::Bytes;
use cairn_fs::RealFs;
use cairn_sstable::{Kind, SeqNo};
use cairn_wal::{LogReader, RecoveryMode};

use crate::error::{Error, Result};
use crate::log_record::{BatchOp, decode_record};

/// One record of a log: a commit group of writes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogBatch {
    /// Where the record starts in the file.
    pub offset: u64,
    /// The sequence number of its first operation; operation `i` has `first_seqno + i`.
    pub first_seqno: SeqNo,
    /// When it was written (ms of the database's clock).
    pub write_time: u64,
    /// Its operations in order.
    pub ops: Vec<LogOp>,
}

/// One operation of a [`LogBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogOp {
    /// The column family's id (the MANIFEST names it; `0` is "default").
    pub cf: u32,
    /// What it does.
    pub kind: Kind,
    /// The key, or a range delete's first key.
    pub key: Bytes,
    /// A put's value, or a range delete's end (exclusive).
    pub value: Option<Bytes>,
    /// A put's own TTL in ms.
    pub ttl_ms: Option<u64>,
}

/// Every readable record of the log at `path`, and each damage met (as
/// `Error::Corruption` with the file and offset) in file order.
///
/// # Errors
/// `Io` if the file cannot be opened or read.
pub fn read_log(path: impl AsRef<Path>) -> Result<(Vec<LogBatch>, Vec<Error>)> {
    let path = path.as_ref();
    let mut reader = LogReader::open(&RealFs, path, RecoveryMode::SkipCorrupted)?;
    let mut batches = Vec::new();
    let mut damage = Vec::new();
    loop {
        match reader.next_record() {
            Ok(Some((offset, record))) => match decode_record(&record) {
                Some(r) => batches.push(LogBatch {
                    offset,
                    first_seqno: r.first_seqno,
                    write_time: r.write_time,
                    ops: r.ops.into_iter().map(LogOp::of).collect(),
                }),
                None => damage.push(Error::corruption(path, offset, "malformed log record")),
            },
            Ok(None) => break,
            Err(e @ cairn_wal::Error::Corruption { .. }) => {
                damage.push(e.into());
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    damage.extend(reader.skipped().iter().map(|d| {
        Error::corruption(
            &d.file,
            d.offset,
            format!("{} ({} bytes unreadable)", d.kind, d.dropped_bytes()),
        )
    }));
    Ok((batches, damage))
}

impl LogOp {
    fn of(op: BatchOp) -> Self {
        match op {
            BatchOp::Put {
                cf,
                key,
                value,
                ttl,
            } => Self {
                cf,
                kind: Kind::Put,
                key,
                value: Some(value),
                ttl_ms: ttl,
            },
            BatchOp::Delete { cf, key } => Self::no_value(cf, Kind::Delete, key),
            BatchOp::SingleDelete { cf, key } => Self::no_value(cf, Kind::SingleDelete, key),
            BatchOp::DeleteRange { cf, start, end } => Self {
                cf,
                kind: Kind::RangeDelete,
                key: start,
                value: Some(end),
                ttl_ms: None,
            },
        }
    }

    fn no_value(cf: u32, kind: Kind, key: Bytes) -> Self {
        Self {
            cf,
            kind,
            key,
            value: None,
            ttl_ms: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Db, Options, WriteBatch};

    #[test]
    fn each_commit_group_reads_back_with_its_seqno_and_ops() -> Result<()> {
        let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
        let db = Db::open(dir.path(), Options::default())?;
        db.put("a", "1")?;
        let mut b = WriteBatch::new();
        b.delete("a");
        b.delete_range("b", "c");
        db.write(b)?;
        db.put_with_ttl("t", "x", Duration::from_secs(60))?;
        db.close()?;
        let log = std::fs::read_dir(dir.path())
            .map_err(cairn_fs::Error::from)?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "log"))
            .ok_or_else(|| Error::invalid("no log"))?;
        let (batches, damage) = read_log(&log)?;
        assert!(damage.is_empty(), "{damage:?}");
        let kinds: Vec<Vec<Kind>> = batches
            .iter()
            .map(|b| b.ops.iter().map(|o| o.kind).collect())
            .collect();
        assert_eq!(
            kinds,
            [
                vec![Kind::Put],
                vec![Kind::Delete, Kind::RangeDelete],
                vec![Kind::Put]
            ]
        );
        let seqnos: Vec<SeqNo> = batches.iter().map(|b| b.first_seqno).collect();
        assert!(seqnos.is_sorted_by(|a, b| a < b), "{seqnos:?}");
        assert_eq!(
            batches
                .last()
                .and_then(|b| b.ops.first())
                .and_then(|o| o.ttl_ms),
            Some(60_000)
        );
        Ok(())
    }
}
