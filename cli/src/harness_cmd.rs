//! `cairn stress`, `cairn stress replay` and `cairn crashtest`: the harness's commands, their
//! arguments and how their results become output and exit codes.
//!
//! Ctrl-C or SIGTERM ends a run early but whole: the workers stop after their operation (a
//! blackbox child is killed and checked at once), the final verification runs, and the summary
//! and report say `interrupted`; the exit code is the run's own (0 pass, 1 a check failed). A
//! second Ctrl-C ends the process at once with 130, deleting the temporary databases first.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_stress::CrashConfig;
use cairn_stress::cluster::FaultKind;
use cairn_stress::engine::{EngineError, EngineKind, Support};
use cairn_stress::{Limit, OpWeights, StressConfig, StressError};
use clap::{Args, Subcommand};

use crate::db_arg::{self, OptDbArg};
use crate::{bad_args, init_logging, init_logging_with, output};

/// The smallest `--memtable-size` a stress takes.
const MIN_MEMTABLE: usize = 4 << 10;

#[derive(Debug, Args)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent command-line switches"
)]
#[command(args_conflicts_with_subcommands = true)]
#[command(mut_arg("db", |a| a.help("The database directory (default: a temporary one, deleted \
    afterwards); a non-empty directory a stress did not create is refused unless --reuse is given")))]
pub struct StressArgs {
    #[command(subcommand)]
    replay: Option<StressSub>,
    #[command(flatten)]
    db: OptDbArg,
    /// Write into DB even if it is a database a stress did not create; the harness's
    /// families (`stress`, `ttl_one`, `ttl_three`, `held`) are dropped and made afresh, others untouched.
    #[arg(long)]
    reuse: bool,
    /// The engine under test: cairn, or a peer this build has (`--features fjall`,
    /// `--features rocksdb`). A peer runs without what it lacks (TTL, held readers,
    /// transactions, --inject-errors), and the summary names what was emulated and skipped.
    #[arg(long, default_value = "cairn", value_parser = EngineKind::parse)]
    engine: EngineKind,
    /// Worker threads (1 to 64).
    #[arg(long, default_value_t = 4, value_parser = output::parse_threads)]
    threads: usize,
    /// Keys in the key space [default: 100000; 500 with --cluster].
    #[arg(long)]
    keys: Option<usize>,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Stress a replicated Cairn of this many `cairn serve` processes (3 to 7) on loopback
    /// instead: node kills and power cuts, leader pauses, followers down past the grace period,
    /// the whole cluster's power cut; --duration, --seed, --keys, --grace, --faults, --json and
    /// --report apply.
    #[arg(long, conflicts_with_all = ["ops", "mix", "inject_errors", "reuse", "op_log", "expected_journal", "engine"])]
    cluster: Option<usize>,
    /// With --cluster, the faults to inject, comma-separated: kill, power-cut, pause,
    /// past-grace, cluster-crash [default: all].
    #[arg(long, requires = "cluster")]
    faults: Option<String>,
    /// How long to run (`20s`, `10m`, `1h`; a bare number is seconds; ignored with --ops; 0 is
    /// refused as exercising nothing).
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
    /// Memtable size (`4096`, `64KiB`, `1MiB`).
    #[arg(long, default_value = "1MiB", value_parser = output::parse_size)]
    memtable_size: usize,
    /// Largest value (`200`, `4KiB`).
    #[arg(long, default_value = "200", value_parser = output::parse_size)]
    max_value_size: usize,
    /// Write every operation here, for `cairn stress replay`.
    #[arg(long)]
    op_log: Option<PathBuf>,
    /// Journal the expected state here (the crash test reads it after a kill).
    #[arg(long)]
    expected_journal: Option<PathBuf>,
    /// Inject I/O errors one operation in N (N ≥ 1; 0 is refused: leave the flag out for a run
    /// without faults); after each stop, wait for the engine's recovery (or resume it) and
    /// verify every key strictly.
    #[arg(long)]
    inject_errors: Option<u32>,
    /// Write the JSON report here (checked before the run starts).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print the report as JSON on stdout instead of the summary.
    #[arg(long)]
    json: bool,
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
pub enum StressSub {
    /// Measure how many deleted values the engine keeps on disk, file by file, and for how
    /// long: a delete-heavy phase, the engine settling on its own, one full compaction, close;
    /// every byte of every file scanned for the deleted values' markers (compression off).
    #[command(mut_arg("db", |a| a.help("The database directory, empty or new (default: a temporary one, \
        deleted afterwards)")))]
    Erasure(crate::erasure_cmd::ErasureArgs),
    /// Replay an op log's writes in order, alone, on a fresh database, and verify.
    #[command(mut_arg("db", |a| a.help("The database directory, empty or new (default: a temporary one, \
        deleted afterwards)")))]
    Replay {
        /// The op log a `cairn stress --op-log` run wrote.
        #[arg(long)]
        log: PathBuf,
        #[command(flatten)]
        db: OptDbArg,
        /// Keys in the original run's key space (default: the op log's; a different value is
        /// refused).
        #[arg(long)]
        keys: Option<usize>,
        /// The original run's largest value (`200`, `4KiB`; default: the op log's; a different
        /// value is refused).
        #[arg(long, value_parser = output::parse_size)]
        max_value_size: Option<usize>,
        /// Print the report as JSON on stdout instead of the summary.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
#[command(mut_arg("db", |a| a.help("The working directory, one database per mode under it (default: a \
    temporary one, deleted afterwards)")))]
pub struct CrashArgs {
    /// `blackbox` (SIGKILL a child), `power-loss` (in process, faulty file system) or `both`.
    #[arg(long, default_value = "both")]
    mode: String,
    /// The engine under test: cairn, or a peer this build has. A peer runs the blackbox loop
    /// alone: the power-loss loop needs the engine's file I/O routed through `FaultyFs`, and
    /// `both` reports it as skipped.
    #[arg(long, default_value = "cairn", value_parser = EngineKind::parse)]
    engine: EngineKind,
    /// Crash cycles per mode (default 5, or no limit with --duration; with both, whichever
    /// comes first ends the mode; 0 is refused as exercising nothing).
    #[arg(long)]
    cycles: Option<usize>,
    /// Stop starting new cycles after this long (`10m`; a bare number is seconds; 0: no limit),
    /// shared evenly between the modes.
    #[arg(long, default_value = "0", value_parser = output::parse_duration)]
    duration: Duration,
    /// Seed of timing, writes and power-loss modes.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keys in the key space [default: 10000; 500 with --cluster].
    #[arg(long)]
    keys: Option<usize>,
    /// Crash a replicated Cairn of this many `cairn serve` processes (3 to 7) on loopback
    /// instead, for --duration (60s when not given), checking every replica after each
    /// recovery: node kills and power cuts, followers down past the grace period (crashed
    /// again while installing a snapshot), the whole cluster's power cut; --seed, --keys,
    /// --faults, --json and --report apply.
    #[arg(long, conflicts_with_all = ["mode", "cycles", "kill_min", "kill_max", "sync_probability", "engine"])]
    cluster: Option<usize>,
    /// With --cluster, the faults to inject, comma-separated: kill, power-cut, past-grace,
    /// cluster-crash, pause [default: all but pause].
    #[arg(long, requires = "cluster")]
    faults: Option<String>,
    /// Worker threads of each blackbox child (1 to 64).
    #[arg(long, default_value_t = 4, value_parser = output::parse_threads)]
    threads: usize,
    /// Shortest run before a kill (`500ms`; not above --kill-max).
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
    #[command(flatten)]
    db: OptDbArg,
    /// Write the JSON report here (checked before the run starts).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print the modes' reports as one JSON document on stdout instead of lines of text.
    #[arg(long)]
    json: bool,
}

/// `stress --cluster N`: the flags that apply, handed to the cluster stress.
fn cluster(args: &StressArgs, nodes: usize) -> i32 {
    crate::signals::stop_on_signals();
    crate::cluster_stress::run(&crate::cluster_stress::ClusterRun {
        command: "stress",
        faults: args.faults.clone(),
        default_faults: &FaultKind::ALL,
        nodes,
        keys: args.keys,
        seed: args.seed,
        duration: args.duration,
        grace: args.grace,
        dir: args.db.path().map(Path::to_path_buf),
        json: args.json,
        report: args.report.clone(),
    })
}

/// `crashtest --cluster N`: the cluster stress with crashes alone (by default).
fn crashtest_cluster(args: &CrashArgs, nodes: usize) -> i32 {
    crate::signals::stop_on_signals();
    crate::cluster_stress::run(&crate::cluster_stress::ClusterRun {
        command: "crashtest",
        faults: args.faults.clone(),
        default_faults: &FaultKind::CRASHES,
        nodes,
        keys: args.keys,
        seed: args.seed,
        duration: if args.duration.is_zero() {
            Duration::from_secs(60)
        } else {
            args.duration
        },
        grace: None,
        dir: args.db.path().map(Path::to_path_buf),
        json: args.json,
        report: args.report.clone(),
    })
}

/// Logs to stderr; with injected faults, none of the engine's complaints (by design).
fn init_stress_logging(args: &StressArgs) {
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
}

/// A `DB` that is a subcommand's name and no existing directory: `cairn stress --engine fjall
/// erasure` reads `erasure` as the database, since clap takes subcommands only before flags.
fn misplaced_subcommand(db: &Path) -> Option<&'static str> {
    ["erasure", "replay"]
        .into_iter()
        .find(|word| db == Path::new(word) && !db.exists())
}

/// The run `args` ask for, with the op mix `weights`.
fn stress_config(args: &StressArgs, weights: OpWeights) -> StressConfig {
    StressConfig {
        threads: args.threads,
        keys: args.keys.unwrap_or(100_000),
        seed: args.seed,
        limit: args.ops.map_or(Limit::Duration(args.duration), Limit::Ops),
        weights,
        db: args.db.path().map(std::path::Path::to_path_buf),
        reuse: args.reuse,
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
        op_log: args.op_log.clone(),
        expected_journal: args.expected_journal.clone(),
        progress: !args.no_progress && !args.quiet,
        ttl: !args.no_ttl,
        ttl_keys: args.ttl_keys,
        engine: args.engine,
    }
}

pub fn stress(args: StressArgs) -> i32 {
    init_stress_logging(&args);
    if let Some(StressSub::Erasure(erasure)) = args.replay {
        return crate::erasure_cmd::erasure(&erasure);
    }
    if let Some(StressSub::Replay {
        log,
        db,
        keys,
        max_value_size,
        json,
    }) = args.replay
    {
        let given = cairn_stress::ReplaySettings {
            keys,
            max_value_size,
        };
        return replay(&log, &db, given, json);
    }
    if let Some(Err(code)) = args.db.path().map(db_arg::check_directory_if_present) {
        return code;
    }
    if let Some(word) = args.db.path().and_then(misplaced_subcommand) {
        return bad_args(&format!(
            "{word:?} came after a flag, so it was taken for the database directory: a \
             subcommand comes first, its flags after it (`cairn stress {word} --engine …`)"
        ));
    }
    let weights = match OpWeights::parse(&args.mix) {
        Ok(w) => w,
        Err(e) => return bad_args(&e),
    };
    if let Some(nodes) = args.cluster {
        return cluster(&args, nodes);
    }
    let config = stress_config(&args, weights);
    if let Err(e) = config.validate() {
        return bad_args(&e);
    }
    if let (Some(_), Support::Missing(why)) =
        (args.inject_errors, args.engine.capabilities().faulty_fs)
    {
        return bad_args(&format!(
            "--inject-errors runs on cairn alone ({}: {why})",
            args.engine.name()
        ));
    }
    if config.memtable_size < MIN_MEMTABLE {
        return bad_args("--memtable-size must be at least 4KiB (a memtable holds whole entries)");
    }
    let outputs = [
        ("--report", args.report.as_deref()),
        ("--op-log", config.op_log.as_deref()),
        ("--expected-journal", config.expected_journal.as_deref()),
    ];
    for (flag, path) in outputs {
        if let Some(Err(code)) = path.map(|p| output::check_output_path(flag, p)) {
            return code;
        }
    }
    if args.inject_errors == Some(0) {
        return bad_args(
            "--inject-errors 0 would inject nothing: give N ≥ 1 (one operation in N fails), or \
             leave the flag out for a run without faults",
        );
    }
    // Refused before the banner, so the reason is the first thing said.
    if let Some(Err(e)) = config
        .db
        .as_deref()
        .map(|d| cairn_stress::claim(d, config.reuse, config.engine))
    {
        eprintln!("cairn stress: {e}");
        return e.exit_code();
    }
    crate::signals::stop_on_signals();
    if !args.quiet {
        let limit = match config.limit {
            Limit::Duration(d) => format!("for {}", humantime::format_duration(d)),
            Limit::Ops(n) => format!("for {n} ops"),
        };
        eprintln!(
            "cairn stress: {}, {} threads, {} keys, seed {}, {limit}",
            config.engine.name(),
            config.threads,
            config.keys,
            config.seed
        );
    }
    let result = match args.inject_errors {
        Some(one_in) => cairn_stress::run_with_faults(config, one_in),
        None => cairn_stress::run_stress(config),
    };
    finish(result, args.db.path(), args.report.as_ref(), args.json)
}

/// Prints the report (its summary, or JSON), writes it to `report_path`, and gives the exit
/// code: the run's, or 2 if the report could not be written.
fn finish(
    result: Result<cairn_stress::StressReport, StressError>,
    db: Option<&std::path::Path>,
    report_path: Option<&PathBuf>,
    json: bool,
) -> i32 {
    match result {
        Ok(report) => {
            // The report file first, so what is printed is the whole outcome.
            let written = report_path.map_or(Ok(()), |path| output::write_json(path, &report));
            if json {
                output::print_json(&report);
            } else {
                println!("{}", report.summary());
            }
            outcome_code(report.exit_code(), written)
        }
        Err(StressError::Engine(EngineError::Cairn(
            e @ cairn::Error::Io(cairn_fs::Error::Locked { .. }),
        ))) => db_arg::cannot_open(db.unwrap_or(std::path::Path::new(".")), &e),
        Err(e) => {
            eprintln!("cairn stress: {e}");
            e.exit_code()
        }
    }
}

pub fn crashtest(args: &CrashArgs) -> i32 {
    // Crashes make the engine complain by design (every write refused on a dead disk is an
    // error to it); the harness reports what matters.
    init_logging_with("cairn=off,error");
    if let Some(nodes) = args.cluster {
        return crashtest_cluster(args, nodes);
    }
    let keys = args.keys.unwrap_or(10_000);
    let skipped = cairn_stress::power_loss_skipped(args.engine);
    let modes = match crash_modes(&args.mode, skipped.as_deref()) {
        Ok(modes) => modes,
        Err(why) => return bad_args(&why),
    };
    if args.cycles == Some(0) {
        return bad_args("--cycles 0 exercised nothing: give at least one cycle");
    }
    let kill_after_ms = match kill_window(args) {
        Ok(window) => window,
        Err(why) => return bad_args(&why),
    };
    let stress = StressConfig {
        keys,
        threads: args.threads,
        sync_probability: args.sync_probability,
        engine: args.engine,
        ..StressConfig::default()
    };

    if let Err(e) = stress.validate() {
        return bad_args(&e);
    }
    if let Some(Err(code)) = args
        .report
        .as_deref()
        .map(|p| output::check_output_path("--report", p))
    {
        return code;
    }
    if let Some(Err(code)) = args.db.path().map(db_arg::check_directory_if_present) {
        return code;
    }
    let (dir, _guard) = match cairn_stress::work_dir(
        args.db.path().map(std::path::Path::to_path_buf),
        args.engine,
    ) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cairn crashtest: {e}");
            return e.exit_code();
        }
    };
    // Without a time limit, 5 cycles; with one, as many as fit, unless --cycles ends it first.
    let cycles = match (args.cycles, args.duration.is_zero()) {
        (Some(n), _) => n,
        (None, true) => 5,
        (None, false) => usize::MAX,
    };
    crate::signals::stop_on_signals();
    eprintln!(
        "cairn crashtest: {}, {} per mode, {} keys, seed {}, {}",
        args.engine.name(),
        modes.join(" and "),
        keys,
        args.seed,
        describe_limit(args.cycles, cycles, args.duration)
    );
    let crash = CrashConfig {
        cycles,
        seed: args.seed,
        kill_after_ms,
        stress,
        ..CrashConfig::default()
    };
    let (mut reports, errors, worst) = run_modes(args, modes, &crash, &dir);
    if let (Some(why), "both") = (skipped, args.mode.as_str()) {
        let report = cairn_stress::CrashReport {
            mode: "power-loss".into(),
            engine: args.engine.name().into(),
            skipped: Some(why),
            ..Default::default()
        };
        if !args.json {
            print_mode(&report);
        }
        reports.push(report);
    }
    crash_outcome(args, &reports, &errors, worst)
}

/// Runs each mode in its own directory under `dir`, printing each report unless `--json`:
/// the reports, the errors that ended a mode, and the worst exit code.
fn run_modes(
    args: &CrashArgs,
    modes: &[&str],
    config: &CrashConfig,
    dir: &Path,
) -> (Vec<cairn_stress::CrashReport>, Vec<String>, i32) {
    let mut reports = Vec::new();
    let mut errors = Vec::new();
    let mut worst = 0;
    for mode in modes {
        if cairn_stress::stop_requested() {
            break;
        }
        // A time limit is shared out evenly between the modes.
        let share = args.duration / u32::try_from(modes.len()).unwrap_or(1);
        let result = run_mode(
            mode,
            config,
            &dir.join(mode),
            share,
            std::time::Instant::now(),
        );
        match result {
            Ok(report) => {
                if !args.json {
                    print_mode(&report);
                }
                worst = worst.max(report.exit_code());
                reports.push(report);
            }
            Err(e) => {
                eprintln!("cairn crashtest ({mode}): {e}");
                errors.push(format!("{mode}: {e}"));
                worst = worst.max(e.exit_code());
            }
        }
    }
    (reports, errors, worst)
}

/// The crash modes `--mode` names that the engine can run: power loss left out (as skipped)
/// when the engine's I/O cannot be routed through `FaultyFs` (`skipped` says why).
fn crash_modes(mode: &str, skipped: Option<&str>) -> Result<&'static [&'static str], String> {
    match (mode, skipped) {
        ("both", None) => Ok(&["blackbox", "power-loss"]),
        ("both" | "blackbox", _) => Ok(&["blackbox"]),
        ("power-loss", None) => Ok(&["power-loss"]),
        ("power-loss", Some(why)) => Err(format!("--mode power-loss runs on cairn alone ({why})")),
        (other, _) => Err(format!(
            "unknown crash mode {other:?}: blackbox, power-loss or both"
        )),
    }
}

/// A run's exit code once its report file was (or was not) written: a failed write makes a
/// passing run 2 (engine or I/O failure) and leaves a failing run's own code.
fn outcome_code(run: i32, written: Result<(), ()>) -> i32 {
    match written {
        Err(()) if run == 0 => 2,
        _ => run,
    }
}

/// Writes the report, prints how the crash test ended (text or JSON), and gives the exit code.
fn crash_outcome(
    args: &CrashArgs,
    reports: &[cairn_stress::CrashReport],
    errors: &[String],
    worst: i32,
) -> i32 {
    let mut worst = worst;
    let interrupted = cairn_stress::stop_requested();
    // Fail closed: an interrupt before the first cycle's check leaves nothing to pass.
    let exercised_nothing = worst == 0
        && reports
            .iter()
            .filter(|r| r.skipped.is_none())
            .all(|r| r.cycles == 0);
    if exercised_nothing {
        worst = 1;
    }
    let written = args
        .report
        .as_ref()
        .map_or(Ok(()), |path| output::write_json(path, reports));
    worst = outcome_code(worst, written);
    if args.json {
        output::print_json(&serde_json::json!({
            "modes": reports,
            "errors": errors,
            "interrupted": interrupted,
            "exercised_nothing": exercised_nothing,
            "report_written": args.report.is_none() || written.is_ok(),
            "passed": worst == 0,
        }));
    } else {
        if interrupted {
            println!(
                "interrupted: stopped by a signal; every cycle counted above was checked after \
                 its crash"
            );
        }
        if exercised_nothing {
            println!("exercised nothing: no crash cycle ran to its check");
        }
        println!("{}", if worst == 0 { "PASS" } else { "FAIL" });
    }
    worst
}

/// How a crash test ends: after `cycles`, after `duration`, or whichever comes first.
fn describe_limit(asked: Option<usize>, cycles: usize, duration: Duration) -> String {
    match (asked, duration.is_zero()) {
        (_, true) => format!("{cycles} cycles"),
        (None, false) => format!("for {}", humantime::format_duration(duration)),
        (Some(n), false) => format!(
            "{n} cycles or for {}, whichever comes first",
            humantime::format_duration(duration)
        ),
    }
}

fn print_mode(report: &cairn_stress::CrashReport) {
    if let Some(why) = &report.skipped {
        println!("{}: skipped ({why})", report.mode);
        return;
    }
    let f = &report.failures;
    println!(
        "{}: {} survived in {:.1}s ({} with a disk fault, {} recoveries), {} writes, {} keys verified; lost writes {}, resurrected deletes {}, holes {}, wrong values {}, expiry violations {}, unrecovered {}",
        report.mode,
        output::count(report.cycles, "cycle"),
        report.seconds,
        report.faults,
        report.recoveries,
        report.writes,
        report.verifications,
        f.lost_writes,
        f.resurrected_deletes,
        f.holes,
        f.wrong_values,
        f.expiry_violations,
        f.unrecovered
    );
    for m in &f.messages {
        println!("  {m}");
    }
}

/// The shortest and longest run before a kill, in ms.
fn kill_window(args: &CrashArgs) -> Result<(u64, u64), String> {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let min = args.kill_min_ms.unwrap_or_else(|| millis(args.kill_min));
    let max = args.kill_max_ms.unwrap_or_else(|| millis(args.kill_max));
    if min > max {
        return Err(format!(
            "--kill-min ({min} ms) is above --kill-max ({max} ms): no kill time fits"
        ));
    }
    Ok((min, max))
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
    // Time-bounded: one cycle at a time, so each stops cleanly, until the time or the cycles
    // are spent.
    let mut total = cairn_stress::CrashReport {
        mode: mode.to_string(),
        engine: config.stress.engine.name().into(),
        ..Default::default()
    };
    let mut cycle_config = config.clone();
    cycle_config.cycles = 1;
    while started.elapsed() < duration && total.cycles < config.cycles {
        if cairn_stress::stop_requested() {
            total.interrupted = true;
            break;
        }
        cycle_config.seed = config.seed + total.cycles as u64;
        cycle_config.first_cycle = config.first_cycle + total.cycles;
        let r = one(&cycle_config)?;
        total.cycles += r.cycles;
        total.writes += r.writes;
        total.faults += r.faults;
        total.recoveries += r.recoveries;
        total.verifications += r.verifications;
        total.seconds += r.seconds;
        total.interrupted |= r.interrupted;
        total.failures.merge(r.failures);
    }
    Ok(total)
}

fn tempfile_dir(needed: bool) -> Option<cairn_stress::TemporaryDir> {
    if needed {
        cairn_stress::TemporaryDir::new().ok()
    } else {
        None
    }
}

/// `stress replay`: the op log's writes on a fresh database (never a user's), then the check.
fn replay(
    log: &std::path::Path,
    db: &OptDbArg,
    given: cairn_stress::ReplaySettings,
    json: bool,
) -> i32 {
    if let Some(dir) = db.path() {
        if let Err(code) = db_arg::check_directory_if_present(dir) {
            return code;
        }
        // A replay writes a fresh database: never into a user's.
        if let Err(e) = cairn_stress::claim(dir, false, EngineKind::Cairn) {
            eprintln!("cairn stress replay: {e}");
            return e.exit_code();
        }
    }
    let temp = tempfile_dir(db.path().is_none());
    let path = db
        .path()
        .map(std::path::Path::to_path_buf)
        .or_else(|| temp.as_ref().map(|t| t.path().to_path_buf()))
        .unwrap_or_default();
    finish(
        cairn_stress::replay(log, &path, given),
        db.path(),
        None,
        json,
    )
}
