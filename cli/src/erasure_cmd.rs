//! `cairn stress erasure`: the erasure figure of one engine (see `cairn_stress::run_erasure`),
//! printed as a table of samples (or JSON), written as a JSON report, drawn as a PNG.
//!
//! Exit codes: 0 the figure was measured; 1 the engine served something other than the live
//! keys, Cairn kept deleted values past its full compaction, or a signal stopped the run before
//! the full compaction; 2 the engine failed or the scan could not see the values it must; 3
//! bad arguments.

use std::path::PathBuf;
use std::time::Duration;

use cairn_stress::engine::EngineKind;
use cairn_stress::{ErasureConfig, ErasureReport};
use clap::Args;

use crate::db_arg::{self, OptDbArg};
use crate::{bad_args, init_logging, output};

#[derive(Debug, Args)]
pub struct ErasureArgs {
    #[command(flatten)]
    db: OptDbArg,
    /// The engine under test: cairn, or a peer this build has (`--features fjall`,
    /// `--features rocksdb`).
    #[arg(long, default_value = "cairn", value_parser = EngineKind::parse)]
    engine: EngineKind,
    /// Keys written (three in five then deleted).
    #[arg(long, default_value_t = 20_000)]
    keys: usize,
    /// Bytes per value (`100`, `1KiB`; at least 21, a marker's).
    #[arg(long, default_value = "100", value_parser = output::parse_size)]
    value_size: usize,
    /// Memtable size (`256KiB`).
    #[arg(long, default_value = "256KiB", value_parser = output::parse_size)]
    memtable_size: usize,
    /// How long the engine settles on its own after the deletes (`10s`, `2m`).
    #[arg(long, default_value = "10s", value_parser = output::parse_duration)]
    settle: Duration,
    /// How often the directory is scanned while it settles (`1s`).
    #[arg(long, default_value = "1s", value_parser = output::parse_duration)]
    sample: Duration,
    /// Cairn's delete persistence deadline (`5s`): its compactions must erase deleted values
    /// within it.
    #[arg(long, value_parser = output::parse_duration)]
    deadline: Option<Duration>,
    /// Draw the figure into this PNG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write the JSON report here (checked before the run starts).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print the report as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Print only the table.
    #[arg(long)]
    quiet: bool,
}

pub fn erasure(args: &ErasureArgs) -> i32 {
    init_logging(args.quiet);
    let config = ErasureConfig {
        engine: args.engine,
        keys: args.keys,
        value_size: args.value_size,
        memtable_size: args.memtable_size,
        settle: args.settle,
        sample_every: args.sample,
        deadline: args.deadline,
    };
    if let Err(e) = config.validate() {
        return bad_args(&e);
    }
    if let Some(plot) = &args.plot
        && plot
            .extension()
            .is_none_or(|e| !e.eq_ignore_ascii_case("png"))
    {
        return bad_args(&format!(
            "--plot {}: the figure is a PNG (name it .png)",
            plot.display()
        ));
    }
    for (flag, path) in [("--report", &args.report), ("--plot", &args.plot)] {
        if let Some(Err(code)) = path.as_deref().map(|p| output::check_output_path(flag, p)) {
            return code;
        }
    }
    if let Some(dir) = args.db.path() {
        if let Err(code) = db_arg::check_directory_if_present(dir) {
            return code;
        }
        let empty = std::fs::read_dir(dir).map_or(true, |mut entries| entries.next().is_none());
        if !empty {
            return bad_args(&format!(
                "{} is not empty: the erasure figure needs an empty or new directory (every file \
                 in it is scanned, and what is already there would count)",
                dir.display()
            ));
        }
    }
    let temp = match args.db.path() {
        Some(_) => None,
        None => match cairn_stress::TemporaryDir::new() {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("cairn stress erasure: a temporary directory: {e}");
                return 2;
            }
        },
    };
    let dir = args
        .db
        .path()
        .map(std::path::Path::to_path_buf)
        .or_else(|| temp.as_ref().map(|t| t.path().to_path_buf()))
        .unwrap_or_default();
    crate::signals::stop_on_signals();
    if !args.quiet {
        eprintln!(
            "cairn stress erasure: {}, {} keys, compression off, settling {}",
            args.engine.name(),
            args.keys,
            humantime::format_duration(args.settle)
        );
    }
    match cairn_stress::run_erasure(&config, &dir) {
        Ok(report) => finish(args, &report),
        Err(e) => {
            eprintln!("cairn stress erasure: {e}");
            e.exit_code()
        }
    }
}

/// Prints, writes and draws the report; the exit code.
fn finish(args: &ErasureArgs, report: &ErasureReport) -> i32 {
    let mut code = report.exit_code();
    if let Some(path) = &args.report
        && output::write_json(path, report).is_err()
    {
        code = code.max(2);
    }
    if let Some(path) = &args.plot {
        let (lines, phases) = cairn_stress::erasure_series(report);
        let title = format!(
            "{}: deleted values still on disk (of {} deleted, over {} keys; compression off)",
            report.engine, report.deleted_values, report.keys
        );
        if let Err(e) = crate::plot::erasure(&lines, &phases, &title, path) {
            eprintln!("cairn stress erasure: cannot draw {}: {e}", path.display());
            code = code.max(2);
        }
    }
    if args.json {
        output::print_json(report);
    } else {
        println!("{}", report.summary());
    }
    code
}
