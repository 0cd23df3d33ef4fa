//! Opens a table (read with `pread`, or mapped) and answers point lookups.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use cairn_fs::FileSystem;

use super::block_io::{
    BlockBound, Dictionary, MAX_PROPERTIES_LEN, Raw, read_block, read_block_ahead, stored_len,
};
use super::file::{Readahead, TableFile};
use super::footer::{BlockHandle, FOOTER_LEN, Footer};
use super::iter::TableIter;
use super::properties::TableProperties;
use super::range_tombstones::FragmentedRangeTombstones;
use crate::block::Block;
use crate::bloom::{Bloom, bloom_hash};
use crate::cache::BlockCache;
use crate::error::{Origin, Result};
use crate::iter::{Entry, InternalIterator};
use crate::key::{SeqNo, seek_key, user_key};

/// An open table. Cloning is cheap and shares the file, index, filter and range tombstones.
///
/// Opening checks the footer, index, filter, range-tombstone and properties blocks; data blocks
/// are checked when first read (and then cached, if a cache was given).
#[derive(Debug, Clone)]
pub struct Table {
    inner: Arc<TableInner>,
}

#[derive(Debug)]
struct TableInner {
    id: u64,
    origin: Origin,
    /// No block of this table decompresses to more (its recorded `max_block_bytes`).
    max_block_len: BlockBound,
    /// Where the data blocks end: everything after is read when the table opens.
    data_end: u64,
    /// The zstd dictionary its data blocks were compressed with, digested once.
    dictionary: Option<Dictionary>,
    data: TableFile,
    index: Block,
    bloom: Bloom,
    range_tombstones: FragmentedRangeTombstones,
    properties: TableProperties,
    cache: Option<BlockCache>,
    blocks_read: AtomicU64,
    shared_blocks_read: OnceLock<Arc<AtomicU64>>,
}

/// A handle on an open table that does not keep it open: for knowing whether anyone still does.
#[derive(Debug, Clone)]
pub struct WeakTable(std::sync::Weak<TableInner>);

impl WeakTable {
    /// The table, if something still holds it open.
    pub fn upgrade(&self) -> Option<Table> {
        self.0.upgrade().map(|inner| Table { inner })
    }

    /// True if something still holds the table open.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

impl Table {
    /// A handle that does not keep the table (and its file) open.
    pub fn downgrade(&self) -> WeakTable {
        WeakTable(Arc::downgrade(&self.inner))
    }

    /// Opens the table at `path`, to be read with positional reads: of its data blocks, only
    /// what the cache keeps stays in memory (its index, filter, range tombstones and properties
    /// stay while it is open). It holds a file descriptor until closed. `id` must be unique
    /// among tables sharing `cache` (the engine uses the file number).
    ///
    /// # Errors
    /// `Io` if the file cannot be opened or read; `Corruption` naming the file and offset if
    /// any checked part of it is damaged.
    pub fn open(
        fs: &dyn FileSystem,
        path: &Path,
        id: u64,
        cache: Option<BlockCache>,
    ) -> Result<Self> {
        Self::from_file(TableFile::Reader(fs.open_read(path)?), path, id, cache)
    }

    /// [`open`](Self::open), but maps the file and reads blocks from the mapping: a little
    /// faster on a cache miss, but every page touched counts in the process's resident set
    /// until the table closes.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_mapped(
        fs: &dyn FileSystem,
        path: &Path,
        id: u64,
        cache: Option<BlockCache>,
    ) -> Result<Self> {
        Self::from_bytes(fs.map(path)?, path, id, cache)
    }

    /// Opens a table held in memory; `path` is only used to name it in errors.
    ///
    /// # Errors
    /// `Corruption` if any checked part of it is damaged.
    pub fn from_bytes(
        data: Bytes,
        path: &Path,
        id: u64,
        cache: Option<BlockCache>,
    ) -> Result<Self> {
        Self::from_file(TableFile::Whole(data), path, id, cache)
    }

    fn from_file(data: TableFile, path: &Path, id: u64, cache: Option<BlockCache>) -> Result<Self> {
        let origin = Origin::new(Arc::from(path), 0);
        let tail = data.len().saturating_sub(FOOTER_LEN as u64);
        let tail_len = usize::try_from(data.len() - tail).unwrap_or(FOOTER_LEN);
        let footer = data.fetch(tail, tail_len, &origin)?;
        let footer = Footer::decode(&footer.bytes, data.len(), &origin)?;
        // Blocks read here live and die with the table: they may borrow the file's bytes.
        let read = |handle: BlockHandle, max_len: BlockBound| {
            read_block(&data, handle, &origin, max_len, Raw::Borrowed)
        };
        let block = |handle: BlockHandle, max_len: BlockBound| -> Result<Block> {
            Block::new(
                read(handle, max_len)?,
                Origin::new(origin.file.clone(), handle.offset),
            )
        };
        let properties =
            TableProperties::decode(&block(footer.properties, MAX_PROPERTIES_LEN)?, &origin)?;
        let max_block_len = block_bound(&properties);
        let dictionary = match properties.zstd_dictionary_bytes {
            0 => None,
            size => {
                let handle = BlockHandle {
                    offset: properties.zstd_dictionary_offset,
                    size,
                };
                Some(Dictionary::read(&data, handle, &origin)?)
            }
        };
        let data_end = [
            footer.index,
            footer.filter,
            footer.range_tombstones,
            footer.properties,
        ]
        .iter()
        .map(|h| h.offset)
        .chain(
            dictionary
                .is_some()
                .then_some(properties.zstd_dictionary_offset),
        )
        .min()
        .unwrap_or(0);
        let index = block(footer.index, max_block_len)?;
        let filter_at = Origin::new(origin.file.clone(), footer.filter.offset);
        let bloom = Bloom::new(read(footer.filter, max_block_len)?)
            .ok_or_else(|| filter_at.corruption(0, "malformed bloom filter"))?;
        let tombstones_at = Origin::new(origin.file.clone(), footer.range_tombstones.offset);
        let range_tombstones = FragmentedRangeTombstones::decode(
            &read(footer.range_tombstones, max_block_len)?,
            &tombstones_at,
        )?;
        if range_tombstones.num_versions() != properties.num_range_tombstones {
            return Err(
                tombstones_at.corruption(0, "range tombstone count disagrees with properties")
            );
        }
        Ok(Self {
            inner: Arc::new(TableInner {
                id,
                origin,
                max_block_len,
                data_end,
                dictionary,
                data,
                index,
                bloom,
                range_tombstones,
                properties,
                cache,
                blocks_read: AtomicU64::new(0),
                shared_blocks_read: OnceLock::new(),
            }),
        })
    }

    /// The id the table was opened with.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The file the table was opened from.
    pub fn path(&self) -> &Path {
        &self.inner.origin.file
    }

    /// The file's size in bytes.
    pub fn file_size(&self) -> u64 {
        self.inner.data.len()
    }

    /// What the table holds, as recorded when it was written.
    pub fn properties(&self) -> &TableProperties {
        &self.inner.properties
    }

    /// The table's range tombstones.
    pub fn range_tombstones(&self) -> &FragmentedRangeTombstones {
        &self.inner.range_tombstones
    }

    /// False only if the table certainly holds no point entry for `user_key` (bloom filter).
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.may_contain_hash(bloom_hash(user_key))
    }

    /// [`may_contain`](Self::may_contain) for a key whose [`bloom_hash`](crate::bloom_hash) a
    /// read computed once for every table it probes.
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        self.inner.bloom.may_contain_hash(hash)
    }

    /// Data blocks fetched so far (from the cache or the file): a cost counter for tests and
    /// statistics.
    pub fn blocks_read(&self) -> u64 {
        self.inner.blocks_read.load(Ordering::Relaxed)
    }

    /// Also counts this table's data block fetches into `counter`, a total that outlives the
    /// table (the engine's per-database count). Only the first call on a table takes effect.
    #[must_use]
    pub fn with_shared_counter(self, counter: Arc<AtomicU64>) -> Self {
        let _ = self.inner.shared_blocks_read.set(counter);
        self
    }

    /// The bloom filter's size in bytes.
    pub fn filter_size(&self) -> usize {
        self.inner.bloom.size()
    }

    /// The index block's size in bytes.
    pub fn index_size(&self) -> usize {
        self.inner.index.size()
    }

    /// The newest point entry for `user_key` with a seqno at or below `snapshot`, consulting the
    /// bloom filter first. Range tombstones are not applied: see [`range_tombstones`](Self::range_tombstones).
    ///
    /// # Errors
    /// `Corruption` if a block on the way is damaged.
    pub fn get(&self, key: &[u8], snapshot: SeqNo) -> Result<Option<Entry>> {
        if !self.may_contain(key) {
            return Ok(None);
        }
        let mut iter = self.iter();
        iter.seek(&seek_key(key, snapshot))?;
        if iter.valid() && user_key(iter.key()) == key {
            return Ok(Entry::current(&iter));
        }
        Ok(None)
    }

    /// An iterator over the table's point entries.
    pub fn iter(&self) -> TableIter {
        TableIter::new(self.clone(), self.inner.index.iter())
    }

    /// The data block at `handle`, through the cache, and on a miss through the iterator's
    /// read-ahead; a block read from the file is cached if `fill_cache`.
    pub(crate) fn data_block(
        &self,
        handle: BlockHandle,
        ahead: &mut Readahead,
        fill_cache: bool,
    ) -> Result<Block> {
        let inner = &*self.inner;
        ahead.note(handle.offset, stored_len(handle).unwrap_or(usize::MAX));
        inner.blocks_read.fetch_add(1, Ordering::Relaxed);
        if let Some(shared) = inner.shared_blocks_read.get() {
            shared.fetch_add(1, Ordering::Relaxed);
        }
        let origin = Origin::new(inner.origin.file.clone(), handle.offset);
        if let Some(cached) = inner
            .cache
            .as_ref()
            .and_then(|c| c.get(inner.id, handle.offset))
        {
            return Block::new(cached, origin);
        }
        // Copied out of a mapping or a read-ahead window: a cached block, and a value sliced
        // from it, may outlive the table and must keep neither a deleted file on disk nor a
        // whole window in memory. (A block read alone is a buffer of its own already.)
        if !inner.max_block_len.admits_stored(handle.size) {
            return Err(origin.corruption(
                0,
                format!(
                    "data block of {} bytes is over the table's block bound",
                    handle.size
                ),
            ));
        }
        let bytes = read_block_ahead(
            &inner.data,
            handle,
            &inner.origin,
            inner.max_block_len,
            Raw::Copied,
            inner.dictionary.as_ref(),
            Some((ahead, inner.data_end)),
        )?;
        if let Some(cache) = inner.cache.as_ref().filter(|_| fill_cache) {
            cache.insert(inner.id, handle.offset, bytes.clone());
        }
        Block::new(bytes, origin)
    }
}

/// The most any block of a table with these properties may decompress to. A table from before
/// the bound was recorded gets the old fixed one.
fn block_bound(properties: &TableProperties) -> BlockBound {
    match properties.max_block_bytes {
        0 => BlockBound::UNRECORDED,
        n => usize::try_from(n).map_or(BlockBound::UNRECORDED, BlockBound::at_most),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::table::file::CountingFile;
    use crate::{EntryMeta, Kind, TableOptions, TableWriter, internal_key};

    /// A table of `n` keys in blocks of about 256 bytes, written to `dir`, opened to be read
    /// with positional reads through a file that counts them.
    fn counted_table(dir: &Path, n: u32) -> (Table, Arc<AtomicUsize>) {
        let fs = cairn_fs::RealFs::new();
        let path = dir.join("t.sst");
        let options = TableOptions::default()
            .compression(crate::Compression::None)
            .block_size(256);
        let mut writer = TableWriter::new(fs.create(&path).expect("create"), options).expect("w");
        for i in 0..n {
            let key = internal_key(format!("key{i:06}").as_bytes(), 1, Kind::Put);
            writer
                .add(&key, EntryMeta::at(1), format!("value-{i:06}").as_bytes())
                .expect("add");
        }
        writer.finish().expect("finish");
        let reads = Arc::new(AtomicUsize::new(0));
        let file = CountingFile {
            inner: fs.open_read(&path).expect("open"),
            reads: Arc::clone(&reads),
        };
        let table = Table::from_file(TableFile::Reader(Box::new(file)), &path, 1, None);
        (table.expect("table"), reads)
    }

    #[test]
    fn a_scan_reads_ahead_and_lets_the_window_go_at_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (table, reads) = counted_table(dir.path(), 5_000);
        let blocks = table.properties().num_data_blocks;
        assert!(blocks > 200, "{blocks} blocks");
        let opening = reads.swap(0, Ordering::Relaxed);
        assert!(opening > 0);
        let mut iter = table.iter();
        iter.seek_to_first().expect("seek");
        let mut seen = 0;
        while iter.valid() {
            seen += 1;
            if seen == 2_500 {
                assert!(iter.ahead.held() > 0, "a window mid-scan");
            }
            iter.next().expect("next");
        }
        assert_eq!(seen, 5_000);
        let scanned = reads.load(Ordering::Relaxed);
        assert!(
            (scanned as u64) * 8 < blocks,
            "{scanned} reads for {blocks} blocks"
        );
        assert_eq!(
            iter.ahead.held(),
            0,
            "the finished scan still holds its window"
        );
    }

    #[test]
    fn a_scan_without_cache_fill_uses_the_cache_but_adds_nothing_to_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (counted, _) = counted_table(dir.path(), 5_000);
        drop(counted);
        let path = dir.path().join("t.sst");
        let cache = BlockCache::new(64 << 20);
        let reads = Arc::new(AtomicUsize::new(0));
        let file = CountingFile {
            inner: cairn_fs::RealFs::new().open_read(&path).expect("open"),
            reads: Arc::clone(&reads),
        };
        let table = Table::from_file(
            TableFile::Reader(Box::new(file)),
            &path,
            1,
            Some(cache.clone()),
        )
        .expect("table");
        let before = cache.usage();
        let scan = |iter: &mut TableIter| {
            iter.seek_to_first().expect("seek");
            let mut seen = 0;
            while iter.valid() {
                seen += 1;
                iter.next().expect("next");
            }
            seen
        };
        assert_eq!(scan(&mut table.iter().fill_cache(false)), 5_000);
        assert_eq!(cache.usage(), before, "a scan without fill grew the cache");
        assert_eq!(scan(&mut table.iter()), 5_000);
        let filled = cache.usage();
        assert!(filled > before, "a default scan cached nothing");
        reads.store(0, Ordering::Relaxed);
        assert_eq!(scan(&mut table.iter().fill_cache(false)), 5_000);
        assert_eq!(cache.usage(), filled);
        assert_eq!(
            reads.load(Ordering::Relaxed),
            0,
            "a scan without fill read cached blocks from the file"
        );
    }

    #[test]
    fn point_reads_read_one_block_each() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (table, reads) = counted_table(dir.path(), 5_000);
        reads.store(0, Ordering::Relaxed);
        for i in (0..5_000).step_by(50) {
            let key = format!("key{i:06}");
            let found = table.get(key.as_bytes(), crate::MAX_SEQNO).expect("get");
            assert!(found.is_some(), "{key}");
        }
        assert_eq!(reads.load(Ordering::Relaxed), 100);
    }
}
