//! What the purger tests share: a database on a manual clock, the CubeMaster/CubeOps tables,
//! and quick ways to fill them with soft-deleted rows.

#![allow(dead_code, reason = "each test file uses its own part")]

pub mod env;
pub mod sql;

use std::sync::Arc;
use std::time::Duration;

use cairn::{Db, ManualClock, Options};
use cairn_purger::{
    ColumnType, PurgeConfig, Row, Schema, Table, Tables, TablesOptions, Value,
    cube_master_purge_tables, cube_ops_purge_tables,
};

/// The clock's start: 2026-01-01, so "retention ago" is never before zero.
pub const START_MS: u64 = 1_767_225_600_000;
pub const HOUR: Duration = Duration::from_secs(3600);
pub const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub tables: Tables,
}

impl Fixture {
    pub fn new() -> Self {
        Self::with(&TablesOptions::default())
    }

    pub fn with(options: &TablesOptions) -> Self {
        Self::with_clock(options, Arc::new(ManualClock::new(START_MS)))
    }

    pub fn with_clock(options: &TablesOptions, clock: Arc<ManualClock>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let tables = open(dir.path(), &clock, options);
        Self { dir, clock, tables }
    }

    pub fn db(&self) -> &Arc<Db> {
        self.tables.db()
    }

    pub fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Closes the database and opens it again on the same clock.
    pub fn reopen(self, options: &TablesOptions) -> Self {
        let Self { dir, clock, tables } = self;
        let db = Arc::clone(tables.db());
        drop(tables);
        let Ok(db) = Arc::try_unwrap(db) else {
            panic!("a table handle still holds the database: drop it before reopening");
        };
        db.close().expect("close");
        let tables = open(dir.path(), &clock, options);
        Self { dir, clock, tables }
    }
}

pub fn open(dir: &std::path::Path, clock: &Arc<ManualClock>, options: &TablesOptions) -> Tables {
    let db = Db::open(dir, Options::default().clock(clock.clone())).expect("open database");
    Tables::open_with(Arc::new(db), options).expect("open tables")
}

/// A soft-deleting table with a unique `name` and a nullable `note`.
pub fn schema(name: &str) -> Schema {
    Schema::new(name)
        .column("name", ColumnType::Text)
        .nullable("note", ColumnType::Text)
        .unique(format!("uk_{name}_name"), &["name"])
        .index(format!("idx_{name}_note"), &["note"])
        .soft_delete()
}

/// Every CubeMaster and CubeOps purge target.
pub fn create_cube_tables(tables: &Tables) {
    for name in cube_master_purge_tables(false)
        .into_iter()
        .chain(cube_ops_purge_tables())
    {
        tables.create_table(schema(&name)).expect("create table");
    }
}

/// Inserts `n` rows named `{prefix}{i}`, soft-deleted at `deleted_at(i)` (None: live).
pub fn fill(
    table: &Table,
    prefix: &str,
    n: u64,
    deleted_at: impl Fn(u64) -> Option<u64>,
) -> Vec<u64> {
    (0..n)
        .map(|i| {
            let row = Row::new().set("name", format!("{prefix}{i}")).set(
                "deleted_at",
                deleted_at(i).map_or(Value::Null, Value::Timestamp),
            );
            table.insert(row).expect("insert")
        })
        .collect()
}

/// Enabled, 1h retention and interval.
pub fn enabled() -> PurgeConfig {
    PurgeConfig {
        enable: true,
        dry_run: false,
        retention: HOUR,
        interval: Duration::from_secs(3600),
        time_zone: None,
    }
}

pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).expect("fits")
}

/// Polls `done` until it holds; fails the test, naming `what`, after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The seeds a randomized test runs: `CAIRN_SEED` alone, else `CAIRN_SEEDS` of them (default
/// `default`), printed so a failure can be replayed.
pub fn seeds(default: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var("CAIRN_SEED") {
        return vec![seed.parse().expect("CAIRN_SEED is a number")];
    }
    let n = std::env::var("CAIRN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    (1..=n).collect()
}
