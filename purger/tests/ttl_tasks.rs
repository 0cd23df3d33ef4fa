//! The TTL task manager (OBKV-HBase TTL tasks) on a manual clock: every command's transitions
//! and errors, the counters a task leaves in history, periodic launches, history recycling, a
//! pause under memtable pressure, restarts, and the task tables read through the table layer.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use cairn::{CfOptions, ColumnFamily, Db, ManualClock, Options};
use cairn_fs::{FileLock, FileSystem, ReadableFile, RealFs, WritableFile};
use cairn_purger::{
    HISTORY_TABLE, TASKS_TABLE, Tables, TaskRow, TaskStatus, TimeZone, TriggerType, TtlCommand,
    TtlError, TtlSettings, TtlTasks, Value,
};

/// 2026-01-01 00:00:00 UTC.
const START_MS: u64 = 1_767_225_600_000;
const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;
const TTL: Duration = Duration::from_secs(3600);

struct Fixture {
    _dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    db: Arc<Db>,
    tables: Tables,
}

/// Automatic compactions are off, so what a task counts is all its own.
fn options(clock: &Arc<ManualClock>) -> Options {
    Options::default()
        .clock(clock.clone())
        .disable_auto_compactions(true)
        .target_file_size(64 << 10)
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let clock = Arc::new(ManualClock::new(START_MS));
        Self::open(dir, clock, |o| o)
    }

    fn open(
        dir: tempfile::TempDir,
        clock: Arc<ManualClock>,
        more: impl FnOnce(Options) -> Options,
    ) -> Self {
        let db = Arc::new(Db::open(dir.path(), more(options(&clock))).expect("open"));
        let tables = Tables::open(Arc::clone(&db)).expect("tables");
        Self {
            _dir: dir,
            clock,
            db,
            tables,
        }
    }

    fn reopen(self) -> Self {
        let Self {
            _dir: dir,
            clock,
            db,
            tables,
        } = self;
        drop(tables);
        Arc::into_inner(db)
            .expect("one handle")
            .close()
            .expect("close");
        Self::open(dir, clock, |o| o)
    }

    fn ttl(&self, settings: TtlSettings) -> TtlTasks {
        TtlTasks::open(self.tables.clone(), settings).expect("ttl tasks")
    }

    /// `keys` keys with `versions` versions each under `options`, each version in its own
    /// table; values of about 100 bytes that do not compress.
    fn family(&self, name: &str, options: CfOptions, keys: u32, versions: u32) -> ColumnFamily {
        let cf = self
            .db
            .create_column_family(name, options)
            .expect("create family");
        for v in 0..versions {
            for i in 0..keys {
                cf.put(
                    format!("key{i:06}"),
                    value(u64::from(v) << 32 | u64::from(i)),
                )
                .expect("put");
            }
            self.db.flush().expect("flush");
        }
        cf
    }
}

/// 96 bytes of noise seeded by `seed`.
fn value(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..12)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

fn enabled() -> TtlSettings {
    TtlSettings {
        enable_kv_ttl: true,
        kv_ttl_duty_duration: "".parse().expect("empty window"),
        kv_ttl_history_recycle_interval: Duration::from_secs(7 * 86_400),
        ttl_thread_score: 2,
        time_zone: TimeZone::UTC,
    }
}

fn tenant(rows: &[TaskRow]) -> &TaskRow {
    rows.iter().find(|r| r.is_tenant()).expect("a tenant row")
}

/// A counter summed over every row of a view, as an operator sums the column: the tenant row
/// carries no counts of its own, so each cell counts once.
fn total(rows: &[TaskRow], counter: fn(&TaskRow) -> u64) -> u64 {
    rows.iter().map(counter).sum()
}

fn tablet_statuses(rows: &[TaskRow]) -> Vec<TaskStatus> {
    rows.iter()
        .filter(|r| !r.is_tenant())
        .map(|r| r.status)
        .collect()
}

#[test]
fn with_ttl_off_every_command_says_so() {
    let f = Fixture::new();
    let ttl = f.ttl(TtlSettings::default());
    let not_enabled = |r: Result<(), TtlError>| match r {
        Err(e @ TtlError::NotEnabled) => {
            assert_eq!(e.to_string(), "TTL not enabled (enable_kv_ttl is false)");
        }
        other => panic!("expected NotEnabled, got {other:?}"),
    };
    not_enabled(ttl.trigger().map(drop));
    not_enabled(ttl.suspend());
    not_enabled(ttl.resume());
    not_enabled(ttl.cancel());
    not_enabled(ttl.run_until_idle());
    not_enabled(ttl.tick().map(drop));
    not_enabled(ttl.start().map(drop));
    assert!(
        ttl.tasks().expect("tasks").is_empty(),
        "reading is still allowed"
    );
}

#[test]
fn commands_move_the_task_through_its_states_and_refuse_the_rest() {
    let f = Fixture::new();
    f.family("t1$cf1", CfOptions::default().ttl(TTL), 100, 1);
    let ttl = f.ttl(enabled());
    for (name, result) in [
        ("suspend", ttl.suspend()),
        ("resume", ttl.resume()),
        ("cancel", ttl.cancel()),
    ] {
        assert!(
            matches!(result, Err(TtlError::NoTaskRunning)),
            "{name}: {result:?}"
        );
    }

    let task = ttl.trigger().expect("trigger");
    let rows = ttl.tasks().expect("tasks");
    assert_eq!(tenant(&rows).status, TaskStatus::RsTriggering);
    assert_eq!(tenant(&rows).task_id, task);
    assert_eq!(tenant(&rows).trigger_type, TriggerType::User);
    assert_eq!(tablet_statuses(&rows), [TaskStatus::Prepared]);
    assert!(matches!(ttl.trigger(), Err(TtlError::CmdNotAllowed)));
    assert!(matches!(ttl.resume(), Err(TtlError::CmdNotAllowed)));

    ttl.suspend().expect("suspend");
    let rows = ttl.tasks().expect("tasks");
    assert_eq!(tenant(&rows).status, TaskStatus::RsSuspending);
    assert_eq!(tablet_statuses(&rows), [TaskStatus::Pending]);
    assert!(matches!(ttl.suspend(), Err(TtlError::CmdNotAllowed)));
    assert!(matches!(ttl.trigger(), Err(TtlError::CmdNotAllowed)));
    ttl.run_until_idle().expect("run");
    let rows = ttl.tasks().expect("tasks");
    assert_eq!(
        tablet_statuses(&rows),
        [TaskStatus::Pending],
        "a suspended task does not run"
    );
    assert_eq!(rows.iter().map(|r| r.scan_cnt).sum::<u64>(), 0);

    ttl.resume().expect("resume");
    let rows = ttl.tasks().expect("tasks");
    assert_eq!(tenant(&rows).status, TaskStatus::RsTriggering);
    assert_eq!(tablet_statuses(&rows), [TaskStatus::Prepared]);

    ttl.cancel().expect("cancel");
    assert!(
        ttl.tasks().expect("tasks").is_empty(),
        "a canceled task moves to history"
    );
    let history = ttl.history().expect("history");
    assert_eq!(tenant(&history).status, TaskStatus::Canceled);
    assert_eq!(tablet_statuses(&history), [TaskStatus::Canceled]);
    assert!(matches!(ttl.cancel(), Err(TtlError::NoTaskRunning)));
    assert_eq!(ttl.trigger().expect("a new task"), task + 1);
}

#[test]
fn a_command_checked_on_the_views_answers_as_the_command_would() {
    let f = Fixture::new();
    f.family("t1$cf1", CfOptions::default().ttl(TTL), 100, 1);
    let ttl = f.ttl(enabled());
    let answer = |r: Result<(), TtlError>| match r {
        Ok(()) => "ok",
        Err(TtlError::NoTaskRunning) => "none",
        Err(TtlError::CmdNotAllowed) => "not allowed",
        Err(e) => panic!("{e}"),
    };
    let check = |ttl: &TtlTasks| {
        let rows = ttl.tasks().expect("tasks");
        [
            TtlCommand::Trigger,
            TtlCommand::Suspend,
            TtlCommand::Resume,
            TtlCommand::Cancel,
        ]
        .map(|c| answer(c.check(&rows)))
    };
    assert_eq!(check(&ttl), ["ok", "none", "none", "none"]);
    assert_eq!(answer(ttl.suspend()), "none");
    ttl.trigger().expect("trigger");
    assert_eq!(check(&ttl), ["not allowed", "ok", "not allowed", "ok"]);
    assert_eq!(answer(ttl.resume()), "not allowed");
    ttl.suspend().expect("suspend");
    assert_eq!(check(&ttl), ["not allowed", "not allowed", "ok", "ok"]);
    assert_eq!(answer(ttl.suspend()), "not allowed");

    // A launch a crash cut short is rolled back at the next open: no task to command.
    let mut rows = ttl.tasks().expect("tasks");
    for row in &mut rows {
        row.status = TaskStatus::RsTriggering;
        "LAUNCHING".clone_into(&mut row.ret_code);
    }
    assert!(TtlCommand::Trigger.check(&rows).is_ok());
    assert!(matches!(
        TtlCommand::Suspend.check(&rows),
        Err(TtlError::NoTaskRunning)
    ));
}

#[test]
fn a_command_during_a_step_wins_once_the_step_ends() {
    let f = Fixture::new();
    f.family("t1$cf1", CfOptions::default().ttl(TTL), 2000, 1);
    f.db.column_family("t1$cf1")
        .expect("family")
        .compact_range::<&str>(..)
        .expect("spread over the last level");
    f.clock.advance(TTL * 2);
    let ttl = f.ttl(TtlSettings {
        ttl_thread_score: 1,
        ..enabled()
    });
    let first_table_entries =
        f.db.column_family("t1$cf1")
            .expect("family")
            .tables()
            .expect("tables")
            .iter()
            .min_by(|a, b| a.smallest.cmp(&b.smallest))
            .map(|t| t.entries)
            .expect("a table");
    ttl.trigger().expect("trigger");
    // After the tablet's first step: suspend, resume, then cancel; cancel again is refused.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    ttl.on_step(move |handle, row| {
        let mut log = log.lock().expect("log");
        if !log.is_empty() {
            return;
        }
        log.push(format!("step {}", row.status));
        handle.suspend().expect("suspend during a step");
        let rows = handle.tasks().expect("tasks");
        log.push(format!(
            "{} {:?}",
            tenant(&rows).status,
            tablet_statuses(&rows)
        ));
        handle.resume().expect("resume");
        handle.cancel().expect("cancel");
        let rows = handle.tasks().expect("tasks");
        log.push(format!(
            "{} {:?}",
            tenant(&rows).status,
            tablet_statuses(&rows)
        ));
        log.push(format!("{:?}", handle.cancel()));
        log.push(format!("{:?}", handle.suspend()));
    });
    ttl.run_until_idle().expect("run");
    let log = seen.lock().expect("log").clone();
    assert_eq!(
        log,
        [
            "step RUNNING",
            "RS_SUSPENDING [Pending]",
            "RS_CANCELING [Canceled]",
            "Err(CmdNotAllowed)",
            "Err(CmdNotAllowed)",
        ]
    );
    let history = ttl.history().expect("history");
    assert_eq!(tenant(&history).status, TaskStatus::Canceled);
    let tablet = history.iter().find(|r| !r.is_tenant()).expect("tablet");
    assert_eq!(
        tablet.scan_cnt, first_table_entries,
        "one step, one table, and none after the cancel: {tablet:?}"
    );
    assert!(ttl.tasks().expect("tasks").is_empty());
}

#[test]
fn a_task_reclaims_expired_cells_and_versions_and_counts_them_once() {
    let f = Fixture::new();
    let options = CfOptions::default().ttl(TTL).max_versions(2);
    let cf = f.family("t1$cf1", options, 10_000, 4);
    let untouched = f.family("plain", CfOptions::default(), 100, 1);
    f.clock.advance(TTL + Duration::from_secs(1));
    let ttl = f.ttl(enabled());
    ttl.trigger().expect("trigger");
    ttl.run_until_idle().expect("run");

    assert!(ttl.tasks().expect("tasks").is_empty());
    let history = ttl.history().expect("history");
    assert_eq!(
        history.len(),
        2,
        "a family without TTL or versions has no tablet: {history:?}"
    );
    let tablet = history.iter().find(|r| !r.is_tenant()).expect("tablet");
    assert_eq!(tablet.table_name.as_deref(), Some("t1$cf1"));
    assert_eq!(tablet.table_id, i64::from(cf.id()));
    assert_eq!(tablet.status, TaskStatus::Finished);
    assert_eq!(tablet.ret_code, "OB_SUCCESS");
    assert_eq!(tenant(&history).ret_code, "OB_SUCCESS");
    assert_eq!(tablet.scan_cnt, 40_000);
    assert_eq!(
        tablet.max_version_del_cnt, 20_000,
        "the two oldest of each key"
    );
    assert_eq!(tablet.ttl_del_cnt, 20_000, "the two newest, expired");
    let task = tenant(&history);
    assert_eq!(task.status, TaskStatus::Finished);
    assert_eq!(
        (task.scan_cnt, task.ttl_del_cnt, task.max_version_del_cnt),
        (0, 0, 0),
        "the tablets carry the counts"
    );
    assert_eq!(
        (
            total(&history, |r| r.scan_cnt),
            total(&history, |r| r.ttl_del_cnt),
            total(&history, |r| r.max_version_del_cnt)
        ),
        (40_000, 20_000, 20_000)
    );
    assert!(
        cf.tables().expect("tables").is_empty(),
        "no entry and no tombstone left"
    );
    assert_eq!(cf.iter().expect("iter").count(), 0);
    assert_eq!(untouched.tables().expect("tables").len(), 1);
}

#[test]
fn every_partition_gets_a_tablet_task_and_the_workers_finish_them_all() {
    let f = Fixture::new();
    let a = f.family("a", CfOptions::default().ttl(TTL), 3000, 1);
    let b = f.family("b", CfOptions::default().max_versions(3), 3000, 5);
    a.compact_range::<&str>(..)
        .expect("spread over the last level");
    let cells = f.family("cells", CfOptions::default(), 0, 0);
    cells
        .put_with_ttl("short", "lived", Duration::from_secs(1))
        .expect("put");
    f.db.flush().expect("flush");
    f.clock.advance(TTL * 2);
    let ttl = f.ttl(TtlSettings {
        ttl_thread_score: 3,
        ..enabled()
    });
    ttl.set_tablet_bytes(100 << 10);
    ttl.trigger().expect("trigger");
    let rows = ttl.tasks().expect("tasks");
    for (cf, table) in [(&a, "a"), (&b, "b"), (&cells, "cells")] {
        let ids: Vec<i64> = rows
            .iter()
            .filter(|r| r.table_name.as_deref() == Some(table))
            .map(|r| r.tablet_id)
            .collect();
        let bytes: u64 = cf.tables().expect("tables").iter().map(|t| t.bytes).sum();
        let expected = usize::try_from(bytes.div_ceil(100 << 10)).expect("small");
        assert!(
            !ids.is_empty() && ids.len() <= expected.max(1),
            "{table}: {ids:?} for {bytes} bytes"
        );
        assert_eq!(
            ids,
            (1..=i64::try_from(ids.len()).expect("small")).collect::<Vec<_>>()
        );
    }
    assert!(
        rows.iter()
            .filter(|r| r.table_name.as_deref() == Some("a"))
            .count()
            > 1
    );
    ttl.run_until_idle().expect("run");
    let history = ttl.history().expect("history");
    assert!(
        tablet_statuses(&history)
            .iter()
            .all(|s| *s == TaskStatus::Finished)
    );
    let sum = |table: &str, f: fn(&TaskRow) -> u64| {
        history
            .iter()
            .filter(|r| r.table_name.as_deref() == Some(table))
            .map(f)
            .sum::<u64>()
    };
    assert_eq!(sum("a", |r| r.ttl_del_cnt), 3000);
    assert_eq!(sum("cells", |r| r.ttl_del_cnt), 1);
    assert_eq!(sum("b", |r| r.ttl_del_cnt), 0, "no TTL on b");
    assert_eq!(
        sum("b", |r| r.max_version_del_cnt),
        6000,
        "two of five versions over three"
    );
    assert_eq!(sum("a", |r| r.max_version_del_cnt), 0);
    assert!(a.tables().expect("tables").is_empty());
    assert!(cells.tables().expect("tables").is_empty());
    assert_eq!(
        b.iter().expect("iter").count(),
        3000,
        "b keeps its newest versions"
    );
}

#[test]
fn a_periodic_task_starts_once_per_window_entry_and_never_beside_another() {
    let f = Fixture::new();
    f.family("t1$cf1", CfOptions::default().ttl(TTL), 10, 1);
    let ttl = f.ttl(TtlSettings {
        kv_ttl_duty_duration: "[22:00:00, 24:00:00]".parse().expect("window"),
        ..enabled()
    });
    let at = |day: u64, hour: u64| f.clock.set(START_MS + day * DAY_MS + hour * HOUR_MS);
    at(0, 21);
    assert!(!ttl.tick().expect("tick"), "before the window");
    at(0, 22);
    assert!(ttl.tick().expect("tick"), "entering the window");
    let rows = ttl.tasks().expect("tasks");
    assert_eq!(tenant(&rows).trigger_type, TriggerType::Periodic);
    assert!(!ttl.tick().expect("tick"), "once per window");
    ttl.run_until_idle().expect("run");
    at(0, 23);
    assert!(
        !ttl.tick().expect("tick"),
        "finished, but this window had its task"
    );

    // The next day a user task is active when the window opens: no periodic one.
    at(1, 12);
    ttl.trigger().expect("user task");
    at(1, 22);
    assert!(!ttl.tick().expect("tick"));
    ttl.run_until_idle().expect("run");
    assert!(!ttl.tick().expect("tick"), "decided when the window opened");
    at(2, 22);
    assert!(ttl.tick().expect("tick"), "the day after");
    ttl.run_until_idle().expect("run");
    let history = ttl.history().expect("history");
    let tenants: Vec<TriggerType> = history
        .iter()
        .filter(|r| r.is_tenant())
        .map(|r| r.trigger_type)
        .collect();
    assert_eq!(
        tenants,
        [
            TriggerType::Periodic,
            TriggerType::User,
            TriggerType::Periodic
        ]
    );

    // A restart inside the window does not start a second task for it.
    drop(ttl);
    let f = f.reopen();
    let ttl = f.ttl(TtlSettings {
        kv_ttl_duty_duration: "[22:00:00, 24:00:00]".parse().expect("window"),
        ..enabled()
    });
    f.clock.set(START_MS + 2 * DAY_MS + 23 * HOUR_MS);
    assert!(!ttl.tick().expect("tick"));
}

#[test]
fn the_duty_window_is_read_on_the_wall_clock_of_the_time_zone() {
    let f = Fixture::new();
    f.family("t1$cf1", CfOptions::default().ttl(TTL), 10, 1);
    let window = "[02:00:00, 03:00:00]";
    let ttl = f.ttl(TtlSettings {
        kv_ttl_duty_duration: window.parse().expect("window"),
        time_zone: TimeZone::parse("+08:00").expect("zone"),
        ..enabled()
    });
    let at = |ms: u64| f.clock.set(START_MS + ms);
    at(2 * HOUR_MS);
    assert!(!ttl.tick().expect("tick"), "02:00 UTC is 10:00 at +08:00");
    at(18 * HOUR_MS - 1000);
    assert!(!ttl.tick().expect("tick"), "01:59:59 at +08:00");
    at(18 * HOUR_MS);
    assert!(ttl.tick().expect("tick"), "02:00 at +08:00 is 18:00 UTC");
    ttl.run_until_idle().expect("run");
    let history = ttl.history().expect("history");
    assert_eq!(tenant(&history).trigger_type, TriggerType::Periodic);
    assert_eq!(tenant(&history).start_time, START_MS + 18 * HOUR_MS);
    drop(ttl);

    // The same window with the default zone, UTC: shut at 18:00 UTC, open at 02:00 UTC.
    let f = f.reopen();
    let utc = f.ttl(TtlSettings {
        kv_ttl_duty_duration: window.parse().expect("window"),
        ..enabled()
    });
    assert_eq!(utc.settings().time_zone, TimeZone::UTC);
    f.clock.set(START_MS + DAY_MS + 18 * HOUR_MS);
    assert!(!utc.tick().expect("tick"));
    f.clock.set(START_MS + 2 * DAY_MS + 2 * HOUR_MS);
    assert!(utc.tick().expect("tick"));
}

#[test]
fn a_history_recycle_interval_outside_one_to_180_days_is_refused() {
    let f = Fixture::new();
    for interval in [
        Duration::from_secs(86_400 - 1),
        Duration::from_secs(180 * 86_400 + 1),
    ] {
        let refused = TtlTasks::open(
            f.tables.clone(),
            TtlSettings {
                kv_ttl_history_recycle_interval: interval,
                ..enabled()
            },
        );
        match refused {
            Err(e @ TtlError::InvalidArgument(_)) => assert!(
                e.to_string().contains("kv_ttl_history_recycle_interval"),
                "{e}"
            ),
            other => panic!("{interval:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    assert!(
        f.tables.table(TASKS_TABLE).is_err(),
        "a refused open creates nothing"
    );
    for days in [1, 180] {
        let ttl = f.ttl(TtlSettings {
            kv_ttl_history_recycle_interval: Duration::from_secs(days * 86_400),
            ..enabled()
        });
        drop(ttl);
    }
}

#[test]
fn without_a_duty_window_no_task_starts_by_itself() {
    let f = Fixture::new();
    f.family("t1$cf1", CfOptions::default().ttl(TTL), 10, 1);
    let ttl = f.ttl(enabled());
    for hour in 0..48 {
        f.clock.set(START_MS + hour * HOUR_MS);
        assert!(!ttl.tick().expect("tick"));
    }
    assert!(ttl.history().expect("history").is_empty());
}

#[test]
fn history_older_than_the_recycle_interval_is_deleted() {
    let f = Fixture::new();
    f.family("t1$cf1", CfOptions::default().ttl(TTL), 10, 1);
    let ttl = f.ttl(TtlSettings {
        kv_ttl_history_recycle_interval: Duration::from_secs(86_400),
        ..enabled()
    });
    let run = || {
        ttl.trigger().expect("trigger");
        ttl.run_until_idle().expect("run");
    };
    run();
    f.clock.advance(Duration::from_secs(12 * 3600));
    run();
    assert_eq!(ttl.history().expect("history").len(), 4);
    f.clock.advance(Duration::from_secs(12 * 3600));
    ttl.tick().expect("tick");
    assert_eq!(
        ttl.history().expect("history").len(),
        4,
        "exactly a day old: kept"
    );
    // Recycling runs at most once a minute of the clock.
    f.clock.advance(Duration::from_secs(30));
    ttl.tick().expect("tick");
    assert_eq!(
        ttl.history().expect("history").len(),
        4,
        "too soon after the last run"
    );
    f.clock.advance(Duration::from_secs(30));
    ttl.tick().expect("tick");
    let left = ttl.history().expect("history");
    assert_eq!(left.len(), 2, "the first task went: {left:?}");
    assert!(left.iter().all(|r| r.task_id == 2));
    f.clock.advance(Duration::from_secs(86_400));
    ttl.tick().expect("tick");
    assert!(ttl.history().expect("history").is_empty());
}

#[test]
fn the_task_tables_are_tables_like_any_other() {
    let f = Fixture::new();
    f.family("t1$cf1", CfOptions::default().ttl(TTL), 10, 1);
    let ttl = f.ttl(enabled());
    ttl.trigger().expect("trigger");
    assert!(f.tables.table_names().iter().any(|n| n == TASKS_TABLE));
    let table = f.tables.table(TASKS_TABLE).expect("table");
    assert_eq!(table.count().expect("count"), 2);
    let rows: Vec<_> = table
        .scan()
        .expect("scan")
        .map(|r| r.expect("row"))
        .collect();
    let tenant_row = rows
        .iter()
        .find(|r| r.get("table_id") == Some(&Value::Integer(-1)))
        .expect("tenant row");
    assert_eq!(tenant_row.get("table_name"), Some(&Value::Null));
    assert_eq!(
        tenant_row.get("status"),
        Some(&Value::from("RS_TRIGGERING"))
    );
    assert_eq!(tenant_row.get("trigger_type"), Some(&Value::from("USER")));
    ttl.run_until_idle().expect("run");
    let history = f.tables.table(HISTORY_TABLE).expect("table");
    assert_eq!(history.count().expect("count"), 2);
    assert_eq!(table.count().expect("count"), 0);
}

#[test]
fn a_task_survives_a_restart_and_a_move_interrupted_by_one_finishes() {
    let f = Fixture::new();
    let cf = f.family("t1$cf1", CfOptions::default().ttl(TTL), 2000, 1);
    cf.compact_range::<&str>(..)
        .expect("spread over the last level");
    f.clock.advance(TTL * 2);
    let ttl = f.ttl(TtlSettings {
        ttl_thread_score: 1,
        ..enabled()
    });
    ttl.trigger().expect("trigger");
    let once = AtomicBool::new(false);
    ttl.on_step(move |handle, _| {
        if !once.swap(true, Ordering::SeqCst) {
            handle.suspend().expect("suspend");
        }
    });
    ttl.run_until_idle().expect("run one step");
    let before = ttl.tasks().expect("tasks");
    drop((ttl, cf));
    let f = f.reopen();
    let ttl = f.ttl(enabled());
    assert_eq!(
        ttl.tasks().expect("tasks"),
        before,
        "the rows survive the restart"
    );
    ttl.resume().expect("resume");
    ttl.run_until_idle().expect("run");
    let history = ttl.history().expect("history");
    let tablet = history.iter().find(|r| !r.is_tenant()).expect("tablet");
    assert_eq!(
        tablet.ttl_del_cnt, 2000,
        "each cell counted once across the restart"
    );
    assert_eq!(tablet.scan_cnt, 2000);

    // A crash in the middle of a move leaves the tenant row RS_MOVING: the next run ends it,
    // and no command is allowed meanwhile.
    ttl.trigger().expect("trigger");
    let table = f.tables.table(TASKS_TABLE).expect("table");
    let rows: Vec<_> = table
        .scan()
        .expect("scan")
        .map(|r| r.expect("row"))
        .collect();
    for row in &rows {
        let status = if row.get("table_id") == Some(&Value::Integer(-1)) {
            "RS_MOVING"
        } else {
            "FINISHED"
        };
        table
            .update(row.id(), cairn_purger::Row::new().set("status", status))
            .expect("update");
    }
    for result in [ttl.cancel(), ttl.suspend(), ttl.trigger().map(drop)] {
        assert!(matches!(result, Err(TtlError::CmdNotAllowed)), "{result:?}");
    }
    ttl.run_until_idle().expect("run");
    assert!(ttl.tasks().expect("tasks").is_empty());
    assert_eq!(ttl.history().expect("history").len(), 4);
}

/// Sets `column` of the current task's tenant row (or of its tablet rows) to `value`, as a
/// crash between two row writes would leave it.
fn set_rows(f: &Fixture, tenant_rows: bool, column: &str, value: &Value) {
    let table = f.tables.table(TASKS_TABLE).expect("table");
    for row in table.scan().expect("scan").map(|r| r.expect("row")) {
        let is_tenant = row.get("table_id") == Some(&Value::Integer(-1));
        if is_tenant == tenant_rows {
            table
                .update(
                    row.id(),
                    cairn_purger::Row::new().set(column, value.clone()),
                )
                .expect("update");
        }
    }
}

#[test]
fn a_crash_between_two_row_writes_leaves_a_state_the_next_open_or_run_finishes() {
    let f = Fixture::new();
    let a = f.family("a", CfOptions::default().ttl(TTL), 500, 1);
    let b = f.family("b", CfOptions::default().ttl(TTL), 500, 1);
    f.clock.advance(TTL * 2);
    let ttl = f.ttl(enabled());

    // A launch cut short (the tenant row still LAUNCHING) is rolled back at the next open.
    ttl.trigger().expect("trigger");
    set_rows(&f, true, "ret_code", &Value::from("LAUNCHING"));
    drop(ttl);
    let f = f.reopen();
    let ttl = f.ttl(enabled());
    assert!(ttl.tasks().expect("tasks").is_empty(), "rolled back");

    // A cancel cut short after the tenant row: the next run cancels the rest and moves it.
    ttl.trigger().expect("trigger");
    set_rows(&f, true, "status", &Value::from("RS_CANCELING"));
    ttl.run_until_idle().expect("run");
    let history = ttl.history().expect("history");
    assert_eq!(tenant(&history).status, TaskStatus::Canceled);
    assert_eq!(
        tablet_statuses(&history),
        [TaskStatus::Canceled, TaskStatus::Canceled]
    );

    // A step cut short leaves its tablet RUNNING under a triggering tenant: it runs again.
    ttl.trigger().expect("trigger");
    set_rows(&f, false, "status", &Value::from("RUNNING"));
    drop(ttl);
    let f = f.reopen();
    let ttl = f.ttl(enabled());
    ttl.run_until_idle().expect("run");
    let history = ttl.history().expect("history");
    let newest = history.iter().map(|r| r.task_id).max();
    let last = history
        .iter()
        .filter(|r| Some(r.task_id) == newest)
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(tenant(&last).status, TaskStatus::Finished);
    assert_eq!(total(&last, |r| r.ttl_del_cnt), 1000);

    // A move cut short after one tablet row reached history: the task's rows count it, once.
    let c = f.family("c", CfOptions::default().ttl(TTL), 300, 1);
    f.clock.advance(TTL * 2);
    ttl.trigger().expect("trigger");
    ttl.suspend().expect("suspend");
    let tasks = f.tables.table(TASKS_TABLE).expect("table");
    let history_table = f.tables.table(HISTORY_TABLE).expect("table");
    let rows: Vec<_> = tasks
        .scan()
        .expect("scan")
        .map(|r| r.expect("row"))
        .collect();
    for row in &rows {
        let is_tenant = row.get("table_id") == Some(&Value::Integer(-1));
        let patch = cairn_purger::Row::new()
            .set("status", if is_tenant { "RS_MOVING" } else { "FINISHED" })
            .set("ttl_del_cnt", if is_tenant { 0 } else { 300 });
        tasks.update(row.id(), patch).expect("update");
    }
    let moved = rows
        .iter()
        .find(|r| r.get("table_id") != Some(&Value::Integer(-1)))
        .expect("a tablet row");
    let mut copy = cairn_purger::Row::new();
    for (column, value) in tasks.get(moved.id()).expect("get").expect("row").values() {
        copy = copy.set(column, value.clone());
    }
    history_table.insert(copy).expect("insert");
    tasks.hard_delete(moved.id()).expect("delete");
    for result in [
        ttl.cancel(),
        ttl.suspend(),
        ttl.resume(),
        ttl.trigger().map(drop),
    ] {
        assert!(matches!(result, Err(TtlError::CmdNotAllowed)), "{result:?}");
    }
    ttl.run_until_idle().expect("run");
    assert!(ttl.tasks().expect("tasks").is_empty());
    let history = ttl.history().expect("history");
    let newest = history.iter().map(|r| r.task_id).max();
    let last: Vec<_> = history
        .iter()
        .filter(|r| Some(r.task_id) == newest)
        .cloned()
        .collect();
    assert_eq!(
        last.len(),
        4,
        "tenant and three tablets, none twice: {last:?}"
    );
    assert_eq!(
        total(&last, |r| r.ttl_del_cnt),
        900,
        "the tablet moved before the crash counts"
    );
    drop((a, b, c));
}

#[test]
fn memtable_pressure_pauses_running_tablets_after_their_step_until_it_falls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START_MS));
    let gate = Arc::new(FlushGate::default());
    let fs = Arc::clone(&gate);
    let f = Fixture::open(dir, clock, move |o| {
        o.file_system(fs)
            .memtable_size(64 << 10)
            .max_immutable_memtables(8)
    });
    // Declared after `f`, so dropped before it: a failed assertion must not leave the flush
    // thread waiting while the database closes.
    let _open_at_end = OpenOnDrop(Arc::clone(&gate));
    let cf = f.family("t1$cf1", CfOptions::default().ttl(TTL), 2000, 1);
    cf.compact_range::<&str>(..)
        .expect("spread over the last level");
    let tables_before = cf.tables().expect("tables").len();
    assert!(tables_before > 3, "{tables_before} tables");
    f.clock.advance(TTL * 2);
    let ttl = f.ttl(TtlSettings {
        ttl_thread_score: 1,
        ..enabled()
    });
    ttl.trigger().expect("trigger");
    // After the first step, flushes stop and writes fill the memtables past the trigger.
    let (db, steps) = (Arc::clone(&f.db), Arc::new(AtomicUsize::new(0)));
    let (gate_in_step, steps_seen) = (Arc::clone(&gate), Arc::clone(&steps));
    ttl.on_step(move |_, _| {
        if steps_seen.fetch_add(1, Ordering::SeqCst) == 0 {
            gate_in_step.close();
            for i in 0..1500 {
                db.put(format!("filler{i:05}"), [7u8; 100]).expect("put");
            }
            let stats = db.stats();
            assert!(
                stats.memtable_bytes > stats.memtable_flush_trigger,
                "{stats:?}"
            );
        }
    });
    ttl.run_until_idle().expect("run until pressure stops it");
    let rows = ttl.tasks().expect("tasks");
    assert_eq!(tenant(&rows).status, TaskStatus::RsTriggering);
    assert_eq!(
        tablet_statuses(&rows),
        [TaskStatus::Pending],
        "paused by pressure"
    );
    assert_eq!(
        steps.load(Ordering::SeqCst),
        1,
        "the step running when it began finished, and no other began"
    );
    assert!(!cf.tables().expect("tables").is_empty());
    ttl.run_until_idle().expect("run");
    assert_eq!(
        steps.load(Ordering::SeqCst),
        1,
        "still under pressure: nothing runs"
    );

    gate.open();
    f.db.flush().expect("flush");
    let stats = f.db.stats();
    assert!(
        stats.memtable_bytes <= stats.memtable_flush_trigger,
        "{stats:?}"
    );
    ttl.run_until_idle().expect("run");
    assert!(ttl.tasks().expect("tasks").is_empty());
    let history = ttl.history().expect("history");
    assert_eq!(tablet_statuses(&history), [TaskStatus::Finished]);
    assert_eq!(total(&history, |r| r.ttl_del_cnt), 2000);
    assert!(cf.tables().expect("tables").is_empty());
}

#[test]
fn the_background_loop_runs_a_triggered_task_to_history() {
    let f = Fixture::new();
    let cf = f.family("t1$cf1", CfOptions::default().ttl(TTL), 500, 1);
    f.clock.advance(TTL * 2);
    let ttl = f.ttl(enabled());
    let running = ttl.start().expect("start");
    assert!(matches!(ttl.start(), Err(TtlError::InvalidArgument(_))));
    ttl.trigger().expect("trigger");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while ttl.history().expect("history").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the task did not finish"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    running.stop().expect("stop");
    assert!(cf.tables().expect("tables").is_empty());
    assert_eq!(
        total(&ttl.history().expect("history"), |r| r.ttl_del_cnt),
        500
    );
}

/// A file system that, while closed, makes the flush thread wait before it creates a file: the
/// memtables then pile up as when flushes fall behind.
#[derive(Debug, Default)]
struct FlushGate {
    closed: Mutex<bool>,
    opened: Condvar,
}

impl FlushGate {
    fn close(&self) {
        *self.closed.lock().expect("gate") = true;
    }

    fn open(&self) {
        *self
            .closed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = false;
        self.opened.notify_all();
    }

    fn wait_if_flushing(&self) {
        if std::thread::current().name() != Some("cairn-flush") {
            return;
        }
        let mut closed = self.closed.lock().expect("gate");
        while *closed {
            closed = self.opened.wait(closed).expect("gate");
        }
    }
}

/// Opens the gate when dropped.
struct OpenOnDrop(Arc<FlushGate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

impl FileSystem for FlushGate {
    fn create(&self, path: &Path) -> cairn_fs::Result<Box<dyn WritableFile>> {
        self.wait_if_flushing();
        RealFs.create(path)
    }
    fn open_append(&self, path: &Path) -> cairn_fs::Result<Box<dyn WritableFile>> {
        RealFs.open_append(path)
    }
    fn open_read(&self, path: &Path) -> cairn_fs::Result<Box<dyn ReadableFile>> {
        RealFs.open_read(path)
    }
    fn map(&self, path: &Path) -> cairn_fs::Result<bytes::Bytes> {
        RealFs.map(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> cairn_fs::Result<()> {
        RealFs.rename(from, to)
    }
    fn remove(&self, path: &Path) -> cairn_fs::Result<()> {
        RealFs.remove(path)
    }
    fn create_dir_all(&self, dir: &Path) -> cairn_fs::Result<()> {
        RealFs.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> cairn_fs::Result<Vec<String>> {
        RealFs.list(dir)
    }
    fn sync_dir(&self, dir: &Path) -> cairn_fs::Result<()> {
        RealFs.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        RealFs.exists(path)
    }
    fn file_size(&self, path: &Path) -> cairn_fs::Result<u64> {
        RealFs.file_size(path)
    }
    fn lock(&self, path: &Path) -> cairn_fs::Result<FileLock> {
        RealFs.lock(path)
    }
    fn lock_shared(&self, path: &Path) -> cairn_fs::Result<Option<FileLock>> {
        RealFs.lock_shared(path)
    }
}

/// The closing note's figure: a million expired cells, the family's bytes before and after a
/// task. `cargo test --release -p cairn-purger --test ttl_tasks -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: about a minute in release"]
fn a_million_expired_cells_leave_no_bytes_behind() {
    let f = Fixture::new();
    let cf =
        f.db.create_column_family("t1$cf1", CfOptions::default().ttl(TTL).max_versions(3))
            .expect("create family");
    for i in 0..1_000_000u64 {
        cf.put(format!("key{i:08}"), value(i)).expect("put");
    }
    // Settled in the last level, in tables of 64 KiB, as a family that has lived a while.
    cf.compact_range::<&str>(..).expect("compact");
    let tables = cf.tables().expect("tables");
    let bytes: u64 = tables.iter().map(|t| t.bytes).sum();
    let entries: u64 = tables.iter().map(|t| t.entries).sum();
    f.clock.advance(TTL * 2);
    let ttl = f.ttl(enabled());
    ttl.set_tablet_bytes(32 << 20);
    let started = std::time::Instant::now();
    ttl.trigger().expect("trigger");
    ttl.run_until_idle().expect("run");
    let took = started.elapsed();
    let after = cf.tables().expect("tables");
    let history = ttl.history().expect("history");
    let (scanned, expired, over) = (
        total(&history, |r| r.scan_cnt),
        total(&history, |r| r.ttl_del_cnt),
        total(&history, |r| r.max_version_del_cnt),
    );
    println!(
        "before: {} tables, {bytes} bytes, {entries} entries; after: {} tables, {} bytes; \
         task: {} tablets, scan_cnt {}, ttl_del_cnt {}, max_version_del_cnt {}, {:.1?}",
        tables.len(),
        after.len(),
        after.iter().map(|t| t.bytes).sum::<u64>(),
        history.len() - 1,
        scanned,
        expired,
        over,
        took
    );
    assert!(after.is_empty());
    assert_eq!(expired, 1_000_000);
    assert_eq!(cf.iter().expect("iter").count(), 0);
}

/// The layouts a family of `KEYS` keys × 4 versions is laid out in for the counter tests.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// One flush per version, all in level 0.
    Flushed,
    /// Each version flushed in five key-disjoint tables: tablets cut at their starts.
    Chunked,
    /// Two versions settled in the last level in small tables, two more in level 0 over them.
    Settled,
}

const KEYS: u32 = 2_500;

impl Fixture {
    fn laid_out(&self, name: &str, options: CfOptions, layout: Layout) -> ColumnFamily {
        let cf = self
            .db
            .create_column_family(name, options)
            .expect("create family");
        let put = |v: u32, keys: std::ops::Range<u32>| {
            for i in keys {
                cf.put(
                    format!("key{i:06}"),
                    value(u64::from(v) << 32 | u64::from(i)),
                )
                .expect("put");
            }
        };
        for v in 0..4 {
            match layout {
                Layout::Flushed | Layout::Settled => {
                    put(v, 0..KEYS);
                    self.db.flush().expect("flush");
                }
                Layout::Chunked => {
                    for chunk in 0..5 {
                        put(v, chunk * KEYS / 5..(chunk + 1) * KEYS / 5);
                        self.db.flush().expect("flush");
                    }
                }
            }
            if matches!(layout, Layout::Settled) && v == 1 {
                cf.compact_range::<&str>(..).expect("settle two versions");
            }
        }
        cf
    }
}

/// Runs one task over a family laid out as `layout` (expired first if `expire`), in one tablet
/// for `Flushed` and in tablets of 64 KiB for the others, and returns how many tablets it had
/// and its rows in history.
fn count_one_task(options: CfOptions, layout: Layout, expire: bool) -> (usize, Vec<TaskRow>) {
    let f = Fixture::new();
    let cf = f.laid_out("t1$cf1", options, layout);
    if expire {
        f.clock.advance(TTL + Duration::from_secs(1));
    }
    let ttl = f.ttl(enabled());
    if !matches!(layout, Layout::Flushed) {
        ttl.set_tablet_bytes(64 << 10);
    }
    ttl.trigger().expect("trigger");
    let tablets = ttl.tasks().expect("tasks").len() - 1;
    ttl.run_until_idle().expect("run");
    assert_eq!(
        cf.iter().expect("iter").count(),
        if expire { 0 } else { 2_500 }
    );
    (tablets, ttl.history().expect("history"))
}

/// Checks the tablet count a layout gives: one for `Flushed`, several for the others.
fn check_tablets(layout: Layout, tablets: usize) {
    match layout {
        Layout::Flushed => assert_eq!(tablets, 1, "{layout:?}"),
        Layout::Chunked | Layout::Settled => assert!(tablets > 1, "{layout:?}: {tablets}"),
    }
}

#[test]
fn every_version_over_the_limit_counts_once_whatever_the_layout() {
    for layout in [Layout::Flushed, Layout::Chunked, Layout::Settled] {
        let options = CfOptions::default().max_versions(2);
        let (tablets, history) = count_one_task(options, layout, false);
        check_tablets(layout, tablets);
        assert_eq!(
            (
                total(&history, |r| r.max_version_del_cnt),
                total(&history, |r| r.ttl_del_cnt)
            ),
            (5_000, 0),
            "{layout:?}, {tablets} tablets: the two oldest of 2,500 keys: {history:?}"
        );
        if matches!(layout, Layout::Flushed) {
            // Over several tablets a table a step rewrote is read again by the next (module doc).
            assert_eq!(total(&history, |r| r.scan_cnt), 10_000, "{layout:?}");
        }
        let task = tenant(&history);
        assert_eq!(
            (task.max_version_del_cnt, task.ttl_del_cnt, task.scan_cnt),
            (0, 0, 0),
            "{layout:?}: the tenant row counts nothing of its own"
        );
    }
}

#[test]
fn every_expired_cell_counts_once_in_one_column_whatever_the_layout() {
    for layout in [Layout::Flushed, Layout::Chunked, Layout::Settled] {
        let options = CfOptions::default().max_versions(2).ttl(TTL);
        let (tablets, history) = count_one_task(options, layout, true);
        check_tablets(layout, tablets);
        let (over, expired) = (
            total(&history, |r| r.max_version_del_cnt),
            total(&history, |r| r.ttl_del_cnt),
        );
        assert_eq!(
            over + expired,
            10_000,
            "{layout:?}, {tablets} tablets: 10,000 cells, each once: {history:?}"
        );
        assert_eq!(
            (over, expired),
            (5_000, 5_000),
            "{layout:?}: the two oldest over the limit, the two newest expired"
        );
    }
}
