//! fjall 3 with the shared settings: a 64 MiB cache, bloom filters at 10 bits per key on every
//! level (its default is a 0.01% false-positive rate on L0 and L1), LZ4 on every level (it
//! offers no zstd; its default leaves L0 and L1 uncompressed), journal writes handed to the OS
//! after every write without an fsync (its default), default leveled compaction.
//!
//! fjall has no range delete: [`Engine::delete_range`] reads the range and removes each key. It
//! has no call that waits for compactions either: [`Engine::wait_idle`] polls its counters of
//! running flushes and compactions until they stay at zero. It has no per-key TTL (the
//! workload deletes such keys itself), and without its `metrics` feature, which the bench
//! leaves off, no count of the blocks its reads fetch nor of the tombstones it holds.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use fjall::config::{BloomConstructionPolicy, CompressionPolicy, FilterPolicy, FilterPolicyEntry};
use fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions};

use super::{BLOOM_BITS_PER_KEY, CACHE_BYTES, Engine, RangeDelete};
use crate::Result;

/// An open fjall database with one keyspace.
pub struct FjallEngine {
    db: Database,
    keyspace: Keyspace,
}

impl FjallEngine {
    /// Opens a new database in `dir`.
    ///
    /// # Errors
    /// fjall's error.
    pub fn open(dir: &Path, uncompressed: bool) -> Result<Self> {
        let compression = if uncompressed {
            CompressionType::None
        } else {
            CompressionType::Lz4
        };
        let db = Database::builder(dir).cache_size(CACHE_BYTES).open()?;
        let keyspace = db.keyspace("bench", || {
            KeyspaceCreateOptions::default()
                .filter_policy(FilterPolicy::all(FilterPolicyEntry::Bloom(
                    BloomConstructionPolicy::BitsPerKey(f32::from(
                        u16::try_from(BLOOM_BITS_PER_KEY).unwrap_or(10),
                    )),
                )))
                .data_block_compression_policy(CompressionPolicy::all(compression))
        })?;
        Ok(Self { db, keyspace })
    }
}

impl Engine for FjallEngine {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.keyspace.insert(key, value)?)
    }

    fn get(&self, key: &[u8]) -> Result<bool> {
        let value = self.keyspace.get(key)?;
        Ok(black_box(value).is_some())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.keyspace.remove(key)?)
    }

    fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<RangeDelete> {
        let mut keys = Vec::new();
        for guard in self.keyspace.range(start..end) {
            keys.push(guard.key()?);
        }
        for key in keys {
            self.keyspace.remove(key)?;
        }
        Ok(RangeDelete::KeyByKey)
    }

    fn seek(&self, start: &[u8], n: usize) -> Result<usize> {
        let mut read = 0;
        for guard in self.keyspace.range(start..).take(n) {
            black_box(guard.into_inner()?);
            read += 1;
        }
        Ok(read)
    }

    fn key_at_or_after(&self, start: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.keyspace.range(start..).next() {
            Some(guard) => Ok(Some(guard.key()?.to_vec())),
            None => Ok(None),
        }
    }

    fn scan(&self) -> Result<u64> {
        let mut read = 0;
        for guard in self.keyspace.iter() {
            black_box(guard.into_inner()?);
            read += 1;
        }
        Ok(read)
    }

    fn first_key(&self) -> Result<Option<Vec<u8>>> {
        match self.keyspace.iter().next() {
            Some(guard) => Ok(Some(guard.key()?.to_vec())),
            None => Ok(None),
        }
    }

    fn flush(&self) -> Result<()> {
        Ok(self.keyspace.rotate_memtable_and_wait()?)
    }

    fn wait_idle(&self) -> Result<()> {
        let mut quiet = 0;
        while quiet < 3 {
            if self.db.outstanding_flushes() == 0 && self.db.active_compactions() == 0 {
                quiet += 1;
            } else {
                quiet = 0;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn hold_snapshot(&self) -> Result<Box<dyn super::Held + '_>> {
        Ok(Box::new(FjallSnapshot {
            snapshot: self.db.snapshot(),
            keyspace: self.keyspace.clone(),
        }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.persist(fjall::PersistMode::SyncAll)?;
        drop(self.keyspace);
        drop(self.db);
        Ok(())
    }
}

/// A fjall snapshot with the keyspace it reads.
struct FjallSnapshot {
    snapshot: fjall::Snapshot,
    keyspace: Keyspace,
}

impl super::Held for FjallSnapshot {
    fn sees(&self, key: &[u8]) -> Result<bool> {
        Ok(fjall::Readable::get(&self.snapshot, &self.keyspace, key)?.is_some())
    }
}
