//! The version set: the MANIFEST state and the files of the directory, as LevelDB's
//! `version_set` keeps them. It installs version edits (the one way the set of tables and
//! column families changes), rolls the MANIFEST over, hands out file numbers, records a new
//! table's metadata, and deletes the files nothing needs any more. The versions themselves are
//! in `version`, their edits in `version_edit`, the MANIFEST file in `manifest`.
//!
//! ## Installing an edit
//!
//! An edit is built under the state lock, written and synced to the MANIFEST under the MANIFEST
//! lock alone — so the writes, which take the state lock to find room, go on meanwhile — and then
//! applied and published under the state lock. The MANIFEST lock serialises edits, so the
//! version an edit was built against is still current when it is applied.
//!
//! After a failed MANIFEST write or sync the file may hold an edit the state lacks, and a later
//! edit's sync would make it durable: the database stops, and no further edit is written.
//!
//! The MANIFEST rolls over — a new one holding a snapshot of the state, `CURRENT` swapped to it
//! durably, the old one deleted — once it outgrows `Options::max_manifest_bytes`, and, with a
//! delete persistence deadline, once its oldest edit is a deadline stage old: old edits record
//! the smallest and largest keys of tables long gone, deleted keys among them.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use cairn_sstable::TableSummary;

use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::inner::{DbInner, DbState};
use crate::manifest::ManifestWriter;
use crate::version_edit::{FileMeta, VersionEdit, record_of};

impl DbInner {
    /// Writes one version edit to the MANIFEST and installs it.
    ///
    /// `prepare` runs under the state lock and returns the edit to write (`None`: nothing to do,
    /// and `finish` does not run). `finish` runs under the state lock once the edit is applied,
    /// before the new read view is published, and its result is returned.
    ///
    /// # Errors
    /// `Stopped` if an earlier failure stopped the database; `prepare`'s error; `Corruption` if
    /// the edit does not apply to the current version (nothing is written then); `Io` if the
    /// MANIFEST write or sync fails, which stops the database.
    pub(crate) fn log_and_apply<T>(
        &self,
        prepare: impl FnOnce(&mut DbState) -> Result<Option<VersionEdit>>,
        finish: impl FnOnce(&mut DbState) -> T,
    ) -> Result<Option<T>> {
        let mut manifest = self.lock_manifest();
        let (edit, mut next) = {
            let mut state = self.lock_state();
            if let Some(cause) = &state.error
                && !crate::planted::active(crate::planted::Bug::DeleteAfterManifestFailure)
            {
                return Err(Error::stopped(cause));
            }
            let Some(mut edit) = prepare(&mut state)? else {
                return Ok(None);
            };
            edit.next_file_number = Some(state.meta.next_file_number);
            edit.last_seqno = Some(self.visible_seqno.load(Ordering::Acquire));
            // Applied to a copy first: an edit that does not apply is never written.
            let mut next = state.meta.clone();
            next.apply(&edit, manifest.next_edit_at())
                .map_err(refused_before_writing)?;
            (edit, next)
        };
        if let Err(e) = manifest.append(&edit, self.fs.as_ref()) {
            self.stop_with(&e);
            return Err(e);
        }
        let mut state = self.lock_state();
        // Numbers handed out while the edit was written stay handed out.
        next.next_file_number = next.next_file_number.max(state.meta.next_file_number);
        state.meta = next;
        state
            .manifest_oldest_edit
            .get_or_insert_with(|| self.options.clock.now_ms());
        let result = finish(&mut state);
        self.install_super_version(&mut state);
        drop(state);
        self.state_changed.notify_all();
        if manifest.outgrown(self.options.max_manifest_bytes) {
            // The edit is durable and installed whatever happens here; a failure stops the
            // database (the next operation reports it).
            if let Err(e) = self.roll_manifest(&mut manifest) {
                self.stop_with(&e);
            }
        }
        Ok(Some(result))
    }

    /// True when the delete persistence deadline wants the MANIFEST rolled over: its oldest
    /// edit past the snapshot is a deadline stage old (the stages the picker splits the deadline
    /// into; the rollover is the last). A compaction that erased a deleted key left the key in
    /// the records of the tables it replaced; the rollover drops those records.
    pub(crate) fn manifest_roll_due(&self, state: &DbState) -> bool {
        let Some(stage_ms) = self.options.deadline_stage_ms() else {
            return false;
        };
        state
            .manifest_oldest_edit
            .is_some_and(|t| self.options.clock.now_ms() >= t.saturating_add(stage_ms))
    }

    /// Rolls the MANIFEST over if the deadline wants it (background work).
    pub(crate) fn roll_manifest_if_due(&self) -> Result<()> {
        let mut manifest = self.lock_manifest();
        {
            let state = self.lock_state();
            if state.error.is_some() || !self.manifest_roll_due(&state) {
                return Ok(());
            }
        }
        self.roll_manifest(&mut manifest)
            .inspect_err(|e| self.stop_with(e))
    }

    /// Starts a new MANIFEST holding a snapshot of the state, points `CURRENT` at it durably,
    /// and deletes the old one. The caller holds the MANIFEST lock, so the snapshot is current.
    fn roll_manifest(&self, manifest: &mut ManifestWriter) -> Result<()> {
        let (number, snapshot) = {
            let mut state = self.lock_state();
            let number = state.take_file_number();
            (number, state.meta.clone())
        };
        let fresh = ManifestWriter::create(self.fs.as_ref(), &self.dir, number, &snapshot)?;
        let old = std::mem::replace(manifest, fresh);
        {
            let mut state = self.lock_state();
            state.manifest_number = number;
            state.manifest_oldest_edit = None;
        }
        tracing::debug!(from = old.number(), to = number, "MANIFEST rolled over");
        match self.fs.remove(old.path()) {
            // The sweep may have got there first.
            Err(e) if !e.is_not_found() => {
                tracing::warn!(file = %old.path().display(), error = %e, "could not delete an old MANIFEST");
            }
            _ => {}
        }
        Ok(())
    }

    /// A number for a table about to be written; it is protected from deletion until
    /// [`release_outputs`](Self::release_outputs).
    pub(crate) fn new_output_number(&self) -> u64 {
        let mut state = self.lock_state();
        let number = state.take_file_number();
        state.pending_outputs.insert(number);
        number
    }

    pub(crate) fn release_outputs(&self, numbers: impl IntoIterator<Item = u64>) {
        let mut state = self.lock_state();
        for n in numbers {
            state.pending_outputs.remove(&n);
        }
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
    fn sweep_files(&self, keep: &HashSet<u64>, next_number: u64, min_log: u64, manifest: u64) {
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

impl DbState {
    /// Hands out the next file number (a log, a table or a MANIFEST).
    pub(crate) fn take_file_number(&mut self) -> u64 {
        let number = self.meta.next_file_number;
        self.meta.next_file_number += 1;
        number
    }
}

/// The version's record of a table just written.
pub(crate) fn file_meta(number: u64, summary: &TableSummary) -> FileMeta {
    record_of(
        number,
        summary.file_size,
        &summary.properties,
        &summary.range_tombstones,
    )
}

/// A sweep in progress, counted until dropped (a panic included): `close` waits for the count.
struct SweepCount<'a>(&'a DbInner);

impl Drop for SweepCount<'_> {
    fn drop(&mut self) {
        self.0.lock_state().sweeps -= 1;
        self.0.state_changed.notify_all();
    }
}

/// An edit of ours that does not apply is not written: its `Corruption` names the place it
/// would have taken in the MANIFEST, and says the file itself is intact.
fn refused_before_writing(error: Error) -> Error {
    match error {
        Error::Corruption {
            file,
            offset,
            reason,
        } => Error::Corruption {
            file,
            offset,
            reason: format!("{reason} (an edit refused before it was written; the file is intact)"),
        },
        other => other,
    }
}
