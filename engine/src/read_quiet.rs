//! The read trigger's quiet window: ranges of tombstones scans reported that a compaction pick
//! found nothing to do for (a snapshot holds them, or their grace period has not ended). While
//! the read view stands, for at most [`READ_QUIET_MS`], a report within them would lead to the
//! same empty pick, and `compact::report_tombstone_scan` drops it. This module keeps the ranges
//! and the window; it does not pick or report.

use bytes::Bytes;

/// Ranges a column family remembers for read-triggered compaction until they are compacted;
/// reports beyond it are dropped (the ranges held are compacted first, then new reports count).
pub(crate) const MAX_READ_TRIGGERED_RANGES: usize = 64;

/// How long reports within ranges a pick found nothing to do for are dropped, unless a new
/// read view comes first. What the view does not show (a snapshot released, a grace period
/// ending) lets a pick do more; the window bounds how late a report then comes.
const READ_QUIET_MS: u64 = 1000;

/// Read-triggered ranges a pick found nothing to do for (the tombstones a snapshot holds, or
/// within their grace period): until the read view changes or [`READ_QUIET_MS`] pass, a report
/// within one would lead to the same empty pick. Without it, every seek past tombstones a
/// snapshot holds took the state lock, woke every background thread and ran the picker.
#[derive(Debug)]
pub(crate) struct ReadQuiet {
    ranges: Vec<(Bytes, Bytes)>,
    view: u64,
    /// When the first of `ranges` went quiet (the engine's clock, which may step back).
    since_ms: u64,
}

/// The most ranges a column family keeps quiet (picks that found nothing add theirs while the
/// view stands); the oldest go first.
const MAX_QUIET_RANGES: usize = 4 * MAX_READ_TRIGGERED_RANGES;

impl ReadQuiet {
    /// Whether the window is open for `view` at `now_ms`: same view, and the clock within
    /// [`READ_QUIET_MS`] after the start (a clock that stepped back closes it).
    fn open(&self, view: u64, now_ms: u64) -> bool {
        self.view == view
            && self.since_ms <= now_ms
            && now_ms < self.since_ms.saturating_add(READ_QUIET_MS)
    }

    pub(crate) fn covers(&self, view: u64, now_ms: u64, start: &[u8], end: &[u8]) -> bool {
        self.open(view, now_ms) && within(&self.ranges, start, end)
    }

    /// The quiet ranges after a pick at `now_ms` in `view` found nothing to do for `ranges`:
    /// added to those of an open window, else a window of their own.
    pub(crate) fn after(
        previous: Option<Self>,
        ranges: Vec<(Bytes, Bytes)>,
        view: u64,
        now_ms: u64,
    ) -> Self {
        match previous {
            Some(mut quiet) if quiet.open(view, now_ms) => {
                quiet.ranges.extend(ranges);
                let excess = quiet.ranges.len().saturating_sub(MAX_QUIET_RANGES);
                quiet.ranges.drain(..excess);
                quiet
            }
            _ => Self {
                ranges,
                view,
                since_ms: now_ms,
            },
        }
    }
}

/// Whether one of `ranges` holds all of `[start, end]`.
pub(crate) fn within(ranges: &[(Bytes, Bytes)], start: &[u8], end: &[u8]) -> bool {
    ranges
        .iter()
        .any(|(s, e)| s.as_ref() <= start && end <= e.as_ref())
}
