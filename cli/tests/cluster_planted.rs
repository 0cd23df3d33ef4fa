//! The cluster stress catches a node that serves reads without confirming its leadership (the
//! planted bug "local reads", `--features planted-bugs`), as a stale read by the leader it
//! paused and resumed; its bug-free twin, the same run without the bug, finds nothing.

#![cfg(feature = "planted-bugs")]
#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

use std::process::{Command, Output};

const CAIRN: &str = env!("CARGO_BIN_EXE_cairn");

fn stress(seed: &str, bug: Option<&str>) -> (Output, serde_json::Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut command = Command::new(CAIRN);
    command
        .args([
            "stress",
            "--cluster",
            "3",
            "--duration",
            "25s",
            "--seed",
            seed,
        ])
        .args(["--json", "--db"])
        .arg(dir.path().join("run"));
    match bug {
        Some(bug) => command.env("CAIRN_PLANTED_BUG", bug),
        None => command.env_remove("CAIRN_PLANTED_BUG"),
    };
    let out = command.output().expect("run cairn");
    let report = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out, report)
}

/// Runs with the bug allowed before it counts as missed: the faults fall at times the machine's
/// load decides, and a probe can lose its race with the new leader's messages.
const ATTEMPTS: usize = 3;

#[test]
fn local_reads_are_caught_as_stale_reads_and_the_twin_passes() {
    let seed = "2";
    let (out, report) = stress(seed, None);
    assert_eq!(out.status.code(), Some(0), "the twin: {report}");
    assert!(report["pauses"].as_u64() >= Some(1), "{report}");
    let caught = (0..ATTEMPTS).any(|attempt| {
        let (out, report) = stress(seed, Some("local-reads"));
        println!("run {attempt} with the bug: {report}");
        let stale = report["failures"]
            .as_array()
            .expect("failures")
            .iter()
            .any(|f| f["kind"] == "stale read");
        out.status.code() == Some(1) && stale
    });
    assert!(caught, "local reads went unnoticed in {ATTEMPTS} runs");
}
