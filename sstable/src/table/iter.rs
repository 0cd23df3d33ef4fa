//! The table iterator: an index-block cursor that opens data blocks on demand.

use bytes::Bytes;

use super::block_io::decode_handle;
use super::file::Readahead;
use super::reader::Table;
use crate::block::BlockIter;
use crate::coding::Cursor;
use crate::error::Result;
use crate::iter::InternalIterator;
use crate::key::{compare_internal_keys, parse_internal_key};
use crate::meta::EntryMeta;

/// Iterates a table's point entries in both directions.
#[derive(Debug)]
pub struct TableIter {
    table: Table,
    index: BlockIter,
    data: Option<BlockIter>,
    meta: EntryMeta,
    /// Where the user value starts inside the block entry's value (after the metadata).
    value_start: usize,
    /// The key before the last step, to check that steps keep the table's order.
    last_key: Vec<u8>,
    /// Reads the blocks ahead of a walk in file order.
    pub(super) ahead: Readahead,
    /// Whether blocks read from the file go into the block cache.
    fill_cache: bool,
}

impl TableIter {
    pub(super) fn new(table: Table, index: BlockIter) -> Self {
        Self {
            table,
            index,
            data: None,
            meta: EntryMeta::default(),
            value_start: 0,
            last_key: Vec::new(),
            ahead: Readahead::default(),
            fill_cache: true,
        }
    }

    /// Whether blocks this iterator reads from the file are kept in the block cache (the
    /// default) or dropped once passed. A compaction reads each input block once: filling the
    /// cache with them would evict the blocks readers use and hold memory for nothing
    /// (`RocksDB` compacts with `fill_cache` off too). Blocks already cached are used either way.
    #[must_use]
    pub fn fill_cache(mut self, fill: bool) -> Self {
        self.fill_cache = fill;
        self
    }

    /// The table this iterates.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Opens the data block the index points at, or clears it if the index is exhausted.
    fn load_block(&mut self) -> Result<bool> {
        if !self.index.valid() {
            self.data = None;
            self.ahead.release();
            return Ok(false);
        }
        let Some(handle) = decode_handle(self.index.value()) else {
            self.data = None;
            return Err(self.index.corruption_here("bad block handle in index"));
        };
        self.data = Some(
            self.table
                .data_block(handle, &mut self.ahead, self.fill_cache)?
                .into_iter(),
        );
        Ok(true)
    }

    /// Moves forward over empty blocks until on an entry or past the end.
    fn settle_forward(&mut self) -> Result<()> {
        while self.data.as_ref().is_some_and(|d| !d.valid()) {
            self.index.next()?;
            if self.load_block()?
                && let Some(data) = self.data.as_mut()
            {
                data.seek_to_first()?;
            }
        }
        self.decode_current()
    }

    /// Moves backward over empty blocks until on an entry or before the start.
    fn settle_backward(&mut self) -> Result<()> {
        while self.data.as_ref().is_some_and(|d| !d.valid()) {
            self.index.prev()?;
            if self.load_block()?
                && let Some(data) = self.data.as_mut()
            {
                data.seek_to_last()?;
            }
        }
        self.decode_current()
    }

    /// Checks the current key and splits the metadata off the value.
    fn decode_current(&mut self) -> Result<()> {
        let Some(data) = self.data.as_ref().filter(|d| d.valid()) else {
            self.data = None;
            return Ok(());
        };
        if parse_internal_key(data.key()).is_none() {
            let err = data.corruption_here("malformed internal key");
            self.data = None;
            return Err(err);
        }
        let mut cursor = Cursor::new(data.value());
        let Some(meta) = EntryMeta::decode(&mut cursor) else {
            let err = data.corruption_here("malformed entry metadata");
            self.data = None;
            return Err(err);
        };
        self.meta = meta;
        self.value_start = cursor.pos();
        Ok(())
    }

    fn guard(&mut self, result: Result<()>) -> Result<()> {
        if result.is_err() {
            self.data = None;
        }
        result
    }

    fn data_mut(&mut self) -> Option<&mut BlockIter> {
        self.data.as_mut()
    }

    /// Remembers the current key before a step.
    fn note_key(&mut self) {
        self.last_key.clear();
        if let Some(data) = self.data.as_ref() {
            self.last_key.extend_from_slice(data.key());
        }
    }

    /// After a step: a damaged table whose checksums still match must not hand out keys out of
    /// order (the merging iterator above relies on the order).
    fn check_order(&mut self, want: std::cmp::Ordering) -> Result<()> {
        let Some(data) = self.data.as_ref().filter(|d| d.valid()) else {
            return Ok(());
        };
        if compare_internal_keys(data.key(), &self.last_key) == want {
            return Ok(());
        }
        let err = data.corruption_here("keys out of order");
        self.data = None;
        Err(err)
    }
}

impl InternalIterator for TableIter {
    fn valid(&self) -> bool {
        self.data.as_ref().is_some_and(BlockIter::valid)
    }

    fn corruption_here(&self, reason: &str) -> crate::Error {
        match &self.data {
            Some(data) => data.corruption_here(reason),
            None => crate::Error::unpositioned(reason),
        }
    }

    fn key(&self) -> &[u8] {
        self.data.as_ref().map(BlockIter::key).unwrap_or_default()
    }

    fn meta(&self) -> EntryMeta {
        self.meta
    }

    fn value(&self) -> &[u8] {
        self.data
            .as_ref()
            .and_then(|d| d.value().get(self.value_start..))
            .unwrap_or_default()
    }

    fn value_bytes(&self) -> Bytes {
        self.data
            .as_ref()
            .map(|d| {
                let whole = d.value_bytes();
                whole.slice(self.value_start.min(whole.len())..)
            })
            .unwrap_or_default()
    }

    fn seek_to_first(&mut self) -> Result<()> {
        let result = (|| {
            self.index.seek_to_first()?;
            if self.load_block()?
                && let Some(data) = self.data_mut()
            {
                data.seek_to_first()?;
            }
            self.settle_forward()
        })();
        self.guard(result)
    }

    fn seek_to_last(&mut self) -> Result<()> {
        let result = (|| {
            self.index.seek_to_last()?;
            if self.load_block()?
                && let Some(data) = self.data_mut()
            {
                data.seek_to_last()?;
            }
            self.settle_backward()
        })();
        self.guard(result)
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let result = (|| {
            self.index.seek(target)?;
            if self.load_block()?
                && let Some(data) = self.data_mut()
            {
                data.seek(target)?;
            }
            self.settle_forward()
        })();
        self.guard(result)
    }

    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.seek(target)?;
        if !self.valid() {
            return self.seek_to_last();
        }
        if compare_internal_keys(self.key(), target).is_gt() {
            return self.prev();
        }
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        self.note_key();
        let result = (|| {
            if let Some(data) = self.data_mut() {
                data.next()?;
            }
            self.settle_forward()?;
            self.check_order(std::cmp::Ordering::Greater)
        })();
        self.guard(result)
    }

    fn prev(&mut self) -> Result<()> {
        self.note_key();
        let result = (|| {
            if let Some(data) = self.data_mut() {
                data.prev()?;
            }
            self.settle_backward()?;
            self.check_order(std::cmp::Ordering::Less)
        })();
        self.guard(result)
    }
}
