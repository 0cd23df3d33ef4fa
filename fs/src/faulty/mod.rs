//! `FaultyFs`: a real directory tree that can lose power and fail on purpose.
//!
//! It delegates every operation to [`RealFs`] and keeps a ledger of what is durable:
//!
//! - a file's bytes up to its last `sync`;
//! - a file's *name* once `sync_dir` ran on its directory after it was created or renamed there;
//! - a removed (or rename-overwritten) file stays restorable until `sync_dir` makes its removal
//!   durable: it is moved aside into a hidden `.faultyfs-trash` directory, not deleted.
//!
//! [`FaultyFs::power_loss`] then rewinds the tree to what a disk would hold after the power went:
//! files whose creation was never made durable vanish, unsynced bytes are dropped (all of them, a
//! random tail of them, or random pages of them, leaving holes of zeros), un-synced renames and
//! removals are undone. Handles opened before the power loss fail from then on, as a dead process's
//! would.
//!
//! Injected errors fail the way real disks and kernels do:
//!
//! - a failed `append` may leave a prefix of its bytes in the file (a torn append);
//! - a failed `sync` drops the file's unsynced bytes, which then read back as zeros, and the next
//!   `sync` succeeds (Linux after a writeback error), or it keeps them (the bytes reached the disk
//!   but the call failed anyway): see [`SyncFailure`].
//!
//! Files that existed before the `FaultyFs` first touched them count as durable. Power loss must
//! not be simulated while a table of a live engine is memory-mapped (truncating a mapped file
//! makes reads of it fault); close the engine first, as a crash would.
//!
//! Creating a file over an existing one is treated as removing the old file and creating a new
//! one: on power loss the old file comes back unless its directory was synced in between.

mod files;
mod ledger;
mod power_loss;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::file_system::{FileLock, FileSystem, ReadableFile, WritableFile};
use crate::real::RealFs;
use crate::{Error, Result};

use files::{FaultyReadableFile, FaultyWritableFile};
use ledger::{FileState, Ledger};
pub use power_loss::PowerLoss;

/// The name of the hidden directory that holds removed files until their removal is durable.
const TRASH_DIR: &str = ".faultyfs-trash";

/// The kinds of operation an I/O error can be injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OpKind {
    /// [`FileSystem::create`] and [`FileSystem::open_append`].
    Create,
    /// [`WritableFile::append`].
    Append,
    /// [`WritableFile::sync`].
    Sync,
    /// [`FileSystem::rename`].
    Rename,
    /// [`FileSystem::remove`].
    Remove,
    /// [`FileSystem::sync_dir`].
    SyncDir,
    /// [`FileSystem::list`].
    List,
    /// [`FileSystem::open_read`], [`FileSystem::map`] and [`ReadableFile::read_at`].
    Read,
}

impl OpKind {
    fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Append => "append",
            Self::Sync => "sync",
            Self::Rename => "rename",
            Self::Remove => "remove",
            Self::SyncDir => "sync_dir",
            Self::List => "list",
            Self::Read => "read",
        }
    }

    fn mutates(self) -> bool {
        !matches!(self, Self::List | Self::Read)
    }
}

/// What an injected `sync` failure does to the bytes it was asked to make durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncFailure {
    /// The unsynced bytes are dropped: they read back as zeros from now on, and the next `sync`
    /// succeeds, making the zeros durable. What Linux does after a writeback error (the pages are
    /// marked clean, the error is reported once). The default.
    DropsUnsynced,
    /// The bytes stay and may well be durable: the call failed after the data reached the disk.
    /// A later successful `sync` makes them durable for certain.
    KeepsBytes,
    /// One of the two, chosen at random for each failure.
    Either,
}

/// A file system that records durability and can simulate power loss and I/O errors.
/// Cloning it gives another handle on the same ledger.
#[derive(Clone)]
pub struct FaultyFs {
    real: RealFs,
    ledger: Arc<Mutex<Ledger>>,
}

impl std::fmt::Debug for FaultyFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyFs").finish_non_exhaustive()
    }
}

impl Default for FaultyFs {
    fn default() -> Self {
        Self::new(0)
    }
}

impl FaultyFs {
    /// A faulty file system over the real one; `seed` drives error injection.
    pub fn new(seed: u64) -> Self {
        Self {
            real: RealFs::new(),
            ledger: Arc::new(Mutex::new(Ledger::new(seed))),
        }
    }

    /// Fails operations of `kind` at random, one in `one_in` on average; 0 stops injecting.
    pub fn inject_errors(&self, kind: OpKind, one_in: u32) {
        self.inject_errors_matching(kind, one_in, "");
    }

    /// As [`inject_errors`](Self::inject_errors), only on paths containing `path_contains`.
    pub fn inject_errors_matching(&self, kind: OpKind, one_in: u32, path_contains: &str) {
        let mut ledger = self.lock_ledger();
        if one_in == 0 {
            ledger.error_one_in.remove(&kind);
        } else {
            ledger
                .error_one_in
                .insert(kind, (one_in, path_contains.to_string()));
        }
    }

    /// Fails the next operation of `kind` on a path containing `path_contains` (once), whatever
    /// the random injection says: for tests that need one particular failure.
    pub fn fail_next(&self, kind: OpKind, path_contains: &str) {
        self.lock_ledger()
            .fail_next
            .push((kind, path_contains.to_string()));
    }

    /// What an injected `sync` failure does to unsynced bytes (default
    /// [`SyncFailure::DropsUnsynced`]).
    pub fn set_sync_failure(&self, mode: SyncFailure) {
        self.lock_ledger().sync_failure = mode;
    }

    /// Stops all error injection, random and targeted.
    pub fn clear_errors(&self) {
        let mut ledger = self.lock_ledger();
        ledger.error_one_in.clear();
        ledger.fail_next.clear();
    }

    /// Stops random error injection until [`resume_errors`](Self::resume_errors), keeping the
    /// settings: for a recovery step that must run on a healthy disk.
    pub fn pause_errors(&self) {
        self.lock_ledger().paused = true;
    }

    /// Resumes the error injection [`pause_errors`](Self::pause_errors) stopped.
    pub fn resume_errors(&self) {
        self.lock_ledger().paused = false;
    }

    /// How many unsynced bytes failed syncs have dropped so far, in files whose name (not the
    /// directories above it) contains `name_contains`: a checker uses it to know whether a
    /// fault could have lost writes.
    pub fn dropped_bytes(&self, name_contains: &str) -> u64 {
        self.lock_ledger()
            .dropped
            .iter()
            .filter(|(path, _)| {
                path.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains(name_contains))
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// How many errors have been injected so far.
    pub fn injected_errors(&self) -> u64 {
        self.lock_ledger().injected
    }

    /// With `false`, every operation that would change the disk fails, as after a crash; reads
    /// still work. `true` restores normal service.
    pub fn set_active(&self, active: bool) {
        self.lock_ledger().active = active;
    }

    /// The bytes of `path` that would survive a power loss now: `None` if the file would vanish.
    pub fn durable_len(&self, path: &Path) -> Option<u64> {
        let ledger = self.lock_ledger();
        match ledger.ids.get(path).and_then(|id| ledger.files.get(id)) {
            Some(state) if state.durable_name.as_deref() == Some(path) => Some(state.synced),
            Some(_) => None,
            None => std::fs::metadata(path).ok().map(|m| m.len()),
        }
    }

    /// Simulates a power loss: rewinds every file and name to its durable state (see the module
    /// doc). Handles opened before it fail from now on.
    ///
    /// # Errors
    /// `Error::Io` if the real file system fails while rewinding.
    pub fn power_loss(&self, mode: PowerLoss) -> Result<()> {
        self.lock_ledger().power_loss(mode)
    }

    fn lock_ledger(&self) -> MutexGuard<'_, Ledger> {
        lock(&self.ledger)
    }

    fn check(&self, kind: OpKind, path: &Path) -> Result<MutexGuard<'_, Ledger>> {
        let mut ledger = self.lock_ledger();
        ledger.check(kind, path)?;
        Ok(ledger)
    }
}

/// Locks the ledger. A panic while holding it leaves it consistent enough for tests to go on.
fn lock(ledger: &Mutex<Ledger>) -> MutexGuard<'_, Ledger> {
    ledger
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl FileSystem for FaultyFs {
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let mut ledger = self.check(OpKind::Create, path)?;
        if path.exists() {
            ledger.discard(path)?;
        }
        let inner = self.real.create(path)?;
        let id = ledger.insert(FileState {
            path: path.to_path_buf(),
            written: 0,
            synced: 0,
            durable_name: None,
        });
        Ok(Box::new(FaultyWritableFile::new(
            inner,
            Arc::clone(&self.ledger),
            id,
            ledger.epoch,
        )))
    }

    fn open_append(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let mut ledger = self.check(OpKind::Create, path)?;
        let inner = self.real.open_append(path)?;
        let id = ledger.track(path)?;
        Ok(Box::new(FaultyWritableFile::new(
            inner,
            Arc::clone(&self.ledger),
            id,
            ledger.epoch,
        )))
    }

    fn open_read(&self, path: &Path) -> Result<Box<dyn ReadableFile>> {
        let ledger = self.check(OpKind::Read, path)?;
        let inner = self.real.open_read(path)?;
        Ok(Box::new(FaultyReadableFile::new(
            inner,
            Arc::clone(&self.ledger),
            ledger.epoch,
        )))
    }

    fn map(&self, path: &Path) -> Result<Bytes> {
        let _ledger = self.check(OpKind::Read, path)?;
        self.real.map(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut ledger = self.check(OpKind::Rename, from)?;
        let id = ledger.track(from)?;
        if to.exists() {
            ledger.discard(to)?;
        }
        rename_real(from, to)?;
        ledger.ids.remove(from);
        ledger.ids.insert(to.to_path_buf(), id);
        if let Some(state) = ledger.files.get_mut(&id) {
            state.path = to.to_path_buf();
        }
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut ledger = self.check(OpKind::Remove, path)?;
        ledger.discard(path)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        let _ledger = self.check(OpKind::Create, dir)?;
        self.real.create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let _ledger = self.check(OpKind::List, dir)?;
        let mut names = self.real.list(dir)?;
        names.retain(|name| name != TRASH_DIR);
        Ok(names)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let mut ledger = self.check(OpKind::SyncDir, dir)?;
        self.real.sync_dir(dir)?;
        ledger.sync_dir(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        self.real.exists(path)
    }

    fn file_size(&self, path: &Path) -> Result<u64> {
        self.real.file_size(path)
    }

    fn lock(&self, path: &Path) -> Result<FileLock> {
        self.real.lock(path)
    }

    fn lock_shared(&self, path: &Path) -> Result<Option<FileLock>> {
        self.real.lock_shared(path)
    }
}

fn injected(kind: OpKind, path: &Path, why: &str) -> Error {
    Error::io(
        kind.name(),
        path,
        std::io::Error::other(format!("{why} ({})", kind.name())),
    )
}

/// A fresh name in the trash directory beside `durable_name`.
fn trash_path(durable_name: &Path, next_id: &mut u64) -> PathBuf {
    let dir = durable_name.parent().unwrap_or_else(|| Path::new("."));
    let name = durable_name
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    *next_id += 1;
    dir.join(TRASH_DIR).join(format!("{next_id}-{name}"))
}

fn rename_real(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io("rename", parent, e))?;
    }
    std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
}

fn remove_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", path, e)),
        _ => Ok(()),
    }
}
