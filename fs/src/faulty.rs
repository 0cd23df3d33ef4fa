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
//! files whose creation was never made durable vanish, unsynced bytes are dropped (all of them, or a
//! random tail of them), un-synced renames and removals are undone. Handles opened before the
//! power loss fail from then on, as a dead process's would.
//!
//! Files that existed before the `FaultyFs` first touched them count as durable. Power loss must
//! not be simulated while a table of a live engine is memory-mapped (truncating a mapped file
//! makes reads of it fault); close the engine first, as a crash would.
//!
//! Creating a file over an existing one is treated as removing the old file and creating a new
//! one: on power loss the old file comes back unless its directory was synced in between.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::file_system::{FileLock, FileSystem, ReadableFile, WritableFile};
use crate::real::RealFs;
use crate::{Error, Result};

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

/// How much unsynced data a simulated power loss drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerLoss {
    /// Every byte not covered by a `sync` is gone.
    DropAllUnsynced,
    /// Each file keeps a random prefix of its unsynced bytes (chosen from `seed`): the disk wrote
    /// some of the page cache back before the power went.
    DropRandomTail {
        /// Seed for the random cut in each file.
        seed: u64,
    },
}

/// A file system that records durability and can simulate power loss and I/O errors.
/// Cloning it gives another handle on the same ledger.
#[derive(Clone)]
pub struct FaultyFs {
    real: RealFs,
    ledger: Arc<Mutex<Ledger>>,
}

#[derive(Debug)]
struct Ledger {
    /// Files this fs has written, renamed or removed since the last power loss, by id.
    files: HashMap<u64, FileState>,
    /// Current path of each tracked file.
    ids: HashMap<PathBuf, u64>,
    /// Durable files that were removed or overwritten, restorable until their directory is synced.
    trash: Vec<TrashEntry>,
    next_id: u64,
    /// Handles from an earlier epoch belong to a process that lost power.
    epoch: u64,
    active: bool,
    error_one_in: HashMap<OpKind, u32>,
    injected: u64,
    rng: SmallRng,
}

#[derive(Debug)]
struct FileState {
    path: PathBuf,
    written: u64,
    synced: u64,
    /// The name under which the file survives a power loss, if any.
    durable_name: Option<PathBuf>,
}

#[derive(Debug)]
struct TrashEntry {
    trash_path: PathBuf,
    durable_name: PathBuf,
    synced: u64,
}

impl fmt::Debug for FaultyFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
            ledger: Arc::new(Mutex::new(Ledger {
                files: HashMap::new(),
                ids: HashMap::new(),
                trash: Vec::new(),
                next_id: 0,
                epoch: 0,
                active: true,
                error_one_in: HashMap::new(),
                injected: 0,
                rng: SmallRng::seed_from_u64(seed),
            })),
        }
    }

    /// Fails operations of `kind` at random, one in `one_in` on average; 0 stops injecting.
    pub fn inject_errors(&self, kind: OpKind, one_in: u32) {
        let mut ledger = self.lock_ledger();
        if one_in == 0 {
            ledger.error_one_in.remove(&kind);
        } else {
            ledger.error_one_in.insert(kind, one_in);
        }
    }

    /// Stops all error injection.
    pub fn clear_errors(&self) {
        self.lock_ledger().error_one_in.clear();
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
        let mut ledger = self.lock_ledger();
        let mut rng = match mode {
            PowerLoss::DropAllUnsynced => None,
            PowerLoss::DropRandomTail { seed } => Some(SmallRng::seed_from_u64(seed)),
        };
        // Move surviving files out of the way first, so restoring names cannot collide.
        let mut staged = Vec::new();
        let mut ids: Vec<u64> = ledger.files.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(state) = ledger.files.remove(&id) else {
                continue;
            };
            let Some(durable_name) = state.durable_name else {
                remove_if_exists(&state.path)?;
                continue;
            };
            let keep = match rng.as_mut() {
                None => state.synced,
                Some(rng) => rng.random_range(state.synced..=state.written.max(state.synced)),
            };
            truncate(&state.path, keep)?;
            let staging = trash_path(&durable_name, &mut ledger.next_id);
            rename_real(&state.path, &staging)?;
            staged.push((staging, durable_name));
        }
        for entry in std::mem::take(&mut ledger.trash) {
            truncate(&entry.trash_path, entry.synced)?;
            rename_real(&entry.trash_path, &entry.durable_name)?;
        }
        for (staging, durable_name) in staged {
            rename_real(&staging, &durable_name)?;
        }
        ledger.ids.clear();
        ledger.epoch += 1;
        Ok(())
    }

    fn lock_ledger(&self) -> MutexGuard<'_, Ledger> {
        // A panic while holding the ledger leaves it consistent enough for tests to go on.
        self.ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn check(&self, kind: OpKind, path: &Path) -> Result<MutexGuard<'_, Ledger>> {
        let mut ledger = self.lock_ledger();
        ledger.check(kind, path)?;
        Ok(ledger)
    }
}

impl Ledger {
    fn check(&mut self, kind: OpKind, path: &Path) -> Result<()> {
        if kind.mutates() && !self.active {
            return Err(injected(kind, path, "file system is inactive"));
        }
        if let Some(&one_in) = self.error_one_in.get(&kind)
            && self.rng.random_ratio(1, one_in)
        {
            self.injected += 1;
            return Err(injected(kind, path, "injected fault"));
        }
        Ok(())
    }

    /// The id of the file at `path`, tracking it as durable and fully synced if it is new to us.
    fn track(&mut self, path: &Path) -> Result<u64> {
        if let Some(&id) = self.ids.get(path) {
            return Ok(id);
        }
        let len = std::fs::metadata(path)
            .map_err(|e| Error::io("stat", path, e))?
            .len();
        Ok(self.insert(FileState {
            path: path.to_path_buf(),
            written: len,
            synced: len,
            durable_name: Some(path.to_path_buf()),
        }))
    }

    fn insert(&mut self, state: FileState) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.ids.insert(state.path.clone(), id);
        self.files.insert(id, state);
        id
    }

    /// Takes the file at `path` out of the tree: a durable one goes to the trash so power loss
    /// can bring it back, any other is deleted.
    fn discard(&mut self, path: &Path) -> Result<()> {
        let id = self.track(path)?;
        self.ids.remove(path);
        let Some(state) = self.files.remove(&id) else {
            return Ok(());
        };
        match state.durable_name {
            Some(durable_name) => {
                let trash_path = trash_path(&durable_name, &mut self.next_id);
                rename_real(path, &trash_path)?;
                self.trash.push(TrashEntry {
                    trash_path,
                    durable_name,
                    synced: state.synced,
                });
                Ok(())
            }
            None => std::fs::remove_file(path).map_err(|e| Error::io("remove", path, e)),
        }
    }

    fn sync_dir(&mut self, dir: &Path) -> Result<()> {
        for state in self.files.values_mut() {
            if state.path.parent() == Some(dir) {
                state.durable_name = Some(state.path.clone());
            } else if state.durable_name.as_deref().and_then(Path::parent) == Some(dir) {
                // Renamed out of `dir` into a directory not yet synced: the old name is gone now,
                // and the new one not yet there.
                state.durable_name = None;
            }
        }
        let (gone, kept) = std::mem::take(&mut self.trash)
            .into_iter()
            .partition(|entry| entry.durable_name.parent() == Some(dir));
        self.trash = kept;
        for entry in gone {
            remove_if_exists(&entry.trash_path)?;
        }
        Ok(())
    }
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
        Ok(Box::new(FaultyWritableFile {
            inner,
            ledger: Arc::clone(&self.ledger),
            id,
            epoch: ledger.epoch,
        }))
    }

    fn open_append(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let mut ledger = self.check(OpKind::Create, path)?;
        let inner = self.real.open_append(path)?;
        let id = ledger.track(path)?;
        Ok(Box::new(FaultyWritableFile {
            inner,
            ledger: Arc::clone(&self.ledger),
            id,
            epoch: ledger.epoch,
        }))
    }

    fn open_read(&self, path: &Path) -> Result<Box<dyn ReadableFile>> {
        let ledger = self.check(OpKind::Read, path)?;
        let inner = self.real.open_read(path)?;
        Ok(Box::new(FaultyReadableFile {
            inner,
            ledger: Arc::clone(&self.ledger),
            epoch: ledger.epoch,
        }))
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
}

#[derive(Debug)]
struct FaultyWritableFile {
    inner: Box<dyn WritableFile>,
    ledger: Arc<Mutex<Ledger>>,
    id: u64,
    epoch: u64,
}

/// Checks an operation through a handle: handles from before a power loss are dead.
fn check_handle<'a>(
    ledger: &'a Mutex<Ledger>,
    epoch: u64,
    kind: OpKind,
    path: &Path,
) -> Result<MutexGuard<'a, Ledger>> {
    let mut ledger = ledger
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if ledger.epoch != epoch {
        return Err(injected(kind, path, "handle from before power loss"));
    }
    ledger.check(kind, path)?;
    Ok(ledger)
}

impl WritableFile for FaultyWritableFile {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        let mut ledger = check_handle(&self.ledger, self.epoch, OpKind::Append, self.inner.path())?;
        self.inner.append(data)?;
        if let Some(state) = ledger.files.get_mut(&self.id) {
            state.written += data.len() as u64;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        let mut ledger = check_handle(&self.ledger, self.epoch, OpKind::Sync, self.inner.path())?;
        self.inner.sync()?;
        if let Some(state) = ledger.files.get_mut(&self.id) {
            state.synced = state.written;
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }
}

#[derive(Debug)]
struct FaultyReadableFile {
    inner: Box<dyn ReadableFile>,
    ledger: Arc<Mutex<Ledger>>,
    epoch: u64,
}

impl ReadableFile for FaultyReadableFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        drop(check_handle(
            &self.ledger,
            self.epoch,
            OpKind::Read,
            self.inner.path(),
        )?);
        self.inner.read_at(offset, buf)
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn path(&self) -> &Path {
        self.inner.path()
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

fn truncate(path: &Path, len: u64) -> Result<()> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io("truncate", path, e))?;
    file.set_len(len)
        .map_err(|e| Error::io("truncate", path, e))
}

fn remove_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", path, e)),
        _ => Ok(()),
    }
}
