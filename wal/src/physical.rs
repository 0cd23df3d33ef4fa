//! The physical layer of the reader: parses fragments (physical records) block by block and
//! classifies whatever is not a well-formed fragment.

use std::ops::Range;
use std::path::Path;

use cairn_fs::ReadableFile;

use crate::Result;
use crate::format::{
    BLOCK_SIZE, BLOCK_SIZE_U64, FragmentType, HEADER_SIZE, Header, SYNC_MARK_LEN, block_start,
    checksum, offset_in_block,
};
use crate::recovery::DamageKind;

/// What the next header position of the log holds.
#[derive(Debug)]
pub(crate) enum Physical {
    /// A fragment whose checksum matches. `payload` indexes [`PhysicalReader::payload`].
    Fragment {
        offset: u64,
        fragment_type: FragmentType,
        payload: Range<usize>,
        /// The offset just past the fragment.
        end: u64,
    },
    /// The log ends cleanly at `offset`: the file ends there, or holds only zeros from there on.
    End { offset: u64 },
    /// Damage at `offset`; the reader has moved on to `resume_at`.
    Bad {
        offset: u64,
        kind: DamageKind,
        resume_at: u64,
        /// Where the damaged fragment would end if its length is right: the likeliest place
        /// for the next record.
        claimed_end: Option<u64>,
    },
}

/// Reads a log one block at a time, so a log of any size needs one block of memory.
#[derive(Debug)]
pub(crate) struct PhysicalReader {
    file: Box<dyn ReadableFile>,
    /// Room for the block that holds `next`; the file has `block_len` bytes of it.
    block: Box<[u8]>,
    block_len: usize,
    /// The offset of `block`, or `None` before the first read (or after a failed one).
    block_offset: Option<u64>,
    /// The offset of the next header to parse.
    next: u64,
    /// Set once the log has ended cleanly, so a zero-filled tail is checked only once.
    ended: bool,
}

impl PhysicalReader {
    pub(crate) fn new(file: Box<dyn ReadableFile>) -> Self {
        Self {
            file,
            block: vec![0; BLOCK_SIZE].into_boxed_slice(),
            block_len: 0,
            block_offset: None,
            next: 0,
            ended: false,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        self.file.path()
    }

    /// The file's length when it was opened.
    pub(crate) fn file_len(&self) -> u64 {
        self.file.len()
    }

    /// The payload bytes of the fragment [`next_physical`](Self::next_physical) returned last.
    pub(crate) fn payload(&self, range: Range<usize>) -> &[u8] {
        self.block_bytes().get(range).unwrap_or_default()
    }

    /// The bytes of the current block that the file has.
    fn block_bytes(&self) -> &[u8] {
        self.block.get(..self.block_len).unwrap_or_default()
    }

    /// Parses what lies at the next header position and moves past it.
    ///
    /// # Errors
    /// `Error::Io` if a read fails.
    pub(crate) fn next_physical(&mut self) -> Result<Physical> {
        if self.ended {
            return Ok(Physical::End { offset: self.next });
        }
        let physical = self.parse_next()?;
        self.ended = matches!(physical, Physical::End { .. });
        Ok(physical)
    }

    fn parse_next(&mut self) -> Result<Physical> {
        let left_in_block = BLOCK_SIZE - offset_in_block(self.next);
        if left_in_block < HEADER_SIZE {
            // The writer zero-fills a block's last few bytes; nothing there to parse.
            self.next += left_in_block as u64;
        }
        self.load_block()?;
        let at = offset_in_block(self.next);
        let rest = self.block_bytes().get(at..).unwrap_or_default();
        if rest.is_empty() {
            return Ok(Physical::End { offset: self.next });
        }
        let Some(header) = Header::decode(rest) else {
            let kind = DamageKind::TruncatedHeader;
            let end_of_file = self.next + rest.len() as u64;
            return Ok(if is_zero(rest) {
                Physical::End { offset: self.next }
            } else {
                self.bad(kind, end_of_file, None)
            });
        };
        self.parse(at, header)
    }

    /// Checks the fragment whose `header` starts at `at` in the current block.
    fn parse(&mut self, at: usize, header: Header) -> Result<Physical> {
        let next_block = block_start(self.next) + BLOCK_SIZE_U64;
        if header.is_zero() {
            return Ok(if self.is_zero_from(self.next)? {
                Physical::End { offset: self.next }
            } else {
                self.bad(DamageKind::ZeroedHeader, next_block, None)
            });
        }
        let payload = at + HEADER_SIZE..at + HEADER_SIZE + usize::from(header.len);
        let claimed_end = self.next + (HEADER_SIZE + usize::from(header.len)) as u64;
        let claimed_end = (payload.end <= BLOCK_SIZE).then_some(claimed_end);
        let Some(fragment_type) = FragmentType::from_byte(header.type_byte) else {
            let type_byte = header.type_byte;
            let kind = DamageKind::BadType { type_byte };
            return Ok(self.bad(kind, next_block, claimed_end));
        };
        if payload.end > BLOCK_SIZE {
            let kind = DamageKind::BadLength { len: header.len };
            return Ok(self.bad(kind, next_block, None));
        }
        let Some(bytes) = self.block_bytes().get(payload.clone()) else {
            let end_of_file = block_start(self.next) + self.block_len as u64;
            let kind = DamageKind::TruncatedPayload { len: header.len };
            return Ok(self.bad(kind, end_of_file, None));
        };
        let computed = checksum(header.type_byte, bytes);
        if computed != header.crc {
            // The length may be what is damaged, so nothing after it in this block can be trusted
            // to be a header: a payload can hold bytes that look like a valid record.
            let kind = DamageKind::ChecksumMismatch {
                stored: header.crc,
                computed,
            };
            return Ok(self.bad(kind, next_block, claimed_end));
        }
        let offset = self.next;
        self.next += (HEADER_SIZE + usize::from(header.len)) as u64;
        Ok(Physical::Fragment {
            offset,
            fragment_type,
            payload,
            end: self.next,
        })
    }

    /// Damage at `next`; reading resumes at `resume_at`, or at the end of the file if that
    /// comes first.
    fn bad(&mut self, kind: DamageKind, resume_at: u64, claimed_end: Option<u64>) -> Physical {
        let offset = self.next;
        let end_of_block = block_start(self.next) + self.block_len as u64;
        let resume_at = resume_at.min(end_of_block);
        self.next = resume_at;
        Physical::Bad {
            offset,
            kind,
            resume_at,
            claimed_end,
        }
    }

    /// Makes `block` the block that holds `next`.
    fn load_block(&mut self) -> Result<()> {
        let wanted = block_start(self.next);
        if self.block_offset == Some(wanted) {
            return Ok(());
        }
        self.block_offset = None;
        self.block_len = read_full(self.file.as_ref(), wanted, &mut self.block)?;
        self.block_offset = Some(wanted);
        Ok(())
    }

    /// True if every byte from `offset` to the end of the file is zero.
    fn is_zero_from(&self, offset: u64) -> Result<bool> {
        let mut chunk = vec![0; BLOCK_SIZE];
        let mut pos = offset;
        loop {
            let n = read_full(self.file.as_ref(), pos, &mut chunk)?;
            let bytes = chunk.get(..n).unwrap_or_default();
            if !is_zero(bytes) {
                return Ok(false);
            }
            if n < chunk.len() {
                return Ok(true);
            }
            pos += n as u64;
        }
    }

    /// True if a fragment with a matching checksum starts at any byte offset from `offset` on.
    ///
    /// This decides torn tail versus mid-log corruption, so it looks at every offset, not only
    /// where the damaged lengths would lead: a damaged length says nothing about where the next
    /// record is. It only classifies; records are never read from positions found this way.
    ///
    /// `likely` is checked first, as the full scan costs a checksum per plausible header.
    pub(crate) fn valid_fragment_from(&self, offset: u64, likely: Option<u64>) -> Result<bool> {
        let mut block = vec![0; BLOCK_SIZE];
        if let Some(likely) = likely.filter(|&at| at >= offset) {
            // A record ending 1..=6 bytes before a block end is followed by a trailer.
            let likely = if BLOCK_SIZE - offset_in_block(likely) < HEADER_SIZE {
                block_start(likely) + BLOCK_SIZE_U64
            } else {
                likely
            };
            let n = read_full(self.file.as_ref(), block_start(likely), &mut block)?;
            let bytes = block.get(..n).unwrap_or_default();
            if valid_fragment_at(bytes, offset_in_block(likely)).is_some() {
                return Ok(true);
            }
        }
        let mut found = false;
        self.scan_fragments_from(offset, &mut block, |_, _| {
            found = true;
            false
        })?;
        Ok(found)
    }

    /// A synced length past `offset` that a sync mark from `offset` on claims, if one does: the
    /// writer had synced the log that far when it wrote the mark, so the bytes at `offset` were
    /// durable. Like [`valid_fragment_from`](Self::valid_fragment_from) it looks at every byte
    /// offset; it stops at the first such mark.
    pub(crate) fn synced_past(&self, offset: u64) -> Result<Option<u64>> {
        let mut block = vec![0; BLOCK_SIZE];
        let mut claim = None;
        self.scan_fragments_from(offset, &mut block, |fragment_type, payload| {
            if fragment_type == FragmentType::SyncMark
                && let Ok(bytes) = <[u8; SYNC_MARK_LEN]>::try_from(payload)
                && u64::from_le_bytes(bytes) > offset
            {
                claim = Some(u64::from_le_bytes(bytes));
                return false;
            }
            true
        })?;
        Ok(claim)
    }

    /// Calls `visit` with the type and payload of every fragment that starts at any byte offset
    /// from `offset` on and that the writer could have written, until it returns false.
    fn scan_fragments_from(
        &self,
        offset: u64,
        block: &mut [u8],
        mut visit: impl FnMut(FragmentType, &[u8]) -> bool,
    ) -> Result<()> {
        let mut start = block_start(offset);
        let mut at = offset_in_block(offset);
        loop {
            let n = read_full(self.file.as_ref(), start, block)?;
            let bytes = block.get(..n).unwrap_or_default();
            // The type byte first: it rules out most offsets before any checksum is computed. A
            // plain loop, as this runs over whole blocks.
            let mut pos = at;
            while let Some(&type_byte) = bytes.get(pos + HEADER_SIZE - 1) {
                if FragmentType::from_byte(type_byte).is_some()
                    && let Some((fragment_type, payload)) = valid_fragment_at(bytes, pos)
                    && !visit(fragment_type, payload)
                {
                    return Ok(());
                }
                pos += 1;
            }
            if n < BLOCK_SIZE {
                return Ok(());
            }
            start += BLOCK_SIZE_U64;
            at = 0;
        }
    }
}

/// The type and payload of a fragment the writer could have written that starts at `pos` of
/// `block`: a known type, a matching checksum, and, for a first or middle fragment, an end at the
/// block end (the writer splits a record only where a block is full).
fn valid_fragment_at(block: &[u8], pos: usize) -> Option<(FragmentType, &[u8])> {
    // Type and length first: they reject most offsets without decoding or checksumming.
    let (Some(&len_low), Some(&len_high), Some(&type_byte)) =
        (block.get(pos + 4), block.get(pos + 5), block.get(pos + 6))
    else {
        return None;
    };
    let len = usize::from(u16::from_le_bytes([len_low, len_high]));
    let end = pos + HEADER_SIZE + len;
    let fragment_type = FragmentType::from_byte(type_byte)?;
    let placed = match fragment_type {
        // (A sync mark of another length than 8 fills a block's end; it claims nothing.)
        FragmentType::Full
        | FragmentType::Last
        | FragmentType::SyncMark
        | FragmentType::EndMark
        | FragmentType::BeginMark
        | FragmentType::SealedMark => end <= BLOCK_SIZE,
        FragmentType::First | FragmentType::Middle => end == BLOCK_SIZE,
    };
    if !placed {
        return None;
    }
    let header = block.get(pos..).and_then(Header::decode)?;
    let payload = block.get(pos + HEADER_SIZE..end)?;
    (checksum(type_byte, payload) == header.crc).then_some((fragment_type, payload))
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

/// Reads into `buf` from `offset` until it is full or the file ends; returns the bytes read.
fn read_full(file: &dyn ReadableFile, offset: u64, buf: &mut [u8]) -> Result<usize> {
    let mut filled = 0;
    while let Some(rest) = buf.get_mut(filled..) {
        if rest.is_empty() {
            break;
        }
        let n = file.read_at(offset + filled as u64, rest)?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}
