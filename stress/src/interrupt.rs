//! A stop asked for from outside the run (the `cairn` command's Ctrl-C or SIGTERM handler).
//!
//! Signals reach the whole process, so the request is process-wide: every stress and crash loop
//! running in it winds down as it would at its limit — workers stop after their operation, the
//! final verification runs, the report says the run was interrupted. A second signal ends the
//! process at once: [`remove_temporary_dirs`] lets it delete the temporary databases first,
//! which no destructor would.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Asks every run in the process to stop early; returns true if a stop was already asked for
/// (a second Ctrl-C, which the caller may treat as "stop now").
pub fn request_stop() -> bool {
    REQUESTED.swap(true, Ordering::AcqRel)
}

/// True once [`request_stop`] has been called.
pub fn stop_requested() -> bool {
    REQUESTED.load(Ordering::Acquire)
}

/// The temporary directories alive in the process, for [`remove_temporary_dirs`].
static TEMPORARY: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A temporary directory a run works in: deleted when dropped, and by
/// [`remove_temporary_dirs`] if the process must exit before it is dropped.
#[derive(Debug)]
pub struct TemporaryDir {
    /// `None` only inside `drop`, which deletes it under the registry's lock.
    dir: Option<tempfile::TempDir>,
}

impl TemporaryDir {
    /// A new, empty temporary directory.
    ///
    /// # Errors
    /// The file system's error if it cannot be created.
    pub fn new() -> std::io::Result<Self> {
        // Created and registered under the lock, so a removal never misses it.
        let mut registry = lock_temporary();
        let dir = tempfile::tempdir()?;
        registry.push(dir.path().to_path_buf());
        Ok(Self { dir: Some(dir) })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.dir
            .as_ref()
            .map_or(Path::new(""), tempfile::TempDir::path)
    }
}

impl Drop for TemporaryDir {
    fn drop(&mut self) {
        let mut registry = lock_temporary();
        if let Some(dir) = self.dir.take() {
            registry.retain(|p| p != dir.path());
            drop(dir);
        }
    }
}

/// Deletes every [`TemporaryDir`] still alive, for a process about to exit without running
/// their destructors (a second Ctrl-C). Each is first renamed aside, so that the engine's
/// background threads, still writing, cannot add files to it (a reopen that made it again is
/// deleted after), and its removal is tried a few times. Best effort: what cannot be deleted
/// is left.
pub fn remove_temporary_dirs() {
    for dir in lock_temporary().iter() {
        let aside = dir.with_extension("removing");
        let target = if std::fs::rename(dir, &aside).is_ok() {
            aside
        } else {
            dir.clone()
        };
        for _ in 0..5 {
            if std::fs::remove_dir_all(&target).is_ok() || !target.exists() {
                break;
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn lock_temporary() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    TEMPORARY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_dirs_are_removed_on_request_and_forgotten_when_dropped() {
        let kept = TemporaryDir::new().expect("tempdir");
        let removed = TemporaryDir::new().expect("tempdir");
        std::fs::write(removed.path().join("000001.sst"), b"table").expect("write");
        let removed_path = removed.path().to_path_buf();
        // Dropping forgets the directory: a later removal does not touch a reused path.
        let dropped = TemporaryDir::new().expect("tempdir");
        let dropped_path = dropped.path().to_path_buf();
        drop(dropped);
        assert!(!lock_temporary().contains(&dropped_path));
        remove_temporary_dirs();
        assert!(!removed_path.exists(), "a temporary database was left");
        assert!(!kept.path().exists());
        drop((kept, removed));
    }
}
