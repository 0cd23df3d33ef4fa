//! `cairn stress --cluster N` and `cairn crashtest --cluster N`: the cluster stress of
//! `cairn_stress::cluster` (the crash test injecting crashes alone), with this very binary's
//! `serve` as each node, in a temporary directory (kept when the run fails) or the one
//! given (new, empty or a stress's own). Exit 0 when nothing was found wrong, 1 when something
//! was (or no fault was injected), 2 when the cluster could not be set up or the report not
//! written, 3 for bad arguments.

use cairn_stress::engine::EngineKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_stress::cluster::{ClusterConfig, ClusterReport, FaultKind, run_cluster};

use crate::output::{BAD_ARGS, FAILED, NO, print_json};

/// What the `stress` flags ask of a cluster run.
#[derive(Debug)]
pub struct ClusterRun {
    /// `stress` or `crashtest`, as the banner names it.
    pub command: &'static str,
    pub nodes: usize,
    pub keys: Option<usize>,
    pub seed: u64,
    pub duration: Duration,
    pub grace: Option<Duration>,
    /// `--faults` as given, and what it means when it is not.
    pub faults: Option<String>,
    pub default_faults: &'static [FaultKind],
    pub dir: Option<PathBuf>,
    pub json: bool,
    pub report: Option<PathBuf>,
}

pub fn run(run: &ClusterRun) -> i32 {
    if !(3..=7).contains(&run.nodes) {
        return crate::bad_args(&format!("--cluster {}: give 3 to 7 nodes", run.nodes));
    }
    let faults = match run.faults.as_deref().map(FaultKind::parse_list) {
        None => run.default_faults.to_vec(),
        Some(Ok(faults)) => faults,
        Some(Err(why)) => return crate::bad_args(&format!("--faults: {why}")),
    };
    if run.duration.is_zero() {
        return crate::bad_args("--duration 0 exercises nothing");
    }
    if let Some(Err(code)) = run
        .report
        .as_deref()
        .map(|p| crate::output::check_output_path("--report", p))
    {
        return code;
    }
    if let Some(dir) = &run.dir
        && let Err(code) = claim(run.command, dir)
    {
        return code;
    }
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(e) => return crate::output::failed("finding the cairn binary", &e),
    };
    let temp = match &run.dir {
        Some(_) => None,
        None => match tempfile::Builder::new().prefix("cairn-cluster-").tempdir() {
            Ok(dir) => Some(dir),
            Err(e) => return crate::output::failed("making a temporary directory", &e),
        },
    };
    let dir = run
        .dir
        .clone()
        .or_else(|| temp.as_ref().map(|t| t.path().to_path_buf()))
        .unwrap_or_default();
    let mut config = ClusterConfig::new(program, dir.clone(), run.duration);
    config.nodes = run.nodes;
    config.seed = run.seed;
    if let Some(keys) = run.keys {
        config.keys = keys as u64;
    }
    if let Some(grace) = run.grace {
        config.grace = grace;
    }
    config.faults = faults;
    let faults: Vec<_> = config.faults.iter().map(|f| f.name()).collect();
    eprintln!(
        "cairn {} --cluster {}: seed {}, {} keys, grace {}, faults {}, for {} in {}",
        run.command,
        config.nodes,
        config.seed,
        config.keys,
        humantime::format_duration(config.grace),
        faults.join(","),
        humantime::format_duration(config.duration),
        dir.display()
    );
    let report = match run_cluster(&config) {
        Ok(report) => report,
        Err(why) => {
            eprintln!("cairn: the cluster could not be set up: {why}");
            return FAILED;
        }
    };
    let mut written = true;
    if let Some(path) = &run.report
        && let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&report).unwrap_or_default())
    {
        eprintln!("cairn: cannot write {}: {e}", path.display());
        written = false;
    }
    if run.json {
        print_json(&report);
    } else {
        print_summary(&report);
    }
    if report.passed() {
        if written { 0 } else { FAILED }
    } else {
        if let Some(temp) = temp {
            // Keep the nodes' logs and databases for whoever looks into it.
            let kept = temp.keep();
            eprintln!(
                "cairn: the nodes' logs and databases are kept in {}",
                kept.display()
            );
        }
        NO
    }
}

/// Makes `dir` the run's own: a directory that is missing, empty or a stress's own, never a
/// user's database (the nodes' databases and logs go there).
fn claim(command: &str, dir: &Path) -> Result<(), i32> {
    crate::db_arg::check_directory_if_present(dir)?;
    match cairn_stress::claim(dir, false, EngineKind::Cairn) {
        Ok(_) => {}
        Err(cairn_stress::StressError::Config(_)) => {
            eprintln!(
                "cairn {command}: {} is not empty and no stress created it: a cluster run puts \
                 its nodes' databases and logs there (node-1, node-1.log, …); give a new or \
                 empty directory",
                dir.display()
            );
            return Err(BAD_ARGS);
        }
        Err(e) => {
            eprintln!("cairn {command}: {e}");
            return Err(e.exit_code());
        }
    }
    let marked = std::fs::create_dir_all(dir)
        .map_err(cairn_stress::StressError::from)
        .and_then(|()| cairn_stress::mark(dir));
    marked.map_err(|e| {
        eprintln!("cairn {command}: {}: {e}", dir.display());
        FAILED
    })
}

fn print_summary(report: &ClusterReport) {
    println!(
        "{}: seed {}, {:.0}s, {} ops ({} writes acknowledged, {} uncertain, {} unavailable, {} reads judged)",
        if report.passed() { "PASS" } else { "FAIL" },
        report.seed,
        report.elapsed_secs,
        report.ops,
        report.acked_writes,
        report.uncertain_writes,
        report.unavailable,
        report.reads,
    );
    println!(
        "faults: node crashes {} ({} of the leader, {} by power cut, {} during a put, {} during a snapshot install), whole-cluster power cuts {}, leader pauses {} (reads of the resumed old leader {}, answered {}), followers down past the grace period {}; catch-ups by snapshot {}; replicas read whole and judged {}{}",
        report.kills,
        report.leader_kills,
        report.power_cuts,
        report.crashes_in_flight,
        report.crashes_while_installing,
        report.cluster_crashes,
        report.pauses,
        report.deposed_leader_probes,
        report.deposed_leader_reads,
        report.behind_past_grace,
        report.snapshot_catch_ups,
        report.replica_checks,
        if report.interrupted {
            " (interrupted)"
        } else {
            ""
        },
    );
    for failure in &report.failures {
        let node = failure
            .node
            .map_or_else(|| "the cluster".to_owned(), |n| format!("node {n}"));
        let key = if failure.key.is_empty() {
            String::new()
        } else {
            format!("key {:?}: ", failure.key)
        };
        println!(
            "  {} on {node}, {}: {key}expected {}, read {}",
            failure.kind, failure.when, failure.expected, failure.observed
        );
    }
}
