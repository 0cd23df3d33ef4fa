//! Optimistic transactions: reads at a snapshot, writes buffered, and a commit that fails with
//! `Conflict` if any key the transaction read was written after its snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use cairn_sstable::SeqNo;

use crate::batch::WriteBatch;
use crate::column_family::ColumnFamily;
use crate::error::{Error, Result};
use crate::inner::DbInner;
use crate::snapshot::Snapshot;
use crate::version_edit::DEFAULT_CF;

/// An optimistic transaction: reads at its snapshot, buffered writes, and a commit that fails
/// with `Conflict` if a key it read was written after the snapshot.
///
/// ```
/// # fn main() -> cairn::Result<()> {
/// # let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
/// let db = cairn::Db::open(dir.path(), cairn::Options::default())?;
/// db.put("balance", "10")?;
/// let mut tx = db.transaction();
/// let balance = tx.get("balance")?;
/// db.put("balance", "20")?; // written after the transaction's snapshot
/// tx.put("balance", "11");
/// assert!(matches!(tx.commit(), Err(cairn::Error::Conflict { .. })));
/// assert_eq!(db.get("balance")?.as_deref(), Some(&b"20"[..]));
/// # let _ = balance;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Transaction<'db> {
    db: &'db Arc<DbInner>,
    snapshot: Snapshot,
    reads: Vec<(u32, Bytes)>,
    batch: WriteBatch,
    /// The transaction's own writes, for read-your-writes: `None` is a delete.
    local: BTreeMap<(u32, Bytes), Option<Bytes>>,
}

impl<'db> Transaction<'db> {
    /// A transaction reading at `snapshot`.
    pub(crate) fn new(db: &'db Arc<DbInner>, snapshot: Snapshot) -> Self {
        Transaction {
            db,
            snapshot,
            reads: Vec::new(),
            batch: WriteBatch::new(),
            local: BTreeMap::new(),
        }
    }

    /// Reads `key` from the default family: the transaction's own write if it made one, else
    /// the value at its snapshot. The key is checked for conflicts at commit.
    ///
    /// # Errors
    /// As [`Db::get`](crate::Db::get).
    pub fn get(&mut self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.read(DEFAULT_CF, key.as_ref())
    }

    /// Reads `key` from `cf`, as [`get`](Self::get).
    ///
    /// # Errors
    /// As [`Db::get`](crate::Db::get); `InvalidArgument` if `cf` belongs to another database.
    pub fn get_cf(&mut self, cf: &ColumnFamily, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.read_cf(cf, key.as_ref())
    }

    fn read_cf(&mut self, cf: &ColumnFamily, key: &[u8]) -> Result<Option<Bytes>> {
        if !self.owns(cf) {
            return Err(Error::invalid(format!(
                "column family {:?} belongs to another database than the transaction",
                cf.name()
            )));
        }
        self.read(cf.id, key)
    }

    fn read(&mut self, cf: u32, key: &[u8]) -> Result<Option<Bytes>> {
        let key = Bytes::copy_from_slice(key);
        if let Some(local) = self.local.get(&(cf, key.clone())) {
            return Ok(local.clone());
        }
        self.reads.push((cf, key.clone()));
        self.snapshot_db()
            .get(cf, &key, Some(self.snapshot.seqno()))
    }

    fn snapshot_db(&self) -> &Arc<DbInner> {
        self.db
    }

    /// Buffers a put in the default family.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        let (key, value) = (
            Bytes::copy_from_slice(key.as_ref()),
            Bytes::copy_from_slice(value.as_ref()),
        );
        self.batch.put(&key, &value);
        self.local.insert((DEFAULT_CF, key), Some(value));
    }

    /// Buffers a put in `cf`.
    pub fn put_cf(&mut self, cf: &ColumnFamily, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        let (key, value) = (
            Bytes::copy_from_slice(key.as_ref()),
            Bytes::copy_from_slice(value.as_ref()),
        );
        self.batch.put_cf(cf, &key, &value);
        // Another database's family: the commit refuses it, and no read may see it.
        if self.owns(cf) {
            self.local.insert((cf.id, key), Some(value));
        }
    }

    /// Buffers a delete in the default family.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) {
        let key = Bytes::copy_from_slice(key.as_ref());
        self.batch.delete(&key);
        self.local.insert((DEFAULT_CF, key), None);
    }

    /// Buffers a delete in `cf`.
    pub fn delete_cf(&mut self, cf: &ColumnFamily, key: impl AsRef<[u8]>) {
        let key = Bytes::copy_from_slice(key.as_ref());
        self.batch.delete_cf(cf, &key);
        if self.owns(cf) {
            self.local.insert((cf.id, key), None);
        }
    }

    fn owns(&self, cf: &ColumnFamily) -> bool {
        cf.db.instance == self.db.instance
    }

    /// The sequence number of the transaction's snapshot: its reads see the writes at or
    /// below it.
    pub fn seqno(&self) -> SeqNo {
        self.snapshot.seqno()
    }

    /// Applies the buffered writes atomically, unless a key the transaction read was written
    /// (or range-deleted) after its snapshot.
    ///
    /// Returns the sequence number of its last write (the snapshot's, if it wrote nothing).
    ///
    /// # Errors
    /// `Conflict` naming the first such key (nothing is written); `InvalidArgument` if a write
    /// names a family of another database; otherwise as [`Db::write`](crate::Db::write).
    pub fn commit(self) -> Result<SeqNo> {
        let Self {
            db,
            snapshot,
            reads,
            mut batch,
            ..
        } = self;
        batch.validate(db.instance)?;
        let since = snapshot.seqno();
        let last = db.run_exclusive(Box::new(move |inner: &DbInner| {
            let reads = if crate::planted::active(crate::planted::Bug::IgnoreConflicts) {
                &[][..]
            } else {
                &reads[..]
            };
            for (cf, key) in reads {
                if inner.latest_seqno(*cf, key)? > since {
                    return Err(Error::Conflict {
                        key: String::from_utf8_lossy(key).into_owned(),
                    });
                }
            }
            if batch.is_empty() {
                return Ok(since);
            }
            let ops: Vec<_> = batch.ops.iter().collect();
            let first = inner.write_ops(&ops, false)?;
            Ok(first + ops.len() as u64 - 1)
        }))?;
        drop(snapshot);
        Ok(last)
    }
}
