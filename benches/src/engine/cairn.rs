//! Cairn with the shared settings, which are its defaults: a 64 MiB block cache, 10 bloom bits
//! per key, zstd level 3 on every table, writes logged without an fsync.

use std::hint::black_box;
use std::path::Path;

use cairn::{Db, Options};

use cairn_sstable::TableOptions;

use super::{BLOOM_BITS_PER_KEY, CACHE_BYTES, Engine, Expiry, RangeDelete};
use crate::Result;
use crate::settings::CairnCompression;

/// An open Cairn database.
pub struct CairnEngine {
    db: Db,
}

impl CairnEngine {
    /// Opens a new database in `dir`.
    ///
    /// # Errors
    /// Cairn's error.
    pub fn open(
        dir: &Path,
        compression: CairnCompression,
        memtable_bytes: Option<usize>,
        read_trigger: Option<u64>,
        zstd_dictionary_bytes: usize,
    ) -> Result<Self> {
        let table = TableOptions::default()
            .bloom_bits_per_key(BLOOM_BITS_PER_KEY)
            .zstd_dictionary_bytes(zstd_dictionary_bytes);
        let mut options = Options::default()
            .block_cache_bytes(CACHE_BYTES)
            .table_options(table)
            .error_if_exists(true);
        if let Some((above, bottom)) = compression.levels() {
            options = options
                .compression_per_level([above])
                .bottommost_compression(bottom);
        }
        if let Some(bytes) = memtable_bytes {
            options = options.memtable_size(bytes);
        }
        if let Some(tombstones) = read_trigger {
            options = options.read_trigger_tombstones(tombstones);
        }
        Ok(Self {
            db: Db::open(dir, options)?,
        })
    }
}

impl Engine for CairnEngine {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put(key, value)?)
    }

    fn put_with_ttl(&self, key: &[u8], value: &[u8], ttl: std::time::Duration) -> Result<Expiry> {
        self.db.put_with_ttl(key, value, ttl)?;
        Ok(Expiry::Native)
    }

    fn get(&self, key: &[u8]) -> Result<bool> {
        let value = self.db.get(key)?;
        Ok(black_box(value).is_some())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.db.delete(key)?)
    }

    fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<RangeDelete> {
        self.db.delete_range(start, end)?;
        Ok(RangeDelete::Native)
    }

    // The borrowing cursor, as the RocksDB engine uses its raw iterator: each entry is looked
    // at, not copied out.
    fn seek(&self, start: &[u8], n: usize) -> Result<usize> {
        let mut cursor = self.db.cursor()?;
        cursor.seek(start)?;
        let mut read = 0;
        while read < n {
            let Some(entry) = cursor.key().zip(cursor.value()) else {
                break;
            };
            black_box(entry);
            read += 1;
            // No step past the last entry asked for (fjall's `take(n)` makes none).
            if read < n {
                cursor.next()?;
            }
        }
        Ok(read)
    }

    fn key_at_or_after(&self, start: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut cursor = self.db.cursor()?;
        cursor.seek(start)?;
        Ok(cursor.key().map(<[u8]>::to_vec))
    }

    fn scan(&self) -> Result<u64> {
        let mut cursor = self.db.cursor()?;
        cursor.seek_to_first()?;
        let mut read = 0;
        while let Some(entry) = cursor.key().zip(cursor.value()) {
            black_box(entry);
            read += 1;
            cursor.next()?;
        }
        Ok(read)
    }

    fn first_key(&self) -> Result<Option<Vec<u8>>> {
        match self.db.iter()?.next() {
            Some(entry) => Ok(Some(entry?.0.to_vec())),
            None => Ok(None),
        }
    }

    fn flush(&self) -> Result<()> {
        Ok(self.db.flush()?)
    }

    fn wait_idle(&self) -> Result<()> {
        Ok(self.db.wait_for_background_work()?)
    }

    // Counted by reads and compactions alike: a workload compares it across reads of an idle
    // database.
    fn blocks_read(&self) -> Option<u64> {
        Some(self.db.stats().data_blocks_read)
    }

    fn tombstones_pending(&self) -> Result<Option<u64>> {
        Ok(Some(self.db.stats().tombstones_pending))
    }

    fn hold_snapshot(&self) -> Result<Box<dyn super::Held + '_>> {
        Ok(Box::new(self.db.snapshot()))
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.db.close()?)
    }
}

impl super::Held for cairn::Snapshot {
    fn sees(&self, key: &[u8]) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }
}
