//! Options for a database, a column family, and a write.

use std::sync::Arc;
use std::time::Duration;

use cairn_compaction::CompactionFilter;
use cairn_fs::{FileSystem, RealFs};
use cairn_sstable::{Compression, TableOptions};
use cairn_wal::RecoveryMode;

use crate::clock::{Clock, SystemClock};

/// The longest key the engine accepts, in bytes.
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// The longest value the engine accepts, in bytes.
pub const MAX_VALUE_LEN: usize = 256 * 1024 * 1024;

/// Levels per column family.
pub(crate) const NUM_LEVELS: usize = 7;

/// How a database is opened and run. A consuming builder: `Options::default().memtable_size(…)`.
#[derive(Debug, Clone)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent switches, as RocksDB's options are"
)]
pub struct Options {
    pub(crate) create_if_missing: bool,
    pub(crate) error_if_exists: bool,
    pub(crate) fs: Arc<dyn FileSystem>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) memtable_size: usize,
    pub(crate) drop_covered_at_flush: bool,
    pub(crate) max_immutable_memtables: usize,
    pub(crate) auto_recovery: bool,
    pub(crate) recovery_mode: RecoveryMode,
    pub(crate) block_cache_bytes: u64,
    pub(crate) max_open_tables: usize,
    pub(crate) mmap_reads: bool,
    pub(crate) max_manifest_bytes: u64,
    pub(crate) table: TableOptions,
    pub(crate) compression: LevelCompression,
    pub(crate) background_threads: usize,
    pub(crate) delete_persistence_deadline: Option<Duration>,
    pub(crate) compaction: CompactionOptions,
    pub(crate) compaction_filter: Option<Arc<dyn CompactionFilter>>,
}

/// How tables are compressed, by the level they are written to.
#[derive(Debug, Clone)]
pub(crate) struct LevelCompression {
    /// Level `i` uses entry `i`, levels past the end the last entry.
    pub(crate) per_level: Vec<Compression>,
    /// The last level, where most of the data lives.
    pub(crate) bottommost: Compression,
}

/// LZ4 above the last level, zstd level 3 in it (`RocksDB`'s tuning advice). Freshly filled
/// data (level 0) read 1.36–1.88× faster than with zstd everywhere, for 17% more bytes; data
/// compacted into the last level is zstd either way (benches/README.md, "Compression").
impl Default for LevelCompression {
    fn default() -> Self {
        Self {
            per_level: vec![Compression::Lz4],
            bottommost: Compression::Zstd(3),
        }
    }
}

impl LevelCompression {
    pub(crate) fn at(&self, level: usize) -> Compression {
        if level + 1 >= NUM_LEVELS {
            return self.bottommost;
        }
        self.per_level
            .get(level)
            .or(self.per_level.last())
            .copied()
            .unwrap_or(self.bottommost)
    }
}

/// How compaction is scheduled.
#[derive(Debug, Clone)]
pub(crate) struct CompactionOptions {
    pub(crate) l0_trigger: usize,
    pub(crate) l0_slowdown: usize,
    pub(crate) l0_stop: usize,
    pub(crate) level_base_bytes: u64,
    pub(crate) fan_out: u64,
    pub(crate) target_file_size: u64,
    pub(crate) density_trigger: u32,
    pub(crate) read_trigger: u64,
    pub(crate) disable_auto: bool,
}

impl Default for CompactionOptions {
    fn default() -> Self {
        Self {
            l0_trigger: 4,
            l0_slowdown: 20,
            l0_stop: 36,
            level_base_bytes: 256 << 20,
            fan_out: 10,
            target_file_size: 64 << 20,
            density_trigger: 64,
            disable_auto: false,
            read_trigger: 1000,
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            create_if_missing: true,
            error_if_exists: false,
            fs: Arc::new(RealFs::new()),
            clock: Arc::new(SystemClock),
            memtable_size: 64 << 20,
            drop_covered_at_flush: false,
            max_immutable_memtables: 2,
            auto_recovery: true,
            recovery_mode: RecoveryMode::default(),
            block_cache_bytes: 64 << 20,
            max_open_tables: 1000,
            mmap_reads: false,
            max_manifest_bytes: 8 << 20,
            table: TableOptions::default(),
            compression: LevelCompression::default(),
            background_threads: 2,
            delete_persistence_deadline: None,
            compaction: CompactionOptions::default(),
            compaction_filter: None,
        }
    }
}

impl Options {
    /// Create the database if the directory holds none (default `true`). With `false`, opening a
    /// directory without a database is `InvalidArgument`.
    #[must_use]
    pub fn create_if_missing(mut self, yes: bool) -> Self {
        self.create_if_missing = yes;
        self
    }

    /// Fail if a database already exists (default `false`).
    #[must_use]
    pub fn error_if_exists(mut self, yes: bool) -> Self {
        self.error_if_exists = yes;
        self
    }

    /// The file system every file operation goes through (default: the real one). Tests pass a
    /// `cairn_fs::FaultyFs` to simulate power loss and I/O errors.
    #[must_use]
    pub fn file_system(mut self, fs: Arc<dyn FileSystem>) -> Self {
        self.fs = fs;
        self
    }

    /// The clock entries are stamped with (default: [`SystemClock`]).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Bytes a memtable holds before it is frozen and flushed (default 64 MiB, at least 4 KiB):
    /// the arena its entries take (skip-list nodes holding keys and values), as RocksDB's
    /// `write_buffer_size` counts its arena. Range-delete fragments count: a write whose range
    /// deletes would carry the memtables past it goes to fresh ones, and a batch whose range
    /// deletes over each other would need more than four times this (and four times what they
    /// would cost were they disjoint) even there is refused with `InvalidArgument`.
    #[must_use]
    pub fn memtable_size(mut self, bytes: usize) -> Self {
        self.memtable_size = bytes.max(4096);
        self
    }

    /// Whether a flush leaves out the entries a newer range tombstone of the same memtable
    /// covers with no live snapshot between them (default off). No read can see them; the range
    /// tombstone rule applied at the flush, as RocksDB's flush does. It pays where a workload
    /// range-deletes what it just wrote (a Raft log's purged prefix: `cairn_raft::node_options`
    /// turns it on). Off by default until the stress harness's planted compaction bugs, which
    /// it starves of the covered entries they need to show, are caught with it on.
    #[must_use]
    pub fn drop_covered_at_flush(mut self, on: bool) -> Self {
        self.drop_covered_at_flush = on;
        self
    }

    /// Frozen memtables that may wait for a flush before writes stall (default 2, at least 1).
    #[must_use]
    pub fn max_immutable_memtables(mut self, n: usize) -> Self {
        self.max_immutable_memtables = n.max(1);
        self
    }

    /// Whether the database recovers on its own from a stop caused by an I/O error (a failed
    /// log or MANIFEST sync, a failed flush): a new log, the memtables flushed to tables
    /// through a fresh MANIFEST, and writes resume, after a few attempts with a doubling
    /// backoff at most (default on, as RocksDB's automatic recovery from retryable errors).
    /// Off, the database stays stopped until [`Db::resume`](crate::Db::resume) is called.
    #[must_use]
    pub fn auto_recovery(mut self, yes: bool) -> Self {
        self.auto_recovery = yes;
        self
    }

    /// How damage in the write-ahead log is handled at recovery (default: tolerate a torn tail).
    #[must_use]
    pub fn recovery_mode(mut self, mode: RecoveryMode) -> Self {
        self.recovery_mode = mode;
        self
    }

    /// The block cache's bound in bytes (default 64 MiB; 0 disables it).
    #[must_use]
    pub fn block_cache_bytes(mut self, bytes: u64) -> Self {
        self.block_cache_bytes = bytes;
        self
    }

    /// Tables kept open at most (default 1000, at least 1); the least recently used is closed
    /// when another must open. A reader using a table keeps it open until done. An open table
    /// holds a file descriptor (unless mapped, [`mmap_reads`](Self::mmap_reads)), so the cache
    /// keeps no more than half the process's limit (`ulimit -n`): raise that limit for a large
    /// database, as RocksDB's `max_open_files` asks.
    #[must_use]
    pub fn max_open_tables(mut self, n: usize) -> Self {
        self.max_open_tables = n.max(1);
        self
    }

    /// Read tables through a mapping instead of positional reads (default `false`, as RocksDB's
    /// `allow_mmap_reads`). A block missing from the cache then costs no system call, but every
    /// page that reads and compactions touch counts in the process's resident set until its
    /// table closes: in `cairn-bench`'s 1M-key runs, about 160 MB more at the peak.
    #[must_use]
    pub fn mmap_reads(mut self, yes: bool) -> Self {
        self.mmap_reads = yes;
        self
    }

    /// The size past which the MANIFEST rolls over to a fresh snapshot of the current state
    /// (default 8 MiB, at least 4 KiB; it waits until the edits outweigh the snapshot). Old
    /// edits hold the keys of tables long gone: the rollover is what lets them go.
    #[must_use]
    pub fn max_manifest_bytes(mut self, bytes: u64) -> Self {
        self.max_manifest_bytes = bytes.max(4096);
        self
    }

    /// How tables are built: block size, restart interval, bloom bits per key (defaults 4 KiB,
    /// 16, 10). Their compression is set per level, with
    /// [`compression`](Self::compression), [`compression_per_level`](Self::compression_per_level)
    /// and [`bottommost_compression`](Self::bottommost_compression): `open` fails with
    /// `InvalidArgument` if `table` names a codec of its own (it would be ignored), or a block
    /// size outside `1..=cairn_sstable::MAX_BLOCK_SIZE`.
    #[must_use]
    pub fn table_options(mut self, table: TableOptions) -> Self {
        self.table = table;
        self
    }

    /// How tables written to each level above the last are compressed, as `RocksDB`'s
    /// `compression_per_level`: level `i` uses `per_level[i]`, deeper levels the last entry
    /// (default LZ4 on every level above the last). Level 0 holds flushes; an empty list leaves
    /// every level to [`bottommost_compression`](Self::bottommost_compression).
    #[must_use]
    pub fn compression_per_level(mut self, per_level: impl Into<Vec<Compression>>) -> Self {
        self.compression.per_level = per_level.into();
        self
    }

    /// One codec for the tables of every level: `compression_per_level([c])` and
    /// `bottommost_compression(c)` together.
    #[must_use]
    pub fn compression(self, compression: Compression) -> Self {
        self.compression_per_level([compression])
            .bottommost_compression(compression)
    }

    /// How tables of the last level, where most of the data lives, are compressed (default
    /// zstd level 3), as `RocksDB`'s `bottommost_compression`.
    #[must_use]
    pub fn bottommost_compression(mut self, compression: Compression) -> Self {
        self.compression.bottommost = compression;
        self
    }

    /// Checks the table options: a codec set in them would be silently ignored.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad block size or a codec set in the table options.
    pub(crate) fn validate_tables(&self) -> crate::error::Result<()> {
        self.table.validate()?;
        if self.table.chosen_codec().is_some() {
            return Err(crate::error::Error::invalid(
                "the table options set a compression, which the engine decides per level: use \
                 Options::compression, compression_per_level or bottommost_compression",
            ));
        }
        if self.compaction.disable_auto && self.delete_persistence_deadline.is_some() {
            // Only automatic compactions keep the deadline's promise (`audit_key`'s `gone_by`).
            return Err(crate::error::Error::invalid(
                "delete_persistence_deadline needs automatic compactions to keep its promise:                  do not set it with disable_auto_compactions",
            ));
        }
        Ok(())
    }

    /// The table options for a table written to `level`.
    pub(crate) fn table_options_for(&self, level: usize) -> TableOptions {
        self.table.clone().compression(self.compression.at(level))
    }

    /// Background threads for flushes and compactions (default 2, at least 1).
    #[must_use]
    pub fn background_threads(mut self, n: usize) -> Self {
        self.background_threads = n.max(1);
        self
    }

    /// The delete persistence deadline (default none): once a tombstone's grace period is over
    /// and no snapshot pins it, it is erased — with every version it shadows, from every table
    /// and log — within this long, provided background work keeps up.
    #[must_use]
    pub fn delete_persistence_deadline(mut self, deadline: Duration) -> Self {
        self.delete_persistence_deadline = Some(deadline);
        self
    }

    /// Level-0 tables that start a compaction (default 4), slow writes down (default 20) and
    /// stop them until compaction catches up (default 36).
    #[must_use]
    pub fn level0_triggers(mut self, compact: usize, slowdown: usize, stop: usize) -> Self {
        self.compaction.l0_trigger = compact.max(1);
        self.compaction.l0_slowdown = slowdown.max(self.compaction.l0_trigger);
        self.compaction.l0_stop = stop.max(self.compaction.l0_slowdown);
        self
    }

    /// Turns automatic compactions off (default: on), as RocksDB's `disable_auto_compactions`:
    /// only `compact_range` and `compact_tables` compact. Flushes go on, and writes still slow
    /// down and stop at the level-0 triggers, so a writer must compact by hand. For tests that
    /// count what one compaction does, and for bulk loads followed by one manual compaction.
    /// Opening with a [`delete_persistence_deadline`](Self::delete_persistence_deadline) too is
    /// refused (`InvalidArgument`): nothing would keep it.
    #[must_use]
    pub fn disable_auto_compactions(mut self, yes: bool) -> Self {
        self.compaction.disable_auto = yes;
        self
    }

    /// The target size of the base level, the first level below level 0 (default 256 MiB); each
    /// level below targets [`level_fan_out`](Self::level_fan_out) times the one above, sized
    /// from the last level down.
    #[must_use]
    pub fn level_base_bytes(mut self, bytes: u64) -> Self {
        self.compaction.level_base_bytes = bytes.max(4096);
        self
    }

    /// The size ratio between adjacent levels (default 10, at least 2).
    #[must_use]
    pub fn level_fan_out(mut self, ratio: u64) -> Self {
        self.compaction.fan_out = ratio.max(2);
        self
    }

    /// The size at which compaction cuts an output table (default 64 MiB).
    #[must_use]
    pub fn target_file_size(mut self, bytes: u64) -> Self {
        self.compaction.target_file_size = bytes.max(4096);
        self
    }

    /// Point tombstones in 128 consecutive entries that make a table compact on its own
    /// (default 64, half the window).
    #[must_use]
    pub fn tombstone_density_trigger(mut self, tombstones: u32) -> Self {
        self.compaction.density_trigger = tombstones.clamp(1, 128);
        self
    }

    /// Tombstones one scan may step over in a range before it reports the range for compaction
    /// and logs a warning (default 1000, Cassandra's `tombstone_warn_threshold`).
    #[must_use]
    pub fn read_trigger_tombstones(mut self, tombstones: u64) -> Self {
        self.compaction.read_trigger = tombstones.max(1);
        self
    }

    /// A filter compaction consults about values no snapshot can read (default none).
    #[must_use]
    pub fn compaction_filter(mut self, filter: Arc<dyn CompactionFilter>) -> Self {
        self.compaction_filter = Some(filter);
        self
    }
}

impl Options {
    /// One stage of the delete persistence deadline, in ms: the picker splits the deadline into
    /// a stage per level and one more, and the memtable flush and the MANIFEST rollover each
    /// get one. `None` without a deadline.
    pub(crate) fn deadline_stage_ms(&self) -> Option<u64> {
        self.delete_persistence_deadline.map(|d| {
            cairn_compaction::rules::deadline_budget(
                crate::clock::millis(d),
                crate::options::NUM_LEVELS,
                None,
            )
        })
    }
}

/// How a column family's data lives and dies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CfOptions {
    pub(crate) ttl: Option<Duration>,
    pub(crate) max_versions: u32,
    pub(crate) tombstone_grace: Duration,
}

impl Default for CfOptions {
    fn default() -> Self {
        Self {
            ttl: None,
            max_versions: 1,
            tombstone_grace: Duration::ZERO,
        }
    }
}

impl CfOptions {
    /// Every value expires this long after it was written (default: never). A cell TTL given
    /// with `put_with_ttl` applies when shorter.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How many versions of a key reads may see (default 1). With more than one, an expired
    /// newest version reveals the next.
    #[must_use]
    pub fn max_versions(mut self, n: u32) -> Self {
        self.max_versions = n.max(1);
        self
    }

    /// How long a tombstone is kept after its deletion before compaction may drop it (default
    /// zero, as in `RocksDB`): for consumers that must observe a delete before it vanishes, as
    /// with Cassandra's `gc_grace_seconds`.
    #[must_use]
    pub fn tombstone_grace(mut self, grace: Duration) -> Self {
        self.tombstone_grace = grace;
        self
    }

    /// The column family's TTL, if any.
    pub fn ttl_value(&self) -> Option<Duration> {
        self.ttl
    }

    /// The column family's version limit.
    pub fn max_versions_value(&self) -> u32 {
        self.max_versions
    }

    /// The column family's tombstone grace period.
    pub fn tombstone_grace_value(&self) -> Duration {
        self.tombstone_grace
    }
}

/// Options for one write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Fsync the write-ahead log before the write returns, so it survives power loss. Without
    /// it a write survives a process crash (the log is written before the call returns) but not
    /// necessarily power loss.
    pub sync: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_level_fan_out_reaches_the_compaction_settings_and_is_at_least_2() {
        assert_eq!(Options::default().compaction.fan_out, 10);
        assert_eq!(Options::default().level_fan_out(4).compaction.fan_out, 4);
        assert_eq!(Options::default().level_fan_out(0).compaction.fan_out, 2);
    }

    #[test]
    fn each_level_gets_its_compression_and_the_last_the_bottommost() {
        let options = Options::default()
            .compression_per_level([Compression::None, Compression::Lz4])
            .bottommost_compression(Compression::Zstd(5));
        let at = |level| options.compression.at(level);
        assert_eq!(at(0), Compression::None);
        assert_eq!(at(1), Compression::Lz4);
        assert_eq!(
            at(NUM_LEVELS - 2),
            Compression::Lz4,
            "deeper levels take the last entry"
        );
        assert_eq!(at(NUM_LEVELS - 1), Compression::Zstd(5));
        let only_bottom = Options::default()
            .compression_per_level(Vec::new())
            .bottommost_compression(Compression::Lz4);
        assert_eq!(only_bottom.compression.at(0), Compression::Lz4);
    }
}
