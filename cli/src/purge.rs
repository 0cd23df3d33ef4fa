//! `cairn purge`: the soft-delete tombstone purger over a Cairn database's tables (`--db DIR`)
//! or a MySQL/MariaDB or PostgreSQL database (`--database-url URL`), and `cairn purge demo`,
//! which shows the whole lifecycle on a temporary database and a fast clock.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn::{Db, Options};
use cairn_purger::{
    CUBEMASTER_LOCK, CUBEOPS_LOCK, PassReport, PurgeConfig, Purger, SqlBackend, Tables,
    TablesOptions, cube_master_purge_tables, cube_ops_purge_tables, disable_hard_delete_from_yaml,
};
use clap::{Args, Subcommand};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
#[command(group(clap::ArgGroup::new("database").args(["db", "database_url"]).required(true)))]
pub struct PurgeArgs {
    #[command(subcommand)]
    demo: Option<PurgeSub>,
    /// Cairn database directory (must exist).
    #[arg(long)]
    db: Option<PathBuf>,
    /// A MySQL/MariaDB (`mysql://user:password@host:3306/db`) or PostgreSQL
    /// (`postgres://user@host:5432/db`) database instead of --db; replicas share the server's
    /// advisory lock.
    #[arg(long)]
    database_url: Option<String>,
    /// YAML file with the `soft_delete_purge` block (and CubeMaster's `common` block).
    #[arg(long, required = true)]
    config: Option<PathBuf>,
    /// Run one pass and exit, instead of the loop.
    #[arg(long)]
    once: bool,
    /// The advisory lock: `cubemaster_tombstone_purge_v1` purges CubeMaster's tables,
    /// `cubeops_tombstone_purge_v1` CubeOps'; any other name needs --tables.
    #[arg(long, default_value = CUBEMASTER_LOCK)]
    lock: String,
    /// Comma-separated tables to purge instead of the lock's list.
    #[arg(long, value_delimiter = ',')]
    tables: Vec<String>,
    /// Stop the loop after this many passes, skipped ones included (default: run until
    /// killed; a killed purger's lock frees itself when its 5-minute lease ends, or on a server
    /// when its connection closes).
    #[arg(long)]
    passes: Option<u64>,
    /// Do not apply pending migrations (as with `CUBE_AUTO_MIGRATION=false`); on a server,
    /// migration 20260731120000 then has to be applied out of band or purges scan tables.
    #[arg(long)]
    no_migrate: bool,
    /// Print JSON lines: with --once the pass's report, in the loop one per table and pass.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum PurgeSub {
    /// CubeMaster's tables in a temporary database, rows soft-deleted at various ages, passes
    /// on a fast clock, and an audit showing a purged row's bytes gone.
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Rows per table.
    #[arg(long, default_value_t = 20_000)]
    rows: u64,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
}

/// Exit codes: 0 done, 1 a table failed (or the demo's audit found a trace), 2 the database
/// or the engine failed (a server that cannot be reached: with `--once`, or in any pass of a
/// loop bounded by `--passes`), 3 bad arguments or configuration (an unsupported
/// `--database-url` scheme among them).
pub fn run(args: PurgeArgs) -> i32 {
    if let Some(PurgeSub::Demo(demo)) = args.demo {
        // The engine's notes on the compactions the purge sets off would tear the output.
        crate::init_logging_with("cairn=error,warn");
        return match crate::purge_demo::run(demo.rows, !demo.no_progress) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("cairn purge demo: {e}");
                2
            }
        };
    }
    crate::init_logging_with("info");
    let Some(config) = args.config.clone() else {
        return crate::bad_args("cairn purge needs --config FILE");
    };
    let text = match std::fs::read_to_string(&config) {
        Ok(text) => text,
        Err(e) => return crate::bad_args(&format!("cannot read {}: {e}", config.display())),
    };
    let purge_config = match PurgeConfig::from_yaml(&text) {
        Ok(c) => c,
        Err(e) => return crate::bad_args(&format!("{}: {e}", config.display())),
    };
    let list = match table_list(&args, &config, &text) {
        Ok(list) => list,
        Err(why) => return crate::bad_args(&why),
    };
    let purger = match (&args.db, &args.database_url) {
        (Some(db), None) => match open_tables(db, !args.no_migrate) {
            Ok(tables) => Purger::new(tables, &args.lock, list, purge_config),
            Err(e) => {
                eprintln!("cairn purge: cannot open {}: {e}", db.display());
                return 2;
            }
        },
        (None, Some(url)) => match SqlBackend::new(url) {
            Ok(backend) => {
                if !args.no_migrate && purge_config.enable {
                    migrate(&backend, &list());
                }
                Purger::new(backend, &args.lock, list, purge_config)
            }
            Err(e) => return crate::bad_args(&format!("--database-url: {e}")),
        },
        _ => return crate::bad_args("cairn purge needs --db DIR or --database-url URL"),
    };
    if args.once {
        let result = purger.run_pass();
        print_pass(&result, args.json);
        return exit_code(&result);
    }
    run_loop(&purger, &args)
}

fn open_tables(db: &Path, migrate: bool) -> cairn_purger::Result<Tables> {
    let db = Db::open(db, Options::default().create_if_missing(false))?;
    let options = TablesOptions::default().auto_migration(migrate);
    Tables::open_with(Arc::new(db), &options)
}

/// Migration 20260731120000 on the server's purge targets. A failure (the server is down)
/// is logged and the purger starts anyway: its passes retry the connection each tick, and
/// without the index they scan.
fn migrate(backend: &SqlBackend, tables: &[String]) {
    match backend.migrate(tables) {
        Ok(indexed) if indexed.is_empty() => {}
        Ok(indexed) => tracing::info!(?indexed, "applied migration 20260731120000"),
        Err(e) => tracing::warn!(
            error = %e,
            "migration 20260731120000 not applied; purges scan tables until it is"
        ),
    }
}

/// The table list, asked for at every pass: `--tables`, or the lock's list. CubeMaster's is
/// rebuilt from the config file each pass, so a `disable_hard_delete` changed on disk counts
/// at the next pass.
fn table_list(
    args: &PurgeArgs,
    path: &Path,
    text: &str,
) -> Result<impl Fn() -> Vec<String> + Send + Sync + 'static, String> {
    enum Source {
        Fixed(Vec<String>),
        CubeMaster { path: PathBuf, last: Mutex<bool> },
    }
    let source = if !args.tables.is_empty() {
        Source::Fixed(args.tables.clone())
    } else if args.lock == CUBEOPS_LOCK {
        Source::Fixed(cube_ops_purge_tables())
    } else if args.lock == CUBEMASTER_LOCK {
        let disable = disable_hard_delete_from_yaml(text).map_err(|e| e.to_string())?;
        Source::CubeMaster {
            path: path.to_path_buf(),
            last: Mutex::new(disable),
        }
    } else {
        return Err(format!(
            "lock {:?} has no table list of its own: give --tables",
            args.lock
        ));
    };
    Ok(move || match &source {
        Source::Fixed(list) => list.clone(),
        Source::CubeMaster { path, last } => {
            let mut last = last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|t| disable_hard_delete_from_yaml(&t).map_err(|e| e.to_string()))
            {
                Ok(disable) => *last = disable,
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "re-reading disable_hard_delete failed; keeping the last value"
                    );
                }
            }
            cube_master_purge_tables(*last)
        }
    })
}

fn run_loop(purger: &Purger, args: &PurgeArgs) -> i32 {
    if !purger.config().enable {
        eprintln!("cairn purge: soft_delete_purge.enable is not true; nothing runs");
        return 0;
    }
    let json = args.json;
    let failed = Arc::new(AtomicBool::new(false));
    let any_failure = Arc::clone(&failed);
    let purger = purger.clone().on_purge(move |table, purged, error| {
        if error.is_some() {
            any_failure.store(true, Ordering::SeqCst);
        }
        let error = error.map(ToString::to_string);
        if json {
            let line = serde_json::json!({ "table": table, "purged": purged, "error": error });
            println!("{line}");
        } else {
            match error {
                Some(e) => println!("{table}: failed after {purged} purged: {e}"),
                None => println!("{table}: {purged} purged"),
            }
        }
    });
    let running = match purger.start() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cairn purge: {e}");
            return 2;
        }
    };
    while args.passes.is_none_or(|n| running.passes() < n) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let failed_passes = running.failed_passes();
    if let Err(e) = running.stop() {
        eprintln!("cairn purge: {e}");
        return 2;
    }
    if failed.load(Ordering::SeqCst) {
        1
    } else if failed_passes > 0 {
        // Whole passes failed without a table failing: the lock or the database.
        eprintln!("cairn purge: {failed_passes} passes failed (see the log)");
        2
    } else {
        0
    }
}

fn print_pass(result: &cairn_purger::Result<PassReport>, json: bool) {
    let report = match result {
        Ok(report) => report,
        Err(cairn_purger::Error::PassFailed { report, .. }) => report,
        Err(e) => {
            eprintln!("cairn purge: {e}");
            return;
        }
    };
    if json {
        match serde_json::to_string(report) {
            Ok(line) => println!("{line}"),
            Err(e) => eprintln!("cannot encode the report: {e}"),
        }
        return;
    }
    if report.skipped {
        println!("skipped: disabled, or another replica holds the lock");
    }
    for t in &report.tables {
        let what = if report.dry_run { "eligible" } else { "purged" };
        let count = if report.dry_run { t.selected } else { t.purged };
        match &t.error {
            Some(e) => println!("{}: failed: {e}", t.table),
            None => println!("{}: {count} {what}", t.table),
        }
    }
}

fn exit_code(result: &cairn_purger::Result<PassReport>) -> i32 {
    match result {
        Ok(_) => 0,
        Err(cairn_purger::Error::PassFailed { .. }) => 1,
        Err(_) => 2,
    }
}
