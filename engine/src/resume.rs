//! Recovering from a transient I/O error without losing an acknowledged write, as RocksDB does
//! for retryable I/O errors.
//!
//! A failed log or MANIFEST write or sync, or a failed flush or compaction, stops the database
//! (`DbState::stop`): writes are refused, no edit is written and nothing is deleted. The files
//! are then uncertain: a failed sync may have dropped the log's unsynced pages (Linux does,
//! after a writeback error), so writes acknowledged before it may be in no file, though the
//! memtables still hold every one; and the MANIFEST may end in an edit the state lacks.
//! Recovery trusts neither file. It
//!
//! 1. waits for background work in flight to end (a stopped database starts none), then takes
//!    the MANIFEST lock and a turn of the write queue alone, so nothing else writes;
//! 2. writes every memtable, frozen and active, to level-0 tables, each synced under its
//!    final name;
//! 3. creates a new log and syncs the directory (after the tables, so an attempt that fails
//!    writing them leaves no empty log behind);
//! 4. writes a fresh MANIFEST holding the state with those tables and the new log as the
//!    oldest to replay, syncs it, and points `CURRENT` at it durably;
//! 5. only then installs the new state, clears the stop and lets writes resume; the sweep
//!    then deletes the old logs, the old MANIFEST and any table a failed job left.
//!
//! A crash at any point before step 4 completes reopens from the old `CURRENT`: the old
//! MANIFEST and every log it names are still there (nothing was deleted), so reopening
//! restores what the old files hold, as it would have without recovery.
//!
//! By default the flush thread recovers on its own, with a few attempts spaced by a doubling
//! backoff ([`Options::auto_recovery`](crate::Options::auto_recovery));
//! [`Db::resume`](crate::Db::resume) asks for one attempt now. A failure that is not an I/O error
//! (corruption, a panic, sequence numbers used up), or one that persists past the attempts,
//! keeps the database stopped with the first error.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cairn_wal::LogWriter;

use crate::error::{Error, Result};
use crate::filename;
use crate::flush::write_table;
use crate::inner::DbInner;
use crate::live_logs::LiveLogs;
use crate::manifest::ManifestWriter;
use crate::super_version::MemSet;
use crate::version_edit::{FileMeta, VersionEdit};

/// Planted bug: recovery trusts the old log to hold what the memtables hold, so it writes no
/// table and keeps the memtables; reads look right until the next open has only the new log.
fn skips_flush() -> bool {
    crate::planted::active(crate::planted::Bug::RecoverySkipsFlush)
}

/// Automatic recovery attempts after one stop before the database stays stopped.
pub(crate) const MAX_AUTO_ATTEMPTS: u32 = 6;

/// A recovery from a compaction's stop this soon after the one before counts toward
/// [`MAX_AUTO_ATTEMPTS`] quick ones in a row, after which the stop is taken for persistent and
/// automatic recovery ends.
const QUICK_RECOVERY: Duration = Duration::from_secs(60);

/// The wait before the first automatic attempt; it doubles for each later one.
const FIRST_BACKOFF: Duration = Duration::from_millis(20);

impl DbInner {
    /// Recovers from a stop caused by an I/O error (see the module doc). `Ok` at once if the
    /// database is running.
    ///
    /// # Errors
    /// `ReadOnly`; `Stopped` when the stop's cause is not an I/O error, or the database is
    /// closing; the I/O error of a failed attempt (the database stays stopped with its first
    /// error).
    pub(crate) fn resume(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        {
            let state = self.lock_state();
            match &state.error {
                None => return Ok(()),
                Some(cause) if !cause.is_recoverable() => return Err(Error::stopped(cause)),
                Some(_) => {}
            }
        }
        self.wait_for_jobs_in_flight()?;
        let recovered =
            self.run_exclusive(Box::new(|db: &DbInner| db.recover_alone(false).map(|()| 0)));
        recovered?;
        self.delete_obsolete_files();
        Ok(())
    }

    /// Waits until no flush, compaction or sweep is running: each ends soon once the database
    /// has stopped (its edit is refused), and none starts while it stays stopped.
    fn wait_for_jobs_in_flight(&self) -> Result<()> {
        let mut state = self.lock_state();
        while state.flushing || !state.compacting.is_empty() || state.sweeps > 0 {
            if state.shutting_down {
                return Err(Error::closed());
            }
            state = self
                .state_changed
                .wait_timeout(state, Duration::from_millis(50))
                .map_or_else(|e| e.into_inner().0, |(guard, _)| guard);
        }
        Ok(())
    }

    /// Steps 2–5 of the module doc; run as the write queue's leader, alone, or by `shutdown`
    /// (`closing`) once the queue is drained and the background threads are gone.
    pub(crate) fn recover_alone(&self, closing: bool) -> Result<()> {
        let mut manifest = self.lock_manifest();
        let (log_number, memsets, cfs) = {
            let mut state = self.lock_state();
            let Some(cause) = &state.error else {
                return Ok(());
            };
            // A job cannot start while the database is stopped, but one may still be ending:
            // the caller tries again later.
            if !cause.is_recoverable() || state.flushing || !state.compacting.is_empty() {
                return Err(Error::stopped(cause));
            }
            if state.shutting_down && !closing {
                return Err(Error::closed());
            }
            let mut memsets: Vec<Arc<MemSet>> = state.imm.iter().cloned().collect();
            memsets.push(Arc::clone(&state.mem));
            let cfs: Vec<u32> = state.meta.cfs.keys().copied().collect();
            (state.take_file_number(), memsets, cfs)
        };
        let mut numbers = Vec::new();
        let written = self.write_memsets(&memsets, &cfs, &mut numbers);
        let installed = written.and_then(|new_files| {
            let mut log = LogWriter::new(self.create_log(log_number)?);
            log.begin()?;
            self.install_recovered(&mut manifest, log_number, new_files, &cfs)
                .map(|()| log)
        });
        self.release_outputs(numbers);
        let log = installed?;
        // The closed logs go unsynced: their writes are in the tables just written.
        *self.lock_wal() = LiveLogs::new(log);
        let mut state = self.lock_state();
        // Everything acknowledged is in synced tables now.
        self.durable_seqno
            .fetch_max(self.visible_seqno.load(Ordering::Acquire), Ordering::AcqRel);
        state.error = None;
        state.recovery_attempts = 0;
        // Stops a write or a flush met are transient faults, recovered from each time; a
        // compaction failing again as soon as the stop is cleared is not.
        let now = std::time::Instant::now();
        let quick = state
            .last_recovery
            .is_some_and(|t| now.duration_since(t) < QUICK_RECOVERY);
        state.quick_recoveries = match (state.stopped_by_compaction, quick) {
            (false, _) => 0,
            (true, true) => state.quick_recoveries + 1,
            (true, false) => 1,
        };
        state.last_recovery = Some(now);
        self.stats.note_recovery();
        drop(state);
        self.state_changed.notify_all();
        tracing::info!("recovered from the I/O error: memtables flushed, writes resume");
        Ok(())
    }

    /// The new log, durable under its name. One whose directory sync failed is removed again
    /// (it is empty and nothing names it), so a failed attempt leaves no log for the next open
    /// to take for the newest.
    fn create_log(&self, number: u64) -> Result<Box<dyn cairn_fs::WritableFile>> {
        let path = filename::log_path(&self.dir, number);
        let log = self.fs.create(&path)?;
        if let Err(e) = self.fs.sync_dir(&self.dir) {
            drop(log);
            let _ = self.fs.remove(&path);
            return Err(e.into());
        }
        Ok(log)
    }

    /// Writes every memtable of `memsets` of the families `cfs`, oldest first, as level-0
    /// tables; their numbers go in `numbers` (protected from the sweep until released).
    fn write_memsets(
        &self,
        memsets: &[Arc<MemSet>],
        cfs: &[u32],
        numbers: &mut Vec<u64>,
    ) -> Result<Vec<(u32, usize, FileMeta)>> {
        let mut new_files = Vec::new();
        if skips_flush() {
            return Ok(new_files);
        }
        for memset in memsets {
            for (&cf, mem) in &memset.tables {
                // A family dropped while its memtable waited for a flush has no level to add to.
                if mem.is_empty() || !cfs.contains(&cf) {
                    continue;
                }
                let number = self.new_output_number();
                numbers.push(number);
                let options = self.options.table_options_for(0);
                let file = write_table(
                    self.fs.as_ref(),
                    &self.dir,
                    &options,
                    mem,
                    number,
                    self.flush_snapshots().as_deref(),
                )?;
                self.stats.note_table_written(file.file_size);
                new_files.push((cf, 0, file));
            }
        }
        Ok(new_files)
    }

    /// Writes a fresh MANIFEST holding the state with `new_files` and `log_number` as the
    /// oldest log to replay, points `CURRENT` at it, and installs that state with empty
    /// memtables on the new log.
    fn install_recovered(
        &self,
        manifest: &mut ManifestWriter,
        log_number: u64,
        new_files: Vec<(u32, usize, FileMeta)>,
        cfs: &[u32],
    ) -> Result<()> {
        let (number, next) = {
            let mut state = self.lock_state();
            let number = state.take_file_number();
            let edit = VersionEdit {
                log_number: Some(log_number),
                new_files,
                next_file_number: Some(state.meta.next_file_number),
                last_seqno: Some(self.visible_seqno.load(Ordering::Acquire)),
                ..VersionEdit::default()
            };
            let mut next = state.meta.clone();
            next.apply(&edit, manifest.next_edit_at())?;
            (number, next)
        };
        let fresh = ManifestWriter::create(self.fs.as_ref(), &self.dir, number, &next)?;
        *manifest = fresh;
        let mut state = self.lock_state();
        let handed_out = state.meta.next_file_number;
        state.meta = next;
        state.meta.next_file_number = state.meta.next_file_number.max(handed_out);
        state.manifest_number = number;
        state.manifest_oldest_edit = None;
        if !skips_flush() {
            state.imm.clear();
            state.mem = Arc::new(MemSet::new(log_number, cfs.iter().copied()));
        }
        self.install_super_version(&mut state);
        Ok(())
    }

    /// The flush thread's part: whether an automatic attempt is due after a stop.
    pub(crate) fn auto_recovery_due(&self, state: &crate::inner::DbState) -> bool {
        self.options.auto_recovery
            && !state.shutting_down
            && state.recovery_attempts < MAX_AUTO_ATTEMPTS
            && state.quick_recoveries < MAX_AUTO_ATTEMPTS
            && state
                .error
                .as_ref()
                .is_some_and(crate::error::StopCause::is_recoverable)
    }

    /// One automatic attempt, after its backoff (cut short by shutdown).
    pub(crate) fn auto_recover(&self) {
        let attempt = {
            let mut state = self.lock_state();
            state.recovery_attempts += 1;
            state.recovery_attempts
        };
        let backoff = FIRST_BACKOFF.saturating_mul(1 << (attempt - 1).min(10));
        let deadline = std::time::Instant::now() + backoff;
        let mut state = self.lock_state();
        while !state.shutting_down {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .state_changed
                .wait_timeout(state, left)
                .map_or_else(|e| e.into_inner().0, |(guard, _)| guard);
        }
        drop(state);
        let resumed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.resume()))
            .unwrap_or_else(|_| {
                Err(Error::Panicked(
                    "recovery from an I/O error panicked".into(),
                ))
            });
        match resumed {
            Ok(()) => {}
            Err(e) if attempt >= MAX_AUTO_ATTEMPTS => tracing::error!(
                error = %e,
                attempts = attempt,
                "recovery from the I/O error failed; the database stays stopped (Db::resume \
                 tries again)"
            ),
            Err(e) => tracing::warn!(error = %e, attempt, "recovery from the I/O error failed"),
        }
    }
}
