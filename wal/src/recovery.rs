//! Recovery modes and the damage a reader reports.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

use crate::Error;

/// How a [`LogReader`](crate::LogReader) treats damaged bytes, after `RocksDB`'s `WALRecoveryMode`.
///
/// *Damage* is anything that is not a well-formed record sequence: a header or payload cut off by
/// the end of the file, a bad checksum, length or type, a zero-filled header followed by non-zero
/// bytes, or a fragment out of sequence. Zero bytes from a header position to the end of the file
/// are preallocated space, not damage, in every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RecoveryMode {
    /// Damage in the log's unsynced tail is what a crash or power loss leaves, and reading stops
    /// quietly before it (see [`LogReader::stopped_at`](crate::LogReader::stopped_at)): a torn
    /// last record, or a hole of zeros where pages written back out of order did not persist,
    /// with later records after it. Damage in bytes a sync covered — a sync mark after it says
    /// the log was synced past it — is corruption and an error. The default.
    #[default]
    TolerateCorruptedTail,
    /// Any damage is an error, a torn tail included. For logs that were synced after every
    /// record, or that must be intact (a MANIFEST being verified).
    AbsoluteConsistency,
    /// Reading stops without error at the first damage of any kind, whatever follows it; the
    /// engine recovers to that point in time and ignores later logs.
    PointInTime,
    /// Damaged regions are skipped and reading goes on with the next valid record; each region is
    /// recorded (see [`LogReader::skipped`](crate::LogReader::skipped)) and logged. Records may be
    /// lost from the middle of the log.
    SkipCorrupted,
}

/// A damaged region of a log: where the damage is, which bytes the reader dropped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Damage {
    /// The log file.
    pub file: PathBuf,
    /// The offset of the damage: the bad header, or the start of a record that was never
    /// finished.
    pub offset: u64,
    /// The bytes the reader dropped. It starts at the record in progress when the damage cut it
    /// short, and for a reader that stopped there it runs to the end of the file.
    pub dropped: Range<u64>,
    /// What is wrong.
    pub kind: DamageKind,
}

impl Damage {
    /// The number of bytes dropped.
    pub fn dropped_bytes(&self) -> u64 {
        self.dropped.end.saturating_sub(self.dropped.start)
    }

    pub(crate) fn to_error(&self, detail: &str) -> Error {
        Error::Corruption {
            file: self.file.clone(),
            offset: self.offset,
            reason: format!("{}{detail}", self.kind),
        }
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at offset {}: {} ({} bytes dropped)",
            self.file.display(),
            self.offset,
            self.kind,
            self.dropped_bytes()
        )
    }
}

/// The kind of damage found in a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DamageKind {
    /// The file ends inside a header.
    TruncatedHeader,
    /// The file ends inside the payload of a fragment of `len` bytes.
    TruncatedPayload {
        /// The payload length the header claims.
        len: u16,
    },
    /// The header's length runs past the end of its block.
    BadLength {
        /// The payload length the header claims.
        len: u16,
    },
    /// The header's type byte is not a known fragment type.
    BadType {
        /// The type byte found.
        type_byte: u8,
    },
    /// The CRC32 in the header does not match the type byte and payload.
    ChecksumMismatch {
        /// The checksum in the header.
        stored: u32,
        /// The checksum of the bytes found.
        computed: u32,
    },
    /// An all-zero header (preallocated or zero-filled space) with non-zero bytes after it.
    ZeroedHeader,
    /// A middle or last fragment without the first fragment of its record.
    MissingFirstFragment,
    /// A fragmented record interrupted by the start of another record.
    UnfinishedRecord,
    /// The file ends (or only zeros follow) inside a fragmented record.
    UnfinishedRecordAtEnd,
}

impl fmt::Display for DamageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TruncatedHeader => write!(f, "header cut off by the end of the file"),
            Self::TruncatedPayload { len } => {
                write!(f, "payload of {len} bytes cut off by the end of the file")
            }
            Self::BadLength { len } => write!(f, "length {len} runs past the end of its block"),
            Self::BadType { type_byte } => write!(f, "unknown record type {type_byte}"),
            Self::ChecksumMismatch { stored, computed } => write!(
                f,
                "checksum mismatch: header says {stored:#010x}, bytes give {computed:#010x}"
            ),
            Self::ZeroedHeader => write!(f, "zero-filled header followed by non-zero bytes"),
            Self::MissingFirstFragment => write!(f, "fragment without the start of its record"),
            Self::UnfinishedRecord => {
                write!(f, "fragmented record interrupted by the start of another")
            }
            Self::UnfinishedRecordAtEnd => {
                write!(f, "the log ends inside a fragmented record")
            }
        }
    }
}
