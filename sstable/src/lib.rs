//! Cairn's sorted string tables: the format data lives in once it leaves the memtable.
//!
//! - [`key`]: internal keys (user key + `(seqno << 8) | kind`) and their order;
//! - [`EntryMeta`]: the write time and optional cell TTL every entry carries;
//! - [`TableWriter`] / [`Table`]: one immutable file of sorted entries, with prefix-compressed
//!   data blocks, an index, a bloom filter on user keys, fragmented range tombstones, the
//!   properties the garbage collector needs, and a CRC32 on every block (`FORMAT.md`);
//! - [`BlockCache`]: verified blocks shared by all tables, bounded in bytes;
//! - [`InternalIterator`] and [`MergingIter`]: the cursor every read path and compaction uses.
//!
//! It does not decide what an entry means for a read (snapshots, tombstones, TTL) or when it may
//! be dropped: that is the engine's and `cairn-compaction`'s job. Every byte read back is
//! checked; damage is an [`Error::Corruption`] naming the file and offset, never a panic and
//! never wrong data.
//!
//! ```
//! use cairn_fs::{FileSystem, RealFs};
//! use cairn_sstable::{EntryMeta, InternalIterator, Kind, Table, TableOptions, TableWriter, internal_key};
//! # fn main() -> cairn_sstable::Result<()> {
//! # let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
//! let fs = RealFs::new();
//! let path = dir.path().join("000007.sst");
//! let mut writer = TableWriter::new(fs.create(&path)?, TableOptions::default())?;
//! writer.add(&internal_key(b"apple", 2, Kind::Put), EntryMeta::at(1_000), b"red")?;
//! writer.add(&internal_key(b"pear", 1, Kind::Delete), EntryMeta::at(1_000), b"")?;
//! writer.add_range_tombstone(b"q", b"z", 3, 1_000)?;
//! writer.finish()?;
//!
//! let table = Table::open(&fs, &path, 7, None)?;
//! let apple = table.get(b"apple", 10)?.expect("apple was written");
//! assert_eq!(&apple.value[..], b"red");
//! assert_eq!(table.range_tombstones().covering_seqno(b"r", 10), Some(3));
//! let mut iter = table.iter();
//! iter.seek_to_last()?;
//! assert_eq!(iter.parsed_key().map(|k| k.kind), Some(Kind::Delete));
//! # Ok(())
//! # }
//! ```

mod block;
mod bloom;
mod cache;
pub mod coding;
mod error;
mod iter;
pub mod key;
mod merge;
mod meta;
mod table;

pub use bloom::{DEFAULT_BITS_PER_KEY, bloom_hash};
pub use cache::BlockCache;
pub use error::{Error, Result};
pub use iter::{Entry, InternalIterator};
pub use key::{
    KIND_FOR_SEEK, Kind, MAX_SEQNO, ParsedKey, SeqNo, compare_internal_keys, internal_key,
    parse_internal_key, seek_key,
};
pub use merge::MergingIter;
pub use meta::{EntryMeta, MAX_WRITE_TIME};
pub use table::properties::{TOMBSTONE_WINDOW, TableProperties};
pub use table::range_tombstone_map::RangeTombstoneMap;
pub use table::range_tombstones::{
    Fragment, FragmentedRangeTombstones, RangeTombstone, TombstoneVersion,
};
pub use table::{
    Compression, FORMAT_VERSION, MAX_BLOCK_SIZE, MAX_DICTIONARY_BYTES, MIN_DICTIONARY_BYTES, Table,
    TableIter, TableOptions, TableSummary, TableWriter, WeakTable,
};
