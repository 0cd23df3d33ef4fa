//! Running tasks: a worker claims a runnable tablet task, runs its steps (each a compaction of
//! about one table of its range) and records after each what it counted and where it got; the
//! tenant task moves to history once every tablet task is done; periodic launches and history
//! recycling.
//!
//! Every change of a task row happens under the manager's control lock, re-reading the row
//! first, so a command that lands during a step (suspend, cancel) wins: the step's counts are
//! added and the worker lets the tablet go.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn::CompactionCounts;

use super::error::{TtlError, TtlResult};
use super::plan::{self, Step};
use super::record::Record;
use super::{Inner, TaskRow, TaskStatus, TriggerType, TtlTasks, records};
use crate::error::Error;

/// History rows deleted per batch when recycling.
const RECYCLE_BATCH: usize = 1000;

/// Recycling runs at most this often (engine-clock milliseconds): it reads all of history.
const RECYCLE_EVERY_MS: u64 = 60_000;

/// What a worker does with a tablet after a step.
enum After {
    Continue,
    Release,
}

impl TtlTasks {
    /// Claims and runs tablet tasks until none can run now (or `stop` is set).
    pub(crate) fn work(&self, stop: &AtomicBool) -> TtlResult<()> {
        let inner = &self.inner;
        while !stop.load(Ordering::SeqCst) {
            let Some(record) = inner.claim()? else {
                break;
            };
            let claim = Claim {
                inner,
                id: record.id,
            };
            self.run_tablet(record, stop)?;
            drop(claim);
            inner.move_if_done()?;
        }
        Ok(())
    }

    /// Runs a claimed tablet's steps until it is done, a command or memory pressure stops it,
    /// or `stop` is set. Before each step the row is read again under the control lock: a
    /// command or pressure that came during the last step (or from the `on_step` callback)
    /// stops the tablet before the next one.
    fn run_tablet(&self, mut record: Record, stop: &AtomicBool) -> TtlResult<()> {
        let inner = &self.inner;
        loop {
            if stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            match inner.may_step(record.id)? {
                Some(now) => record = now,
                None => return Ok(()),
            }
            let outcome = inner.step(&record);
            let (after, row) = {
                let _control = inner.lock();
                let Some(now) = inner.reload(record.id)? else {
                    return Ok(()); // moved or deleted meanwhile
                };
                record = now;
                let after = inner.record_step(&mut record, outcome);
                inner.save(&record)?;
                (after, record.row.clone())
            };
            let on_step = inner
                .on_step
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            if let Some(f) = on_step {
                f(self, &row);
            }
            if matches!(after, After::Release) {
                return Ok(());
            }
        }
    }
}

/// A tablet a worker runs; let go when dropped, a panic's unwinding included.
struct Claim<'a> {
    inner: &'a Inner,
    id: u64,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.inner.lock().claimed.remove(&self.id);
    }
}

impl Inner {
    /// A tablet task that may run now, marked running and claimed; `None` if the tenant task
    /// is not triggering, memory is under pressure, or every tablet is done or claimed.
    fn claim(&self) -> TtlResult<Option<Record>> {
        let mut control = self.lock();
        let current = self.current()?;
        let triggering = current
            .iter()
            .any(|r| r.row.is_tenant() && r.row.status == TaskStatus::RsTriggering);
        if !triggering || self.under_pressure() {
            return Ok(None);
        }
        let runnable = |r: &&Record| {
            !r.row.is_tenant()
                && !control.claimed.contains(&r.id)
                && matches!(
                    r.row.status,
                    TaskStatus::Prepared | TaskStatus::Running | TaskStatus::Pending
                )
        };
        let Some(mut record) = current.iter().find(runnable).cloned() else {
            return Ok(None);
        };
        record.row.status = TaskStatus::Running;
        record.row.end_time = self.now();
        self.save(&record)?;
        control.claimed.insert(record.id);
        Ok(Some(record))
    }

    /// The tablet's row if it may take its next step: still running, and no memory pressure
    /// (then it turns pending). `None`: let it go.
    fn may_step(&self, id: u64) -> TtlResult<Option<Record>> {
        let _control = self.lock();
        let Some(mut record) = self.reload(id)? else {
            return Ok(None);
        };
        if record.row.status != TaskStatus::Running {
            return Ok(None);
        }
        if self.under_pressure() {
            tracing::info!(
                task_id = record.row.task_id,
                tablet = record.row.tablet_id,
                "memtables over the flush trigger: TTL tablet task pending"
            );
            record.row.status = TaskStatus::Pending;
            record.row.end_time = self.now();
            self.save(&record)?;
            return Ok(None);
        }
        Ok(Some(record))
    }

    /// One step: the compaction of the next piece of the tablet's range. `Ok(None)`: nothing
    /// of the range is left in any table.
    fn step(&self, record: &Record) -> TtlResult<Option<(CompactionCounts, Step)>> {
        let Some(name) = record.row.table_name.as_deref() else {
            return Ok(None);
        };
        let cf = self.tables.db().column_family(name)?;
        let from = record.next_key.as_deref().or(record.range_start.as_deref());
        let Some(step) = plan::next_step(&cf, from, record.range_end.as_deref())? else {
            return Ok(None);
        };
        let start = step
            .from
            .as_deref()
            .map_or(std::ops::Bound::Unbounded, std::ops::Bound::Included);
        let end = match (&step.last, &record.range_end) {
            (Some(last), _) => std::ops::Bound::Included(last.as_slice()),
            (None, Some(end)) => std::ops::Bound::Excluded(end.as_slice()),
            (None, None) => std::ops::Bound::Unbounded,
        };
        let counts = cf.compact_tables::<&[u8]>((start, end))?;
        Ok(Some((counts, step)))
    }

    /// Adds a step's outcome to the (re-read) row and decides what the worker does next.
    fn record_step(
        &self,
        record: &mut Record,
        outcome: TtlResult<Option<(CompactionCounts, Step)>>,
    ) -> After {
        let row = &mut record.row;
        row.end_time = self.now();
        let done = match outcome {
            Ok(Some((counts, step))) => {
                row.ttl_del_cnt += counts.dropped.expired;
                row.max_version_del_cnt += counts.dropped.shadowed;
                row.scan_cnt += counts.entries_read;
                record.next_key.clone_from(&step.next);
                step.next.is_none()
            }
            Ok(None) => true,
            Err(TtlError::Tables(Error::Engine(cairn::Error::ColumnFamilyNotFound(_)))) => {
                tracing::info!(task_id = row.task_id, table = ?row.table_name, "the family was dropped: TTL tablet task canceled");
                row.status = TaskStatus::Canceled;
                "CANCELED: the column family was dropped".clone_into(&mut row.ret_code);
                true
            }
            Err(e) => {
                tracing::warn!(task_id = row.task_id, table = ?row.table_name, tablet = row.tablet_id, error = %e, "TTL tablet task failed");
                row.ret_code = format!("ERROR: {e}");
                true
            }
        };
        match row.status {
            TaskStatus::Canceled => After::Release,
            _ if done => {
                row.status = TaskStatus::Finished;
                After::Release
            }
            TaskStatus::Running => After::Continue,
            _ => After::Release,
        }
    }

    fn reload(&self, id: u64) -> TtlResult<Option<Record>> {
        self.tasks
            .get(id)?
            .map(|row| Record::from_row(self.tasks.name(), &row))
            .transpose()
            .map_err(TtlError::from)
    }

    /// True while the memtables hold more than the flush trigger: flushes are behind.
    fn under_pressure(&self) -> bool {
        let stats = self.tables.db().stats();
        stats.memtable_bytes > stats.memtable_flush_trigger
    }

    /// Moves the task to history if every tablet task is finished or canceled; first ends a
    /// cancel a crash interrupted (the tenant row says `RS_CANCELING`, some tablets do not).
    pub(crate) fn move_if_done(&self) -> TtlResult<()> {
        let control = self.lock();
        let mut current = self.current()?;
        self.finish_cancel(&mut current, &control.claimed)?;
        let tablets_done = current
            .iter()
            .filter(|r| !r.row.is_tenant())
            .all(|r| r.row.status.is_done() && !control.claimed.contains(&r.id));
        if current.is_empty() || !tablets_done {
            return Ok(());
        }
        let now = self.now();
        let (tenants, tablets): (Vec<Record>, Vec<Record>) =
            current.into_iter().partition(|r| r.row.is_tenant());
        for mut tenant in tenants.iter().cloned() {
            tenant.row.status = TaskStatus::RsMoving;
            tenant.row.end_time = now;
            self.save(&tenant)?;
        }
        for tablet in &tablets {
            self.move_row(tablet)?;
        }
        // The tenant row last: until it has moved, a restart finds the task and finishes this.
        for mut tenant in tenants {
            // All its tablets, those an interrupted move took to history already included.
            let all: Vec<TaskRow> = records(&self.history)?
                .into_iter()
                .map(|r| r.row)
                .filter(|r| !r.is_tenant() && r.task_id == tenant.row.task_id)
                .collect();
            summarize(&mut tenant.row, &all);
            tenant.row.end_time = now;
            self.move_row(&tenant)?;
            tracing::info!(
                task_id = tenant.row.task_id,
                status = %tenant.row.status,
                ttl_del_cnt = all.iter().map(|r| r.ttl_del_cnt).sum::<u64>(),
                max_version_del_cnt = all.iter().map(|r| r.max_version_del_cnt).sum::<u64>(),
                scan_cnt = all.iter().map(|r| r.scan_cnt).sum::<u64>(),
                "TTL task moved to history"
            );
        }
        Ok(())
    }

    /// Cancels the tablets that a cancel interrupted by a crash left behind.
    fn finish_cancel(&self, current: &mut [Record], claimed: &HashSet<u64>) -> TtlResult<()> {
        let canceling = current
            .iter()
            .any(|r| r.row.is_tenant() && r.row.status == TaskStatus::RsCanceling);
        if !canceling {
            return Ok(());
        }
        let now = self.now();
        for r in current.iter_mut() {
            if !r.row.is_tenant() && !r.row.status.is_done() && !claimed.contains(&r.id) {
                r.row.status = TaskStatus::Canceled;
                r.row.end_time = now;
                self.save(r)?;
            }
        }
        Ok(())
    }

    /// Copies a row to history (once: a copy left by an interrupted move stays) and deletes it
    /// from the current tasks.
    fn move_row(&self, record: &Record) -> TtlResult<()> {
        match self.history.insert(record.to_row()) {
            Ok(_) | Err(Error::UniqueViolation { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        self.tasks.hard_delete(record.id)?;
        Ok(())
    }

    /// Starts a periodic task if the clock is in a duty-window occurrence not decided yet and
    /// no task is active; each occurrence is decided once.
    pub(crate) fn periodic(&self) -> TtlResult<bool> {
        let window = self.settings.kv_ttl_duty_duration;
        let zone = self.settings.time_zone;
        let Some(occurrence) = window.occurrence(self.now(), zone) else {
            return Ok(false);
        };
        let start = {
            let mut control = self.lock();
            if control.seen_occurrence == Some(occurrence) {
                return Ok(false);
            }
            let launched = self.launched_in(occurrence)?;
            let active = !self.current()?.is_empty();
            if active && !launched {
                tracing::info!(
                    "the clock entered the TTL duty window with a task active: no periodic task this time"
                );
            }
            control.seen_occurrence = Some(occurrence);
            !launched && !active
        };
        if start {
            self.tables.db().flush()?;
            let mut control = self.lock();
            self.launch(&mut control, TriggerType::Periodic)?;
        }
        Ok(start)
    }

    /// True if a periodic task started in this window occurrence (before a restart, say).
    fn launched_in(&self, occurrence: u64) -> TtlResult<bool> {
        let (window, zone) = (self.settings.kv_ttl_duty_duration, self.settings.time_zone);
        for table in [&self.tasks, &self.history] {
            let launched = records(table)?.iter().any(|r| {
                r.row.is_tenant()
                    && r.row.trigger_type == TriggerType::Periodic
                    && window.occurrence(r.row.start_time, zone) == Some(occurrence)
            });
            if launched {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Deletes from history the tasks whose tenant row ended more than the recycle interval
    /// ago, with all their rows, in batches; at most once a minute of the engine clock.
    pub(crate) fn recycle(&self) -> TtlResult<u64> {
        let now = self.now();
        {
            let mut control = self.lock();
            let due = control
                .last_recycle
                .is_none_or(|t| now >= t.saturating_add(RECYCLE_EVERY_MS));
            if !due {
                return Ok(0);
            }
            control.last_recycle = Some(now);
        }
        let interval = u64::try_from(self.settings.kv_ttl_history_recycle_interval.as_millis())
            .unwrap_or(u64::MAX);
        let cutoff = now.saturating_sub(interval);
        let rows = records(&self.history)?;
        let tenants: HashSet<u64> = rows
            .iter()
            .filter(|r| r.row.is_tenant())
            .map(|r| r.row.task_id)
            .collect();
        let old_tasks: HashSet<u64> = rows
            .iter()
            .filter(|r| r.row.is_tenant() && r.row.end_time < cutoff)
            .map(|r| r.row.task_id)
            .collect();
        // A row whose tenant row is not in history (it should be) goes by its own end.
        let doomed: Vec<u64> = rows
            .iter()
            .filter(|r| {
                old_tasks.contains(&r.row.task_id)
                    || (!tenants.contains(&r.row.task_id) && r.row.end_time < cutoff)
            })
            .map(|r| r.id)
            .collect();
        for batch in doomed.chunks(RECYCLE_BATCH) {
            for &id in batch {
                self.history.hard_delete(id)?;
            }
        }
        let deleted = u64::try_from(doomed.len()).unwrap_or(u64::MAX);
        if deleted > 0 {
            tracing::info!(
                deleted,
                tasks = old_tasks.len(),
                "TTL task history recycled"
            );
        }
        Ok(deleted)
    }
}

/// A tenant row's final status and return code, from all its tablets' rows. Its counters stay
/// zero, as OceanBase's do: the tablet rows carry the counts, so a sum over the task's rows (what
/// an operator reads off the view) counts each cell once.
fn summarize(tenant: &mut TaskRow, tablets: &[TaskRow]) {
    let canceled = tenant.status == TaskStatus::RsCanceling
        || tablets.iter().any(|t| t.status == TaskStatus::Canceled);
    tenant.status = if canceled {
        TaskStatus::Canceled
    } else {
        TaskStatus::Finished
    };
    tenant.ttl_del_cnt = 0;
    tenant.max_version_del_cnt = 0;
    tenant.scan_cnt = 0;
    if let Some(failed) = tablets.iter().find(|t| t.ret_code.starts_with("ERROR")) {
        tenant.ret_code.clone_from(&failed.ret_code);
    }
}
