//! Open tables by file number: mapped on first use, kept in a bounded cache, and tracked while
//! anyone holds them.
//!
//! The cache holds at most `Options::max_open_tables` tables; the least recently used one is
//! closed when another is opened (a reader using it keeps its own handle until done). Every table
//! opened is also remembered weakly, so an audit can find one that is still mapped after its
//! file was deleted: a mapping keeps an unlinked file's bytes on disk.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cairn_fs::FileSystem;
use cairn_sstable::{BlockCache, Table, WeakTable};

use crate::error::Result;
use crate::filename;
use crate::version_edit::FileMeta;

/// Maps file numbers to open tables.
pub(crate) struct TableCache {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    blocks: Option<BlockCache>,
    open: quick_cache::sync::Cache<u64, Table>,
    /// Every table opened, while anything holds it.
    alive: Mutex<HashMap<u64, WeakTable>>,
    blocks_read: Arc<AtomicU64>,
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
    ) -> Self {
        Self {
            fs,
            dir,
            blocks,
            open: quick_cache::sync::Cache::new(max_open.max(1)),
            alive: Mutex::new(HashMap::new()),
            blocks_read: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Data blocks fetched from every table this cache has opened, by reads and compactions,
    /// including tables since deleted.
    pub(crate) fn blocks_read(&self) -> u64 {
        self.blocks_read.load(Ordering::Relaxed)
    }

    /// Tables the cache holds open now.
    pub(crate) fn open_tables(&self) -> usize {
        self.open.len()
    }

    /// The table numbered `number`, opening it if the cache does not hold it.
    pub(crate) fn get(&self, number: u64) -> Result<Table> {
        Ok(self.open_table(number)?)
    }

    /// [`get`](Self::get) with the table layer's error, for cursors that speak it.
    pub(crate) fn open_table(&self, number: u64) -> cairn_sstable::Result<Table> {
        self.open
            .get_or_insert_with(&number, || -> cairn_sstable::Result<Table> {
                let table = Table::open(
                    self.fs.as_ref(),
                    &filename::table_path(&self.dir, number),
                    number,
                    self.blocks.clone(),
                )?
                .with_shared_counter(Arc::clone(&self.blocks_read));
                let mut alive = self.lock_alive();
                alive.retain(|_, weak| weak.is_alive());
                alive.insert(number, table.downgrade());
                Ok(table)
            })
    }

    /// The table `file` records.
    pub(crate) fn table(&self, file: &FileMeta) -> Result<Table> {
        self.get(file.number)
    }

    /// Forgets a table that was deleted. Readers still holding it keep their mapping.
    pub(crate) fn evict(&self, number: u64) {
        self.open.remove(&number);
    }

    /// Tables still mapped, by anyone, whose numbers are not in `live`: no longer read by the
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
