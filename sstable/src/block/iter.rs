//! Iterates a block in both directions and seeks by binary search over its restart points.

use std::cmp::Ordering;
use std::ops::Range;

use bytes::Bytes;

use super::Block;
use crate::coding::Cursor;
use crate::error::Result;
use crate::key::compare_internal_keys;

/// A cursor over a [`Block`]. Positioned nowhere until a `seek*`; invalid after running off
/// either end or after an error.
#[derive(Debug)]
pub(crate) struct BlockIter {
    block: Block,
    /// Offset of the current entry; `restarts_offset` when not valid.
    current: usize,
    /// Offset of the entry after the current one.
    next: usize,
    key: Vec<u8>,
    value: Range<usize>,
}

impl BlockIter {
    pub(super) fn new(block: Block) -> Self {
        let end = block.restarts_offset;
        Self {
            block,
            current: end,
            next: end,
            // Sized for typical keys, so positioning does not grow it byte by byte.
            key: Vec::with_capacity(64),
            value: 0..0,
        }
    }

    pub(crate) fn valid(&self) -> bool {
        self.current < self.block.restarts_offset
    }

    /// The current key; empty when not valid.
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// The current value; empty when not valid.
    pub(crate) fn value(&self) -> &[u8] {
        self.block.data.get(self.value.clone()).unwrap_or_default()
    }

    /// The current value as a slice of the block, without copying.
    pub(crate) fn value_bytes(&self) -> Bytes {
        self.block.data.slice(self.value.clone())
    }

    /// A corruption error about the current entry.
    pub(crate) fn corruption_here(&self, reason: impl Into<String>) -> crate::Error {
        self.block.origin.corruption(self.current, reason)
    }

    pub(crate) fn seek_to_first(&mut self) -> Result<()> {
        if self.block.num_restarts == 0 {
            self.invalidate();
            return Ok(());
        }
        self.seek_to_restart(0)?;
        self.parse_next().map(drop)
    }

    pub(crate) fn seek_to_last(&mut self) -> Result<()> {
        let Some(last) = self.block.num_restarts.checked_sub(1) else {
            self.invalidate();
            return Ok(());
        };
        self.seek_to_restart(last)?;
        while self.parse_next()? && self.next < self.block.restarts_offset {}
        Ok(())
    }

    /// Positions at the first entry whose key is at or after `target` in internal-key order.
    pub(crate) fn seek(&mut self, target: &[u8]) -> Result<()> {
        let Some(mut right) = self.block.num_restarts.checked_sub(1) else {
            self.invalidate();
            return Ok(());
        };
        let mut left = 0;
        while left < right {
            let mid = (left + right).div_ceil(2);
            if compare_internal_keys(self.restart_key(mid)?, target) == Ordering::Less {
                left = mid;
            } else {
                right = mid - 1;
            }
        }
        self.seek_to_restart(left)?;
        while self.parse_next()? {
            if compare_internal_keys(&self.key, target) != Ordering::Less {
                break;
            }
        }
        Ok(())
    }

    pub(crate) fn next(&mut self) -> Result<()> {
        if self.valid() {
            self.parse_next()?;
        }
        Ok(())
    }

    pub(crate) fn prev(&mut self) -> Result<()> {
        if !self.valid() {
            return Ok(());
        }
        let original = self.current;
        let Some(index) = self.restart_before(original)? else {
            self.invalidate();
            return Ok(());
        };
        self.seek_to_restart(index)?;
        loop {
            if !self.parse_next()? || self.next > original {
                return Err(self.fail(original, "entries do not chain to the previous key"));
            }
            if self.next == original {
                return Ok(());
            }
        }
    }

    /// The last restart point that lies before `offset`, if any (by binary search: steps do
    /// not track the restart interval they are in, only `prev` needs it).
    fn restart_before(&self, offset: usize) -> Result<Option<usize>> {
        let (mut lo, mut hi) = (0, self.block.num_restarts);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.block.restart_point(mid)? < offset {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo.checked_sub(1))
    }

    fn invalidate(&mut self) {
        self.current = self.block.restarts_offset;
        self.next = self.block.restarts_offset;
        self.key.clear();
        self.value = 0..0;
    }

    fn fail(&mut self, at: usize, reason: &str) -> crate::Error {
        self.invalidate();
        self.block.origin.corruption(at, reason)
    }

    fn seek_to_restart(&mut self, index: usize) -> Result<()> {
        let offset = match self.block.restart_point(index) {
            Ok(offset) => offset,
            Err(e) => {
                self.invalidate();
                return Err(e);
            }
        };
        self.key.clear();
        self.current = self.block.restarts_offset;
        self.next = offset;
        Ok(())
    }

    /// The whole key stored at restart point `index`.
    fn restart_key(&self, index: usize) -> Result<&[u8]> {
        let offset = self.block.restart_point(index)?;
        let entry = self.decode_entry(offset);
        match entry {
            Some(e) if e.shared == 0 => Ok(e.key_delta),
            _ => Err(self
                .block
                .origin
                .corruption(offset, "bad entry at restart point")),
        }
    }

    /// Moves to the entry at `self.next`; false (and not valid) at the end of the entries.
    fn parse_next(&mut self) -> Result<bool> {
        let pos = self.next;
        if pos >= self.block.restarts_offset {
            self.invalidate();
            return Ok(false);
        }
        let Some(entry) = self.decode_entry(pos) else {
            return Err(self.fail(pos, "entry runs past the block"));
        };
        if entry.shared > self.key.len() {
            return Err(self.fail(pos, "entry shares more than the previous key"));
        }
        let (value, next) = (entry.value.clone(), entry.value.end);
        let delta_range = entry.delta_range.clone();
        self.key.truncate(entry.shared);
        self.key
            .extend_from_slice(self.block.data.get(delta_range).unwrap_or_default());
        self.value = value;
        self.current = pos;
        self.next = next;
        Ok(true)
    }

    #[inline]
    fn decode_entry(&self, pos: usize) -> Option<RawEntry<'_>> {
        let entries = self.block.data.get(..self.block.restarts_offset)?;
        // Most entries have all three lengths under 128, one byte each (LevelDB's fast path).
        if let Some(&[shared, unshared, value_len]) = entries.get(pos..pos + 3)
            && (shared | unshared | value_len) < 0x80
        {
            let delta_start = pos + 3;
            let value_start = delta_start + usize::from(unshared);
            let value_end = value_start + usize::from(value_len);
            return Some(RawEntry {
                shared: usize::from(shared),
                key_delta: entries.get(delta_start..value_start)?,
                delta_range: delta_start..value_start,
                value: value_start..value_end,
            })
            .filter(|_| value_end <= entries.len());
        }
        let mut cursor = Cursor::new(entries.get(pos..)?);
        let shared = cursor.varint_usize()?;
        let unshared = cursor.varint_usize()?;
        let value_len = cursor.varint_usize()?;
        let delta_start = pos + cursor.pos();
        let key_delta = cursor.bytes(unshared)?;
        let value_start = pos + cursor.pos();
        cursor.bytes(value_len)?;
        Some(RawEntry {
            shared,
            key_delta,
            delta_range: delta_start..value_start,
            value: value_start..value_start + value_len,
        })
    }
}

struct RawEntry<'a> {
    shared: usize,
    key_delta: &'a [u8],
    delta_range: Range<usize>,
    value: Range<usize>,
}
