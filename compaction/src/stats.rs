//! What a compaction did, counted.

/// Entries dropped by compaction, by the rule that dropped them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DropCounts {
    /// Versions hidden by newer ones (or a tombstone) in the same snapshot stripe.
    pub shadowed: u64,
    /// Point tombstones with nothing left to delete.
    pub obsolete_tombstone: u64,
    /// `SingleDelete`s and the puts they cancelled.
    pub single_delete: u64,
    /// Versions covered by a range tombstone in their stripe, and range tombstone pieces dropped.
    pub range: u64,
    /// Expired values (dropped or turned into tombstones).
    pub expired: u64,
    /// Values a compaction filter removed.
    pub filter: u64,
}

impl DropCounts {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: &Self) {
        self.shadowed += other.shadowed;
        self.obsolete_tombstone += other.obsolete_tombstone;
        self.single_delete += other.single_delete;
        self.range += other.range;
        self.expired += other.expired;
        self.filter += other.filter;
    }

    /// Every drop, whatever the rule.
    pub fn total(&self) -> u64 {
        self.shadowed
            + self.obsolete_tombstone
            + self.single_delete
            + self.range
            + self.expired
            + self.filter
    }
}
