//! Blocks: sorted entries with prefix-compressed keys and restart points.
//!
//! ```text
//! entry*  restart_offset: u32 LE * num_restarts  num_restarts: u32 LE
//! entry = shared: varint  unshared: varint  value_len: varint  key_delta  value
//! ```
//!
//! Every `restart_interval` entries the key is stored whole (`shared = 0`) and its offset is
//! recorded, so a seek binary-searches the restarts and scans at most one interval. Data blocks,
//! index blocks and the properties block all use this layout.

mod builder;
mod iter;

pub(crate) use builder::BlockBuilder;
pub(crate) use iter::BlockIter;

use bytes::Bytes;

use crate::coding::get_u32;
use crate::error::{Origin, Result};

/// A decoded block whose trailer (the restart array) has been checked.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    data: Bytes,
    restarts_offset: usize,
    num_restarts: usize,
    origin: Origin,
}

impl Block {
    /// Parses the restart array of `data`.
    ///
    /// # Errors
    /// `Corruption` at `origin` if the restart array does not fit in the block.
    pub(crate) fn new(data: Bytes, origin: Origin) -> Result<Self> {
        let len = data.len();
        let count_pos = len
            .checked_sub(4)
            .ok_or_else(|| origin.corruption(0, "block shorter than its restart count"))?;
        let num_restarts = get_u32(&data, count_pos)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| origin.corruption(count_pos, "unreadable restart count"))?;
        let restarts_offset = num_restarts
            .checked_mul(4)
            .and_then(|bytes| count_pos.checked_sub(bytes))
            .ok_or_else(|| {
                origin.corruption(count_pos, format!("{num_restarts} restarts do not fit"))
            })?;
        if num_restarts == 0 && restarts_offset != 0 {
            return Err(origin.corruption(count_pos, "entries without restart points"));
        }
        Ok(Self {
            data,
            restarts_offset,
            // A block without entries has nothing to restart at (the builder still records one).
            num_restarts: if restarts_offset == 0 {
                0
            } else {
                num_restarts
            },
            origin,
        })
    }

    /// The offset of restart point `index`, checked to lie inside the entries.
    fn restart_point(&self, index: usize) -> Result<usize> {
        let pos = self.restarts_offset + index * 4;
        get_u32(&self.data, pos)
            .and_then(|p| usize::try_from(p).ok())
            .filter(|&p| p < self.restarts_offset)
            .ok_or_else(|| {
                self.origin
                    .corruption(pos, "restart point outside the block")
            })
    }

    /// An iterator over the block's entries, positioned nowhere.
    pub(crate) fn iter(&self) -> BlockIter {
        BlockIter::new(self.clone())
    }

    /// A cursor that owns the block (no clone of its bytes and origin).
    pub(crate) fn into_iter(self) -> BlockIter {
        BlockIter::new(self)
    }

    /// The number of bytes the block holds.
    pub(crate) fn size(&self) -> usize {
        self.data.len()
    }
}

#[cfg(test)]
mod tests;
