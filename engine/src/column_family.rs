//! Column families: independent key spaces with their own options, sharing one log and one
//! sequence of writes. The database itself is the column family named `"default"`.
//!
//! Here are the public handle with its data API (the reads and writes `Db` offers on the default
//! family) and the creation and dropping of families, each an exclusive entry of the write
//! queue and one MANIFEST edit.

use std::ops::RangeBounds;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::audit::KeyTrace;
use crate::clock::millis;
use crate::cursor::DbCursor;
use crate::error::{Error, Result};
use crate::explain::TombstoneExplanation;
use crate::inner::DbInner;
use crate::iterator::{DbIterator, owned_bounds, prefix_bounds};
use crate::log_record::{BatchOp, bytes};
use crate::memtable::Memtable;
use crate::options::CfOptions;
use crate::read::Version;
use crate::stats::{CompactionCounts, TableInfo};
use crate::super_version::MemSet;
use crate::version_edit::VersionEdit;
use cairn_sstable::SeqNo;

/// A handle on a column family. Cheap to clone; it names the family by id, so a handle to a
/// dropped family fails with `ColumnFamilyNotFound` rather than reaching a new family of the
/// same name.
#[derive(Debug, Clone)]
pub struct ColumnFamily {
    pub(crate) db: Arc<DbInner>,
    pub(crate) id: u32,
    pub(crate) name: Arc<str>,
}

impl ColumnFamily {
    pub(crate) fn new(db: &Arc<DbInner>, id: u32, name: &str) -> Self {
        Self {
            db: Arc::clone(db),
            id,
            name: Arc::from(name),
        }
    }

    /// The family's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The family's id: fixed at creation, never reused, stored in the MANIFEST.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The family's options now.
    ///
    /// # Errors
    /// `ColumnFamilyNotFound` if the family was dropped.
    pub fn options(&self) -> Result<CfOptions> {
        self.db.super_version().cf_options(self.id)
    }

    /// Changes the family's `ttl` and `max_versions`, durably: the change is in the MANIFEST
    /// (synced) before this returns, and reads and compactions that start after it use the new
    /// options. `tombstone_grace` cannot change: erasure deadlines already reported by
    /// `audit_key` were computed with it.
    ///
    /// Expiry is decided when data is read or compacted, never when it is written, so a change
    /// applies to everything not yet compacted, as HBase's `alter` does: a shorter TTL hides
    /// cells at once; removing a TTL (or lengthening it) makes cells visible again that had
    /// expired under the old one but that no compaction has dropped yet; raising `max_versions`
    /// likewise shows older versions compactions have not dropped. What compactions dropped is
    /// gone, and a compaction running when the options change finishes under the ones it began
    /// with (call [`Db::wait_for_background_work`](crate::Db::wait_for_background_work) after
    /// the change to be past those). Reads apply the options current when they run, at a
    /// snapshot too; an iterator keeps the ones it began with.
    ///
    /// # Errors
    /// `InvalidArgument` if `tombstone_grace` differs; `ColumnFamilyNotFound` if the family was
    /// dropped; `ReadOnly` on a read-only database; `Io` if the MANIFEST cannot be written
    /// (which stops the database, as every MANIFEST failure does; after a reopen the family
    /// has the old options or the new ones).
    pub fn set_options(&self, options: CfOptions) -> Result<()> {
        self.db.set_cf_options(self.id, &self.name, options)
    }
}

impl ColumnFamily {
    /// Sets `key` to `value`.
    ///
    /// # Errors
    /// `InvalidArgument` if the key or value is over the limit; `ColumnFamilyNotFound` if the
    /// family was dropped; `Stopped` if an earlier failure stopped the database or it is closed.
    /// With those three the write was certainly not applied. `Io` if the log write or sync
    /// failed: the write may or may not survive a reopen, and the database stops.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.db.write_op(BatchOp::Put {
            cf: self.id,
            key: bytes(key),
            value: bytes(value),
            ttl: None,
        })
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
        self.db.write_op(BatchOp::Put {
            cf: self.id,
            key: bytes(key),
            value: bytes(value),
            ttl: Some(millis(ttl)),
        })
    }

    /// Deletes `key`.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.db.write_op(BatchOp::Delete {
            cf: self.id,
            key: bytes(key),
        })
    }

    /// Deletes `key`, which must have been put exactly once since it was last deleted: the
    /// tombstone then vanishes with the put it cancels. Misuse is detected by compaction.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn single_delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.db.write_op(BatchOp::SingleDelete {
            cf: self.id,
            key: bytes(key),
        })
    }

    /// Deletes every key in `[start, end)` with one range tombstone.
    ///
    /// # Errors
    /// `InvalidArgument` if `start > end` (`start == end` deletes nothing); otherwise as
    /// [`put`](Self::put). (A lone range delete is never refused for memory; a batch of many
    /// may be, see [`Db::write`](crate::Db::write).)
    pub fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        self.db.write_op(BatchOp::DeleteRange {
            cf: self.id,
            start: bytes(start),
            end: bytes(end),
        })
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

    /// A cursor over the live keys in `range` that lends each key and value until it moves,
    /// allocating nothing per entry: for scans that only look at each entry. Unpositioned
    /// until a seek.
    ///
    /// # Errors
    /// As [`range`](Self::range).
    pub fn cursor_range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Result<DbCursor> {
        DbCursor::new(Arc::clone(&self.db), self.id, None, owned_bounds(&range))
    }

    /// A cursor over every live key. See [`cursor_range`](Self::cursor_range).
    ///
    /// # Errors
    /// As [`range`](Self::range).
    pub fn cursor(&self) -> Result<DbCursor> {
        self.cursor_range::<&[u8]>(..)
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

    /// Compacts the family's tables overlapping `range` down to the last level, as
    /// [`compact_range`](Self::compact_range) does, but leaves the memtables alone (no flush).
    /// Returns what the compactions it ran read and dropped, by rule.
    ///
    /// # Errors
    /// `ColumnFamilyNotFound` if the family was dropped; the error of a failed compaction.
    pub fn compact_tables<K: AsRef<[u8]>>(
        &self,
        range: impl RangeBounds<K>,
    ) -> Result<CompactionCounts> {
        self.options()?;
        self.db.compact_tables(self.id, &owned_bounds(&range))
    }

    /// The family's tables now, level by level (newest first within level 0).
    ///
    /// # Errors
    /// `ColumnFamilyNotFound` if the family was dropped.
    pub fn tables(&self) -> Result<Vec<TableInfo>> {
        let sv = self.db.super_version();
        let cf = sv
            .version
            .cf(self.id)
            .ok_or_else(|| Error::ColumnFamilyNotFound(self.name.to_string()))?;
        Ok(cf
            .all_files()
            .map(|(level, file)| TableInfo::of(level, file))
            .collect())
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
        self.db
            .explain_tombstones(self.id, &owned_bounds(&range), &[])
    }

    /// As [`explain_tombstones`](Self::explain_tombstones), judged as though snapshots at the
    /// sequence numbers `snapshots` were held as well: what a snapshot another process holds
    /// (or a long job is about to take) keeps. `cairn explain --snapshot` asks this of a
    /// database opened read-only, where the service's own snapshots are out of sight.
    ///
    /// # Errors
    /// `Corruption` if a table on the way is damaged.
    pub fn explain_tombstones_with_snapshots<K: AsRef<[u8]>>(
        &self,
        range: impl RangeBounds<K>,
        snapshots: &[SeqNo],
    ) -> Result<Vec<TombstoneExplanation>> {
        self.db
            .explain_tombstones(self.id, &owned_bounds(&range), snapshots)
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

impl DbInner {
    /// Creates a column family (an exclusive entry of the write queue, so no write is in flight
    /// while the memtables gain it); returns its id.
    pub(crate) fn create_column_family(&self, name: &str, options: CfOptions) -> Result<u32> {
        if name.is_empty() {
            return Err(Error::invalid("a column family needs a name"));
        }
        let name = name.to_string();
        let id = self.run_exclusive(Box::new(move |db: &DbInner| {
            let id = std::cell::Cell::new(0);
            db.log_and_apply(
                |state| {
                    state.check_running()?;
                    if state.meta.cfs.values().any(|(n, _)| *n == name) {
                        return Err(Error::invalid(format!(
                            "column family {name:?} already exists"
                        )));
                    }
                    id.set(state.meta.next_cf_id);
                    Ok(Some(VersionEdit {
                        added_cfs: vec![(id.get(), name, options)],
                        next_cf_id: Some(id.get() + 1),
                        ..VersionEdit::default()
                    }))
                },
                |state| {
                    let mut tables = state.mem.tables.clone();
                    tables.insert(id.get(), Arc::new(Memtable::new()));
                    state.mem = Arc::new(MemSet {
                        log_number: state.mem.log_number,
                        tables,
                    });
                },
            )?;
            Ok(u64::from(id.get()))
        }))?;
        u32::try_from(id).map_err(|_| Error::invalid("column family id overflow"))
    }

    /// Replaces the options of column family `id` (an exclusive entry, as for creation). The
    /// MANIFEST records it as the family's record again, with the new options: a record for a
    /// family already present replaces its options, on replay as in the snapshot a rollover
    /// writes.
    pub(crate) fn set_cf_options(&self, id: u32, name: &str, options: CfOptions) -> Result<()> {
        let name = name.to_string();
        self.run_exclusive(Box::new(move |db: &DbInner| {
            db.log_and_apply(
                |state| {
                    state.check_running()?;
                    let Some((_, current)) = state.meta.cfs.get(&id).filter(|(n, _)| *n == name)
                    else {
                        return Err(Error::ColumnFamilyNotFound(name));
                    };
                    if current.tombstone_grace != options.tombstone_grace {
                        return Err(Error::invalid(format!(
                            "the tombstone grace of column family {name:?} cannot change \
                             ({:?} to {:?}): erasure deadlines already reported depend on it",
                            current.tombstone_grace, options.tombstone_grace
                        )));
                    }
                    Ok(Some(VersionEdit {
                        added_cfs: vec![(id, name, options)],
                        ..VersionEdit::default()
                    }))
                },
                |_| (),
            )?;
            Ok(0)
        }))?;
        Ok(())
    }

    /// Drops column family `id` (an exclusive entry, as for creation); its tables go once no
    /// reader needs them.
    pub(crate) fn drop_column_family(&self, id: u32, name: &str) -> Result<()> {
        let name = name.to_string();
        self.run_exclusive(Box::new(move |db: &DbInner| {
            db.log_and_apply(
                |state| {
                    state.check_running()?;
                    if !state.meta.cfs.contains_key(&id) {
                        return Err(Error::ColumnFamilyNotFound(name));
                    }
                    Ok(Some(VersionEdit {
                        dropped_cfs: vec![id],
                        ..VersionEdit::default()
                    }))
                },
                |state| {
                    let mut tables = state.mem.tables.clone();
                    tables.remove(&id);
                    state.mem = Arc::new(MemSet {
                        log_number: state.mem.log_number,
                        tables,
                    });
                },
            )?;
            Ok(0)
        }))?;
        self.delete_obsolete_files();
        Ok(())
    }
}
