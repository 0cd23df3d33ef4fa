//! `cairn stress --cluster N` and `cairn crashtest --cluster N`: the cluster stress of
//! `cairn_stress::cluster` (the crash test injecting crashes alone), with this very binary's
//! `serve` as each node, in a temporary directory (kept when the run fails) or the one
//! given. Exit 0 when nothing was found wrong, 1 when something was, 2 when the cluster could
//! not be set up.

use std::path::PathBuf;
use std::time::Duration;

use cairn_stress::cluster::{ClusterConfig, ClusterReport, FaultKind, run_cluster};

use crate::output::{FAILED, NO, print_json};

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
    pub faults: Vec<FaultKind>,
    pub dir: Option<PathBuf>,
    pub json: bool,
    pub report: Option<PathBuf>,
}

pub fn run(run: &ClusterRun) -> i32 {
    if !(3..=7).contains(&run.nodes) {
        return crate::bad_args(&format!("--cluster {}: give 3 to 7 nodes", run.nodes));
    }
    if run.duration.is_zero() {
        return crate::bad_args("--duration 0 exercises nothing");
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
    config.faults.clone_from(&run.faults);
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
    if let Some(path) = &run.report
        && let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&report).unwrap_or_default())
    {
        eprintln!("cairn: cannot write {}: {e}", path.display());
    }
    if run.json {
        print_json(&report);
    } else {
        print_summary(&report);
    }
    if report.passed() {
        0
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
        "faults: {} node crashes ({} of the leader, {} by power cut, {} while installing a snapshot), {} whole-cluster power cuts, {} leader pauses ({} reads of the resumed old leader, {} answered), {} followers down past the grace period; {} catch-ups by snapshot; {} replicas read whole and judged{}",
        report.kills,
        report.leader_kills,
        report.power_cuts,
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
            .map_or_else(|| "the leader".to_owned(), |n| format!("node {n}"));
        println!(
            "  {} on {node}, {}: key {:?}: expected {}, read {}",
            failure.kind, failure.when, failure.key, failure.expected, failure.observed
        );
    }
}
