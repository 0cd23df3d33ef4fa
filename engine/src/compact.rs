//! Background compaction: pick with `cairn-compaction`'s picker, run a job, install its result.
//!
//! Up to `background_threads` compactions run at once. A running compaction holds its input
//! tables and the key range it writes at its output level; a pick that would touch either waits.
//! Outputs are written under temporary names, synced, renamed, and added by one MANIFEST edit that
//! also removes the inputs; the inputs' files are deleted once no reader's version holds them.

use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_compaction::job::{Grandparent, JobOutput, JobSpec, OutputFiles};
use cairn_compaction::picker::{FileInfo, LevelsView, Pick, PickerConfig, Reason};
use cairn_compaction::{BelowOracle, DropCounts, GcContext};
use cairn_fs::WritableFile;

use crate::error::{Error, Result};
use crate::filename;
use crate::futile::FutileRewrite;
use crate::inner::{DbInner, DbState, Running};
use crate::read_quiet::{MAX_READ_TRIGGERED_RANGES, ReadQuiet, within};
use crate::stats::CompactionCounts;
use crate::version::Version;
use crate::version_edit::{FileMeta, VersionEdit};

/// An output table is cut when it overlaps this many target file sizes of the level below
/// (`LevelDB`'s grandparent limit), so no later compaction of it rewrites too much.
const GRANDPARENT_OVERLAP_FACTOR: u64 = 10;

/// How long an idle compaction thread sleeps before looking again (grace periods and deadlines
/// end with time, not with an event).
const IDLE_POLL: Duration = Duration::from_millis(500);

impl DbInner {
    /// The loop of one compaction thread.
    pub(crate) fn run_compaction_thread(&self) {
        loop {
            let task = {
                let mut state = self.lock_state();
                loop {
                    if state.shutting_down {
                        return;
                    }
                    if let Some(task) = self.next_task(&mut state) {
                        break task;
                    }
                    let (guard, timed_out) = self
                        .state_changed
                        .wait_timeout(state, IDLE_POLL)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    state = guard;
                    if timed_out.timed_out() && state.sweep_pending {
                        // Readers that pinned old tables may be gone by now.
                        break Task::Sweep;
                    }
                }
            };
            match task {
                Task::Compact(running) => {
                    self.run_compaction_task(|| self.run_compaction(&running).map(drop));
                }
                other => self.run_task("background work", || match other {
                    Task::Sweep => {
                        self.delete_obsolete_files();
                        Ok(())
                    }
                    Task::Freeze => self.freeze_from_background(),
                    Task::RollManifest => self.roll_manifest_if_due(),
                    Task::Compact(_) => Ok(()),
                }),
            }
        }
    }

    /// What a compaction thread should do next, if anything. A freeze goes first, but only when
    /// no writer holds the write queue: with one, the request waits for that writer (who may be
    /// stalled on level 0, waiting for the compaction this thread picks instead).
    fn next_task(&self, state: &mut DbState) -> Option<Task> {
        if state.error.is_some() {
            return None;
        }
        if self.memtable_deadline_due(state) {
            state.freeze_requested = true;
        }
        if state.freeze_requested
            && state.imm.len() < self.options.max_immutable_memtables
            && self.writes.is_idle()
        {
            return Some(Task::Freeze);
        }
        if let Some(running) = self.pick_compaction(state) {
            return Some(Task::Compact(running));
        }
        // Last: the compactions the deadline forces come first, and each adds an edit.
        self.manifest_roll_due(state).then_some(Task::RollManifest)
    }

    /// Chooses a compaction for some column family and registers it as running.
    fn pick_compaction(&self, state: &mut DbState) -> Option<Running> {
        if self.options.compaction.disable_auto {
            return None;
        }
        let cfs: Vec<u32> = state.meta.cfs.keys().copied().collect();
        for cf in cfs {
            let read_triggered = state.read_triggered.get(&cf).cloned().unwrap_or_default();
            let config = self.picker_config(state, cf, &read_triggered);
            let pick = automatic_view(state, cf, &config).pick(&config);
            if !matches!(
                pick.as_ref().map(|p| p.reason),
                Some(
                    Reason::ReadTriggered
                        | Reason::Level0
                        | Reason::LevelSize
                        | Reason::Deadline
                        | Reason::TombstoneDensity
                )
            ) {
                // Nothing read-triggered is left to do for this family; reports of the same
                // ranges would find the same until something changes.
                if let Some(ranges) = state.read_triggered.remove(&cf) {
                    let previous = state.read_quiet.remove(&cf);
                    let quiet = ReadQuiet::after(previous, ranges, state.view_number, config.now);
                    state.read_quiet.insert(cf, quiet);
                }
            }
            let Some(pick) = pick else {
                continue;
            };
            if let Some(running) = state.register(cf, pick, config.now) {
                return Some(running);
            }
        }
        None
    }

    pub(crate) fn picker_config<'a>(
        &self,
        state: &DbState,
        cf: u32,
        read_triggered: &'a [(Bytes, Bytes)],
    ) -> PickerConfig<'a> {
        let options = state
            .meta
            .cfs
            .get(&cf)
            .map(|(_, o)| o.clone())
            .unwrap_or_default();
        let c = &self.options.compaction;
        PickerConfig {
            l0_trigger: c.l0_trigger,
            level_base_bytes: c.level_base_bytes,
            fan_out: self.options.compaction.fan_out,
            density_trigger: c.density_trigger,
            deadline_ms: self
                .options
                .delete_persistence_deadline
                .map(crate::clock::millis),
            grace_ms: crate::clock::millis(options.tombstone_grace),
            cf_ttl_ms: options.ttl.map(crate::clock::millis),
            now: self.options.clock.now_ms(),
            oldest_snapshot: self.snapshots.oldest(),
            read_triggered,
        }
    }

    /// True if the active memtables hold a tombstone that must reach a table now to meet the
    /// delete persistence deadline (its first stage, as the picker splits the deadline).
    fn memtable_deadline_due(&self, state: &DbState) -> bool {
        let Some(budget_ms) = self.options.deadline_stage_ms() else {
            return false;
        };
        let now = self.options.clock.now_ms();
        state.mem.tables.iter().any(|(cf, mem)| {
            let grace = state
                .meta
                .cfs
                .get(cf)
                .map_or(0, |(_, o)| crate::clock::millis(o.tombstone_grace));
            mem.oldest_tombstone_time().is_some_and(|t| {
                now >= cairn_compaction::rules::grace_end(t, grace).saturating_add(budget_ms)
            })
        })
    }

    /// Runs a registered compaction to the end, installing it or cleaning up after it. A
    /// compaction whose column family was dropped meanwhile is abandoned, not an error.
    pub(crate) fn run_compaction(&self, running: &Running) -> Result<Outcome> {
        let mut outputs = Outputs {
            db: self,
            numbers: Vec::new(),
        };
        // A panic (a compaction filter's, say) must not leave the compaction registered, or
        // `close` would wait for it forever: clean up, stop, and let the panic go on.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Some(tables) = self.movable_tables(running) {
                return self.install_move(running, &tables);
            }
            match self.compaction_job(running, &mut outputs) {
                Ok(Some(output)) => self.install_compaction(running, &outputs.numbers, &output),
                Ok(None) => Ok(Outcome::Abandoned),
                Err(e) if !self.cf_exists(running.cf) => {
                    tracing::debug!(cf = running.cf, error = %e, "compaction of a dropped family abandoned");
                    Ok(Outcome::Abandoned)
                }
                Err(e) => Err(e),
            }
        }));
        let (result, panic) = match result {
            Ok(result) => (result, None),
            Err(panic) => {
                let e = Error::Panicked("a compaction panicked".into());
                self.stop_with(&e);
                (Err(e), Some(panic))
            }
        };
        if !matches!(result, Ok(Outcome::Installed { .. })) {
            for &n in &outputs.numbers {
                let _ = self.fs.remove(&filename::temp_table_path(&self.dir, n));
            }
        }
        {
            let mut state = self.lock_state();
            state
                .compacting
                .retain(|r| !(r.cf == running.cf && r.pick == running.pick));
        }
        self.release_outputs(outputs.numbers.iter().copied());
        self.state_changed.notify_all();
        if let Some(panic) = panic {
            std::panic::resume_unwind(panic);
        }
        if result.is_ok() {
            self.delete_obsolete_files();
        }
        result
    }

    fn cf_exists(&self, cf: u32) -> bool {
        self.lock_state().meta.cfs.contains_key(&cf)
    }

    /// Runs the job; `None` if the column family is gone.
    fn compaction_job(
        &self,
        running: &Running,
        outputs: &mut Outputs<'_>,
    ) -> Result<Option<JobOutput>> {
        let sv = self.super_version();
        let Ok(cf_options) = sv.cf_options(running.cf) else {
            return Ok(None);
        };
        // Opened by their records, so each table's keys are held to its recorded bounds.
        let files: std::collections::HashMap<u64, &Arc<FileMeta>> = sv
            .version
            .cf(running.cf)
            .map(|v| v.all_files().map(|(_, f)| (f.number, f)).collect())
            .unwrap_or_default();
        // An input the version no longer records cannot be held to its bounds. Picked inputs
        // are marked as compacting, so no other job removes them: a missing one is a broken
        // invariant, refused before anything is written.
        let mut inputs = Vec::new();
        for n in running.pick.all_inputs() {
            let Some(file) = files.get(&n) else {
                return Err(Error::Corruption {
                    file: filename::table_path(&self.dir, n),
                    offset: 0,
                    reason: "a compaction input is missing from the current version".into(),
                });
            };
            inputs.push(self.tables.table(file)?);
        }
        let snapshots = self.snapshots.list();
        let below = Below {
            db: self,
            version: Arc::clone(&sv.version),
            cf: running.cf,
            output_level: running.pick.output_level,
        };
        let grandparents: Vec<Grandparent> = sv
            .version
            .cf(running.cf)
            .and_then(|v| v.levels.get(running.pick.output_level + 1))
            .map(|files| {
                files
                    .iter()
                    .map(|f| Grandparent {
                        smallest: f.smallest.clone(),
                        largest: f.largest.clone(),
                        size: f.file_size,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let cf_name = sv
            .cfs
            .get(&running.cf)
            .map(|(n, _)| n.clone())
            .unwrap_or_default();
        let ctx = GcContext {
            snapshots: &snapshots,
            now: running.now,
            grace_ms: crate::clock::millis(cf_options.tombstone_grace),
            max_versions: cf_options.max_versions,
            cf_ttl_ms: cf_options.ttl.map(crate::clock::millis),
            below: &below,
            filter: self
                .options
                .compaction_filter
                .as_deref()
                .map(|f| (f, cf_name.as_str())),
        };
        let target = self.options.compaction.target_file_size;
        let spec = JobSpec {
            inputs,
            ctx,
            table_options: self.options.table_options_for(running.pick.output_level),
            target_file_size: target,
            grandparents: &grandparents,
            max_grandparent_overlap: target.saturating_mul(GRANDPARENT_OVERLAP_FACTOR),
        };
        let output = cairn_compaction::job::run(spec, outputs).map_err(Error::from)?;
        tracing::debug!(
            reason = ?running.pick.reason,
            from = running.pick.input_level,
            to = running.pick.output_level,
            inputs = running.pick.all_inputs().count(),
            outputs = output.tables.len(),
            dropped = output.drops.total(),
            "compaction finished"
        );
        Ok(Some(output))
    }

    /// Renames the outputs into place and swaps them for the inputs in one MANIFEST edit.
    fn install_compaction(
        &self,
        running: &Running,
        numbers: &[u64],
        output: &JobOutput,
    ) -> Result<Outcome> {
        let mut new_files = Vec::with_capacity(output.tables.len());
        for (summary, &number) in output.tables.iter().zip(numbers) {
            self.fs
                .rename(&summary.path, &filename::table_path(&self.dir, number))?;
            new_files.push((
                running.cf,
                running.pick.output_level,
                crate::version_set::file_meta(number, summary),
            ));
        }
        if !new_files.is_empty() {
            self.fs.sync_dir(&self.dir)?;
        }
        let pick = &running.pick;
        let mut deleted_files: Vec<(u32, usize, u64)> = pick
            .inputs
            .iter()
            .map(|&n| (running.cf, pick.input_level, n))
            .collect();
        deleted_files.extend(
            pick.output_level_inputs
                .iter()
                .map(|&n| (running.cf, pick.output_level, n)),
        );
        let installed = self.log_and_apply(
            |state| {
                // A family dropped meanwhile: its tables (and these outputs) go with it.
                Ok(state
                    .meta
                    .cfs
                    .contains_key(&running.cf)
                    .then_some(VersionEdit {
                        new_files,
                        deleted_files,
                        ..VersionEdit::default()
                    }))
            },
            |state| {
                self.stats.note_compaction(output);
                note_futile_rewrite(state, running, numbers, output);
            },
        )?;
        Ok(if installed.is_some() {
            Outcome::Installed {
                dropped: output.drops,
                outputs: numbers.to_vec(),
            }
        } else {
            Outcome::Abandoned
        })
    }

    /// The input tables of `running` if it can be done by moving them down a level as they are,
    /// in one MANIFEST edit (the trivial move of LevelDB and `RocksDB`): a push down for size
    /// (never one asked for, or for tombstones, a deadline or expiry) whose inputs overlap
    /// nothing in the output level nor one another, whose level keeps the same compression, and
    /// where a rewrite could drop nothing (see [`rewrite_would_keep_all`](Self::rewrite_would_keep_all)).
    /// A table overlapping too much of the level below its new one is rewritten instead, as a
    /// compaction's output would be cut there.
    fn movable_tables(&self, running: &Running) -> Option<Vec<Arc<FileMeta>>> {
        let pick = &running.pick;
        let compression = &self.options.compression;
        if !matches!(pick.reason, Reason::Level0 | Reason::LevelSize)
            || pick.input_level == pick.output_level
            || !pick.output_level_inputs.is_empty()
            || self.options.compaction_filter.is_some()
            || compression.at(pick.input_level) != compression.at(pick.output_level)
        {
            return None;
        }
        let sv = self.super_version();
        let cf_options = sv.cf_options(running.cf).ok()?;
        if cf_options.ttl.is_some() || cf_options.max_versions != 1 {
            return None;
        }
        let version = sv.version.cf(running.cf)?;
        let mut tables: Vec<Arc<FileMeta>> = version
            .levels
            .get(pick.input_level)?
            .iter()
            .filter(|f| pick.inputs.contains(&f.number))
            .cloned()
            .collect();
        if tables.len() != pick.inputs.len()
            || !tables.iter().all(|f| self.rewrite_would_keep_all(f))
        {
            return None;
        }
        tables.sort_by(|a, b| a.smallest.cmp(&b.smallest));
        if tables
            .windows(2)
            .any(|w| matches!(w, [a, b] if a.largest >= b.smallest))
        {
            return None;
        }
        let target = self.options.compaction.target_file_size;
        let limit = target.saturating_mul(GRANDPARENT_OVERLAP_FACTOR);
        let fits = tables.iter().all(|f| {
            overlap_bytes(version, pick.output_level, f) == 0
                && overlap_bytes(version, pick.output_level + 1, f) <= limit
        });
        fits.then_some(tables)
    }

    /// True if rewriting `table` alone could drop nothing from it: it holds no tombstone, no
    /// value with a TTL, and no key twice (no older version within the table; a flush writes
    /// every version its memtable held; moved whole to the last level, the older ones would
    /// stay there for good).
    /// A table that cannot be opened, or from before tables counted their older versions, is
    /// rewritten.
    fn rewrite_would_keep_all(&self, table: &FileMeta) -> bool {
        table.num_point_tombstones + table.num_range_tombstones == 0
            && table.earliest_expiry.is_none()
            && self
                .tables
                .table(table)
                .is_ok_and(|t| t.properties().older_versions == Some(0))
    }

    /// Moves `tables` from the pick's input level to its output level in one MANIFEST edit.
    /// The tables are checked again against the version the edit applies to: if another change
    /// took one away or put a table in the way, the move is abandoned (a later pick redoes it)
    /// rather than recorded against a version it no longer fits.
    fn install_move(&self, running: &Running, tables: &[Arc<FileMeta>]) -> Result<Outcome> {
        let pick = &running.pick;
        let deleted_files = tables
            .iter()
            .map(|f| (running.cf, pick.input_level, f.number))
            .collect();
        let new_files = tables
            .iter()
            .map(|f| (running.cf, pick.output_level, FileMeta::clone(f)))
            .collect();
        let installed = self.log_and_apply(
            |state| {
                let fits = state.meta.version.cf(running.cf).is_some_and(|v| {
                    tables.iter().all(|f| {
                        v.levels
                            .get(pick.input_level)
                            .is_some_and(|l| l.iter().any(|g| g.number == f.number))
                            && overlap_bytes(v, pick.output_level, f) == 0
                    })
                });
                Ok(fits.then_some(VersionEdit {
                    new_files,
                    deleted_files,
                    ..VersionEdit::default()
                }))
            },
            |_| self.stats.note_trivial_move(tables.len()),
        )?;
        if installed.is_none() {
            return Ok(Outcome::Abandoned);
        }
        tracing::debug!(
            from = pick.input_level,
            to = pick.output_level,
            tables = tables.len(),
            "tables moved down a level"
        );
        Ok(Outcome::Installed {
            dropped: DropCounts::default(),
            outputs: Vec::new(),
        })
    }

    /// Flushes the memtables, then compacts `range` of `cf` as [`compact_tables`](Self::compact_tables) does.
    pub(crate) fn compact_range(&self, cf: u32, range: (Bound<Bytes>, Bound<Bytes>)) -> Result<()> {
        self.flush()?;
        self.compact_tables(cf, &range).map(drop)
    }

    /// Compacts every table of `cf` overlapping `range` down to the last level, and rewrites the
    /// last level's overlapping tables in place so every tombstone that can go does. Memtables
    /// are left alone. Returns what the compactions this call ran read and dropped (not those
    /// of a background compaction that took some of the tables first).
    pub(crate) fn compact_tables(
        &self,
        cf: u32,
        range: &(Bound<Bytes>, Bound<Bytes>),
    ) -> Result<CompactionCounts> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let mut counts = CompactionCounts::default();
        let mut written = std::collections::HashSet::new();
        let last = crate::options::NUM_LEVELS - 1;
        for level in 0..=last {
            loop {
                let mut state = self.lock_state();
                state.check_running()?;
                let view = state.levels_view(cf);
                let Some((start, end)) = bounds_in(&view, range) else {
                    break;
                };
                let config = self.picker_config(&state, cf, &[]);
                let overlapping = view.levels.get(level).is_some_and(|files| {
                    files
                        .iter()
                        .any(|f| f.smallest <= end && f.largest >= start)
                });
                if !overlapping {
                    break;
                }
                let running = view
                    .pick_manual(level, &start, &end, &config)
                    .and_then(|pick| state.register(cf, pick, config.now));
                let Some(running) = running else {
                    // Busy with another compaction: wait for it.
                    drop(self.state_changed.wait_timeout(state, IDLE_POLL));
                    continue;
                };
                // Entries of tables an earlier step of this call wrote were counted already.
                counts.entries_read += state.entries_in(cf, &running.pick, &written);
                drop(state);
                if let Outcome::Installed { dropped, outputs } = self.run_compaction(&running)? {
                    counts.dropped.add(&dropped);
                    written.extend(outputs);
                }
                break;
            }
        }
        // A background compaction may have taken some of the range's tables first: once it
        // ends, its inputs are swept too, so nothing the rules let go is left on disk. Only
        // those running now over this range are waited for: under steady writes the family
        // always has another compaction running, and waiting for all of them may never end.
        let mut state = self.lock_state();
        // Judged on the range itself, not the tables left in it: one that took them all and
        // installed its output may still be ending, holding the version that names them.
        let taken: std::collections::HashSet<u64> = state
            .compacting
            .iter()
            .filter(|r| r.cf == cf && overlaps(range, &r.start, &r.end))
            .flat_map(|r| r.pick.all_inputs())
            .collect();
        while state
            .compacting
            .iter()
            .any(|r| r.cf == cf && r.pick.all_inputs().any(|n| taken.contains(&n)))
        {
            state.check_running()?;
            state = self
                .state_changed
                .wait_timeout(state, IDLE_POLL)
                .map_or_else(|e| e.into_inner().0, |(guard, _)| guard);
        }
        drop(state);
        self.delete_obsolete_files();
        Ok(counts)
    }

    /// Waits until flushes are done and no compaction is running or would be picked.
    pub(crate) fn wait_for_background_work(&self) -> Result<()> {
        if self.read_only {
            return Ok(()); // There is none.
        }
        loop {
            self.wait_for_flushes()?;
            self.state_changed.notify_all();
            let state = self.lock_state();
            state.check_running()?;
            let idle = state.imm.is_empty()
                && state.compacting.is_empty()
                && !self.memtable_deadline_due(&state)
                && !state.freeze_requested
                && !self.manifest_roll_due(&state)
                && (self.options.compaction.disable_auto
                    || state.meta.cfs.keys().all(|&cf| {
                        let read_triggered =
                            state.read_triggered.get(&cf).cloned().unwrap_or_default();
                        let config = self.picker_config(&state, cf, &read_triggered);
                        automatic_view(&state, cf, &config).pick(&config).is_none()
                    }));
            if idle {
                drop(state);
                // Work is done; files older readers held may have been left for a later sweep.
                self.delete_obsolete_files();
                return Ok(());
            }
            drop(
                self.state_changed
                    .wait_timeout(state, Duration::from_millis(50)),
            );
        }
    }

    /// Notes a key range where a scan stepped over `tombstones` tombstones.
    pub(crate) fn report_tombstone_scan(&self, cf: u32, start: Bytes, end: Bytes, tombstones: u64) {
        let mut state = self.lock_state();
        // Tombstones still in the active memtable are out of compaction's reach until flushed,
        // whether or not the range is news.
        let in_memtable = state
            .mem
            .tables
            .get(&cf)
            .map_or(0, |m| m.num_point_tombstones() + m.num_range_tombstones());
        let freeze = state.imm.is_empty()
            && !state.freeze_requested
            && in_memtable >= self.options.compaction.read_trigger / 2;
        state.freeze_requested |= freeze;
        let now_ms = self.options.clock.now_ms();
        let view = state.view_number;
        let pending = state
            .read_triggered
            .get(&cf)
            .is_some_and(|ranges| within(ranges, &start, &end));
        let quiet = state
            .read_quiet
            .get(&cf)
            .is_some_and(|q| q.covers(view, now_ms, &start, &end));
        if pending || quiet {
            // Already waiting for a pick, or a pick would find nothing: no news for the picker.
            drop(state);
            if freeze {
                self.state_changed.notify_all();
            }
            return;
        }
        self.stats.note_read_trigger();
        let ranges = state.read_triggered.entry(cf).or_default();
        if ranges.is_empty() {
            // Once per episode: until the reported ranges are compacted, further reports are quiet.
            // Routine (a purge sets it off), so not a warning.
            tracing::info!(
                cf,
                start = ?String::from_utf8_lossy(&start),
                end = ?String::from_utf8_lossy(&end),
                tombstones,
                "a scan stepped over many tombstones; compacting the range"
            );
        }
        if ranges.len() < MAX_READ_TRIGGERED_RANGES {
            ranges.push((start, end));
        }
        drop(state);
        self.state_changed.notify_all();
    }
}

impl DbState {
    /// The point entries of `pick`'s inputs, leaving out the tables numbered in `skip`.
    fn entries_in(&self, cf: u32, pick: &Pick, skip: &std::collections::HashSet<u64>) -> u64 {
        let Some(version) = self.meta.version.cf(cf) else {
            return 0;
        };
        version
            .all_files()
            .filter(|(_, f)| !skip.contains(&f.number) && pick.all_inputs().any(|n| n == f.number))
            .map(|(_, f)| f.num_entries)
            .sum()
    }

    /// Registers `pick`, chosen at time `now`, as running unless it conflicts with one that is.
    fn register(&mut self, cf: u32, pick: Pick, now: u64) -> Option<Running> {
        let files: Vec<&Arc<FileMeta>> = self
            .meta
            .version
            .cf(cf)?
            .all_files()
            .filter(|(_, f)| pick.all_inputs().any(|n| n == f.number))
            .map(|(_, f)| f)
            .collect();
        let start = files.iter().map(|f| f.smallest.clone()).min()?;
        let end = files.iter().map(|f| f.largest.clone()).max()?;
        let running = Running {
            cf,
            pick,
            now,
            start,
            end,
        };
        if self.compacting.iter().any(|r| r.conflicts(&running)) {
            return None;
        }
        self.compacting.push(running.clone());
        Some(running)
    }

    /// What the picker sees of `cf`.
    pub(crate) fn levels_view(&self, cf: u32) -> LevelsView {
        let busy: std::collections::HashSet<u64> = self
            .compacting
            .iter()
            .flat_map(|r| r.pick.all_inputs())
            .collect();
        let levels = self
            .meta
            .version
            .cf(cf)
            .map(|v| {
                v.levels
                    .iter()
                    .map(|files| {
                        files
                            .iter()
                            .map(|f| file_info(f, busy.contains(&f.number)))
                            .collect()
                    })
                    .collect()
            })
            .unwrap_or_default();
        LevelsView { levels }
    }
}

enum Task {
    Sweep,
    Freeze,
    Compact(Running),
    RollManifest,
}

/// How a compaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Installed: what the job dropped, and the numbers of the tables it wrote.
    Installed {
        dropped: DropCounts,
        outputs: Vec<u64>,
    },
    /// Its column family was dropped: nothing installed, outputs deleted.
    Abandoned,
}

/// The user-key bounds of `range` clipped to what the view holds: `None` if it holds nothing.
fn bounds_in(view: &LevelsView, range: &(Bound<Bytes>, Bound<Bytes>)) -> Option<(Bytes, Bytes)> {
    let files = view.levels.iter().flatten();
    let lowest = files.clone().map(|f| f.smallest.clone()).min()?;
    let highest = files.map(|f| f.largest.clone()).max()?;
    let start = match &range.0 {
        Bound::Included(k) | Bound::Excluded(k) => k.clone().max(lowest),
        Bound::Unbounded => lowest,
    };
    let end = match &range.1 {
        Bound::Included(k) | Bound::Excluded(k) => k.clone().min(highest),
        Bound::Unbounded => highest,
    };
    (start <= end).then_some((start, end))
}

/// Remembers the outputs of an automatic rewrite in place at the last level, so the picker does
/// not choose them again for their tombstones until the oldest snapshot differs from the one
/// the job judged by, or the clock reaches the first grace end the job kept; forgets tables no
/// longer live.
fn note_futile_rewrite(
    state: &mut DbState,
    running: &Running,
    numbers: &[u64],
    output: &JobOutput,
) {
    let live = state.meta.version.live_files();
    state.futile.retain(|n, _| live.contains(n));
    let pick = &running.pick;
    let in_place = pick.input_level == pick.output_level;
    if !in_place || pick.reason == Reason::Manual {
        return;
    }
    // The job dropped all it could: nothing left at the last level can go before a snapshot
    // it judged by is released or the first grace it kept ends. (Marking only rewrites that
    // dropped nothing let every expiry lift the mark, and the next rewrite, which dropped the
    // expired value, went unmarked: two rewrites of the table per expiry.)
    let guard = FutileRewrite {
        oldest_snapshot: output.oldest_snapshot,
        retry_at: output.next_change.unwrap_or(u64::MAX),
        // Expired puts it had to keep would send the TTL picker back to it at once.
        ttl_retry_at: (output.kept_expired > 0).then(|| output.next_expiry.unwrap_or(u64::MAX)),
    };
    for &n in numbers {
        state.futile.insert(n, guard);
    }
}

/// What the background picker sees of `cf`: the tables, with the ones a futile rewrite left
/// marked so.
fn automatic_view(state: &DbState, cf: u32, config: &PickerConfig<'_>) -> LevelsView {
    let mut view = state.levels_view(cf);
    for file in view.levels.iter_mut().flatten() {
        let guard = state.futile.get(&file.number);
        file.futile = guard.is_some_and(|f| f.holds(config.oldest_snapshot, config.now));
        file.futile_for_ttl =
            guard.is_some_and(|f| f.holds_for_ttl(config.oldest_snapshot, config.now));
    }
    view
}

/// The picker's view of a table.
fn file_info(f: &FileMeta, busy: bool) -> FileInfo {
    FileInfo {
        number: f.number,
        size: f.file_size,
        smallest: f.smallest.clone(),
        largest: f.largest.clone(),
        smallest_seqno: f.smallest_seqno,
        largest_seqno: f.largest_seqno,
        num_tombstones: f.num_point_tombstones + f.num_range_tombstones,
        oldest_tombstone_time: f.oldest_tombstone_time,
        smallest_tombstone_seqno: f.smallest_tombstone_seqno,
        max_tombstones_in_window: f.max_tombstones_in_window,
        earliest_expiry: f.earliest_expiry,
        oldest_write_time: f.oldest_write_time,
        being_compacted: busy,
        futile: false,
        futile_for_ttl: false,
    }
}

/// What lies below a compaction's output level, from the version it started with.
struct Below<'a> {
    db: &'a DbInner,
    version: Arc<Version>,
    cf: u32,
    output_level: usize,
}

impl Below<'_> {
    fn deeper_files(&self) -> impl Iterator<Item = &Arc<FileMeta>> {
        let output_level = self.output_level;
        self.version
            .cf(self.cf)
            .into_iter()
            .flat_map(move |v| v.levels.iter().skip(output_level + 1).flatten())
    }
}

impl BelowOracle for Below<'_> {
    fn key_may_exist_below(&self, user_key: &[u8]) -> bool {
        self.deeper_files().any(|f| {
            f.may_contain_key(user_key)
                // The bloom filter turns "in range" into "probably holds it"; a table that cannot
                // be opened counts as holding it, which only keeps a tombstone longer. (A range
                // tombstone below is no older version: nothing it could bring back.)
                && self.db.tables.table(f).map_or(true, |t| t.may_contain(user_key))
        })
    }

    fn range_may_exist_below(&self, start: &[u8], end: &[u8]) -> bool {
        self.deeper_files().any(|f| f.overlaps(start, Some(end)))
    }
}

/// Creates output files under temporary names with fresh numbers.
struct Outputs<'a> {
    db: &'a DbInner,
    numbers: Vec<u64>,
}

impl OutputFiles for Outputs<'_> {
    fn create(&mut self, _index: usize) -> cairn_fs::Result<Box<dyn WritableFile>> {
        let number = self.db.new_output_number();
        self.numbers.push(number);
        self.db
            .fs
            .create(&filename::temp_table_path(&self.db.dir, number))
    }
}

/// Whether the user keys `[start, end]` meet `range`.
fn overlaps(range: &(Bound<Bytes>, Bound<Bytes>), start: &Bytes, end: &Bytes) -> bool {
    let after_start = match &range.0 {
        Bound::Included(s) => end >= s,
        Bound::Excluded(s) => end > s,
        Bound::Unbounded => true,
    };
    let before_end = match &range.1 {
        Bound::Included(e) => start <= e,
        Bound::Excluded(e) => start < e,
        Bound::Unbounded => true,
    };
    after_start && before_end
}

/// Bytes of the tables of `level` that overlap `table`'s keys.
fn overlap_bytes(version: &crate::version::CfVersion, level: usize, table: &FileMeta) -> u64 {
    version
        .levels
        .get(level)
        .into_iter()
        .flatten()
        .filter(|g| g.smallest <= table.largest && g.largest >= table.smallest)
        .map(|g| g.file_size)
        .sum()
}
