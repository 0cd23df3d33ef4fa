//! Opening a database: lock the directory, read the MANIFEST, replay the logs it has not
//! absorbed into memtables, flush them to level 0, and start a fresh MANIFEST and log. A
//! read-only open shares the log replay; the rest of it is in `read_only`.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use cairn_fs::{FileSystem, ReadableFile};
use cairn_sstable::MAX_SEQNO;
use cairn_wal::{HEADER_SIZE, LogReader, LogWriter, RecoveryMode};

use crate::error::{Error, Result};
use crate::filename::{self, FileKind, MAX_FILE_NUMBER};
use crate::inner::{DbInner, OpenedParts};
use crate::log_record::{BatchOp, decode_record};
use crate::manifest::{self, ManifestState, ManifestWriter};
use crate::memtable::Memtable;
use crate::options::Options;
use crate::super_version::MemSet;
use crate::version_edit::FileMeta;
use crate::write::range_deletes_overflow;

/// Opens the database in `dir`.
pub(crate) fn open(dir: &Path, options: Options) -> Result<DbInner> {
    options.validate_tables()?;
    let fs = Arc::clone(&options.fs);
    prepare_directory(fs.as_ref(), dir, &options)?;
    if !options.create_if_missing && !fs.exists(&filename::current_path(dir)) {
        // Refuse before taking the lock, which would leave a LOCK file behind.
        return Err(no_database(dir));
    }
    let lock = fs.lock(&filename::lock_path(dir))?;
    let mut meta = match manifest::read_current(fs.as_ref(), dir)? {
        Some(name) if options.error_if_exists => {
            return Err(Error::invalid(format!(
                "{} already holds a database ({name})",
                dir.display()
            )));
        }
        Some(name) => manifest::load(fs.as_ref(), dir, &name)?,
        None if options.create_if_missing => ManifestState::new_database(),
        None => return Err(no_database(dir)),
    };
    check_tables(fs.as_ref(), dir, &meta)?;
    let names = fs.list(dir)?;
    // Numbers are never reused, even for files a crash left behind unrecorded.
    if let Some((name, n)) = names
        .iter()
        .filter_map(|name| Some((name, file_number(name)?)))
        .max_by_key(|(_, n)| *n)
    {
        if n >= MAX_FILE_NUMBER {
            return Err(Error::corruption(
                dir.join(name),
                0,
                format!("file number {n} leaves no numbers to hand out"),
            ));
        }
        meta.next_file_number = meta.next_file_number.max(n + 1);
    }

    // Each memtable set replay is done with goes to level 0 at once, as a running database
    // would have flushed it: replay holds one set at a time, never the logs' product.
    let mut next_file_number = meta.next_file_number;
    let mut written = Vec::new();
    let logs = open_logs(fs.as_ref(), dir, &names, &meta)?;
    let replayed = replay_logs(logs, &options, Tail::Closed, &meta, &mut |full| {
        write_memset(
            fs.as_ref(),
            dir,
            &options,
            &full.tables,
            &mut next_file_number,
            &mut written,
        )
    });
    let recovered = match replayed {
        Ok(recovered) => recovered,
        Err(e) => {
            // No MANIFEST names them: an open that keeps failing must not pile them up.
            remove_tables(fs.as_ref(), dir, &written);
            return Err(e);
        }
    };
    meta.next_file_number = next_file_number;
    meta.last_seqno = meta.last_seqno.max(recovered.last_seqno);
    let inner_parts = finish_open(fs.as_ref(), dir, meta, written, lock)?;
    let tables = DbInner::table_cache(dir, &options);
    let inner = DbInner::new(dir.to_path_buf(), options, tables, inner_parts, false);
    inner.delete_obsolete_files();
    Ok(inner)
}

pub(crate) fn no_database(dir: &Path) -> Error {
    Error::invalid(format!("{} holds no Cairn database", dir.display()))
}

/// Checks that every table the MANIFEST names is there, at the size it recorded: a missing or
/// cut table is `Corruption` naming it, here rather than at the first read that reaches it.
fn check_tables(fs: &dyn FileSystem, dir: &Path, meta: &ManifestState) -> Result<()> {
    for (_, file) in meta
        .version
        .cfs
        .values()
        .flat_map(crate::version::CfVersion::all_files)
    {
        let path = filename::table_path(dir, file.number);
        match fs.file_size(&path) {
            Ok(size) if size == file.file_size => {}
            Ok(size) => {
                return Err(Error::corruption(
                    path,
                    size,
                    format!(
                        "the MANIFEST records this table at {} bytes; it holds {size}",
                        file.file_size
                    ),
                ));
            }
            Err(e) if e.is_not_found() => {
                return Err(Error::corruption(
                    path,
                    0,
                    "the MANIFEST names this table, and it is missing",
                ));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Creates a missing directory (when allowed) and refuses one holding foreign files.
fn prepare_directory(fs: &dyn FileSystem, dir: &Path, options: &Options) -> Result<()> {
    if !fs.exists(dir) {
        if !options.create_if_missing {
            return Err(Error::invalid(format!("{} does not exist", dir.display())));
        }
        fs.create_dir_all(dir)?;
        return Ok(());
    }
    let names = fs.list(dir).map_err(|e| match e {
        cairn_fs::Error::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotADirectory =>
        {
            Error::invalid(format!("{} is not a directory", dir.display()))
        }
        other => Error::Io(other),
    })?;
    let has_current = names.iter().any(|n| n == "CURRENT");
    if !has_current && let Some(data) = data_without_current(fs, dir, &names)? {
        // A database that lost its CURRENT, not an empty directory: making a new database here
        // would delete its tables and logs as obsolete.
        return Err(Error::corruption(
            filename::current_path(dir),
            0,
            format!(
                "missing, yet the directory holds the database's data ({data}): the database is \
                 damaged, not absent, and is not replaced"
            ),
        ));
    }
    if let Some(foreign) = names.iter().find(|n| filename::parse(n).is_none()) {
        if !has_current {
            return Err(Error::invalid(format!(
                "{} is not a Cairn database (it holds {foreign:?} and no CURRENT)",
                dir.display()
            )));
        }
        tracing::debug!(file = %foreign, "ignoring a file that is not the engine's");
    }
    Ok(())
}

/// The first file among `names` that holds data (a table, or a log with bytes in it), if any:
/// what a directory without `CURRENT` must not have for a new database to be made there. A
/// MANIFEST or an empty log alone is what a creation cut short leaves, and holds no data.
fn data_without_current(
    fs: &dyn FileSystem,
    dir: &Path,
    names: &[String],
) -> Result<Option<String>> {
    for name in names {
        let holds_data = match filename::parse(name) {
            Some(FileKind::Table(_)) => true,
            Some(FileKind::Log(_)) => fs.file_size(&dir.join(name))? > 0,
            _ => false,
        };
        if holds_data {
            return Ok(Some(name.clone()));
        }
    }
    Ok(None)
}

fn file_number(name: &str) -> Option<u64> {
    match filename::parse(name)? {
        FileKind::Log(n) | FileKind::Table(n) | FileKind::TempTable(n) | FileKind::Manifest(n) => {
            Some(n)
        }
        _ => None,
    }
}

/// What replay learned besides the memtables it handed on: the newest sequence number.
pub(crate) struct Recovered {
    pub(crate) last_seqno: u64,
}

/// The logs at or after the MANIFEST's log number among `names`, opened, oldest first. An open
/// file keeps its bytes readable if a writer deletes it later; its length is fixed at the open,
/// so a log still being appended to is read as the prefix it was then.
pub(crate) fn open_logs(
    fs: &dyn FileSystem,
    dir: &Path,
    names: &[String],
    meta: &ManifestState,
) -> Result<Vec<(u64, Box<dyn ReadableFile>)>> {
    let mut numbers: Vec<u64> = names
        .iter()
        .filter_map(|n| match filename::parse(n) {
            Some(FileKind::Log(number)) if number >= meta.log_number => Some(number),
            _ => None,
        })
        .collect();
    numbers.sort_unstable();
    let mut logs = Vec::with_capacity(numbers.len());
    for number in numbers {
        logs.push((number, fs.open_read(&filename::log_path(dir, number))?));
    }
    Ok(logs)
}

/// Who may still be writing the last log replay reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Nobody: the open holds the lock. The recovery mode decides what its tail's damage is.
    Closed,
    /// Maybe a live writer, part way through a record: a torn tail is where the log ends for
    /// now, not corruption, whatever the recovery mode.
    MaybeLive,
}

/// Replays `logs` (from [`open_logs`]) oldest first into memtables as the running database
/// held them: each log's in its own, and a new set whenever the memtables reach
/// `memtable_size` or a record's range deletes would carry them past it. Every set that holds
/// anything goes to `full`, oldest first.
pub(crate) fn replay_logs(
    logs: Vec<(u64, Box<dyn ReadableFile>)>,
    options: &Options,
    tail: Tail,
    meta: &ManifestState,
    full: &mut dyn FnMut(MemSet) -> Result<()>,
) -> Result<Recovered> {
    let mode = options.recovery_mode;
    // Empty logs after the last one with records do not make its tail a middle; nor do logs
    // holding only a begin mark (a resume that failed after creating its log, a switch
    // interrupted before the first record).
    let last_log = logs
        .iter()
        .rev()
        .find(|(_, file)| file.len() > HEADER_SIZE as u64)
        .map(|(n, _)| *n);
    let last_log = last_log.as_ref();
    let mut memset = MemSet::new(0, meta.cfs.keys().copied());
    let mut cut = |memset: &mut MemSet| -> Result<()> {
        if memset.is_empty() {
            return Ok(());
        }
        full(std::mem::replace(
            memset,
            MemSet::new(0, meta.cfs.keys().copied()),
        ))
    };
    let mut last_seqno = meta.last_seqno;
    let mut logs = logs.into_iter();
    while let Some((number, file)) = logs.next() {
        let path = file.path().to_path_buf();
        let file_len = file.len();
        let at_tail = last_log.is_none_or(|&last| number >= last);
        let log_mode = match (tail, mode) {
            (Tail::MaybeLive, RecoveryMode::AbsoluteConsistency) if at_tail => {
                RecoveryMode::TolerateCorruptedTail
            }
            _ => mode,
        };
        let mut reader = LogReader::new(file, log_mode);
        while let Some((offset, bytes)) = reader.next_record()? {
            let Some(record) = decode_record(&bytes) else {
                let damage = Error::corruption(&path, offset, "malformed write batch in log");
                skip_damaged(mode, damage)?;
                continue;
            };
            let count = record.ops.len() as u64;
            if record.first_seqno == 0
                || record.first_seqno.saturating_add(count.saturating_sub(1)) > MAX_SEQNO
            {
                let damage = Error::corruption(
                    &path,
                    offset,
                    format!(
                        "log record's sequence numbers {}..+{count} are outside 1..=2^56-1",
                        record.first_seqno
                    ),
                );
                skip_damaged(mode, damage)?;
                continue;
            }
            // Range deletes that would carry the memtables past their size go to fresh ones, as
            // the write path sends them (with this open's size, which may differ from the
            // writer's).
            if record.ops.iter().any(BatchOp::is_range_delete) {
                let ops: Vec<&BatchOp> = record.ops.iter().collect();
                if range_deletes_overflow(&memset, &ops, options.memtable_size) {
                    cut(&mut memset)?;
                }
            }
            memset.apply(record.first_seqno, record.write_time, record.ops.iter());
            last_seqno = last_seqno.max(record.first_seqno + count.saturating_sub(1));
            if memset.approximate_bytes() >= options.memtable_size {
                cut(&mut memset)?;
            }
        }
        // A log held one running memtable set: the next log's writes never met this one's.
        cut(&mut memset)?;
        if last_log.is_some_and(|&last| number < last) && !reader.closed_whole() {
            // A log before the last one that is not whole — torn, or without the end mark a
            // switch gives it — was closed unsynced (`live_logs`) and lost its tail to a power
            // loss. Nothing after the loss was synced, in it or in a later log (a sync there
            // seals this one first), so the later logs hold only writes no one was promised, and
            // replaying them would leave a hole before them. Unless a later log says this one
            // was sealed: then it is corruption.
            let at = reader.stopped_at().map_or(file_len, |damage| damage.offset);
            if mode == RecoveryMode::SkipCorrupted {
                tracing::warn!(file = %path.display(), offset = at, "log before the last one is not whole; replaying the later logs");
                continue;
            }
            // Read past: nothing after this log is replayed. A log from before begin marks was
            // sealed at its switch: not whole, it is corrupt.
            let vouched = reader.predates_begin_marks() || later_log_vouches(&mut logs);
            match mode {
                RecoveryMode::PointInTime if vouched => {
                    tracing::error!(file = %path.display(), offset = at, "log replay stopped at a sealed log that is not whole: synced writes in later logs are dropped");
                }
                RecoveryMode::PointInTime | RecoveryMode::TolerateCorruptedTail if !vouched => {
                    tracing::warn!(file = %path.display(), offset = at, "log replay stopped at a log before the last one that lost its tail: later logs held only unsynced writes");
                }
                _ => {
                    let why = if vouched {
                        "sealed log before the last one is not whole (torn or cut short)"
                    } else {
                        "log before the last one is not whole: its unsynced tail was lost"
                    };
                    return Err(Error::corruption(&path, at, why));
                }
            }
            break;
        }
        if let Some(damage) = reader.stopped_at() {
            // The last log: nothing after the damage is replayed.
            if mode == RecoveryMode::PointInTime {
                tracing::warn!(file = %damage.file.display(), offset = damage.offset, "log replay stopped at damage");
            }
            break;
        }
    }
    Ok(Recovered { last_seqno })
}

/// Whether one of `logs` holds a sealed mark, saying every log before it was sealed. Read to
/// their first damage; one that cannot be read vouches for nothing.
fn later_log_vouches(logs: impl Iterator<Item = (u64, Box<dyn ReadableFile>)>) -> bool {
    let mut logs = logs;
    logs.any(|(_, file)| {
        let mut reader = LogReader::new(file, RecoveryMode::PointInTime);
        while let Ok(Some(_)) = reader.next_record() {
            if reader.vouches_for_earlier_logs() {
                return true;
            }
        }
        reader.vouches_for_earlier_logs()
    })
}

/// A damaged log record: skipped with a warning in `SkipCorrupted` mode, else the error that
/// ends recovery.
fn skip_damaged(mode: RecoveryMode, damage: Error) -> Result<()> {
    if mode != RecoveryMode::SkipCorrupted {
        return Err(damage);
    }
    tracing::warn!(error = %damage, "skipping a damaged log record");
    Ok(())
}

/// Writes each family's memtable in `tables` that holds anything as a level-0 table numbered
/// from `next_file_number`, adding each to `written` as soon as it is (so a failure part way
/// leaves `written` naming every table on disk).
fn write_memset(
    fs: &dyn FileSystem,
    dir: &Path,
    options: &Options,
    tables: &BTreeMap<u32, Arc<Memtable>>,
    next_file_number: &mut u64,
    written: &mut Vec<(u32, FileMeta)>,
) -> Result<()> {
    for (cf, mem) in tables {
        if mem.is_empty() {
            continue;
        }
        let number = *next_file_number;
        *next_file_number += 1;
        let file = crate::flush::write_table(
            fs,
            dir,
            &options.table_options_for(0),
            mem,
            number,
            options.drop_covered_at_flush.then_some(&[][..]),
        )?;
        written.push((*cf, file));
    }
    Ok(())
}

/// Removes tables an open wrote and will not record (best effort: what is left is an orphan
/// the next successful open deletes).
fn remove_tables(fs: &dyn FileSystem, dir: &Path, written: &[(u32, FileMeta)]) {
    for (_, file) in written {
        let path = filename::table_path(dir, file.number);
        if let Err(e) = fs.remove(&path) {
            tracing::warn!(file = %path.display(), error = %e, "could not remove a table of a failed open");
        }
    }
}

/// Records the tables `written` during replay in a fresh MANIFEST and opens a new log.
fn finish_open(
    fs: &dyn FileSystem,
    dir: &Path,
    mut meta: ManifestState,
    written: Vec<(u32, FileMeta)>,
    lock: cairn_fs::FileLock,
) -> Result<OpenedParts> {
    let mut edit = crate::version_edit::VersionEdit::default();
    edit.new_files
        .extend(written.into_iter().map(|(cf, file)| (cf, 0, file)));
    let log_number = meta.next_file_number;
    let manifest_number = log_number + 1;
    meta.next_file_number = manifest_number + 1;
    edit.log_number = Some(log_number);
    let path = dir.join(filename::manifest_name(manifest_number));
    // The new MANIFEST's first record is its snapshot, which holds this edit.
    meta.apply(
        &edit,
        crate::version_edit::EditAt {
            file: &path,
            offset: 0,
        },
    )?;
    // The MANIFEST goes first: until CURRENT names it, a crash replays the old logs again, and
    // no new log stands after a torn one.
    let manifest = ManifestWriter::create(fs, dir, manifest_number, &meta)?;
    let mut wal = LogWriter::new(fs.create(&filename::log_path(dir, log_number))?);
    wal.begin()?;
    fs.sync_dir(dir)?;
    let mem = Arc::new(MemSet::new(log_number, meta.cfs.keys().copied()));
    Ok(OpenedParts {
        lock: Some(lock),
        manifest,
        meta,
        mem,
        imm: VecDeque::new(),
        wal,
        pinned: Vec::new(),
    })
}
