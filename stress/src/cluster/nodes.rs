//! The cluster's node processes: each a `cairn serve` (the command given) on a loopback port
//! of its own, with its database and its log file in the run's directory. A node is killed
//! with SIGKILL, has its power cut (SIGUSR1 to a node run with `--simulate-power-loss`: its
//! unsynced bytes are dropped), is paused with SIGSTOP and resumed with SIGCONT, and is
//! restarted on the same database and port.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

/// How the nodes are run.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// The `cairn` binary (its `serve` command runs a node).
    pub program: PathBuf,
    /// The data's tombstone grace period.
    pub grace: Duration,
    /// A snapshot every this many entries.
    pub snapshot_every: u64,
    /// Elections after this much silence, at least (at most twice it).
    pub election_min: Duration,
    /// Log entries kept behind a snapshot: a node further behind catches up by snapshot.
    pub keep_behind_snapshot: u64,
    /// A snapshot install waits this long after each step it writes (`--install-pause`), so
    /// a crash can land inside one.
    pub install_pause: Duration,
    /// Whether the nodes run their databases through `FaultyFs`, so their power can be cut.
    pub power_loss: bool,
    /// The seed of each start's power-cut seed.
    pub seed: u64,
}

/// What a node exits with after its power was cut (`cairn serve`'s `POWER_CUT_EXIT`).
const POWER_CUT_EXIT: i32 = 137;

/// One node: its id, address, directory, and its process if it runs.
#[derive(Debug)]
pub struct NodeProc {
    /// Its id.
    pub id: u64,
    /// Where it listens.
    pub addr: String,
    dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
}

impl NodeProc {
    /// True while its process runs (paused or not).
    pub fn is_up(&self) -> bool {
        self.child.is_some()
    }

    /// True while it is stopped by SIGSTOP.
    pub fn is_paused(&self) -> bool {
        self.paused
    }
}

/// Every node of the cluster.
#[derive(Debug)]
pub struct Nodes {
    settings: NodeSettings,
    /// The nodes, by position (node `i + 1` at `i`).
    pub procs: Vec<NodeProc>,
    peers: String,
    /// How many starts so far; each start's power cut is seeded by it and the run's seed.
    starts: u64,
}

/// A free loopback port below Linux's ephemeral range (32768 and up). A port from binding
/// `:0` lies in that range, and the outgoing connections of the nodes already running draw
/// their source ports from it too: one could take a node's port while the node was down for a
/// restart, and the node exited with status 2 at its start (a local CI run saw it). Falls back
/// to `:0` if no port below is free.
fn free_port_below_ephemeral() -> std::io::Result<String> {
    use rand::Rng;
    let mut rng = rand::rng();
    for _ in 0..200 {
        let port: u16 = rng.random_range(10_000..32_000);
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return Ok(listener.local_addr()?.to_string());
        }
    }
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .to_string())
}

impl Nodes {
    /// `count` nodes under `dir`, each on a free loopback port; none started yet.
    ///
    /// # Errors
    /// If no port can be had.
    pub fn new(dir: &Path, count: usize, settings: NodeSettings) -> std::io::Result<Self> {
        let mut procs = Vec::new();
        for id in (1..).take(count) {
            let addr = free_port_below_ephemeral()?;
            procs.push(NodeProc {
                id,
                addr,
                dir: dir.join(format!("node-{id}")),
                log: dir.join(format!("node-{id}.log")),
                child: None,
                paused: false,
            });
        }
        let peers = procs
            .iter()
            .map(|p| format!("{}={}", p.id, p.addr))
            .collect::<Vec<_>>()
            .join(",");
        Ok(Self {
            settings,
            procs,
            peers,
            starts: 0,
        })
    }

    /// Every node's address.
    pub fn addrs(&self) -> Vec<String> {
        self.procs.iter().map(|p| p.addr.clone()).collect()
    }

    /// The node with this id.
    pub fn get(&self, id: u64) -> Option<&NodeProc> {
        self.procs.iter().find(|p| p.id == id)
    }

    fn get_mut(&mut self, id: u64) -> std::io::Result<&mut NodeProc> {
        self.procs
            .iter_mut()
            .find(|p| p.id == id)
            .ok_or_else(|| std::io::Error::other(format!("no node {id}")))
    }

    /// Starts node `id` and waits until it listens.
    ///
    /// # Errors
    /// If it cannot be spawned, or exits or never listens within 30 s.
    pub fn start(&mut self, id: u64) -> std::io::Result<()> {
        let settings = self.settings.clone();
        let peers = self.peers.clone();
        self.starts += 1;
        let cut_seed = settings
            .seed
            .wrapping_mul(1_000_003)
            .wrapping_add(self.starts);
        let node = self.get_mut(id)?;
        let log = File::options().create(true).append(true).open(&node.log)?;
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let mut command = Command::new(&settings.program);
        // A group of its own: a Ctrl-C at the terminal is the harness's to handle (it stops
        // the run and its nodes), not the nodes' to obey one by one.
        command.process_group(0);
        command.args(["serve", "--id", &id.to_string(), "--listen", &node.addr]);
        if settings.power_loss {
            let seed = cut_seed.to_string();
            command.args(["--simulate-power-loss", "--power-loss-seed", &seed]);
        }
        let mut child = command
            .arg("--dir")
            .arg(&node.dir)
            .args(["--peers", &peers, "--grace", &ms(settings.grace)])
            .args(["--snapshot-every", &settings.snapshot_every.to_string()])
            .args(["--heartbeat", &ms(settings.election_min / 5)])
            .args(["--election-min", &ms(settings.election_min)])
            .args(["--election-max", &ms(settings.election_min * 2)])
            .args([
                "--keep-behind-snapshot",
                &settings.keep_behind_snapshot.to_string(),
            ])
            .args(["--install-pause", &ms(settings.install_pause)])
            .arg("--die-with-parent")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        let started = Instant::now();
        while std::net::TcpStream::connect(&node.addr).is_err() {
            if let Some(status) = child.try_wait()? {
                return Err(std::io::Error::other(format!(
                    "node {id} exited ({status}) before it listened; see {}",
                    node.log.display()
                )));
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::io::Error::other(format!(
                    "node {id} did not listen within 30 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        node.child = Some(child);
        node.paused = false;
        Ok(())
    }

    /// Kills node `id` with SIGKILL and reaps it.
    ///
    /// # Errors
    /// If the signal or the wait fails.
    pub fn kill(&mut self, id: u64) -> std::io::Result<()> {
        let node = self.get_mut(id)?;
        if let Some(mut child) = node.child.take() {
            child.kill()?;
            child.wait()?;
        }
        node.paused = false;
        Ok(())
    }

    /// Cuts the power of the nodes `ids` at once (SIGUSR1 to each: every byte not synced is
    /// dropped and the process exits), and reaps them.
    ///
    /// # Errors
    /// If a signal fails, or a node does not end as a power cut ends it within 10 s (it is
    /// killed then).
    pub fn cut_power(&mut self, ids: &[u64]) -> std::io::Result<()> {
        for &id in ids {
            let node = self.get_mut(id)?;
            if let Some(child) = &node.child {
                kill_process(pid_of(child)?, Signal::USR1)?;
            }
        }
        let mut result = Ok(());
        for &id in ids {
            let node = self.get_mut(id)?;
            node.paused = false;
            let Some(mut child) = node.child.take() else {
                continue;
            };
            let started = Instant::now();
            let status = loop {
                if let Some(status) = child.try_wait()? {
                    break Some(status);
                }
                if started.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            if status.and_then(|s| s.code()) != Some(POWER_CUT_EXIT) && result.is_ok() {
                result = Err(std::io::Error::other(format!(
                    "node {id} did not end as a power cut ends it ({status:?}); see {}",
                    node.log.display()
                )));
            }
        }
        result
    }

    /// Stops node `id` with SIGSTOP (`pause`) or lets it go on with SIGCONT.
    ///
    /// # Errors
    /// If the node does not run or the signal fails.
    pub fn pause(&mut self, id: u64, pause: bool) -> std::io::Result<()> {
        let node = self.get_mut(id)?;
        let child = node
            .child
            .as_ref()
            .ok_or_else(|| std::io::Error::other(format!("node {id} is down")))?;
        let signal = if pause { Signal::STOP } else { Signal::CONT };
        kill_process(pid_of(child)?, signal)?;
        node.paused = pause;
        Ok(())
    }

    /// Checks that every node meant to run still does.
    ///
    /// # Errors
    /// Naming the first node that exited on its own.
    pub fn check_alive(&mut self) -> std::io::Result<()> {
        for node in &mut self.procs {
            if let Some(child) = &mut node.child
                && let Some(status) = child.try_wait()?
            {
                node.child = None;
                return Err(std::io::Error::other(format!(
                    "node {} exited on its own ({status}); see {}",
                    node.id,
                    node.log.display()
                )));
            }
        }
        Ok(())
    }
}

fn pid_of(child: &Child) -> std::io::Result<Pid> {
    i32::try_from(child.id())
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| std::io::Error::other("a pid out of range"))
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for node in &mut self.procs {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
