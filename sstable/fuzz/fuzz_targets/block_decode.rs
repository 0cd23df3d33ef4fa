//! Fuzzes the block decoder (and zstd and LZ4 block decompression) behind a valid checksum.
//!
//! Blocks are crate-private, so the input reaches them through a table. For each input this
//! writes a one-entry table whose only data block is exactly as long as the input's contents,
//! overwrites that block with them, and recomputes its CRC32 (over contents ++ type byte, stored
//! little-endian after the type byte, as `table/block_io.rs` lays it out). The index, filter and
//! footer stay valid, so every read of the table reaches the decoder with fuzz bytes.
//!
//! Input: one flag byte (its low two bits: 1 the block claims to be zstd-compressed, so the
//! contents are `uncompressed_len: varint ++ zstd frame`; 2 LZ4, `uncompressed_len: varint ++
//! lz4 block`; else raw) and then the block contents. Contents shorter
//! than the smallest block the writer can produce are zero-padded; longer than `MAX_CONTENTS`
//! are cut.
//!
//! An LZ4 block's claimed uncompressed length is allocated before it decodes, but only up to
//! 255 times the compressed bytes (LZ4's largest expansion); a zstd block's must match its
//! frame's recorded size first.

#![no_main]

mod table_reads;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use cairn_fs::WritableFile;
use cairn_sstable::{EntryMeta, Kind, Table, TableOptions, TableWriter, internal_key};
use libfuzzer_sys::fuzz_target;

/// Longest block contents tried.
const MAX_CONTENTS: usize = 1 << 16;
/// Block type bytes (`table/block_io.rs`).
const RAW: u8 = 0;
const ZSTD: u8 = 1;
const LZ4: u8 = 2;
/// Type byte and CRC after every block's contents.
const BLOCK_TRAILER_LEN: usize = 5;
/// Four 16-byte handles (index, filter, range tombstones, properties), version, CRC, magic.
const FOOTER_LEN: usize = 80;
/// Where the filter handle's offset sits in the footer. The filter is written right after the
/// last data block, so its offset is where the data blocks end.
const FILTER_OFFSET_IN_FOOTER: usize = 16;
/// The user key is this byte repeated, so seeks to most keys land in the one data block.
const KEY_BYTE: u8 = 0xff;
/// User key lengths tried, shortest first: one more byte fills the length the value's varint
/// skips (a 127-byte and a 128-byte value differ by two bytes on disk).
const KEY_LENS: std::ops::RangeInclusive<usize> = 16..=18;

fuzz_target!(|data: &[u8]| {
    let (kind, contents) = match data.split_first() {
        Some((flag, rest)) if flag & 3 == 1 => (ZSTD, rest),
        Some((flag, rest)) if flag & 3 == 2 => (LZ4, rest),
        Some((_, rest)) => (RAW, rest),
        None => (RAW, data),
    };
    let mut contents = contents.get(..MAX_CONTENTS).unwrap_or(contents).to_vec();
    let (key_len, value_len) = entry_shape(contents.len());
    contents.resize(block_len(key_len, value_len), 0);

    let user_key = vec![KEY_BYTE; key_len];
    let mut file = write_table(&user_key, value_len);
    assert_eq!(
        data_end(&file),
        Some(contents.len() + BLOCK_TRAILER_LEN),
        "the data block is not where the harness computed it"
    );
    let Some(block) = file.get_mut(..contents.len() + BLOCK_TRAILER_LEN) else {
        return;
    };
    let (body, crc) = block.split_at_mut(contents.len() + 1);
    let (stored, type_byte) = body.split_at_mut(contents.len());
    stored.copy_from_slice(&contents);
    type_byte.copy_from_slice(&[kind]);
    crc.copy_from_slice(&crc32fast::hash(body).to_le_bytes());

    let file = Bytes::from(file);
    if let Ok(table) = Table::from_bytes(file, Path::new("fuzz.sst"), 1, None) {
        let mut probes = user_key;
        probes.extend_from_slice(data);
        table_reads::read_everything(&table, &probes);
    }
});

/// The on-disk length of a data block holding one entry with a `key_len`-byte user key and a
/// `value_len`-byte value, uncompressed: three varints (shared, unshared, value length), the
/// internal key, the entry metadata (one byte at write time 0) and the value, one restart
/// point and the restart count.
fn block_len(key_len: usize, value_len: usize) -> usize {
    1 + varint_len(key_len + 8) + varint_len(1 + value_len) + key_len + 8 + 1 + value_len + 4 + 4
}

/// The shortest user key and its value length whose block is `len` bytes, or the smallest
/// block there is when `len` is shorter than that.
fn entry_shape(len: usize) -> (usize, usize) {
    for key_len in KEY_LENS {
        for width in 1..=3 {
            let fixed = block_len(key_len, 0) - 1 + width;
            if let Some(value_len) = len.checked_sub(fixed)
                && varint_len(1 + value_len) == width
            {
                return (key_len, value_len);
            }
        }
    }
    (*KEY_LENS.start(), 0)
}

fn varint_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

/// A one-entry table, uncompressed, with the data block first.
fn write_table(user_key: &[u8], value_len: usize) -> Vec<u8> {
    let file = MemFile::default();
    let bytes = Arc::clone(&file.bytes);
    let options = TableOptions::default()
        .compression(cairn_sstable::Compression::None)
        .block_size(MAX_CONTENTS * 2);
    let mut writer = TableWriter::new(Box::new(file), options).expect("uncompressed writer");
    writer
        .add(
            &internal_key(user_key, 1, Kind::Put),
            EntryMeta::at(0),
            &vec![b'v'; value_len],
        )
        .expect("one well-formed entry");
    writer.finish().expect("an in-memory file cannot fail");
    std::mem::take(&mut *bytes.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Where the data blocks end: the filter block's offset, read from the footer.
fn data_end(file: &[u8]) -> Option<usize> {
    let at = file.len().checked_sub(FOOTER_LEN)? + FILTER_OFFSET_IN_FOOTER;
    let offset = u64::from_le_bytes(file.get(at..at + 8)?.try_into().ok()?);
    usize::try_from(offset).ok()
}

/// A writable file in memory, so building a table per input touches no disk.
#[derive(Debug)]
struct MemFile {
    path: PathBuf,
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl Default for MemFile {
    fn default() -> Self {
        Self {
            path: PathBuf::from("fuzz.sst"),
            bytes: Arc::default(),
        }
    }
}

impl WritableFile for MemFile {
    fn append(&mut self, data: &[u8]) -> cairn_fs::Result<()> {
        self.bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(data);
        Ok(())
    }

    fn sync(&mut self) -> cairn_fs::Result<()> {
        Ok(())
    }

    fn len(&self) -> u64 {
        let len = self
            .bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        u64::try_from(len).unwrap_or(u64::MAX)
    }

    fn path(&self) -> &Path {
        &self.path
    }
}
