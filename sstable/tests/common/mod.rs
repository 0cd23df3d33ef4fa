//! Shared by the table tests: a sorted model of internal entries and ways to build tables.

#![allow(dead_code, clippy::missing_errors_doc, clippy::missing_panics_doc)]

use std::cmp::Ordering;
use std::path::Path;

use bytes::Bytes;
use cairn_sstable::{
    EntryMeta, InternalIterator, Kind, RangeTombstone, SeqNo, Table, TableOptions, TableWriter,
    compare_internal_keys, internal_key,
};

/// One point entry of the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelEntry {
    pub key: Vec<u8>,
    pub meta: EntryMeta,
    pub value: Vec<u8>,
}

impl ModelEntry {
    pub fn new(user_key: &[u8], seqno: SeqNo, kind: Kind, meta: EntryMeta, value: &[u8]) -> Self {
        Self {
            key: internal_key(user_key, seqno, kind),
            meta,
            value: value.to_vec(),
        }
    }
}

/// Sorts entries in internal-key order and drops duplicate internal keys.
pub fn sort_model(entries: &mut Vec<ModelEntry>) {
    entries.sort_by(|a, b| compare_internal_keys(&a.key, &b.key));
    entries.dedup_by(|a, b| a.key == b.key);
}

/// Index of the first entry at or after `target`.
pub fn lower_bound(model: &[ModelEntry], target: &[u8]) -> usize {
    model.partition_point(|e| compare_internal_keys(&e.key, target) == Ordering::Less)
}

/// Index of the last entry at or before `target`, if any.
pub fn floor(model: &[ModelEntry], target: &[u8]) -> Option<usize> {
    model
        .partition_point(|e| compare_internal_keys(&e.key, target) != Ordering::Greater)
        .checked_sub(1)
}

/// The iterator's current entry as a model entry.
pub fn current(iter: &impl InternalIterator) -> Option<ModelEntry> {
    iter.valid().then(|| ModelEntry {
        key: iter.key().to_vec(),
        meta: iter.meta(),
        value: iter.value().to_vec(),
    })
}

/// Writes `entries` (sorted) and `tombstones` into a table at `path` and opens it.
pub fn write_table(
    dir: &Path,
    name: &str,
    id: u64,
    entries: &[ModelEntry],
    tombstones: &[RangeTombstone],
    options: TableOptions,
) -> cairn_sstable::Result<Table> {
    let fs = cairn_fs::RealFs::new();
    let path = dir.join(name);
    let mut writer = TableWriter::new(cairn_fs::FileSystem::create(&fs, &path)?, options)?;
    for e in entries {
        writer.add(&e.key, e.meta, &e.value)?;
    }
    for t in tombstones {
        writer.add_range_tombstone(&t.start, &t.end, t.seqno, t.write_time)?;
    }
    writer.finish()?;
    Table::open(&fs, &path, id, None)
}

/// Scans forward from the first entry.
pub fn scan_forward(iter: &mut impl InternalIterator) -> cairn_sstable::Result<Vec<ModelEntry>> {
    let mut out = Vec::new();
    iter.seek_to_first()?;
    while let Some(e) = current(iter) {
        out.push(e);
        iter.next()?;
    }
    Ok(out)
}

/// Scans backward from the last entry; returns entries in forward order.
pub fn scan_backward(iter: &mut impl InternalIterator) -> cairn_sstable::Result<Vec<ModelEntry>> {
    let mut out = Vec::new();
    iter.seek_to_last()?;
    while let Some(e) = current(iter) {
        out.push(e);
        iter.prev()?;
    }
    out.reverse();
    Ok(out)
}

/// A sorted in-memory internal iterator, to mix with tables in merge tests.
#[derive(Debug)]
pub struct VecIter {
    entries: Vec<ModelEntry>,
    pos: Option<usize>,
}

impl VecIter {
    pub fn new(entries: Vec<ModelEntry>) -> Self {
        Self { entries, pos: None }
    }

    fn at(&self) -> Option<&ModelEntry> {
        self.pos.and_then(|p| self.entries.get(p))
    }
}

impl InternalIterator for VecIter {
    fn valid(&self) -> bool {
        self.at().is_some()
    }
    fn key(&self) -> &[u8] {
        self.at().map(|e| e.key.as_slice()).unwrap_or_default()
    }
    fn meta(&self) -> EntryMeta {
        self.at().map(|e| e.meta).unwrap_or_default()
    }
    fn value(&self) -> &[u8] {
        self.at().map(|e| e.value.as_slice()).unwrap_or_default()
    }
    fn value_bytes(&self) -> Bytes {
        Bytes::copy_from_slice(self.value())
    }
    fn seek_to_first(&mut self) -> cairn_sstable::Result<()> {
        self.pos = Some(0);
        Ok(())
    }
    fn seek_to_last(&mut self) -> cairn_sstable::Result<()> {
        self.pos = self.entries.len().checked_sub(1);
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        self.pos = Some(lower_bound(&self.entries, target));
        Ok(())
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        self.pos = floor(&self.entries, target);
        Ok(())
    }
    fn next(&mut self) -> cairn_sstable::Result<()> {
        self.pos = self.pos.map(|p| p + 1);
        Ok(())
    }
    fn prev(&mut self) -> cairn_sstable::Result<()> {
        self.pos = self.pos.and_then(|p| p.checked_sub(1));
        Ok(())
    }
}
