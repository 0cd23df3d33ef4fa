//! The `cairn` binary: exit codes, a short stress, a short crash test of each kind.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

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
            "--kill-min",
            "300ms",
            "--kill-max",
            "800ms",
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

#[test]
fn purge_demo_erases_a_purged_row() {
    let out = cairn()
        .args(["purge", "demo", "--rows", "400", "--no-progress"])
        .output()
        .expect("run cairn");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("day  1: purged"), "{stdout}");
    assert!(stdout.contains("audit_key finds 0 traces"), "{stdout}");
}

#[test]
fn purge_once_purges_and_reports_json() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().expect("tempdir");
    let db_dir = dir.path().join("db");
    {
        let db = cairn::Db::open(&db_dir, cairn::Options::default()).expect("open");
        let tables = cairn_purger::Tables::open(Arc::new(db)).expect("tables");
        let t = tables
            .create_table(
                cairn_purger::Schema::new("t_cube_sandbox_spec")
                    .column("name", cairn_purger::ColumnType::Text)
                    .soft_delete(),
            )
            .expect("create");
        for (name, deleted_at) in [("old", Some(1_000)), ("live", None)] {
            let row = cairn_purger::Row::new()
                .set("name", name)
                .set("deleted_at", deleted_at.map(cairn_purger::Value::Timestamp));
            t.insert(row).expect("insert");
        }
    }
    let config = dir.path().join("purge.yaml");
    let run = |yaml: &str, extra: &[&str]| {
        std::fs::write(&config, yaml).expect("write config");
        let out = cairn()
            .args(["purge", "--once", "--json", "--db"])
            .arg(&db_dir)
            .arg("--config")
            .arg(&config)
            .args(extra)
            .output()
            .expect("run cairn");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code(), stdout)
    };
    let (code, stdout) = run("soft_delete_purge:\n  enable: false\n", &[]);
    assert_eq!(code, Some(0));
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
    assert_eq!(report["skipped"], true, "{stdout}");

    let enabled = "common:\n  disable_hard_delete: true\nsoft_delete_purge:\n  enable: true\n";
    let (code, stdout) = run(enabled, &[]);
    assert_eq!(
        code,
        Some(1),
        "t_cube_template_replica does not exist here: {stdout}"
    );
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
    let tables = report["tables"].as_array().expect("tables");
    assert_eq!(
        tables.len(),
        2,
        "disable_hard_delete leaves the instance tables out: {stdout}"
    );
    assert_eq!(tables[0]["table"], "t_cube_sandbox_spec");
    assert_eq!(tables[0]["purged"], 1, "{stdout}");
    assert_eq!(tables[1]["table"], "t_cube_template_replica");
    // A config that says nothing of disable_hard_delete (maybe one cut short) keeps the
    // instance tables out; only `false` in so many words makes them targets.
    let (_, stdout) = run("soft_delete_purge:\n  enable: true\n", &[]);
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
    assert_eq!(
        report["tables"].as_array().map(Vec::len),
        Some(2),
        "{stdout}"
    );
    let (_, stdout) = run(
        "common:\n  disable_hard_delete: false\nsoft_delete_purge:\n  enable: true\n",
        &[],
    );
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
    assert_eq!(
        report["tables"].as_array().map(Vec::len),
        Some(4),
        "{stdout}"
    );

    let (code, stdout) = run(enabled, &["--tables", "t_cube_sandbox_spec"]);
    assert_eq!(code, Some(0), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
    assert_eq!(
        report["tables"][0]["purged"], 0,
        "the live row stays: {stdout}"
    );

    for (yaml, extra) in [
        ("soft_delete_purge:\n  retention: 7 days\n", &[][..]),
        (
            "soft_delete_purge:\n  enable: true\n",
            &["--lock", "other"][..],
        ),
    ] {
        let (code, stdout) = run(yaml, extra);
        assert_eq!(code, Some(3), "{yaml} {extra:?}: {stdout}");
    }
    let missing = cairn()
        .args(["purge", "--once", "--config"])
        .arg(&config)
        .output()
        .expect("run cairn");
    assert_eq!(missing.status.code(), Some(3), "DB is required");
}

/// Logs written to a file or a pipe carry no colour codes (the walk found them in files), and
/// a stdout that cannot be written (a full disk) is one line on stderr and exit 2, never a
/// Rust panic report.
#[test]
fn logs_to_a_file_have_no_colour_and_a_full_stdout_is_a_plain_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let put = cairn()
        .args(["put", "--create"])
        .arg(&db)
        .args(["k", "v"])
        .output()
        .expect("put");
    assert_eq!(put.status.code(), Some(0), "{put:?}");
    let config = dir.path().join("purge.yaml");
    std::fs::write(&config, "soft_delete_purge:\n  enable: true\n").expect("config");
    let purge = cairn()
        .args(["purge", "--once", "--db"])
        .arg(&db)
        .arg("--config")
        .arg(&config)
        .output()
        .expect("purge");
    let stderr = String::from_utf8_lossy(&purge.stderr);
    assert!(stderr.contains("WARN"), "a warning was logged: {stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a log file: {stderr:?}"
    );
    let full = std::fs::File::create("/dev/full").expect("/dev/full");
    let get = cairn()
        .arg("get")
        .arg(&db)
        .arg("k")
        .stdout(full)
        .output()
        .expect("get");
    let stderr = String::from_utf8_lossy(&get.stderr);
    assert_eq!(get.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot write the output"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `cairn purge` on a database that has no purger tables writes nothing into it (it used to
/// create the tables' family and apply the migration, unasked); `--init` creates them.
#[test]
fn purge_writes_into_a_database_without_tables_only_with_init() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let put = cairn()
        .args(["put", "--create"])
        .arg(&db)
        .args(["k", "v"])
        .output()
        .expect("put");
    assert_eq!(put.status.code(), Some(0), "{put:?}");
    let config = dir.path().join("purge.yaml");
    std::fs::write(&config, "soft_delete_purge:\n  enable: true\n").expect("config");
    let files = |dir: &std::path::Path| -> Vec<(String, Vec<u8>)> {
        let mut all: Vec<_> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| {
                let path = e.expect("entry").path();
                let bytes = std::fs::read(&path).unwrap_or_default();
                (path.display().to_string(), bytes)
            })
            .collect();
        all.sort();
        all
    };
    let before = files(&db);
    let purge = |extra: &[&str]| {
        cairn()
            .args(["purge", "--once", "--db"])
            .arg(&db)
            .arg("--config")
            .arg(&config)
            .args(extra)
            .output()
            .expect("purge")
    };
    let refused = purge(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--init"), "{stderr}");
    assert!(files(&db) == before, "a refused purge changed the database");
    let init = purge(&["--init"]);
    let stderr = String::from_utf8_lossy(&init.stderr);
    assert!(stderr.contains("applied migration"), "{stderr}");
    assert!(files(&db) != before, "--init created the tables");
}
