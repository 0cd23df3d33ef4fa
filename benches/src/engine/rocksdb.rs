//! `RocksDB` with the shared settings, which its Rust defaults lack: a 64 MiB LRU block cache, a
//! full bloom filter at 10 bits per key, zstd on every level; writes logged without an fsync
//! (its default), default leveled compaction and background jobs. Its statistics are on at
//! their cheapest level, tickers only (per-core counters; no histograms, no timers), for the
//! data blocks its reads fetch.

use std::hint::black_box;
use std::path::Path;

use rocksdb::statistics::{StatsLevel, Ticker};
use rocksdb::{
    BlockBasedOptions, Cache, DB, DBCompressionType, Options, WaitForCompactOptions, WriteBatch,
};

use super::{BLOOM_BITS_PER_KEY, CACHE_BYTES, Engine, RangeDelete};
use crate::Result;

/// An open `RocksDB` database.
pub struct RocksDbEngine {
    db: DB,
    // Holds the statistics the tickers are read from.
    options: Options,
    // Kept alive as long as the database that uses it.
    _cache: Cache,
}

impl RocksDbEngine {
    /// Opens a new database in `dir`.
    ///
    /// # Errors
    /// `RocksDB`'s error.
    pub fn open(dir: &Path, uncompressed: bool) -> Result<Self> {
        // Cairn's default, on the same knobs: LZ4 above the last level, zstd in it.
        let (above, bottom) = if uncompressed {
            (DBCompressionType::None, DBCompressionType::None)
        } else {
            (DBCompressionType::Lz4, DBCompressionType::Zstd)
        };
        let cache = Cache::new_lru_cache(usize::try_from(CACHE_BYTES)?);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_bloom_filter(f64::from(BLOOM_BITS_PER_KEY), false);
        let mut options = Options::default();
        options.create_if_missing(true);
        options.set_error_if_exists(true);
        options.set_compression_type(above);
        options.set_bottommost_compression_type(bottom);
        options.set_block_based_table_factory(&table);
        options.enable_statistics();
        options.set_statistics_level(StatsLevel::ExceptHistogramOrTimers);
        Ok(Self {
            db: DB::open(&options, dir)?,
            options,
            _cache: cache,
        })
    }
}

impl Engine for RocksDbEngine {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put(key, value)?)
    }

    fn get(&self, key: &[u8]) -> Result<bool> {
        let value = self.db.get_pinned(key)?;
        Ok(black_box(value).is_some())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.db.delete(key)?)
    }

    fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<RangeDelete> {
        let mut batch = WriteBatch::default();
        batch.delete_range(start, end);
        self.db.write(batch)?;
        Ok(RangeDelete::Native)
    }

    fn seek(&self, start: &[u8], n: usize) -> Result<usize> {
        let mut iter = self.db.raw_iterator();
        iter.seek(start);
        let mut read = 0;
        while read < n && iter.valid() {
            black_box((iter.key(), iter.value()));
            read += 1;
            // No step past the last entry asked for (fjall's `take(n)` makes none).
            if read < n {
                iter.next();
            }
        }
        iter.status()?;
        Ok(read)
    }

    fn key_at_or_after(&self, start: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut iter = self.db.raw_iterator();
        iter.seek(start);
        let key = iter.key().map(<[u8]>::to_vec);
        iter.status()?;
        Ok(key)
    }

    fn scan(&self) -> Result<u64> {
        let mut iter = self.db.raw_iterator();
        iter.seek_to_first();
        let mut read = 0;
        while iter.valid() {
            black_box((iter.key(), iter.value()));
            read += 1;
            iter.next();
        }
        iter.status()?;
        Ok(read)
    }

    fn first_key(&self) -> Result<Option<Vec<u8>>> {
        let mut iter = self.db.raw_iterator();
        iter.seek_to_first();
        let key = iter.key().map(<[u8]>::to_vec);
        iter.status()?;
        Ok(key)
    }

    fn flush(&self) -> Result<()> {
        Ok(self.db.flush()?)
    }

    fn wait_idle(&self) -> Result<()> {
        Ok(self
            .db
            .wait_for_compact(&WaitForCompactOptions::default())?)
    }

    // Data blocks looked up in the block cache, found or not: every data block a read fetched,
    // as Cairn counts them (compactions' reads count in both).
    fn blocks_read(&self) -> Option<u64> {
        Some(
            self.options.get_ticker_count(Ticker::BlockCacheDataMiss)
                + self.options.get_ticker_count(Ticker::BlockCacheDataHit),
        )
    }

    // Tombstones pending: not given. Its table properties count tables' deletions, but no
    // property counts the range deletions in its memtables, so a sum would not be exact.

    fn hold_snapshot(&self) -> Result<Box<dyn super::Held + '_>> {
        Ok(Box::new(self.db.snapshot()))
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.flush_wal(true)?;
        Ok(())
    }
}

impl super::Held for rocksdb::SnapshotWithThreadMode<'_, DB> {
    fn sees(&self, key: &[u8]) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }
}
