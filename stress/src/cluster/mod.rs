//! The cluster stress: a replicated Cairn of three (or five) `cairn serve` processes on loopback,
//! driven by one client through the leader (puts, puts with a TTL, deletes, range deletes,
//! linearizable gets and scans), while the run kills nodes or cuts their power (the leader
//! more often than not; half the time while a put is in flight, so its answer may be lost) and
//! restarts them, pauses the leader (SIGSTOP) past an election, and keeps a
//! follower down for longer than the tombstone grace period while deletes happen and the
//! others compact those tombstones away, then brings it back to catch up by log or snapshot.
//!
//! Every read is judged against the expected state ([`model`]), and after each recovery and at
//! the end every replica's own data is read ([`ClientCall::LocalScan`], once it has applied the
//! client's last acknowledged write) and judged key by key: a lost write, a resurrected delete,
//! a stale read or a wrong value is a failure naming the seed, the node and the key. At the end
//! the replicas must also hold the same data. A check that cannot read is a failure too.
//!
//! The faults are `FaultKind`s (`--faults`). One fault at a time: a node down or paused
//! leaves a quorum of the others, except when the
//! whole cluster's power is cut at once (then every acknowledged write must be on disk on a
//! quorum).

mod checks;
mod crashes;
mod faults;
pub mod model;
mod nodes;

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cairn_raft::client::{self, Client, ClientError};
use cairn_raft::wire::{ClientCall, ClientReply};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use self::model::{Model, Possible};
pub use self::nodes::NodeSettings;
use self::nodes::Nodes;

/// What a cluster stress run does.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// How many nodes (3 or 5).
    pub nodes: usize,
    /// The `cairn` binary whose `serve` runs each node.
    pub program: PathBuf,
    /// The run's directory: the nodes' databases and logs.
    pub dir: PathBuf,
    /// The seed of every random choice.
    pub seed: u64,
    /// How long to run.
    pub duration: Duration,
    /// Keys in the key space.
    pub keys: u64,
    /// The nodes' tombstone grace period.
    pub grace: Duration,
    /// The mean time between faults.
    pub fault_every: Duration,
    /// A snapshot every this many entries on each node.
    pub snapshot_every: u64,
    /// The nodes' shortest election timeout.
    pub election_min: Duration,
    /// The faults injected.
    pub faults: Vec<FaultKind>,
    /// How long a node's snapshot install waits after each step it writes, so that a crash
    /// can land inside one.
    pub install_pause: Duration,
}

impl ClusterConfig {
    /// Three nodes of `program` under `dir` for `duration`, with the defaults: 500 keys, a 2 s
    /// grace period, a fault every 2 s on average (every kind), a snapshot every 200 entries,
    /// elections after 500 ms to 1 s, installs pausing 300 ms a step.
    pub fn new(program: PathBuf, dir: PathBuf, duration: Duration) -> Self {
        Self {
            nodes: 3,
            program,
            dir,
            seed: 0,
            duration,
            keys: 500,
            grace: Duration::from_secs(2),
            fault_every: Duration::from_secs(2),
            snapshot_every: 200,
            election_min: Duration::from_millis(500),
            faults: FaultKind::ALL.to_vec(),
            install_pause: Duration::from_millis(300),
        }
    }
}

/// A kind of fault a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// A node killed with SIGKILL, the leader more often than not, back after 0.2 to 1.5 s.
    Kill,
    /// As `Kill`, by cutting the node's power: every byte it had not synced is dropped.
    PowerCut,
    /// The leader paused with SIGSTOP past an election, probed with reads and resumed.
    Pause,
    /// A follower down (killed or its power cut) past the grace period while the others
    /// compact deletes away; back by log or by snapshot, and half the time crashed again while
    /// it installs the snapshot.
    PastGrace,
    /// Every node's power cut at once.
    ClusterCrash,
}

impl FaultKind {
    /// Every kind: what `cairn stress --cluster` injects by default.
    pub const ALL: [Self; 5] = [
        Self::Kill,
        Self::PowerCut,
        Self::Pause,
        Self::PastGrace,
        Self::ClusterCrash,
    ];

    /// The crashes alone: what `cairn crashtest --cluster` injects by default.
    pub const CRASHES: [Self; 4] = [
        Self::Kill,
        Self::PowerCut,
        Self::PastGrace,
        Self::ClusterCrash,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kill => "kill",
            Self::PowerCut => "power-cut",
            Self::Pause => "pause",
            Self::PastGrace => "past-grace",
            Self::ClusterCrash => "cluster-crash",
        }
    }

    /// The kinds a comma-separated list names (`kill,pause`).
    ///
    /// # Errors
    /// A name that is no kind, or an empty list.
    pub fn parse_list(list: &str) -> Result<Vec<Self>, String> {
        let mut kinds = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let kind = Self::ALL
                .into_iter()
                .find(|k| k.name() == name)
                .ok_or_else(|| {
                    let names: Vec<_> = Self::ALL.iter().map(|k| k.name()).collect();
                    format!("no fault {name:?}: {}", names.join(", "))
                })?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        if kinds.is_empty() {
            return Err("name at least one fault".to_owned());
        }
        Ok(kinds)
    }

    /// How often it is drawn, against the others' weights.
    fn weight(self) -> u32 {
        match self {
            Self::Kill => 4,
            Self::PowerCut | Self::Pause | Self::PastGrace => 2,
            Self::ClusterCrash => 1,
        }
    }
}

/// How a node is crashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Crash {
    Kill,
    PowerCut,
}

impl Crash {
    fn done(self) -> &'static str {
        match self {
            Self::Kill => "killed",
            Self::PowerCut => "cut the power of",
        }
    }
}

/// One thing found wrong.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterFailure {
    /// Lost write, resurrected delete, stale read, wrong value, replicas differ, or a check
    /// that could not be made.
    pub kind: String,
    /// The node whose data it is; none for a read through the leader or the run as a whole.
    pub node: Option<u64>,
    /// The key.
    pub key: String,
    /// What the key may be.
    pub expected: String,
    /// What was read.
    pub observed: String,
    /// When: the operation's number, or the check.
    pub when: String,
}

/// What a run did and found.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ClusterReport {
    /// The seed.
    pub seed: u64,
    /// Client operations done.
    pub ops: u64,
    /// Writes acknowledged.
    pub acked_writes: u64,
    /// Writes whose answer was lost (outcome unknown).
    pub uncertain_writes: u64,
    /// Calls no leader answered in time (nothing written).
    pub unavailable: u64,
    /// Reads (gets and scans) judged.
    pub reads: u64,
    /// Node crashes: killed with SIGKILL or their power cut.
    pub kills: u64,
    /// Of those, the leader's (drawn as one, not counting the whole cluster's).
    pub leader_kills: u64,
    /// Of the crashes, power cuts: the node's unsynced bytes dropped.
    pub power_cuts: u64,
    /// Times every node's power was cut at once.
    pub cluster_crashes: u64,
    /// Nodes crashed while installing a snapshot.
    pub crashes_while_installing: u64,
    /// Nodes crashed while a put was in flight (its answer may be lost).
    pub crashes_in_flight: u64,
    /// Leaders paused with SIGSTOP past an election.
    pub pauses: u64,
    /// Followers kept down past the grace period while the others compacted deletes away.
    pub behind_past_grace: u64,
    /// Recoveries where the leader had purged the log past the node's state: by snapshot.
    pub snapshot_catch_ups: u64,
    /// Reads sent to a paused old leader as it was resumed.
    pub deposed_leader_probes: u64,
    /// Of those, the ones it answered with a value, each judged (a correct node refuses most).
    pub deposed_leader_reads: u64,
    /// Replicas read whole and judged.
    pub replica_checks: u64,
    /// What was found wrong (at most 20 are kept).
    pub failures: Vec<ClusterFailure>,
    /// Stopped early by Ctrl-C or SIGTERM.
    pub interrupted: bool,
    /// How long it ran, in seconds.
    pub elapsed_secs: f64,
    /// The run's directory (nodes' logs and databases).
    pub dir: PathBuf,
}

impl ClusterReport {
    /// True when nothing was found wrong.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// A replica's pairs, in key order.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

const MAX_FAILURES: usize = 20;
const CATCH_UP: Duration = Duration::from_secs(30);
/// The longest a leader stays paused past its time while no write is acknowledged without it.
const PAUSE_CAP: Duration = Duration::from_secs(15);

/// Runs the cluster stress.
///
/// # Errors
/// If the nodes cannot be started or the cluster not formed (a setup problem, not a finding).
pub fn run_cluster(config: &ClusterConfig) -> Result<ClusterReport, String> {
    if !(3..=7).contains(&config.nodes) {
        return Err(format!("{} nodes: give 3 to 7", config.nodes));
    }
    std::fs::create_dir_all(&config.dir).map_err(|e| format!("{}: {e}", config.dir.display()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(Run::new(config)?.go())
}

/// A node that is down on purpose, and until when.
struct Down {
    id: u64,
    until: Instant,
    past_grace: bool,
    /// Its last log index when it went down, if it answered.
    log_before: Option<u64>,
}

struct Run<'a> {
    config: &'a ClusterConfig,
    nodes: Nodes,
    model: Model,
    rng: SmallRng,
    report: ClusterReport,
    /// The index a replica must have applied before it is read: the last acknowledged
    /// write's (at the end, the furthest any replica applied).
    last_acked: u64,
    down: Option<Down>,
    paused: Option<(u64, Instant)>,
    /// Keys whose puts were acknowledged while the leader was paused.
    written_while_paused: Vec<Vec<u8>>,
    /// The kinds of fault not injected yet, in the order they come first.
    undrawn: Vec<FaultKind>,
    /// A crash to make in the middle of the next put.
    crash_in_flight: Option<(u64, Crash)>,
}

impl<'a> Run<'a> {
    fn new(config: &'a ClusterConfig) -> Result<Self, String> {
        let settings = NodeSettings {
            program: config.program.clone(),
            grace: config.grace,
            snapshot_every: config.snapshot_every,
            election_min: config.election_min,
            keep_behind_snapshot: 20,
            install_pause: config.install_pause,
            // Through FaultyFs only where power is cut: its one lock serialises every append
            // and sync, and a run without cuts should meet the real file system's concurrency.
            power_loss: config
                .faults
                .iter()
                .any(|f| matches!(f, FaultKind::PowerCut | FaultKind::ClusterCrash)),
            seed: config.seed,
        };
        let nodes = Nodes::new(&config.dir, config.nodes, settings).map_err(|e| e.to_string())?;
        Ok(Self {
            config,
            nodes,
            model: Model::default(),
            rng: SmallRng::seed_from_u64(config.seed),
            report: ClusterReport {
                seed: config.seed,
                dir: config.dir.clone(),
                ..ClusterReport::default()
            },
            last_acked: 0,
            down: None,
            paused: None,
            written_while_paused: Vec::new(),
            crash_in_flight: None,
            undrawn: {
                let mut kinds = config.faults.clone();
                kinds.sort_by_key(|k| *k != FaultKind::Pause);
                kinds
            },
        })
    }

    async fn go(mut self) -> Result<ClusterReport, String> {
        let started = Instant::now();
        for id in (1..).take(self.config.nodes) {
            self.nodes.start(id).map_err(|e| e.to_string())?;
        }
        let first = self.nodes.addrs().into_iter().next().unwrap_or_default();
        match client::call_node(&first, ClientCall::Init, Duration::from_secs(10)).await {
            Ok(ClientReply::Done) => {}
            other => return Err(format!("forming the cluster: {other:?}")),
        }
        let mut client = Client::new(self.nodes.addrs())
            .map_err(|e| e.to_string())?
            .deadline(Duration::from_secs(10))
            // A stopped leader holds each call this long before the client moves on.
            .attempt_timeout(Duration::from_secs(2));
        let mut next_fault = Instant::now() + self.fault_gap();
        while started.elapsed() < self.config.duration
            && !crate::stop_requested()
            && self.report.failures.len() < MAX_FAILURES
        {
            self.op(&mut client).await;
            self.end_faults_due().await;
            let quiet = self.down.is_none() && self.paused.is_none();
            if Instant::now() >= next_fault && quiet && self.crash_in_flight.is_none() {
                self.fault().await;
                next_fault = Instant::now() + self.fault_gap();
            }
            if let Err(e) = self.nodes.check_alive() {
                self.fail(
                    "node exited",
                    None,
                    "",
                    "running",
                    &e.to_string(),
                    "the run",
                );
                break;
            }
        }
        self.report.interrupted = crate::stop_requested();
        self.finish().await;
        let faults = self.report.kills + self.report.pauses + self.report.cluster_crashes;
        if faults == 0 && !self.report.interrupted {
            let observed = "none: the run ended before its first fault (one comes every 2 s)";
            self.fail("unexercised", None, "", "a fault", observed, "the run");
        }
        self.report.elapsed_secs = started.elapsed().as_secs_f64();
        Ok(self.report)
    }

    fn fault_gap(&mut self) -> Duration {
        let mean = self.config.fault_every.as_millis().max(2);
        let ms = self.rng.random_range(mean / 2..mean * 3 / 2);
        Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    fn key(&mut self) -> Vec<u8> {
        key_at(self.rng.random_range(0..self.config.keys.max(1)))
    }

    /// One client operation, judged.
    async fn op(&mut self, client: &mut Client) {
        self.report.ops += 1;
        let n = self.report.ops;
        let value = format!("s{}:{n}", self.config.seed).into_bytes();
        let key = self.key();
        // While a follower is down past the grace period, delete more: its catch-up is the test.
        let deleting = self.down.as_ref().is_some_and(|d| d.past_grace);
        let roll = self.rng.random_range(0..100);
        match roll {
            _ if deleting && roll < 40 => self.delete(client, key).await,
            0..40 => {
                let state = Possible {
                    value: Some(value.clone()),
                    expires_at_ms: None,
                };
                let written = match self.crash_in_flight.take() {
                    Some((id, how)) => {
                        let log_before = self.log_end(id).await;
                        let after = Duration::from_micros(self.rng.random_range(0..3000));
                        let crash = async {
                            tokio::time::sleep(after).await;
                            self.report.crashes_in_flight += 1;
                            self.crash_down(id, how, false, log_before);
                        };
                        tokio::join!(client.put(&key, &value), crash).0
                    }
                    None => client.put(&key, &value).await,
                };
                self.settle(&key, state, written);
            }
            40..50 => {
                let short = self.rng.random_bool(0.5);
                let ttl = if short {
                    Duration::from_millis(self.rng.random_range(500..3000))
                } else {
                    Duration::from_secs(3600)
                };
                let expires = now_ms() + u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
                let written = client.put_with_ttl(&key, &value, ttl).await;
                // The client computes the expiry from its clock just after this reading.
                let state = Possible {
                    value: Some(value),
                    expires_at_ms: Some(expires),
                };
                self.settle(&key, state, written);
            }
            50..68 => self.delete(client, key).await,
            68..73 => {
                let first = self.rng.random_range(0..self.config.keys.max(1));
                let width = self.rng.random_range(1..20);
                let (start, end) = (key_at(first), key_at(first + width));
                match client.delete_range(&start, &end).await {
                    Ok(index) => {
                        self.model.delete_range(&start, &end, true);
                        self.acked(index);
                    }
                    Err(ClientError::Uncertain(_)) => {
                        self.report.uncertain_writes += 1;
                        self.model.delete_range(&start, &end, false);
                    }
                    Err(e) => self.not_done(&e),
                }
            }
            73..95 => self.get(client, key, n).await,
            _ => self.scan(client, n).await,
        }
    }

    async fn delete(&mut self, client: &mut Client, key: Vec<u8>) {
        let written = client.delete(&key).await;
        let state = Possible {
            value: None,
            expires_at_ms: None,
        };
        self.settle(&key, state, written);
    }

    fn settle(&mut self, key: &[u8], state: Possible, written: Result<u64, ClientError>) {
        match written {
            Ok(index) => {
                // A value put while the leader is paused: the old leader cannot have it.
                if self.paused.is_some() && state.value.is_some() {
                    self.written_while_paused.push(key.to_vec());
                }
                self.model.write(key, state, true);
                self.acked(index);
            }
            Err(ClientError::Uncertain(_)) => {
                self.report.uncertain_writes += 1;
                self.model.write(key, state, false);
            }
            Err(e) => self.not_done(&e),
        }
    }

    fn acked(&mut self, index: u64) {
        self.report.acked_writes += 1;
        self.last_acked = self.last_acked.max(index);
    }

    fn not_done(&mut self, e: &ClientError) {
        match e {
            ClientError::Unavailable(_) => self.report.unavailable += 1,
            other => self.fail(
                "refused write",
                None,
                "",
                "accepted",
                &other.to_string(),
                "a write",
            ),
        }
    }

    async fn get(&mut self, client: &mut Client, key: Vec<u8>, n: u64) {
        let from = now_ms();
        match client.get(&key).await {
            Ok(value) => {
                self.report.reads += 1;
                let to = now_ms();
                self.judge(&key, value.as_deref(), (from, to), None, &format!("op {n}"));
            }
            Err(ClientError::Unavailable(_)) => self.report.unavailable += 1,
            Err(e) => self.fail(
                "read failed",
                None,
                &text(&key),
                "",
                &e.to_string(),
                "a get",
            ),
        }
    }

    /// A linearizable scan of 50 keys' span, judged whole.
    async fn scan(&mut self, client: &mut Client, n: u64) {
        let first = self.rng.random_range(0..self.config.keys.max(1));
        let (start, end) = (key_at(first), key_at(first + 50));
        let from = now_ms();
        match client.scan(&start, Some(&end), 1000).await {
            Ok(pairs) => {
                self.report.reads += 1;
                let to = now_ms();
                let what = format!("op {n} (scan)");
                self.judge_all(&pairs, (&start, Some(&end)), (from, to), None, &what);
            }
            Err(ClientError::Unavailable(_)) => self.report.unavailable += 1,
            Err(e) => self.fail("read failed", None, "", "", &e.to_string(), "a scan"),
        }
    }

    fn fail(
        &mut self,
        kind: &str,
        node: Option<u64>,
        key: &str,
        expected: &str,
        observed: &str,
        when: &str,
    ) {
        tracing::error!(
            "seed {}: {kind} on {}, {when}: key {key}: expected {expected}, read {observed}",
            self.config.seed,
            node.map_or_else(|| "the cluster".to_owned(), |n| format!("node {n}"))
        );
        if self.report.failures.len() < MAX_FAILURES {
            self.report.failures.push(ClusterFailure {
                kind: kind.to_owned(),
                node,
                key: key.to_owned(),
                expected: expected.to_owned(),
                observed: observed.to_owned(),
                when: when.to_owned(),
            });
        }
    }
}

/// The key numbered `n`.
fn key_at(n: u64) -> Vec<u8> {
    format!("k{n:06}").into_bytes()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
