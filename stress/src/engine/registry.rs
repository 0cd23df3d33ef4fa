//! The snapshots an adapter holds for the harness, by the handle's id: every engine keeps its
//! own snapshot type here, so a close can drop them all, and a handle of a snapshot gone (or of
//! an earlier open) is an error rather than a read at the wrong number.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::SnapshotHandle;
use crate::expected::SeqNo;

/// Snapshots of type `S` (cheap to clone: an `Arc`, a number, an engine's own handle).
#[derive(Debug)]
pub(crate) struct Registry<S> {
    held: Mutex<HashMap<u64, S>>,
    next: AtomicU64,
}

impl<S: Clone> Registry<S> {
    pub(crate) fn new() -> Self {
        Self {
            held: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        }
    }

    fn held(&self) -> MutexGuard<'_, HashMap<u64, S>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds `snapshot`, which reads at `seqno`, and returns its handle. The lock covers the
    /// map alone: the engine's snapshot was taken before.
    pub(crate) fn hold(&self, snapshot: S, seqno: SeqNo) -> SnapshotHandle {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.held().insert(id, snapshot);
        SnapshotHandle { id, seqno }
    }

    /// The snapshot `handle` names, or why it cannot be read.
    pub(crate) fn get(&self, handle: &SnapshotHandle) -> Result<S, String> {
        self.held().get(&handle.id).cloned().ok_or_else(|| {
            format!(
                "the harness's snapshot {} at seqno {} is gone",
                handle.id, handle.seqno
            )
        })
    }

    /// Lets `handle`'s snapshot go (outside the lock); one gone already is ignored.
    pub(crate) fn release(&self, handle: &SnapshotHandle) {
        let released = self.held().remove(&handle.id);
        drop(released);
    }

    /// Every snapshot still held, for the caller to drop when it chooses (at close).
    pub(crate) fn take_all(&self) -> Vec<S> {
        self.held().drain().map(|(_, s)| s).collect()
    }
}
