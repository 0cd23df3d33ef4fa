//! Deliberately wrong garbage-collection rules, planted at run time so the stress harness can
//! show it catches them (`cairn-stress`'s `planted_bugs` test). Only a build with the
//! `planted-bugs` feature can plant one; in any other build [`active`] is always false and the
//! rules are the real ones.

use std::sync::atomic::{AtomicU8, Ordering};

/// A wrong rule of the compaction iterator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GcBug {
    /// Every version in one stripe, as if no snapshot were alive: versions a snapshot reads are
    /// dropped as shadowed.
    IgnoreSnapshots,
    /// Every compaction believes it is bottommost: tombstones go while older versions lie below,
    /// which then come back.
    DropAboveBottom,
    /// An expired put is simply dropped, even when older versions survive or lie below: with
    /// `max_versions = 1` the value it replaced comes back, and with more versions an older
    /// one moves into the candidates.
    ExpiredResurrects,
}

impl GcBug {
    fn bit(self) -> u8 {
        match self {
            Self::IgnoreSnapshots => 1,
            Self::DropAboveBottom => 2,
            Self::ExpiredResurrects => 4,
        }
    }
}

static PLANTED: AtomicU8 = AtomicU8::new(0);

/// Plants `bug` (or removes it) for every compaction in the process from now on.
#[cfg(feature = "planted-bugs")]
pub fn set(bug: GcBug, planted: bool) {
    if planted {
        PLANTED.fetch_or(bug.bit(), Ordering::SeqCst);
    } else {
        PLANTED.fetch_and(!bug.bit(), Ordering::SeqCst);
    }
}

/// True if `bug` is planted. Always false without the `planted-bugs` feature.
pub fn active(bug: GcBug) -> bool {
    cfg!(feature = "planted-bugs") && PLANTED.load(Ordering::Relaxed) & bug.bit() != 0
}
