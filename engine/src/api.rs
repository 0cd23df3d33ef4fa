//! The data API: the same reads and writes on a column family, on the database (its default
//! family) and, for reads, on a snapshot.

use std::ops::RangeBounds;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_sstable::SeqNo;

use crate::audit::KeyTrace;
use crate::batch::WriteBatch;
use crate::column_family::ColumnFamily;
use crate::db::{Db, DbInner};
use crate::error::Result;
use crate::explain::TombstoneExplanation;
use crate::iterator::{DbIterator, owned_bounds, prefix_bounds};
use crate::options::WriteOptions;
use crate::read::Version;
use crate::stats::Stats;

impl ColumnFamily {
    fn write_one(&self, build: impl FnOnce(&mut WriteBatch)) -> Result<()> {
        let mut batch = WriteBatch::new();
        build(&mut batch);
        self.db.write(batch, false).map(drop)
    }

    /// Sets `key` to `value`.
    ///
    /// # Errors
    /// `InvalidArgument` if the key or value is over the limit; `ColumnFamilyNotFound` if the
    /// family was dropped; `Stopped` if an earlier failure stopped the database or it is closed.
    /// With those three the write was certainly not applied. `Io` if the log write or sync
    /// failed: the write may or may not survive a reopen, and the database stops.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.write_one(|b| b.put_cf(self, key, value))
    }

    /// Sets `key` to `value`, expiring `ttl` after now (or sooner if the family's TTL is
    /// shorter).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn put_with_ttl(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<()> {
        self.write_one(|b| b.put_with_ttl_cf(self, key, value, ttl))
    }

    /// Deletes `key`.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.write_one(|b| b.delete_cf(self, key))
    }

    /// Deletes `key`, which must have been put exactly once since it was last deleted: the
    /// tombstone then vanishes with the put it cancels. Misuse is detected by compaction.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn single_delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.write_one(|b| b.single_delete_cf(self, key))
    }

    /// Deletes every key in `[start, end)` with one range tombstone.
    ///
    /// # Errors
    /// `InvalidArgument` if `start > end` (`start == end` deletes nothing); otherwise as
    /// [`put`](Self::put).
    pub fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        self.write_one(|b| b.delete_range_cf(self, start, end))
    }

    /// The value of `key`, if it has one.
    ///
    /// # Errors
    /// `Corruption` if a table on the way is damaged; `ColumnFamilyNotFound` if the family was
    /// dropped.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.db.get(self.id, key.as_ref(), None)
    }

    /// Up to `limit` live versions of `key`, newest first (at most the family's
    /// `max_versions`).
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub fn get_versions(&self, key: impl AsRef<[u8]>, limit: usize) -> Result<Vec<Version>> {
        self.db.get_versions(self.id, key.as_ref(), None, limit)
    }

    /// The live keys and values in `range`, in key order, from either end.
    ///
    /// # Errors
    /// `ColumnFamilyNotFound` if the family was dropped; reads that meet damage yield
    /// `Err(Corruption)` and end.
    pub fn range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Result<DbIterator> {
        DbIterator::new(Arc::clone(&self.db), self.id, None, owned_bounds(&range))
    }

    /// The live keys starting with `prefix`.
    ///
    /// # Errors
    /// As [`range`](Self::range).
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Result<DbIterator> {
        DbIterator::new(
            Arc::clone(&self.db),
            self.id,
            None,
            prefix_bounds(prefix.as_ref()),
        )
    }

    /// Every live key.
    ///
    /// # Errors
    /// As [`range`](Self::range).
    pub fn iter(&self) -> Result<DbIterator> {
        self.range::<&[u8]>(..)
    }

    /// Compacts the tables overlapping `range` down to the last level (flushing the memtables
    /// first) and rewrites the last level's overlapping tables, so every version and tombstone
    /// the garbage-collection rules allow to go is gone when this returns.
    ///
    /// # Errors
    /// The error of a failed flush or compaction.
    pub fn compact_range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Result<()> {
        self.db.compact_range(self.id, owned_bounds(&range))
    }

    /// Every tombstone in `range` still in a memtable or table, and the garbage-collection
    /// condition that keeps it: a snapshot older than it, its grace period, older data below,
    /// or nothing but a compaction that has not reached it yet.
    ///
    /// # Errors
    /// `Corruption` if a table on the way is damaged.
    pub fn explain_tombstones<K: AsRef<[u8]>>(
        &self,
        range: impl RangeBounds<K>,
    ) -> Result<Vec<TombstoneExplanation>> {
        self.db.explain_tombstones(self.id, &owned_bounds(&range))
    }

    /// Every place — memtable, log file, table — that still holds a version or tombstone of
    /// `key`, newest first, with the time the delete persistence deadline promises each deleted
    /// one gone. An empty list means no trace anywhere.
    ///
    /// # Errors
    /// `Corruption` if a table on the way is damaged.
    pub fn audit_key(&self, key: impl AsRef<[u8]>) -> Result<Vec<KeyTrace>> {
        self.db.audit_key(self.id, key.as_ref())
    }
}

/// A frozen view of the database: its reads never change, and the versions it can see are
/// kept until it is dropped.
#[derive(Debug)]
pub struct Snapshot {
    db: Arc<DbInner>,
    seqno: SeqNo,
}

impl Snapshot {
    pub(crate) fn new(db: Arc<DbInner>) -> Self {
        let seqno = db.snapshots.acquire_current(&db.visible_seqno);
        Self { db, seqno }
    }

    /// The sequence number the snapshot reads at.
    pub fn seqno(&self) -> SeqNo {
        self.seqno
    }

    /// The value of `key` in the default family at the snapshot.
    ///
    /// # Errors
    /// As [`ColumnFamily::get`].
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.db.get(
            crate::version_edit::DEFAULT_CF,
            key.as_ref(),
            Some(self.seqno),
        )
    }

    /// The value of `key` in `cf` at the snapshot.
    ///
    /// # Errors
    /// As [`ColumnFamily::get`]; `InvalidArgument` if `cf` belongs to another database.
    pub fn get_cf(&self, cf: &ColumnFamily, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.check_family(cf)?;
        self.db.get(cf.id, key.as_ref(), Some(self.seqno))
    }

    /// A family of another database (same id, other data) is a caller's mistake.
    fn check_family(&self, cf: &ColumnFamily) -> Result<()> {
        if Arc::ptr_eq(&cf.db, &self.db) {
            Ok(())
        } else {
            Err(crate::Error::invalid(format!(
                "column family {:?} belongs to another database than the snapshot",
                cf.name()
            )))
        }
    }

    /// The live keys and values of the default family in `range` at the snapshot.
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Result<DbIterator> {
        DbIterator::new(
            Arc::clone(&self.db),
            crate::version_edit::DEFAULT_CF,
            Some(self.seqno),
            owned_bounds(&range),
        )
    }

    /// The live keys and values of `cf` in `range` at the snapshot.
    ///
    /// # Errors
    /// As [`ColumnFamily::range`]; `InvalidArgument` if `cf` belongs to another database.
    pub fn range_cf<K: AsRef<[u8]>>(
        &self,
        cf: &ColumnFamily,
        range: impl RangeBounds<K>,
    ) -> Result<DbIterator> {
        self.check_family(cf)?;
        DbIterator::new(
            Arc::clone(&self.db),
            cf.id,
            Some(self.seqno),
            owned_bounds(&range),
        )
    }

    /// The live keys of the default family starting with `prefix`, at the snapshot.
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Result<DbIterator> {
        DbIterator::new(
            Arc::clone(&self.db),
            crate::version_edit::DEFAULT_CF,
            Some(self.seqno),
            prefix_bounds(prefix.as_ref()),
        )
    }

    /// Every live key of the default family at the snapshot.
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn iter(&self) -> Result<DbIterator> {
        self.range::<&[u8]>(..)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.db.snapshots.release(self.seqno);
        // Tombstones it pinned may be droppable now.
        self.db.state_changed.notify_all();
    }
}

/// The data API on the default column family.
impl Db {
    /// Sets `key` to `value`. See [`ColumnFamily::put`].
    ///
    /// # Errors
    /// As [`ColumnFamily::put`].
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.default_cf.put(key, value)
    }

    /// Sets `key` to `value` with a time to live. See [`ColumnFamily::put_with_ttl`].
    ///
    /// # Errors
    /// As [`ColumnFamily::put`].
    pub fn put_with_ttl(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<()> {
        self.default_cf.put_with_ttl(key, value, ttl)
    }

    /// Deletes `key`. See [`ColumnFamily::delete`].
    ///
    /// # Errors
    /// As [`ColumnFamily::put`].
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.default_cf.delete(key)
    }

    /// Single-deletes `key`. See [`ColumnFamily::single_delete`].
    ///
    /// # Errors
    /// As [`ColumnFamily::put`].
    pub fn single_delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.default_cf.single_delete(key)
    }

    /// Deletes `[start, end)`. See [`ColumnFamily::delete_range`].
    ///
    /// # Errors
    /// As [`ColumnFamily::delete_range`].
    pub fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        self.default_cf.delete_range(start, end)
    }

    /// The value of `key`. See [`ColumnFamily::get`].
    ///
    /// # Errors
    /// As [`ColumnFamily::get`].
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.default_cf.get(key)
    }

    /// Live versions of `key`. See [`ColumnFamily::get_versions`].
    ///
    /// # Errors
    /// As [`ColumnFamily::get`].
    pub fn get_versions(&self, key: impl AsRef<[u8]>, limit: usize) -> Result<Vec<Version>> {
        self.default_cf.get_versions(key, limit)
    }

    /// The live entries in `range`. See [`ColumnFamily::range`].
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Result<DbIterator> {
        self.default_cf.range(range)
    }

    /// The live entries whose keys start with `prefix`. See [`ColumnFamily::prefix`].
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Result<DbIterator> {
        self.default_cf.prefix(prefix)
    }

    /// Every live entry. See [`ColumnFamily::iter`].
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn iter(&self) -> Result<DbIterator> {
        self.default_cf.iter()
    }

    /// Applies `batch` atomically; returns the sequence number of its last write.
    ///
    /// # Errors
    /// `InvalidArgument` if any write in it is invalid, names a column family of another
    /// database, or the whole batch is over the log's record limit (nothing is written);
    /// otherwise as [`ColumnFamily::put`].
    pub fn write(&self, batch: WriteBatch) -> Result<SeqNo> {
        self.inner.write(batch, false)
    }

    /// Applies `batch` atomically with `options`.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn write_opt(&self, batch: WriteBatch, options: &WriteOptions) -> Result<SeqNo> {
        self.inner.write(batch, options.sync)
    }

    /// A snapshot of the database as it is now, released on drop.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(Arc::clone(&self.inner))
    }

    /// The engine's statistics.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }
}
