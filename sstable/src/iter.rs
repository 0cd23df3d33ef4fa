//! The internal iterator: the cursor every layer of the read path and compaction speaks.

use bytes::Bytes;

use crate::Result;
use crate::key::{Kind, ParsedKey, SeqNo, parse_internal_key};
use crate::meta::EntryMeta;

/// A bidirectional cursor over internal entries in internal-key order.
///
/// Positioned nowhere until a `seek*`. After running off either end, or after any method
/// returned an error, it is not [`valid`](Self::valid) and must be re-seeked. `key`, `meta` and
/// `value` may only be called while valid.
pub trait InternalIterator {
    /// True when positioned on an entry.
    fn valid(&self) -> bool;

    /// The current internal key (user key and trailer).
    fn key(&self) -> &[u8];

    /// The current entry's metadata.
    fn meta(&self) -> EntryMeta;

    /// The current user value (empty for tombstones).
    fn value(&self) -> &[u8];

    /// The current user value as shared bytes; implementations over blocks return a slice of
    /// the block without copying.
    fn value_bytes(&self) -> Bytes {
        Bytes::copy_from_slice(self.value())
    }

    /// Positions at the first entry.
    ///
    /// # Errors
    /// `Corruption` or `Io` when the underlying data cannot be read.
    fn seek_to_first(&mut self) -> Result<()>;

    /// Positions at the last entry.
    ///
    /// # Errors
    /// `Corruption` or `Io` when the underlying data cannot be read.
    fn seek_to_last(&mut self) -> Result<()>;

    /// Positions at the first entry at or after `target` (an internal key).
    ///
    /// # Errors
    /// `Corruption` or `Io` when the underlying data cannot be read.
    fn seek(&mut self, target: &[u8]) -> Result<()>;

    /// Positions at the last entry at or before `target` (an internal key).
    ///
    /// # Errors
    /// `Corruption` or `Io` when the underlying data cannot be read.
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()>;

    /// Moves to the next entry.
    ///
    /// # Errors
    /// `Corruption` or `Io` when the underlying data cannot be read.
    fn next(&mut self) -> Result<()>;

    /// Moves to the previous entry.
    ///
    /// # Errors
    /// `Corruption` or `Io` when the underlying data cannot be read.
    fn prev(&mut self) -> Result<()>;

    /// The current key decoded. Iterators check keys as they decode them, so this only fails on
    /// an iterator that handed out a key it had not checked.
    fn parsed_key(&self) -> Option<ParsedKey<'_>> {
        parse_internal_key(self.key())
    }

    /// A `Corruption` error about the current entry, naming where it lies: the file and offset
    /// for an iterator over a table, the iterator merged in for a merging one. An iterator over
    /// memory has no file: it names itself.
    fn corruption_here(&self, reason: &str) -> crate::Error {
        crate::Error::Corruption {
            file: std::path::PathBuf::from("<memory>"),
            offset: 0,
            reason: reason.to_string(),
        }
    }
}

impl<I: InternalIterator + ?Sized> InternalIterator for Box<I> {
    fn valid(&self) -> bool {
        (**self).valid()
    }
    fn key(&self) -> &[u8] {
        (**self).key()
    }
    fn meta(&self) -> EntryMeta {
        (**self).meta()
    }
    fn value(&self) -> &[u8] {
        (**self).value()
    }
    fn value_bytes(&self) -> Bytes {
        (**self).value_bytes()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        (**self).seek_to_first()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        (**self).seek_to_last()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        (**self).seek(target)
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        (**self).seek_for_prev(target)
    }
    fn next(&mut self) -> Result<()> {
        (**self).next()
    }
    fn prev(&mut self) -> Result<()> {
        (**self).prev()
    }
    fn corruption_here(&self, reason: &str) -> crate::Error {
        (**self).corruption_here(reason)
    }
}

/// One entry owned: what point lookups return and what tests collect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The user key.
    pub user_key: Bytes,
    /// The write's sequence number.
    pub seqno: SeqNo,
    /// What the entry is.
    pub kind: Kind,
    /// Write time and TTL.
    pub meta: EntryMeta,
    /// The user value (empty for tombstones).
    pub value: Bytes,
}

impl Entry {
    /// Copies the iterator's current entry; `None` if it is not valid.
    pub fn current(iter: &(impl InternalIterator + ?Sized)) -> Option<Self> {
        if !iter.valid() {
            return None;
        }
        let key = iter.parsed_key()?;
        Some(Self {
            user_key: Bytes::copy_from_slice(key.user_key),
            seqno: key.seqno,
            kind: key.kind,
            meta: iter.meta(),
            value: iter.value_bytes(),
        })
    }
}
