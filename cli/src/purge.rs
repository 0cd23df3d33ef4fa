//! `cairn purge`: the soft-delete tombstone purger over a Cairn database's tables (`DB`)
//! or a MySQL/MariaDB or PostgreSQL database (`--database-url URL`), and `cairn purge demo`,
//! which shows the whole lifecycle on a temporary database and a fast clock.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn::{Db, Options};
use cairn_purger::{
    CUBEMASTER_LOCK, CUBEOPS_LOCK, HardDeleteSetting, PassReport, PurgeConfig, Purger, SqlBackend,
    TABLES_COLUMN_FAMILY, Tables, TablesOptions, TimeZone, cube_master_purge_tables,
    cube_ops_purge_tables,
};
use clap::{Args, Subcommand};

use crate::db_arg::OptDbArg;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
#[command(group(clap::ArgGroup::new("database").args(["db", "db_flag", "database_url"])))]
#[command(mut_arg("db", |a| a.help("The Cairn database directory (must exist), or give --database-url")))]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent command-line switches"
)]
pub struct PurgeArgs {
    #[command(subcommand)]
    demo: Option<PurgeSub>,
    #[command(flatten)]
    db: OptDbArg,
    /// A MySQL/MariaDB (`mysql://user:password@host:3306/db`) or PostgreSQL
    /// (`postgres://user@host:5432/db`) database instead of DB; replicas share the server's
    /// advisory lock.
    #[arg(long)]
    database_url: Option<String>,
    /// YAML file with the `soft_delete_purge` block (and CubeMaster's `common` block).
    #[arg(long, required = true)]
    config: Option<PathBuf>,
    /// Run one pass and exit, instead of the loop.
    #[arg(long)]
    once: bool,
    /// The advisory lock: `cubemaster_tombstone_purge_v1` purges CubeMaster's tables (the
    /// default without --tables), `cubeops_tombstone_purge_v1` CubeOps'; any other name needs
    /// --tables. With --tables it follows from the list, and a component's lock given with the
    /// other component's tables is refused.
    #[arg(long)]
    lock: Option<String>,
    /// Comma-separated tables to purge instead of the lock's list: some of CubeMaster's
    /// (`t_cube_sandbox_spec`, `t_cube_template_replica`, `t_cube_instance_info`,
    /// `t_cube_instance_userdata`; lock `cubemaster_tombstone_purge_v1`) or some of CubeOps'
    /// (`t_agenthub_instance`, `t_agenthub_snapshot`, `t_agenthub_template`; lock
    /// `cubeops_tombstone_purge_v1`), never both. Tables of neither need --lock. The guide
    /// exempts `t_cube_instance_info` and `t_cube_instance_userdata` while the config's
    /// `common.disable_hard_delete` is true: they are left out then even when named here.
    #[arg(long, value_delimiter = ',')]
    tables: Vec<String>,
    /// The zone the application writes zoneless `deleted_at` values in (MySQL `DATETIME`,
    /// PostgreSQL `timestamp`): an IANA name (`America/New_York`) or an offset (`-05:00`).
    /// Overrides the config's `soft_delete_purge.time_zone`.
    #[arg(long, value_name = "ZONE", allow_hyphen_values = true)]
    time_zone: Option<String>,
    /// Stop the loop after this many passes, skipped ones included (default: run until
    /// killed; a killed purger's lock frees itself when its 5-minute lease ends, or on a server
    /// when its connection closes).
    #[arg(long)]
    passes: Option<u64>,
    /// Do not apply pending migrations (as with `CUBE_AUTO_MIGRATION=false`); on a server,
    /// migration 20260731120000 then has to be applied out of band or purges scan tables. A
    /// dry run, or a config whose `enable` is not true, never migrates: it changes nothing.
    #[arg(long)]
    no_migrate: bool,
    /// Create the table layer (the `cairn.tables` column family) in a database that has none;
    /// without it such a database is refused and nothing is written into it. The application's
    /// tables are the application's to create: one the lock names that does not exist yet fails
    /// its purge, and the pass exits 1.
    #[arg(long)]
    init: bool,
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
    /// One JSON document at the end (the days' passes, the audited row) instead of text.
    #[arg(long)]
    json: bool,
}

/// Exit codes: 0 done, 1 a table failed (or the demo's audit found a trace), 2 the database
/// or the engine failed (a server that cannot be reached: with `--once`, or in any pass of a
/// loop bounded by `--passes`), 3 bad arguments or configuration (an unsupported
/// `--database-url` scheme among them).
pub fn run(args: PurgeArgs) -> i32 {
    if let Some(PurgeSub::Demo(demo)) = args.demo {
        // The engine's notes on the compactions the purge sets off would tear the output.
        crate::init_logging_with("cairn=error,warn");
        return match crate::purge_demo::run(demo.rows, !demo.no_progress, demo.json) {
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
    let mut purge_config = match PurgeConfig::from_yaml(&text) {
        Ok(c) => c,
        Err(e) => return crate::bad_args(&format!("{}: {e}", config.display())),
    };
    if let Some(zone) = &args.time_zone {
        match TimeZone::parse(zone) {
            Ok(zone) => purge_config.time_zone = Some(zone),
            Err(e) => return crate::bad_args(&format!("--time-zone: {e}")),
        }
    }
    if args.tables.iter().any(|t| t.trim().is_empty()) {
        return crate::bad_args("--tables names an empty table (a stray comma?)");
    }
    let mut args = args;
    let mut seen = std::collections::HashSet::new();
    args.tables.retain(|t| seen.insert(t.to_ascii_lowercase()));
    let (lock, list) = match table_list(&args, &config, &text) {
        Ok(plan) => plan,
        Err(why) => return crate::bad_args(&why),
    };
    // A dry run and a disabled purger only look: no migration, so no schema changes.
    let look_only = purge_config.dry_run || !purge_config.enable;
    let migrate_now = !args.no_migrate && !look_only;
    if look_only && !args.no_migrate {
        tracing::info!("a dry run or a disabled purger changes nothing: migrations not applied");
    }
    let purger = match (args.db.path(), &args.database_url) {
        (Some(db), None) => match open_tables(db, migrate_now, args.init) {
            Ok(Some(tables)) => Purger::new(tables, &lock, list, purge_config),
            Ok(None) if !purge_config.enable => return disabled(args.once, args.json),
            Ok(None) => {
                let how = if migrate_now {
                    "pass --init to create them"
                } else {
                    "a dry run or --no-migrate never creates them"
                };
                eprintln!(
                    "cairn purge: {} has no purger tables (no column family \
                     {TABLES_COLUMN_FAMILY}); {how}",
                    db.display()
                );
                return 1;
            }
            Err(code) => return code,
        },
        (None, Some(url)) => match SqlBackend::new(url) {
            Ok(backend) => {
                if migrate_now {
                    migrate(&backend, &list());
                }
                Purger::new(backend, &lock, list, purge_config)
            }
            Err(e) => return crate::bad_args(&format!("--database-url: {e}")),
        },
        _ => return crate::bad_args("cairn purge needs DB or --database-url URL"),
    };
    if args.once {
        let result = purger.run_pass();
        print_pass(&result, args.json);
        return exit_code(&result);
    }
    run_loop(&purger, &args)
}

/// The tables of the database at `db`, migrated if `migrate`. A database that has no tables
/// yet is `None` unless `init` (with a migration) asks for them: opening them would create
/// their column family in a database nobody said the purger manages.
///
/// # Errors
/// The exit code, once the reason is printed.
fn open_tables(dir: &Path, migrate: bool, init: bool) -> Result<Option<Tables>, i32> {
    let probe = crate::output::open_read_only(dir)?;
    let has_tables = probe
        .list_column_families()
        .iter()
        .any(|n| n == TABLES_COLUMN_FAMILY);
    drop(probe);
    if !has_tables && (!migrate || !init) {
        return Ok(None);
    }
    let db = Db::open(dir, Options::default().create_if_missing(false))
        .map_err(|e| crate::db_arg::cannot_open(dir, &e))?;
    let options = TablesOptions::default().auto_migration(migrate);
    Tables::open_with(Arc::new(db), &options)
        .map(Some)
        .map_err(|e| crate::output::failed("purge", &e))
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

/// The two components whose purge targets and locks the guide names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Component {
    CubeMaster,
    CubeOps,
}

impl Component {
    fn name(self) -> &'static str {
        match self {
            Self::CubeMaster => "CubeMaster",
            Self::CubeOps => "CubeOps",
        }
    }

    fn lock(self) -> &'static str {
        match self {
            Self::CubeMaster => CUBEMASTER_LOCK,
            Self::CubeOps => CUBEOPS_LOCK,
        }
    }

    /// Every table the component may purge (CubeMaster's instance tables included).
    fn tables(self) -> Vec<String> {
        match self {
            Self::CubeMaster => cube_master_purge_tables(false),
            Self::CubeOps => cube_ops_purge_tables(),
        }
    }

    fn of_lock(lock: &str) -> Option<Self> {
        [Self::CubeMaster, Self::CubeOps]
            .into_iter()
            .find(|c| c.lock() == lock)
    }

    fn of_table(table: &str) -> Option<Self> {
        [Self::CubeMaster, Self::CubeOps]
            .into_iter()
            .find(|c| c.tables().iter().any(|t| t.eq_ignore_ascii_case(table)))
    }
}

/// The lock for `--lock` and `--tables`, and whose tables the list holds (`None`: the tables
/// of neither component). Without `--tables` the lock names the list; with it the list names
/// the lock: one component's tables take that component's lock, a list mixing the two is
/// refused (two purgers under two locks would purge one table at once), and tables of
/// neither need the lock given.
fn resolve_lock(
    lock: Option<&str>,
    tables: &[String],
) -> Result<(String, Option<Component>), String> {
    if tables.is_empty() {
        let lock = lock.unwrap_or(CUBEMASTER_LOCK);
        return match Component::of_lock(lock) {
            Some(component) => Ok((lock.to_owned(), Some(component))),
            None => Err(format!(
                "lock {lock:?} has no table list of its own: give --tables"
            )),
        };
    }
    let of = |component: Component| -> Vec<&str> {
        tables
            .iter()
            .filter(|t| Component::of_table(t) == Some(component))
            .map(String::as_str)
            .collect()
    };
    let (master, ops) = (of(Component::CubeMaster), of(Component::CubeOps));
    let owner = match (master.is_empty(), ops.is_empty()) {
        (false, false) => {
            return Err(format!(
                "--tables mixes CubeMaster's ({}) and CubeOps' ({}) tables, which purge under \
                 two locks: run one purger per component",
                master.join(", "),
                ops.join(", ")
            ));
        }
        (false, true) => Some(Component::CubeMaster),
        (true, false) => Some(Component::CubeOps),
        (true, true) => None,
    };
    if let (Some(owner), Some(given)) = (owner, lock.and_then(Component::of_lock))
        && given != owner
    {
        return Err(format!(
            "--lock {} is {}'s, but --tables names {}'s tables (their lock is {})",
            given.lock(),
            given.name(),
            owner.name(),
            owner.lock()
        ));
    }
    let neither: Vec<&str> = tables
        .iter()
        .filter(|t| Component::of_table(t).is_none())
        .map(String::as_str)
        .collect();
    match (lock, owner) {
        (Some(lock), _) => Ok((lock.to_owned(), owner)),
        (None, Some(owner)) if neither.is_empty() => Ok((owner.lock().to_owned(), Some(owner))),
        (None, _) => Err(format!(
            "--tables names tables of neither CubeMaster nor CubeOps ({}): give --lock",
            neither.join(", ")
        )),
    }
}

/// The lock, and the table list asked for at every pass: `--tables`, or the lock's list.
/// Where the list holds CubeMaster's tables, `disable_hard_delete` is re-read from the config
/// file each pass, so a change on disk counts at the next pass; a re-read that cannot be
/// trusted keeps the last good value (see [`HardDeleteSetting::reload`]).
fn table_list(
    args: &PurgeArgs,
    path: &Path,
    text: &str,
) -> Result<(String, impl Fn() -> Vec<String> + Send + Sync + 'static), String> {
    let (lock, owner) = resolve_lock(args.lock.as_deref(), &args.tables)?;
    let requested = (!args.tables.is_empty()).then(|| args.tables.clone());
    let source = if owner == Some(Component::CubeMaster) {
        let setting = HardDeleteSetting::from_yaml(text).map_err(|e| e.to_string())?;
        if setting.exempts_instance_tables() && !setting.disable_hard_delete {
            tracing::warn!(
                config = %path.display(),
                "common.disable_hard_delete is not set: the instance tables stay out of the purge \
                 until the config says disable_hard_delete: false"
            );
        }
        Source::CubeMaster(CubeMasterTables {
            path: path.to_path_buf(),
            last: Mutex::new(setting),
            requested,
        })
    } else {
        Source::Fixed(requested.unwrap_or_else(cube_ops_purge_tables))
    };
    Ok((lock, move || match &source {
        Source::Fixed(list) => list.clone(),
        Source::CubeMaster(tables) => tables.now(),
    }))
}

enum Source {
    Fixed(Vec<String>),
    CubeMaster(CubeMasterTables),
}

/// CubeMaster's tables as the config file says at this pass.
struct CubeMasterTables {
    path: PathBuf,
    /// The last good reading of `common.disable_hard_delete`.
    last: Mutex<HardDeleteSetting>,
    /// `--tables`, if given: the instance tables in it are still left out while exempt.
    requested: Option<Vec<String>>,
}

impl CubeMasterTables {
    fn now(&self) -> Vec<String> {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match std::fs::read_to_string(&self.path) {
            Ok(text) => {
                let reload = last.reload(&text);
                if let Some(warning) = &reload.warning {
                    tracing::warn!(config = %self.path.display(), "{warning}");
                }
                *last = reload.setting;
            }
            Err(e) => tracing::warn!(
                config = %self.path.display(),
                error = %e,
                "cannot re-read the config; keeping disable_hard_delete: {}",
                last.disable_hard_delete
            ),
        }
        let targets = cube_master_purge_tables(last.exempts_instance_tables());
        let Some(requested) = &self.requested else {
            return targets;
        };
        let exempt: Vec<String> = Component::CubeMaster
            .tables()
            .into_iter()
            .filter(|t| !targets.contains(t))
            .collect();
        let (left_out, kept): (Vec<String>, Vec<String>) = requested
            .iter()
            .cloned()
            .partition(|t| exempt.iter().any(|e| e.eq_ignore_ascii_case(t)));
        if !left_out.is_empty() {
            tracing::warn!(
                ?left_out,
                "exempt unless common.disable_hard_delete says false: not purged"
            );
        }
        kept
    }
}

/// What a purger whose `enable` is not true does: with `--once`, the report of a skipped pass;
/// in the loop, nothing.
fn disabled(once: bool, json: bool) -> i32 {
    if once {
        let report = PassReport {
            skipped: true,
            ..PassReport::default()
        };
        print_pass(&Ok(report), json);
    } else {
        eprintln!("cairn purge: soft_delete_purge.enable is not true; nothing runs");
    }
    0
}

fn run_loop(purger: &Purger, args: &PurgeArgs) -> i32 {
    if !purger.config().enable {
        return disabled(false, args.json);
    }
    let json = args.json;
    let failed = Arc::new(AtomicBool::new(false));
    let any_failure = Arc::clone(&failed);
    let dry_run = purger.config().dry_run;
    let purger = purger.clone().on_table(move |report, error| {
        if error.is_some() {
            any_failure.store(true, Ordering::SeqCst);
        }
        if json {
            match serde_json::to_string(report) {
                Ok(line) => println!("{line}"),
                Err(e) => eprintln!("cannot encode the report: {e}"),
            }
        } else {
            println!("{}", table_line(report, dry_run));
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
        let why = report.skip_reason.as_deref().unwrap_or("no pass ran");
        println!("skipped: {why}");
    }
    for t in &report.tables {
        println!("{}", table_line(t, report.dry_run));
    }
}

/// One table's outcome as a line: eligible (a dry run) or purged, the rows a foreign key kept,
/// and the error that stopped it.
fn table_line(t: &cairn_purger::TableReport, dry_run: bool) -> String {
    let mut line = if dry_run {
        format!("{}: {} eligible", t.table, t.selected)
    } else {
        format!("{}: {} purged", t.table, t.purged)
    };
    if let Some(first) = t.refused.first() {
        let _ = write!(
            line,
            ", {} kept by a foreign key (first id {}: {})",
            t.refused.len(),
            first.id,
            first.reason
        );
    }
    if let Some(e) = &t.error {
        let _ = write!(line, "; failed: {e}");
    }
    line
}

fn exit_code(result: &cairn_purger::Result<PassReport>) -> i32 {
    match result {
        Ok(_) => 0,
        Err(cairn_purger::Error::PassFailed { .. }) => 1,
        Err(_) => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(tables: &[&str]) -> Vec<String> {
        tables.iter().map(|t| (*t).to_owned()).collect()
    }

    #[test]
    fn the_lock_follows_from_the_tables() {
        let master = list(&["t_cube_sandbox_spec", "t_cube_instance_info"]);
        let ops = list(&["t_agenthub_snapshot"]);
        assert_eq!(
            resolve_lock(None, &master),
            Ok((CUBEMASTER_LOCK.to_owned(), Some(Component::CubeMaster)))
        );
        assert_eq!(
            resolve_lock(None, &ops),
            Ok((CUBEOPS_LOCK.to_owned(), Some(Component::CubeOps)))
        );
        assert_eq!(
            resolve_lock(None, &[]),
            Ok((CUBEMASTER_LOCK.to_owned(), Some(Component::CubeMaster)))
        );
        assert_eq!(
            resolve_lock(Some(CUBEOPS_LOCK), &[]),
            Ok((CUBEOPS_LOCK.to_owned(), Some(Component::CubeOps)))
        );
        // A lock of one's own over one component's tables (tests, a second deployment).
        assert_eq!(
            resolve_lock(Some("mine"), &ops),
            Ok(("mine".to_owned(), Some(Component::CubeOps)))
        );
        assert_eq!(
            resolve_lock(Some("mine"), &list(&["t_other"])),
            Ok(("mine".to_owned(), None))
        );
    }

    #[test]
    fn mixed_or_mislocked_or_unowned_lists_are_refused() {
        let mixed = list(&["t_cube_sandbox_spec", "t_agenthub_instance"]);
        for lock in [None, Some(CUBEMASTER_LOCK), Some("mine")] {
            let refused = resolve_lock(lock, &mixed);
            assert!(
                refused.as_ref().is_err_and(|e| e.contains("mixes")),
                "{lock:?}: {refused:?}"
            );
        }
        let wrong = resolve_lock(Some(CUBEMASTER_LOCK), &list(&["t_agenthub_instance"]));
        assert!(wrong.is_err(), "{wrong:?}");
        let wrong = resolve_lock(Some(CUBEOPS_LOCK), &list(&["t_cube_sandbox_spec"]));
        assert!(wrong.is_err(), "{wrong:?}");
        let unowned = resolve_lock(None, &list(&["t_cube_sandbox_spec", "t_other"]));
        assert!(
            unowned.as_ref().is_err_and(|e| e.contains("t_other")),
            "{unowned:?}"
        );
        assert!(resolve_lock(Some("mine"), &[]).is_err());
    }

    /// The list a loop asks for at each pass, with the config file rewritten in between.
    #[test]
    fn a_reread_config_that_cannot_be_trusted_keeps_the_instance_tables_exempt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("purge.yaml");
        let good = "soft_delete_purge:\n  enable: true\n  dry_run: true\ncommon:\n  \
                    disable_hard_delete: true\n";
        let exempt = ["t_cube_instance_info", "t_cube_instance_userdata"];
        for tables in [vec![], list(&exempt)] {
            std::fs::write(&path, good).expect("write");
            let source = CubeMasterTables {
                path: path.clone(),
                last: Mutex::new(HardDeleteSetting::from_yaml(good).expect("valid")),
                requested: (!tables.is_empty()).then(|| tables.clone()),
            };
            let cut = good.find("common:").expect("common");
            for (what, text) in [
                ("empty", ""),
                ("truncated mid-block", &good[..good.len() - 10]),
                ("without the common block", &good[..cut]),
                ("invalid YAML", "common: [\n"),
            ] {
                std::fs::write(&path, text).expect("write");
                let now = source.now();
                for table in exempt {
                    assert!(
                        !now.iter().any(|t| t == table),
                        "{what} (--tables {tables:?}): {table} in {now:?}"
                    );
                }
            }
            std::fs::remove_file(&path).expect("remove");
            assert!(!source.now().iter().any(|t| t == exempt[0]), "file gone");
            std::fs::write(&path, good.replace("delete: true", "delete: false")).expect("write");
            let now = source.now();
            for table in exempt {
                assert!(now.iter().any(|t| t == table), "false: {table} in {now:?}");
            }
        }
    }
}
