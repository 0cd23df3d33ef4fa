//! The on-disk form of a block: contents, a compression type byte, and a CRC32.
//!
//! ```text
//! contents  type: u8 (0 raw, 1 zstd, 2 lz4, 3 zstd with the table's dictionary)
//!           crc32(contents ++ type): u32 LE
//! zstd contents = uncompressed_len: varint  zstd frame
//! lz4 contents  = uncompressed_len: varint  lz4 block
//! ```
//!
//! A table whose data blocks use a dictionary stores it raw, as a block of its own that the
//! properties point to; it is digested once when the table opens ([`Dictionary`]).
//!
//! Each block records its own codec, so a table may mix them (a block that does not compress
//! is stored raw) and tables written before a codec existed stay readable.

use std::cell::RefCell;

use bytes::Bytes;

use super::file::{Fetched, Readahead, TableFile};
use super::footer::BlockHandle;
use super::{Compression, MAX_DICTIONARY_BYTES};
use crate::coding::{Cursor, get_u32, put_varint};
use crate::error::{Origin, Result};

/// Type byte plus CRC.
pub(crate) const BLOCK_TRAILER_LEN: usize = 5;
const RAW: u8 = 0;
const ZSTD: u8 = 1;
const LZ4: u8 = 2;
const ZSTD_DICT: u8 = 3;
/// The most an LZ4 block expands: each length byte of a match adds at most 255 bytes.
const LZ4_MAX_EXPANSION: usize = 255;
/// The most a properties block may decompress to: the properties are read first, before the
/// table's recorded block bound is known. (Two keys of at most 64 KiB and a few dozen numbers.)
pub(crate) const MAX_PROPERTIES_LEN: BlockBound = BlockBound::at_most(1 << 20);

/// What a table's blocks may decompress to: a damaged or crafted length never buys a larger
/// allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockBound {
    max_len: usize,
    /// The table records its bound. LZ4 and dictionaries came after tables did, so a table
    /// without one cannot hold such a block; refusing them keeps the loose fixed bound from
    /// sizing their buffers.
    recorded: bool,
}

impl BlockBound {
    /// The fixed bound of tables written before the bound was recorded.
    pub(crate) const UNRECORDED: Self = Self {
        max_len: 1 << 31,
        recorded: false,
    };

    /// False if a data block stored in `size` bytes cannot belong to a table with this bound:
    /// a block is stored compressed only when that saves an eighth, so no data block is stored
    /// in more bytes than it holds. Checked before a read allocates for the block.
    pub(crate) fn admits_stored(self, size: u64) -> bool {
        !self.recorded || size <= self.max_len as u64
    }

    /// No block decompresses to more than `max_len` bytes.
    pub(crate) const fn at_most(max_len: usize) -> Self {
        Self {
            max_len,
            recorded: true,
        }
    }
}

/// How a block read hands back raw (uncompressed) contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Raw {
    /// A slice of the file's bytes: for blocks that live and die with the open table.
    Borrowed,
    /// A copy: for blocks that may outlive the table (cached, or sliced into values handed to
    /// callers), so that nothing keeps a deleted table's mapping, and so its file, alive.
    Copied,
}

/// Compresses blocks with one codec (and, for zstd, one reusable context), and data blocks with
/// a dictionary once one is set.
pub(crate) struct BlockEncoder {
    codec: Codec,
    /// zstd loaded with the table's dictionary, for data blocks.
    dictionary: Option<Box<zstd::bulk::Compressor<'static>>>,
    scratch: Vec<u8>,
}

enum Codec {
    None,
    Lz4,
    Zstd(Box<zstd::bulk::Compressor<'static>>),
}

impl std::fmt::Debug for BlockEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockEncoder").finish_non_exhaustive()
    }
}

impl BlockEncoder {
    pub(crate) fn new(compression: Compression) -> std::io::Result<Self> {
        let codec = match compression {
            Compression::None => Codec::None,
            Compression::Lz4 => Codec::Lz4,
            Compression::Zstd(level) => Codec::Zstd(Box::new(zstd::bulk::Compressor::new(level)?)),
        };
        Ok(Self {
            codec,
            dictionary: None,
            scratch: Vec::new(),
        })
    }

    /// Compresses the data blocks encoded from now on with zstd at `level` and `dictionary`.
    pub(crate) fn set_dictionary(&mut self, level: i32, dictionary: &[u8]) -> std::io::Result<()> {
        let compressor = zstd::bulk::Compressor::with_dictionary(level, dictionary)?;
        self.dictionary = Some(Box::new(compressor));
        Ok(())
    }

    /// Appends the on-disk form of `raw` to `out`, compressed when that pays; returns the
    /// handle's size (contents only).
    pub(crate) fn encode(&mut self, raw: &[u8], out: &mut Vec<u8>) -> u64 {
        match self.compress(raw) {
            Some(kind) => append_block(&self.scratch, kind, out),
            None => append_block(raw, RAW, out),
        }
    }

    /// [`encode`](Self::encode) for a data block: with the dictionary, once one is set.
    /// Blocks over the direct-decompression limit (a huge value) go without it.
    pub(crate) fn encode_data(&mut self, raw: &[u8], out: &mut Vec<u8>) -> u64 {
        let compressor = match self.dictionary.as_mut() {
            Some(compressor) if raw.len() <= DIRECT_DECOMPRESS_LIMIT => compressor,
            _ => return self.encode(raw, out),
        };
        let bound = zstd::zstd_safe::compress_bound(raw.len());
        self.scratch.clear();
        put_varint(&mut self.scratch, raw.len() as u64);
        let header = self.scratch.len();
        self.scratch.resize(header + bound, 0);
        let written = self
            .scratch
            .get_mut(header..)
            .and_then(|dst| compressor.compress_to_buffer(raw, dst).ok());
        match written {
            Some(n) if header + n <= raw.len() - raw.len() / 8 => {
                self.scratch.truncate(header + n);
                append_block(&self.scratch, ZSTD_DICT, out)
            }
            _ => append_block(raw, RAW, out),
        }
    }

    /// Appends `raw` uncompressed, for blocks that do not compress (filters).
    pub(crate) fn encode_raw(raw: &[u8], out: &mut Vec<u8>) -> u64 {
        append_block(raw, RAW, out)
    }

    /// Compresses `raw` into `scratch` and returns the block type; `None` when there is no
    /// codec or it saves less than an eighth.
    fn compress(&mut self, raw: &[u8]) -> Option<u8> {
        let (kind, bound) = match &self.codec {
            Codec::None => return None,
            Codec::Lz4 => (LZ4, lz4_flex::block::get_maximum_output_size(raw.len())),
            Codec::Zstd(_) => (ZSTD, zstd::zstd_safe::compress_bound(raw.len())),
        };
        self.scratch.clear();
        put_varint(&mut self.scratch, raw.len() as u64);
        let header = self.scratch.len();
        self.scratch.resize(header + bound, 0);
        let dst = self.scratch.get_mut(header..)?;
        let written = match &mut self.codec {
            Codec::None => return None,
            Codec::Lz4 => lz4_flex::block::compress_into(raw, dst).ok()?,
            Codec::Zstd(compressor) => compressor.compress_to_buffer(raw, dst).ok()?,
        };
        self.scratch.truncate(header + written);
        (self.scratch.len() <= raw.len() - raw.len() / 8).then_some(kind)
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
    static DICT_DECOMPRESSOR: RefCell<Option<zstd::zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
}

/// A table's zstd dictionary, digested once when the table opens and shared by its reads.
pub(crate) struct Dictionary(zstd::zstd_safe::DDict<'static>);

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary").finish_non_exhaustive()
    }
}

impl Dictionary {
    /// Reads and digests the dictionary block at `handle` of `file`: a raw block of at most
    /// [`MAX_DICTIONARY_BYTES`] that zstd accepts, else `Corruption`.
    pub(crate) fn read(file: &TableFile, handle: BlockHandle, origin: &Origin) -> Result<Self> {
        let at = Origin::new(origin.file.clone(), handle.offset);
        if handle.size == 0 || handle.size > MAX_DICTIONARY_BYTES as u64 {
            return Err(at.corruption(
                0,
                format!(
                    "zstd dictionary of {} bytes is outside 1..={MAX_DICTIONARY_BYTES}",
                    handle.size
                ),
            ));
        }
        // The type byte is checked before the block is decoded, so a block claiming a codec is
        // refused without being inflated (its checksum is verified by `decode_block` below).
        let fetched = fetch_with_trailer(file, handle, &at)?;
        let kind = usize::try_from(handle.size)
            .ok()
            .and_then(|end| fetched.bytes.get(end));
        if kind != Some(&RAW) {
            return Err(at.corruption(0, "zstd dictionary block is not stored raw"));
        }
        let bytes = decode_block(
            &fetched.bytes,
            &at,
            BlockBound::UNRECORDED,
            Raw::Borrowed,
            None,
        )?;
        Self::digest(&bytes, &at)
    }

    /// Digests dictionary `bytes` read at `at`; `Corruption` if zstd refuses them (a dictionary
    /// header with damaged entropy tables).
    pub(crate) fn digest(bytes: &[u8], at: &Origin) -> Result<Self> {
        zstd::zstd_safe::DDict::try_create(bytes)
            .map(Self)
            .ok_or_else(|| at.corruption(0, "zstd refuses the table's dictionary"))
    }
}

/// Reads, verifies and decompresses the block at `handle` of `file`. A compressed block may not
/// claim more than `bound` allows uncompressed (the bound the table records).
pub(crate) fn read_block(
    file: &TableFile,
    handle: BlockHandle,
    origin: &Origin,
    bound: BlockBound,
    raw: Raw,
) -> Result<Bytes> {
    read_block_ahead(file, handle, origin, bound, raw, None, None)
}

/// [`read_block`] for a block of a table that may have a dictionary, read by an iterator
/// through its read-ahead if it has one (with the offset where the table's data blocks end,
/// which a window does not pass).
pub(crate) fn read_block_ahead(
    file: &TableFile,
    handle: BlockHandle,
    origin: &Origin,
    bound: BlockBound,
    raw: Raw,
    dictionary: Option<&Dictionary>,
    ahead: Option<(&mut Readahead, u64)>,
) -> Result<Bytes> {
    let at = Origin::new(origin.file.clone(), handle.offset);
    let len = stored_len(handle).ok_or_else(|| at.corruption(0, "block handle out of range"))?;
    let fetched = match ahead {
        Some((ahead, data_end)) => file.fetch_ahead(handle.offset, len, &at, ahead, data_end)?,
        None => file.fetch(handle.offset, len, &at)?,
    };
    // A block read into a buffer of its own is already a copy.
    let raw = if fetched.private { Raw::Borrowed } else { raw };
    decode_block(&fetched.bytes, &at, bound, raw, dictionary)
}

/// The bytes a block takes in the file: its contents, type byte and checksum.
pub(crate) fn stored_len(handle: BlockHandle) -> Option<usize> {
    usize::try_from(handle.size)
        .ok()
        .and_then(|size| size.checked_add(BLOCK_TRAILER_LEN))
}

/// The block at `handle` with its type byte and checksum.
fn fetch_with_trailer(file: &TableFile, handle: BlockHandle, at: &Origin) -> Result<Fetched> {
    let len = stored_len(handle).ok_or_else(|| at.corruption(0, "block handle out of range"))?;
    file.fetch(handle.offset, len, at)
}

/// Verifies `block` (contents, type byte, checksum) read at `at` and decodes its contents.
fn decode_block(
    block: &Bytes,
    at: &Origin,
    bound: BlockBound,
    raw: Raw,
    dictionary: Option<&Dictionary>,
) -> Result<Bytes> {
    let end = block.len().saturating_sub(BLOCK_TRAILER_LEN);
    let size = end;
    let checked = block.get(..=end).unwrap_or_default();
    let stored_crc = get_u32(block, end + 1);
    if stored_crc != Some(crc32fast::hash(checked)) {
        return Err(at.corruption(0, "block checksum mismatch"));
    }
    let contents = block.get(..end).unwrap_or_default();
    match block.get(end) {
        Some(&RAW) if raw == Raw::Copied => Ok(Bytes::copy_from_slice(contents)),
        Some(&RAW) => Ok(block.slice(..end)),
        Some(&ZSTD) => decompress(contents, at, bound.max_len),
        Some(&LZ4) if !bound.recorded => Err(at.corruption(
            size,
            "lz4 block in a table that records no block bound (older than lz4)",
        )),
        Some(&LZ4) => decompress_lz4(contents, at, bound.max_len),
        Some(&ZSTD_DICT) if !bound.recorded => Err(at.corruption(
            size,
            "dictionary block in a table that records no block bound",
        )),
        Some(&ZSTD_DICT) => match dictionary {
            Some(dictionary) => decompress_with(contents, at, bound.max_len, Some(dictionary)),
            None => Err(at.corruption(
                size,
                "block compressed with a dictionary the table does not record",
            )),
        },
        other => Err(at.corruption(size, format!("unknown block type {other:?}"))),
    }
}

/// The uncompressed length a compressed block records, checked against the table's bound, and
/// the compressed bytes after it.
fn compressed_parts<'a>(
    contents: &'a [u8],
    at: &Origin,
    max_len: usize,
) -> Result<(usize, &'a [u8])> {
    let mut cursor = Cursor::new(contents);
    let len = cursor
        .varint_usize()
        .ok_or_else(|| at.corruption(0, "bad uncompressed length"))?;
    if len > max_len {
        return Err(at.corruption(
            0,
            format!("block claims {len} bytes uncompressed, over the table's bound of {max_len}"),
        ));
    }
    Ok((len, contents.get(cursor.pos()..).unwrap_or_default()))
}

/// LZ4 writes into a buffer of exactly the recorded length: a damaged block fails to decode
/// or decodes short, never writes past it.
fn decompress_lz4(contents: &[u8], at: &Origin, max_len: usize) -> Result<Bytes> {
    let (len, block) = compressed_parts(contents, at, max_len)?;
    // LZ4 expands at most 255:1 (a match adds at most 255 bytes per length byte): a length
    // the compressed bytes cannot produce is damage, refused before it is allocated.
    if len > block.len().saturating_mul(LZ4_MAX_EXPANSION) {
        return Err(at.corruption(
            0,
            format!(
                "lz4 block of {} bytes claims {len} bytes uncompressed",
                block.len()
            ),
        ));
    }
    let mut out = vec![0; len];
    match lz4_flex::block::decompress_into(block, &mut out) {
        Ok(n) if n == len => Ok(Bytes::from(out)),
        Ok(n) => Err(at.corruption(0, format!("decompressed {n} bytes, expected {len}"))),
        Err(e) => Err(at.corruption(0, format!("lz4: {e}"))),
    }
}

fn decompress(contents: &[u8], at: &Origin, max_len: usize) -> Result<Bytes> {
    decompress_with(contents, at, max_len, None)
}

fn decompress_with(
    contents: &[u8],
    at: &Origin,
    max_len: usize,
    dictionary: Option<&Dictionary>,
) -> Result<Bytes> {
    let (len, frame) = compressed_parts(contents, at, max_len)?;
    let header = contents.len() - frame.len();
    // The writer always records the content size in the frame; a disagreement is damage, and
    // checking it first keeps a crafted length from buying a large allocation.
    match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(size)) if size == len as u64 => {}
        _ => {
            return Err(at.corruption(header, "zstd frame size disagrees with the block length"));
        }
    }
    let out = match dictionary {
        // The writer uses its dictionary only for blocks up to the direct limit.
        Some(_) if len > DIRECT_DECOMPRESS_LIMIT => {
            return Err(at.corruption(
                header,
                format!("dictionary block claims {len} bytes, over {DIRECT_DECOMPRESS_LIMIT}"),
            ));
        }
        Some(d) => decompress_direct_with(frame, len, d),
        None if len <= DIRECT_DECOMPRESS_LIMIT => decompress_direct(frame, len),
        None => decompress_streaming(frame, len),
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

fn decompress_direct_with(
    frame: &[u8],
    len: usize,
    dictionary: &Dictionary,
) -> std::io::Result<Vec<u8>> {
    DICT_DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let dctx = slot.get_or_insert_with(zstd::zstd_safe::DCtx::create);
        let mut out = Vec::with_capacity(len);
        dctx.decompress_using_ddict(&mut out, frame, &dictionary.0)
            .map_err(|code| std::io::Error::other(zstd::zstd_safe::get_error_name(code)))?;
        Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// [`super::read_block`] over bytes held whole, as a mapped table is.
    fn read_block(
        file: &Bytes,
        handle: BlockHandle,
        origin: &Origin,
        bound: BlockBound,
        raw: Raw,
    ) -> Result<Bytes> {
        read_block_in(file, handle, origin, bound, raw, None)
    }

    /// [`read_block_ahead`] over bytes held whole, without read-ahead.
    fn read_block_in(
        file: &Bytes,
        handle: BlockHandle,
        origin: &Origin,
        bound: BlockBound,
        raw: Raw,
        dictionary: Option<&Dictionary>,
    ) -> Result<Bytes> {
        let file = TableFile::Whole(file.clone());
        read_block_ahead(&file, handle, origin, bound, raw, dictionary, None)
    }

    fn encoded(raw: &[u8]) -> (Bytes, BlockHandle) {
        encoded_with(raw, Compression::Zstd(3))
    }

    fn encoded_with(raw: &[u8], compression: Compression) -> (Bytes, BlockHandle) {
        let mut encoder = BlockEncoder::new(compression).expect("codec");
        let mut out = Vec::new();
        let size = encoder.encode(raw, &mut out);
        (Bytes::from(out), BlockHandle { offset: 0, size })
    }

    #[test]
    fn a_block_claiming_more_than_the_recorded_bound_is_corruption() {
        // A megabyte of zeros compresses to a few dozen bytes: a small block can ask for a lot.
        let (file, handle) = encoded(&vec![0u8; 1 << 20]);
        assert!(file.len() < 1000, "compressed: {} bytes", file.len());
        let origin = Origin::new(std::sync::Arc::from(std::path::Path::new("t.sst")), 0);
        let within = read_block(
            &file,
            handle,
            &origin,
            BlockBound::at_most(1 << 20),
            Raw::Copied,
        );
        assert_eq!(within.map(|b| b.len()).ok(), Some(1 << 20));
        let over = read_block(
            &file,
            handle,
            &origin,
            BlockBound::at_most(4096),
            Raw::Copied,
        );
        assert!(
            matches!(&over, Err(crate::Error::Corruption { .. })),
            "{over:?}"
        );
    }

    #[test]
    fn copied_raw_blocks_do_not_share_the_file_bytes() {
        let mut out = Vec::new();
        let size = BlockEncoder::encode_raw(b"raw contents", &mut out);
        let file = Bytes::from(out);
        let handle = BlockHandle { offset: 0, size };
        let origin = Origin::default();
        let copied =
            read_block(&file, handle, &origin, BlockBound::at_most(64), Raw::Copied).expect("read");
        let borrowed = read_block(
            &file,
            handle,
            &origin,
            BlockBound::at_most(64),
            Raw::Borrowed,
        )
        .expect("read");
        assert_eq!(copied, borrowed);
        let within = |b: &Bytes| file.as_ptr_range().contains(&b.as_ptr());
        assert!(within(&borrowed) && !within(&copied));
    }

    #[test]
    fn a_raw_block_from_a_read_ahead_window_is_copied_out_of_it() {
        let mut out = Vec::new();
        let handles: Vec<BlockHandle> = (0..8u8)
            .map(|i| {
                let offset = out.len() as u64;
                let size = BlockEncoder::encode_raw(&[i; 1000], &mut out);
                BlockHandle { offset, size }
            })
            .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.sst");
        std::fs::write(&path, &out).expect("write");
        let fs = cairn_fs::RealFs::new();
        let file = TableFile::Reader(cairn_fs::FileSystem::open_read(&fs, &path).expect("open"));
        let mut ahead = Readahead::default();
        let origin = Origin::default();
        for (i, &handle) in handles.iter().enumerate() {
            ahead.note(handle.offset, stored_len(handle).expect("len"));
            for raw in [Raw::Copied, Raw::Borrowed] {
                let bound = BlockBound::at_most(1000);
                let block = read_block_ahead(
                    &file,
                    handle,
                    &origin,
                    bound,
                    raw,
                    None,
                    Some((&mut ahead, u64::MAX)),
                )
                .expect("read");
                assert_eq!(block.as_ref(), &[u8::try_from(i).expect("small"); 1000][..]);
                // A cached block must not keep the whole window alive.
                if raw == Raw::Copied {
                    assert!(!ahead.holds(&block), "block {i} points into the window");
                }
            }
        }
        assert!(ahead.held() > 0, "the walk read ahead");
    }

    /// A block a codec shrinks: repeated text with some variety.
    fn compressible() -> Vec<u8> {
        (0..4096u32)
            .flat_map(|i| format!("key{:05} value-{}", i % 700, i % 13).into_bytes())
            .take(16 << 10)
            .collect()
    }

    #[test]
    fn every_codec_round_trips_and_records_its_type() {
        let raw = compressible();
        let origin = Origin::default();
        for (compression, kind) in [
            (Compression::None, RAW),
            (Compression::Lz4, LZ4),
            (Compression::Zstd(3), ZSTD),
        ] {
            let (file, handle) = encoded_with(&raw, compression);
            let type_at = usize::try_from(handle.size).expect("size");
            assert_eq!(file.get(type_at), Some(&kind), "{compression:?}");
            let back = read_block(
                &file,
                handle,
                &origin,
                BlockBound::at_most(raw.len()),
                Raw::Copied,
            )
            .expect("read");
            assert_eq!(back.as_ref(), raw.as_slice(), "{compression:?}");
        }
    }

    #[test]
    fn a_damaged_lz4_block_under_a_good_checksum_is_corruption_or_right_length() {
        let raw = compressible();
        let (file, handle) = encoded_with(&raw, Compression::Lz4);
        let size = usize::try_from(handle.size).expect("size");
        let origin = Origin::default();
        for at in 0..size {
            let mut bad = file.to_vec();
            if let Some(b) = bad.get_mut(at) {
                *b ^= 0x5a;
            }
            let crc = crc32fast::hash(bad.get(..=size).unwrap_or_default());
            if let Some(slot) = bad.get_mut(size + 1..size + 5) {
                slot.copy_from_slice(&crc.to_le_bytes());
            }
            match read_block(
                &Bytes::from(bad),
                handle,
                &origin,
                BlockBound::at_most(raw.len()),
                Raw::Copied,
            ) {
                // A flipped literal decodes to other bytes of the same length; the block
                // decoder above checks what they mean.
                Ok(block) => assert_eq!(block.len(), raw.len(), "byte {at}"),
                Err(crate::Error::Corruption { .. }) => {}
                Err(other) => panic!("byte {at}: {other}"),
            }
        }
    }

    /// `contents` stored as one block of type `kind`, with a good checksum.
    fn stored(contents: &[u8], kind: u8) -> (Bytes, BlockHandle) {
        let mut out = Vec::new();
        let size = append_block(contents, kind, &mut out);
        (Bytes::from(out), BlockHandle { offset: 0, size })
    }

    #[test]
    fn an_lz4_block_claiming_more_than_it_can_expand_to_is_refused_before_allocating() {
        let mut contents = Vec::new();
        put_varint(&mut contents, 1 << 62);
        contents.extend_from_slice(&[0x10, b'a', 0, 0, 0]);
        let (file, handle) = stored(&contents, LZ4);
        // Even against a table whose recorded bound allows anything.
        let read = read_block(
            &file,
            handle,
            &Origin::default(),
            BlockBound::at_most(usize::MAX),
            Raw::Copied,
        );
        assert!(
            matches!(&read, Err(crate::Error::Corruption { reason, .. }) if reason.contains("claims")),
            "{read:?}"
        );
    }

    #[test]
    fn a_dictionary_block_reads_back_only_with_its_dictionary() {
        let samples: Vec<Vec<u8>> = (0..200)
            .map(|i| {
                format!("{{\"id\":{i},\"status\":\"active\",\"plan\":\"pro\"}}")
                    .repeat(8)
                    .into_bytes()
            })
            .collect();
        let dictionary = zstd::dict::from_samples(&samples, 1024).expect("train");
        let mut encoder = BlockEncoder::new(Compression::Zstd(3)).expect("codec");
        encoder.set_dictionary(3, &dictionary).expect("dictionary");
        let raw = samples.first().cloned().unwrap_or_default();
        let mut out = Vec::new();
        let size = encoder.encode_data(&raw, &mut out);
        assert_eq!(
            out.get(usize::try_from(size).unwrap_or(0)),
            Some(&ZSTD_DICT)
        );
        let file = Bytes::from(out);
        let handle = BlockHandle { offset: 0, size };
        let origin = Origin::new(std::sync::Arc::from(std::path::Path::new("t.sst")), 0);
        let bound = BlockBound::at_most(raw.len());
        let at = Origin::new(origin.file.clone(), 0);
        let digested = Dictionary::digest(&dictionary, &at).expect("digest");
        let read = read_block_in(&file, handle, &origin, bound, Raw::Copied, Some(&digested));
        assert_eq!(read.expect("read").as_ref(), raw.as_slice());
        let without = read_block(&file, handle, &origin, bound, Raw::Copied);
        assert!(
            matches!(&without, Err(crate::Error::Corruption { reason, .. }) if reason.contains("dictionary")),
            "{without:?}"
        );
        let other = zstd::dict::from_samples(
            &samples
                .iter()
                .map(|s| s.repeat(2))
                .rev()
                .collect::<Vec<_>>(),
            1024,
        )
        .expect("train");
        let wrong = Dictionary::digest(&other, &at).expect("digest");
        let read = read_block_in(&file, handle, &origin, bound, Raw::Copied, Some(&wrong));
        assert!(
            read.as_ref().map_or(true, |b| b.as_ref() != raw.as_slice()),
            "a wrong dictionary gave the block back"
        );
    }

    #[test]
    fn an_lz4_block_in_a_table_without_a_recorded_bound_is_refused() {
        let raw = compressible();
        let (file, handle) = encoded_with(&raw, Compression::Lz4);
        let read = read_block(
            &file,
            handle,
            &Origin::default(),
            BlockBound::UNRECORDED,
            Raw::Copied,
        );
        assert!(
            matches!(&read, Err(crate::Error::Corruption { reason, .. }) if reason.contains("no block bound")),
            "{read:?}"
        );
        // A zstd block there is still read: such tables were written with zstd.
        let (file, handle) = encoded_with(&raw, Compression::Zstd(3));
        let read = read_block(
            &file,
            handle,
            &Origin::default(),
            BlockBound::UNRECORDED,
            Raw::Copied,
        );
        assert_eq!(read.expect("zstd").as_ref(), raw.as_slice());
    }

    #[test]
    fn a_cut_lz4_block_is_corruption_not_a_short_block() {
        let raw = compressible();
        let (file, handle) = encoded_with(&raw, Compression::Lz4);
        let size = usize::try_from(handle.size).expect("size");
        let contents = file.get(..size).expect("contents");
        for cut in 1..size.min(64) {
            let (bad, handle) = stored(contents.get(..size - cut).expect("cut"), LZ4);
            let read = read_block(
                &bad,
                handle,
                &Origin::default(),
                BlockBound::at_most(raw.len()),
                Raw::Copied,
            );
            assert!(
                matches!(&read, Err(crate::Error::Corruption { .. })),
                "cut by {cut}: {:?}",
                read.map(|b| b.len())
            );
        }
    }
}
