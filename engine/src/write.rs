//! The write path: the leader of a commit group writes the log, then the memtables.
//!
//! The leader (see `write_queue`) finds room in the active memtables — waiting while level 0 is
//! too full or too many memtables wait for their flush, freezing the memtables when they are
//! full or when background work asked for it — gives the group consecutive sequence numbers,
//! writes it as one log record (fsynced if any writer asked), inserts it into the memtables, and
//! publishes the new last sequence number.
//!
//! Freezing swaps in new memtables and a new log. Only a leader does it, so no write can land in
//! a memtable being frozen, and it does its I/O (the old log's sync, the new log's creation and
//! the directory sync) without the state lock, which every write takes to find room.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use cairn_sstable::{MAX_SEQNO, SeqNo};
use cairn_wal::LogWriter;

use crate::batch::WriteBatch;
use crate::db::{DbInner, DbState};
use crate::error::{Error, Result};
use crate::filename;
use crate::log_record::{BatchOp, encode_record};
use crate::super_version::MemSet;
use crate::write_queue::{Exclusive, Work};

impl DbInner {
    /// Writes `batch` atomically; returns the sequence number of its last write.
    pub(crate) fn write(&self, mut batch: WriteBatch, sync: bool) -> Result<SeqNo> {
        batch.validate(self.instance)?;
        if batch.is_empty() && sync {
            // Nothing to write, but the caller asked for what came before to be durable.
            return self.run_exclusive(Box::new(|db: &DbInner| {
                db.lock_state().check_running()?;
                let visible = db.visible_seqno.load(Ordering::Acquire);
                db.lock_wal().sync().map_err(|e| {
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
        self.submit(Work::Batch(batch), sync)
    }

    /// Runs `work` as the leader, alone, between commit groups.
    pub(crate) fn run_exclusive(&self, work: Exclusive) -> Result<SeqNo> {
        self.submit(Work::Exclusive(work), false)
    }

    /// Writes ops as one log record and applies them; returns the first op's sequence number.
    /// Only the leader calls this.
    pub(crate) fn write_ops(&self, ops: &[&BatchOp], sync: bool) -> Result<SeqNo> {
        let mem = self.make_room()?;
        for op in ops {
            if !mem.tables.contains_key(&op.cf()) {
                return Err(Error::ColumnFamilyNotFound(format!("id {}", op.cf())));
            }
        }
        let first = self.visible_seqno.load(Ordering::Acquire) + 1;
        let last = first + ops.len() as u64 - 1;
        if last > MAX_SEQNO {
            let e = Error::Stopped(format!(
                "sequence numbers are used up (the last is {MAX_SEQNO})"
            ));
            self.stop_with(&e);
            return Err(e);
        }
        let write_time = self.options.clock.now_ms();
        // Sized up front: growing it a few bytes at a time was a sixth of a put's cost.
        let mut record =
            Vec::with_capacity(32 + ops.iter().map(|op| op.approximate_bytes()).sum::<usize>());
        encode_record(first, write_time, ops, &mut record);
        let logged = {
            let mut wal = self.lock_wal();
            wal.add_record(&record)
                .and_then(|_| if sync { wal.sync() } else { Ok(()) })
        };
        if let Err(e) = logged {
            let e = Error::from(e);
            self.stop_with(&e);
            return Err(e);
        }
        mem.apply(first, write_time, ops.iter().copied());
        self.visible_seqno.store(last, Ordering::Release);
        if sync {
            self.durable_seqno.fetch_max(last, Ordering::AcqRel);
        }
        self.stats.note_write(ops.len(), record.len());
        Ok(first)
    }

    /// Waits for room in the active memtables, freezing them if full or if background work asked
    /// for it; returns them. Only the leader calls this.
    fn make_room(&self) -> Result<Arc<MemSet>> {
        let mut state = self.lock_state();
        let mut slowed = false;
        loop {
            // A switch lets the lock go for its I/O: the check comes after it.
            state = self.freeze_if_requested(state)?;
            state.check_running()?;
            let room_to_freeze = state.imm.len() < self.options.max_immutable_memtables;
            let l0 = level0_files(&state);
            let c = &self.options.compaction;
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
            if state.mem.approximate_bytes() < self.options.memtable_size {
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
    fn wait_state<'a>(&self, state: MutexGuard<'a, DbState>) -> MutexGuard<'a, DbState> {
        self.state_changed
            .wait_timeout(state, std::time::Duration::from_millis(100))
            .map_or_else(|e| e.into_inner().0, |(guard, _)| guard)
    }

    /// Freezes the active memtables and starts a new log. Only a leader calls this: it alone
    /// replaces the memtables and the log, so nothing changes them while the lock is released
    /// for the I/O. A failure stops the database.
    pub(crate) fn switch_memtable<'a>(
        &'a self,
        mut state: MutexGuard<'a, DbState>,
    ) -> Result<MutexGuard<'a, DbState>> {
        let number = state.meta.next_file_number;
        state.meta.next_file_number += 1;
        drop(state);
        let opened = (|| -> Result<LogWriter> {
            // Sync the old log first: a later synced write must never survive power loss while
            // an earlier unsynced one in the old log does not. Sealed, since it takes no more
            // records: if the new log stays empty, recovery takes this one for the last and would
            // otherwise read damage in its synced records as a torn tail.
            let sealed = self.visible_seqno.load(Ordering::Acquire);
            self.lock_wal().seal()?;
            self.durable_seqno.fetch_max(sealed, Ordering::AcqRel);
            let file = self.fs.create(&filename::log_path(&self.dir, number))?;
            self.fs.sync_dir(&self.dir)?;
            Ok(LogWriter::new(file))
        })();
        let mut state = self.lock_state();
        let wal = match opened {
            Ok(wal) => wal,
            Err(e) => {
                state.stop(&e);
                self.state_changed.notify_all();
                return Err(e);
            }
        };
        *self.lock_wal() = wal;
        let fresh = Arc::new(MemSet::new(number, state.meta.cfs.keys().copied()));
        let frozen = std::mem::replace(&mut state.mem, fresh);
        state.imm.push_back(frozen);
        self.install_super_version(&mut state);
        self.state_changed.notify_all();
        Ok(state)
    }

    /// Freezes the memtables and waits until every frozen memtable is flushed and the logs
    /// they came from are deleted.
    pub(crate) fn flush(&self) -> Result<()> {
        self.freeze_memtable()?;
        self.wait_for_flushes()?;
        // The flush thread deletes them too, but after it lets waiters go.
        self.delete_obsolete_files();
        Ok(())
    }

    /// Freezes the active memtables (if they hold anything) so the flush thread writes them out,
    /// waiting for a turn in the write queue.
    pub(crate) fn freeze_memtable(&self) -> Result<()> {
        self.run_exclusive(Box::new(|db: &DbInner| {
            let state = db.lock_state();
            state.check_running()?;
            if !state.mem.is_empty() {
                drop(db.switch_memtable(state)?);
            }
            Ok(0)
        }))
        .map(drop)
    }

    /// Freezes the active memtables for background work without ever waiting on the write
    /// queue: a writer stalled on level 0 holds it until compaction — maybe this very thread —
    /// makes room. If a writer leads, the request stays for it: a leader honours it whenever it
    /// looks for room.
    pub(crate) fn freeze_from_background(&self) -> Result<()> {
        let Some(_turn) = self.writes.try_lead() else {
            return Ok(());
        };
        let state = self.lock_state();
        if state.check_running().is_ok() {
            drop(self.freeze_if_requested(state)?);
        }
        Ok(())
    }

    /// Freezes the memtables if background work (a deadline, a scan over tombstones) asked for
    /// it and there is room for another frozen one; `Stopped` if it would but the database has
    /// stopped. Only a leader calls this.
    fn freeze_if_requested<'a>(
        &'a self,
        mut state: MutexGuard<'a, DbState>,
    ) -> Result<MutexGuard<'a, DbState>> {
        if !state.freeze_requested || state.imm.len() >= self.options.max_immutable_memtables {
            return Ok(state);
        }
        state.check_running()?;
        state.freeze_requested = false;
        if state.mem.is_empty() {
            return Ok(state);
        }
        self.switch_memtable(state)
    }

    /// Waits until every frozen memtable is flushed.
    pub(crate) fn wait_for_flushes(&self) -> Result<()> {
        let mut state = self.lock_state();
        while !state.imm.is_empty() {
            state.check_running()?;
            state = self
                .state_changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        state.check_running()
    }
}

/// The most level-0 tables any column family has.
fn level0_files(state: &DbState) -> usize {
    state
        .meta
        .version
        .cfs
        .values()
        .map(|v| v.levels.first().map_or(0, Vec::len))
        .max()
        .unwrap_or(0)
}
