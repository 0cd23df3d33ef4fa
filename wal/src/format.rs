//! The log's on-disk framing, shared by the writer and the reader (see `FORMAT.md`).

/// The size of a log block. A physical record never straddles a block boundary, so a reader that
/// meets damage can resynchronise at the next block start, which is always a header.
pub const BLOCK_SIZE: usize = 32 * 1024;

/// The size of a physical record's header: CRC32 (4 bytes), length (2), type (1).
pub const HEADER_SIZE: usize = 7;

/// The largest logical record [`LogWriter::add_record`](crate::LogWriter::add_record) accepts
/// (1 GiB). A limit well above any write batch, so a caller's bug fails loudly instead of filling
/// the disk.
pub const MAX_RECORD_LEN: usize = 1 << 30;

/// The payload length of a sync mark: the synced length, a `u64` little-endian.
pub(crate) const SYNC_MARK_LEN: usize = 8;

/// The type byte of a physical record: which part of a logical record its payload holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FragmentType {
    /// The whole logical record.
    Full = 1,
    /// The first fragment of a record that spans blocks.
    First = 2,
    /// A fragment strictly inside a record.
    Middle = 3,
    /// The last fragment of a record.
    Last = 4,
    /// Not part of any record: the log's length at the writer's last successful sync, so a
    /// reader can tell damage in bytes a sync covered from damage in the unsynced tail.
    SyncMark = 5,
    /// Not part of any record, and empty: the writer closed the log here, and no record follows
    /// (a sync mark may, when the closed log is sealed later). Claims nothing about syncs; it
    /// lets a reader tell a log that was closed whole from one whose tail a power loss dropped.
    EndMark = 6,
    /// Not part of any record, and empty: the first fragment of a log whose writer ends it with
    /// an end mark, so a log that has this and no end mark lost its tail. (A log without it is
    /// from a writer that sealed a log instead of ending it.)
    BeginMark = 7,
    /// Not part of any record, and empty: every log before this one was sealed before the mark
    /// was written, so damage or a missing end there is corruption, not a power loss's tear.
    SealedMark = 8,
}

impl FragmentType {
    /// The type for a type byte; `None` for 0 (padding) and unknown values.
    pub(crate) fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::Full),
            2 => Some(Self::First),
            3 => Some(Self::Middle),
            4 => Some(Self::Last),
            5 => Some(Self::SyncMark),
            6 => Some(Self::EndMark),
            7 => Some(Self::BeginMark),
            8 => Some(Self::SealedMark),
            _ => None,
        }
    }

    /// The type of the fragment that starts at the record's beginning (`is_first`) and may or may
    /// not end it (`is_last`).
    pub(crate) fn for_position(is_first: bool, is_last: bool) -> Self {
        match (is_first, is_last) {
            (true, true) => Self::Full,
            (true, false) => Self::First,
            (false, false) => Self::Middle,
            (false, true) => Self::Last,
        }
    }
}

/// A decoded header, not yet checked against its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) crc: u32,
    pub(crate) len: u16,
    pub(crate) type_byte: u8,
}

impl Header {
    /// Decodes the first [`HEADER_SIZE`] bytes of `bytes`; `None` if there are fewer.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let crc = bytes.get(0..4)?;
        let len = bytes.get(4..6)?;
        let type_byte = *bytes.get(6)?;
        Some(Self {
            crc: u32::from_le_bytes(crc.try_into().ok()?),
            len: u16::from_le_bytes(len.try_into().ok()?),
            type_byte,
        })
    }

    /// The header of a fragment with this type and payload.
    pub(crate) fn for_fragment(fragment_type: FragmentType, payload: &[u8]) -> Option<Self> {
        let type_byte = fragment_type as u8;
        Some(Self {
            crc: checksum(type_byte, payload),
            len: u16::try_from(payload.len()).ok()?,
            type_byte,
        })
    }

    /// The header's bytes.
    pub(crate) fn encode(self) -> [u8; HEADER_SIZE] {
        let [c0, c1, c2, c3] = self.crc.to_le_bytes();
        let [l0, l1] = self.len.to_le_bytes();
        [c0, c1, c2, c3, l0, l1, self.type_byte]
    }

    /// True for the all-zero header of preallocated or zero-filled space.
    pub(crate) fn is_zero(self) -> bool {
        self.crc == 0 && self.len == 0 && self.type_byte == 0
    }
}

/// The checksum of a fragment: CRC32 over the type byte followed by the payload, so a damaged
/// type byte is caught as well as a damaged payload.
pub(crate) fn checksum(type_byte: u8, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&[type_byte]);
    hasher.update(payload);
    hasher.finalize()
}

/// The offset of the block that holds `offset`.
pub(crate) fn block_start(offset: u64) -> u64 {
    offset - offset % BLOCK_SIZE_U64
}

/// The position of `offset` inside its block. (Clippy sees that the remainder fits a `usize`.)
pub(crate) fn offset_in_block(offset: u64) -> usize {
    (offset % BLOCK_SIZE_U64) as usize
}

/// [`BLOCK_SIZE`] as a file offset.
pub(crate) const BLOCK_SIZE_U64: u64 = BLOCK_SIZE as u64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_encodes_fields_little_endian() {
        let header = Header {
            crc: 0x0403_0201,
            len: 0x0605,
            type_byte: 7,
        };
        assert_eq!(header.encode(), [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(Header::decode(&header.encode()), Some(header));
    }

    #[test]
    fn short_header_does_not_decode() {
        assert_eq!(Header::decode(&[0; HEADER_SIZE - 1]), None);
    }

    #[test]
    fn checksum_covers_type_byte() {
        assert_ne!(checksum(1, b"abc"), checksum(2, b"abc"));
        let header = Header::for_fragment(FragmentType::Full, b"abc");
        assert_eq!(header.map(|h| h.crc), Some(checksum(1, b"abc")));
    }

    #[test]
    fn zero_header_is_padding() {
        assert!(Header::decode(&[0; HEADER_SIZE]).is_some_and(Header::is_zero));
        assert!(!Header::decode(&[0, 0, 0, 0, 0, 0, 1]).is_some_and(Header::is_zero));
    }

    #[test]
    fn oversized_fragment_has_no_header() {
        assert_eq!(
            Header::for_fragment(FragmentType::Full, &vec![0; 1 << 16]),
            None
        );
    }
}
