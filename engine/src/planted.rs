//! Deliberately wrong rules, planted at run time so the stress harness can show it catches them
//! (`cairn-stress`'s `planted_bugs` test). Only a build with the `planted-bugs` feature can plant
//! one; in any other build the engine's rules are the real ones and this module is inert.

use std::sync::atomic::{AtomicU8, Ordering};

use cairn_compaction::planted::GcBug;

/// A wrong rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(not(feature = "planted-bugs"), allow(dead_code))]
pub enum Bug {
    /// Compaction puts every version in one stripe, as if no snapshot were alive.
    IgnoreSnapshots,
    /// Every compaction believes it is bottommost, so tombstones go while older data lies below.
    DropAboveBottom,
    /// A snapshot reads the visible sequence number before it registers (and dawdles between),
    /// so a compaction in between can drop a version it should see.
    SnapshotBeforeRegister,
    /// After a failed MANIFEST sync, edits and obsolete-file deletion go on trusting the
    /// in-memory version, so a table an edit on disk names can be deleted.
    DeleteAfterManifestFailure,
    /// A transaction commits without checking whether a key it read was written since its
    /// snapshot.
    IgnoreConflicts,
    /// Compaction drops an expired put even when older versions survive or lie below, so the
    /// value it replaced (`max_versions = 1`) or an older version (more) comes back.
    ExpiredResurrects,
    /// Recovery from an I/O error switches to a new log and a fresh MANIFEST without flushing
    /// the memtables, trusting the old log to hold what they hold: after a failed sync dropped
    /// its unsynced pages, acknowledged writes are lost at the next open.
    RecoverySkipsFlush,
    /// A run of deleted keys is used by every reader at or after its seqno, whatever view the
    /// reader fixed: a reader made before a compaction dropped a key (by TTL, by a family TTL
    /// `set_options` set, by a filter) skips it once a newer reader learned a run over it.
    RunsIgnoreView,
}

#[cfg_attr(not(feature = "planted-bugs"), allow(dead_code))]
impl Bug {
    /// Every planted bug.
    pub const ALL: [Bug; 8] = [
        Bug::IgnoreSnapshots,
        Bug::DropAboveBottom,
        Bug::SnapshotBeforeRegister,
        Bug::DeleteAfterManifestFailure,
        Bug::IgnoreConflicts,
        Bug::ExpiredResurrects,
        Bug::RecoverySkipsFlush,
        Bug::RunsIgnoreView,
    ];

    fn engine_bit(self) -> Option<u8> {
        match self {
            Self::SnapshotBeforeRegister => Some(1),
            Self::DeleteAfterManifestFailure => Some(2),
            Self::IgnoreConflicts => Some(4),
            Self::RecoverySkipsFlush => Some(8),
            Self::RunsIgnoreView => Some(16),
            Self::IgnoreSnapshots | Self::DropAboveBottom | Self::ExpiredResurrects => None,
        }
    }

    fn gc_bug(self) -> Option<GcBug> {
        match self {
            Self::IgnoreSnapshots => Some(GcBug::IgnoreSnapshots),
            Self::DropAboveBottom => Some(GcBug::DropAboveBottom),
            Self::ExpiredResurrects => Some(GcBug::ExpiredResurrects),
            Self::SnapshotBeforeRegister
            | Self::DeleteAfterManifestFailure
            | Self::IgnoreConflicts
            | Self::RecoverySkipsFlush
            | Self::RunsIgnoreView => None,
        }
    }
}

static PLANTED: AtomicU8 = AtomicU8::new(0);

/// Plants `bug` (or removes it) for every database in the process from now on.
#[cfg(feature = "planted-bugs")]
pub fn set(bug: Bug, planted: bool) {
    if let Some(gc) = bug.gc_bug() {
        cairn_compaction::planted::set(gc, planted);
    }
    if let Some(bit) = bug.engine_bit() {
        if planted {
            PLANTED.fetch_or(bit, Ordering::SeqCst);
        } else {
            PLANTED.fetch_and(!bit, Ordering::SeqCst);
        }
    }
}

/// True if `bug` is planted. Always false without the `planted-bugs` feature.
pub(crate) fn active(bug: Bug) -> bool {
    cfg!(feature = "planted-bugs")
        && bug
            .engine_bit()
            .is_some_and(|bit| PLANTED.load(Ordering::Relaxed) & bit != 0)
}
