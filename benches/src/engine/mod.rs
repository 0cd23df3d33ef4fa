//! The engines under test behind one small interface, each opened with the same settings: the
//! write-ahead log on without an fsync per write, a 64 MiB block cache, bloom filters at 10 bits
//! per key, zstd where the engine offers it, and its default compaction.

pub(crate) mod cairn;
#[cfg(feature = "fjall")]
mod fjall;
#[cfg(feature = "rocksdb")]
mod rocksdb;

use std::path::Path;

use crate::Result;

/// The block cache every engine gets.
pub const CACHE_BYTES: u64 = 64 << 20;
/// Bloom filter bits per key for every engine.
pub const BLOOM_BITS_PER_KEY: u32 = 10;

/// How an engine carried out a range delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeDelete {
    /// One range tombstone.
    Native,
    /// The engine has no range delete: the keys were read and deleted one by one.
    KeyByKey,
}

/// How an engine carried out a put with a time to live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// The engine expires the key itself.
    Native,
    /// The engine has no per-key TTL: the key was put plainly, and the workload deletes it
    /// when its time to live has passed.
    ByWorkload,
}

/// One open database of one engine. `Sync`: `readwhilewriting` reads from several threads
/// while one writes.
pub trait Engine: Sync {
    /// Sets `key` to `value` (logged, not synced).
    ///
    /// # Errors
    /// The engine's error.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;

    /// Sets `key` to `value`, to expire `ttl` from now. An engine without a per-key TTL puts
    /// it plainly and says so: the caller then deletes it when `ttl` has passed.
    ///
    /// # Errors
    /// The engine's error.
    fn put_with_ttl(&self, key: &[u8], value: &[u8], ttl: std::time::Duration) -> Result<Expiry> {
        let _ = ttl;
        self.put(key, value)?;
        Ok(Expiry::ByWorkload)
    }

    /// Looks `key` up; true if it has a value. The value is read, not copied.
    ///
    /// # Errors
    /// The engine's error.
    fn get(&self, key: &[u8]) -> Result<bool>;

    /// Deletes `key` with a point tombstone.
    ///
    /// # Errors
    /// The engine's error.
    fn delete(&self, key: &[u8]) -> Result<()>;

    /// Deletes every key in `[start, end)`.
    ///
    /// # Errors
    /// The engine's error.
    fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<RangeDelete>;

    /// Seeks to the first key at or after `start` and reads up to `n` entries from there;
    /// returns how many it read. Every engine steps `n - 1` times, never past the last entry
    /// asked for.
    ///
    /// # Errors
    /// The engine's error.
    fn seek(&self, start: &[u8], n: usize) -> Result<usize>;

    /// The first key at or after `start`, copied out: for a workload to check what its timed
    /// seeks landed on.
    ///
    /// # Errors
    /// The engine's error.
    fn key_at_or_after(&self, start: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Reads every live entry, keys and values, in order; returns how many.
    ///
    /// # Errors
    /// The engine's error.
    fn scan(&self) -> Result<u64>;

    /// The first live key, read with an iterator from the start.
    ///
    /// # Errors
    /// The engine's error.
    fn first_key(&self) -> Result<Option<Vec<u8>>>;

    /// Writes the memtable out to a table and waits for it.
    ///
    /// # Errors
    /// The engine's error.
    fn flush(&self) -> Result<()>;

    /// Waits for the background work the engine knows to be due, as far as it lets one wait.
    ///
    /// # Errors
    /// The engine's error.
    fn wait_idle(&self) -> Result<()>;

    /// Data blocks the engine has fetched so far, from its block cache or its files, by reads
    /// and by its background work; `None` if it does not count them.
    fn blocks_read(&self) -> Option<u64> {
        None
    }

    /// Point and range tombstones the engine still holds in memtables and tables, exactly;
    /// `None` if it cannot say.
    ///
    /// # Errors
    /// The engine's error.
    fn tombstones_pending(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// Takes a snapshot and holds it until the returned guard is dropped: what it sees, and the
    /// tombstones written after it, stay in the engine's tables meanwhile.
    ///
    /// # Errors
    /// The engine's error.
    fn hold_snapshot(&self) -> Result<Box<dyn Held + '_>>;

    /// Closes the database.
    ///
    /// # Errors
    /// The engine's error.
    fn close(self: Box<Self>) -> Result<()>;
}

/// A snapshot held until dropped.
pub trait Held {
    /// True if the snapshot still reads `key`: a workload checks that what it holds is kept.
    ///
    /// # Errors
    /// The engine's error.
    fn sees(&self, key: &[u8]) -> Result<bool>;
}

/// An engine the bench knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// Cairn.
    Cairn,
    /// Cairn with LZ4 at every level, the codec fjall offers: its column stands beside fjall's.
    #[serde(rename = "cairn-lz4")]
    CairnLz4,
    /// fjall 3.
    Fjall,
    /// `RocksDB` through the `rocksdb` crate.
    Rocksdb,
}

impl EngineKind {
    /// The engine's name as the command line and the reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cairn => "cairn",
            Self::CairnLz4 => "cairn-lz4",
            Self::Fjall => "fjall",
            Self::Rocksdb => "rocksdb",
        }
    }

    /// The compression the engine's tables use here.
    pub fn compression(self, settings: &crate::settings::Settings) -> &'static str {
        match self {
            _ if settings.uncompressed => "none",
            Self::Cairn => settings.cairn_compression.describe(),
            Self::CairnLz4 => crate::settings::CairnCompression::Lz4.describe(),
            Self::Rocksdb => "lz4 above the bottommost level, zstd in it (as Cairn's default)",
            Self::Fjall => "lz4 (fjall offers no zstd)",
        }
    }

    /// Parses an engine name.
    ///
    /// # Errors
    /// If the name is unknown.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "cairn" => Ok(Self::Cairn),
            "cairn-lz4" => Ok(Self::CairnLz4),
            "fjall" => Ok(Self::Fjall),
            "rocksdb" => Ok(Self::Rocksdb),
            other => {
                Err(format!("unknown engine {other:?} (cairn, cairn-lz4, fjall, rocksdb)").into())
            }
        }
    }

    /// Cairn, whatever its codec.
    pub fn is_cairn(self) -> bool {
        matches!(self, Self::Cairn | Self::CairnLz4)
    }

    /// Opens a new database of this engine in `dir` with the settings that concern it.
    ///
    /// # Errors
    /// The engine's error, or if the engine was not compiled in.
    pub fn open(self, dir: &Path, settings: &crate::settings::Settings) -> Result<Box<dyn Engine>> {
        let uncompressed = settings.uncompressed;
        match self {
            Self::Cairn => Ok(Box::new(cairn::CairnEngine::open(
                dir,
                if uncompressed {
                    crate::settings::CairnCompression::None
                } else {
                    settings.cairn_compression
                },
                settings.memtable_bytes,
                settings.read_trigger,
                settings.zstd_dictionary_bytes,
            )?)),
            Self::CairnLz4 => Ok(Box::new(cairn::CairnEngine::open(
                dir,
                if uncompressed {
                    crate::settings::CairnCompression::None
                } else {
                    crate::settings::CairnCompression::Lz4
                },
                settings.memtable_bytes,
                settings.read_trigger,
                settings.zstd_dictionary_bytes,
            )?)),
            #[cfg(feature = "fjall")]
            Self::Fjall => Ok(Box::new(fjall::FjallEngine::open(dir, uncompressed)?)),
            #[cfg(feature = "rocksdb")]
            Self::Rocksdb => Ok(Box::new(rocksdb::RocksDbEngine::open(dir, uncompressed)?)),
            #[allow(unreachable_patterns, reason = "reached when a peer's feature is off")]
            other => Err(format!(
                "{} is not compiled in: build with `--features {}`",
                other.name(),
                other.name()
            )
            .into()),
        }
    }
}
