//! `cairn serve`: one node of a replicated Cairn (`cairn_raft::node`), configured by flags or a
//! YAML file (flags win), logging to stderr, stopped cleanly by SIGTERM or Ctrl-C: it stops
//! listening, stops openraft and closes its database, then exits 0. When openraft's core stops
//! on its own (its storage failed), the node shuts down the same way and exits 2.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cairn_fs::{FaultyFs, PowerLoss};
use cairn_raft::node::{Node, NodeConfig, ServeError};
use clap::Args;
use serde::Deserialize;

use crate::output::parse_duration;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// This node's id: 1, 2, 3… unique in the cluster.
    #[arg(long)]
    id: Option<u64>,
    /// The directory of this node's database (created if missing).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The address to listen on for peers and clients, as the others reach it (127.0.0.1:7001).
    #[arg(long)]
    listen: Option<String>,
    /// Every node of the cluster, this one included, as ID=ADDR,…: what `cairn cluster init`
    /// forms the cluster from. Leave out to start alone and grow with `cairn cluster add`.
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// A YAML file with any of the flags above and below, named as they are (`election-min:
    /// 1s`), peers as a map of id to address. Flags given on the command line win.
    #[arg(long)]
    config: Option<PathBuf>,
    /// How often the leader sends heartbeats [default: 100ms].
    #[arg(long, value_parser = parse_duration)]
    heartbeat: Option<Duration>,
    /// The shortest silence after which a follower stands for election [default: 1s].
    #[arg(long, value_parser = parse_duration)]
    election_min: Option<Duration>,
    /// The longest [default: 2s].
    #[arg(long, value_parser = parse_duration)]
    election_max: Option<Duration>,
    /// Build a snapshot (and purge the log before it) every this many entries [default: 10000].
    #[arg(long)]
    snapshot_every: Option<u64>,
    /// The data's tombstone grace period (`1h`), fixed when the database is created [default: 0s].
    #[arg(long, value_parser = parse_duration)]
    grace: Option<Duration>,
    /// Log entries kept behind each snapshot for followers a little behind [default: 1000];
    /// one further behind is sent the snapshot.
    #[arg(long)]
    keep_behind_snapshot: Option<u64>,
    /// Die (SIGKILL) when the process that started this one exits: for harnesses that run nodes.
    #[arg(long, hide = true)]
    die_with_parent: bool,
    /// Testing only: the database's files go through a `FaultyFs`, and SIGUSR1 cuts the
    /// node's power: every byte not synced is dropped, as a machine losing power would, and
    /// the process exits 137 at once.
    #[arg(long, hide = true)]
    simulate_power_loss: bool,
    /// Testing only: the seed of the power cut's choices (what it drops) [default: the clock].
    #[arg(long, hide = true, requires = "simulate_power_loss")]
    power_loss_seed: Option<u64>,
    /// Testing only: a snapshot install waits this long after each step it writes.
    #[arg(long, hide = true, value_parser = parse_duration)]
    install_pause: Option<Duration>,
}

/// What a node exits with after a simulated power cut: what a shell shows for SIGKILL.
const POWER_CUT_EXIT: i32 = 137;

/// The config file's keys, each optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ServeFile {
    id: Option<u64>,
    dir: Option<PathBuf>,
    listen: Option<String>,
    #[serde(default)]
    peers: BTreeMap<u64, String>,
    heartbeat: Option<String>,
    election_min: Option<String>,
    election_max: Option<String>,
    snapshot_every: Option<u64>,
    grace: Option<String>,
    keep_behind_snapshot: Option<u64>,
}

pub fn run(args: &ServeArgs) -> i32 {
    if args.die_with_parent {
        let parent = rustix::process::getppid();
        let set =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
        // Set too late if the parent is already gone (this process was handed to init).
        if set.is_err() || rustix::process::getppid() != parent {
            return 2;
        }
    }
    // openraft says much at info; its warnings and the node's own news are what an operator reads.
    crate::init_logging_with("warn,cairn=info,cairn_raft=info");
    let mut config = match node_config(args) {
        Ok(config) => config,
        Err(why) => return crate::bad_args(&why),
    };
    if let Err(code) = crate::db_arg::check_directory_if_present(&config.dir) {
        return code;
    }
    let power = args
        .simulate_power_loss
        .then(|| power_switch(&config.dir, args.power_loss_seed));
    if let Some(power) = &power {
        config.file_system = Some(Arc::new(power.fs.clone()));
    }
    config.install_pause = args.install_pause.unwrap_or_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return crate::output::failed("starting the runtime", &e),
    };
    runtime.block_on(serve(config, power))
}

/// The `FaultyFs` a node's database goes through when its power can be cut. Files a killed
/// node's `FaultyFs` had moved aside on removal are gone for good (a kill undoes no removal).
fn power_switch(dir: &Path, seed: Option<u64>) -> PowerSwitch {
    let _ = std::fs::remove_dir_all(dir.join(".faultyfs-trash"));
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos().into())
    });
    PowerSwitch {
        fs: FaultyFs::new(seed),
        seed,
    }
}

/// A node's file system whose power can be cut, and the seed of the cut.
struct PowerSwitch {
    fs: FaultyFs,
    seed: u64,
}

/// Cuts the node's power: the disk stops taking writes, the files are rewound to what a disk
/// would hold (all unsynced bytes dropped, a random tail of them kept, or random pages, in
/// turn), and the process ends at once, as a machine's would.
fn cut_power(id: u64, power: &PowerSwitch) -> ! {
    let (fs, seed) = (&power.fs, power.seed);
    fs.set_active(false);
    let mode = match seed % 3 {
        0 => PowerLoss::DropAllUnsynced,
        1 => PowerLoss::DropRandomTail { seed },
        _ => PowerLoss::ReorderedPages { seed },
    };
    match fs.power_loss(mode) {
        Ok(()) => {
            eprintln!("cairn: node {id}: power cut ({mode:?})");
            std::process::exit(POWER_CUT_EXIT)
        }
        Err(e) => {
            // Not the cut's exit: the harness must not count a cut that did not happen.
            eprintln!("cairn: node {id}: the simulated power cut failed: {e}");
            std::process::exit(2)
        }
    }
}

async fn serve(config: NodeConfig, power: Option<PowerSwitch>) -> i32 {
    let (id, dir) = (config.id, config.dir.clone());
    // Armed before the node starts: it listens (and a harness may signal) before it is ready.
    let cut = power_cut(power.is_some());
    let stop = stop_signal();
    let node = match Node::start(config).await {
        Ok(node) => node,
        Err(e @ ServeError::Config(_)) => return crate::bad_args(&e.to_string()),
        Err(ServeError::Open { dir, source }) => {
            return crate::db_arg::cannot_open(&dir, &source);
        }
        Err(e) => {
            eprintln!("cairn: node {id} did not start: {e}");
            return 2;
        }
    };
    tracing::info!(
        "node {id} listening on {}, database {}",
        node.addr(),
        dir.display()
    );
    let failed = tokio::select! {
        () = cut => match &power {
            Some(fs) => cut_power(id, fs),
            None => None,
        },
        stopped = stop => {
            tracing::info!("node {id}: {stopped}, shutting down");
            None
        }
        why = node.failed() => Some(why),
    };
    if let Some(why) = &failed {
        tracing::error!("node {id}: raft stopped: {why}; shutting down");
    }
    match node.shutdown().await {
        Ok(()) if failed.is_some() => 2,
        Ok(()) => {
            tracing::info!("node {id} stopped");
            0
        }
        Err(e) => {
            eprintln!("cairn: node {id} did not stop cleanly: {e}");
            2
        }
    }
}

/// Waits for SIGUSR1 where the node's power can be cut; else forever.
/// The handler is installed when this is called, not when the future is first polled.
fn power_cut(armed: bool) -> impl std::future::Future<Output = ()> {
    let usr1 = armed
        .then(|| tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()));
    async move {
        match usr1 {
            Some(Ok(mut usr1)) => {
                usr1.recv().await;
            }
            Some(Err(e)) => {
                tracing::error!("cannot wait for SIGUSR1, the power cut: {e}");
                std::future::pending::<()>().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
}

/// Waits for SIGTERM or Ctrl-C and names it. The handlers are installed when this is called,
/// not when the future is first polled: a SIGTERM the moment the node listens stops it cleanly.
fn stop_signal() -> impl std::future::Future<Output = &'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "interrupted",
            },
            (Ok(mut term), Err(_)) => {
                term.recv().await;
                "SIGTERM"
            }
            (Err(_), _) => {
                let _ = tokio::signal::ctrl_c().await;
                "interrupted"
            }
        }
    }
}

/// The node's configuration: the file's, with the flags over it.
fn node_config(args: &ServeArgs) -> Result<NodeConfig, String> {
    let file = match &args.config {
        Some(path) => read_file(path)?,
        None => ServeFile::default(),
    };
    let id = args
        .id
        .or(file.id)
        .ok_or("give --id (or id: in --config)")?;
    let dir = args
        .dir
        .clone()
        .or(file.dir)
        .ok_or("give --dir (or dir: in --config)")?;
    let listen = args
        .listen
        .clone()
        .or(file.listen)
        .ok_or("give --listen (or listen: in --config)")?;
    let mut config = NodeConfig::new(id, dir, listen);
    // The file's peers get the flag's checks (ids from 1, one address each, none blank).
    let from_file: Vec<String> = file
        .peers
        .iter()
        .map(|(id, addr)| format!("{id}={addr}"))
        .collect();
    config.peers = parse_peers(if args.peers.is_empty() {
        &from_file
    } else {
        &args.peers
    })?;
    let from_file = |text: Option<String>| text.as_deref().map(parse_duration).transpose();
    if let Some(heartbeat) = args.heartbeat.or(from_file(file.heartbeat)?) {
        config.heartbeat = heartbeat;
    }
    if let Some(min) = args.election_min.or(from_file(file.election_min)?) {
        config.election_timeout.0 = min;
    }
    if let Some(max) = args.election_max.or(from_file(file.election_max)?) {
        config.election_timeout.1 = max;
    }
    if let Some(every) = args.snapshot_every.or(file.snapshot_every) {
        config.snapshot_every = every;
    }
    if let Some(grace) = args.grace.or(from_file(file.grace)?) {
        config.tombstone_grace = grace;
    }
    if let Some(keep) = args.keep_behind_snapshot.or(file.keep_behind_snapshot) {
        config.keep_behind_snapshot = keep;
    }
    if !config.peers.is_empty() && !config.peers.contains_key(&id) {
        return Err(format!("--peers must name this node ({id}) too"));
    }
    Ok(config)
}

fn read_file(path: &Path) -> Result<ServeFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_yaml_ng::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// `1=127.0.0.1:7001` pairs into a map, each id once.
pub fn parse_peers(pairs: &[String]) -> Result<BTreeMap<u64, String>, String> {
    let mut peers: BTreeMap<u64, String> = BTreeMap::new();
    for pair in pairs {
        let (id, addr) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not ID=ADDR (1=127.0.0.1:7001)"))?;
        let id: u64 = id
            .trim()
            .parse()
            .ok()
            .filter(|id| *id > 0)
            .ok_or_else(|| format!("{pair:?}: node ids are 1, 2, 3…"))?;
        if addr.trim().is_empty() {
            return Err(format!("{pair:?}: no address"));
        }
        if let Some((other, _)) = peers.iter().find(|(_, a)| a.as_str() == addr.trim()) {
            return Err(format!(
                "nodes {other} and {id} are both at {}: each node has an address of its own",
                addr.trim()
            ));
        }
        if peers.insert(id, addr.trim().to_owned()).is_some() {
            return Err(format!("node {id} is named twice"));
        }
    }
    Ok(peers)
}
