//! Cairn with the shared settings, which are its defaults: a 64 MiB block cache, 10 bloom bits
//! per key, zstd level 3 on every table, writes logged without an fsync.

use std::hint::black_box;
use std::path::Path;

use cairn::{Db, Options};

use cairn_sstable::TableOptions;

use super::{BLOOM_BITS_PER_KEY, CACHE_BYTES, Engine, RangeDelete};
use crate::Result;

/// An open Cairn database.
pub struct CairnEngine {
    db: Db,
}

impl CairnEngine {
    /// Opens a new database in `dir`.
    ///
    /// # Errors
    /// Cairn's error.
    pub fn open(dir: &Path, uncompressed: bool, memtable_bytes: Option<usize>) -> Result<Self> {
        let mut table = TableOptions::default().bloom_bits_per_key(BLOOM_BITS_PER_KEY);
        if uncompressed {
            table = table.compression(None);
        }
        let mut options = Options::default()
            .block_cache_bytes(CACHE_BYTES)
            .table_options(table)
            .error_if_exists(true);
        if let Some(bytes) = memtable_bytes {
            options = options.memtable_size(bytes);
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

    fn seek(&self, start: &[u8], n: usize) -> Result<usize> {
        let mut read = 0;
        for entry in self.db.range(start..)?.take(n) {
            black_box(entry?);
            read += 1;
        }
        Ok(read)
    }

    fn scan(&self) -> Result<u64> {
        let mut read = 0;
        for entry in self.db.iter()? {
            black_box(entry?);
            read += 1;
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

    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.db.close()?)
    }
}
