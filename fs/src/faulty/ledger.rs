//! The ledger of what is durable, and the decision whether an operation fails.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{OpKind, SyncFailure, injected, remove_if_exists, rename_real, trash_path};
use crate::{Error, Result};

#[derive(Debug)]
pub(super) struct Ledger {
    /// Files this fs has written, renamed or removed since the last power loss, by id.
    pub(super) files: HashMap<u64, FileState>,
    /// Current path of each tracked file.
    pub(super) ids: HashMap<PathBuf, u64>,
    /// Durable files that were removed or overwritten, restorable until their directory is synced.
    pub(super) trash: Vec<TrashEntry>,
    pub(super) next_id: u64,
    /// Handles from an earlier epoch belong to a process that lost power.
    pub(super) epoch: u64,
    pub(super) active: bool,
    /// Random injection: one in N operations of the kind, on paths containing the string.
    pub(super) error_one_in: HashMap<OpKind, (u32, String)>,
    /// Random injection is off while set (targeted failures still happen).
    pub(super) paused: bool,
    /// One-shot failures: the next operation of the kind on a path containing the string.
    pub(super) fail_next: Vec<(OpKind, String)>,
    pub(super) sync_failure: SyncFailure,
    pub(super) injected: u64,
    /// Unsynced bytes failed syncs dropped, by file.
    pub(super) dropped: Vec<(PathBuf, u64)>,
    pub(super) rng: SmallRng,
}

#[derive(Debug)]
pub(super) struct FileState {
    pub(super) path: PathBuf,
    pub(super) written: u64,
    pub(super) synced: u64,
    /// The name under which the file survives a power loss, if any.
    pub(super) durable_name: Option<PathBuf>,
}

#[derive(Debug)]
pub(super) struct TrashEntry {
    pub(super) trash_path: PathBuf,
    pub(super) durable_name: PathBuf,
    pub(super) synced: u64,
}

impl Ledger {
    pub(super) fn new(seed: u64) -> Self {
        Self {
            files: HashMap::new(),
            ids: HashMap::new(),
            trash: Vec::new(),
            next_id: 0,
            epoch: 0,
            active: true,
            error_one_in: HashMap::new(),
            paused: false,
            fail_next: Vec::new(),
            sync_failure: SyncFailure::DropsUnsynced,
            injected: 0,
            dropped: Vec::new(),
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// Fails the operation if the file system is inactive or an error is due.
    pub(super) fn check(&mut self, kind: OpKind, path: &Path) -> Result<()> {
        if kind.mutates() && !self.active {
            return Err(injected(kind, path, "file system is inactive"));
        }
        if self.fault_due(kind, path) {
            self.injected += 1;
            return Err(injected(kind, path, "injected fault"));
        }
        Ok(())
    }

    /// True if an injected fault falls on this operation: a targeted one, or a random one.
    fn fault_due(&mut self, kind: OpKind, path: &Path) -> bool {
        let text = path.to_string_lossy();
        if let Some(i) = self
            .fail_next
            .iter()
            .position(|(k, pattern)| *k == kind && text.contains(pattern.as_str()))
        {
            self.fail_next.remove(i);
            return true;
        }
        if self.paused {
            return false;
        }
        match self.error_one_in.get(&kind) {
            Some((one_in, pattern)) if text.contains(pattern.as_str()) => {
                let one_in = *one_in;
                self.rng.random_ratio(1, one_in)
            }
            _ => false,
        }
    }

    /// Whether the injected sync failure now happening drops the unsynced bytes.
    pub(super) fn sync_failure_drops(&mut self) -> bool {
        match self.sync_failure {
            SyncFailure::DropsUnsynced => true,
            SyncFailure::KeepsBytes => false,
            SyncFailure::Either => self.rng.random_bool(0.5),
        }
    }

    /// How many bytes of an append of `len` bytes that is failing reach the file: a torn append
    /// leaves any strict prefix.
    pub(super) fn torn_prefix(&mut self, len: usize) -> usize {
        if len == 0 {
            0
        } else {
            self.rng.random_range(0..len)
        }
    }

    /// The id of the file at `path`, tracking it as durable and fully synced if it is new to us.
    pub(super) fn track(&mut self, path: &Path) -> Result<u64> {
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

    pub(super) fn insert(&mut self, state: FileState) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.ids.insert(state.path.clone(), id);
        self.files.insert(id, state);
        id
    }

    /// Takes the file at `path` out of the tree: a durable one goes to the trash so power loss
    /// can bring it back, any other is deleted.
    pub(super) fn discard(&mut self, path: &Path) -> Result<()> {
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

    pub(super) fn sync_dir(&mut self, dir: &Path) -> Result<()> {
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
