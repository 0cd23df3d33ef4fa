//! Statistics: what the engine holds and what it has done, gathered for `Db::stats` from the
//! current version, the snapshots and the running counters (`counters`).

use std::sync::atomic::Ordering;
use std::time::Duration;

pub use cairn_compaction::DropCounts;
use cairn_sstable::SeqNo;

/// Per-level figures of the tables, summed over column families.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
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

/// What the compactions of one `ColumnFamily::compact_tables` call read and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactionCounts {
    /// Point entries the compactions read from the tables the call found (every version and
    /// tombstone); entries of tables an earlier compaction of the same call wrote are not
    /// counted again when a later one reads them.
    pub entries_read: u64,
    /// Entries they dropped, by rule. A version over `max_versions` counts as shadowed even when
    /// it has also expired: the rules ask about the version limit first.
    pub dropped: DropCounts,
}

/// One table of a column family, as [`ColumnFamily::tables`](crate::ColumnFamily::tables)
/// lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableInfo {
    /// The level it lies on.
    pub level: usize,
    /// Its file number (the file is `<number>.sst`, the number zero-padded to six digits, in
    /// the database directory).
    pub number: u64,
    /// Its smallest user key.
    pub smallest: bytes::Bytes,
    /// Its largest user key (or the exclusive end of its last range tombstone).
    pub largest: bytes::Bytes,
    /// Its bytes on disk.
    pub bytes: u64,
    /// Point entries of every kind.
    pub entries: u64,
    /// `Delete` and `SingleDelete` entries.
    pub point_tombstones: u64,
    /// Range tombstone pieces.
    pub range_tombstones: u64,
    /// The earliest time (engine clock, ms) a cell TTL in it runs out, if any cell has one.
    pub earliest_expiry: Option<u64>,
    /// When its oldest tombstone was written (engine clock, ms), if it holds one.
    pub oldest_tombstone_time: Option<u64>,
    /// The smallest sequence number in it.
    pub smallest_seqno: SeqNo,
    /// The largest sequence number in it.
    pub largest_seqno: SeqNo,
}

impl TableInfo {
    pub(crate) fn of(level: usize, file: &crate::version_edit::FileMeta) -> Self {
        Self {
            level,
            number: file.number,
            smallest: file.smallest.clone(),
            largest: file.largest.clone(),
            bytes: file.file_size,
            entries: file.num_entries,
            point_tombstones: file.num_point_tombstones,
            range_tombstones: file.num_range_tombstones,
            earliest_expiry: file.earliest_expiry,
            oldest_tombstone_time: file.oldest_tombstone_time,
            smallest_seqno: file.smallest_seqno,
            largest_seqno: file.largest_seqno,
        }
    }
}

/// A snapshot of the engine's statistics.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Tables per level, summed over column families.
    pub levels: Vec<LevelStats>,
    /// Live snapshots.
    pub snapshots: usize,
    /// The oldest live snapshot's sequence number.
    pub oldest_snapshot_seqno: Option<SeqNo>,
    /// Point and range tombstones still in memtables or tables.
    pub tombstones_pending: u64,
    /// Of those in tables, the ones a compaction would drop now: in tables no snapshot pins,
    /// whose grace is over, with nothing below them. An estimate per table.
    pub tombstones_droppable: u64,
    /// How long the oldest of those has been droppable.
    pub oldest_droppable_tombstone_age: Option<Duration>,
    /// Compactions run.
    pub compactions: u64,
    /// Tables compactions moved down a level as they were, with no rewrite (not counted in
    /// `compactions`).
    pub trivial_moves: u64,
    /// Bytes read by compactions.
    pub bytes_read: u64,
    /// Bytes written to tables by flushes and compactions.
    pub bytes_written: u64,
    /// Entries dropped by compaction, by rule.
    pub dropped: DropCounts,
    /// `SingleDelete`s compaction found covering more than one put.
    pub single_delete_misuse: u64,
    /// Bytes written to tables per byte written to the log.
    pub write_amp: f64,
    /// Bytes in tables per byte in the last level (1.0 when everything is in the last level).
    pub space_amp: f64,
    /// Flushes completed.
    pub flushes: u64,
    /// Recoveries from a stop caused by an I/O error (`Db::resume`, automatic or asked for):
    /// each switched to a new log and flushed the memtables through a fresh MANIFEST.
    pub recoveries: u64,
    /// Times a write waited because too many memtables were frozen or level 0 was full.
    pub write_stalls: u64,
    /// Times a write was slowed because level 0 was filling up.
    pub write_slowdowns: u64,
    /// Scans that reported a range for stepping over too many tombstones. A report within a
    /// range already waiting for compaction is not counted, nor one within ranges a pick just
    /// found nothing to do for (tombstones a snapshot holds), while the read view stands, for
    /// at most a second.
    pub read_triggers: u64,
    /// Runs of deleted keys range reads stepped over and recorded in a memtable, so later
    /// reads seek past them (never logged; gone with their memtable). Never decreases.
    pub deleted_runs_recorded: u64,
    /// Writes applied.
    pub writes: u64,
    /// Bytes written to the log.
    pub wal_bytes: u64,
    /// Entries in memtables.
    pub memtable_entries: u64,
    /// Approximate bytes the memtables hold, the active and the frozen ones, as the flush
    /// trigger counts them (range-tombstone fragments included).
    pub memtable_bytes: u64,
    /// The flush trigger: the bytes a memtable holds before it is frozen and flushed
    /// (`Options::memtable_size`). `memtable_bytes` above it means flushes are behind.
    pub memtable_flush_trigger: u64,
    /// Data blocks fetched (from the block cache or the file) since open, by reads and
    /// compactions: the cost of reads, for tests and tuning. Never decreases.
    pub data_blocks_read: u64,
    /// Bytes the block cache charges now: its decompressed blocks plus 32 bytes per entry, kept
    /// within `Options::block_cache_bytes`. Reads fill it; compactions use what it holds but add
    /// nothing to it.
    pub block_cache_bytes: u64,
    /// Tables the table cache holds open now: at most `Options::max_open_tables`.
    pub open_tables: usize,
    /// Memtables frozen and waiting for their flush now (one per log, holding every column
    /// family's): at most `Options::max_immutable_memtables`.
    pub immutable_memtables: usize,
    /// The most memtables frozen at once since open: at most
    /// `Options::max_immutable_memtables`.
    pub immutable_memtables_peak: u64,
}

impl crate::inner::DbInner {
    pub(crate) fn stats(&self) -> Stats {
        let sv = self.super_version();
        let mut levels = vec![LevelStats::default(); crate::options::NUM_LEVELS];
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
        let mut memtable_bytes = 0;
        let mut tombstones_pending: u64 = levels
            .iter()
            .map(|l| l.point_tombstones + l.range_tombstones)
            .sum();
        for set in &sv.memsets {
            for mem in set.tables.values() {
                memtable_entries += mem.num_entries();
                memtable_bytes += mem.approximate_bytes() as u64;
                tombstones_pending += mem.num_point_tombstones() + mem.num_range_tombstones();
            }
        }
        let (tombstones_droppable, oldest_droppable_tombstone_age) = self.droppable(&sv);
        let c = &self.stats;
        let wal_bytes = c.wal_bytes.load(Ordering::Relaxed);
        let bytes_written = c.table_bytes_written.load(Ordering::Relaxed);
        let total: u64 = levels.iter().map(|l| l.bytes).sum();
        let last = levels
            .iter()
            .rev()
            .map(|l| l.bytes)
            .find(|&b| b > 0)
            .unwrap_or(0);
        Stats {
            snapshots: self.snapshots.count(),
            oldest_snapshot_seqno: self.snapshots.oldest(),
            tombstones_pending,
            tombstones_droppable,
            oldest_droppable_tombstone_age,
            compactions: c.compactions.load(Ordering::Relaxed),
            trivial_moves: c.trivial_moves.load(Ordering::Relaxed),
            bytes_read: c.compaction_bytes_read.load(Ordering::Relaxed),
            bytes_written,
            dropped: *c
                .drops
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            single_delete_misuse: c.single_delete_misuse.load(Ordering::Relaxed),
            write_amp: ratio(bytes_written, wal_bytes),
            space_amp: if last == 0 { 1.0 } else { ratio(total, last) },
            flushes: c.flushes.load(Ordering::Relaxed),
            recoveries: c.recoveries.load(Ordering::Relaxed),
            write_stalls: c.stalls.load(Ordering::Relaxed),
            write_slowdowns: c.slowdowns.load(Ordering::Relaxed),
            read_triggers: c.read_triggers.load(Ordering::Relaxed),
            deleted_runs_recorded: c.runs_recorded.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            wal_bytes,
            memtable_entries,
            memtable_bytes,
            memtable_flush_trigger: u64::try_from(self.options.memtable_size).unwrap_or(u64::MAX),
            data_blocks_read: self.tables.blocks_read(),
            block_cache_bytes: self.tables.block_cache_bytes(),
            open_tables: self.tables.open_tables(),
            immutable_memtables: sv.memsets.len().saturating_sub(1),
            immutable_memtables_peak: c.immutable_memtables_peak.load(Ordering::Relaxed),
            levels,
        }
    }

    /// Tombstones in tables that a compaction would drop now, judged per table, and the age of
    /// the oldest of them.
    fn droppable(&self, sv: &crate::super_version::SuperVersion) -> (u64, Option<Duration>) {
        let now = self.options.clock.now_ms();
        let oldest_snapshot = self.snapshots.oldest();
        let mut count = 0;
        let mut oldest: Option<u64> = None;
        for (cf, version) in &sv.version.cfs {
            let grace = sv
                .cfs
                .get(cf)
                .map_or(0, |(_, o)| crate::clock::millis(o.tombstone_grace));
            for (level, file) in version.all_files() {
                let (Some(time), Some(seqno)) =
                    (file.oldest_tombstone_time, file.smallest_tombstone_seqno)
                else {
                    continue;
                };
                let rules = TombstoneRules {
                    oldest_snapshot,
                    now,
                    grace_ms: grace,
                };
                let below = || {
                    version
                        .levels
                        .iter()
                        .skip(level + 1)
                        .flatten()
                        .any(|g| g.smallest <= file.largest && g.largest >= file.smallest)
                        .then_some(())
                };
                if rules.keep_reason(seqno, time, below).is_none() {
                    count += file.num_point_tombstones + file.num_range_tombstones;
                    let since = rules.grace_end(time);
                    oldest = Some(oldest.map_or(since, |o| o.min(since)));
                }
            }
        }
        (
            count,
            oldest.map(|since| Duration::from_millis(now.saturating_sub(since))),
        )
    }
}

use cairn_compaction::rules::TombstoneRules;

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        return 0.0;
    }
    #[expect(
        clippy::cast_precision_loss,
        reason = "byte counters are far below 2^52"
    )]
    let r = a as f64 / b as f64;
    r
}
