//! The cluster stress catches each planted node bug (`--features planted-bugs`), and its
//! bug-free twin, the same run without the bug, finds nothing:
//! - `local-reads` (a node serves reads without confirming its leadership): a stale read by
//!   the leader the run paused and resumed;
//! - `early-ack` (an append acknowledged before its sync): lost writes after the whole
//!   cluster's power is cut;
//! - `torn-install` (a snapshot recorded as applied before its data is written): lost writes
//!   or resurrected deletes on the node crashed while it installed the snapshot.

#![cfg(feature = "planted-bugs")]
#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

use std::process::{Command, Output};

const CAIRN: &str = env!("CARGO_BIN_EXE_cairn");

/// A cluster stress of `duration` injecting `faults`, with `bug` planted in every node.
fn stress(
    seed: &str,
    faults: &str,
    duration: &str,
    bug: Option<&str>,
) -> (Output, serde_json::Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut command = Command::new(CAIRN);
    command
        .args(["stress", "--cluster", "3", "--seed", seed])
        .args(["--faults", faults, "--duration", duration])
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

/// The twin passes every run, and injects what `counter` counts within [`ATTEMPTS`] runs (on a
/// loaded machine a crash can miss the window it aims at: a CI run beside other builds saw a
/// twin with no crash during an install); the bug is caught as one of `kinds` within
/// [`ATTEMPTS`] runs.
fn caught_beside_its_twin(bug: &str, faults: &str, duration: &str, counter: &str, kinds: &[&str]) {
    let seed = "2";
    let exercised = (0..ATTEMPTS).any(|attempt| {
        let (out, report) = stress(seed, faults, duration, None);
        assert_eq!(out.status.code(), Some(0), "the twin of {bug}: {report}");
        println!("twin run {attempt}: {counter} {}", report[counter]);
        report[counter].as_u64() >= Some(1)
    });
    assert!(
        exercised,
        "the twin of {bug} had no {counter} in {ATTEMPTS} runs"
    );
    let caught = (0..ATTEMPTS).any(|attempt| {
        let (out, report) = stress(seed, faults, duration, Some(bug));
        println!("run {attempt} with {bug}: {report}");
        let named = report["failures"]
            .as_array()
            .expect("failures")
            .iter()
            .any(|f| kinds.iter().any(|kind| f["kind"] == *kind));
        out.status.code() == Some(1) && named
    });
    assert!(caught, "{bug} went unnoticed in {ATTEMPTS} runs");
}

#[test]
fn local_reads_are_caught_as_stale_reads_and_the_twin_passes() {
    caught_beside_its_twin(
        "local-reads",
        "pause,kill",
        "25s",
        "pauses",
        &["stale read"],
    );
}

#[test]
fn an_early_ack_is_caught_as_lost_writes_and_the_twin_passes() {
    caught_beside_its_twin(
        "early-ack",
        "cluster-crash",
        "10s",
        "cluster_crashes",
        &["lost write"],
    );
}

#[test]
fn a_torn_install_is_caught_on_the_crashed_node_and_the_twin_passes() {
    caught_beside_its_twin(
        "torn-install",
        "past-grace",
        "25s",
        "crashes_while_installing",
        &["lost write", "resurrected delete"],
    );
}
