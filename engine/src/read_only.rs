//! A read-only open, beside a live writer or none (RocksDB's secondary instance): a view of
//! the MANIFEST, tables and logs as of the open, which `catch_up` moves to the writer's newer
//! state. It takes no lock and writes, renames and deletes nothing, so it never keeps a writer
//! from opening, restarting or deleting files.
//!
//! The writer changes the directory under the view, and the view survives it:
//!
//! - **MANIFEST rolled over** between reading `CURRENT` and opening the MANIFEST it named (the
//!   old one deleted): the view is read again from `CURRENT`.
//! - **Tables compacted away.** Every table of the view is opened when the view is read, and
//!   held while a version that names it lives ([`DbInner::pinned`]); the writer deletes a table
//!   only after an edit dropping it is durable, and an open descriptor (or mapping) keeps the
//!   bytes readable after the unlink. A table already gone when the view opens it was dropped by
//!   a newer edit: the view is read again.
//! - **Logs deleted after a flush.** The logs at or after the MANIFEST's log number are opened
//!   (and then read through the open files), and the MANIFEST read again: a log is deleted only
//!   after an edit moving the log number past it is durable, so if the log number is the same,
//!   every log the view needs was there when it was opened. If it moved, the view is read again.
//! - **A log still being written.** A log is read as far as it was long when opened; a record the
//!   writer was part way through is where it ends (a torn tail), whatever the recovery mode.
//!
//! Each read of the view is tried at most [`VIEW_ATTEMPTS`] times; a writer that changes the
//! directory faster than that many reads of it makes the open fail with the last reason.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cairn_fs::FileSystem;
use cairn_sstable::Table;
use cairn_wal::LogWriter;

use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::inner::{DbInner, OpenedParts};
use crate::manifest::{self, ManifestState, ManifestWriter, ReadOnlyFile};
use crate::options::Options;
use crate::recovery::{Tail, no_database, open_logs, replay_logs};
use crate::super_version::MemSet;
use crate::table_cache::TableCache;
use crate::version::CfVersion;

/// How many times a read of the view starts over after the writer changed the files under it.
pub(crate) const VIEW_ATTEMPTS: usize = 32;

/// The database's files as one read of them found them.
struct DiskView {
    manifest_name: String,
    meta: ManifestState,
    /// Memtable sets replayed from the logs, oldest first.
    imm: VecDeque<Arc<MemSet>>,
    /// Every table `meta`'s version names, open.
    tables: Vec<Table>,
}

/// A read of the view that met a file the writer had removed: start over.
struct Changed(Error);

/// Opens the database in `dir` to read only: no lock, nothing on disk changes.
pub(crate) fn open_read_only(dir: &Path, options: Options) -> Result<DbInner> {
    options.table.validate()?;
    let fs = Arc::clone(&options.fs);
    if !fs.exists(&filename::current_path(dir)) {
        return Err(no_database(dir));
    }
    let tables = DbInner::table_cache(dir, &options);
    let view = read_view(fs.as_ref(), dir, &options, &tables)?;
    let number = manifest_number(&view.manifest_name);
    let parts = OpenedParts {
        lock: None,
        manifest: ManifestWriter::read_only(dir.join(&view.manifest_name), number),
        mem: Arc::new(MemSet::new(
            view.meta.log_number,
            view.meta.cfs.keys().copied(),
        )),
        meta: view.meta,
        imm: view.imm,
        wal: LogWriter::new(Box::new(ReadOnlyFile(filename::log_path(dir, 0)))),
        pinned: view.tables,
    };
    Ok(DbInner::new(
        dir.to_path_buf(),
        options,
        tables,
        parts,
        true,
    ))
}

fn manifest_number(name: &str) -> u64 {
    match filename::parse(name) {
        Some(FileKind::Manifest(n)) => n,
        _ => 0,
    }
}

/// Reads the view, starting over (at most [`VIEW_ATTEMPTS`] times) when the writer removed a
/// file it needed.
fn read_view(
    fs: &dyn FileSystem,
    dir: &Path,
    options: &Options,
    tables: &TableCache,
) -> Result<DiskView> {
    let mut last = None;
    for attempt in 1..=VIEW_ATTEMPTS {
        match try_read_view(fs, dir, options, tables)? {
            Ok(view) => return Ok(view),
            Err(Changed(why)) => {
                tracing::debug!(attempt, reason = %why, "the writer changed the files under a read-only open; reading again");
                last = Some(why);
            }
        }
    }
    Err(last.unwrap_or_else(|| no_database(dir)))
}

/// `Err(Changed)` if the writer removed a file this read needed: read again.
fn vanished(e: Error) -> Result<Changed> {
    match e {
        Error::Io(io) if io.is_not_found() => Ok(Changed(Error::Io(io))),
        other => Err(other),
    }
}

/// The MANIFEST `CURRENT` names now, loaded; `Changed` if it was deleted (rolled over) before
/// it was read.
fn current_manifest(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<std::result::Result<(String, ManifestState), Changed>> {
    let name = manifest::read_current(fs, dir)?.ok_or_else(|| no_database(dir))?;
    match manifest::load(fs, dir, &name) {
        Ok(meta) => Ok(Ok((name, meta))),
        Err(e) => Ok(Err(vanished(e)?)),
    }
}

fn try_read_view(
    fs: &dyn FileSystem,
    dir: &Path,
    options: &Options,
    cache: &TableCache,
) -> Result<std::result::Result<DiskView, Changed>> {
    let (manifest_name, mut meta) = match current_manifest(fs, dir)? {
        Ok(current) => current,
        Err(changed) => return Ok(Err(changed)),
    };
    let mut tables = Vec::new();
    for (_, file) in meta.version.cfs.values().flat_map(CfVersion::all_files) {
        match cache.open_file(file) {
            Ok(table) => tables.push(table),
            Err(cairn_sstable::Error::Io(e)) if e.is_not_found() => {
                let path = filename::table_path(dir, file.number);
                return Ok(Err(Changed(Error::corruption(
                    path,
                    0,
                    "the MANIFEST names this table, and it is missing",
                ))));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let names = fs.list(dir)?;
    let logs = match open_logs(fs, dir, &names, &meta) {
        Ok(logs) => logs,
        Err(e) => return Ok(Err(vanished(e)?)),
    };
    // A log is deleted only once an edit moving the log number past it is durable: with the
    // number unchanged now, no log this view needs was deleted before it was opened.
    match current_manifest(fs, dir)? {
        Ok((_, now)) if now.log_number == meta.log_number => {}
        Ok((name, now)) => {
            return Ok(Err(Changed(Error::Io(cairn_fs::Error::from(
                std::io::Error::other(format!(
                    "{name} moved the log number from {} to {} while the logs were opened",
                    meta.log_number, now.log_number
                )),
            )))));
        }
        Err(changed) => return Ok(Err(changed)),
    }
    // Memtables that fill during replay are kept apart, frozen, as a running database kept
    // them: one memtable holding every log would cut each log's range tombstones by the others'.
    let mut imm = VecDeque::new();
    let recovered = replay_logs(logs, options, Tail::MaybeLive, &meta, &mut |full| {
        imm.push_back(Arc::new(full));
        Ok(())
    })?;
    meta.last_seqno = meta.last_seqno.max(recovered.last_seqno);
    Ok(Ok(DiskView {
        manifest_name,
        meta,
        imm,
        tables,
    }))
}

impl DbInner {
    /// Moves a read-only open to the files as they are now (see `Db::catch_up`).
    pub(crate) fn catch_up(&self) -> Result<()> {
        if !self.read_only {
            return Err(Error::invalid(
                "catch_up moves a read-only open to its writer's newer state; this database is \
                 the writer, and always current",
            ));
        }
        self.check_open()?;
        // Held throughout, so two calls at once cannot install their views out of order (an
        // older view over a newer number); a read-only open writes no edit under it.
        let mut manifest = self.lock_manifest();
        let view = read_view(self.fs.as_ref(), &self.dir, &self.options, &self.tables)?;
        let number = manifest_number(&view.manifest_name);
        let version = Arc::clone(&view.meta.version);
        let last_seqno = view.meta.last_seqno;
        let mut state = self.lock_state();
        let state = &mut *state;
        // A snapshot reads the view current at each read with its own number: after a move, the
        // writer's compactions (which never knew of it) may have dropped what it reads.
        let moved = self.snapshots.while_none_live(|| {
            *manifest = ManifestWriter::read_only(self.dir.join(&view.manifest_name), number);
            state.manifest_number = number;
            state.mem = Arc::new(MemSet::new(
                view.meta.log_number,
                view.meta.cfs.keys().copied(),
            ));
            state.imm = view.imm;
            state.meta = view.meta;
            // The number first: a read takes the view, then the number, so one that sees the
            // new view reads at the new number (the old number could see, in the new view,
            // the absence of versions compaction dropped under newer ones).
            self.visible_seqno.store(last_seqno, Ordering::Release);
            self.install_super_version(state);
        });
        if moved.is_none() {
            return Err(Error::invalid(
                "catch_up while a snapshot of this database is held: the writer keeps nothing \
                 for it in the newer state; drop the snapshots first",
            ));
        }
        let mut pinned = self
            .pinned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pinned.retain(|(version, _)| version.strong_count() > 0);
        pinned.push((Arc::downgrade(&version), view.tables));
        Ok(())
    }
}
