//! Open tables by file number, mapped once and shared.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cairn_fs::FileSystem;
use cairn_sstable::{BlockCache, Table};

use crate::error::Result;
use crate::filename;
use crate::version_edit::FileMeta;

/// Maps file numbers to open tables.
#[derive(Debug)]
pub(crate) struct TableCache {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    blocks: Option<BlockCache>,
    open: Mutex<HashMap<u64, Table>>,
    blocks_read: Arc<AtomicU64>,
}

impl TableCache {
    pub(crate) fn new(fs: Arc<dyn FileSystem>, dir: PathBuf, blocks: Option<BlockCache>) -> Self {
        Self {
            fs,
            dir,
            blocks,
            open: Mutex::new(HashMap::new()),
            blocks_read: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Data blocks fetched from every table this cache has opened, by reads and compactions,
    /// including tables since deleted.
    pub(crate) fn blocks_read(&self) -> u64 {
        self.blocks_read.load(Ordering::Relaxed)
    }

    /// The table numbered `number`, opening it on first use.
    pub(crate) fn get(&self, number: u64) -> Result<Table> {
        if let Some(table) = self.lock().get(&number) {
            return Ok(table.clone());
        }
        let table = Table::open(
            self.fs.as_ref(),
            &filename::table_path(&self.dir, number),
            number,
            self.blocks.clone(),
        )?
        .with_shared_counter(Arc::clone(&self.blocks_read));
        self.lock().insert(number, table.clone());
        Ok(table)
    }

    /// The table `file` records, kept open in the record after the first call.
    pub(crate) fn table<'f>(&self, file: &'f FileMeta) -> Result<&'f Table> {
        if let Some(table) = file.open.get() {
            return Ok(table);
        }
        Ok(file.open.keep(self.get(file.number)?))
    }

    /// Forgets a table that was deleted. Readers still holding it keep their mapping.
    pub(crate) fn evict(&self, number: u64) {
        self.lock().remove(&number);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Table>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
