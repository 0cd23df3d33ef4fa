//! `LogWriter`: frames logical records into blocks and appends them to a file.

use std::path::Path;

use cairn_fs::WritableFile;

use crate::format::{
    BLOCK_SIZE, FragmentType, HEADER_SIZE, Header, MAX_RECORD_LEN, SYNC_MARK_LEN, offset_in_block,
};
use crate::{Error, Result};

/// A buffer that grew past this for one huge record is dropped afterwards, so a single large
/// write batch does not pin its memory for the life of the log.
const KEEP_BUFFER_CAPACITY: usize = 1 << 20;

/// Appends logical records to a log file in `LevelDB`'s block framing.
///
/// Each [`add_record`](Self::add_record) frames the whole record (fragments, headers and any
/// block-trailer padding) in memory and hands it to the file in **one** `append`, so once it returns
/// the bytes are in the operating system and a process crash loses nothing. Only
/// [`sync`](Self::sync) makes them survive power loss. After a successful sync, the next record
/// is preceded by a *sync mark* recording how far the log was synced, which lets a reader tell
/// damage in synced bytes (corruption) from a hole in the unsynced tail (what power loss leaves).
///
/// # Examples
///
/// ```
/// use cairn_fs::{FileSystem, RealFs};
/// use cairn_wal::LogWriter;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let fs = RealFs::new();
/// let mut log = LogWriter::new(fs.create(&dir.path().join("000001.log"))?);
/// assert_eq!(log.add_record(b"first")?, 0);
/// assert_eq!(log.add_record(b"second")?, 7 + 5);
/// log.sync()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct LogWriter {
    file: Box<dyn WritableFile>,
    /// Bytes in the log, counting every successful append.
    len: u64,
    /// Reused across records so framing does not allocate per write.
    buf: Vec<u8>,
    /// Set when an append or sync fails: the file may then end in a partial record at an
    /// unknown block position, or in bytes a failed sync dropped, and appending more would put
    /// valid records after garbage.
    failed: bool,
    /// The log's length at the last successful sync, not yet recorded in a sync mark.
    unmarked_sync: Option<u64>,
    /// [`end`](Self::end) closed the log: no record may follow.
    ended: bool,
}

impl LogWriter {
    /// A writer appending to `file`, which holds `file.len()` bytes of log already (zero for a
    /// new file).
    pub fn new(file: Box<dyn WritableFile>) -> Self {
        let len = file.len();
        Self::with_offset(file, len)
    }

    /// A writer continuing a log that already holds `len` bytes, appending to `file` at its end.
    ///
    /// `len` fixes the block position of the next record and the offsets
    /// [`add_record`](Self::add_record) returns, so it must be the file's real length.
    pub fn with_offset(file: Box<dyn WritableFile>, len: u64) -> Self {
        Self {
            file,
            len,
            buf: Vec::new(),
            failed: false,
            unmarked_sync: None,
            ended: false,
        }
    }

    /// Appends one logical record and returns the offset of its first header.
    ///
    /// # Errors
    /// `Error::InvalidArgument` if `payload` is longer than [`MAX_RECORD_LEN`];
    /// `Error::Io` if the append fails, after which every further call returns
    /// `Error::WriterFailed` (as after a failed [`sync`](Self::sync)).
    pub fn add_record(&mut self, payload: &[u8]) -> Result<u64> {
        self.refuse_if_failed()?;
        self.refuse_if_ended()?;
        if payload.len() > MAX_RECORD_LEN {
            return Err(Error::InvalidArgument {
                file: self.path().to_path_buf(),
                reason: format!(
                    "record of {} bytes is over the limit of {MAX_RECORD_LEN}",
                    payload.len()
                ),
            });
        }
        self.buf.clear();
        let marked = self.push_sync_mark(false);
        let start = self.frame(payload)?;
        if let Err(e) = self.file.append(&self.buf) {
            self.failed = true;
            return Err(e.into());
        }
        if marked {
            self.unmarked_sync = None;
        }
        self.len += self.buf.len() as u64;
        if self.buf.capacity() > KEEP_BUFFER_CAPACITY {
            self.buf = Vec::new();
        }
        Ok(start)
    }

    /// Frames `payload` into `self.buf` as it will lie after the current end of the log, and
    /// returns the offset of its first header.
    fn frame(&mut self, payload: &[u8]) -> Result<u64> {
        let mut rest = payload;
        let mut is_first = true;
        let mut start = self.len;
        loop {
            let end = self.len + self.buf.len() as u64;
            let mut left_in_block = BLOCK_SIZE - offset_in_block(end);
            if left_in_block < HEADER_SIZE {
                // Too small for a header: the trailer is zero-filled and readers skip it.
                self.buf.resize(self.buf.len() + left_in_block, 0);
                left_in_block = BLOCK_SIZE;
            }
            if is_first {
                start = self.len + self.buf.len() as u64;
            }
            let (fragment, tail) = rest.split_at(rest.len().min(left_in_block - HEADER_SIZE));
            let fragment_type = FragmentType::for_position(is_first, tail.is_empty());
            self.push_fragment(fragment_type, fragment)?;
            if tail.is_empty() {
                return Ok(start);
            }
            rest = tail;
            is_first = false;
        }
    }

    /// Frames the pending sync mark into `self.buf` (after any trailer padding); returns
    /// whether it did. Where the block has no room left for it, `fill` fills the block with a
    /// mark of a shorter payload, which claims nothing, and puts the mark in the next block;
    /// without `fill` the mark waits for the next record.
    fn push_sync_mark(&mut self, fill: bool) -> bool {
        let Some(synced) = self.unmarked_sync.filter(|&s| s > 0) else {
            return false;
        };
        let mut left_in_block = BLOCK_SIZE - offset_in_block(self.len);
        if left_in_block < HEADER_SIZE {
            self.buf.resize(left_in_block, 0);
            left_in_block = BLOCK_SIZE;
        }
        if left_in_block < HEADER_SIZE + SYNC_MARK_LEN {
            let filler = vec![0; left_in_block - HEADER_SIZE];
            if !fill || self.push_fragment(FragmentType::SyncMark, &filler).is_err() {
                return false;
            }
        }
        self.push_fragment(FragmentType::SyncMark, &synced.to_le_bytes())
            .is_ok()
    }

    fn push_fragment(&mut self, fragment_type: FragmentType, fragment: &[u8]) -> Result<()> {
        let header = Header::for_fragment(fragment_type, fragment).ok_or_else(|| {
            Error::InvalidArgument {
                file: self.path().to_path_buf(),
                reason: format!("fragment of {} bytes does not fit a block", fragment.len()),
            }
        })?;
        self.buf.extend_from_slice(&header.encode());
        self.buf.extend_from_slice(fragment);
        Ok(())
    }

    /// Makes every record added so far durable.
    ///
    /// # Errors
    /// `Error::Io` if the sync fails; whether the records are durable is then unknown (a kernel
    /// may have dropped them), and every further call returns `Error::WriterFailed`.
    pub fn sync(&mut self) -> Result<()> {
        self.refuse_if_failed()?;
        if let Err(e) = self.file.sync() {
            self.failed = true;
            return Err(e.into());
        }
        self.unmarked_sync = Some(self.len);
        Ok(())
    }

    /// Syncs, then records that sync in a sync mark and syncs again: for a log that will take
    /// no more records (one being replaced, or closed). A sync mark otherwise waits for the next
    /// record, so damage in a log's last synced records would read as its unsynced tail and be
    /// dropped quietly; in a sealed log all damage is corruption.
    ///
    /// # Errors
    /// As [`sync`](Self::sync), and `Error::Io` if the mark cannot be appended.
    pub fn seal(&mut self) -> Result<()> {
        self.sync()?;
        self.buf.clear();
        if !self.push_sync_mark(true) {
            return Ok(());
        }
        if let Err(e) = self.file.append(&self.buf) {
            self.failed = true;
            return Err(e.into());
        }
        self.len += self.buf.len() as u64;
        self.unmarked_sync = None;
        self.sync()
    }

    /// Starts a new, empty log with a begin mark: the log promises to close with an
    /// [`end`](Self::end) mark, so a reader that finds none knows its tail was lost (see
    /// [`LogReader::closed_whole`](crate::LogReader::closed_whole)).
    ///
    /// # Errors
    /// `Error::InvalidArgument` if the log holds bytes already; as [`end`](Self::end) otherwise.
    pub fn begin(&mut self) -> Result<()> {
        if self.len != 0 {
            return Err(Error::InvalidArgument {
                file: self.path().to_path_buf(),
                reason: "a begin mark must be the first thing in a log".to_string(),
            });
        }
        self.append_mark(FragmentType::BeginMark)
    }

    /// Closes the log without syncing it: appends the pending sync mark, if any, and an end
    /// mark, after which no record may be added (a [`seal`](Self::seal) may still follow). A
    /// reader of a log that [`begin`](Self::begin) started then knows the log was whole, and
    /// one that finds no end mark knows a power loss took its tail.
    ///
    /// # Errors
    /// `Error::WriterFailed` after an earlier failure; `Error::Io` if the append fails.
    pub fn end(&mut self) -> Result<()> {
        self.append_mark(FragmentType::EndMark)?;
        self.ended = true;
        Ok(())
    }

    /// Records that every log before this one has been sealed: a reader that finds this mark
    /// takes damage or a missing end in an earlier log for corruption, not for a power loss's
    /// tear (see [`LogReader::vouches_for_earlier_logs`](crate::LogReader::vouches_for_earlier_logs)).
    /// Unsynced, like a record: the sync that follows makes it durable with them.
    ///
    /// # Errors
    /// As [`end`](Self::end), and `Error::InvalidArgument` after it.
    pub fn mark_predecessors_sealed(&mut self) -> Result<()> {
        self.refuse_if_ended()?;
        self.append_mark(FragmentType::SealedMark)
    }

    /// Appends an empty mark of type `mark`, after the pending sync mark (if there is one) and
    /// any trailer padding, in one append.
    fn append_mark(&mut self, mark: FragmentType) -> Result<()> {
        self.refuse_if_failed()?;
        self.buf.clear();
        let marked = self.push_sync_mark(true);
        let left_in_block = BLOCK_SIZE - offset_in_block(self.len + self.buf.len() as u64);
        if left_in_block < HEADER_SIZE {
            self.buf.resize(self.buf.len() + left_in_block, 0);
        }
        self.push_fragment(mark, &[])?;
        if let Err(e) = self.file.append(&self.buf) {
            self.failed = true;
            return Err(e.into());
        }
        if marked {
            self.unmarked_sync = None;
        }
        self.len += self.buf.len() as u64;
        Ok(())
    }

    /// `WriterFailed` once an append or sync failed: the file may end in garbage.
    fn refuse_if_failed(&self) -> Result<()> {
        if self.failed {
            return Err(Error::WriterFailed {
                file: self.path().to_path_buf(),
            });
        }
        Ok(())
    }

    /// True once [`end`](Self::end) closed the log.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// `InvalidArgument` once [`end`](Self::end) closed the log.
    fn refuse_if_ended(&self) -> Result<()> {
        if self.ended {
            return Err(Error::InvalidArgument {
                file: self.path().to_path_buf(),
                reason: "the log was ended: it takes no more records".to_string(),
            });
        }
        Ok(())
    }

    /// The number of bytes in the log: the offset the next record's framing starts at.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True if the log holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The log file's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The underlying file, e.g. to close it explicitly.
    pub fn into_file(self) -> Box<dyn WritableFile> {
        self.file
    }
}
