//! The garbage-collection rules of DESIGN.md §3, stated once: what lives and what dies.
//!
//! A compaction reads every version of every key in its inputs, newest first, and writes out only
//! what some reader could still need. Each rule below is the row of DESIGN.md §3 of the same
//! name. The compaction iterator applies them; `explain_tombstones`, the engine's droppable
//! counts, the picker's triggers and the read path ask this module instead of restating them, so
//! what the engine says about a tombstone is what compaction then does.
//!
//! # Snapshot stripes
//!
//! Live snapshots cut the sequence numbers into **stripes**. A version belongs to the stripe of
//! the oldest snapshot that can see it (the first snapshot at or above its seqno), or to the top
//! stripe if no snapshot can: only readers of "now" see it.
//!
//! ```text
//! snapshots:            s=10            s=20
//! seqnos:    1 .. 10 |  11 .. 20  |  21 ..
//! stripe:        0   |      1     |    2 (top)
//! ```
//!
//! Within one stripe every reader sees the same newest version, so older versions in the same
//! stripe are invisible to everyone. Across a stripe boundary they are not: the snapshot between
//! them still reads the older one.
//!
//! # The rules
//!
//! **shadowed** — a version is dropped when its stripe already holds `max_versions` newer puts,
//! or a newer tombstone. With `max_versions = 1`:
//!
//! ```text
//! k@30 Put "c" | k@25 Put "b" | k@12 Put "a"      snapshot at 20
//! stripe 2       stripe 2       stripe 1
//! keep           drop (shadowed) keep (the snapshot reads "a")
//! ```
//!
//! **obsolete tombstone** — a `Delete` is dropped only when all three hold: no live snapshot is
//! older than it (it is in stripe 0), no older version of the key can exist below the output level
//! (the compaction is bottommost for the key), and its grace period is over
//! (`now >= deletion_time + grace`). Anything older in its stripe goes with it, as shadowed.
//!
//! ```text
//! k@40 Delete (t=1000) | k@5 Put "a"      no snapshots, bottommost, grace 60 s
//! now = 1000 + 59_999:  keep the Delete, drop the Put (shadowed)
//! now = 1000 + 60_000:  drop both
//! ```
//!
//! Dropping it earlier would resurrect: a snapshot older than it would keep "a" in an older
//! stripe, or a put below would show through once the tombstone is gone.
//!
//! **single delete** — a `SingleDelete` that meets the `Put` it cancels in its own stripe removes
//! it. The `SingleDelete` goes too under the obsolete-tombstone conditions (no older snapshot,
//! nothing below, grace over); until then it stays as a tombstone, so a put that misuse left
//! further down can never show through. (`RocksDB` drops the pair at any level; Cairn keeps the
//! marker until the bottom, where misuse can be seen.) A second put under one `SingleDelete` is
//! **misuse**: it is counted, and the `SingleDelete` then acts as a `Delete`, so nothing is
//! resurrected. With a snapshot between the two, both stay: the snapshot reads the put.
//!
//! ```text
//! k@9 SingleDelete | k@4 Put "a"     no snapshot: both dropped
//! k@9 SingleDelete | k@4 Put "a"     snapshot at 6: both kept
//! ```
//!
//! **range tombstone** — a point version covered by a range tombstone newer than it *in the same
//! stripe* is dropped (a snapshot between them still reads it). A range tombstone itself is dropped
//! under the obsolete-tombstone conditions, with "nothing below the output level overlaps its
//! range" for "bottommost"; over one fragment, at most one piece of a stripe is kept: the newest
//! with a reason to stay (an older one only when every newer one may go, which takes a later
//! deletion time, as clocks may step back), and the others are redundant and dropped.
//!
//! **expired** — a put whose TTL is over (`now >= write_time + min(cf_ttl, cell_ttl)`). With
//! `max_versions = 1` it is dropped only when no older version survives in the output and none can
//! lie below; otherwise it is rewritten as a `Delete` at the same seqno, deleted at its expiry
//! time, so no older value comes back at any snapshot. With `max_versions > 1` it stays a
//! candidate, written out with its value emptied, until no older version of the key survives in
//! the output and none can lie below; then it is dropped. Expired puts count as candidates for
//! `max_versions`, as they do for reads, so results never depend on whether compaction ran: a
//! reader also counts the newer versions of levels this compaction does not see, and dropping an
//! expired one with an older version under it would move that version into its candidates.
//!
//! ```text
//! max_versions = 2:   k@9 Put "c" (in L0) | k@7 Put (expired, in L1) | k@6 Put "b" | k@5 Put "a"
//! compaction of L1, nothing below: keep @7 (value emptied), keep @6, drop @5 (shadowed)
//!   a reader sees @9 and @7 as its candidates: "c" alone, before and after
//! once @6 has expired too: drop @7 and @6 (nothing older is left under them)
//! ```
//!
//! **filter** — a user [`CompactionFilter`](crate::CompactionFilter) is asked about the newest version of a key only, and
//! only when no live snapshot can read it (it is newer than every snapshot: the top stripe), so a
//! filter never changes what a snapshot sees. `Remove` drops the put when nothing older survives
//! or can lie below; otherwise the put becomes a `Delete` so nothing older shows through to new
//! readers. `ChangeValue` rewrites the value in place.

use cairn_sstable::{EntryMeta, SeqNo};

/// Why the rules keep a tombstone. `B` is what the caller knows of the data below (the level it
/// lies at, for an explanation; nothing, for compaction). Deliberately exhaustive: a new reason
/// must break every caller's `match` until it says what the reason means there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepReason<B = ()> {
    /// A live snapshot older than the tombstone may read what it deletes.
    PinnedBySnapshot {
        /// The oldest such snapshot.
        snapshot: SeqNo,
    },
    /// Its grace period runs until then (ms).
    GraceUntil {
        /// The end of the grace period.
        time: u64,
    },
    /// Older data for its key or range may lie below the output level.
    DataBelow(B),
}

/// What the obsolete-tombstone rule weighs besides the tombstone itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TombstoneRules {
    /// The oldest live snapshot, if any.
    pub oldest_snapshot: Option<SeqNo>,
    /// The clock reading, ms.
    pub now: u64,
    /// The column family's tombstone grace, ms.
    pub grace_ms: u64,
}

impl TombstoneRules {
    /// The oldest live snapshot older than a tombstone at `seqno`: it pins the tombstone.
    pub fn pinned_by(&self, seqno: SeqNo) -> Option<SeqNo> {
        self.oldest_snapshot.filter(|&s| s < seqno)
    }

    /// When the grace period of a tombstone deleted at `deletion_time` ends.
    pub fn grace_end(&self, deletion_time: u64) -> u64 {
        grace_end(deletion_time, self.grace_ms)
    }

    /// Whether the grace period of a tombstone deleted at `deletion_time` is over.
    pub fn grace_over(&self, deletion_time: u64) -> bool {
        self.now >= self.grace_end(deletion_time)
    }

    /// The obsolete-tombstone rule: why a tombstone at `seqno` deleted at `deletion_time` is
    /// kept, or `None` if it may be dropped. The conditions are weighed in this order —
    /// snapshot, grace, data below — and `data_below` (the costly one) is asked only when the
    /// first two let the tombstone go; it returns what it found below, if anything.
    ///
    /// Within one snapshot stripe and one range, a reason only grows with the deletion time (the
    /// snapshot condition is the same for every seqno of a stripe, and a later deletion ends its
    /// grace later). Compaction relies on it to hold only the pieces it can choose between
    /// (`FragmentedRangeTombstones::fragment_in_stripes`): a condition that favoured an older
    /// seqno or an earlier deletion would have to change that too.
    pub fn keep_reason<B>(
        &self,
        seqno: SeqNo,
        deletion_time: u64,
        data_below: impl FnOnce() -> Option<B>,
    ) -> Option<KeepReason<B>> {
        if let Some(snapshot) = self.pinned_by(seqno) {
            return Some(KeepReason::PinnedBySnapshot { snapshot });
        }
        if !self.grace_over(deletion_time) {
            return Some(KeepReason::GraceUntil {
                time: self.grace_end(deletion_time),
            });
        }
        data_below().map(KeepReason::DataBelow)
    }
}

/// When a put expires under the column family's TTL `cf_ttl_ms` and its own cell TTL: at
/// `write_time + min(cf_ttl, cell_ttl)`; `None` if neither is set
/// ([`EntryMeta::expiry_under`]).
pub fn expiry(meta: EntryMeta, cf_ttl_ms: Option<u64>) -> Option<u64> {
    meta.expiry_under(cf_ttl_ms)
}

/// When the grace period `grace_ms` of a tombstone deleted at `deletion_time` ends.
pub fn grace_end(deletion_time: u64, grace_ms: u64) -> u64 {
    deletion_time.saturating_add(grace_ms)
}

/// Whether a put has expired at `now` (a TTL of zero is expired at once).
pub fn expired(meta: EntryMeta, cf_ttl_ms: Option<u64>, now: u64) -> bool {
    expiry(meta, cf_ttl_ms).is_some_and(|e| now >= e)
}

/// The delete persistence deadline, split into stages: a droppable tombstone must leave the
/// memtable within the first `deadline / (levels + 1)`, and level `l` within `l + 2` of those
/// stages, so the compactions that carry it down reach the bottom within the whole deadline.
/// (The MANIFEST rollover that forgets table bounds naming a deleted key waits one stage after
/// the edit it drops, so a key that was a table's bound can outlive the deadline there by a
/// stage.) `level` is `None` for a memtable. Returns how long after the tombstone became
/// droppable (its grace end) it must leave that place.
pub fn deadline_budget(deadline_ms: u64, levels: usize, level: Option<usize>) -> u64 {
    let stages = levels as u64 + 1;
    let stage = level.map_or(1, |l| l as u64 + 2);
    deadline_ms.saturating_mul(stage) / stages
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: TombstoneRules = TombstoneRules {
        oldest_snapshot: Some(10),
        now: 1_000,
        grace_ms: 100,
    };

    #[test]
    fn obsolete_tombstone_reasons_in_order() {
        let nothing = || None::<usize>;
        assert_eq!(
            RULES.keep_reason(11, 0, nothing),
            Some(KeepReason::PinnedBySnapshot { snapshot: 10 }),
            "a snapshot older than the tombstone pins it"
        );
        assert_eq!(
            RULES.keep_reason(10, 0, nothing),
            None,
            "a snapshot at its seqno does not"
        );
        assert_eq!(
            RULES.keep_reason(5, 901, nothing),
            Some(KeepReason::GraceUntil { time: 1_001 }),
            "one millisecond of grace left"
        );
        assert_eq!(
            RULES.keep_reason(5, 900, nothing),
            None,
            "grace ends at now"
        );
        assert_eq!(
            RULES.keep_reason(5, 900, || Some(3)),
            Some(KeepReason::DataBelow(3))
        );
        let mut asked = false;
        let _ = RULES.keep_reason(11, 0, || {
            asked = true;
            Some(1)
        });
        assert!(!asked, "what lies below is asked last");
    }

    #[test]
    fn expiry_takes_the_shorter_ttl_and_zero_is_at_once() {
        let meta = |ttl| EntryMeta {
            write_time: 100,
            ttl,
        };
        assert_eq!(expiry(meta(None), None), None);
        assert_eq!(expiry(meta(Some(50)), Some(20)), Some(120));
        assert_eq!(expiry(meta(None), Some(20)), Some(120));
        assert!(!expired(meta(Some(50)), None, 149));
        assert!(expired(meta(Some(50)), None, 150));
        assert!(
            expired(meta(Some(0)), None, 100),
            "a TTL of zero is expired at once"
        );
    }

    #[test]
    fn the_deadline_stages_add_up_to_the_deadline() {
        assert_eq!(deadline_budget(8_000, 7, None), 1_000);
        assert_eq!(deadline_budget(8_000, 7, Some(0)), 2_000);
        assert_eq!(
            deadline_budget(8_000, 7, Some(6)),
            8_000,
            "the bottom by the deadline"
        );
    }
}
