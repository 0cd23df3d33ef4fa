//! Flushes: frozen memtables become level-0 tables in the background.
//!
//! A table is written under a temporary name, synced, renamed and the directory synced; then a
//! MANIFEST edit adds it and advances the log number past the flushed log. Only once that edit
//! is durable is the log deleted, and only then do readers stop seeing the memtable.

use std::sync::Arc;

use bytes::Bytes;
use std::path::Path;

use cairn_fs::FileSystem;
use cairn_sstable::{InternalIterator, TableOptions, TableSummary, TableWriter};

use crate::db::DbInner;
use crate::error::Result;
use crate::filename::{self, FileKind};
use crate::memtable::Memtable;
use crate::super_version::MemSet;
use crate::version_edit::{FileMeta, VersionEdit};

impl DbInner {
    /// The background loop: flush the oldest frozen memtables until shutdown.
    pub(crate) fn run_flush_thread(&self) {
        loop {
            let memset = {
                let mut state = self.lock_state();
                loop {
                    if state.shutting_down {
                        return;
                    }
                    if state.error.is_none()
                        && let Some(front) = state.imm.front()
                    {
                        break Arc::clone(front);
                    }
                    state = self
                        .state_changed
                        .wait(state)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            self.run_task("a flush", || self.flush_memset(&memset));
        }
    }

    /// Writes one frozen memset to level 0 and retires it and its log.
    fn flush_memset(&self, memset: &Arc<MemSet>) -> Result<()> {
        let mut numbers = Vec::new();
        let result = (|| {
            let mut new_files = Vec::new();
            for (&cf, mem) in &memset.tables {
                if mem.is_empty() {
                    continue;
                }
                let number = self.new_output_number();
                numbers.push(number);
                new_files.push((cf, 0, self.write_l0_table(mem, number)?));
            }
            self.install_flush(new_files)
        })();
        self.release_outputs(numbers);
        result?;
        self.delete_obsolete_files();
        Ok(())
    }

    /// Adds flushed tables to the version and retires the oldest frozen memset.
    fn install_flush(&self, new_files: Vec<(u32, usize, FileMeta)>) -> Result<()> {
        self.log_and_apply(
            |state| {
                // A family dropped while we wrote: its table is not added, and is deleted later.
                let new_files: Vec<_> = new_files
                    .into_iter()
                    .filter(|(cf, _, _)| state.meta.cfs.contains_key(cf))
                    .collect();
                for (_, _, file) in &new_files {
                    self.stats.note_table_written(file.file_size);
                }
                // Only this thread retires frozen memsets, so the front is still ours.
                let next_log = state
                    .imm
                    .get(1)
                    .map_or(state.mem.log_number, |m| m.log_number);
                Ok(Some(VersionEdit {
                    log_number: Some(next_log),
                    new_files,
                    ..VersionEdit::default()
                }))
            },
            |state| {
                state.imm.pop_front();
                self.stats.note_flush();
            },
        )?;
        Ok(())
    }

    /// A number for a table about to be written; it is protected from deletion until
    /// [`release_output`](Self::release_output).
    pub(crate) fn new_output_number(&self) -> u64 {
        let mut state = self.lock_state();
        let number = state.meta.next_file_number;
        state.meta.next_file_number += 1;
        state.pending_outputs.insert(number);
        number
    }

    pub(crate) fn release_outputs(&self, numbers: impl IntoIterator<Item = u64>) {
        let mut state = self.lock_state();
        for n in numbers {
            state.pending_outputs.remove(&n);
        }
    }

    /// Writes `mem` as table `number`, durable under its final name.
    pub(crate) fn write_l0_table(&self, mem: &Arc<Memtable>, number: u64) -> Result<FileMeta> {
        write_table(
            self.fs.as_ref(),
            &self.dir,
            &self.options.table,
            mem,
            number,
        )
    }

    /// Deletes every file nothing needs any more: logs older than the oldest unflushed one,
    /// tables in no version and not being written, temporaries, and old MANIFESTs. Files
    /// created after the state is read carry numbers at or above `next_file_number` and are
    /// left alone.
    ///
    /// A stopped database deletes nothing: after a failed MANIFEST write or sync, the in-memory
    /// version may lack a table an edit on disk names, and reopening must find it. Nor does a
    /// closing one.
    pub(crate) fn delete_obsolete_files(&self) {
        if self.read_only {
            return;
        }
        let (keep, next_number, min_log, manifest) = {
            let mut state = self.lock_state();
            if state.error.is_some()
                && !crate::planted::active(crate::planted::Bug::DeleteAfterManifestFailure)
            {
                return;
            }
            // Closing: the next open sweeps. (A caller's thread may still be in here after
            // `close` released the directory to another process.)
            if state.shutting_down {
                return;
            }
            let current = state.meta.version.live_files();
            let mut keep = current.clone();
            for version in state.versions.iter().filter_map(std::sync::Weak::upgrade) {
                keep.extend(version.live_files());
            }
            keep.extend(state.pending_outputs.iter().copied());
            // A compaction's inputs until it ends, even if its family is dropped meanwhile.
            keep.extend(state.compacting.iter().flat_map(|r| r.pick.all_inputs()));
            // Tables only an older reader still holds: a later sweep must come back for them.
            state.sweep_pending = keep
                .iter()
                .any(|n| !current.contains(n) && !state.pending_outputs.contains(n));
            let min_log = state
                .imm
                .front()
                .map_or(state.mem.log_number, |m| m.log_number);
            // Last, so that nothing can panic between the count and its guard below.
            state.sweeps += 1;
            (
                keep,
                state.meta.next_file_number,
                min_log,
                state.manifest_number,
            )
        };
        let _counted = SweepCount(self);
        self.sweep_files(&keep, next_number, min_log, manifest);
    }

    /// Deletes the files of the directory that none of the sweep's reasons keep.
    fn sweep_files(
        &self,
        keep: &std::collections::HashSet<u64>,
        next_number: u64,
        min_log: u64,
        manifest: u64,
    ) {
        let Ok(names) = self.fs.list(&self.dir) else {
            return;
        };
        for name in names {
            let path = self.dir.join(&name);
            let obsolete = match filename::parse(&name) {
                Some(FileKind::Log(n)) => n < min_log,
                Some(FileKind::Table(n) | FileKind::TempTable(n)) => {
                    n < next_number && !keep.contains(&n)
                }
                Some(FileKind::Manifest(n)) => n < manifest,
                _ => false,
            };
            if !obsolete {
                continue;
            }
            if let Some(FileKind::Table(n)) = filename::parse(&name) {
                self.tables.evict(n);
            }
            match self.fs.remove(&path) {
                // Another thread's sweep got there first.
                Err(e) if !e.is_not_found() => {
                    tracing::warn!(file = %path.display(), error = %e, "could not delete an obsolete file");
                }
                _ => {}
            }
        }
    }
}

/// Writes `mem` as table `number` in `dir`: under a temporary name, synced, renamed, and the
/// directory synced, so the table is durable under its final name when this returns.
pub(crate) fn write_table(
    fs: &dyn FileSystem,
    dir: &Path,
    options: &TableOptions,
    mem: &Arc<Memtable>,
    number: u64,
) -> Result<FileMeta> {
    let temp = filename::temp_table_path(dir, number);
    let mut writer = TableWriter::new(fs.create(&temp)?, options.clone())?;
    let mut iter = mem.iter();
    iter.seek_to_first()?;
    while iter.valid() {
        writer.add(iter.key(), iter.meta(), iter.value())?;
        iter.next()?;
    }
    for t in mem.raw_range_tombstones() {
        writer.add_range_tombstone(&t.start, &t.end, t.seqno, t.write_time)?;
    }
    let summary = writer.finish()?;
    fs.rename(&temp, &filename::table_path(dir, number))?;
    fs.sync_dir(dir)?;
    Ok(file_meta(number, &summary))
}

/// The version's record of a table just written.
pub(crate) fn file_meta(number: u64, summary: &TableSummary) -> FileMeta {
    let props = &summary.properties;
    let point_smallest = props
        .smallest_key
        .as_ref()
        .map(|k| cairn_sstable::key::user_key(k).to_vec());
    let point_largest = props
        .largest_key
        .as_ref()
        .map(|k| cairn_sstable::key::user_key(k).to_vec());
    let fragments = summary.range_tombstones.fragments();
    let range_smallest = fragments.first().map(|f| f.start.to_vec());
    let range_largest = fragments.last().map(|f| f.end.to_vec());
    let smallest = [point_smallest, range_smallest]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or_default();
    let largest = [point_largest, range_largest]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or_default();
    FileMeta {
        number,
        file_size: summary.file_size,
        smallest: Bytes::from(smallest),
        largest: Bytes::from(largest),
        smallest_seqno: props.smallest_seqno,
        largest_seqno: props.largest_seqno,
        num_entries: props.num_entries,
        num_point_tombstones: props.num_point_tombstones(),
        num_range_tombstones: props.num_range_tombstones,
        oldest_tombstone_time: props.oldest_tombstone_time,
        smallest_tombstone_seqno: props.smallest_tombstone_seqno,
        max_tombstones_in_window: props.max_tombstones_in_window,
        earliest_expiry: props.earliest_expiry,
        oldest_write_time: props.oldest_write_time,
    }
}

/// A sweep in progress, counted until dropped (a panic included): `close` waits for the count.
struct SweepCount<'a>(&'a DbInner);

impl Drop for SweepCount<'_> {
    fn drop(&mut self) {
        self.0.lock_state().sweeps -= 1;
        self.0.state_changed.notify_all();
    }
}
