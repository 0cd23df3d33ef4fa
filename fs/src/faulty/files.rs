//! File handles of the faulty file system: appends and syncs that fail the way real ones do.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use super::ledger::Ledger;
use super::{OpKind, injected, lock};
use crate::file_system::{ReadableFile, WritableFile};
use crate::{Error, Result};

#[derive(Debug)]
pub(super) struct FaultyWritableFile {
    inner: Box<dyn WritableFile>,
    ledger: Arc<Mutex<Ledger>>,
    id: u64,
    epoch: u64,
}

impl FaultyWritableFile {
    pub(super) fn new(
        inner: Box<dyn WritableFile>,
        ledger: Arc<Mutex<Ledger>>,
        id: u64,
        epoch: u64,
    ) -> Self {
        Self {
            inner,
            ledger,
            id,
            epoch,
        }
    }

    /// Overwrites the file's unsynced bytes with zeros, as a writeback error leaves them.
    fn zero_unsynced(&self, ledger: &mut Ledger) -> Result<()> {
        let Some(state) = ledger.files.get(&self.id) else {
            return Ok(());
        };
        let len = usize::try_from(state.written.saturating_sub(state.synced)).unwrap_or(0);
        if len == 0 {
            return Ok(());
        }
        let path = self.inner.path();
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.write_all_at(&vec![0; len], state.synced))
            .map_err(|e| Error::io("sync", path, e))?;
        ledger.dropped.push((path.to_path_buf(), len as u64));
        Ok(())
    }
}

/// Checks an operation through a handle: handles from before a power loss are dead.
fn check_handle<'a>(
    ledger: &'a Mutex<Ledger>,
    epoch: u64,
    kind: OpKind,
    path: &Path,
) -> Result<MutexGuard<'a, Ledger>> {
    let mut ledger = lock(ledger);
    if ledger.epoch != epoch {
        return Err(injected(kind, path, "handle from before power loss"));
    }
    ledger.check(kind, path)?;
    Ok(ledger)
}

impl WritableFile for FaultyWritableFile {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        let mut ledger = match check_handle(&self.ledger, self.epoch, OpKind::Append, self.path()) {
            Ok(ledger) => ledger,
            Err(e) => {
                // A torn append: part of the write may have reached the file before it failed.
                let mut ledger = lock(&self.ledger);
                if ledger.epoch == self.epoch && ledger.active {
                    let keep = ledger.torn_prefix(data.len());
                    if let Some(prefix) = data.get(..keep).filter(|p| !p.is_empty()) {
                        self.inner.append(prefix)?;
                        if let Some(state) = ledger.files.get_mut(&self.id) {
                            state.written += prefix.len() as u64;
                        }
                    }
                }
                return Err(e);
            }
        };
        self.inner.append(data)?;
        if let Some(state) = ledger.files.get_mut(&self.id) {
            state.written += data.len() as u64;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        let mut ledger = match check_handle(&self.ledger, self.epoch, OpKind::Sync, self.path()) {
            Ok(ledger) => ledger,
            Err(e) => {
                let mut ledger = lock(&self.ledger);
                if ledger.epoch == self.epoch && ledger.active && ledger.sync_failure_drops() {
                    self.zero_unsynced(&mut ledger)?;
                }
                return Err(e);
            }
        };
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
pub(super) struct FaultyReadableFile {
    inner: Box<dyn ReadableFile>,
    ledger: Arc<Mutex<Ledger>>,
    epoch: u64,
}

impl FaultyReadableFile {
    pub(super) fn new(
        inner: Box<dyn ReadableFile>,
        ledger: Arc<Mutex<Ledger>>,
        epoch: u64,
    ) -> Self {
        Self {
            inner,
            ledger,
            epoch,
        }
    }
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
