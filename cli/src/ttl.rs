//! `cairn ttl`: the TTL task manager of a database, as OceanBase's `ALTER SYSTEM TRIGGER |
//! SUSPEND | RESUME | CANCEL TTL` and its `DBA_OB_KV_TTL_TASKS` / `_HISTORY` views.
//!
//! `status` and `history` open the database read-only and read the task tables as they are (no
//! migration, nothing created), so they run beside a stopped service without changing a byte. The
//! commands first read the task tables the same way and refuse there (`NO_TASK_RUNNING`,
//! `CMD_NOT_ALLOWED`) without writing anything; only a command that will be carried out opens the
//! database for writing (it must not be open elsewhere), and even then it applies none of the
//! table layer's pending migrations: those are the purger's to apply. Since the process that holds the database is the one that runs its tasks,
//! `trigger`, `resume` and `run` run the task to the end here (with progress on stderr) unless
//! `--no-wait` leaves it for the service's `TtlTasks::start` to run.
//!
//! The commands open the database with the default options: the system clock, no compaction
//! filter. Expiry is judged against that clock, so run them only on a database whose service uses
//! the system clock too; a service with a clock of its own triggers its tasks through the API.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use cairn::{Db, Options};
use cairn_purger::{
    TABLES_COLUMN_FAMILY, Tables, TablesOptions, TaskRow, TtlCommand, TtlError, TtlSettings,
    TtlTasks,
};
use clap::{Args, ValueEnum};

use crate::db_arg::{self, DbArg};

#[derive(Debug, Args)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent command-line switches"
)]
pub struct TtlArgs {
    /// What to do.
    action: Action,
    #[command(flatten)]
    db: DbArg,
    /// Print the rows as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Worker threads running tablet tasks (`ttl_thread_score`; 1 to 64).
    #[arg(long, default_value_t = 2, value_parser = crate::output::parse_threads)]
    threads: usize,
    /// With `trigger` or `resume`: record the change and exit; the service runs the task.
    #[arg(long)]
    no_wait: bool,
    /// No progress line on stderr.
    #[arg(long)]
    no_progress: bool,
    /// Create the table layer (the `cairn.tables` column family) the task tables live in, in a
    /// database that has none; without it such a database is refused and nothing is written.
    #[arg(long)]
    init: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Action {
    /// The current task, as `DBA_OB_KV_TTL_TASKS` shows it (read-only).
    Status,
    /// Start a task now and, unless --no-wait, run it to the end.
    Trigger,
    /// Suspend the active task.
    Suspend,
    /// Resume a suspended task and, unless --no-wait, run it to the end.
    Resume,
    /// Cancel the active task; it moves to history.
    Cancel,
    /// Run the active task to the end here (one a killed `trigger` left, say).
    Run,
    /// Finished and canceled tasks, as `DBA_OB_KV_TTL_TASK_HISTORY` shows them (read-only).
    History,
}

/// Exit codes: 0 done, 1 the command was refused (`CMD_NOT_ALLOWED`, `NO_TASK_RUNNING`, a
/// database without the table layer and no `--init`) or a tablet task failed (its `RET_CODE`
/// says why), 2 the database or the engine failed, 3 bad arguments, 4 no database, 5 locked.
pub fn run(args: &TtlArgs) -> i32 {
    // The same logs with or without the progress line: they are written above it, never on it.
    crate::init_logging_with("cairn=error,info");
    if args.init && args.action != Action::Trigger {
        return crate::bad_args("--init goes with `trigger`, the one command that creates tables");
    }
    if let Err(code) = db_arg::check_database(args.db.path(), "") {
        return code;
    }
    let result = match args.action {
        Action::Status | Action::History => show(args),
        // The others find no task there and refuse before writing.
        Action::Trigger => match has_table_layer(args) {
            Ok(false) if !args.init => {
                eprintln!(
                    "cairn ttl: {}: no table layer (no column family {TABLES_COLUMN_FAMILY}), so \
                     no TTL tasks; `--init` creates it, and nothing was written",
                    args.db.path().display()
                );
                return 1;
            }
            Ok(_) => command(args),
            Err(e) => Err(e),
        },
        _ => command(args),
    };
    match result {
        Ok(true) => 0,
        Ok(false) => {
            eprintln!("cairn ttl: a tablet task failed; its RET_CODE says why");
            1
        }
        Err(e @ (TtlError::CmdNotAllowed | TtlError::NoTaskRunning)) => {
            eprintln!("cairn ttl: {e}");
            1
        }
        Err(TtlError::Tables(cairn_purger::Error::Engine(
            e @ cairn::Error::Io(cairn_fs::Error::Locked { .. }),
        ))) => db_arg::cannot_open(args.db.path(), &e),
        Err(e) => {
            eprintln!("cairn ttl: {}: {e}", args.db.path().display());
            2
        }
    }
}

/// `status` and `history`, from a read-only open. True (nothing failed) always.
fn show(args: &TtlArgs) -> Result<bool, TtlError> {
    let (tasks, history) = views(args)?;
    let rows = if args.action == Action::Status {
        tasks
    } else {
        history
    };
    print_rows(&rows, args.json);
    Ok(true)
}

/// `trigger`, `suspend`, `resume`, `cancel` and `run`, then the rows the command left. False if
/// a tablet task of the task shown failed.
fn command(args: &TtlArgs) -> Result<bool, TtlError> {
    // Refused from a read-only look, so a refusal writes nothing; the command checks again
    // once the database is open for writing.
    let (tasks, _) = views(args)?;
    match args.action {
        Action::Trigger => TtlCommand::Trigger.check(&tasks)?,
        Action::Suspend => TtlCommand::Suspend.check(&tasks)?,
        Action::Resume => TtlCommand::Resume.check(&tasks)?,
        Action::Cancel => TtlCommand::Cancel.check(&tasks)?,
        // A launch a crash cut short is no task (the writable open would roll it back: a
        // write), as `TtlCommand::check` counts it.
        Action::Run
            if TtlCommand::Suspend.check(&tasks).is_err()
                && TtlCommand::Resume.check(&tasks).is_err() =>
        {
            return Err(TtlError::NoTaskRunning);
        }
        Action::Run | Action::Status | Action::History => {}
    }
    let db = Arc::new(Db::open(
        args.db.path(),
        Options::default().create_if_missing(false),
    )?);
    let ttl = open(db, args.threads)?;
    match args.action {
        Action::Trigger => drop(ttl.trigger()?),
        Action::Suspend => ttl.suspend()?,
        Action::Resume => ttl.resume()?,
        Action::Cancel => ttl.cancel()?,
        Action::Run => {
            if ttl.tasks()?.is_empty() {
                return Err(TtlError::NoTaskRunning);
            }
        }
        Action::Status | Action::History => {}
    }
    let runs = matches!(args.action, Action::Trigger | Action::Resume | Action::Run);
    if runs && !args.no_wait {
        run_with_progress(&ttl, !args.no_progress)?;
    }
    let tasks = ttl.tasks()?;
    let rows = if tasks.is_empty() {
        // Done or canceled: show the task as history has it.
        let history = ttl.history()?;
        let last = history.iter().map(|r| r.task_id).max();
        history
            .into_iter()
            .filter(|r| Some(r.task_id) == last)
            .collect()
    } else {
        tasks
    };
    print_rows(&rows, args.json);
    Ok(rows.iter().all(|r| !r.ret_code.starts_with("ERROR")))
}

/// Whether the database has the table layer the task tables live in (read-only).
fn has_table_layer(args: &TtlArgs) -> Result<bool, TtlError> {
    let db = Db::open_read_only(args.db.path(), Options::default())?;
    Ok(db
        .list_column_families()
        .iter()
        .any(|n| n == TABLES_COLUMN_FAMILY))
}

/// The current tasks and the history, from a read-only open that migrates and creates nothing:
/// empty if the table layer or the task tables were never created.
fn views(args: &TtlArgs) -> Result<(Vec<TaskRow>, Vec<TaskRow>), TtlError> {
    let db = Arc::new(Db::open_read_only(args.db.path(), Options::default())?);
    let has_tables = db
        .list_column_families()
        .iter()
        .any(|n| n == TABLES_COLUMN_FAMILY);
    if !has_tables {
        return Ok((Vec::new(), Vec::new()));
    }
    TtlTasks::views(&Tables::open_with(db, &as_they_are())?)
}

/// The table layer as it is: its pending migrations are the purger's to apply.
fn as_they_are() -> TablesOptions {
    TablesOptions::default().auto_migration(false)
}

fn open(db: Arc<Db>, threads: usize) -> Result<TtlTasks, TtlError> {
    let tables = Tables::open_with(db, &as_they_are())?;
    let settings = TtlSettings {
        enable_kv_ttl: true,
        ttl_thread_score: threads,
        ..TtlSettings::default()
    };
    TtlTasks::open(tables, settings)
}

fn run_with_progress(ttl: &TtlTasks, progress: bool) -> Result<(), TtlError> {
    let tablets = ttl.tasks()?.iter().filter(|r| !r.is_tenant()).count();
    let bar = crate::progress::bar_if(progress, u64::try_from(tablets).unwrap_or(u64::MAX));
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed:>4} [{bar:30}] {pos}/{len} tablets, {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let steps_bar = bar.clone();
    ttl.on_step(move |_, row| {
        if row.status.is_done() {
            steps_bar.inc(1);
        }
        steps_bar.set_message(format!(
            "{} scanned in {}#{}",
            row.scan_cnt,
            row.table_name.as_deref().unwrap_or("?"),
            row.tablet_id
        ));
    });
    bar.enable_steady_tick(Duration::from_millis(200));
    let result = ttl.run_until_idle();
    bar.finish_and_clear();
    result
}

fn print_rows(rows: &[TaskRow], json: bool) {
    if json {
        crate::output::print_json(&rows);
        return;
    }
    let header = [
        "TABLE_NAME",
        "TABLE_ID",
        "TABLET_ID",
        "TASK_ID",
        "START_TIME",
        "END_TIME",
        "TRIGGER_TYPE",
        "STATUS",
        "TTL_DEL_CNT",
        "MAX_VERSION_DEL_CNT",
        "SCAN_CNT",
        "RET_CODE",
    ];
    let cells: Vec<Vec<String>> = rows.iter().map(cells_of).collect();
    crate::output::print_table(&header, &cells);
    println!("{}", crate::output::count(rows.len(), "row"));
}

fn cells_of(r: &TaskRow) -> Vec<String> {
    let time = |ms: u64| {
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
    };
    vec![
        r.table_name.clone().unwrap_or_else(|| "NULL".to_owned()),
        r.table_id.to_string(),
        r.tablet_id.to_string(),
        r.task_id.to_string(),
        time(r.start_time),
        time(r.end_time),
        r.trigger_type.to_string(),
        r.status.to_string(),
        r.ttl_del_cnt.to_string(),
        r.max_version_del_cnt.to_string(),
        r.scan_cnt.to_string(),
        r.ret_code.clone(),
    ]
}
