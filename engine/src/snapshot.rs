//! Snapshots: a sequence number whose reads never change, tracked so compaction can ask which
//! versions must be kept.

use std::collections::BTreeMap;
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

    pub(crate) fn acquire(&self, seqno: SeqNo) {
        *self.lock().entry(seqno).or_insert(0) += 1;
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

    /// How many snapshots are live.
    pub(crate) fn count(&self) -> usize {
        self.lock().values().sum()
    }

    pub(crate) fn oldest(&self) -> Option<SeqNo> {
        self.lock().keys().next().copied()
    }
}
