//! Block handles and the fixed-size footer at the end of every table.

use crate::coding::{get_u32, get_u64};
use crate::error::{Origin, Result};

/// `"cairnsst"` little-endian: the last eight bytes of every table.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"cairnsst");

/// The format version this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Four handles of 16 bytes, version, CRC, magic.
pub(crate) const FOOTER_LEN: usize = 4 * 16 + 4 + 4 + 8;

/// Where a block lies: its offset and the length of its contents (without the 5-byte trailer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BlockHandle {
    pub(crate) offset: u64,
    pub(crate) size: u64,
}

impl BlockHandle {
    pub(crate) fn encode_varint(&self, out: &mut Vec<u8>) {
        crate::coding::put_varint(out, self.offset);
        crate::coding::put_varint(out, self.size);
    }

    pub(crate) fn decode_varint(input: &[u8]) -> Option<Self> {
        let mut cursor = crate::coding::Cursor::new(input);
        let handle = Self {
            offset: cursor.varint()?,
            size: cursor.varint()?,
        };
        cursor.is_empty().then_some(handle)
    }

    fn encode_fixed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
    }

    fn decode_fixed(input: &[u8], pos: usize) -> Option<Self> {
        Some(Self {
            offset: get_u64(input, pos)?,
            size: get_u64(input, pos + 8)?,
        })
    }
}

/// The table's entry points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Footer {
    pub(crate) index: BlockHandle,
    pub(crate) filter: BlockHandle,
    pub(crate) range_tombstones: BlockHandle,
    pub(crate) properties: BlockHandle,
}

impl Footer {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FOOTER_LEN);
        for handle in [
            &self.index,
            &self.filter,
            &self.range_tombstones,
            &self.properties,
        ] {
            handle.encode_fixed(&mut out);
        }
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out
    }

    /// Decodes the footer of a table of `file_len` bytes from its last [`FOOTER_LEN`] bytes,
    /// `footer` (fewer if the file is shorter).
    pub(crate) fn decode(footer: &[u8], file_len: u64, origin: &Origin) -> Result<Self> {
        if footer.len() < FOOTER_LEN {
            return Err(origin.corruption(0, format!("{file_len} bytes is too short for a table")));
        }
        let start = file_len.saturating_sub(FOOTER_LEN as u64);
        let at = |delta: usize, why: &str| {
            Origin::new(origin.file.clone(), start).corruption(delta, why)
        };
        if get_u64(footer, FOOTER_LEN - 8) != Some(MAGIC) {
            return Err(at(FOOTER_LEN - 8, "bad magic: not a Cairn table"));
        }
        let body = footer.get(..FOOTER_LEN - 12).unwrap_or_default();
        if get_u32(footer, FOOTER_LEN - 12) != Some(crc32fast::hash(body)) {
            return Err(at(0, "footer checksum mismatch"));
        }
        let version = get_u32(footer, 64).unwrap_or(0);
        if version != FORMAT_VERSION {
            return Err(at(64, &format!("unsupported format version {version}")));
        }
        let handle = |i: usize| {
            BlockHandle::decode_fixed(footer, i * 16).ok_or_else(|| at(i * 16, "bad handle"))
        };
        Ok(Self {
            index: handle(0)?,
            filter: handle(1)?,
            range_tombstones: handle(2)?,
            properties: handle(3)?,
        })
    }
}
