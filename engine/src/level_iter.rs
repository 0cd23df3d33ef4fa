//! A sorted level read as one source: LevelDB's concatenating iterator.
//!
//! Below level 0 a column family's tables are sorted by key and do not overlap, so a level is
//! one sorted run cut into files. [`LevelIter`] walks it as one cursor and opens a table only
//! when a seek or a step reaches it: a range read's merging heap holds one child per level, not
//! one per table, and a seek reads one table per level instead of every table after the key.
//!
//! [`LevelTombstones`] answers a level's range-tombstone questions from those of its tables
//! that hold any, opening each when a lookup first reaches it.
//!
//! Neighbouring tables may touch: a table's largest bound can be the exclusive end of its last
//! range tombstone, where the next table starts. So a tombstone lookup asks both tables whose
//! bounds hold the key. Compaction never splits one user key's versions across tables, but a
//! seek that runs off a table still seeks the same target in the next one rather than taking
//! its first entry, which stays right even if one did.
//!
//! The walk trusts the MANIFEST's bounds to order the tables, so a table is checked against
//! them when it is opened: one whose keys lie outside (a file swapped or restored under the
//! wrong number) is `Corruption`, never keys out of order.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use cairn_sstable::{EntryMeta, InternalIterator, SeqNo, Table, TableIter, key::user_key};

use crate::table_cache::TableCache;
use crate::version_edit::FileMeta;

/// The tables of one sorted level that overlap a read's range, walked as one sorted run.
pub(crate) struct LevelIter {
    tables: Arc<TableCache>,
    files: Vec<Arc<FileMeta>>,
    /// The index in `files` of the table `current` walks.
    at: usize,
    current: Option<TableIter>,
}

impl LevelIter {
    /// A cursor over `files` (sorted, not overlapping), opening tables from `tables`.
    pub(crate) fn new(tables: Arc<TableCache>, files: Vec<Arc<FileMeta>>) -> Self {
        Self {
            tables,
            files,
            at: 0,
            current: None,
        }
    }

    /// Points `current` at the table `files[at]` (a fresh cursor is unpositioned; the one
    /// already open there is kept); false past either end.
    fn open(&mut self, at: usize) -> cairn_sstable::Result<bool> {
        let Some(file) = self.files.get(at) else {
            self.current = None;
            return Ok(false);
        };
        if self.at != at || self.current.is_none() {
            self.current = None;
            let table = self.tables.open_file(file)?;
            self.current = Some(table.iter());
            self.at = at;
        }
        Ok(true)
    }

    /// Runs `step` on the current table; an error leaves the cursor unpositioned.
    fn on_current(
        &mut self,
        step: impl FnOnce(&mut TableIter) -> cairn_sstable::Result<()>,
    ) -> cairn_sstable::Result<()> {
        let Some(current) = self.current.as_mut() else {
            return Ok(());
        };
        let result = step(current);
        if result.is_err() {
            self.current = None;
        }
        result
    }

    fn current_valid(&self) -> bool {
        self.current.as_ref().is_some_and(TableIter::valid)
    }

    /// From an exhausted table, on to the first entry of the next ones that has any.
    fn skip_forward(&mut self) -> cairn_sstable::Result<()> {
        while self.current.is_some() && !self.current_valid() {
            if !self.open(self.at + 1)? {
                return Ok(());
            }
            self.on_current(TableIter::seek_to_first)?;
        }
        Ok(())
    }

    /// From an exhausted table, back to the last entry of the previous ones that has any.
    fn skip_backward(&mut self) -> cairn_sstable::Result<()> {
        while self.current.is_some() && !self.current_valid() {
            let Some(before) = self.at.checked_sub(1) else {
                self.current = None;
                return Ok(());
            };
            if !self.open(before)? {
                return Ok(());
            }
            self.on_current(TableIter::seek_to_last)?;
        }
        Ok(())
    }
}

impl InternalIterator for LevelIter {
    fn valid(&self) -> bool {
        self.current_valid()
    }
    fn key(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |c| c.key())
    }
    fn meta(&self) -> EntryMeta {
        self.current
            .as_ref()
            .map_or(EntryMeta::at(0), InternalIterator::meta)
    }
    fn value(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |c| c.value())
    }
    fn value_bytes(&self) -> Bytes {
        self.current
            .as_ref()
            .map_or_else(Bytes::new, InternalIterator::value_bytes)
    }
    fn corruption_here(&self, reason: &str) -> cairn_sstable::Error {
        match &self.current {
            Some(current) => current.corruption_here(reason),
            None => cairn_sstable::Error::unpositioned(reason),
        }
    }
    fn seek_to_first(&mut self) -> cairn_sstable::Result<()> {
        if self.open(0)? {
            self.on_current(TableIter::seek_to_first)?;
        }
        self.skip_forward()
    }
    fn seek_to_last(&mut self) -> cairn_sstable::Result<()> {
        if self.open(self.files.len().saturating_sub(1))? {
            self.on_current(TableIter::seek_to_last)?;
        }
        self.skip_backward()
    }
    fn seek(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        let key = user_key(target);
        let mut at = self.files.partition_point(|f| f.largest.as_ref() < key);
        // The target again in each later table rather than its first entry: the same answer
        // for tables compaction writes, and still right if a user key's versions ever
        // continued into the next table.
        while self.open(at)? {
            self.on_current(|c| c.seek(target))?;
            if self.current_valid() {
                break;
            }
            at += 1;
        }
        Ok(())
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        let key = user_key(target);
        let reaching = self.files.partition_point(|f| f.smallest.as_ref() <= key);
        let Some(mut at) = reaching.checked_sub(1) else {
            self.current = None;
            return Ok(());
        };
        loop {
            if !self.open(at)? {
                return Ok(());
            }
            self.on_current(|c| c.seek_for_prev(target))?;
            if self.current_valid() {
                return Ok(());
            }
            let Some(before) = at.checked_sub(1) else {
                self.current = None;
                return Ok(());
            };
            at = before;
        }
    }
    fn next(&mut self) -> cairn_sstable::Result<()> {
        self.on_current(TableIter::next)?;
        self.skip_forward()
    }
    fn prev(&mut self) -> cairn_sstable::Result<()> {
        self.on_current(TableIter::prev)?;
        self.skip_backward()
    }
}

/// A table of a level that holds range tombstones, opened when a lookup first needs it.
#[derive(Debug)]
struct TombstoneTable {
    file: Arc<FileMeta>,
    table: OnceLock<Table>,
}

/// The range tombstones of one sorted level: those of its tables that hold any, by key, each
/// table opened only when a lookup reaches it.
#[derive(Debug, Clone)]
pub(crate) struct LevelTombstones {
    cache: Arc<TableCache>,
    /// In key order, not overlapping (but maybe touching).
    tables: Arc<[TombstoneTable]>,
}

impl LevelTombstones {
    /// The tombstones of `files` (a sorted level), from the tables that hold any.
    pub(crate) fn new(cache: Arc<TableCache>, files: &[Arc<FileMeta>]) -> Self {
        let tables: Vec<TombstoneTable> = files
            .iter()
            .filter(|f| f.num_range_tombstones > 0)
            .map(|f| TombstoneTable {
                file: Arc::clone(f),
                table: OnceLock::new(),
            })
            .collect();
        Self {
            cache,
            tables: tables.into(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// The tables whose bounds hold `key`: at most two, when neighbours touch at it.
    fn holding<'a>(&'a self, key: &'a [u8]) -> impl Iterator<Item = &'a TombstoneTable> + 'a {
        let first = self
            .tables
            .partition_point(|t| t.file.largest.as_ref() < key);
        self.tables
            .get(first..)
            .unwrap_or_default()
            .iter()
            .take(2)
            .take_while(move |t| t.file.smallest.as_ref() <= key)
    }

    fn open<'a>(&self, entry: &'a TombstoneTable) -> cairn_sstable::Result<&'a Table> {
        if let Some(table) = entry.table.get() {
            return Ok(table);
        }
        let table = self.cache.open_file(&entry.file)?;
        Ok(entry.table.get_or_init(|| table))
    }

    /// The bounds of a fragment around `key` covered by a tombstone visible at `snapshot`.
    pub(crate) fn visible_cover(
        &self,
        key: &[u8],
        snapshot: SeqNo,
    ) -> cairn_sstable::Result<Option<(Bytes, Bytes)>> {
        for entry in self.holding(key) {
            let tombstones = self.open(entry)?.range_tombstones();
            if let Some(cover) = tombstones.visible_cover(key, snapshot) {
                return Ok(Some(cover));
            }
        }
        Ok(None)
    }

    /// Where a tombstone of this level may next cover a key, for a reader that found none
    /// covering `key`: the first fragment start after `key` in a table holding it, or the
    /// smallest key of the next table holding tombstones; `None` if neither exists.
    pub(crate) fn next_start_after(&self, key: &[u8]) -> cairn_sstable::Result<Option<Bytes>> {
        let mut next: Option<Bytes> = None;
        let mut keep_nearer = |start: &Bytes| {
            if next.as_ref().is_none_or(|n| start < n) {
                next = Some(start.clone());
            }
        };
        // Every table whose bounds hold `key` (not only the two `holding` gives a point lookup:
        // a level may hold several tables touching at one key), then the first one after it.
        let first = self
            .tables
            .partition_point(|t| t.file.largest.as_ref() < key);
        let after = self
            .tables
            .partition_point(|t| t.file.smallest.as_ref() <= key);
        for entry in self.tables.get(first..after).unwrap_or_default() {
            let tombstones = self.open(entry)?.range_tombstones();
            if let Some(start) = tombstones.next_start_after(key) {
                keep_nearer(start);
            }
        }
        if let Some(table) = self.tables.get(after) {
            keep_nearer(&table.file.smallest);
        }
        Ok(next)
    }

    /// The newest tombstone seqno covering `key` visible at `snapshot`.
    pub(crate) fn covering_seqno(
        &self,
        key: &[u8],
        snapshot: SeqNo,
    ) -> cairn_sstable::Result<Option<SeqNo>> {
        let mut newest = None;
        for entry in self.holding(key) {
            let tombstones = self.open(entry)?.range_tombstones();
            newest = newest.max(tombstones.covering_seqno(key, snapshot));
        }
        Ok(newest)
    }
}
