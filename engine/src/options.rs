//! Options for a database, a column family, and a write.

use std::sync::Arc;
use std::time::Duration;

use cairn_fs::{FileSystem, RealFs};
use cairn_sstable::TableOptions;
use cairn_wal::RecoveryMode;

use crate::clock::{Clock, SystemClock};

/// The longest key the engine accepts, in bytes.
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// The longest value the engine accepts, in bytes.
pub const MAX_VALUE_LEN: usize = 256 * 1024 * 1024;

/// How a database is opened and run. A consuming builder: `Options::default().memtable_size(…)`.
#[derive(Debug, Clone)]
pub struct Options {
    pub(crate) create_if_missing: bool,
    pub(crate) error_if_exists: bool,
    pub(crate) fs: Arc<dyn FileSystem>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) memtable_size: usize,
    pub(crate) max_immutable_memtables: usize,
    pub(crate) recovery_mode: RecoveryMode,
    pub(crate) block_cache_bytes: u64,
    pub(crate) table: TableOptions,
    pub(crate) background_threads: usize,
    pub(crate) delete_persistence_deadline: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            create_if_missing: true,
            error_if_exists: false,
            fs: Arc::new(RealFs::new()),
            clock: Arc::new(SystemClock),
            memtable_size: 64 << 20,
            max_immutable_memtables: 2,
            recovery_mode: RecoveryMode::default(),
            block_cache_bytes: 64 << 20,
            table: TableOptions::default(),
            background_threads: 2,
            delete_persistence_deadline: None,
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

    /// Bytes a memtable holds before it is frozen and flushed (default 64 MiB, at least 4 KiB).
    #[must_use]
    pub fn memtable_size(mut self, bytes: usize) -> Self {
        self.memtable_size = bytes.max(4096);
        self
    }

    /// Frozen memtables that may wait for a flush before writes stall (default 2, at least 1).
    #[must_use]
    pub fn max_immutable_memtables(mut self, n: usize) -> Self {
        self.max_immutable_memtables = n.max(1);
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

    /// How tables are built: block size, bloom bits per key, zstd level (defaults 4 KiB, 10, 3).
    #[must_use]
    pub fn table_options(mut self, table: TableOptions) -> Self {
        self.table = table;
        self
    }

    /// Background threads for flushes and compactions (default 2, at least 1).
    #[must_use]
    pub fn background_threads(mut self, n: usize) -> Self {
        self.background_threads = n.max(1);
        self
    }

    /// The delete persistence deadline: a droppable tombstone is erased, with what it shadows,
    /// within this long (default none). Takes effect with compaction (issue 4).
    #[must_use]
    pub fn delete_persistence_deadline(mut self, deadline: Duration) -> Self {
        self.delete_persistence_deadline = Some(deadline);
        self
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
    /// zero). Takes effect with compaction (issue 4).
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
