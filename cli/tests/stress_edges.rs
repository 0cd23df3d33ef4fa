//! The harness's own edges (issue 32 items 3, 11-13): `stress` leaves a user's database alone
//! unless told, runs that would exercise nothing are refused, Ctrl-C ends a run with its
//! verification and report, and a replay takes its settings from the op log.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cairn::{Db, Options};

fn cairn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits for `child` at most `limit`; kills it and fails the test if it runs longer.
fn finish_within(mut child: Child, limit: Duration) -> Output {
    let started = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "still running after {limit:?}\nstdout: {}\nstderr: {}",
                text(&out.stdout),
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("wait")
}

fn run_within(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cairn");
    finish_within(child, limit)
}

fn send(signal: &str, child: &Child) {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Spawns `command` with piped output and waits for its first stderr line, which starts with
/// `banner` once the run has started (and its signal handler is in place); the rest of stderr
/// is left to read.
fn started(command: &mut Command, banner: &str) -> (Child, BufReader<std::process::ChildStderr>) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cairn");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut first = String::new();
    stderr.read_line(&mut first).expect("first line");
    assert!(first.starts_with(banner), "{first}");
    (child, stderr)
}

/// A database as a user leaves it: a few keys in the default family.
fn user_database(dir: &Path) {
    let db = Db::open(dir, Options::default()).expect("open");
    for i in 0..100 {
        db.put(format!("user{i}"), format!("value{i}"))
            .expect("put");
    }
    db.close().expect("close");
}

#[test]
fn stress_refuses_a_users_database_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    user_database(dir.path());
    let before = common::contents(dir.path());
    let out = run_within(
        cairn()
            .args([
                "stress", "--ops", "500", "--keys", "1000", "--quiet", "--db",
            ])
            .arg(dir.path()),
        Duration::from_secs(60),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("--reuse"), "{stderr}");
    let after = common::contents(dir.path());
    assert!(
        common::changed(&before, &after).is_empty(),
        "changed: {:?}",
        common::changed(&before, &after)
    );
    let out = run_within(
        cairn()
            .args([
                "stress", "--ops", "500", "--keys", "1000", "--quiet", "--reuse",
            ])
            .arg("--db")
            .arg(dir.path()),
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(
        db.get("user7").expect("get").as_deref(),
        Some(&b"value7"[..])
    );
}

#[test]
fn stress_runs_again_on_a_database_it_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    for run in 0..2 {
        let out = run_within(
            cairn()
                .args([
                    "stress", "--ops", "300", "--keys", "1000", "--quiet", "--db",
                ])
                .arg(&db),
            Duration::from_secs(120),
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "run {run}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn runs_that_would_exercise_nothing_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").expect("write");
    let empty = empty.to_string_lossy().into_owned();
    for args in [
        &["stress", "--duration", "0", "--keys", "1000"][..],
        &["crashtest", "--cycles", "0", "--keys", "1000"],
        &[
            "crashtest",
            "--cycles",
            "0",
            "--duration",
            "2s",
            "--keys",
            "1000",
        ],
        &["stress", "replay", "--log", &empty],
    ] {
        let out = run_within(cairn().args(args), Duration::from_secs(60));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "cairn {args:?}: {stderr}");
        assert!(
            stderr.contains("exercised nothing"),
            "cairn {args:?}: {stderr}"
        );
    }
}

/// Mistakes a newcomer made with `stress erasure`, each refused (exit 3) before anything runs
/// and without touching the directory: a subcommand after a flag (clap took it for `DB`), a
/// figure that is not a PNG, a directory that is not empty.
#[test]
fn erasure_mistakes_are_refused_before_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("notes.txt"), "mine").expect("write");
    let busy = dir.path().to_string_lossy().into_owned();
    let svg = dir.path().join("figure.svg").to_string_lossy().into_owned();
    for (args, says) in [
        (
            &["stress", "--seed", "1", "erasure"][..],
            "a subcommand comes first",
        ),
        (
            &["stress", "erasure", "--plot", &svg],
            "the figure is a PNG",
        ),
        (&["stress", "erasure", &busy], "is not empty"),
    ] {
        let out = run_within(cairn().args(args), Duration::from_secs(60));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "cairn {args:?}: {stderr}");
        assert!(stderr.contains(says), "cairn {args:?}: {stderr}");
    }
    assert!(
        !Path::new("erasure").exists(),
        "a stress ran into ./erasure"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("list").collect();
    assert_eq!(left.len(), 1, "the directory was written into");
}

/// A peer this build leaves out is refused with the feature that builds it in, before anything
/// is opened (the default build compiles no peer).
#[test]
#[cfg(not(feature = "fjall"))]
fn a_peer_left_out_of_the_build_is_refused_with_its_feature() {
    for args in [
        &["stress", "--engine", "fjall", "--duration", "1s"][..],
        &["crashtest", "--engine", "fjall", "--cycles", "1"],
    ] {
        let out = run_within(cairn().args(args), Duration::from_secs(60));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "cairn {args:?}: {stderr}");
        assert!(
            stderr.contains("--features fjall"),
            "cairn {args:?}: {stderr}"
        );
    }
}

#[test]
fn a_kill_window_upside_down_and_zero_faults_are_refused() {
    for args in [
        &[
            "crashtest",
            "--mode",
            "blackbox",
            "--cycles",
            "1",
            "--keys",
            "1000",
            "--kill-min",
            "600ms",
            "--kill-max",
            "300ms",
        ][..],
        &[
            "stress",
            "--ops",
            "200",
            "--keys",
            "1000",
            "--inject-errors",
            "0",
        ],
    ] {
        let out = run_within(cairn().args(args), Duration::from_secs(120));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "cairn {args:?}: {stderr}");
    }
}

#[test]
fn cycles_bound_a_timed_crashtest() {
    // `--cycles` and `--duration` together: whichever comes first ends the run.
    let out = run_within(
        cairn().args([
            "crashtest",
            "--mode",
            "power-loss",
            "--cycles",
            "2",
            "--duration",
            "1h",
            "--keys",
            "1000",
        ]),
        Duration::from_secs(120),
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("power-loss: 2 cycles survived"), "{stdout}");
}

#[test]
fn ctrl_c_stops_a_stress_verifies_and_reports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("report.json");
    let (child, _stderr) = started(
        cairn()
            .args([
                "stress",
                "--duration",
                "1h",
                "--keys",
                "2000",
                "--threads",
                "2",
                "--no-progress",
                "--report",
            ])
            .arg(&report),
        "cairn stress:",
    );
    std::thread::sleep(Duration::from_millis(1500));
    send("-INT", &child);
    let out = finish_within(child, Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("interrupted"), "{stdout}");
    assert!(stdout.contains("lost writes 0"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    assert_eq!(json["interrupted"], serde_json::Value::Bool(true), "{json}");
    assert!(
        json["verifications"].as_u64().is_some_and(|v| v > 0),
        "{json}"
    );
}

#[test]
fn a_second_ctrl_c_exits_at_once_and_deletes_the_temporary_database() {
    // The temporary database goes under a directory of the test's own, to see what is left.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (child, mut stderr) = started(
        cairn()
            .args([
                "stress",
                "--duration",
                "1h",
                "--keys",
                "50000",
                "--threads",
                "2",
                "--no-progress",
            ])
            .env("TMPDIR", tmp.path()),
        "cairn stress:",
    );
    std::thread::sleep(Duration::from_secs(2));
    let made = std::fs::read_dir(tmp.path()).expect("read tmp").count();
    assert_eq!(
        made, 1,
        "the run made no temporary database where the test looks"
    );
    send("-INT", &child);
    // The second signal only once the first is handled: two at once may merge into one.
    let mut line = String::new();
    while !line.contains("cairn: interrupted;") {
        line.clear();
        let read = stderr.read_line(&mut line).expect("stderr");
        assert!(read > 0, "the run ended before saying it was interrupted");
    }
    send("-INT", &child);
    let out = finish_within(child, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stdout));
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("read tmp")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn sigterm_stops_a_crashtest_after_a_verified_cycle() {
    let (child, _stderr) = started(
        cairn().args([
            "crashtest",
            "--mode",
            "blackbox",
            "--duration",
            "1h",
            "--keys",
            "1000",
            "--kill-min",
            "200ms",
            "--kill-max",
            "400ms",
        ]),
        "cairn crashtest:",
    );
    std::thread::sleep(Duration::from_millis(2500));
    send("-TERM", &child);
    let out = finish_within(child, Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("interrupted"), "{stdout}");
    assert!(stdout.contains("PASS"), "{stdout}");
}

#[test]
fn a_replay_takes_its_settings_from_the_op_log_and_refuses_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("ops.jsonl");
    let out = run_within(
        cairn()
            .args([
                "stress",
                "--ops",
                "2000",
                "--keys",
                "500",
                "--max-value-size",
                "64",
                "--threads",
                "2",
                "--quiet",
                "--op-log",
            ])
            .arg(&log),
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    // No flags: the log's own settings.
    let out = run_within(
        cairn().args(["stress", "replay", "--log"]).arg(&log),
        Duration::from_secs(120),
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("PASS"), "{stdout}");
    // A setting that disagrees with the log is refused, not judged as wrong values.
    for conflicting in [["--keys", "1000"], ["--max-value-size", "200"]] {
        let out = run_within(
            cairn()
                .args(["stress", "replay"])
                .args(conflicting)
                .arg("--log")
                .arg(&log),
            Duration::from_secs(120),
        );
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{conflicting:?}: {stderr}{}",
            text(&out.stdout)
        );
        assert!(stderr.contains(conflicting[0]), "{stderr}");
    }
    // The same values as the log's are accepted.
    let out = run_within(
        cairn()
            .args(["stress", "replay", "--keys", "500", "--log"])
            .arg(&log),
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
