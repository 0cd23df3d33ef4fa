//! The TTL task manager: when and how expired cells are reclaimed, under an operator's control,
//! with OceanBase OBKV-HBase's TTL task semantics (`../shared/seeds/003_*`).
//!
//! Reads already hide expired cells and versions over `max_versions`; compaction drops them when
//! it happens to reach them. A TTL task makes that happen now, for every column family that has
//! a TTL, a version limit above one or cells with their own TTL: a tenant task, and one tablet
//! task per key-range partition of each such family. A tablet task compacts its range to the
//! last level step by step (about one table per step), so the expired cells go without a single
//! tombstone or log record written for them, and counts what it read and dropped.
//!
//! Tasks start by [`TtlTasks::trigger`] or, once per daily duty window, periodically; they can
//! be suspended, resumed and canceled. Their rows live in two tables of the table layer,
//! `kv_ttl_tasks` and `kv_ttl_task_history`, readable like any other table, so a task survives
//! a restart and an operator can see it with `cairn ttl status`. When every tablet task is
//! finished or canceled the tenant task moves its rows to history, where they stay for the
//! recycle interval. While the memtables hold more than the flush trigger (flushes are behind),
//! running tablet tasks go to pending after their current step and go on when it falls.
//!
//! The counters are what the task's own compactions did: `scan_cnt` counts a table a step
//! rewrote and the next step reads again (its range reached past the step) twice, and a
//! background compaction that reaches expired cells first drops them uncounted. "Pressure" is
//! any memtable waiting for its flush, so tasks also pause through routine flushes, for as
//! long as the flush takes. Whether a window's periodic task was skipped (a task was active
//! when it opened) is kept in memory: after a restart in that window a task may start.
//!
//! Not here: tombstone-writing TTL deletes (OceanBase's, for its SQL tables), the HBase rowkey
//! TTL task type, and a multi-tenant system tenant: one database is one tenant.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use cairn_purger::{Tables, TaskStatus, TtlSettings, TtlTasks};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let db = Arc::new(cairn::Db::open(dir.path(), cairn::Options::default())?);
//! let cells = db.create_column_family(
//!     "t1$cf1",
//!     cairn::CfOptions::default().ttl(Duration::from_secs(3600)).max_versions(3),
//! )?;
//! cells.put("row1", "v")?;
//! let tables = Tables::open(Arc::clone(&db))?;
//! let ttl = TtlTasks::open(tables, TtlSettings {
//!     enable_kv_ttl: true,
//!     kv_ttl_duty_duration: "[22:00:00, 24:00:00]".parse()?,
//!     kv_ttl_history_recycle_interval: Duration::from_secs(7 * 86_400),
//!     ttl_thread_score: 2,
//!     time_zone: cairn_purger::TimeZone::UTC,
//! })?;
//! ttl.trigger()?;
//! ttl.run_until_idle()?;
//! assert!(ttl.tasks()?.is_empty());
//! let history = ttl.history()?;
//! assert_eq!(history.first().map(|r| r.status), Some(TaskStatus::Finished));
//! # Ok(())
//! # }
//! ```

mod background;
mod drive;
mod error;
mod plan;
mod record;
mod settings;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::error::Error;
use crate::table::Table;
use crate::tables::Tables;

pub use background::TtlRunning;
pub use error::{TtlError, TtlResult};
pub use record::{HISTORY_TABLE, TASKS_TABLE, TaskRow, TaskStatus, TriggerType};
pub use settings::{DutyDuration, TtlSettings};

use record::{Record, TENANT};

/// The bytes of tables a tablet task covers, by default: a family is cut into key ranges of
/// about this much.
pub const DEFAULT_TABLET_BYTES: u64 = 256 << 20;

/// A row's `ret_code` when nothing failed, as OceanBase's views print it.
const SUCCESS: &str = "OB_SUCCESS";
/// A tenant row's `ret_code` while its launch is writing the tablet rows.
const LAUNCHING: &str = "LAUNCHING";

/// A step callback: called with the manager and a tablet task's row after each of its steps.
type OnStep = Arc<dyn Fn(&TtlTasks, &TaskRow) + Send + Sync>;

/// The TTL task manager of one set of [`Tables`]. Cheap to clone: clones share one manager.
#[derive(Clone)]
pub struct TtlTasks {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TtlTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TtlTasks")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    tables: Tables,
    settings: TtlSettings,
    tasks: Table,
    history: Table,
    /// Held across every change of the task rows, so commands and workers see each other's.
    control: Mutex<Control>,
    tablet_bytes: AtomicU64,
    on_step: Mutex<Option<OnStep>>,
    /// A background loop runs ([`TtlTasks::start`]).
    started: AtomicBool,
}

/// What the task rows do not say.
#[derive(Debug, Default)]
struct Control {
    /// Tablet rows a worker is running now.
    claimed: HashSet<u64>,
    /// The last duty-window occurrence a periodic launch was decided for.
    seen_occurrence: Option<u64>,
    /// When history was last recycled (engine clock).
    last_recycle: Option<u64>,
}

/// The managers open in this process, by the address of their tables' catalog.
static OPEN: Mutex<Vec<(usize, Weak<Inner>)>> = Mutex::new(Vec::new());

impl TtlTasks {
    /// Opens the TTL task manager of `tables`, creating its two task tables on first use. A
    /// task left active by a previous process goes on where it was.
    ///
    /// # Errors
    /// `InvalidArgument` if a setting is out of its bounds ([`TtlSettings::validate`]) or a
    /// manager of these tables is open already (clone it instead); `Tables` if the task tables
    /// cannot be created or read.
    pub fn open(tables: Tables, settings: TtlSettings) -> TtlResult<Self> {
        settings.validate()?;
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|(_, inner)| inner.strong_count() > 0);
        let address = tables.address();
        if open.iter().any(|(a, _)| *a == address) {
            return Err(TtlError::InvalidArgument(
                "a TTL task manager of these tables is open already; clone it".to_owned(),
            ));
        }
        let tasks = table_or_create(&tables, TASKS_TABLE)?;
        let history = table_or_create(&tables, HISTORY_TABLE)?;
        let inner = Arc::new(Inner {
            tables,
            settings,
            tasks,
            history,
            control: Mutex::new(Control::default()),
            tablet_bytes: AtomicU64::new(DEFAULT_TABLET_BYTES),
            on_step: Mutex::new(None),
            started: AtomicBool::new(false),
        });
        open.push((address, Arc::downgrade(&inner)));
        drop(open);
        if inner.settings.enable_kv_ttl {
            inner.roll_back_launch()?;
        }
        Ok(Self { inner })
    }

    /// The current tasks and the history of `tables`, without opening a manager: for tools
    /// reading a database opened read-only. Empty if the task tables were never created.
    ///
    /// # Errors
    /// `Tables` if the rows cannot be read.
    pub fn views(tables: &Tables) -> TtlResult<(Vec<TaskRow>, Vec<TaskRow>)> {
        let read = |name: &str| match tables.table(name) {
            Ok(table) => view(&table),
            Err(Error::NoSuchTable(_)) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        };
        Ok((read(TASKS_TABLE)?, read(HISTORY_TABLE)?))
    }

    /// The settings it was opened with.
    pub fn settings(&self) -> &TtlSettings {
        &self.inner.settings
    }

    /// Sets the bytes of tables a tablet task covers from the next task on (default
    /// [`DEFAULT_TABLET_BYTES`]).
    pub fn set_tablet_bytes(&self, bytes: u64) {
        self.inner
            .tablet_bytes
            .store(bytes.max(1), Ordering::Relaxed);
    }

    /// Calls `f` after each step of a tablet task with the manager (so the callback can issue a
    /// command without holding a clone of it) and the tablet's row (for progress reports).
    pub fn on_step(&self, f: impl Fn(&TtlTasks, &TaskRow) + Send + Sync + 'static) {
        *self
            .inner
            .on_step
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(f));
    }

    /// Starts a task now (`ALTER SYSTEM TRIGGER TTL`): flushes the memtables, then creates the
    /// tenant task and a prepared tablet task per partition of every covered family. Returns
    /// the task's id.
    ///
    /// # Errors
    /// `NotEnabled`; `CmdNotAllowed` while a task is active; `Tables` if the rows cannot be
    /// written.
    pub fn trigger(&self) -> TtlResult<u64> {
        self.inner.enabled()?;
        if !self.inner.current()?.is_empty() {
            return Err(TtlError::CmdNotAllowed);
        }
        // Outside the control lock, which commands and workers must not wait a flush for.
        self.inner.tables.db().flush()?;
        let mut control = self.inner.lock();
        self.inner.launch(&mut control, TriggerType::User)
    }

    /// Suspends the active task (`ALTER SYSTEM SUSPEND TTL`): its prepared and running tablet
    /// tasks turn pending; a step in progress finishes first.
    ///
    /// # Errors
    /// `NotEnabled`; `NoTaskRunning`; `CmdNotAllowed` unless the task is triggering.
    pub fn suspend(&self) -> TtlResult<()> {
        self.inner
            .command(TtlCommand::Suspend, TaskStatus::RsSuspending, |s| {
                matches!(s, TaskStatus::Prepared | TaskStatus::Running)
                    .then_some(TaskStatus::Pending)
            })
    }

    /// Resumes a suspended task (`ALTER SYSTEM RESUME TTL`): its pending tablet tasks turn
    /// prepared.
    ///
    /// # Errors
    /// `NotEnabled`; `NoTaskRunning`; `CmdNotAllowed` unless the task is suspended.
    pub fn resume(&self) -> TtlResult<()> {
        self.inner
            .command(TtlCommand::Resume, TaskStatus::RsTriggering, |s| {
                (s == TaskStatus::Pending).then_some(TaskStatus::Prepared)
            })
    }

    /// Cancels the active task (`ALTER SYSTEM CANCEL TTL`): every tablet task not finished
    /// turns canceled (a step in progress finishes first), and the task moves to history.
    ///
    /// # Errors
    /// `NotEnabled`; `NoTaskRunning`; `CmdNotAllowed` once the task is canceling or moving.
    pub fn cancel(&self) -> TtlResult<()> {
        self.inner
            .command(TtlCommand::Cancel, TaskStatus::RsCanceling, |s| {
                (!s.is_done()).then_some(TaskStatus::Canceled)
            })?;
        self.inner.move_if_done()
    }

    /// Runs tablet tasks on `ttl_thread_score` threads until none can run now: all done (the
    /// task then moves to history), suspended, or paused by memory pressure. For tests and
    /// tools; a service calls [`start`](Self::start).
    ///
    /// # Errors
    /// `NotEnabled`; `Tables` if the task rows cannot be read or written. A failed step is
    /// not an error here: its tablet task finishes with the error in `ret_code`.
    pub fn run_until_idle(&self) -> TtlResult<()> {
        self.inner.enabled()?;
        self.inner.move_if_done()?;
        let threads = self.inner.settings.ttl_thread_score.max(1);
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| scope.spawn(|| self.work(&stop)))
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|_| Err(panicked())))
                .collect::<TtlResult<Vec<()>>>()
        })?;
        self.inner.move_if_done()
    }

    /// One round of the scheduler, what [`start`](Self::start)'s loop does every 20 ms: moves
    /// a done task to history, starts a periodic task if the clock has entered the duty window
    /// (once per window, and only if no task is active then), and deletes history rows older
    /// than the recycle interval. Returns whether a periodic task started.
    ///
    /// # Errors
    /// `NotEnabled`; `Tables` if the task rows cannot be read or written.
    pub fn tick(&self) -> TtlResult<bool> {
        self.inner.enabled()?;
        self.inner.move_if_done()?;
        let launched = self.inner.periodic()?;
        self.inner.recycle()?;
        Ok(launched)
    }

    /// The current tasks (`DBA_OB_KV_TTL_TASKS`): the tenant row first, then its tablets.
    ///
    /// # Errors
    /// `Tables` if the rows cannot be read.
    pub fn tasks(&self) -> TtlResult<Vec<TaskRow>> {
        view(&self.inner.tasks)
    }

    /// Finished and canceled tasks (`DBA_OB_KV_TTL_TASK_HISTORY`), oldest task first.
    ///
    /// # Errors
    /// `Tables` if the rows cannot be read.
    pub fn history(&self) -> TtlResult<Vec<TaskRow>> {
        view(&self.inner.history)
    }
}

impl Inner {
    fn enabled(&self) -> TtlResult<()> {
        if self.settings.enable_kv_ttl {
            Ok(())
        } else {
            Err(TtlError::NotEnabled)
        }
    }

    fn lock(&self) -> MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> u64 {
        self.tables.db().now_ms()
    }

    /// The rows of the current tasks.
    fn current(&self) -> TtlResult<Vec<Record>> {
        records(&self.tasks)
    }

    fn save(&self, record: &Record) -> TtlResult<()> {
        self.tasks.update(record.id, record.to_row())?;
        Ok(())
    }

    /// Creates a task; the caller holds `control` (and flushed the memtables before taking
    /// it). The tenant row says `LAUNCHING` until every tablet row is in: a launch a crash
    /// interrupted is rolled back at the next open (`roll_back_launch`).
    fn launch(&self, _control: &mut Control, trigger: TriggerType) -> TtlResult<u64> {
        if !self.current()?.is_empty() {
            return Err(TtlError::CmdNotAllowed);
        }
        let task_id = self.next_task_id()?;
        let tablets = plan::tablets(self.tables.db(), self.tablet_bytes.load(Ordering::Relaxed))?;
        let now = self.now();
        let mut tenant = new_tenant(task_id, now, trigger);
        LAUNCHING.clone_into(&mut tenant.row.ret_code);
        tenant.id = self.tasks.insert(tenant.to_row())?;
        if let Err(e) = self.insert_tablets(&tenant, &tablets) {
            // A write failed half way: take the launch back now rather than at the next open.
            if let Err(undo) = self.roll_back_launch() {
                tracing::warn!(error = %undo, "rolling back a failed TTL launch failed; the next open does it");
            }
            return Err(e);
        }
        SUCCESS.clone_into(&mut tenant.row.ret_code);
        self.save(&tenant)?;
        tracing::info!(task_id, %trigger, tablets = tablets.len(), "TTL task started");
        Ok(task_id)
    }

    /// Writes a prepared tablet row per tablet, copying the tenant row's task and times.
    fn insert_tablets(&self, tenant: &Record, tablets: &[plan::Tablet]) -> TtlResult<()> {
        for t in tablets {
            let mut r = tenant.clone();
            r.row.table_name = Some(t.family.clone());
            r.row.table_id = i64::from(t.family_id);
            r.row.tablet_id = t.id;
            r.row.status = TaskStatus::Prepared;
            SUCCESS.clone_into(&mut r.row.ret_code);
            r.range_start.clone_from(&t.start);
            r.range_end.clone_from(&t.end);
            self.tasks.insert(r.to_row())?;
        }
        Ok(())
    }

    /// Deletes the rows of a launch a crash interrupted (its tenant row still says
    /// `LAUNCHING`): a task with only some of its tablets would report a partial run as done.
    fn roll_back_launch(&self) -> TtlResult<()> {
        let current = self.current()?;
        let Some(task_id) = current
            .iter()
            .find(|r| r.row.is_tenant() && r.row.ret_code == LAUNCHING)
            .map(|r| r.row.task_id)
        else {
            return Ok(());
        };
        tracing::warn!(
            task_id,
            "rolling back a TTL task whose launch was interrupted"
        );
        // Tablets first, the tenant row last, so a crash here leaves a launch still to roll back.
        let (tenants, tablets): (Vec<&Record>, Vec<&Record>) = current
            .iter()
            .filter(|r| r.row.task_id == task_id)
            .partition(|r| r.row.is_tenant());
        for r in tablets.into_iter().chain(tenants) {
            self.tasks.hard_delete(r.id)?;
        }
        Ok(())
    }

    fn next_task_id(&self) -> TtlResult<u64> {
        let mut highest = 0;
        for table in [&self.tasks, &self.history] {
            for r in records(table)? {
                highest = highest.max(r.row.task_id);
            }
        }
        Ok(highest + 1)
    }

    /// Suspend, resume or cancel: the tenant task must allow `command`
    /// ([`TtlCommand::check`]); it moves to `to`, and each tablet task to what `tablet` says
    /// (`None`: unchanged).
    fn command(
        &self,
        command: TtlCommand,
        to: TaskStatus,
        tablet: impl Fn(TaskStatus) -> Option<TaskStatus>,
    ) -> TtlResult<()> {
        self.enabled()?;
        let _control = self.lock();
        let current = self.current()?;
        let rows: Vec<TaskRow> = current.iter().map(|r| r.row.clone()).collect();
        if let Err(e) = command.check(&rows) {
            tracing::info!(%command, error = %e, "TTL command refused");
            return Err(e);
        }
        let Some(tenant) = current.iter().find(|r| r.row.is_tenant()) else {
            return Err(TtlError::NoTaskRunning);
        };
        let name = command.as_str();
        let now = self.now();
        // Tablets first, the tenant row last: a crash in between leaves a state the same
        // command (or, for a cancel, the next move) can finish.
        let (tenants, tablets): (Vec<&Record>, Vec<&Record>) =
            current.iter().partition(|r| r.row.is_tenant());
        for record in tablets.into_iter().chain(tenants) {
            let next = if record.row.is_tenant() {
                Some(to)
            } else {
                tablet(record.row.status)
            };
            if let Some(status) = next.filter(|&s| s != record.row.status) {
                let mut changed = record.clone();
                changed.row.status = status;
                changed.row.end_time = now;
                self.save(&changed)?;
            }
        }
        tracing::info!(
            command = name,
            task_id = tenant.row.task_id,
            "TTL task {}",
            to
        );
        Ok(())
    }
}

/// A command an operator gives, as OceanBase's `ALTER SYSTEM TRIGGER | SUSPEND | RESUME |
/// CANCEL TTL` name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TtlCommand {
    /// [`TtlTasks::trigger`].
    Trigger,
    /// [`TtlTasks::suspend`].
    Suspend,
    /// [`TtlTasks::resume`].
    Resume,
    /// [`TtlTasks::cancel`].
    Cancel,
}

impl TtlCommand {
    /// Its name, lower case.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trigger => "trigger",
            Self::Suspend => "suspend",
            Self::Resume => "resume",
            Self::Cancel => "cancel",
        }
    }

    /// Whether the command is allowed on a database whose current task rows are `tasks` (as
    /// [`TtlTasks::tasks`] or [`TtlTasks::views`] give them), without running it: what a tool
    /// asks of a database opened read-only before it opens it for writing, so that a command
    /// that would be refused writes nothing. A launch a crash cut short (rolled back at the next
    /// open) counts as no task.
    ///
    /// # Errors
    /// `CmdNotAllowed` if the task's state does not allow it (any task, for `Trigger`);
    /// `NoTaskRunning` if there is no task to suspend, resume or cancel.
    pub fn check(self, tasks: &[TaskRow]) -> TtlResult<()> {
        let tenant = tasks
            .iter()
            .find(|r| r.is_tenant() && r.ret_code != LAUNCHING);
        let allowed: &[TaskStatus] = match self {
            Self::Trigger => &[],
            Self::Suspend => &[TaskStatus::RsTriggering],
            Self::Resume => &[TaskStatus::RsSuspending],
            Self::Cancel => &[TaskStatus::RsTriggering, TaskStatus::RsSuspending],
        };
        match (self, tenant) {
            (Self::Trigger, None) => Ok(()),
            (_, None) => Err(TtlError::NoTaskRunning),
            (_, Some(t)) if allowed.contains(&t.status) => Ok(()),
            (_, Some(_)) => Err(TtlError::CmdNotAllowed),
        }
    }
}

impl std::fmt::Display for TtlCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn table_or_create(tables: &Tables, name: &str) -> TtlResult<Table> {
    match tables.table(name) {
        Err(Error::NoSuchTable(_)) => match tables.create_table(record::schema(name)) {
            Err(Error::TableExists(_)) => Ok(tables.table(name)?),
            other => Ok(other?),
        },
        other => Ok(other?),
    }
}

/// The rows of a task table.
fn records(table: &Table) -> TtlResult<Vec<Record>> {
    let mut out = Vec::new();
    for row in table.scan()? {
        out.push(Record::from_row(table.name(), &row?)?);
    }
    Ok(out)
}

/// A task table as a view: by task, the tenant row first, then tablets by family and id.
fn view(table: &Table) -> TtlResult<Vec<TaskRow>> {
    let mut rows: Vec<TaskRow> = records(table)?.into_iter().map(|r| r.row).collect();
    rows.sort_by_key(|r| (r.task_id, r.table_id, r.tablet_id));
    Ok(rows)
}

/// A tenant task's row, triggering.
fn new_tenant(task_id: u64, now: u64, trigger_type: TriggerType) -> Record {
    Record {
        id: 0,
        row: TaskRow {
            table_name: None,
            table_id: TENANT,
            tablet_id: TENANT,
            task_id,
            start_time: now,
            end_time: now,
            trigger_type,
            status: TaskStatus::RsTriggering,
            ttl_del_cnt: 0,
            max_version_del_cnt: 0,
            scan_cnt: 0,
            ret_code: SUCCESS.to_owned(),
        },
        range_start: None,
        range_end: None,
        next_key: None,
    }
}

fn panicked() -> TtlError {
    TtlError::from(cairn::Error::Panicked(
        "a TTL worker thread panicked".to_owned(),
    ))
}
