//! Group commit: the leader of a commit group writes the log, then the memtables.
//!
//! The leader (see `write_queue`) finds room in the active memtables — waiting while level 0 is
//! too full (failing with `WriteStall` instead when automatic compactions are off, since none
//! would come) or too many memtables wait for their flush, freezing the memtables (see
//! `memtable_switch`) when they are full, when background work asked for it, or when a batch's
//! range deletes would carry them past their size (`room_for`) — gives the group
//! consecutive sequence numbers, writes it as one log record (fsynced if any writer asked),
//! inserts it into the memtables, and publishes the new last sequence number.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use cairn_sstable::{MAX_SEQNO, RangeTombstoneMap, SeqNo};

use crate::batch::WriteBatch;
use crate::error::{Error, Result, StopCause};
use crate::inner::{DbInner, DbState};
use crate::log_record::{self, BatchOp, encode_record};
use crate::memtable::{Memtable, range_tombstone_growth};
use crate::super_version::MemSet;
use crate::write_queue::{Exclusive, Leader, Work};

impl DbInner {
    /// Writes `batch` atomically; returns the sequence number of its last write.
    pub(crate) fn write(&self, mut batch: WriteBatch, sync: bool) -> Result<SeqNo> {
        batch.validate(self.instance)?;
        if batch.is_empty() && sync {
            // Nothing to write, but the caller asked for what came before to be durable.
            return self.run_exclusive(Box::new(|db: &DbInner| {
                db.lock_state().check_running()?;
                let visible = db.visible_seqno.load(Ordering::Acquire);
                // The log lock is let go before `stop_with` takes the state lock: a flush takes
                // them the other way round.
                let synced = db.lock_wal().sync();
                synced.map_err(|e| {
                    let e = Error::from(e);
                    db.stop_with(&e);
                    e
                })?;
                db.durable_seqno.fetch_max(visible, Ordering::AcqRel);
                Ok(visible)
            }));
        }
        if batch.is_empty() {
            return Ok(self.visible_seqno.load(Ordering::Acquire));
        }
        let bytes = batch.size_bytes();
        self.submit(Work::Batch(batch.into_ops(), bytes), sync)
    }

    /// Writes one op (a caller's `put`, `delete`, …) without a batch around it.
    pub(crate) fn write_op(&self, op: BatchOp) -> Result<()> {
        op.validate()?;
        if op.is_empty_range() {
            return Ok(());
        }
        log_record::check_record_len(std::iter::once(&op))?;
        let bytes = op.approximate_bytes();
        self.submit(Work::Batch(vec![op], bytes), false).map(drop)
    }

    /// Runs `work` as the leader, alone, between commit groups.
    pub(crate) fn run_exclusive(&self, work: Exclusive<DbInner>) -> Result<SeqNo> {
        self.submit(Work::Exclusive(work), false)
    }

    /// Queues `work` in the write queue; a read-only database refuses it.
    fn submit(&self, work: Work<DbInner>, sync: bool) -> Result<SeqNo> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        self.writes.submit(self, work, sync)
    }

    /// Writes ops as one log record and applies them; returns the first op's sequence number.
    /// Only the leader calls this.
    pub(crate) fn write_ops(&self, ops: &[&BatchOp], sync: bool) -> Result<SeqNo> {
        let mem = self.room_for(ops)?;
        for op in ops {
            if !mem.tables.contains_key(&op.cf()) {
                return Err(Error::ColumnFamilyNotFound(format!("id {}", op.cf())));
            }
        }
        let first = self.visible_seqno.load(Ordering::Acquire) + 1;
        let last = first + ops.len() as u64 - 1;
        if last > MAX_SEQNO {
            let e = Error::Stopped {
                cause: StopCause::SequenceNumbersExhausted,
            };
            self.stop_with(&e);
            return Err(e);
        }
        let write_time = self.options.clock.now_ms();
        // Sized up front: growing it a few bytes at a time was a sixth of a put's cost.
        let mut record =
            Vec::with_capacity(32 + ops.iter().map(|op| op.approximate_bytes()).sum::<usize>());
        encode_record(first, write_time, ops, &mut record);
        let logged = self.lock_wal().write(&record, sync);
        if let Err(e) = logged {
            let e = Error::from(e);
            self.stop_with(&e);
            return Err(e);
        }
        // Applied before their seqnos are visible: a reader's snapshot never sees a write still
        // being applied, and a range read relies on every range delete that arrives while it
        // walks being newer than its snapshot (`SourceIter`'s `Clear` bound, iterator.rs).
        mem.apply(first, write_time, ops.iter().copied());
        self.visible_seqno.store(last, Ordering::Release);
        if sync {
            self.durable_seqno.fetch_max(last, Ordering::AcqRel);
        }
        self.stats.note_write(ops.len(), record.len());
        Ok(first)
    }

    /// The active memtables once they have room for `ops`. Range deletes over many fragments
    /// can need far more memory than their log record (each adds a version to every piece it
    /// covers), so their growth is found before anything is logged:
    /// - a batch whose range deletes would need more than [`range_delete_limit`] even in empty
    ///   memtables is refused with `InvalidArgument`, before anything else happens; it leads
    ///   alone (see `take_group`), so nobody else's write fails with it;
    /// - otherwise, when the growth would carry the memtables past the flush trigger, they are
    ///   switched first, so the batch lands in empty ones.
    ///
    /// Only the leader calls this.
    fn room_for(&self, ops: &[&BatchOp]) -> Result<Arc<MemSet>> {
        if !ops.iter().any(|op| op.is_range_delete()) {
            return self.make_room(0);
        }
        let size = self.options.memtable_size;
        let limit = range_delete_limit(size, ops);
        // One range delete alone costs what a disjoint one does: it is never refused.
        let several = ops
            .iter()
            .filter(|op| op.is_range_delete())
            .nth(1)
            .is_some();
        if several && range_delete_growth(ops, limit, |_| None) > limit {
            return Err(Error::invalid(format!(
                "this batch's range deletes over each other would hold more than {limit} bytes \
                 of fragments in memory ({RANGE_DELETE_LIMIT} x the larger of memtable_size and \
                 what they would cost were they disjoint): split it into smaller batches or \
                 raise memtable_size"
            )));
        }
        let mem = self.make_room(0)?;
        if mem.is_empty() || !range_deletes_overflow(&mem, ops, size) {
            return Ok(mem);
        }
        // Judged against memtables that already hold data: ask for empty ones.
        self.make_room(size)
    }

    /// Waits for room in the active memtables (for `need` more bytes, or any room when they are
    /// empty), freezing them if full or if background work asked for it; returns them. Only the
    /// leader calls this.
    fn make_room(&self, need: usize) -> Result<Arc<MemSet>> {
        let mut state = self.lock_state();
        let mut slowed = false;
        loop {
            // A switch lets the lock go for its I/O: the check comes after it.
            state = self.freeze_if_requested(state)?;
            state.check_running()?;
            let room_to_freeze = state.imm.len() < self.options.max_immutable_memtables;
            let l0 = state.meta.version.most_level0_files();
            let c = &self.options.compaction;
            if l0 >= c.l0_stop && c.disable_auto {
                // No compaction will come: waiting would be forever.
                return Err(Error::WriteStall {
                    level0_files: l0,
                    limit: c.l0_stop,
                });
            }
            if l0 >= c.l0_stop {
                // Compaction is far behind: stop writes until it catches up.
                self.stats.note_stall();
                state = self.wait_state(state);
                continue;
            }
            if l0 >= c.l0_slowdown && !slowed {
                // Falling behind: give compaction a little room, once per write.
                slowed = true;
                self.stats.note_slowdown();
                drop(state);
                std::thread::sleep(std::time::Duration::from_millis(1));
                state = self.lock_state();
                continue;
            }
            let held = state.mem.approximate_bytes();
            if held.saturating_add(need) < self.options.memtable_size
                || (need > 0 && state.mem.is_empty())
            {
                return Ok(Arc::clone(&state.mem));
            }
            if !room_to_freeze {
                self.stats.note_stall();
                state = self.wait_state(state);
                continue;
            }
            state = self.switch_memtable(state)?;
        }
    }

    /// Waits for the state to change (a flush or compaction finished), at most a little while.
    pub(crate) fn wait_state<'a>(&self, state: MutexGuard<'a, DbState>) -> MutexGuard<'a, DbState> {
        self.state_changed
            .wait_timeout(state, std::time::Duration::from_millis(100))
            .map_or_else(|e| e.into_inner().0, |(guard, _)| guard)
    }
}

/// A batch's range deletes may make empty memtables hold this many times `memtable_size`, or
/// this many times what they would cost were they disjoint, whichever is more: so disjoint range
/// deletes, whose cost is linear, are never refused, whatever their keys' length.
const RANGE_DELETE_LIMIT: usize = 4;

/// What one disjoint range delete costs a memtable at most, besides twice its keys: its raw
/// copy's bookkeeping and one fragment's (64 + 96 + a 16-byte version, rounded up).
const RANGE_DELETE_LINEAR_OVERHEAD: usize = 256;

/// The most a batch's range deletes may add to empty memtables (see `DbInner::room_for`).
fn range_delete_limit(memtable_size: usize, ops: &[&BatchOp]) -> usize {
    let linear: usize = ops
        .iter()
        .map(|op| match op {
            BatchOp::DeleteRange { start, end, .. } => {
                2 * (start.len() + end.len()) + RANGE_DELETE_LINEAR_OVERHEAD
            }
            _ => 0,
        })
        .fold(0, usize::saturating_add);
    memtable_size.max(linear).saturating_mul(RANGE_DELETE_LIMIT)
}

/// True if the range deletes among `ops` would carry the memtables of `mem` to `memtable_size`
/// or past it: the write path then switches to fresh memtables first, and replay does as it did.
pub(crate) fn range_deletes_overflow(mem: &MemSet, ops: &[&BatchOp], memtable_size: usize) -> bool {
    let room = memtable_size.saturating_sub(mem.approximate_bytes());
    range_delete_growth(ops, room, |cf| mem.tables.get(&cf)) >= room
}

/// The bytes the range deletes among `ops` would add to the memtables `memtable(cf)` gives for
/// each family (empty ones where it gives none); past `cap`, some sum above it.
fn range_delete_growth<'a>(
    ops: &[&BatchOp],
    cap: usize,
    memtable: impl Fn(u32) -> Option<&'a Arc<Memtable>>,
) -> usize {
    let cfs: std::collections::BTreeSet<u32> = ops
        .iter()
        .filter(|op| op.is_range_delete())
        .map(|op| op.cf())
        .collect();
    let empty = RangeTombstoneMap::new();
    let mut sum = 0usize;
    for cf in cfs {
        let ranges = ops.iter().filter_map(move |op| match op {
            BatchOp::DeleteRange {
                cf: of, start, end, ..
            } if *of == cf => Some((start, end)),
            _ => None,
        });
        let left = cap.saturating_sub(sum);
        sum = sum.saturating_add(match memtable(cf) {
            Some(table) => table.range_tombstone_growth(ranges, left),
            None => range_tombstone_growth(&empty, ranges, left),
        });
        if sum > cap {
            break;
        }
    }
    sum
}

impl Leader for DbInner {
    fn write_ops(&self, ops: &[&BatchOp], sync: bool) -> Result<SeqNo> {
        DbInner::write_ops(self, ops, sync)
    }

    fn unknown_family(&self, ops: &[BatchOp]) -> Option<u32> {
        // Column families change only in exclusive entries, so this view is current.
        let sv = self.super_version();
        ops.iter()
            .map(BatchOp::cf)
            .find(|cf| !sv.cfs.contains_key(cf))
    }

    fn stop_with(&self, error: &Error) {
        DbInner::stop_with(self, error);
    }
}
