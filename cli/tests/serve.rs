//! `cairn serve`, `cairn cluster` and `cairn kv --cluster` as an operator runs them: three node
//! processes on loopback, formed from one by `init` and `add`, written and read through any
//! node, a node removed, every process stopped by SIGTERM with exit 0; and the mistakes an
//! operator makes refused with exit 3.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const CAIRN: &str = env!("CARGO_BIN_EXE_cairn");

fn cairn(args: &[&str]) -> Output {
    Command::new(CAIRN).args(args).output().expect("run cairn")
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A loopback address no one listens on now.
fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").to_string()
}

/// A `cairn serve` process, killed if the test fails before it stops it.
struct ServeProcess(Child);

impl ServeProcess {
    fn start(id: u64, dir: &std::path::Path, addr: &str) -> Self {
        let child = Command::new(CAIRN)
            .args(["serve", "--id", &id.to_string(), "--listen", addr])
            .args(["--heartbeat", "50ms", "--election-min", "300ms"])
            .args(["--election-max", "600ms", "--dir"])
            .arg(dir.join(format!("node-{id}")))
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cairn serve");
        let started = Instant::now();
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "node {id} never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self(child)
    }

    /// SIGTERM, then the exit code.
    fn stop(mut self) -> Option<i32> {
        let pid = rustix::process::Pid::from_raw(i32::try_from(self.0.id()).expect("pid"))
            .expect("a pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        self.0.wait().expect("wait").code()
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn three_node_processes_formed_written_read_shrunk_and_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addrs: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let nodes: Vec<ServeProcess> = (1..=3)
        .zip(&addrs)
        .map(|(id, addr)| ServeProcess::start(id, dir.path(), addr))
        .collect();
    let cluster = addrs.join(",");

    let out = cairn(&["cluster", "init", &addrs[0]]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for (id, addr) in [(2, &addrs[1]), (3, &addrs[2])] {
        let node = format!("{id}={addr}");
        let out = cairn(&["cluster", "add", "--cluster", &addrs[0], &node]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }
    for args in [
        vec!["put", "user/1", "ada"],
        vec!["put", "user/2", "grace"],
        vec!["put", "session/9", "token", "--ttl", "1h"],
        vec!["delete", "user/2"],
    ] {
        let mut full = vec!["kv", "--cluster", &cluster];
        full.extend(args);
        let out = cairn(&full);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }
    // Through the last node, which is not the leader: the client finds it.
    let through = addrs[2].as_str();
    let out = cairn(&["kv", "--cluster", through, "get", "user/1"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ada\n",
        "{}",
        text(&out)
    );
    let out = cairn(&["kv", "--cluster", through, "get", "user/2"]);
    assert_eq!(out.status.code(), Some(1), "deleted: {}", text(&out));
    let out = cairn(&["kv", "--cluster", through, "scan", "--json"]);
    let lines = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(lines, 2, "session/9 and user/1: {}", text(&out));

    let out = cairn(&["cluster", "status", &cluster, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let statuses: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let leaders = statuses
        .as_array()
        .expect("one per node")
        .iter()
        .filter(|s| s["status"]["state"] == "Leader")
        .count();
    assert_eq!(leaders, 1, "{statuses}");

    let out = cairn(&["cluster", "remove", "--cluster", &cluster, "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = cairn(&["cluster", "status", &addrs[0], "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(status[0]["status"]["voters"], serde_json::json!([1, 2]));

    for (id, node) in (1..).zip(nodes) {
        assert_eq!(node.stop(), Some(0), "node {id} stops cleanly on SIGTERM");
    }
    // Every node gone: a client gives up with exit 2, having sent nothing.
    let out = cairn(&[
        "kv",
        "--cluster",
        &cluster,
        "--timeout",
        "1s",
        "put",
        "k",
        "v",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn an_operators_mistakes_are_refused_with_exit_3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let db = db.to_str().expect("utf-8");
    for args in [
        vec!["serve", "--dir", db, "--listen", "127.0.0.1:1"],
        vec![
            "serve",
            "--id",
            "1",
            "--dir",
            db,
            "--listen",
            "127.0.0.1:1",
            "--peers",
            "2=x:1",
        ],
        vec![
            "serve",
            "--id",
            "1",
            "--dir",
            db,
            "--listen",
            "127.0.0.1:1",
            "--peers",
            "1",
        ],
        vec!["serve", "--id", "0", "--dir", db, "--listen", "127.0.0.1:1"],
        // Two nodes at one address: one process would vote, and count, as both.
        vec![
            "serve",
            "--id",
            "1",
            "--dir",
            db,
            "--listen",
            "127.0.0.1:1",
            "--peers",
            "1=127.0.0.1:1,2=127.0.0.1:1",
        ],
        vec!["cluster", "add", "--cluster", "127.0.0.1:1", "4"],
        vec!["kv", "--cluster", "127.0.0.1:1", "--hex", "get", "zz"],
    ] {
        let out = cairn(&args);
        assert_eq!(out.status.code(), Some(3), "cairn {args:?}: {}", text(&out));
    }
    // A node that does not answer is not added (the leader would wait for it forever).
    let out = cairn(&[
        "cluster",
        "add",
        "--cluster",
        "127.0.0.1:1",
        "4=127.0.0.1:1",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("start it with `cairn serve` first"),
        "{}",
        text(&out)
    );
    let config = dir.path().join("node.yaml");
    std::fs::write(&config, "id: 1\nlisten: 127.0.0.1:1\nelection_min: 1s\n").expect("write");
    let out = cairn(&[
        "serve",
        "--dir",
        db,
        "--config",
        config.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(3), "an unknown key: {}", text(&out));
    assert!(text(&out).contains("election_min"), "{}", text(&out));
}

/// `cairn ARGS --cluster 3 --seed 1 --json` on a new directory, which must exit 0; its
/// report, and a reader of its counters.
fn passing_cluster_run(args: &[&str]) -> (serde_json::Value, impl Fn(&str) -> u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(CAIRN)
        .args(args)
        .args(["--cluster", "3", "--seed", "1", "--json", "--db"])
        .arg(dir.path().join("run"))
        .output()
        .expect("run cairn");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let counters = report.clone();
    let count = move |field: &str| counters[field].as_u64().expect(field);
    (report, count)
}

/// The cluster stress, short: node kills and pauses happen, every replica is read whole and
/// judged, nothing is wrong. (`cairn stress --cluster 3 --duration 10m` is the long run.)
#[test]
fn a_short_cluster_stress_kills_nodes_and_finds_nothing_wrong() {
    let (report, count) = passing_cluster_run(&["stress", "--duration", "12s"]);
    // The first fault pauses the leader and probes it as it wakes; kills follow.
    assert!(count("pauses") >= 1, "{report}");
    assert!(count("deposed_leader_probes") >= 1, "{report}");
    assert!(count("kills") >= 1, "{report}");
    assert!(count("replica_checks") >= 3, "{report}");
    assert!(count("acked_writes") >= 100, "{report}");
    assert!(count("reads") >= 20, "{report}");
    assert_eq!(report["failures"], serde_json::json!([]), "{report}");
}

#[test]
fn a_short_cluster_crashtest_cuts_every_nodes_power_and_loses_nothing() {
    let args = ["crashtest", "--duration", "8s", "--faults", "cluster-crash"];
    let (report, count) = passing_cluster_run(&args);
    assert!(count("cluster_crashes") >= 1, "{report}");
    assert!(count("power_cuts") >= 3, "{report}");
    assert!(count("replica_checks") >= 3, "{report}");
    assert!(count("acked_writes") >= 100, "{report}");
    assert_eq!(report["failures"], serde_json::json!([]), "{report}");
}

#[test]
fn a_nodes_directory_started_as_another_node_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("node-1");
    let db = db.to_str().expect("utf-8");
    // Node 1 starts on its directory once, and stops.
    let mut node = Command::new(CAIRN)
        .args(["serve", "--id", "1", "--dir", db, "--listen", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start node 1");
    // It says it listens once its store is open and its id recorded.
    let stderr = std::io::BufReader::new(node.stderr.take().expect("stderr"));
    let mut lines = std::io::BufRead::lines(stderr).map_while(Result::ok);
    let listening = lines.any(|line| line.contains("listening on"));
    assert!(listening, "node 1 never listened");
    // The rest is read to its end, so the node's last words have somewhere to go.
    let drain = std::thread::spawn(move || lines.count());
    let pid = rustix::process::Pid::from_raw(i32::try_from(node.id()).expect("pid")).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    assert_eq!(node.wait().expect("wait").code(), Some(0));
    drain.join().expect("drain");
    // The same directory as node 2: it would vote, and count, as a node it is not. A node
    // that starts instead is stopped after 20 s, and the test fails.
    let mut wrong = Command::new(CAIRN)
        .args(["serve", "--id", "2", "--dir", db, "--listen", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start");
    let started = std::time::Instant::now();
    while wrong.try_wait().expect("wait").is_none() && started.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = wrong.kill();
    let out = wrong.wait_with_output().expect("wait");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(said.contains("holds node 1's database"), "{said}");
    // A user's database is no node's: serving it would add families beside the user's data.
    let user = dir.path().join("user");
    let user = user.to_str().expect("utf-8");
    let out = cairn(&["put", user, "k", "v", "--create"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = cairn(&[
        "serve",
        "--id",
        "1",
        "--dir",
        user,
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("no node's"), "{}", text(&out));
}
