//! Shared pieces of the log tests: in-memory files, deterministic payloads, and a reader that
//! collects everything a log yields.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use cairn_fs::{ReadableFile, WritableFile};
use cairn_wal::{BLOCK_SIZE, Damage, Error, HEADER_SIZE, LogReader, LogWriter, RecoveryMode};

/// The name every in-memory log goes by, so tests can check that errors name it.
pub const LOG_PATH: &str = "/mem/000042.log";

/// Every recovery mode, for tests that must hold in all of them.
pub const ALL_MODES: [RecoveryMode; 4] = [
    RecoveryMode::TolerateCorruptedTail,
    RecoveryMode::AbsoluteConsistency,
    RecoveryMode::PointInTime,
    RecoveryMode::SkipCorrupted,
];

/// A read-only file over bytes in memory.
#[derive(Debug)]
pub struct MemFile {
    path: PathBuf,
    bytes: Arc<[u8]>,
    len: usize,
}

impl MemFile {
    /// The first `len` bytes of `bytes` as a file (a log cut at `len`).
    pub fn prefix(bytes: Arc<[u8]>, len: usize) -> Self {
        Self {
            path: PathBuf::from(LOG_PATH),
            len: len.min(bytes.len()),
            bytes,
        }
    }
}

impl ReadableFile for MemFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> cairn_fs::Result<usize> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(self.len);
        let available = self.bytes.get(start..self.len).unwrap_or_default();
        let n = available.len().min(buf.len());
        if let (Some(dst), Some(src)) = (buf.get_mut(..n), available.get(..n)) {
            dst.copy_from_slice(src);
        }
        Ok(n)
    }

    fn len(&self) -> u64 {
        self.len as u64
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// An append-only file in memory whose bytes and append count stay readable through a clone of
/// its handle.
#[derive(Debug, Clone, Default)]
pub struct MemLog {
    state: Arc<Mutex<MemLogState>>,
}

#[derive(Debug, Default)]
struct MemLogState {
    bytes: Vec<u8>,
    appends: usize,
    fail_appends: bool,
    fail_syncs: bool,
}

impl MemLog {
    /// A copy of the bytes appended so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.lock().bytes.clone()
    }

    /// How many `append` calls the file has seen.
    pub fn appends(&self) -> usize {
        self.lock().appends
    }

    /// Makes every later append fail after writing half of its bytes, as a full disk might.
    pub fn fail_appends(&self) {
        self.lock().fail_appends = true;
    }

    /// Makes every later sync fail.
    pub fn fail_syncs(&self) {
        self.lock().fail_syncs = true;
    }

    /// A writable handle on this file, for a `LogWriter`.
    pub fn handle(&self) -> Box<dyn WritableFile> {
        Box::new(self.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemLogState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl WritableFile for MemLog {
    fn append(&mut self, data: &[u8]) -> cairn_fs::Result<()> {
        let mut state = self.lock();
        state.appends += 1;
        if state.fail_appends {
            let half = data.get(..data.len() / 2).unwrap_or_default();
            state.bytes.extend_from_slice(half);
            return Err(std::io::Error::other("injected append failure").into());
        }
        state.bytes.extend_from_slice(data);
        Ok(())
    }

    fn sync(&mut self) -> cairn_fs::Result<()> {
        if self.lock().fail_syncs {
            return Err(std::io::Error::other("injected sync failure").into());
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.lock().bytes.len() as u64
    }

    fn path(&self) -> &Path {
        Path::new(LOG_PATH)
    }
}

/// Deterministic, incompressible-looking bytes: record `seed`'s payload of `len` bytes.
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            // xorshift64: cheap, and every byte depends on the seed.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

/// The length of a record that, written at log offset `pos`, ends exactly `leave` bytes before
/// a block end (`leave` below `BLOCK_SIZE - HEADER_SIZE`).
pub fn len_leaving(pos: u64, leave: usize) -> usize {
    let block = BLOCK_SIZE as u64;
    let mut left = BLOCK_SIZE - usize::try_from(pos % block).unwrap_or(0);
    if left < HEADER_SIZE {
        left = BLOCK_SIZE; // the writer pads the trailer first
    }
    if left >= HEADER_SIZE + leave {
        left - HEADER_SIZE - leave
    } else {
        // Too little room: a first fragment here and a last one in the next block.
        left - HEADER_SIZE + BLOCK_SIZE - HEADER_SIZE - leave
    }
}

/// A log written in memory: its bytes, records, and where each record lies.
#[derive(Debug)]
pub struct TestLog {
    pub bytes: Arc<[u8]>,
    pub records: Vec<Vec<u8>>,
    /// Each record's bytes: from its first header to the end of its last payload.
    pub spans: Vec<Range<u64>>,
    /// The sync marks: the index of the record each precedes, and its bytes.
    pub marks: Vec<(usize, Range<u64>)>,
}

/// The bytes of a sync mark: a header and the synced length.
pub const SYNC_MARK_BYTES: u64 = HEADER_SIZE as u64 + 8;

/// Where a byte of a [`TestLog`] lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    /// In record `k`.
    Record(usize),
    /// In the sync mark just before record `k`.
    Mark(usize),
    /// In trailer padding, which no reader looks at.
    Padding,
}

impl TestLog {
    /// Writes `records` to a new in-memory log, never synced: all of it is unsynced tail.
    pub fn write(records: Vec<Vec<u8>>) -> Self {
        Self::write_with(records, false)
    }

    /// Writes `records` to a new in-memory log, synced after each one, so each record after the
    /// first is preceded by a sync mark covering the ones before it.
    pub fn write_synced(records: Vec<Vec<u8>>) -> Self {
        Self::write_with(records, true)
    }

    fn write_with(records: Vec<Vec<u8>>, sync: bool) -> Self {
        let file = MemLog::default();
        let mut writer = LogWriter::new(file.handle());
        let mut marks = Vec::new();
        let mut spans: Vec<Range<u64>> = Vec::new();
        for (k, r) in records.iter().enumerate() {
            let before = writer.len();
            let start = writer.add_record(r).expect("in-memory append");
            // A mark, when written, is the last thing before the record's first header.
            if sync && k > 0 && start - before >= SYNC_MARK_BYTES {
                marks.push((k, start - SYNC_MARK_BYTES..start));
            }
            spans.push(start..writer.len());
            if sync {
                writer.sync().expect("in-memory sync");
            }
        }
        assert_eq!(writer.len(), file.bytes().len() as u64);
        Self {
            bytes: file.bytes().into(),
            records,
            spans,
            marks,
        }
    }

    /// What the byte at `offset` belongs to.
    pub fn at(&self, offset: u64) -> Where {
        if let Some(k) = self.record_at(offset) {
            return Where::Record(k);
        }
        match self.marks.iter().find(|(_, span)| span.contains(&offset)) {
            Some(&(k, _)) => Where::Mark(k),
            None => Where::Padding,
        }
    }

    /// The records with the offsets the writer returned, as a reader yields them.
    pub fn expected(&self) -> Vec<(u64, Vec<u8>)> {
        self.spans
            .iter()
            .map(|s| s.start)
            .zip(self.records.iter().cloned())
            .collect()
    }

    /// The index of the record whose bytes hold `offset`, if any (padding belongs to none).
    pub fn record_at(&self, offset: u64) -> Option<usize> {
        self.spans.iter().position(|s| s.contains(&offset))
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }
}

/// Everything one pass of a reader over a log produced.
#[derive(Debug)]
pub struct Outcome {
    pub records: Vec<(u64, Vec<u8>)>,
    pub error: Option<Error>,
    pub skipped: Vec<Damage>,
    pub stopped_at: Option<Damage>,
}

/// Reads the first `len` bytes of `bytes` as a log in `mode`, to the end or the first error.
pub fn read_prefix(bytes: &Arc<[u8]>, len: usize, mode: RecoveryMode) -> Outcome {
    let file = MemFile::prefix(Arc::clone(bytes), len);
    let mut reader = LogReader::new(Box::new(file), mode);
    let mut records = Vec::new();
    let mut error = None;
    loop {
        match reader.next_record() {
            Ok(Some(record)) => records.push(record),
            Ok(None) => break,
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    assert!(
        reader.next_record().is_ok_and(|r| r.is_none()),
        "reader yields nothing after it ends"
    );
    Outcome {
        records,
        error,
        skipped: reader.skipped().to_vec(),
        stopped_at: reader.stopped_at().cloned(),
    }
}

/// Reads all of `bytes` as a log in `mode`.
pub fn read_all(bytes: &[u8], mode: RecoveryMode) -> Outcome {
    let bytes: Arc<[u8]> = bytes.into();
    read_prefix(&bytes, bytes.len(), mode)
}

/// A file offset as an index into a log's bytes.
pub fn index(offset: u64) -> usize {
    usize::try_from(offset).expect("test logs fit in memory")
}

/// The offset of a corruption error, if `error` is one that names the test log.
pub fn corruption_offset(error: &Error) -> Option<u64> {
    match error {
        Error::Corruption { file, offset, .. } if file == Path::new(LOG_PATH) => Some(*offset),
        _ => None,
    }
}

/// A physical record built by hand, for logs the writer would never produce.
pub fn fragment(type_byte: u8, payload: &[u8]) -> Vec<u8> {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&[type_byte]);
    hasher.update(payload);
    let len = u16::try_from(payload.len()).expect("fragment fits a block");
    let mut out = Vec::with_capacity(HEADER_SIZE + payload.len());
    out.extend_from_slice(&hasher.finalize().to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.push(type_byte);
    out.extend_from_slice(payload);
    out
}

/// A sync mark built by hand, claiming the log was synced to `synced`.
pub fn sync_mark(synced: u64) -> Vec<u8> {
    fragment(5, &synced.to_le_bytes())
}

/// The seed for a randomized test: `CAIRN_SEED` if set, else a fresh one. Printed either way so
/// a failure can be replayed.
pub fn seed() -> u64 {
    let seed = std::env::var("CAIRN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() ^ u64::from(d.subsec_nanos()))
        });
    eprintln!("seed {seed} (replay with CAIRN_SEED={seed})");
    seed
}

/// Proptest cases: `PROPTEST_CASES` if set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
