//! Freezing the memtables: the active memtables join the frozen ones waiting for their flush,
//! and new memtables and a new log take their place.
//!
//! Only a leader of the write queue freezes, so no write can land in a memtable being frozen;
//! it does its I/O (the new log's creation and the directory sync) without the state lock,
//! which every write takes to find room. The old log is closed unsynced: the next synced write
//! seals it first, and a flush of its memtables lets it go (see `live_logs`). Background work that wants the
//! memtables frozen (a deadline, a scan over tombstones) asks, and the next leader does it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use cairn_wal::{LogWriter, RecoveryMode};

use crate::error::Result;
use crate::filename;
use crate::inner::{DbInner, DbState};
use crate::super_version::MemSet;

impl DbInner {
    /// Freezes the active memtables and starts a new log. Only a leader calls this: it alone
    /// replaces the memtables and the log, so nothing changes them while the lock is released
    /// for the I/O. A failure stops the database.
    pub(crate) fn switch_memtable<'a>(
        &'a self,
        mut state: MutexGuard<'a, DbState>,
    ) -> Result<MutexGuard<'a, DbState>> {
        let number = state.take_file_number();
        let closing = state.mem.log_number;
        drop(state);
        // Only the leader writes, so the old log's last record has the visible seqno.
        let last_seqno = self.visible_seqno.load(Ordering::Acquire);
        // In `AbsoluteConsistency` any damage fails the open, a power loss's tear of a log
        // closed unsynced included: there the switch seals it, as a close does.
        let seal_now = self.options.recovery_mode == RecoveryMode::AbsoluteConsistency;
        let opened = (|| -> Result<LogWriter> {
            {
                let mut wal = self.lock_wal();
                wal.end_current()?;
                if seal_now {
                    wal.seal()?;
                    self.durable_seqno.fetch_max(last_seqno, Ordering::AcqRel);
                }
            }
            let file = self.fs.create(&filename::log_path(&self.dir, number))?;
            self.fs.sync_dir(&self.dir)?;
            let mut wal = LogWriter::new(file);
            wal.begin()?;
            if seal_now {
                // Vouches for the log just sealed: cut short later, it is corruption.
                wal.mark_predecessors_sealed()?;
            }
            Ok(wal)
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
        self.lock_wal().switch(closing, last_seqno, wal, seal_now);
        let fresh = Arc::new(MemSet::new(number, state.meta.cfs.keys().copied()));
        let frozen = std::mem::replace(&mut state.mem, fresh);
        state.imm.push_back(frozen);
        self.install_super_version(&mut state);
        self.state_changed.notify_all();
        Ok(state)
    }

    /// Freezes the active memtables (if they hold anything) so the flush thread writes them out,
    /// waiting for a turn in the write queue, and then, if `max_immutable_memtables` are frozen
    /// already, for the flush thread to make room, as a writer would. The bound is checked
    /// and the memtables switched by the one leader under one hold of the state lock
    /// (`switch_memtable` lets it go only after taking the file number, and no other thread
    /// freezes meanwhile: background freezes need the queue too), so callers racing each other
    /// (`flush`, `compact_range` on many threads) cannot each see room and all freeze.
    pub(crate) fn freeze_memtable(&self) -> Result<()> {
        self.run_exclusive(Box::new(|db: &DbInner| {
            let mut state = db.lock_state();
            loop {
                state.check_running()?;
                if state.mem.is_empty() {
                    return Ok(0);
                }
                if state.imm.len() < db.options.max_immutable_memtables {
                    drop(db.switch_memtable(state)?);
                    return Ok(0);
                }
                db.stats.note_stall();
                state = db.wait_state(state);
            }
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
    pub(crate) fn freeze_if_requested<'a>(
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
}
