//! Statistics: what the engine holds and what it has done.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cairn_sstable::SeqNo;

/// Per-level figures of one column family's tables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelStats {
    /// Tables on the level.
    pub files: usize,
    /// Their bytes on disk.
    pub bytes: u64,
    /// Point entries of every kind.
    pub entries: u64,
    /// `Delete` and `SingleDelete` entries.
    pub point_tombstones: u64,
    /// Range tombstone pieces.
    pub range_tombstones: u64,
}

/// Tombstones and versions dropped by compaction, by the rule that dropped them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Versions hidden by newer ones in the same snapshot stripe.
    pub shadowed: u64,
    /// Point tombstones with nothing left to delete.
    pub obsolete_tombstone: u64,
    /// `SingleDelete` and `Put` pairs that cancelled.
    pub single_delete: u64,
    /// Range tombstones and what they covered.
    pub range: u64,
    /// Expired values.
    pub expired: u64,
    /// Entries a compaction filter removed.
    pub filter: u64,
}

/// A snapshot of the engine's statistics. Compaction figures stay zero until compaction lands
/// (issue 4).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Tables per level, summed over column families.
    pub levels: Vec<LevelStats>,
    /// Live snapshots.
    pub snapshots: usize,
    /// The oldest live snapshot's sequence number.
    pub oldest_snapshot_seqno: Option<SeqNo>,
    /// Point and range tombstones still in memtables or tables.
    pub tombstones_pending: u64,
    /// Of those, the ones the GC rules would drop now.
    pub tombstones_droppable: u64,
    /// The age of the oldest droppable tombstone.
    pub oldest_droppable_tombstone_age: Option<Duration>,
    /// Compactions run.
    pub compactions: u64,
    /// Bytes read by compactions.
    pub bytes_read: u64,
    /// Bytes written by flushes and compactions.
    pub bytes_written: u64,
    /// Entries dropped, by rule.
    pub dropped: DropCounts,
    /// Bytes written to tables per byte written to the log.
    pub write_amp: f64,
    /// Bytes in tables per byte of live data (1.0 until compaction can tell them apart).
    pub space_amp: f64,
    /// Flushes completed.
    pub flushes: u64,
    /// Times a write waited for a flush because too many memtables were frozen.
    pub write_stalls: u64,
    /// Writes applied.
    pub writes: u64,
    /// Bytes written to the log.
    pub wal_bytes: u64,
    /// Entries in memtables.
    pub memtable_entries: u64,
    /// Data blocks fetched (from the block cache or the file) from the tables now live: the
    /// cost of reads, for tests and tuning.
    pub data_blocks_read: u64,
}

/// Running counters, updated without locks.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    writes: AtomicU64,
    wal_bytes: AtomicU64,
    flushes: AtomicU64,
    stalls: AtomicU64,
    table_bytes_written: AtomicU64,
}

impl Counters {
    pub(crate) fn note_write(&self, ops: usize, bytes: usize) {
        self.writes.fetch_add(ops as u64, Ordering::Relaxed);
        self.wal_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn note_flush(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn note_stall(&self) {
        self.stalls.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn note_table_written(&self, bytes: u64) {
        self.table_bytes_written.fetch_add(bytes, Ordering::Relaxed);
    }
}

impl crate::db::DbInner {
    pub(crate) fn stats(&self) -> Stats {
        let sv = self.super_version();
        let mut levels = vec![LevelStats::default(); crate::version::NUM_LEVELS];
        for cf in sv.version.cfs.values() {
            for (level, file) in cf.all_files() {
                if let Some(l) = levels.get_mut(level) {
                    l.files += 1;
                    l.bytes += file.file_size;
                    l.entries += file.num_entries;
                    l.point_tombstones += file.num_point_tombstones;
                    l.range_tombstones += file.num_range_tombstones;
                }
            }
        }
        let mut memtable_entries = 0;
        let mut tombstones_pending: u64 = levels
            .iter()
            .map(|l| l.point_tombstones + l.range_tombstones)
            .sum();
        for set in &sv.memsets {
            for mem in set.tables.values() {
                memtable_entries += mem.num_entries();
                tombstones_pending += mem.num_point_tombstones() + mem.num_range_tombstones();
            }
        }
        let mut data_blocks_read = 0;
        for cf in sv.version.cfs.values() {
            for (_, file) in cf.all_files() {
                if let Ok(table) = self.tables.get(file.number) {
                    data_blocks_read += table.blocks_read();
                }
            }
        }
        let c = &self.stats;
        let wal_bytes = c.wal_bytes.load(Ordering::Relaxed);
        let bytes_written = c.table_bytes_written.load(Ordering::Relaxed);
        Stats {
            levels,
            snapshots: self.snapshots.count(),
            oldest_snapshot_seqno: self.snapshots.oldest(),
            tombstones_pending,
            compactions: 0,
            bytes_written,
            write_amp: ratio(bytes_written, wal_bytes),
            space_amp: 1.0,
            flushes: c.flushes.load(Ordering::Relaxed),
            write_stalls: c.stalls.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            wal_bytes,
            memtable_entries,
            data_blocks_read,
            ..Stats::default()
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        return 0.0;
    }
    // Counters stay far below 2^52, where the conversion is exact.
    #[expect(
        clippy::cast_precision_loss,
        reason = "byte counters are far below 2^52"
    )]
    let r = a as f64 / b as f64;
    r
}
