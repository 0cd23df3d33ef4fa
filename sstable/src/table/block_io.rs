//! The on-disk form of a block: contents, a compression type byte, and a CRC32.
//!
//! ```text
//! contents  type: u8 (0 raw, 1 zstd)  crc32(contents ++ type): u32 LE
//! zstd contents = uncompressed_len: varint  zstd frame
//! ```

use std::cell::RefCell;

use bytes::Bytes;

use super::footer::BlockHandle;
use crate::coding::{Cursor, get_u32, put_varint};
use crate::error::{Origin, Result};

/// Type byte plus CRC.
pub(crate) const BLOCK_TRAILER_LEN: usize = 5;
const RAW: u8 = 0;
const ZSTD: u8 = 1;
/// No block decompresses to more than this; a larger claim is corruption.
const MAX_BLOCK_LEN: usize = 1 << 31;

/// Compresses blocks with one reusable zstd context.
pub(crate) struct BlockEncoder {
    compressor: Option<zstd::bulk::Compressor<'static>>,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for BlockEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockEncoder").finish_non_exhaustive()
    }
}

impl BlockEncoder {
    pub(crate) fn new(level: Option<i32>) -> std::io::Result<Self> {
        let compressor = level.map(zstd::bulk::Compressor::new).transpose()?;
        Ok(Self {
            compressor,
            scratch: Vec::new(),
        })
    }

    /// Appends the on-disk form of `raw` to `out`, compressed when that pays; returns the
    /// handle's size (contents only).
    pub(crate) fn encode(&mut self, raw: &[u8], out: &mut Vec<u8>) -> u64 {
        if self.compress(raw) {
            append_block(&self.scratch, ZSTD, out)
        } else {
            append_block(raw, RAW, out)
        }
    }

    /// Appends `raw` uncompressed, for blocks that do not compress (filters).
    pub(crate) fn encode_raw(raw: &[u8], out: &mut Vec<u8>) -> u64 {
        append_block(raw, RAW, out)
    }

    /// Compresses `raw` into `scratch`; false when it saves less than an eighth.
    fn compress(&mut self, raw: &[u8]) -> bool {
        let Some(compressor) = self.compressor.as_mut() else {
            return false;
        };
        self.scratch.clear();
        put_varint(&mut self.scratch, raw.len() as u64);
        let header = self.scratch.len();
        self.scratch
            .resize(header + zstd::zstd_safe::compress_bound(raw.len()), 0);
        let Some(dst) = self.scratch.get_mut(header..) else {
            return false;
        };
        match compressor.compress_to_buffer(raw, dst) {
            Ok(n) => {
                self.scratch.truncate(header + n);
                self.scratch.len() <= raw.len() - raw.len() / 8
            }
            Err(_) => false,
        }
    }
}

fn append_block(contents: &[u8], kind: u8, out: &mut Vec<u8>) -> u64 {
    let start = out.len();
    out.extend_from_slice(contents);
    out.push(kind);
    let crc = crc32fast::hash(out.get(start..).unwrap_or_default());
    out.extend_from_slice(&crc.to_le_bytes());
    contents.len() as u64
}

thread_local! {
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Reads, verifies and decompresses the block at `handle` of `file`.
pub(crate) fn read_block(file: &Bytes, handle: BlockHandle, origin: &Origin) -> Result<Bytes> {
    let at = Origin::new(origin.file.clone(), handle.offset);
    let (Ok(start), Ok(size)) = (usize::try_from(handle.offset), usize::try_from(handle.size))
    else {
        return Err(at.corruption(0, "block handle out of range"));
    };
    let end = start
        .checked_add(size)
        .filter(|end| end.saturating_add(BLOCK_TRAILER_LEN) <= file.len())
        .ok_or_else(|| {
            at.corruption(
                0,
                format!("block of {size} bytes runs past the end of the file"),
            )
        })?;
    let checked = file.get(start..=end).unwrap_or_default();
    let stored_crc = get_u32(file, end + 1);
    if stored_crc != Some(crc32fast::hash(checked)) {
        return Err(at.corruption(0, "block checksum mismatch"));
    }
    match file.get(end) {
        Some(&RAW) => Ok(file.slice(start..end)),
        Some(&ZSTD) => decompress(file.get(start..end).unwrap_or_default(), &at),
        other => Err(at.corruption(size, format!("unknown block type {other:?}"))),
    }
}

fn decompress(contents: &[u8], at: &Origin) -> Result<Bytes> {
    let mut cursor = Cursor::new(contents);
    let len = cursor
        .varint_usize()
        .filter(|&len| len <= MAX_BLOCK_LEN)
        .ok_or_else(|| at.corruption(0, "bad uncompressed length"))?;
    let frame = contents.get(cursor.pos()..).unwrap_or_default();
    // The writer always records the content size in the frame; a disagreement is damage, and
    // checking it first keeps a crafted length from buying a large allocation.
    match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(size)) if size == len as u64 => {}
        _ => {
            return Err(at.corruption(
                cursor.pos(),
                "zstd frame size disagrees with the block length",
            ));
        }
    }
    let out = if len <= DIRECT_DECOMPRESS_LIMIT {
        decompress_direct(frame, len)
    } else {
        decompress_streaming(frame, len)
    };
    match out {
        Ok(out) if out.len() == len => Ok(Bytes::from(out)),
        Ok(out) => Err(at.corruption(
            0,
            format!("decompressed {} bytes, expected {len}", out.len()),
        )),
        Err(e) => Err(at.corruption(0, format!("zstd: {e}"))),
    }
}

/// Blocks up to this size decompress into a buffer allocated up front; larger ones (blocks
/// holding a huge value) grow their buffer only as output actually arrives.
const DIRECT_DECOMPRESS_LIMIT: usize = 1 << 20;

fn decompress_direct(frame: &[u8], len: usize) -> std::io::Result<Vec<u8>> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new()?);
        }
        match slot.as_mut() {
            Some(d) => d.decompress(frame, len),
            None => Err(std::io::Error::other("no decompressor")),
        }
    })
}

fn decompress_streaming(frame: &[u8], len: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::with_capacity(DIRECT_DECOMPRESS_LIMIT);
    zstd::stream::Decoder::new(frame)?
        .take(len as u64 + 1)
        .read_to_end(&mut out)?;
    Ok(out)
}

/// Decodes a varint block handle stored as an index value.
pub(crate) fn decode_handle(value: &[u8]) -> Option<BlockHandle> {
    BlockHandle::decode_varint(value)
}
