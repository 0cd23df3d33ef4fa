//! Where an open table's bytes come from.
//!
//! By default a table is read with positional reads (`pread`), as RocksDB reads by default: a
//! data block read from the file lands in a buffer of its own, which the block cache may keep.
//! What stays in memory is what the cache keeps, the blocks a table pins while open (index,
//! filter, range tombstones, properties: heap, as RocksDB's with
//! `cache_index_and_filter_blocks` off) and each iterator's read-ahead window. A mapped table
//! reads a little faster on a miss, but every page a read or a compaction touches then counts in
//! the process's resident set until the table closes. A table may also be held whole in memory
//! (a mapping, or bytes built by a test); then reads slice it.
//!
//! This module only fetches bytes and checks they lie inside the file; `block_io` verifies and
//! decodes them.

use bytes::Bytes;
use cairn_fs::ReadableFile;

use crate::error::{Origin, Result};

/// The bytes of an open table.
#[derive(Debug)]
pub(crate) enum TableFile {
    /// The whole file, mapped or in memory.
    Whole(Bytes),
    /// An open file, read at offsets on demand.
    Reader(Box<dyn ReadableFile>),
}

/// Bytes fetched from a table, and whether they share anything with the file: a cached block
/// must not keep a mapping (and so a deleted file) alive.
#[derive(Debug)]
pub(crate) struct Fetched {
    pub(crate) bytes: Bytes,
    /// The bytes are a buffer of their own, not a slice of a mapping, of memory or of a
    /// read-ahead window.
    pub(crate) private: bool,
}

impl TableFile {
    /// The file's size in bytes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Self::Whole(bytes) => bytes.len() as u64,
            Self::Reader(file) => file.len(),
        }
    }

    /// [`fetch`](Self::fetch) for an iterator, through its read-ahead (see [`Readahead`]); the
    /// caller has [noted](Readahead::note) the block. Bytes from a window are not private: a
    /// block cached from one must be copied, or it would keep the whole window.
    ///
    /// A window stops at `data_end`, where the table's data blocks end: the blocks after them
    /// are read once, when the table opens.
    pub(crate) fn fetch_ahead(
        &self,
        offset: u64,
        len: usize,
        at: &Origin,
        ahead: &mut Readahead,
        data_end: u64,
    ) -> Result<Fetched> {
        let Self::Reader(_) = self else {
            return self.fetch(offset, len, at);
        };
        if let Some(bytes) = ahead.in_window(offset, len) {
            return Ok(Fetched {
                bytes,
                private: false,
            });
        }
        let end = self.len().min(data_end);
        let room = usize::try_from(end.saturating_sub(offset)).unwrap_or(usize::MAX);
        // A block running past the end fails in `fetch`, as without read-ahead.
        if ahead.sequential < SEQUENTIAL_BEFORE_AHEAD || len > room {
            return self.fetch(offset, len, at);
        }
        let window = ahead.size.max(len).min(room);
        let read = self.fetch(offset, window, at)?;
        ahead.window = read.bytes;
        ahead.start = offset;
        ahead.size = ahead.size.saturating_mul(2).min(MAX_WINDOW);
        ahead
            .in_window(offset, len)
            .map(|bytes| Fetched {
                bytes,
                private: false,
            })
            .ok_or_else(|| at.corruption(0, "read-ahead window shorter than its block"))
    }

    /// The `len` bytes at `offset`, or `Corruption` at `at` if they run past the end of the
    /// file; `Io` if the read fails.
    pub(crate) fn fetch(&self, offset: u64, len: usize, at: &Origin) -> Result<Fetched> {
        let end = offset
            .checked_add(len as u64)
            .filter(|&end| end <= self.len())
            .ok_or_else(|| {
                at.corruption(
                    0,
                    format!("a read of {len} bytes runs past the end of the file"),
                )
            })?;
        match self {
            Self::Whole(bytes) => {
                let (Ok(start), Ok(end)) = (usize::try_from(offset), usize::try_from(end)) else {
                    return Err(at.corruption(0, "offset out of range"));
                };
                Ok(Fetched {
                    bytes: bytes.slice(start..end),
                    private: false,
                })
            }
            Self::Reader(file) => Ok(Fetched {
                bytes: Bytes::from(read_exact_at(file.as_ref(), offset, len, at)?),
                private: true,
            }),
        }
    }
}

/// The first window a [`Readahead`] reads, and the most it grows to (RocksDB's iterators start
/// at 8 KiB and grow to 256 KiB).
const FIRST_WINDOW: usize = 16 << 10;
const MAX_WINDOW: usize = 256 << 10;
/// Blocks fetched one after another, each where the last ended, before reading ahead.
const SEQUENTIAL_BEFORE_AHEAD: u32 = 3;

/// Read-ahead for one iterator walking a table's blocks in file order. After
/// [`SEQUENTIAL_BEFORE_AHEAD`] blocks in a row, a block missing from the cache is read with the
/// blocks after it, a window that doubles with each read up to [`MAX_WINDOW`]; the next blocks
/// come from the window with no system call. A seek elsewhere, or a step backward, starts over:
/// point reads and random seeks never read ahead. The window is let go as soon as a walk leaves
/// it or its iterator runs out, so an idle or finished iterator holds none.
#[derive(Debug, Default)]
pub(crate) struct Readahead {
    window: Bytes,
    /// The file offset of the window's first byte.
    start: u64,
    /// Just past the last block asked for.
    next: u64,
    /// Blocks asked for in a row, each where the one before ended.
    sequential: u32,
    /// The size of the next window read.
    size: usize,
}

impl Readahead {
    /// Notes that the block of `len` bytes at `offset` is wanted (from the cache or the file).
    pub(crate) fn note(&mut self, offset: u64, len: usize) {
        if offset == self.next && self.sequential > 0 {
            self.sequential = self.sequential.saturating_add(1);
        } else {
            self.release();
            self.sequential = 1;
            self.size = FIRST_WINDOW;
        }
        self.next = offset.saturating_add(len as u64);
    }

    /// Lets go of the window (its iterator ran out).
    pub(crate) fn release(&mut self) {
        self.window = Bytes::new();
    }

    /// Bytes held in the window now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.window.len()
    }

    /// True if `bytes` lie inside the window.
    #[cfg(test)]
    pub(crate) fn holds(&self, bytes: &[u8]) -> bool {
        self.window.as_ptr_range().contains(&bytes.as_ptr())
    }

    /// The `len` bytes at `offset` from the window, if it holds them.
    fn in_window(&self, offset: u64, len: usize) -> Option<Bytes> {
        let from = usize::try_from(offset.checked_sub(self.start)?).ok()?;
        let to = from
            .checked_add(len)
            .filter(|&to| to <= self.window.len())?;
        Some(self.window.slice(from..to))
    }
}

/// A file that counts its reads, for tests of what reaches the disk.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct CountingFile {
    pub(crate) inner: Box<dyn ReadableFile>,
    pub(crate) reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

#[cfg(test)]
impl ReadableFile for CountingFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> cairn_fs::Result<usize> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.read_at(offset, buf)
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn path(&self) -> &std::path::Path {
        self.inner.path()
    }
}

/// Reads exactly `len` bytes at `offset`. The length was checked against the file's size when
/// it opened, so a short read means the file shrank under a reader: `Corruption`.
fn read_exact_at(file: &dyn ReadableFile, offset: u64, len: usize, at: &Origin) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut filled = 0;
    while let Some(rest) = buf.get_mut(filled..).filter(|rest| !rest.is_empty()) {
        let n = file.read_at(offset + filled as u64, rest)?;
        if n == 0 {
            return Err(at.corruption(
                filled,
                format!("file ended {filled} bytes into a read of {len}"),
            ));
        }
        filled += n;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn at() -> Origin {
        Origin::new(std::sync::Arc::from(Path::new("t.sst")), 0)
    }

    fn file_with(contents: &[u8]) -> (tempfile::TempDir, TableFile) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.sst");
        std::fs::write(&path, contents).expect("write");
        let fs = cairn_fs::RealFs::new();
        let file = cairn_fs::FileSystem::open_read(&fs, &path).expect("open");
        (dir, TableFile::Reader(file))
    }

    #[test]
    fn both_sources_fetch_the_same_bytes_and_only_reads_are_private() {
        let contents: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let (_dir, reader) = file_with(&contents);
        let whole = TableFile::Whole(Bytes::from(contents.clone()));
        for (offset, len) in [(0u64, 0usize), (0, 10_000), (4_321, 77), (9_999, 1)] {
            let a = reader.fetch(offset, len, &at()).expect("read");
            let b = whole.fetch(offset, len, &at()).expect("slice");
            assert_eq!(a.bytes, b.bytes, "at {offset} len {len}");
            assert!(a.private && !b.private);
        }
    }

    /// Fetches `blocks` (offset, len) in order through one read-ahead; the bytes, each checked
    /// against `contents`, and the number of reads it took.
    fn walk(contents: &[u8], blocks: &[(u64, usize)]) -> usize {
        let (_dir, file) = file_with(contents);
        let TableFile::Reader(inner) = file else {
            unreachable!("file_with opens a file")
        };
        let reads = std::sync::Arc::default();
        let file = TableFile::Reader(Box::new(CountingFile {
            inner,
            reads: std::sync::Arc::clone(&reads),
        }));
        let mut ahead = Readahead::default();
        for &(offset, len) in blocks {
            ahead.note(offset, len);
            let got = file
                .fetch_ahead(offset, len, &at(), &mut ahead, u64::MAX)
                .expect("fetch");
            let start = usize::try_from(offset).expect("offset");
            assert_eq!(
                got.bytes,
                contents.get(start..start + len).expect("in range")
            );
        }
        reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn a_walk_in_file_order_reads_ahead_and_a_random_one_does_not() {
        let contents: Vec<u8> = (0..=250u8).cycle().take(1 << 20).collect();
        let in_order: Vec<(u64, usize)> = (0..250u64).map(|i| (i * 4000, 4000)).collect();
        // Two blocks alone, then windows of 16, 32, 64, 128 and 256 KiB: 1 MB in a dozen reads.
        let reads = walk(&contents, &in_order);
        assert!(reads <= 12, "{reads} reads for 250 blocks in order");
        // Blocks out of order: one read each, no window.
        let mut shuffled = in_order.clone();
        shuffled.reverse();
        assert_eq!(walk(&contents, &shuffled), 250);
        let hops: Vec<(u64, usize)> = (0..100u64).map(|i| (i * 8000, 4000)).collect();
        assert_eq!(walk(&contents, &hops), 100);
    }

    #[test]
    fn a_block_past_the_end_fails_the_same_with_read_ahead() {
        let contents = vec![9u8; 10_000];
        let (_dir, file) = file_with(&contents);
        let mut ahead = Readahead::default();
        for offset in [0u64, 1000, 2000] {
            ahead.note(offset, 1000);
            file.fetch_ahead(offset, 1000, &at(), &mut ahead, u64::MAX)
                .expect("fetch");
        }
        ahead.note(3000, 8000);
        let with = file
            .fetch_ahead(3000, 8000, &at(), &mut ahead, u64::MAX)
            .expect_err("past the end");
        let without = file.fetch(3000, 8000, &at()).expect_err("past the end");
        assert_eq!(with.to_string(), without.to_string());
    }

    #[test]
    fn a_file_that_shrinks_under_a_reader_is_corruption_not_short_bytes() {
        let (dir, reader) = file_with(&[7; 100]);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("t.sst"))
            .expect("open");
        file.set_len(50).expect("truncate");
        let err = reader.fetch(40, 20, &at()).expect_err("shrunk");
        assert!(
            matches!(&err, crate::Error::Corruption { offset: 10, .. }),
            "{err}"
        );
    }

    #[test]
    fn a_fetch_past_the_end_is_corruption_from_either_source() {
        let (_dir, reader) = file_with(&[7; 100]);
        let whole = TableFile::Whole(Bytes::from(vec![7; 100]));
        for file in [&reader, &whole] {
            for (offset, len) in [(50u64, 51usize), (101, 0), (u64::MAX, 2)] {
                let err = file.fetch(offset, len, &at()).expect_err("past the end");
                assert!(
                    matches!(err, crate::Error::Corruption { .. }),
                    "{offset}+{len}: {err}"
                );
            }
        }
    }
}
