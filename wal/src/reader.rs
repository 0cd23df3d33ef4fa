//! `LogReader`: reassembles logical records from fragments and applies the recovery mode to
//! damage.

use std::ops::Range;
use std::path::Path;

use cairn_fs::{FileSystem, ReadableFile};

use crate::Result;
use crate::format::FragmentType;
use crate::physical::{Physical, PhysicalReader};
use crate::recovery::{Damage, DamageKind, RecoveryMode};

/// Reads the logical records of a log in order, one block in memory at a time.
///
/// Each record comes with the offset of its first header, the value
/// [`LogWriter::add_record`](crate::LogWriter::add_record) returned for it. What happens at damaged
/// bytes depends on the [`RecoveryMode`]. After it returns an error or `None`, the reader yields
/// nothing more.
///
/// # Examples
///
/// ```
/// use cairn_fs::{FileSystem, RealFs};
/// use cairn_wal::{LogReader, LogWriter, RecoveryMode};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let fs = RealFs::new();
/// let path = dir.path().join("000001.log");
/// let mut log = LogWriter::new(fs.create(&path)?);
/// log.add_record(b"put a 1")?;
/// log.add_record(b"delete b")?;
///
/// let mut reader = LogReader::open(&fs, &path, RecoveryMode::AbsoluteConsistency)?;
/// assert_eq!(reader.next_record()?, Some((0, b"put a 1".to_vec())));
/// assert_eq!(reader.next_record()?, Some((14, b"delete b".to_vec())));
/// assert_eq!(reader.next_record()?, None);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct LogReader {
    physical: PhysicalReader,
    mode: RecoveryMode,
    /// The record being reassembled from fragments: its start offset and bytes so far.
    partial_start: Option<u64>,
    partial: Vec<u8>,
    skipped: Vec<Damage>,
    stopped_at: Option<Damage>,
    done: bool,
    marks: Marks,
}

/// What the well-formed fragments read so far say about how the log was closed.
#[derive(Debug, Default)]
struct Marks {
    /// The types of the first and the last fragment.
    first: Option<FragmentType>,
    last: Option<FragmentType>,
    /// An end mark came, and nothing but sync marks after it.
    ended: bool,
    /// A sealed mark came.
    sealed_before: bool,
}

impl Marks {
    fn note(&mut self, fragment_type: FragmentType) {
        self.first.get_or_insert(fragment_type);
        self.last = Some(fragment_type);
        match fragment_type {
            FragmentType::EndMark => self.ended = true,
            FragmentType::SyncMark => {}
            FragmentType::SealedMark => {
                self.sealed_before = true;
                self.ended = false;
            }
            _ => self.ended = false,
        }
    }
}

impl LogReader {
    /// A reader of the log in `file`, from its beginning.
    pub fn new(file: Box<dyn ReadableFile>, mode: RecoveryMode) -> Self {
        Self {
            physical: PhysicalReader::new(file),
            mode,
            partial_start: None,
            partial: Vec::new(),
            skipped: Vec::new(),
            stopped_at: None,
            done: false,
            marks: Marks::default(),
        }
    }

    /// Opens the log at `path` on `fs` for reading.
    ///
    /// # Errors
    /// `Error::Io` if the file cannot be opened.
    pub fn open(fs: &dyn FileSystem, path: &Path, mode: RecoveryMode) -> Result<Self> {
        Ok(Self::new(fs.open_read(path)?, mode))
    }

    /// The next logical record and the offset of its first header, or `None` at the end of the
    /// log (or where the recovery mode stopped reading).
    ///
    /// # Errors
    /// `Error::Corruption` naming the file and offset of the damage, when the recovery mode does
    /// not allow it (see [`RecoveryMode`]); `Error::Io` if a read fails.
    pub fn next_record(&mut self) -> Result<Option<(u64, Vec<u8>)>> {
        while !self.done {
            let record = self.physical.next_physical().and_then(|p| self.accept(p));
            match record {
                Ok(None) => {}
                Ok(Some(record)) => return Ok(Some(record)),
                Err(e) => {
                    self.done = true;
                    return Err(e);
                }
            }
        }
        Ok(None)
    }

    /// The damaged regions skipped so far, in file order. Only
    /// [`RecoveryMode::SkipCorrupted`] skips; in the other modes this is empty.
    pub fn skipped(&self) -> &[Damage] {
        &self.skipped
    }

    /// The damage at which reading stopped without an error: the first damage in
    /// [`RecoveryMode::PointInTime`], or the torn tail in
    /// [`RecoveryMode::TolerateCorruptedTail`]. `None` while reading goes on, and when the log
    /// ended cleanly.
    pub fn stopped_at(&self) -> Option<&Damage> {
        self.stopped_at.as_ref()
    }

    /// True once the reader has read to the log's end and found the log closed whole: every
    /// record it held was read.
    ///
    /// A log that starts with a begin mark ([`LogWriter::begin`](crate::LogWriter::begin)) is
    /// whole when an end mark ([`LogWriter::end`](crate::LogWriter::end)) was read with nothing
    /// but sync marks after it — or damage: a seal torn after the end mark (a full disk) loses
    /// no record. A log that [predates begin marks](Self::predates_begin_marks) is whole when
    /// it ends cleanly after a sync mark (its seal). False while reading goes on, and for a log
    /// that stops after a record or in one (one still open, or one that lost its unsynced
    /// tail).
    pub fn closed_whole(&self) -> bool {
        let marks = &self.marks;
        self.done
            && if marks.first == Some(FragmentType::BeginMark) {
                marks.ended
            } else {
                self.stopped_at.is_none() && marks.last == Some(FragmentType::SyncMark)
            }
    }

    /// True if the log's first fragment is part of a record: it was written before logs began
    /// with a begin mark, when the engine sealed every log it switched away from. False for a
    /// log whose start was lost (its first fragment is unknown).
    pub fn predates_begin_marks(&self) -> bool {
        matches!(
            self.marks.first,
            Some(FragmentType::Full | FragmentType::First)
        )
    }

    /// True if a sealed mark was read
    /// ([`LogWriter::mark_predecessors_sealed`](crate::LogWriter::mark_predecessors_sealed)):
    /// every log before this one was sealed, so one of them that is not whole is corrupt.
    pub fn vouches_for_earlier_logs(&self) -> bool {
        self.marks.sealed_before
    }

    /// The recovery mode this reader applies.
    pub fn mode(&self) -> RecoveryMode {
        self.mode
    }

    /// The log file's path.
    pub fn path(&self) -> &Path {
        self.physical.path()
    }

    fn accept(&mut self, physical: Physical) -> Result<Option<(u64, Vec<u8>)>> {
        match physical {
            Physical::Fragment {
                offset,
                fragment_type,
                payload,
                end,
            } => self.assemble(offset, fragment_type, payload, end),
            Physical::End { offset } => {
                match self.partial_start.take() {
                    None => self.done = true,
                    Some(start) => {
                        let kind = DamageKind::UnfinishedRecordAtEnd;
                        self.damage(start, start..offset, kind, After::search(offset))?;
                    }
                }
                Ok(None)
            }
            Physical::Bad {
                offset,
                kind,
                resume_at,
                claimed_end,
            } => {
                // A record in progress is lost with its damaged fragment.
                let start = self.partial_start.take().unwrap_or(offset);
                let after = After::Search {
                    from: offset + 1,
                    likely: claimed_end,
                };
                self.damage(offset, start..resume_at, kind, after)?;
                Ok(None)
            }
        }
    }

    /// Adds a well-formed fragment to the record being reassembled.
    fn assemble(
        &mut self,
        offset: u64,
        fragment_type: FragmentType,
        payload: Range<usize>,
        end: u64,
    ) -> Result<Option<(u64, Vec<u8>)>> {
        let starts_record = matches!(
            fragment_type,
            FragmentType::Full
                | FragmentType::First
                | FragmentType::SyncMark
                | FragmentType::EndMark
                | FragmentType::BeginMark
                | FragmentType::SealedMark
        );
        match (starts_record, self.partial_start) {
            (true, Some(start)) => {
                self.partial_start = None;
                let kind = DamageKind::UnfinishedRecord;
                self.damage(start, start..offset, kind, After::ValidFragment)?;
                if self.done {
                    return Ok(None);
                }
            }
            (false, None) => {
                let kind = DamageKind::MissingFirstFragment;
                self.damage(offset, offset..end, kind, After::search(end))?;
                return Ok(None);
            }
            _ => {}
        }
        let bytes = self.physical.payload(payload);
        self.marks.note(fragment_type);
        match fragment_type {
            // Marks are no records: the classification of damage reads sync marks, and
            // `closed_whole` and `vouches_for_earlier_logs` the others.
            FragmentType::SyncMark
            | FragmentType::EndMark
            | FragmentType::BeginMark
            | FragmentType::SealedMark => {}
            FragmentType::Full => return Ok(Some((offset, bytes.to_vec()))),
            FragmentType::First => {
                self.partial.clear();
                self.partial.extend_from_slice(bytes);
                self.partial_start = Some(offset);
            }
            FragmentType::Middle => self.partial.extend_from_slice(bytes),
            FragmentType::Last => {
                self.partial.extend_from_slice(bytes);
                let start = self.partial_start.take().unwrap_or(offset);
                return Ok(Some((start, std::mem::take(&mut self.partial))));
            }
        }
        Ok(None)
    }

    /// Applies the recovery mode to damage at `offset` that dropped the bytes `dropped`. `after`
    /// says what follows the damage, which decides torn tail or mid-log corruption.
    fn damage(
        &mut self,
        offset: u64,
        dropped: Range<u64>,
        kind: DamageKind,
        after: After,
    ) -> Result<()> {
        self.partial.clear();
        let damage = Damage {
            file: self.path().to_path_buf(),
            offset,
            dropped,
            kind,
        };
        match self.mode {
            RecoveryMode::SkipCorrupted => {
                tracing::warn!(%damage, "skipped damaged log region");
                self.skipped.push(damage);
                return Ok(());
            }
            RecoveryMode::AbsoluteConsistency => {
                self.done = true;
                return Err(damage.to_error(""));
            }
            RecoveryMode::TolerateCorruptedTail => {
                self.done = true;
                if self.valid_fragment_after(after)? {
                    // Damage before valid records is corruption only if a sync covered it; in
                    // the unsynced tail it is a hole that pages written back out of order left.
                    if let Some(claim) = self.physical.synced_past(offset)? {
                        return Err(damage.to_error(&format!(
                            ", and a later sync mark says the log was synced to offset {claim}"
                        )));
                    }
                    tracing::warn!(%damage, "log's unsynced tail holds a hole; dropping it and what follows");
                } else {
                    tracing::info!(%damage, "log ends in a torn tail");
                }
            }
            RecoveryMode::PointInTime => {
                self.done = true;
                tracing::warn!(%damage, "stopped reading log at damage");
            }
        }
        self.stop_at(damage);
        Ok(())
    }

    fn valid_fragment_after(&self, after: After) -> Result<bool> {
        match after {
            After::ValidFragment => Ok(true),
            After::Search { from, likely } => self.physical.valid_fragment_from(from, likely),
        }
    }

    /// Records where reading stopped. Everything after the damage is ignored, not only the
    /// damaged fragment, so the dropped range runs to the end of the file.
    fn stop_at(&mut self, mut damage: Damage) {
        damage.dropped.end = damage.dropped.end.max(self.physical.file_len());
        self.stopped_at = Some(damage);
    }
}

/// What follows some damage, for telling a torn tail from mid-log corruption.
#[derive(Debug, Clone, Copy)]
enum After {
    /// A well-formed fragment: the damage is mid-log.
    ValidFragment,
    /// Unknown until searched from `from`, looking first at `likely`, where the next record
    /// most likely starts.
    Search { from: u64, likely: Option<u64> },
}

impl After {
    fn search(from: u64) -> Self {
        Self::Search { from, likely: None }
    }
}

impl Iterator for LogReader {
    type Item = Result<(u64, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}
