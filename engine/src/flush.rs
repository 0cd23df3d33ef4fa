//! Flushes: frozen memtables become level-0 tables in the background.
//!
//! A table is written under a temporary name, synced, renamed and the directory synced; then a
//! MANIFEST edit adds it and advances the log number past the flushed log. Only once that edit
//! is durable is the log deleted, and only then do readers stop seeing the memtable.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cairn_fs::FileSystem;
use cairn_sstable::{
    FragmentedRangeTombstones, InternalIterator, SeqNo, TableOptions, TableWriter,
    parse_internal_key,
};

use crate::error::Result;
use crate::filename;
use crate::inner::DbInner;
use crate::memtable::Memtable;
use crate::super_version::MemSet;
use crate::version_edit::{FileMeta, VersionEdit};
use crate::version_set::file_meta;

impl DbInner {
    /// The background loop: flush the oldest frozen memtables until shutdown, and recover
    /// from a stop caused by an I/O error (`resume`).
    pub(crate) fn run_flush_thread(&self) {
        loop {
            let memset = {
                let mut state = self.lock_state();
                loop {
                    if state.shutting_down {
                        return;
                    }
                    if state.error.is_none()
                        && let Some(front) = state.imm.front().cloned()
                    {
                        state.flushing = true;
                        break Some(front);
                    }
                    if self.auto_recovery_due(&state) {
                        break None;
                    }
                    state = self
                        .state_changed
                        .wait(state)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            let Some(memset) = memset else {
                self.auto_recover();
                continue;
            };
            self.run_task("a flush", || self.flush_memset(&memset));
            self.lock_state().flushing = false;
            self.state_changed.notify_all();
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
                if let Some(flushed) = state.imm.pop_front() {
                    // Its log needs no sync now: let go of it before a sweep deletes it, and
                    // before `flush` and `wait_for_flushes` see the frozen memtables gone.
                    // (State, then log lock: the order `switch_memtable` takes them in.)
                    if let Some(last) = self.lock_wal().retire_through(flushed.log_number) {
                        self.durable_seqno.fetch_max(last, Ordering::AcqRel);
                    }
                }
                self.stats.note_flush();
            },
        )?;
        Ok(())
    }

    /// Freezes the memtables and waits until every frozen memtable is flushed and the logs
    /// they came from are deleted.
    pub(crate) fn flush(&self) -> Result<()> {
        self.freeze_memtable()?;
        self.wait_for_flushes()?;
        // The flush thread deletes them too, but after it lets waiters go.
        self.delete_obsolete_files();
        Ok(())
    }

    /// Waits until every frozen memtable is flushed.
    pub(crate) fn wait_for_flushes(&self) -> Result<()> {
        let mut state = self.lock_state();
        while !state.imm.is_empty() {
            state.check_running()?;
            state = self
                .state_changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        state.check_running()
    }

    /// Writes `mem` as table `number`, durable under its final name.
    pub(crate) fn write_l0_table(&self, mem: &Arc<Memtable>, number: u64) -> Result<FileMeta> {
        write_table(
            self.fs.as_ref(),
            &self.dir,
            &self.options.table_options_for(0),
            mem,
            number,
            self.flush_snapshots().as_deref(),
        )
    }

    /// The live snapshots a flush leaves covered entries out around, when it does
    /// (`Options::drop_covered_at_flush`); none when it writes every entry.
    pub(crate) fn flush_snapshots(&self) -> Option<Vec<SeqNo>> {
        self.options
            .drop_covered_at_flush
            .then(|| self.snapshots.list())
    }
}

/// Writes `mem` as table `number` in `dir`: under a temporary name, synced, renamed, and the
/// directory synced, so the table is durable under its final name when this returns.
///
/// With `snapshots` (the live ones, ascending; `Options::drop_covered_at_flush`), an entry a
/// newer range tombstone of the same memtable covers, with no snapshot between the two, is not
/// written: no read can see it, the range
/// tombstone rule's "what it covers in its stripe goes with it" applied at the flush (as
/// RocksDB's flush does). The range tombstones themselves are all written: they still hide
/// older data in the tables below. A snapshot taken during the flush reads above every seqno
/// of a frozen memtable, so it splits no stripe here.
pub(crate) fn write_table(
    fs: &dyn FileSystem,
    dir: &Path,
    options: &TableOptions,
    mem: &Arc<Memtable>,
    number: u64,
    snapshots: Option<&[SeqNo]>,
) -> Result<FileMeta> {
    let temp = filename::temp_table_path(dir, number);
    let mut writer = TableWriter::new(fs.create(&temp)?, options.clone())?;
    let covers = mem.range_tombstones();
    let mut iter = mem.iter();
    iter.seek_to_first()?;
    while iter.valid() {
        let dropped = snapshots.is_some_and(|snapshots| {
            !covers.is_empty() && covered_in_its_stripe(&covers, iter.key(), snapshots)
        });
        if !dropped {
            writer.add(iter.key(), iter.meta(), iter.value())?;
        }
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

/// True when a range tombstone in `covers` newer than the entry `internal_key` covers it, and
/// no snapshot lies between the two (the oldest such tombstone is the one to ask: if a snapshot
/// separates it from the entry, one separates every newer one too).
fn covered_in_its_stripe(
    covers: &FragmentedRangeTombstones,
    internal_key: &[u8],
    snapshots: &[SeqNo],
) -> bool {
    let Some(parsed) = parse_internal_key(internal_key) else {
        return false;
    };
    let Some(fragment) = covers.fragment_at(parsed.user_key) else {
        return false;
    };
    // Versions are newest first: those newer than the entry are a prefix, its last the oldest.
    let newer = fragment
        .versions
        .partition_point(|v| v.seqno > parsed.seqno);
    let oldest_newer = newer
        .checked_sub(1)
        .and_then(|last| fragment.versions.get(last))
        .map(|v| v.seqno);
    let stripe = |seqno: SeqNo| snapshots.partition_point(|s| *s < seqno);
    oldest_newer.is_some_and(|tombstone| stripe(tombstone) == stripe(parsed.seqno))
}
