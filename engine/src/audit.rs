//! Audit: every place a key still lies, and when each deleted trace is promised gone.
//!
//! "Right to be forgotten" needs more than the read path: a deleted key lives on in memtables,
//! in logs not yet deleted, in tables no version reads but the sweep has not reached, in tables
//! deleted from the directory while a reader still holds them open (their bytes stay on disk
//! until it lets go), and in MANIFESTs, which record tables' smallest and largest keys.
//! `audit_key` looks in all of them — every file in the directory, and every table still open —
//! rather than in what the current version says should be there.
//!
//! It does not look inside files still being written (a table's temporary file, which a
//! failed write leaves for the next open to delete), nor can it see tables another process
//! holds open after this one deleted them: a read-only open beside the writer
//! (`Db::open_read_only`) keeps its view's tables until it closes or calls `catch_up`, and
//! their bytes stay on disk that long. Nor copies a caller made (a backup of the directory).

use std::collections::{HashMap, HashSet};

use cairn_sstable::{
    FragmentedRangeTombstones, InternalIterator, Kind, MAX_SEQNO, SeqNo, Table, key::user_key,
    parse_internal_key, seek_key,
};
use cairn_wal::{LogReader, RecoveryMode};

use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::inner::DbInner;
use crate::log_record::{BatchOp, decode_record};
use crate::version_edit::VersionEdit;

/// Where a version, a tombstone, or the bytes of a key still lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Location {
    /// In a memtable.
    Memtable,
    /// In a write-ahead log file.
    Log {
        /// The log's file number.
        number: u64,
    },
    /// In a table the current version reads.
    Table {
        /// Its level.
        level: usize,
        /// Its file number.
        number: u64,
    },
    /// In a table no version reads any more, still in the directory until the sweep deletes it
    /// (an older reader may hold it), or just written and not yet installed.
    UnreadTable {
        /// Its file number.
        number: u64,
    },
    /// In a table deleted from the directory that a reader still holds open: its bytes stay on
    /// disk until the reader lets go.
    UnlinkedTable {
        /// Its file number.
        number: u64,
    },
    /// In a MANIFEST, as the smallest or largest key of a table it records: the key's bytes,
    /// not a version. They go when the MANIFEST rolls over to a snapshot without that table.
    Manifest {
        /// The MANIFEST's file number.
        number: u64,
        /// The table whose bound the key is.
        table: u64,
    },
}

/// One place a key's version, tombstone or bytes still lie.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyTrace {
    /// Where.
    pub location: Location,
    /// The write's sequence number; for a [`Location::Manifest`] trace, the largest sequence
    /// number of the table whose bound the key is.
    pub seqno: SeqNo,
    /// What it is (`RangeDelete` for a range tombstone covering the key); `None` for a
    /// [`Location::Manifest`] trace, which is a copy of the key's bytes, not a version.
    pub kind: Option<Kind>,
    /// When it was written, in ms of the database's clock (for a MANIFEST trace, the oldest
    /// write in the recorded table).
    pub write_time: u64,
    /// When the delete persistence deadline promises it gone, in ms: set for deleted versions and
    /// for tombstones when a deadline is configured, `None` for live data or without one.
    pub gone_by: Option<u64>,
}

impl DbInner {
    /// Every trace of `key` in `cf`, newest first.
    pub(crate) fn audit_key(&self, cf: u32, key: &[u8]) -> Result<Vec<KeyTrace>> {
        let sv = self.super_version();
        let grace = crate::clock::millis(sv.cf_options(cf)?.tombstone_grace);
        let mut traces: Vec<KeyTrace> = Vec::new();
        for mem in sv.memtables(cf) {
            for e in mem.versions(key, MAX_SEQNO, usize::MAX) {
                traces.push(trace(
                    Location::Memtable,
                    e.seqno,
                    e.kind,
                    e.meta.write_time,
                ));
            }
            for (seqno, time) in covering(&mem.range_tombstones(), key) {
                traces.push(trace(Location::Memtable, seqno, Kind::RangeDelete, time));
            }
        }
        let names = self.fs.list(&self.dir)?;
        // The MANIFESTs first: they also say which family each table they record belongs to,
        // so a table no version reads is searched only if it is (or may be) this family's.
        let mut families = HashMap::new();
        for name in &names {
            if let Some(FileKind::Manifest(number)) = filename::parse(name) {
                let path = self.dir.join(name);
                manifest_traces(self, &path, number, cf, key, &mut traces, &mut families)?;
            }
        }
        let ours = |number: u64| families.get(&number).is_none_or(|&c| c == cf);
        let live = sv.version.live_files();
        for name in &names {
            let path = self.dir.join(name);
            match filename::parse(name) {
                Some(FileKind::Log(number)) => {
                    log_traces(self, &path, number, cf, key, &mut traces)?;
                }
                Some(FileKind::Table(number)) if !live.contains(&number) && ours(number) => {
                    let location = Location::UnreadTable { number };
                    match Table::open(self.fs.as_ref(), &path, number, None) {
                        Ok(table) => table_traces(&table, key, location, &mut traces)?,
                        // Deleted since the directory was listed: no trace there.
                        Err(cairn_sstable::Error::Io(e)) if e.is_not_found() => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                _ => {}
            }
        }
        if let Some(files) = sv.version.cf(cf) {
            for (level, file) in files.all_files() {
                let location = Location::Table {
                    level,
                    number: file.number,
                };
                let table = match self.tables.table(file) {
                    Ok(table) => table,
                    // A table that disagrees with its record (swapped, say) is refused to reads,
                    // but its bytes are on disk all the same: the audit reads them uncached.
                    Err(Error::Corruption { reason, .. }) => {
                        tracing::warn!(table = file.number, %reason, "audit reads a table refused to reads and compaction");
                        let path = filename::table_path(&self.dir, file.number);
                        Table::open(self.fs.as_ref(), &path, file.number, None)?
                    }
                    Err(e) => return Err(e),
                };
                table_traces(&table, key, location, &mut traces)?;
            }
        }
        for (number, table) in self.tables.held_besides(&live) {
            let gone = !self.fs.exists(&filename::table_path(&self.dir, number));
            if gone && ours(number) {
                let location = Location::UnlinkedTable { number };
                table_traces(&table, key, location, &mut traces)?;
            }
        }
        traces.sort_by_key(|t| std::cmp::Reverse(t.seqno));
        self.promise_gone_by(&mut traces, grace);
        Ok(traces)
    }

    /// Fills in when each trace is promised gone: walking newest first, everything at or below
    /// the newest tombstone is deleted, and goes within the deadline after its grace.
    fn promise_gone_by(&self, traces: &mut [KeyTrace], grace: u64) {
        let deadline = self
            .options
            .delete_persistence_deadline
            .map(crate::clock::millis);
        let mut deleted_at: Option<u64> = None;
        for t in traces {
            if t.kind.is_some_and(Kind::is_tombstone) {
                deleted_at = Some(deleted_at.map_or(t.write_time, |d| d.max(t.write_time)));
            }
            t.gone_by = deadline
                .zip(deleted_at)
                .map(|(d, at)| cairn_compaction::rules::grace_end(at, grace).saturating_add(d));
        }
    }
}

fn trace(location: Location, seqno: SeqNo, kind: Kind, write_time: u64) -> KeyTrace {
    KeyTrace {
        location,
        seqno,
        kind: Some(kind),
        write_time,
        gone_by: None,
    }
}

/// `(seqno, deletion time)` of every range tombstone piece covering `key`.
pub(crate) fn covering(list: &FragmentedRangeTombstones, key: &[u8]) -> Vec<(SeqNo, u64)> {
    list.fragment_at(key)
        .map(|f| f.versions.iter().map(|v| (v.seqno, v.write_time)).collect())
        .unwrap_or_default()
}

/// The versions and covering range tombstones of `key` in `table`.
fn table_traces(
    table: &Table,
    key: &[u8],
    location: Location,
    out: &mut Vec<KeyTrace>,
) -> Result<()> {
    for (seqno, time) in covering(table.range_tombstones(), key) {
        out.push(trace(location, seqno, Kind::RangeDelete, time));
    }
    if !table.may_contain(key) {
        return Ok(());
    }
    let mut iter = table.iter();
    iter.seek(&seek_key(key, MAX_SEQNO))?;
    while iter.valid() && user_key(iter.key()) == key {
        if let Some(k) = parse_internal_key(iter.key()) {
            out.push(trace(location, k.seqno, k.kind, iter.meta().write_time));
        }
        iter.next()?;
    }
    Ok(())
}

/// Hands `each` every whole record of the log or MANIFEST at `path`, reading past damage (a
/// file being written, or cut by a crash, is read as far as it is whole); none if it is gone.
fn each_record(db: &DbInner, path: &std::path::Path, mut each: impl FnMut(&[u8])) -> Result<()> {
    let mut reader = match LogReader::open(db.fs.as_ref(), path, RecoveryMode::SkipCorrupted) {
        Ok(reader) => reader,
        Err(cairn_wal::Error::Io(e)) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    while let Some((_, bytes)) = reader.next_record()? {
        each(&bytes);
    }
    Ok(())
}

/// The writes to `key` in `cf` in the log at `path`.
fn log_traces(
    db: &DbInner,
    path: &std::path::Path,
    number: u64,
    cf: u32,
    key: &[u8],
    out: &mut Vec<KeyTrace>,
) -> Result<()> {
    let location = Location::Log { number };
    each_record(db, path, |bytes| {
        let Some(record) = decode_record(bytes) else {
            return;
        };
        for (seqno, op) in (record.first_seqno..).zip(&record.ops) {
            if op.cf() != cf {
                continue;
            }
            let kind = match op {
                BatchOp::Put { key: k, .. } if k.as_ref() == key => Kind::Put,
                BatchOp::Delete { key: k, .. } if k.as_ref() == key => Kind::Delete,
                BatchOp::SingleDelete { key: k, .. } if k.as_ref() == key => Kind::SingleDelete,
                BatchOp::DeleteRange { start, end, .. }
                    if start.as_ref() <= key && key < end.as_ref() =>
                {
                    Kind::RangeDelete
                }
                _ => continue,
            };
            out.push(trace(location, seqno, kind, record.write_time));
        }
    })
}

/// The tables of `cf` the MANIFEST at `path` records with `key` as a bound; also notes the
/// family of every table it records in `families`.
fn manifest_traces(
    db: &DbInner,
    path: &std::path::Path,
    number: u64,
    cf: u32,
    key: &[u8],
    out: &mut Vec<KeyTrace>,
    families: &mut HashMap<u64, u32>,
) -> Result<()> {
    let mut seen = HashSet::new();
    each_record(db, path, |bytes| {
        let Some(edit) = VersionEdit::decode(bytes) else {
            return;
        };
        for (file_cf, _, file) in &edit.new_files {
            families.insert(file.number, *file_cf);
            let bound = file.smallest.as_ref() == key || file.largest.as_ref() == key;
            if *file_cf == cf && bound && seen.insert(file.number) {
                out.push(KeyTrace {
                    location: Location::Manifest {
                        number,
                        table: file.number,
                    },
                    seqno: file.largest_seqno,
                    kind: None,
                    write_time: file.oldest_write_time.unwrap_or(0),
                    gone_by: None,
                });
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_deleted_while_still_open_is_found_unlinked() -> Result<()> {
        let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
        let db = crate::Db::open(dir.path(), crate::Options::default())?;
        db.put("k", "v")?;
        db.flush()?;
        let file = db
            .inner
            .super_version()
            .version
            .cf(0)
            .and_then(|v| v.all_files().next().map(|(_, f)| std::sync::Arc::clone(f)))
            .ok_or_else(|| crate::Error::invalid("no table"))?;
        let number = file.number;
        // Something holds the table while compaction replaces it and the sweep deletes it.
        let held = db.inner.tables.table(&file)?;
        db.put("k", "newer")?;
        db.compact_range::<&str>(..)?;
        db.wait_for_background_work()?;
        assert!(!filename::table_path(dir.path(), number).exists());
        let traces = db.audit_key("k")?;
        assert!(
            traces
                .iter()
                .any(|t| t.location == Location::UnlinkedTable { number }),
            "{traces:?}"
        );
        drop(held);
        let traces = db.audit_key("k")?;
        assert!(
            !traces
                .iter()
                .any(|t| matches!(t.location, Location::UnlinkedTable { .. })),
            "once released the table is gone: {traces:?}"
        );
        Ok(())
    }
}
