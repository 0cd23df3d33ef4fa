//! Snapshots: a sequence number whose reads never change, tracked so compaction can ask which
//! versions must be kept.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use cairn_sstable::SeqNo;

/// The live snapshots, counted by sequence number.
#[derive(Debug, Default)]
pub(crate) struct SnapshotList {
    live: Mutex<BTreeMap<SeqNo, usize>>,
}

impl SnapshotList {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<SeqNo, usize>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a snapshot at the sequence number `visible` holds now, and returns it. The
    /// number is read under the list's lock: a compaction lists the snapshots under the same
    /// lock, so it either sees this one or listed them before its number was read (and then
    /// keeps the newest version of every key, which is what this snapshot reads).
    pub(crate) fn acquire_current(&self, visible: &AtomicU64) -> SeqNo {
        if crate::planted::active(crate::planted::Bug::SnapshotBeforeRegister) {
            // Planted bug: read first, register later, with time for a compaction in between.
            let seqno = visible.load(Ordering::Acquire);
            std::thread::sleep(std::time::Duration::from_millis(10));
            *self.lock().entry(seqno).or_insert(0) += 1;
            return seqno;
        }
        let mut live = self.lock();
        let seqno = visible.load(Ordering::Acquire);
        *live.entry(seqno).or_insert(0) += 1;
        seqno
    }

    pub(crate) fn release(&self, seqno: SeqNo) {
        let mut live = self.lock();
        if let Some(count) = live.get_mut(&seqno) {
            *count -= 1;
            if *count == 0 {
                live.remove(&seqno);
            }
        }
    }

    /// The live snapshot seqnos, ascending, each once.
    pub(crate) fn list(&self) -> Vec<SeqNo> {
        self.lock().keys().copied().collect()
    }

    /// Runs `f` if no snapshot is live, under the list's lock, so none is taken while it runs
    /// (a snapshot reads the sequence number under the same lock); `None`, without running
    /// it, if one is live.
    pub(crate) fn while_none_live<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        let live = self.lock();
        if live.is_empty() {
            let out = f();
            drop(live);
            Some(out)
        } else {
            None
        }
    }

    /// How many snapshots are live.
    pub(crate) fn count(&self) -> usize {
        self.lock().values().sum()
    }

    pub(crate) fn oldest(&self) -> Option<SeqNo> {
        self.lock().keys().next().copied()
    }
}
