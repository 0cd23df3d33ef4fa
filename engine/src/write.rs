//! The write path: group commit through one leader, the log, then the memtables.
//!
//! Writers queue up; the writer at the front becomes the leader, takes the batches queued
//! behind it (up to a byte limit), gives them consecutive sequence numbers, writes them as one
//! log record (fsynced if any of them asked), inserts them into the memtables, publishes the
//! new last sequence number, and wakes the writers it served. Work that must not interleave
//! with writes (freezing a memtable, a transaction's conflict check, column-family changes)
//! runs as an exclusive entry that the leader executes alone.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use bytes::Bytes;
use cairn_sstable::{EntryMeta, Kind, SeqNo};
use cairn_wal::LogWriter;

use crate::batch::{BatchOp, WriteBatch, encode_record};
use crate::db::{DbInner, DbState};
use crate::error::{Error, Result};
use crate::filename;
use crate::options::CfOptions;
use crate::super_version::MemSet;
use crate::version_edit::VersionEdit;

/// A commit group carries at most this many bytes of batches (more if one batch is larger).
const MAX_GROUP_BYTES: usize = 1 << 20;

/// Work done by the leader alone, with the database's `DbInner`.
pub(crate) type Exclusive = Box<dyn FnOnce(&DbInner) -> Result<SeqNo> + Send>;

enum Work {
    Batch(WriteBatch),
    Exclusive(Exclusive),
}

struct Pending {
    work: Mutex<Option<Work>>,
    sync: bool,
    result: Mutex<Option<Result<SeqNo>>>,
}

impl Pending {
    fn take_work(&self) -> Option<Work> {
        self.work
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    fn finish(&self, result: Result<SeqNo>) {
        *self
            .result
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(result);
    }

    fn take_result(&self) -> Option<Result<SeqNo>> {
        self.result
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    fn is_exclusive(&self) -> bool {
        matches!(
            *self
                .work
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            Some(Work::Exclusive(_))
        )
    }

    fn bytes(&self) -> usize {
        match &*self
            .work
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some(Work::Batch(b)) => b.size_bytes(),
            _ => 0,
        }
    }
}

/// Writers waiting their turn.
#[derive(Default)]
pub(crate) struct WriteQueue {
    queue: Mutex<QueueState>,
    turn: Condvar,
}

#[derive(Default)]
struct QueueState {
    /// A leader is writing (from the queue, or a writer that found it empty).
    leading: bool,
    /// Writers waiting; the first becomes the next leader.
    waiting: VecDeque<Arc<Pending>>,
}

impl std::fmt::Debug for WriteQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteQueue").finish_non_exhaustive()
    }
}

impl WriteQueue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends a leader's turn and wakes the waiting writers, if there are any: the group just
    /// served (`served_others`) or the next leader.
    fn end_turn(&self, mut queue: MutexGuard<'_, QueueState>, served_others: bool) {
        queue.leading = false;
        let waiting = served_others || !queue.waiting.is_empty();
        drop(queue);
        if waiting {
            self.turn.notify_all();
        }
    }
}

impl DbInner {
    /// Writes `batch` atomically; returns the sequence number of its last write.
    pub(crate) fn write(&self, mut batch: WriteBatch, sync: bool) -> Result<SeqNo> {
        batch.validate()?;
        if batch.is_empty() {
            return Ok(self.visible_seqno.load(Ordering::Acquire));
        }
        self.submit(Work::Batch(batch), sync)
    }

    /// Runs `work` as the leader, alone, between commit groups.
    pub(crate) fn run_exclusive(&self, work: Exclusive) -> Result<SeqNo> {
        self.submit(Work::Exclusive(work), false)
    }

    fn submit(&self, work: Work, sync: bool) -> Result<SeqNo> {
        let mut queue = self.writes.lock();
        if !queue.leading && queue.waiting.is_empty() {
            // Nobody to group with: write directly, with no queue entry to allocate and no one
            // to wake unless somebody queued meanwhile.
            queue.leading = true;
            drop(queue);
            let result = self.lead_alone(work, sync);
            self.writes.end_turn(self.writes.lock(), false);
            return result;
        }
        let me = Arc::new(Pending {
            work: Mutex::new(Some(work)),
            sync,
            result: Mutex::new(None),
        });
        queue.waiting.push_back(Arc::clone(&me));
        loop {
            if let Some(result) = me.take_result() {
                return result;
            }
            if !queue.leading
                && queue
                    .waiting
                    .front()
                    .is_some_and(|front| Arc::ptr_eq(front, &me))
            {
                break;
            }
            queue = self
                .writes
                .turn
                .wait(queue)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        queue.leading = true;
        let group = take_group(&queue.waiting);
        drop(queue);
        self.lead(&group);
        let mut queue = self.writes.lock();
        for _ in 0..group.len() {
            queue.waiting.pop_front();
        }
        self.writes.end_turn(queue, group.len() > 1);
        me.take_result()
            .unwrap_or_else(|| Err(Error::Stopped("write result lost".into())))
    }

    /// Executes one writer's work as a leader with no group; returns the last seqno written.
    fn lead_alone(&self, work: Work, sync: bool) -> Result<SeqNo> {
        match work {
            Work::Exclusive(work) => work(self),
            Work::Batch(batch) => {
                let ops: Vec<&BatchOp> = batch.ops.iter().collect();
                let first = self.write_ops(&ops, sync)?;
                Ok(first + batch.len() as u64 - 1)
            }
        }
    }

    /// Executes a group as its leader and stores every member's result.
    fn lead(&self, group: &[Arc<Pending>]) {
        let mut all = Vec::with_capacity(group.len());
        for pending in group {
            match pending.take_work() {
                // `take_group` serves an exclusive entry alone.
                Some(Work::Exclusive(work)) => return pending.finish(work(self)),
                Some(Work::Batch(batch)) => all.push((Arc::clone(pending), batch)),
                None => {}
            }
        }
        // Column families change only in exclusive entries, so this view is current.
        let cfs = self.super_version();
        all.retain(|(pending, batch)| {
            match batch.ops.iter().find(|op| !cfs.cfs.contains_key(&op.cf())) {
                Some(op) => {
                    pending.finish(Err(Error::ColumnFamilyNotFound(format!("id {}", op.cf()))));
                    false
                }
                None => true,
            }
        });
        if all.is_empty() {
            return;
        }
        let sync = all.iter().any(|(p, _)| p.sync);
        let ops: Vec<&BatchOp> = all.iter().flat_map(|(_, b)| b.ops.iter()).collect();
        let result = self.write_ops(&ops, sync);
        let mut next = match &result {
            Ok(first_seqno) => *first_seqno,
            Err(_) => 0,
        };
        for (pending, batch) in &all {
            next += batch.len() as u64;
            pending.finish(match &result {
                Ok(_) => Ok(next - 1),
                Err(e) => Err(e.duplicate()),
            });
        }
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
        apply_ops(&mem, first, write_time, ops.iter().copied());
        self.visible_seqno
            .store(first + ops.len() as u64 - 1, Ordering::Release);
        self.stats.note_write(ops.len(), record.len());
        Ok(first)
    }

    /// Waits for room in the active memtables, freezing them if full; returns them.
    fn make_room(&self) -> Result<Arc<MemSet>> {
        let mut state = self.lock_state();
        let mut slowed = false;
        loop {
            state.check_running()?;
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
            if state.imm.len() >= self.options.max_immutable_memtables {
                self.stats.note_stall();
                state = self.wait_state(state);
                continue;
            }
            self.switch_memtable(&mut state)?;
        }
    }

    /// Waits for the state to change (a flush or compaction finished), at most a little while.
    fn wait_state<'a>(
        &self,
        state: std::sync::MutexGuard<'a, DbState>,
    ) -> std::sync::MutexGuard<'a, DbState> {
        self.state_changed
            .wait_timeout(state, std::time::Duration::from_millis(100))
            .map_or_else(|e| e.into_inner().0, |(guard, _)| guard)
    }

    /// Freezes the active memtables and starts a new log. Called by the leader with the state
    /// lock held.
    pub(crate) fn switch_memtable(&self, state: &mut DbState) -> Result<()> {
        let number = state.meta.next_file_number;
        state.meta.next_file_number += 1;
        let result = (|| -> Result<LogWriter> {
            // Sync the old log first: a later synced write must never survive power loss while
            // an earlier unsynced one in the old log does not.
            self.lock_wal().sync()?;
            let file = self.fs.create(&filename::log_path(&self.dir, number))?;
            self.fs.sync_dir(&self.dir)?;
            Ok(LogWriter::new(file))
        })();
        let wal = match result {
            Ok(wal) => wal,
            Err(e) => {
                state.error.get_or_insert_with(|| e.to_string());
                return Err(e);
            }
        };
        *self.lock_wal() = wal;
        let frozen = std::mem::replace(
            &mut state.mem,
            Arc::new(MemSet::new(number, state.meta.cfs.keys().copied())),
        );
        state.imm.push_back(frozen);
        self.install_super_version(state);
        self.state_changed.notify_all();
        Ok(())
    }

    /// Freezes the memtables (if they hold anything) and waits until every frozen memtable is
    /// flushed.
    pub(crate) fn flush(&self) -> Result<()> {
        self.freeze_memtable()?;
        self.wait_for_flushes()
    }

    /// Freezes the active memtables (if they hold anything) so the flush thread writes them out.
    pub(crate) fn freeze_memtable(&self) -> Result<()> {
        self.run_exclusive(Box::new(|db: &DbInner| {
            let mut state = db.lock_state();
            state.check_running()?;
            if !state.mem.is_empty() {
                db.switch_memtable(&mut state)?;
            }
            Ok(0)
        }))
        .map(drop)
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

    pub(crate) fn create_column_family(&self, name: &str, options: CfOptions) -> Result<u32> {
        if name.is_empty() {
            return Err(Error::invalid("a column family needs a name"));
        }
        let name = name.to_string();
        let id = self.run_exclusive(Box::new(move |db: &DbInner| {
            let mut state = db.lock_state();
            state.check_running()?;
            if state.meta.cfs.values().any(|(n, _)| *n == name) {
                return Err(Error::invalid(format!(
                    "column family {name:?} already exists"
                )));
            }
            let id = state.meta.next_cf_id;
            let edit = VersionEdit {
                added_cfs: vec![(id, name, options)],
                next_cf_id: Some(id + 1),
                ..VersionEdit::default()
            };
            db.log_and_apply(&mut state, &edit)?;
            let mut tables = state.mem.tables.clone();
            tables.insert(id, Arc::new(crate::memtable::Memtable::new()));
            state.mem = Arc::new(MemSet {
                log_number: state.mem.log_number,
                tables,
            });
            db.install_super_version(&mut state);
            Ok(u64::from(id))
        }))?;
        u32::try_from(id).map_err(|_| Error::invalid("column family id overflow"))
    }

    pub(crate) fn drop_column_family(&self, id: u32, name: &str) -> Result<()> {
        let name = name.to_string();
        self.run_exclusive(Box::new(move |db: &DbInner| {
            let mut state = db.lock_state();
            state.check_running()?;
            if !state.meta.cfs.contains_key(&id) {
                return Err(Error::ColumnFamilyNotFound(name));
            }
            let edit = VersionEdit {
                dropped_cfs: vec![id],
                ..VersionEdit::default()
            };
            db.log_and_apply(&mut state, &edit)?;
            let mut tables = state.mem.tables.clone();
            tables.remove(&id);
            state.mem = Arc::new(MemSet {
                log_number: state.mem.log_number,
                tables,
            });
            db.install_super_version(&mut state);
            Ok(0)
        }))?;
        self.delete_obsolete_files();
        Ok(())
    }

    /// Appends `edit` to the MANIFEST (synced) and applies it to the state. Refused once a
    /// failure stopped the database: after a failed MANIFEST write or sync, the file may hold an
    /// edit the state lacks, and a later edit's sync would make it durable behind the state's back.
    pub(crate) fn log_and_apply(&self, state: &mut DbState, edit: &VersionEdit) -> Result<()> {
        if let Some(why) = &state.error
            && !crate::planted::active(crate::planted::Bug::DeleteAfterManifestFailure)
        {
            return Err(Error::Stopped(why.clone()));
        }
        let mut edit = edit.clone();
        edit.next_file_number = Some(state.meta.next_file_number);
        edit.last_seqno = Some(self.visible_seqno.load(Ordering::Acquire));
        if let Err(e) = state.manifest.append(&edit, self.fs.as_ref()) {
            state.error.get_or_insert_with(|| e.to_string());
            return Err(e);
        }
        let path = state.manifest.path().to_path_buf();
        state.meta.apply(&edit, &path)
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

/// The queued writers a leader serves: itself, then batches behind it while the group stays
/// within the byte limit (so a group never grows past what one log record may hold: a batch
/// near that limit always leads alone). An exclusive entry is always served alone, and a sync
/// write never joins a group whose leader does not sync (so a non-sync leader never pays for a
/// sync it did not ask for... nor delays it).
fn take_group(queue: &VecDeque<Arc<Pending>>) -> Vec<Arc<Pending>> {
    let Some(leader) = queue.front() else {
        return Vec::new();
    };
    let mut group = vec![Arc::clone(leader)];
    if leader.is_exclusive() {
        return group;
    }
    let mut bytes = leader.bytes();
    for pending in queue.iter().skip(1) {
        bytes += pending.bytes();
        if pending.is_exclusive() || (pending.sync && !leader.sync) || bytes > MAX_GROUP_BYTES {
            break;
        }
        group.push(Arc::clone(pending));
    }
    group
}

/// Inserts ops into the memtables with consecutive sequence numbers from `first`.
pub(crate) fn apply_ops<'a>(
    mem: &MemSet,
    first: SeqNo,
    write_time: u64,
    ops: impl Iterator<Item = &'a BatchOp>,
) {
    for (seqno, op) in (first..).zip(ops) {
        let Some(table) = mem.tables.get(&op.cf()) else {
            continue;
        };
        let meta = EntryMeta::at(write_time);
        match op {
            BatchOp::Put {
                key, value, ttl, ..
            } => {
                table.insert(
                    key,
                    seqno,
                    Kind::Put,
                    EntryMeta {
                        write_time,
                        ttl: *ttl,
                    },
                    value.clone(),
                );
            }
            BatchOp::Delete { key, .. } => {
                table.insert(key, seqno, Kind::Delete, meta, Bytes::new());
            }
            BatchOp::SingleDelete { key, .. } => {
                table.insert(key, seqno, Kind::SingleDelete, meta, Bytes::new());
            }
            BatchOp::DeleteRange { start, end, .. } => {
                table.insert_range_tombstone(start.clone(), end.clone(), seqno, write_time);
            }
        }
    }
}
