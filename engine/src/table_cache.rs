//! Open tables by file number: opened on first use (read with `pread`, or mapped if
//! `Options::mmap_reads`), kept in a bounded cache, and tracked while anyone holds them.
//!
//! The cache holds at most `Options::max_open_tables` tables, and tables read with `pread` (each
//! holding a file descriptor) at most half the process's descriptor limit; the least recently
//! used one is closed when another is opened (a reader using it keeps its own handle until done). Every table
//! opened is also remembered weakly, so an audit can find one that is still open after its
//! file was deleted: an open file or a mapping keeps an unlinked file's bytes on disk.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cairn_fs::FileSystem;
use cairn_sstable::{BlockCache, Table, WeakTable, key::user_key};

use crate::error::Result;
use crate::filename;
use crate::version_edit::FileMeta;
use crate::version_edit::record_of;

/// The most tables to keep open when each holds a file descriptor: `max_open`, but no more than
/// half the process's descriptor limit, so that logs, the MANIFEST, tables being written,
/// compaction inputs and the application keep the rest (at least 16 all the same).
fn within_descriptors(max_open: usize, limit: Option<u64>) -> usize {
    let Some(limit) = limit else {
        return max_open;
    };
    let half = usize::try_from(limit / 2).unwrap_or(usize::MAX);
    max_open.min(half.max(16))
}

/// Maps file numbers to open tables.
pub(crate) struct TableCache {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    blocks: Option<BlockCache>,
    open: quick_cache::sync::Cache<u64, Table>,
    /// Every table opened, while anything holds it.
    alive: Mutex<HashMap<u64, WeakTable>>,
    blocks_read: Arc<AtomicU64>,
    /// Open tables through a mapping ([`Table::open_mapped`]).
    mapped: bool,
}

impl std::fmt::Debug for TableCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableCache")
            .field("dir", &self.dir)
            .field("open", &self.open.len())
            .finish_non_exhaustive()
    }
}

impl TableCache {
    pub(crate) fn new(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        blocks: Option<BlockCache>,
        max_open: usize,
        mapped: bool,
    ) -> Self {
        let bound = if mapped {
            max_open
        } else {
            within_descriptors(max_open, cairn_fs::open_file_limit())
        };
        Self {
            fs,
            dir,
            blocks,
            open: quick_cache::sync::Cache::new(bound.max(1)),
            alive: Mutex::new(HashMap::new()),
            blocks_read: Arc::new(AtomicU64::new(0)),
            mapped,
        }
    }

    /// Data blocks fetched from every table this cache has opened, by reads and compactions,
    /// including tables since deleted.
    pub(crate) fn blocks_read(&self) -> u64 {
        self.blocks_read.load(Ordering::Relaxed)
    }

    /// Bytes the block cache holds now; zero without one.
    pub(crate) fn block_cache_bytes(&self) -> u64 {
        self.blocks.as_ref().map_or(0, BlockCache::usage)
    }

    /// Tables the cache holds open now.
    pub(crate) fn open_tables(&self) -> usize {
        self.open.len()
    }

    /// The table `file` records, opening it if neither the cache nor anyone else holds it; when
    /// this opens it, its keys are held to `file`'s bounds ([`check_bounds`]), once. The table layer's error,
    /// for iterators that speak it.
    pub(crate) fn open_file(&self, file: &FileMeta) -> cairn_sstable::Result<Table> {
        let number = file.number;
        self.open
            .get_or_insert_with(&number, || -> cairn_sstable::Result<Table> {
                // Still held (by a reader, or pinned by a read-only open): the same bytes, and
                // maybe no longer in the directory.
                if let Some(table) = self.lock_alive().get(&number).and_then(WeakTable::upgrade) {
                    return Ok(table);
                }
                let open = if self.mapped {
                    Table::open_mapped
                } else {
                    Table::open
                };
                let table = open(
                    self.fs.as_ref(),
                    &filename::table_path(&self.dir, number),
                    number,
                    self.blocks.clone(),
                )?
                .with_shared_counter(Arc::clone(&self.blocks_read));
                check_bounds(&table, file)?;
                let mut alive = self.lock_alive();
                alive.retain(|_, weak| weak.is_alive());
                alive.insert(number, table.downgrade());
                Ok(table)
            })
    }

    /// The table `file` records (see [`open_file`](Self::open_file)).
    pub(crate) fn table(&self, file: &FileMeta) -> Result<Table> {
        Ok(self.open_file(file)?)
    }

    /// Forgets a table that was deleted. Readers still holding it keep it open.
    pub(crate) fn evict(&self, number: u64) {
        self.open.remove(&number);
    }

    /// Tables still open, by anyone, whose numbers are not in `live`: no longer read by the
    /// version, and maybe deleted while a reader holds them.
    pub(crate) fn held_besides(&self, live: &std::collections::HashSet<u64>) -> Vec<(u64, Table)> {
        let alive = self.lock_alive();
        alive
            .iter()
            .filter(|(n, _)| !live.contains(n))
            .filter_map(|(&n, weak)| weak.upgrade().map(|t| (n, t)))
            .collect()
    }

    fn lock_alive(&self) -> std::sync::MutexGuard<'_, HashMap<u64, WeakTable>> {
        self.alive
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `Corruption` if `table` holds point entries or range tombstones outside the bounds the
/// MANIFEST records for it (they are computed from the same keys when it is written): a level
/// walked in file order would hand keys out of order, and a tombstone lookup that trusts the
/// bounds would miss a cover or apply one where it does not belong.
///
/// The counts and seqno span the record copies from the table's properties must match too: a
/// read skips a table whose record says it holds no range tombstone, so a file swapped for one
/// within the same bounds that holds some would otherwise hide nothing it should.
pub(crate) fn check_bounds(table: &Table, file: &FileMeta) -> cairn_sstable::Result<()> {
    check_key_range(table, file)?;
    check_counts(table, file)
}

/// The key half of [`check_bounds`].
fn check_key_range(table: &Table, file: &FileMeta) -> cairn_sstable::Result<()> {
    let props = table.properties();
    let fragments = table.range_tombstones().fragments();
    let below = props
        .smallest_key
        .as_ref()
        .is_some_and(|k| user_key(k) < file.smallest.as_ref())
        || fragments
            .first()
            .is_some_and(|f| f.start.as_ref() < file.smallest.as_ref());
    let above = props
        .largest_key
        .as_ref()
        .is_some_and(|k| user_key(k) > file.largest.as_ref())
        || fragments
            .last()
            .is_some_and(|f| f.end.as_ref() > file.largest.as_ref());
    if below || above {
        return Err(cairn_sstable::Error::Corruption {
            file: table.path().to_path_buf(),
            offset: 0,
            reason: format!(
                "table keys [{:?}, {:?}] lie outside the bounds the MANIFEST records, [{:?}, {:?}]",
                props
                    .smallest_key
                    .as_deref()
                    .map(user_key)
                    .map(String::from_utf8_lossy),
                props
                    .largest_key
                    .as_deref()
                    .map(user_key)
                    .map(String::from_utf8_lossy),
                String::from_utf8_lossy(&file.smallest),
                String::from_utf8_lossy(&file.largest),
            ),
        });
    }
    Ok(())
}

/// The rest of [`check_bounds`]: the record, rebuilt from the table, equals the MANIFEST's
/// (counts, seqno span, tombstone times, expiry, size), so nothing a read or a pick trusts from
/// the record can differ from the file.
fn check_counts(table: &Table, file: &FileMeta) -> cairn_sstable::Result<()> {
    let on_disk = record_of(
        file.number,
        table.file_size(),
        table.properties(),
        table.range_tombstones(),
    );
    if on_disk != *file {
        return Err(cairn_sstable::Error::Corruption {
            file: table.path().to_path_buf(),
            offset: 0,
            reason: format!(
                "table differs from the record the MANIFEST keeps for it: holds {on_disk:?}, \
                 the MANIFEST records {file:?}"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use cairn_fs::{FileSystem, RealFs};
    use cairn_sstable::{EntryMeta, Kind, TableOptions, TableWriter, internal_key};

    use bytes::Bytes;

    use super::*;
    use crate::version_set::file_meta;

    #[test]
    fn open_tables_keep_to_half_the_descriptor_limit() {
        assert_eq!(within_descriptors(1000, None), 1000);
        assert_eq!(within_descriptors(1000, Some(1024)), 512);
        assert_eq!(within_descriptors(1000, Some(1_048_576)), 1000);
        assert_eq!(within_descriptors(1000, Some(20)), 16);
        assert_eq!(within_descriptors(4, Some(1024)), 4);
    }

    /// A table holding point key `n` and the range tombstone `[m, p)`, and its MANIFEST record.
    fn table_with_a_tombstone(dir: &std::path::Path) -> (Table, FileMeta) {
        let fs = RealFs;
        let path = dir.join("000001.sst");
        let mut writer =
            TableWriter::new(fs.create(&path).expect("create"), TableOptions::default())
                .expect("writer");
        writer
            .add(&internal_key(b"n", 1, Kind::Put), EntryMeta::at(0), b"v")
            .expect("add");
        writer
            .add_range_tombstone(b"m", b"p", 2, 0)
            .expect("tombstone");
        let summary = writer.finish().expect("finish");
        let table = Table::open(&fs, &path, 1, None).expect("open");
        (table, file_meta(1, &summary))
    }

    /// A record whose counts or seqno span differ from the table's (a file swapped for another
    /// within the same bounds) is `Corruption`, each field alone.
    #[test]
    fn a_table_whose_counts_differ_from_its_record_is_corruption() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (table, file) = table_with_a_tombstone(dir.path());
        let changes: [fn(&mut FileMeta); 8] = [
            |f| f.num_range_tombstones = 0,
            |f| f.num_entries += 1,
            |f| f.smallest_seqno = 0,
            |f| f.largest_seqno += 1,
            |f| f.num_point_tombstones += 1,
            |f| f.oldest_tombstone_time = None,
            |f| f.earliest_expiry = Some(1),
            |f| f.file_size += 1,
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut wrong = file.clone();
            change(&mut wrong);
            let checked = check_bounds(&table, &wrong);
            assert!(
                matches!(&checked, Err(cairn_sstable::Error::Corruption { reason, .. }) if reason.contains("MANIFEST records")),
                "change {i}: {checked:?}"
            );
        }
    }

    #[test]
    fn a_table_whose_tombstones_lie_outside_its_recorded_bounds_is_corruption() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (table, file) = table_with_a_tombstone(dir.path());
        assert_eq!(file.smallest.as_ref(), b"m");
        assert_eq!(file.largest.as_ref(), b"p");
        check_bounds(&table, &file).expect("its own record");
        // A record that holds the point key but not the whole tombstone, either side.
        for (smallest, largest) in [(&b"n"[..], &b"p"[..]), (&b"m"[..], &b"o"[..])] {
            let mut wrong = file.clone();
            wrong.smallest = Bytes::copy_from_slice(smallest);
            wrong.largest = Bytes::copy_from_slice(largest);
            let checked = check_bounds(&table, &wrong);
            assert!(
                matches!(&checked, Err(cairn_sstable::Error::Corruption { reason, .. }) if reason.contains("outside")),
                "[{smallest:?}, {largest:?}]: {checked:?}"
            );
        }
    }
}
