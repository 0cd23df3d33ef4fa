//! Installing version edits: the one way the set of tables and column families changes.
//!
//! An edit is built under the state lock, written and synced to the MANIFEST under the MANIFEST
//! lock alone — so the writes, which take the state lock to find room, go on meanwhile — and then
//! applied and published under the state lock. The MANIFEST lock serialises edits, so the
//! version an edit was built against is still current when it is applied.
//!
//! After a failed MANIFEST write or sync the file may hold an edit the state lacks, and a later
//! edit's sync would make it durable: the database stops, and no further edit is written.

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
        let result = finish(&mut state);
        self.install_super_version(&mut state);
        drop(state);
        self.state_changed.notify_all();
        Ok(Some(result))
    }
}
