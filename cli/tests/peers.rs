//! `cairn stress --engine fjall` and `cairn crashtest --engine fjall` from the command line:
//! a short stress passes and its JSON report names the engine and what it skipped; the
//! blackbox loop kills a fjall child and checks it, reporting power loss as skipped; what only
//! Cairn can run is refused with exit 3. Built only with `--features fjall` (CI runs it).
#![cfg(feature = "fjall")]
#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

use std::process::{Command, Output};

fn cairn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("run cairn")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn a_short_fjall_stress_passes_and_reports_what_it_skipped() {
    let out = cairn(&[
        "stress",
        "--engine",
        "fjall",
        "--duration",
        "3s",
        "--keys",
        "5000",
        "--json",
        "--memtable-size",
        "64KiB",
    ]);
    let report = json(&out);
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(report["engine"], "fjall");
    assert_eq!(report["flushes"], serde_json::Value::Null);
    assert!(report["skipped"]["ttl"].is_string(), "{report:#}");
    assert!(report["emulated"]["delete_range"].is_string(), "{report:#}");
    assert!(
        report["verifications"].as_u64().unwrap_or(0) > 10_000,
        "{report:#}"
    );
}

#[test]
fn a_fjall_crashtest_kills_and_checks_its_child_and_skips_power_loss() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    let out = cairn(&[
        "crashtest",
        "--engine",
        "fjall",
        "--cycles",
        "2",
        "--keys",
        "2000",
        "--kill-min",
        "300ms",
        "--kill-max",
        "800ms",
        "--json",
        &work.to_string_lossy(),
    ]);
    let report = json(&out);
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    let modes = report["modes"].as_array().expect("modes");
    let blackbox = &modes[0];
    assert_eq!(blackbox["mode"], "blackbox");
    assert_eq!(blackbox["engine"], "fjall");
    assert_eq!(blackbox["cycles"], 2, "{report:#}");
    assert!(blackbox["verifications"].as_u64().unwrap_or(0) >= 4_000);
    assert!(blackbox["writes"].as_u64().unwrap_or(0) > 0, "{report:#}");
    assert_eq!(modes[1]["mode"], "power-loss");
    assert!(modes[1]["skipped"].is_string(), "{report:#}");
    // The child really ran fjall: its keyspace folder is there.
    assert!(
        work.join("blackbox/db/keyspaces").is_dir(),
        "no fjall database made"
    );
}

#[test]
fn what_only_cairn_runs_is_refused_for_fjall() {
    for (args, says) in [
        (
            &["stress", "--engine", "fjall", "--inject-errors", "10"][..],
            "cairn alone",
        ),
        (
            &["crashtest", "--engine", "fjall", "--mode", "power-loss"],
            "cairn alone",
        ),
        (
            &["stress", "--engine", "fjall", "--grace", "1s"],
            "Cairn's tombstone settings",
        ),
        (
            &[
                "stress",
                "--engine",
                "fjall",
                "--mix",
                "put=0,batch=0,delete=0,single_delete=0,delete_range=0",
            ],
            "exercised nothing",
        ),
    ] {
        let out = cairn(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "cairn {args:?}: {stderr}");
        assert!(stderr.contains(says), "cairn {args:?}: {stderr}");
    }
}

/// A directory a stress or crash test of one engine made is refused to another: a marker from
/// before engines were named is Cairn's, and a crash work dir records its engine.
#[test]
fn directories_of_another_engine_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = dir.path().join("old");
    std::fs::create_dir(&old).expect("mkdir");
    std::fs::write(
        old.join("CAIRN-STRESS"),
        "A `cairn stress` database: later stresses may write into it.\n",
    )
    .expect("marker");
    let out = cairn(&[
        "stress",
        "--engine",
        "fjall",
        "--ops",
        "10",
        &old.to_string_lossy(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("a stress database of cairn"), "{stderr}");
    let work = dir.path().join("work");
    let work = work.to_string_lossy();
    let out = cairn(&[
        "crashtest",
        "--engine",
        "fjall",
        "--cycles",
        "1",
        "--keys",
        "1000",
        &work,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = cairn(&["crashtest", "--mode", "blackbox", "--cycles", "1", &work]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("a stress database of fjall"), "{stderr}");
}

#[test]
fn a_fjall_database_is_refused_to_cairn_and_its_op_log_replays_on_fjall() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let log = dir.path().join("ops.jsonl");
    let (db, log) = (db.to_string_lossy(), log.to_string_lossy());
    let out = cairn(&[
        "stress", "--engine", "fjall", "--ops", "3000", "--keys", "1000", "--op-log", &log,
        "--quiet", &db,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for engine in ["cairn", "rocksdb"] {
        let out = cairn(&["stress", "--engine", engine, "--reuse", "--ops", "10", &db]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "--engine {engine}: {stderr}");
        assert!(
            stderr.contains("a stress database of fjall") || stderr.contains("--features rocksdb"),
            "--engine {engine}: {stderr}"
        );
    }
    let out = cairn(&["stress", "replay", "--log", &log, "--json"]);
    let report = json(&out);
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(report["engine"], "fjall", "{report:#}");
}

#[test]
fn the_erasure_figure_of_fjall_is_measured_and_drawn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let png = dir.path().join("erasure.png");
    let out = cairn(&[
        "stress",
        "erasure",
        "--engine",
        "fjall",
        "--keys",
        "2000",
        "--settle",
        "1s",
        "--sample",
        "500ms",
        "--json",
        "--plot",
        &png.to_string_lossy(),
    ]);
    let report = json(&out);
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(report["engine"], "fjall");
    let samples = report["samples"].as_array().expect("samples");
    let phases: Vec<&str> = samples.iter().filter_map(|s| s["phase"].as_str()).collect();
    for phase in ["after deletes", "after full compaction", "after close"] {
        assert!(phases.contains(&phase), "no {phase} sample: {phases:?}");
    }
    let live = report["live_values"].as_u64().expect("live_values");
    assert!(
        samples
            .iter()
            .all(|s| s["live_found"].as_u64() == Some(live))
    );
    assert!(
        std::fs::metadata(&png).map_or(0, |m| m.len()) > 10_000,
        "no figure drawn"
    );
}
