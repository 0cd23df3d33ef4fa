//! The running counters behind `Stats`: bumped as the engine writes, flushes, stalls and
//! compacts, read when `Db::stats` gathers a report.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use cairn_compaction::DropCounts;

/// Running counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) writes: AtomicU64,
    pub(crate) wal_bytes: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) recoveries: AtomicU64,
    pub(crate) stalls: AtomicU64,
    pub(crate) slowdowns: AtomicU64,
    pub(crate) read_triggers: AtomicU64,
    pub(crate) runs_recorded: AtomicU64,
    /// The most memtable sets frozen at once, raised as each read view is installed.
    pub(crate) immutable_memtables_peak: AtomicU64,
    pub(crate) table_bytes_written: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) trivial_moves: AtomicU64,
    pub(crate) compaction_bytes_read: AtomicU64,
    pub(crate) single_delete_misuse: AtomicU64,
    pub(crate) drops: Mutex<DropCounts>,
}

impl Counters {
    pub(crate) fn note_write(&self, ops: usize, bytes: usize) {
        self.writes.fetch_add(ops as u64, Ordering::Relaxed);
        self.wal_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn note_flush(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn note_recovery(&self) {
        self.recoveries.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn note_stall(&self) {
        self.stalls.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn note_slowdown(&self) {
        self.slowdowns.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn note_read_trigger(&self) {
        self.read_triggers.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn note_table_written(&self, bytes: u64) {
        self.table_bytes_written.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn note_trivial_move(&self, tables: usize) {
        self.trivial_moves
            .fetch_add(tables as u64, Ordering::Relaxed);
    }

    pub(crate) fn note_compaction(&self, job: &cairn_compaction::job::JobOutput) {
        self.compactions.fetch_add(1, Ordering::Relaxed);
        self.compaction_bytes_read
            .fetch_add(job.bytes_read, Ordering::Relaxed);
        self.note_table_written(job.bytes_written);
        self.single_delete_misuse
            .fetch_add(job.single_delete_misuse, Ordering::Relaxed);
        self.drops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .add(&job.drops);
    }
}
