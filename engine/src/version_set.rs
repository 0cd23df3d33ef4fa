//! Installing version edits: the one way the set of tables and column families changes.
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

use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

use crate::db::{DbInner, DbState};
use crate::error::{Error, Result};
use crate::manifest::ManifestWriter;
use crate::version_edit::VersionEdit;

impl DbInner {
    pub(crate) fn lock_manifest(&self) -> MutexGuard<'_, ManifestWriter> {
        self.manifest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

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
            if let Some(why) = &state.error
                && !crate::planted::active(crate::planted::Bug::DeleteAfterManifestFailure)
            {
                return Err(Error::Stopped(why.clone()));
            }
            let Some(mut edit) = prepare(&mut state)? else {
                return Ok(None);
            };
            edit.next_file_number = Some(state.meta.next_file_number);
            edit.last_seqno = Some(self.visible_seqno.load(Ordering::Acquire));
            // Applied to a copy first: an edit that does not apply is never written.
            let mut next = state.meta.clone();
            next.apply(&edit, manifest.path())?;
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
            let number = state.meta.next_file_number;
            state.meta.next_file_number += 1;
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
}
