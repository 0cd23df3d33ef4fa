//! `WriteBatch`: writes applied atomically, with consecutive sequence numbers. Its log
//! encoding is in `log_record`.

use std::time::Duration;

use crate::clock::millis;
use crate::column_family::ColumnFamily;
use crate::error::{Error, Result};
use crate::log_record::{self, BatchOp, bytes};
use crate::version_edit::DEFAULT_CF;

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

    /// The writes, for the write queue.
    pub(crate) fn into_ops(self) -> Vec<BatchOp> {
        self.ops
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
            op.validate()?;
        }
        self.ops.retain(|op| !op.is_empty_range());
        log_record::check_record_len(self.ops.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::MAX_KEY_LEN;

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
