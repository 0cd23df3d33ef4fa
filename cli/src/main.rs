//! `cairn`: stress and crash-test storage engines, starting with Cairn, and look inside a
//! Cairn database: what is on disk, why deleted data is still there, where a key still lies.
//!
//! Exit codes: 0 pass (or done), 1 a verification failed (for `purge`, a table failed; for
//! `get`, no value; for `audit`, traces remain), 2 the engine failed or the database could not
//! be opened, 3 bad arguments or configuration.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cairn_stress::CrashConfig;
use cairn_stress::{Limit, OpWeights, StressConfig, StressError};
use clap::{Args, Parser, Subcommand};

mod cf;
mod compact;
mod dump;
mod explain;
mod inspect;
mod kv;
mod output;
mod plot;
mod purge;
mod purge_demo;
mod ttl;
mod verify;

#[derive(Debug, Parser)]
#[command(
    name = "cairn",
    version,
    about = "Stress and crash-test Cairn, an LSM engine where deletion is done right, and look inside its databases",
    after_help = "Exit codes: 0 done, 1 a check failed or the answer is no (get: no value, audit: traces remain), \
                  2 the engine failed or the database could not be opened, 3 bad arguments. \
                  Durations read as 20s, 10m, 1h or 500ms."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Random concurrent operations with every read verified; 60 s on a temporary database by default.
    Stress(StressArgs),
    /// Kill -9 and power-loss crash loops with full verification after each crash.
    Crashtest(CrashArgs),
    /// The soft-delete tombstone purger over a database's tables; `purge demo` shows it end to end.
    Purge(purge::PurgeArgs),
    /// TTL tasks: status|trigger|suspend|resume|cancel|history of a database's expiry reclaiming.
    Ttl(ttl::TtlArgs),
    /// What is on disk: one table file, the MANIFEST's edits, or the levels of each column family.
    Inspect(inspect::InspectArgs),
    /// Why each tombstone in a range is still kept, grouped by reason (read-only).
    Explain(explain::ExplainArgs),
    /// Every place a key still lies; exits 0 only when nothing remains (read-only).
    Audit(explain::AuditArgs),
    /// The value of one key (read-only; exits 1 when it has none).
    Get(kv::GetArgs),
    /// Sets one key (the service must be stopped); `--ttl 1h` gives the cell a lifetime.
    Put(kv::PutArgs),
    /// Deletes one key (the service must be stopped).
    Delete(kv::DeleteArgs),
    /// Deletes the keys in [START, END) with one range tombstone (the service must be stopped).
    DeleteRange(kv::DeleteRangeArgs),
    /// Keys and values in order, from --from to --to (read-only).
    Scan(kv::ScanArgs),
    /// Levels, tombstones pending and droppable, memtables (read-only).
    Stats(kv::StatsArgs),
    /// Compacts a family's tables (or a key range) down to the last level (the service must be stopped).
    Compact(compact::CompactArgs),
    /// Writes the log's entries into level-0 tables (the service must be stopped).
    Flush(compact::FlushArgs),
    /// Reads every block, log record and MANIFEST edit; exits 0 only when nothing is damaged (read-only).
    Verify(verify::VerifyArgs),
    /// Each record of a write-ahead log: seqno, operations, keys (the file alone).
    DumpLog(dump::DumpLogArgs),
    /// A family's keys and values as JSON Lines, for `cairn load` (read-only).
    Dump(dump::DumpArgs),
    /// Writes JSON Lines of keys and values, as `cairn dump` prints them (the service must be stopped).
    Load(dump::LoadArgs),
    /// Column families: list (read-only), create, drop.
    Cf(cf::CfArgs),
}

#[derive(Debug, Args)]
struct StressArgs {
    #[command(subcommand)]
    replay: Option<StressSub>,
    /// Database directory (default: a temporary one, deleted afterwards).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Worker threads.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Keys in the key space.
    #[arg(long, default_value_t = 100_000)]
    keys: usize,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How long to run (`20s`, `10m`, `1h`; a bare number is seconds; ignored with --ops).
    #[arg(long, default_value = "60s", value_parser = output::parse_duration)]
    duration: Duration,
    /// Stop after this many operations instead of after --duration.
    #[arg(long)]
    ops: Option<u64>,
    /// Op weights over the defaults, e.g. `get=100,delete_range=50,reopen=1`.
    #[arg(long, default_value = "")]
    mix: String,
    /// Tombstone grace period of the stressed column family (`500ms`, `2s`).
    #[arg(long, value_parser = output::parse_duration, conflicts_with = "grace_ms")]
    grace: Option<Duration>,
    /// The grace period in ms (before `--grace` took durations).
    #[arg(long, hide = true)]
    grace_ms: Option<u64>,
    /// Delete persistence deadline (`30s`, `10m`).
    #[arg(long, value_parser = output::parse_duration, conflicts_with = "deadline_secs")]
    deadline: Option<Duration>,
    /// The deadline in seconds (before `--deadline` took durations).
    #[arg(long, hide = true)]
    deadline_secs: Option<u64>,
    /// Probability that a write is synced.
    #[arg(long, default_value_t = 0.01)]
    sync_probability: f64,
    /// Memtable size in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    memtable_size: usize,
    /// Largest value in bytes.
    #[arg(long, default_value_t = 200)]
    max_value_size: usize,
    /// Write every operation here, for `cairn stress replay`.
    #[arg(long)]
    op_log: Option<PathBuf>,
    /// Journal the expected state here (the crash test reads it after a kill).
    #[arg(long)]
    expected_journal: Option<PathBuf>,
    /// Inject I/O errors one operation in N; after each stop, wait for the engine's recovery
    /// (or resume it) and verify every key strictly.
    #[arg(long)]
    inject_errors: Option<u32>,
    /// Write the JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Print only the summary.
    #[arg(long)]
    quiet: bool,
    /// Leave out the TTL work (the TTL families and the clock the harness moves).
    #[arg(long)]
    no_ttl: bool,
    /// Keys per TTL family.
    #[arg(long, default_value_t = 1_000)]
    ttl_keys: usize,
}

#[derive(Debug, Subcommand)]
enum StressSub {
    /// Replay an op log's writes in order, alone, on a fresh database, and verify.
    Replay {
        /// The op log a `cairn stress --op-log` run wrote.
        #[arg(long)]
        log: PathBuf,
        /// Database directory (default: a temporary one).
        #[arg(long)]
        db: Option<PathBuf>,
        /// Keys in the original run's key space.
        #[arg(long, default_value_t = 100_000)]
        keys: usize,
        /// The original run's largest value.
        #[arg(long, default_value_t = 200)]
        max_value_size: usize,
    },
}

#[derive(Debug, Args)]
struct CrashArgs {
    /// `blackbox` (SIGKILL a child), `power-loss` (in process, faulty file system) or `both`.
    #[arg(long, default_value = "both")]
    mode: String,
    /// Crash cycles per mode.
    #[arg(long, default_value_t = 5)]
    cycles: usize,
    /// Stop starting new cycles after this long (`10m`; a bare number is seconds; 0: no limit).
    #[arg(long, default_value = "0", value_parser = output::parse_duration)]
    duration: Duration,
    /// Seed of timing, writes and power-loss modes.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keys in the key space.
    #[arg(long, default_value_t = 10_000)]
    keys: usize,
    /// Worker threads of each blackbox child.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Shortest run before a kill (`500ms`).
    #[arg(long, default_value = "500ms", value_parser = output::parse_duration)]
    kill_min: Duration,
    /// Longest run before a kill (`3s`).
    #[arg(long, default_value = "3s", value_parser = output::parse_duration)]
    kill_max: Duration,
    /// `--kill-min` in ms (before it took durations).
    #[arg(long, hide = true, conflicts_with = "kill_min")]
    kill_min_ms: Option<u64>,
    /// `--kill-max` in ms (before it took durations).
    #[arg(long, hide = true, conflicts_with = "kill_max")]
    kill_max_ms: Option<u64>,
    /// Probability that a write is synced (blackbox children).
    #[arg(long, default_value_t = 0.05)]
    sync_probability: f64,
    /// Working directory (default: a temporary one).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
}

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 3 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let code = match cli.command {
        Command::Stress(args) => stress(args),
        Command::Crashtest(args) => crashtest(&args),
        Command::Purge(args) => purge::run(args),
        Command::Ttl(args) => ttl::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Explain(args) => explain::explain(&args),
        Command::Audit(args) => explain::audit(&args),
        Command::Get(args) => kv::get(&args),
        Command::Put(args) => kv::put(&args),
        Command::Delete(args) => kv::delete(&args),
        Command::DeleteRange(args) => kv::delete_range(&args),
        Command::Scan(args) => kv::scan(&args),
        Command::Stats(args) => kv::stats(&args),
        Command::Compact(args) => compact::compact(&args),
        Command::Flush(args) => compact::flush(&args),
        Command::Verify(args) => verify::run(&args),
        Command::DumpLog(args) => dump::dump_log(&args),
        Command::Dump(args) => dump::dump(&args),
        Command::Load(args) => dump::load(&args),
        Command::Cf(args) => cf::run(&args),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(2))
}

/// Ends the process quietly when stdout is closed under it (`cairn scan DIR | head`), as
/// programs that die of SIGPIPE do, instead of the panic `println!` raises. Other panics keep
/// the default report.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

fn init_logging(quiet: bool) {
    let default = if quiet { "error" } else { "warn" };
    init_logging_with(default);
}

/// Logs to stderr at `default` unless `RUST_LOG` says otherwise.
fn init_logging_with(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn stress(args: StressArgs) -> i32 {
    if args.inject_errors.is_some() {
        // Faults make the engine complain by design; the report says what matters.
        init_logging_with(if args.quiet {
            "cairn=off,error"
        } else {
            "cairn=off,warn"
        });
    } else {
        init_logging(args.quiet);
    }
    if let Some(StressSub::Replay {
        log,
        db,
        keys,
        max_value_size,
    }) = args.replay
    {
        let temp = tempfile_dir(db.is_none());
        let path = db
            .or_else(|| temp.as_ref().map(|t| t.path().to_path_buf()))
            .unwrap_or_default();
        return finish(
            cairn_stress::replay(&log, &path, keys, max_value_size),
            None,
        );
    }
    let weights = match OpWeights::parse(&args.mix) {
        Ok(w) => w,
        Err(e) => return bad_args(&e),
    };
    let config = StressConfig {
        threads: args.threads,
        keys: args.keys,
        seed: args.seed,
        limit: args.ops.map_or(Limit::Duration(args.duration), Limit::Ops),
        weights,
        db: args.db,
        sync_probability: args.sync_probability,
        grace: args
            .grace
            .or(args.grace_ms.map(Duration::from_millis))
            .unwrap_or_default(),
        deadline: args
            .deadline
            .or(args.deadline_secs.map(Duration::from_secs)),
        memtable_size: args.memtable_size,
        max_value_size: args.max_value_size,
        op_log: args.op_log,
        expected_journal: args.expected_journal,
        progress: !args.no_progress && !args.quiet,
        ttl: !args.no_ttl,
        ttl_keys: args.ttl_keys,
    };
    if let Err(e) = config.validate() {
        return bad_args(&e);
    }
    if !args.quiet {
        let limit = match config.limit {
            Limit::Duration(d) => format!("for {}", humantime::format_duration(d)),
            Limit::Ops(n) => format!("for {n} ops"),
        };
        eprintln!(
            "cairn stress: {} threads, {} keys, seed {}, {limit}",
            config.threads, config.keys, config.seed
        );
    }
    let result = match args.inject_errors {
        Some(one_in) => cairn_stress::run_with_faults(config, one_in.max(1)),
        None => cairn_stress::run_stress(config),
    };
    finish(result, args.report.as_ref())
}

fn finish(
    result: Result<cairn_stress::StressReport, StressError>,
    report_path: Option<&PathBuf>,
) -> i32 {
    match result {
        Ok(report) => {
            println!("{}", report.summary());
            if let Some(path) = report_path {
                write_json(path, &report);
            }
            report.exit_code()
        }
        Err(e) => {
            eprintln!("cairn stress: {e}");
            e.exit_code()
        }
    }
}

fn crashtest(args: &CrashArgs) -> i32 {
    // Crashes make the engine complain by design (every write refused on a dead disk is an
    // error to it); the harness reports what matters.
    init_logging_with("cairn=off,error");
    let modes: &[&str] = match args.mode.as_str() {
        "both" => &["blackbox", "power-loss"],
        "blackbox" => &["blackbox"],
        "power-loss" => &["power-loss"],
        other => {
            return bad_args(&format!(
                "unknown crash mode {other:?}: blackbox, power-loss or both"
            ));
        }
    };
    let stress = StressConfig {
        keys: args.keys,
        threads: args.threads,
        sync_probability: args.sync_probability,
        ..StressConfig::default()
    };
    if let Err(e) = stress.validate() {
        return bad_args(&e);
    }
    let (dir, _guard) = match cairn_stress::work_dir(args.dir.clone()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cairn crashtest: {e}");
            return 2;
        }
    };
    let mut reports = Vec::new();
    let mut worst = 0;
    for mode in modes {
        let mut config = CrashConfig {
            cycles: args.cycles,
            seed: args.seed,
            kill_after_ms: kill_window(args),
            stress: stress.clone(),
            ..CrashConfig::default()
        };
        if !args.duration.is_zero() {
            // Run cycles in batches until the time is up.
            config.cycles = usize::MAX;
        }
        // A time limit is shared out evenly between the modes.
        let share = args.duration / u32::try_from(modes.len()).unwrap_or(1);
        let result = run_mode(
            mode,
            &config,
            &dir.join(mode),
            share,
            std::time::Instant::now(),
        );
        match result {
            Ok(report) => {
                println!(
                    "{}: {} cycles survived in {:.1}s ({} with a disk fault, {} recoveries), {} writes, {} keys verified; lost writes {}, resurrected deletes {}, holes {}, wrong values {}, expiry violations {}, unrecovered {}",
                    report.mode,
                    report.cycles,
                    report.seconds,
                    report.faults,
                    report.recoveries,
                    report.writes,
                    report.verifications,
                    report.failures.lost_writes,
                    report.failures.resurrected_deletes,
                    report.failures.holes,
                    report.failures.wrong_values,
                    report.failures.expiry_violations,
                    report.failures.unrecovered
                );
                for m in &report.failures.messages {
                    println!("  {m}");
                }
                worst = worst.max(report.exit_code());
                reports.push(report);
            }
            Err(e) => {
                eprintln!("cairn crashtest ({mode}): {e}");
                worst = worst.max(e.exit_code());
            }
        }
    }
    if let Some(path) = &args.report {
        write_json(path, &reports);
    }
    println!("{}", if worst == 0 { "PASS" } else { "FAIL" });
    worst
}

/// The shortest and longest run before a kill, in ms.
fn kill_window(args: &CrashArgs) -> (u64, u64) {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let min = args.kill_min_ms.unwrap_or_else(|| millis(args.kill_min));
    let max = args.kill_max_ms.unwrap_or_else(|| millis(args.kill_max));
    (min, max.max(min))
}

fn run_mode(
    mode: &str,
    config: &CrashConfig,
    dir: &std::path::Path,
    duration: Duration,
    started: std::time::Instant,
) -> Result<cairn_stress::CrashReport, StressError> {
    std::fs::create_dir_all(dir)?;
    let one = |config: &CrashConfig| -> Result<cairn_stress::CrashReport, StressError> {
        if mode == "blackbox" {
            let program = std::env::current_exe()?;
            cairn_stress::blackbox(config, dir, &program, &[])
        } else {
            cairn_stress::power_loss(config, dir)
        }
    };
    if duration.is_zero() {
        return one(config);
    }
    // Time-bounded: one cycle at a time, so each stops cleanly.
    let mut total = cairn_stress::CrashReport {
        mode: mode.to_string(),
        ..Default::default()
    };
    let mut cycle_config = config.clone();
    cycle_config.cycles = 1;
    while started.elapsed() < duration {
        cycle_config.seed = config.seed + total.cycles as u64;
        cycle_config.first_cycle = config.first_cycle + total.cycles;
        let r = one(&cycle_config)?;
        total.cycles += r.cycles;
        total.writes += r.writes;
        total.faults += r.faults;
        total.recoveries += r.recoveries;
        total.verifications += r.verifications;
        total.seconds += r.seconds;
        total.failures.merge(r.failures);
        if mode == "blackbox" && total.cycles >= config.cycles {
            break;
        }
    }
    Ok(total)
}

fn write_json<T: serde::Serialize>(path: &PathBuf, value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(json) => {
            if let Err(e) = std::fs::write(path, json) {
                eprintln!("cannot write the report to {}: {e}", path.display());
            }
        }
        Err(e) => eprintln!("cannot encode the report: {e}"),
    }
}

fn bad_args(why: &str) -> i32 {
    eprintln!("cairn: bad arguments: {why}");
    3
}

fn tempfile_dir(needed: bool) -> Option<tempfile::TempDir> {
    if needed {
        tempfile::tempdir().ok()
    } else {
        None
    }
}
