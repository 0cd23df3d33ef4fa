//! Relational tables with GORM-style soft delete, stored in a Cairn engine, and the soft-delete
//! tombstone purger that runs over them.
//!
//! Services that soft-delete rows (`deleted_at` set instead of `DELETE`) grow their tables
//! forever, and stale rows keep holding unique keys. [`Tables`] hosts such tables on the engine:
//! typed columns, an auto-increment `id`, unique and secondary indexes, soft delete, and each
//! row written with its index entries in one engine transaction. The [`Purger`] is the janitor
//! (CubeSandbox's `tombstone` semantics): on an interval, one replica at a time under an
//! [`AdvisoryLock`], it hard-deletes rows whose `deleted_at` is older than a retention window,
//! in bounded passes, and never deletes a row resurrected under its feet. The engine's own
//! garbage collection then erases the purged rows' bytes once their grace period and the delete
//! persistence deadline pass, which `cairn::Db::audit_key` can prove.
//!
//! [`TtlTasks`] is the TTL task manager (OceanBase OBKV-HBase semantics): operator-controlled
//! reclaiming of expired cells by compaction, with its task rows in two of these tables.
//!
//! The purger runs over a [`PurgeBackend`]: these tables, or a MySQL/MariaDB or PostgreSQL
//! database through [`SqlBackend`], whose replicas coordinate with the server's own advisory
//! locks.
//!
//! Not here: SQL over the embedded tables, joins, or queries beyond the primary key, unique
//! lookups and scans.
//!
//! ```
//! use std::sync::Arc;
//! use cairn_purger::{ColumnType, Row, Schema, Tables, Value};
//! # fn main() -> cairn_purger::Result<()> {
//! # let dir = tempfile::tempdir().map_err(cairn_fs::Error::from).map_err(cairn::Error::from)?;
//! let db = Arc::new(cairn::Db::open(dir.path(), cairn::Options::default())?);
//! let tables = Tables::open(db)?;
//! let t = tables.create_table(
//!     Schema::new("t_cube_sandbox_spec")
//!         .column("name", ColumnType::Text)
//!         .nullable("note", ColumnType::Text)
//!         .unique("uk_name", &["name"])
//!         .soft_delete(),
//! )?;
//! let id = t.insert(Row::new().set("name", "a"))?;
//! t.soft_delete(id)?;
//! assert_eq!(t.count()?, 0);
//! let again = t.upsert(Row::new().set("name", "a").set("note", "back"))?; // resurrects it
//! assert_eq!(again, id);
//! let row = t.find_unique("uk_name", &[Value::from("a")])?.expect("live again");
//! assert_eq!(row.deleted_at(), None);
//! # Ok(())
//! # }
//! ```

mod backend;
mod config;
mod embedded;
mod error;
mod keys;
mod lock;
mod migration;
mod purge;
mod report;
mod row;
mod running;
mod schema;
mod sql;
mod table;
mod tables;
mod targets;
mod ttl;
mod value;
mod zone;

pub use backend::{DeleteTally, PassTime, PurgeBackend, PurgeSession, RefusedRow, TableShape};
pub use config::{
    DEFAULT_INTERVAL, DEFAULT_RETENTION, HardDeleteReload, HardDeleteSetting, MIN_INTERVAL,
    MIN_RETENTION, PurgeConfig, disable_hard_delete_from_yaml,
};
pub use error::{Error, Result};
pub use lock::{AdvisoryLock, Lease};
pub use migration::DELETED_AT_INDEX as DELETED_AT_INDEX_MIGRATION;
pub use purge::{BATCH, DEFAULT_LEASE, MAX_PER_PASS, Purger};
pub use report::{PassReport, TableReport};
pub use row::{DELETED_AT, Row};
pub use running::Running;
pub use schema::{Column, Index, Schema};
pub use sql::{DEFAULT_PASS_TIMEOUT, Dialect, RELEASE_TIMEOUT, SqlBackend};
pub use table::{Rows, Table};
pub use tables::{TABLES_COLUMN_FAMILY, Tables, TablesOptions};
pub use targets::{CUBEMASTER_LOCK, CUBEOPS_LOCK, cube_master_purge_tables, cube_ops_purge_tables};
pub use ttl::{
    DEFAULT_TABLET_BYTES, DutyDuration, HISTORY_TABLE, TASKS_TABLE, TaskRow, TaskStatus,
    TriggerType, TtlCommand, TtlError, TtlResult, TtlRunning, TtlSettings, TtlTasks,
};
pub use value::{ColumnType, Value};
pub use zone::TimeZone;
