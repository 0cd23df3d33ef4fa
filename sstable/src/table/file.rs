//! Where an open table's bytes come from.
//!
//! By default a table is read with positional reads (`pread`), as RocksDB reads by default: a
//! block read from the file lands in a buffer of its own, which the block cache may keep, and
//! nothing else of the file stays in the process. A mapped table reads a little faster on a
//! miss, but every page a read or a compaction touches then counts in the process's resident
//! set until the table closes. A table may also be held whole in memory (a mapping, or bytes
//! built by a test); then reads slice it.
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
    /// The bytes are a buffer of their own, not a slice of a mapping.
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
