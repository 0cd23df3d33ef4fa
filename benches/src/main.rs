//! `cairn-bench`: a `db_bench`-style comparison of Cairn with fjall and `RocksDB` on the same
//! machine in one run.
//!
//! Every workload runs on a fresh database of each engine in turn (cairn, fjall, rocksdb,
//! cairn, …) for `--runs` rounds; the report is a table of medians with Cairn/peer ratios, a
//! JSON file, a PNG chart, and a last line `ratios: fillrandom=1.23 …` for machines. The peers
//! are behind the cargo features `fjall` and `rocksdb`; see `benches/README.md`.

mod chart;
mod child;
mod churn;
mod disk;
mod engine;
mod keys;
mod latency;
mod readwhilewriting;
mod report;
mod report_soak;
mod settings;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::engine::EngineKind;
use crate::report::{Failure, Report, Sample};
use crate::settings::Settings;
use crate::workload::Workload;

/// The error of anything that can fail here.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Runs the same workloads on Cairn, fjall and `RocksDB` and reports medians and ratios.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Engines, comma-separated (cairn, fjall, rocksdb) [default: every engine compiled in]
    #[arg(long, value_delimiter = ',')]
    engines: Vec<String>,
    /// Workloads, comma-separated [default: all but churn]: fillseq, fillrandom, overwrite,
    /// readrandom, readmissing, seekrandom, scanall, delete90 (with `scan_after_delete` and
    /// `scan_after_settle`), `scan_fresh10`, `delrange_scan`, `seek_deleted_runs`, queue,
    /// `space_after_delete`, readwhilewriting (with `readwhilewriting_puts`); and churn, a soak
    /// of --churn-secs (10 minutes) an engine, which runs only when named here
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,
    /// Keys per database
    #[arg(long, default_value_t = 1_000_000)]
    num: u64,
    /// Bytes per value
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Lookups or seeks of readrandom, readmissing and seekrandom [default: --num]
    #[arg(long)]
    reads: Option<u64>,
    /// Seed of every random order (the same for every engine within a round)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Rounds; the table shows medians
    #[arg(long, default_value_t = 3)]
    runs: u64,
    /// Directory for the databases [default: a new temporary directory]
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write every sample, the medians and the ratios here as JSON
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the medians here as a PNG chart
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Queue operations per engine (each a pop and a push)
    #[arg(long, default_value_t = 1_000_000)]
    queue_ops: u64,
    /// Items in the queue
    #[arg(long, default_value_t = 1_000)]
    queue_items: u64,
    /// Time cap of the queue per engine and round, in seconds
    #[arg(long, default_value_t = 300)]
    queue_cap_secs: u64,
    /// Seconds a peer idles (after its own wait) to settle after mass deletes
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
    /// Keep every database directory (under --dir) for inspection
    #[arg(long)]
    keep_dirs: bool,
    /// Store every engine's tables uncompressed (the cost of reading raw blocks shows)
    #[arg(long)]
    uncompressed: bool,
    /// Cairn only: its memtable size in MiB [default: Cairn's, 64]. Small memtables mean many
    /// flushes and compactions, so their installs meet the writes.
    #[arg(long)]
    memtable_mib: Option<usize>,
    /// Cairn only: the tombstones one scan steps over before it has their range compacted
    /// [default: Cairn's, 1000]
    #[arg(long)]
    cairn_read_trigger: Option<u64>,
    /// Cairn only: how it compresses its tables, to compare codecs side by side
    #[arg(long, value_enum, default_value_t)]
    cairn_compression: settings::CairnCompression,
    /// Cairn only: KiB of zstd dictionary trained per zstd table [default: 0, none]
    #[arg(long, default_value_t = 0)]
    cairn_zstd_dictionary_kib: usize,
    /// readwhilewriting: how long the writer and the readers run (seconds, or a duration such
    /// as `30s`, `2m`)
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    rww_secs: Duration,
    /// readwhilewriting: the writer's puts per second, paced against the clock
    #[arg(long, default_value_t = 20_000)]
    rww_write_rate: u64,
    /// readwhilewriting: reader threads
    #[arg(long, default_value_t = 1)]
    rww_readers: usize,
    /// churn: how long the soak runs (seconds, or a duration such as `10m`; 1800 for the full
    /// run). Each job's --job-timeout-secs is counted after it.
    #[arg(long, default_value = "600", value_parser = parse_duration)]
    churn_secs: Duration,
    /// churn: how often it samples disk bytes, tombstones, throughput and read p99 (seconds, or
    /// a duration)
    #[arg(long, default_value = "60", value_parser = parse_duration)]
    churn_sample_secs: Duration,
    /// Write the report to PREFIX.txt, the JSON to PREFIX.json, the chart to PREFIX.png and
    /// the churn chart to PREFIX-churn.png (beside --json and --chart, if also given)
    #[arg(long, value_name = "PREFIX")]
    report: Option<PathBuf>,
    /// Seconds one engine's workload may run before its process is killed and the job counted
    /// as failed (a hung engine must not hang the run)
    #[arg(long, default_value_t = 1800)]
    job_timeout_secs: u64,
    /// Internal: run one ENGINE/WORKLOAD/ROUND here and print its rows (each job runs in a
    /// child process of its own, so its memory figures are its own)
    #[arg(long, hide = true, requires = "child_dir")]
    child_run: Option<String>,
    /// Internal: the child's database directory
    #[arg(long, hide = true)]
    child_dir: Option<PathBuf>,
}

/// A duration given as bare seconds (`600`) or as humantime spells it (`10m`, `30s`).
fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    match text.parse::<u64>() {
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(text).map_err(|e| e.to_string()),
    }
}

fn compiled_engines() -> Vec<EngineKind> {
    let mut engines = vec![EngineKind::Cairn];
    if cfg!(feature = "fjall") {
        // Cairn on fjall's codec, for the columns side by side.
        engines.push(EngineKind::CairnLz4);
        engines.push(EngineKind::Fjall);
    }
    if cfg!(feature = "rocksdb") {
        engines.push(EngineKind::Rocksdb);
    }
    engines
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let (Some(spec), Some(dir)) = (&args.child_run, &args.child_dir) {
        return match plan(&args).and_then(|(_, _, settings)| child::serve(spec, dir, &settings)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cairn-bench: {spec}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let checked = check_args(&args).and_then(|()| plan(&args));
    match checked.and_then(|(engines, workloads, settings)| {
        let report = run_rounds(&args, engines, &workloads, settings)?;
        let written = write_outputs(&args, &report);
        Ok((report, written))
    }) {
        Ok((report, true)) if report.failures.is_empty() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cairn-bench: {e}");
            ExitCode::from(2)
        }
    }
}

/// Refuses, before anything runs, arguments that would measure nothing (a zero count or
/// duration, which used to report zeros that read as results) and outputs that could not be
/// written (found only after the whole run, which then lost its JSON and chart).
fn check_args(args: &Args) -> Result<()> {
    let zero = [
        ("--num", args.num == 0),
        ("--reads", args.reads == Some(0)),
        ("--runs", args.runs == 0),
        ("--rww-secs", args.rww_secs.is_zero()),
        ("--rww-write-rate", args.rww_write_rate == 0),
        ("--rww-readers", args.rww_readers == 0),
        ("--churn-secs", args.churn_secs.is_zero()),
    ];
    if let Some((flag, _)) = zero.iter().find(|(_, bad)| *bad) {
        return Err(format!("{flag} must be above 0").into());
    }
    if args.churn_sample_secs < Duration::from_secs(1) {
        return Err("--churn-sample-secs must be at least 1s".into());
    }
    let prefix = args.report.as_deref();
    let outputs = args
        .json
        .iter()
        .chain(&args.chart)
        .cloned()
        .chain(prefix.map(|p| suffixed(p, ".txt")));
    for path in outputs {
        if path.file_name().is_none() || path.as_os_str().to_string_lossy().ends_with('/') {
            return Err(format!("{}: names a directory, not a file", path.display()).into());
        }
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(dir) = parent.filter(|d| !d.is_dir()) {
            return Err(format!("{}: no directory {}", path.display(), dir.display()).into());
        }
    }
    if prefix.is_some_and(|p| p.as_os_str().to_string_lossy().ends_with('/')) {
        return Err("--report takes a file prefix (reports/run1), not a directory".into());
    }
    Ok(())
}

/// The engines, workloads and settings the arguments ask for.
fn plan(args: &Args) -> Result<(Vec<EngineKind>, Vec<Workload>, Settings)> {
    let engines = if args.engines.is_empty() {
        compiled_engines()
    } else {
        let engines = args
            .engines
            .iter()
            .map(|e| EngineKind::parse(e.trim()))
            .collect::<Result<Vec<_>>>()?;
        if let Some(e) = engines
            .iter()
            .find(|e| !e.is_cairn() && !compiled_engines().contains(e))
        {
            return Err(format!(
                "{} is not compiled in: build with `--features {}`",
                e.name(),
                e.name()
            )
            .into());
        }
        engines
    };
    let mut workloads = Vec::new();
    for name in &args.workloads {
        let w = Workload::parse(name.trim())?;
        if !workloads.contains(&w) {
            workloads.push(w);
        }
    }
    if workloads.is_empty() {
        workloads = Workload::default_list();
    }
    let settings = Settings {
        num: args.num,
        value_size: args.value_size,
        reads: args.reads.unwrap_or(args.num),
        seed: args.seed,
        queue_ops: args.queue_ops,
        queue_items: args.queue_items,
        queue_cap_secs: args.queue_cap_secs,
        idle_secs: args.idle_secs,
        keep_dirs: args.keep_dirs,
        uncompressed: args.uncompressed,
        memtable_bytes: args.memtable_mib.map(|m| m << 20),
        read_trigger: args.cairn_read_trigger,
        cairn_compression: args.cairn_compression,
        zstd_dictionary_bytes: args.cairn_zstd_dictionary_kib << 10,
        rww_duration: args.rww_secs,
        rww_write_rate: args.rww_write_rate,
        rww_readers: args.rww_readers,
        churn_duration: args.churn_secs,
        churn_sample: args.churn_sample_secs,
    };
    if settings.memtable_bytes.is_some() && engines.iter().any(|e| !e.is_cairn()) {
        return Err("--memtable-mib applies to cairn alone: run it with --engines cairn".into());
    }
    if settings.read_trigger.is_some() && engines.iter().any(|e| !e.is_cairn()) {
        return Err(
            "--cairn-read-trigger applies to cairn alone: run it with --engines cairn".into(),
        );
    }
    Ok((engines, workloads, settings))
}

/// Runs every workload on every engine, engines alternating, for `--runs` rounds.
fn run_rounds(
    args: &Args,
    engines: Vec<EngineKind>,
    workloads: &[Workload],
    settings: Settings,
) -> Result<Report> {
    let temp;
    let base = if let Some(dir) = &args.dir {
        std::fs::create_dir_all(dir)?;
        dir.clone()
    } else {
        temp = tempfile::tempdir()?;
        temp.path().to_path_buf()
    };
    eprintln!(
        "cairn-bench: engines {:?}, {} keys of 16 bytes, {}-byte values, {} round(s), in {}",
        engines.iter().map(|e| e.name()).collect::<Vec<_>>(),
        settings.num,
        settings.value_size,
        args.runs,
        base.display()
    );
    let mut report = Report {
        settings,
        engines,
        samples: Vec::new(),
        failures: Vec::new(),
    };
    for round in 0..args.runs {
        for &workload in workloads {
            for engine in report.engines.clone() {
                let dir = base.join(format!("r{round}-{}-{}", engine.name(), workload.name()));
                if dir.exists() {
                    std::fs::remove_dir_all(&dir)?;
                }
                let progress = format!("round {}/{}", round + 1, args.runs);
                let job = child::Job {
                    engine,
                    workload,
                    round,
                };
                // The soaks run for a set time: the timeout counts after it.
                let soak = match workload {
                    Workload::Churn => args.churn_secs,
                    Workload::ReadWhileWriting => args.rww_secs,
                    _ => Duration::ZERO,
                };
                let timeout = Duration::from_secs(args.job_timeout_secs) + soak;
                match child::run(job, &dir, timeout) {
                    Ok(rows) => {
                        for m in rows {
                            eprintln!(
                                "{progress} {:<18} {:<8} {:>9.3} s {:>12.0} ops/s{}",
                                m.row,
                                engine.name(),
                                m.secs,
                                m.ops_per_sec(),
                                m.fraction
                                    .map(|f| format!("  fraction {:.2}%", f * 100.0))
                                    .unwrap_or_default()
                            );
                            report.samples.push(Sample {
                                engine,
                                round,
                                measurement: m,
                            });
                        }
                    }
                    Err(e) => {
                        eprintln!(
                            "{progress} {} {}: FAILED: {e}",
                            workload.name(),
                            engine.name()
                        );
                        let _ = std::fs::remove_dir_all(&dir);
                        report.failures.push(Failure {
                            engine,
                            round,
                            workload: workload.name(),
                            error: e.to_string(),
                        });
                    }
                }
            }
        }
    }
    Ok(report)
}

/// `path` with `suffix` appended to its name: `/tmp/small` and `.json` give `/tmp/small.json`.
fn suffixed(path: &std::path::Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Writes the JSON files and the charts asked for (`--json`, `--chart`, `--report`), then
/// prints the report (last line: ratios), and writes it to `--report`'s `.txt` too; false if
/// any of them could not be written (each failure is said on stderr).
fn write_outputs(args: &Args, report: &Report) -> bool {
    let mut all = true;
    let prefix = args.report.as_deref();
    let jsons = args
        .json
        .iter()
        .cloned()
        .chain(prefix.map(|p| suffixed(p, ".json")));
    for path in jsons {
        let written = serde_json::to_string_pretty(&report.json())
            .map_err(Error::from)
            .and_then(|text| std::fs::write(&path, text).map_err(Error::from));
        match written {
            Ok(()) => eprintln!("wrote {}", path.display()),
            Err(e) => {
                eprintln!("cairn-bench: no JSON file: {e}");
                all = false;
            }
        }
    }
    // Each chart, and the churn chart beside it: `bench.png` and `bench-churn.png`.
    let charts = args
        .chart
        .iter()
        .cloned()
        .chain(prefix.map(|p| suffixed(p, ".png")));
    for path in charts {
        let bars: Vec<chart::Bars> = report
            .rows()
            .into_iter()
            .filter(|&row| row != "space_after_delete")
            .map(|row| {
                let per = report
                    .engines
                    .iter()
                    .filter_map(|&e| Some((e, report.summary(row, e)?.ops_per_sec)))
                    .collect();
                (row.to_string(), per)
            })
            .collect();
        let title = format!(
            "cairn-bench: median ops/s, {} keys x {} B values, {} run(s)",
            report.settings.num, report.settings.value_size, args.runs
        );
        match chart::draw(&path, &title, &report.engines, &bars) {
            Ok(()) => eprintln!("wrote {}", path.display()),
            Err(e) => {
                eprintln!("cairn-bench: no chart: {e}");
                all = false;
            }
        }
        let series: Vec<_> = report
            .engines
            .iter()
            .filter_map(|&e| Some((e, report.summary("churn", e)?.churn?)))
            .collect();
        if !series.is_empty() {
            let churn_path = suffixed(&path.with_extension(""), "-churn.png");
            let title = format!(
                "churn: {} keys x {} B values, medians of {} run(s)",
                report.settings.num, report.settings.value_size, args.runs
            );
            match chart::draw_churn(&churn_path, &title, &series) {
                Ok(()) => eprintln!("wrote {}", churn_path.display()),
                Err(e) => {
                    eprintln!("cairn-bench: no churn chart: {e}");
                    all = false;
                }
            }
        }
    }
    let text = report.text();
    if let Some(p) = prefix {
        let path = suffixed(p, ".txt");
        match std::fs::write(&path, &text) {
            Ok(()) => eprintln!("wrote {}", path.display()),
            Err(e) => {
                eprintln!("cairn-bench: no report file: {e}");
                all = false;
            }
        }
    }
    print!("{text}");
    all
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Args, check_args};

    fn checked(args: &[&str]) -> Result<(), String> {
        let args = Args::try_parse_from(std::iter::once("cairn-bench").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        check_args(&args).map_err(|e| e.to_string())
    }

    #[test]
    fn arguments_that_would_measure_nothing_or_lose_the_results_are_refused() {
        assert_eq!(checked(&[]), Ok(()));
        for bad in [
            &["--num", "0"][..],
            &["--reads", "0"],
            &["--runs", "0"],
            &["--rww-secs", "0s"],
            &["--rww-write-rate", "0"],
            &["--rww-readers", "0"],
            &["--churn-secs", "0"],
            &["--churn-sample-secs", "500ms"],
            &["--report", "/nonexistent-dir/run"],
            &["--report", "/tmp/"],
            &["--json", "/nonexistent-dir/a.json"],
            &["--chart", "/nonexistent-dir/a.png"],
        ] {
            assert!(checked(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            checked(&["--report", "/tmp/run", "--churn-secs", "2m"]),
            Ok(())
        );
    }
}
