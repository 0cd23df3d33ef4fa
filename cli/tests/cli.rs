//! The `cairn` binary: exit codes, a short stress, a short crash test of each kind.

use std::process::Command;

fn cairn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
}

#[test]
fn bad_arguments_exit_with_3() {
    for args in [
        &["stress", "--threads", "0"][..],
        &["stress", "--mix", "nonsense=3"],
        &["stress", "--no-such-flag"],
        &["crashtest", "--mode", "sideways"],
    ] {
        let status = cairn().args(args).output().expect("run cairn").status;
        assert_eq!(status.code(), Some(3), "cairn {args:?}");
    }
    let help = cairn().arg("--help").output().expect("run cairn");
    assert_eq!(help.status.code(), Some(0));
}

#[test]
fn a_short_stress_passes_and_writes_a_json_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("report.json");
    let out = cairn()
        .args([
            "stress",
            "--ops",
            "3000",
            "--keys",
            "1000",
            "--quiet",
            "--memtable-size",
            "32768",
            "--report",
        ])
        .arg(&report)
        .output()
        .expect("run cairn");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("lost writes 0, resurrected deletes 0, holes 0, wrong values 0"),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    assert!(
        json.get("verifications")
            .and_then(serde_json::Value::as_u64)
            .is_some_and(|v| v > 0)
    );
}

#[test]
fn a_short_crashtest_survives_kills_and_power_losses() {
    let out = cairn()
        .args([
            "crashtest",
            "--cycles",
            "2",
            "--keys",
            "1000",
            "--kill-min-ms",
            "300",
            "--kill-max-ms",
            "800",
        ])
        .output()
        .expect("run cairn");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("blackbox: 2 cycles survived"), "{stdout}");
    assert!(stdout.contains("power-loss: 2 cycles survived"), "{stdout}");
}

#[test]
fn an_op_log_replays_to_the_same_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("ops.jsonl");
    let out = cairn()
        .args([
            "stress",
            "--ops",
            "2000",
            "--keys",
            "500",
            "--threads",
            "2",
            "--quiet",
            "--op-log",
        ])
        .arg(&log)
        .output()
        .expect("run cairn");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let replayed = cairn()
        .args(["stress", "replay", "--keys", "500", "--log"])
        .arg(&log)
        .output()
        .expect("replay");
    let stdout = String::from_utf8_lossy(&replayed.stdout);
    assert_eq!(replayed.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("PASS"), "{stdout}");
}
