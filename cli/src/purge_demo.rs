//! `cairn purge demo`: CubeMaster's tables in a temporary database, rows soft-deleted at various
//! ages, one purge pass per simulated day, and an audit of one purged row: traces right after
//! its purge, none once the grace period and the delete persistence deadline have passed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use cairn::{CfOptions, ColumnFamily, Db, ManualClock, Options};
use cairn_purger::{
    CUBEMASTER_LOCK, ColumnType, MAX_PER_PASS, PurgeConfig, Purger, Result, Row, Schema, Table,
    Tables, TablesOptions, Value, cube_master_purge_tables,
};

const DAY: Duration = Duration::from_secs(24 * 3600);
const GRACE: Duration = Duration::from_secs(60);
const DEADLINE: Duration = Duration::from_secs(3600);

/// What the demo saw, for `--json`.
#[derive(Debug, Default, Serialize)]
struct DemoView {
    rows_per_table: u64,
    tables: Vec<String>,
    retention_ms: u64,
    retention: String,
    max_per_pass: u64,
    days: Vec<DayView>,
    audited: AuditedView,
    passed: bool,
}

/// One simulated day's pass.
#[derive(Debug, Default, Serialize)]
struct DayView {
    day: u32,
    purged: u64,
    by_table: BTreeMap<String, u64>,
}

/// The row the demo follows to its erasure.
#[derive(Debug, Default, Serialize)]
struct AuditedView {
    table: String,
    id: u64,
    keys: usize,
    purged_on_day: Option<u32>,
    traces_when_purged: Option<usize>,
    grace_ms: u64,
    deadline_ms: u64,
    traces_after_grace_and_deadline: usize,
}

/// Runs the demo; the exit code is 1 if the audited row was not purged or left a trace. With
/// `json`, one JSON document on stdout instead of the lines of text.
pub fn run(rows: u64, progress: bool, json: bool) -> Result<i32> {
    if rows < 14 {
        eprintln!("cairn purge demo: --rows must be at least 14");
        return Ok(3);
    }
    let dir = tempfile::tempdir()?;
    let clock = Arc::new(ManualClock::new(1_767_225_600_000));
    let options = Options::default()
        .clock(clock.clone())
        .delete_persistence_deadline(DEADLINE);
    let tables = Tables::open_with(
        Arc::new(Db::open(dir.path(), options)?),
        &TablesOptions::default().cf_options(CfOptions::default().tombstone_grace(GRACE)),
    )?;
    let demo = Demo {
        tables,
        clock,
        names: cube_master_purge_tables(false),
        progress,
        json,
    };
    let audited = demo.fill(rows)?;
    let mut view = demo.purge_daily(rows, &audited)?;
    let left = demo.erase(&audited.keys)?;
    let gone = view.audited.purged_on_day.is_some();
    view.audited.traces_after_grace_and_deadline = left;
    view.passed = gone && left == 0;
    if json {
        crate::output::print_json(&view);
    } else {
        println!(
            "row {}: purged {gone}; after grace ({}) and the delete persistence deadline ({}), \
             audit_key finds {}",
            audited.id,
            go_duration(GRACE),
            go_duration(DEADLINE),
            crate::output::count(left, "trace")
        );
    }
    Ok(i32::from(!view.passed))
}

struct Demo {
    tables: Tables,
    clock: Arc<ManualClock>,
    names: Vec<String>,
    progress: bool,
    /// JSON at the end instead of lines of text on the way.
    json: bool,
}

/// The row the demo follows: one of the oldest soft-deleted rows of the first table, and every
/// engine key it had.
struct Audited {
    table: Table,
    id: u64,
    keys: Vec<Vec<u8>>,
}

impl Demo {
    /// Creates the tables and fills each with `rows` rows, 3 in 4 soft-deleted 0 to 13 days
    /// ago.
    fn fill(&self, rows: u64) -> Result<Audited> {
        let progress = Progress::new(
            self.progress,
            rows * self.names.len() as u64,
            "filling",
            self.json,
        );
        let mut audited = None;
        for name in &self.names {
            let table = self.tables.create_table(
                Schema::new(name.as_str())
                    .column("name", ColumnType::Text)
                    .nullable("spec", ColumnType::Text)
                    .unique(format!("uk_{name}_name"), &["name"])
                    .soft_delete(),
            )?;
            for i in 0..rows {
                let age = (i % 14) * ms(DAY) + 1;
                let deleted_at = (i % 4 != 3).then(|| self.clock.now_ms() - age);
                let row = Row::new()
                    .set("name", format!("{name}-{i}"))
                    .set("spec", format!("demo spec {i}"))
                    .set(
                        "deleted_at",
                        deleted_at.map_or(Value::Null, Value::Timestamp),
                    );
                let id = table.insert(row)?;
                if audited.is_none() && i == 13 {
                    let keys = table.unscoped().engine_keys(id)?.unwrap_or_default();
                    audited = Some(Audited {
                        table: table.clone(),
                        id,
                        keys,
                    });
                }
                progress.add(1);
            }
        }
        progress.finish();
        audited.ok_or_else(|| cairn_purger::Error::InvalidArgument("no row to audit".into()))
    }

    /// One pass per simulated day, until every soft-deleted row has aged past retention and
    /// gone: the backlog of old rows drains at `MAX_PER_PASS` a table, younger rows join it as
    /// they age. Returns what each day purged and when the audited row went.
    fn purge_daily(&self, rows: u64, audited: &Audited) -> Result<DemoView> {
        let config = PurgeConfig {
            enable: true,
            ..PurgeConfig::default()
        };
        let purger = Purger::new(
            self.tables.clone(),
            CUBEMASTER_LOCK,
            || cube_master_purge_tables(false),
            config,
        );
        let mut view = DemoView {
            rows_per_table: rows,
            tables: self.names.clone(),
            retention_ms: ms(config.retention),
            retention: go_duration(config.retention),
            max_per_pass: MAX_PER_PASS,
            audited: AuditedView {
                table: audited.table.name().to_owned(),
                id: audited.id,
                keys: audited.keys.len(),
                grace_ms: ms(GRACE),
                deadline_ms: ms(DEADLINE),
                ..AuditedView::default()
            },
            ..DemoView::default()
        };
        if !self.json {
            println!(
                "{rows} rows in each of {} tables, 3 in 4 soft-deleted 0 to 13 days ago; \
                 retention {}, at most {MAX_PER_PASS} rows per table and pass; one pass a day on \
                 a fast clock",
                self.names.len(),
                view.retention,
            );
        }
        let backlog = self.names.len() as u64 * (rows - rows.div_ceil(4));
        let progress = Progress::new(self.progress, backlog, "purging", self.json);
        for day in 1..=30 {
            if self.soft_deleted()? == 0 {
                break;
            }
            let report = purger.run_pass()?;
            let per_table: Vec<String> = report
                .tables
                .iter()
                .map(|t| format!("{} {}", t.table.trim_start_matches("t_cube_"), t.purged))
                .collect();
            let day_total = report.purged();
            progress.println(&format!(
                "day {day:>2}: purged {day_total:>5}  ({})",
                per_table.join(", ")
            ));
            progress.add(day_total);
            view.days.push(DayView {
                day,
                purged: day_total,
                by_table: report
                    .tables
                    .iter()
                    .map(|t| (t.table.clone(), t.purged))
                    .collect(),
            });
            if view.audited.purged_on_day.is_none()
                && audited.table.unscoped().get(audited.id)?.is_none()
            {
                let left = traces(self.tables.column_family(), &audited.keys)?;
                view.audited.purged_on_day = Some(day);
                view.audited.traces_when_purged = Some(left);
                progress.println(&format!(
                    "  row {} of {} went in this pass; audit_key finds {} of its {} \
                     (versions and tombstones still in logs and tables)",
                    audited.id,
                    audited.table.name(),
                    crate::output::count(left, "trace"),
                    crate::output::count(audited.keys.len(), "key")
                ));
            }
            self.clock.advance(DAY);
        }
        progress.finish();
        Ok(view)
    }

    fn soft_deleted(&self) -> Result<u64> {
        let mut n = 0;
        for name in &self.names {
            let t = self.tables.table(name)?;
            n += t.unscoped().count()? - t.count()?;
        }
        Ok(n)
    }

    /// Lets grace and the deadline pass with background work running; the traces left.
    fn erase(&self, keys: &[Vec<u8>]) -> Result<usize> {
        let wait = GRACE + DEADLINE + Duration::from_secs(8);
        for _ in 0..16 {
            self.clock.advance(wait / 16);
            self.tables.db().wait_for_background_work()?;
        }
        traces(self.tables.column_family(), keys)
    }
}

fn traces(cf: &ColumnFamily, keys: &[Vec<u8>]) -> Result<usize> {
    let mut n = 0;
    for key in keys {
        n += cf.audit_key(key)?.len();
    }
    Ok(n)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `168h`, `1h`, `60s`: the way the config file writes durations.
fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// A progress bar on stderr, or nothing; with `quiet` (JSON on stdout), no lines of text.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    quiet: bool,
}

impl Progress {
    fn new(show: bool, total: u64, what: &str, quiet: bool) -> Self {
        let bar = show.then(|| {
            let bar = crate::progress::bar(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{msg:8} {bar:40} {pos}/{len} rows")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(what.to_owned());
            bar
        });
        Self { bar, quiet }
    }

    fn add(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
    }

    /// Prints a line on stdout above the bar, without tearing it (none when quiet).
    fn println(&self, line: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(bar) => bar.suspend(|| println!("{line}")),
            None => println!("{line}"),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
