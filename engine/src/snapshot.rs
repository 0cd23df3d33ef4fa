//! `Snapshot`: a frozen view of the database that its reads go through. The list of held
//! snapshots, which compaction consults, is `snapshot_list`.

use std::ops::RangeBounds;
use std::sync::Arc;

use bytes::Bytes;
use cairn_sstable::SeqNo;

use crate::column_family::ColumnFamily;
use crate::cursor::DbCursor;
use crate::error::Result;
use crate::inner::DbInner;
use crate::iterator::{DbIterator, owned_bounds, prefix_bounds};
use crate::version_edit::DEFAULT_CF;

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
        self.db.get(DEFAULT_CF, key.as_ref(), Some(self.seqno))
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
            Err(crate::error::Error::invalid(format!(
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
            DEFAULT_CF,
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
            DEFAULT_CF,
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

    /// A cursor over the live keys of the default family in `range` at the snapshot. See
    /// [`ColumnFamily::cursor_range`].
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn cursor_range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Result<DbCursor> {
        DbCursor::new(
            Arc::clone(&self.db),
            DEFAULT_CF,
            Some(self.seqno),
            owned_bounds(&range),
        )
    }

    /// A cursor over the live keys of `cf` in `range` at the snapshot. See
    /// [`ColumnFamily::cursor_range`].
    ///
    /// # Errors
    /// As [`range_cf`](Self::range_cf).
    pub fn cursor_range_cf<K: AsRef<[u8]>>(
        &self,
        cf: &ColumnFamily,
        range: impl RangeBounds<K>,
    ) -> Result<DbCursor> {
        self.check_family(cf)?;
        DbCursor::new(
            Arc::clone(&self.db),
            cf.id,
            Some(self.seqno),
            owned_bounds(&range),
        )
    }

    /// A cursor over every live key of the default family at the snapshot.
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn cursor(&self) -> Result<DbCursor> {
        self.cursor_range::<&[u8]>(..)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.db.snapshots.release(self.seqno);
        // Tombstones it pinned may be droppable now.
        self.db.state_changed.notify_all();
    }
}
