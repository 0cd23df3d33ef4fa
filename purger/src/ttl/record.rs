//! The task tables `kv_ttl_tasks` and `kv_ttl_task_history`: their schema, the rows as the
//! OceanBase views `DBA_OB_KV_TTL_TASKS` and `DBA_OB_KV_TTL_TASK_HISTORY` show them
//! ([`TaskRow`]), and the statuses and trigger types.
//!
//! Both tables share one schema: the view's twelve columns, then the tablet's key range and how
//! far its compaction has got, so a task survives a restart. The tenant task is the row with
//! table and tablet id `-1` and no table name.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::row::Row;
use crate::schema::Schema;
use crate::value::{ColumnType, Value};

/// The current tasks.
pub const TASKS_TABLE: &str = "kv_ttl_tasks";
/// Finished and canceled tasks, until the recycle interval deletes them.
pub const HISTORY_TABLE: &str = "kv_ttl_task_history";
/// The unique index over (task, table, tablet): a row moved twice to history is refused.
const UK_TASK: &str = "uk_task_tablet";
/// The table and tablet id of a tenant task's row.
pub(crate) const TENANT: i64 = -1;

/// The schema of both task tables.
pub(crate) fn schema(name: &str) -> Schema {
    Schema::new(name)
        .nullable("table_name", ColumnType::Text)
        .column("table_id", ColumnType::Integer)
        .column("tablet_id", ColumnType::Integer)
        .column("task_id", ColumnType::Integer)
        .column("start_time", ColumnType::Timestamp)
        .column("end_time", ColumnType::Timestamp)
        .column("trigger_type", ColumnType::Text)
        .column("status", ColumnType::Text)
        .column("ttl_del_cnt", ColumnType::Integer)
        .column("max_version_del_cnt", ColumnType::Integer)
        .column("scan_cnt", ColumnType::Integer)
        .column("ret_code", ColumnType::Text)
        .nullable("range_start", ColumnType::Bytes)
        .nullable("range_end", ColumnType::Bytes)
        .nullable("next_key", ColumnType::Bytes)
        .unique(UK_TASK, &["task_id", "table_id", "tablet_id"])
}

/// The status of a task. The `Rs*` ones are a tenant task's, the others a tablet task's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum TaskStatus {
    /// Tenant: tablet tasks run.
    RsTriggering,
    /// Tenant: suspended; its tablet tasks are pending.
    RsSuspending,
    /// Tenant: canceled; its tablet tasks are canceled.
    RsCanceling,
    /// Tenant: every tablet task is done; the rows are moving to history.
    RsMoving,
    /// Tablet: not started (or resumed and not picked up yet).
    Prepared,
    /// Tablet: compacting its key range.
    Running,
    /// Tablet: paused, by `suspend` or by memory pressure.
    Pending,
    /// Tablet: canceled; it will not run again. In history, also a canceled tenant task.
    Canceled,
    /// Tablet: done. In history, also a tenant task whose tablets all finished.
    Finished,
}

impl TaskStatus {
    const ALL: [Self; 9] = [
        Self::RsTriggering,
        Self::RsSuspending,
        Self::RsCanceling,
        Self::RsMoving,
        Self::Prepared,
        Self::Running,
        Self::Pending,
        Self::Canceled,
        Self::Finished,
    ];

    /// The name the OceanBase views print.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RsTriggering => "RS_TRIGGERING",
            Self::RsSuspending => "RS_SUSPENDING",
            Self::RsCanceling => "RS_CANCELING",
            Self::RsMoving => "RS_MOVING",
            Self::Prepared => "PREPARED",
            Self::Running => "RUNNING",
            Self::Pending => "PENDING",
            Self::Canceled => "CANCELED",
            Self::Finished => "FINISHED",
        }
    }

    /// True for a tablet task that will not run again.
    pub fn is_done(self) -> bool {
        matches!(self, Self::Finished | Self::Canceled)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskStatus {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| format!("unknown TTL task status {s:?}"))
    }
}

impl From<TaskStatus> for String {
    fn from(s: TaskStatus) -> Self {
        s.as_str().to_owned()
    }
}

impl TryFrom<String> for TaskStatus {
    type Error = String;

    fn try_from(s: String) -> std::result::Result<Self, String> {
        s.parse()
    }
}

/// What started a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TriggerType {
    /// `trigger()`, `ALTER SYSTEM TRIGGER TTL`.
    User,
    /// The clock entering the duty window.
    Periodic,
}

impl TriggerType {
    /// The name the OceanBase views print.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "USER",
            Self::Periodic => "PERIODIC",
        }
    }
}

impl fmt::Display for TriggerType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A row of `kv_ttl_tasks` or `kv_ttl_task_history`, with the columns of OceanBase's
/// `DBA_OB_KV_TTL_TASKS`. Times are engine-clock milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRow {
    /// The column family's name; `None` for the tenant task.
    pub table_name: Option<String>,
    /// The column family's id; `-1` for the tenant task.
    pub table_id: i64,
    /// The key-range partition within the family, from 1; `-1` for the tenant task.
    pub tablet_id: i64,
    /// The task, shared by the tenant row and its tablet rows.
    pub task_id: u64,
    /// When the task was created or the tablet task first ran.
    pub start_time: u64,
    /// When it last changed (finished, for a task in history).
    pub end_time: u64,
    /// What started it.
    pub trigger_type: TriggerType,
    /// Its status.
    pub status: TaskStatus,
    /// Cells dropped because their TTL ran out. The three counters are a tablet row's: the
    /// tenant row's stay 0 (as OceanBase's do), so a task's total is the sum over its rows and
    /// each cell counts once.
    pub ttl_del_cnt: u64,
    /// Versions dropped for being over `max_versions` (an expired one too: it counts once, here
    /// and not in `ttl_del_cnt`).
    pub max_version_del_cnt: u64,
    /// Entries the tablet's compactions read.
    pub scan_cnt: u64,
    /// `OB_SUCCESS`; `ERROR: …` with what made the tablet task fail (the tenant row shows a
    /// failed tablet's); `CANCELED: …` for a tablet whose column family was dropped.
    pub ret_code: String,
}

impl TaskRow {
    /// True for the tenant task's row.
    pub fn is_tenant(&self) -> bool {
        self.table_id == TENANT
    }
}

/// A stored row: the view's columns, where it is and what a tablet has left to do.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    /// The table layer's row id.
    pub(crate) id: u64,
    pub(crate) row: TaskRow,
    pub(crate) range_start: Option<Vec<u8>>,
    pub(crate) range_end: Option<Vec<u8>>,
    /// Where the next step starts; `None` before the first step.
    pub(crate) next_key: Option<Vec<u8>>,
}

impl Record {
    pub(crate) fn to_row(&self) -> Row {
        let r = &self.row;
        Row::new()
            .set("table_name", r.table_name.clone())
            .set("table_id", r.table_id)
            .set("tablet_id", r.tablet_id)
            .set("task_id", int(r.task_id))
            .set("start_time", Value::Timestamp(r.start_time))
            .set("end_time", Value::Timestamp(r.end_time))
            .set("trigger_type", r.trigger_type.as_str())
            .set("status", r.status.as_str())
            .set("ttl_del_cnt", int(r.ttl_del_cnt))
            .set("max_version_del_cnt", int(r.max_version_del_cnt))
            .set("scan_cnt", int(r.scan_cnt))
            .set("ret_code", r.ret_code.as_str())
            .set("range_start", self.range_start.clone())
            .set("range_end", self.range_end.clone())
            .set("next_key", self.next_key.clone())
    }

    pub(crate) fn from_row(table: &str, row: &Row) -> Result<Self> {
        let bad = |column: &str| {
            Error::corruption(
                format!("{table}/{}", row.id()).as_bytes(),
                format!("column {column} does not hold a TTL task's value"),
            )
        };
        let text = |c: &str| row.get(c).and_then(Value::as_text).ok_or_else(|| bad(c));
        let integer = |c: &str| row.get(c).and_then(Value::as_integer).ok_or_else(|| bad(c));
        let count = |c: &str| integer(c).and_then(|i| u64::try_from(i).map_err(|_| bad(c)));
        let time = |c: &str| {
            row.get(c)
                .and_then(Value::as_timestamp)
                .ok_or_else(|| bad(c))
        };
        let bytes = |c: &str| match row.get(c) {
            Some(Value::Bytes(b)) => Ok(Some(b.clone())),
            Some(Value::Null) | None => Ok(None),
            Some(_) => Err(bad(c)),
        };
        let trigger_type = match text("trigger_type")? {
            "USER" => TriggerType::User,
            "PERIODIC" => TriggerType::Periodic,
            _ => return Err(bad("trigger_type")),
        };
        let row_view = TaskRow {
            table_name: row
                .get("table_name")
                .and_then(Value::as_text)
                .map(str::to_owned),
            table_id: integer("table_id")?,
            tablet_id: integer("tablet_id")?,
            task_id: count("task_id")?,
            start_time: time("start_time")?,
            end_time: time("end_time")?,
            trigger_type,
            status: text("status")?.parse().map_err(|_| bad("status"))?,
            ttl_del_cnt: count("ttl_del_cnt")?,
            max_version_del_cnt: count("max_version_del_cnt")?,
            scan_cnt: count("scan_cnt")?,
            ret_code: text("ret_code")?.to_owned(),
        };
        Ok(Self {
            id: row.id(),
            row: row_view,
            range_start: bytes("range_start")?,
            range_end: bytes("range_end")?,
            next_key: bytes("next_key")?,
        })
    }
}

/// A count as the Integer column stores it (counts never reach `i64::MAX`; saturate if one did).
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
