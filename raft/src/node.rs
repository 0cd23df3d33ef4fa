//! One node of a replicated Cairn: its store (the log and state machine of this crate on one
//! database), an openraft `Raft` over [`crate::network`], and a TCP listener that serves both
//! its peers' RPCs and clients' [`ClientCall`]s on the same port.
//!
//! Writes are answered once committed and applied on the leader; reads (get, scan) are
//! linearizable: the leader confirms its leadership with a quorum (openraft's read index) and
//! waits for its state machine to reach that point before it reads. A node that is not the
//! leader answers [`ClientReply::NotLeader`] with the leader it knows, and the client goes there.
//!
//! What a node does not do: forward clients' calls itself, serve reads from followers, or
//! persist its peers' addresses anywhere but in openraft's membership (the `--peers` of a node
//! are only what `init` forms the cluster from).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cairn_fs::FileSystem;
use openraft::error::{
    CheckIsLeaderError, ClientWriteError, ForwardToLeader, InitializeError, RaftError,
};
use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::network::TcpNetwork;
use crate::planted::{Bug, planted};
use crate::state_machine::StateMachine;
use crate::types::{NodeId, TypeConfig};
use crate::wire::{
    Call, ClientCall, ClientReply, MAX_REQUEST, MAX_SCAN, NodeStatus, Reply, read_frame,
    write_frame,
};

/// At most this many entries go in one append to a follower (openraft's default is 300; with
/// values up to the engine's limit, a frame must stay under [`crate::wire::MAX_FRAME`]).
pub const MAX_PAYLOAD_ENTRIES: u64 = 64;

/// How long a leader waits for a follower to take a snapshot chunk (the last one: to install
/// the snapshot).
const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 10_000;

/// What a node is: its id, its database, its address, its peers and its timing.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's id (non-zero, unique in the cluster).
    pub id: NodeId,
    /// The directory of its Cairn database.
    pub dir: PathBuf,
    /// The address it listens on, for peers and clients (`127.0.0.1:7001`).
    pub listen: String,
    /// Every node of the cluster to form with `init`, by id, this one included; none forms a
    /// cluster of this node alone, at the address it is bound to.
    pub peers: BTreeMap<NodeId, String>,
    /// How often the leader sends heartbeats.
    pub heartbeat: Duration,
    /// A follower that hears no leader for a random time between these starts an election.
    pub election_timeout: (Duration, Duration),
    /// A snapshot is built after this many entries since the last one; the log before it is purged.
    pub snapshot_every: u64,
    /// Entries kept in the log behind a snapshot, for followers a little behind.
    pub keep_behind_snapshot: u64,
    /// The data's tombstone grace period, set when the database is created (the engine's
    /// `CfOptions::tombstone_grace`; a node's grace cannot change after that).
    pub tombstone_grace: Duration,
    /// The file system the database's files go through: none for the real one, a `FaultyFs`
    /// where a crash test cuts the node's power.
    pub file_system: Option<Arc<dyn FileSystem>>,
    /// Testing only: how long a snapshot install waits after each step it writes, so a crash
    /// test can land a kill inside one (zero in service).
    pub install_pause: Duration,
}

impl NodeConfig {
    /// A node with openraft's timing scaled for processes on shared, busy machines: heartbeats
    /// every 100 ms, elections after 1 to 2 s of silence, a snapshot every 10,000 entries.
    pub fn new(id: NodeId, dir: impl Into<PathBuf>, listen: impl Into<String>) -> Self {
        Self {
            id,
            dir: dir.into(),
            listen: listen.into(),
            peers: BTreeMap::new(),
            heartbeat: Duration::from_millis(100),
            election_timeout: (Duration::from_secs(1), Duration::from_secs(2)),
            snapshot_every: 10_000,
            keep_behind_snapshot: 1_000,
            tombstone_grace: Duration::ZERO,
            file_system: None,
            install_pause: Duration::ZERO,
        }
    }

    fn raft_config(&self) -> Result<Config, ServeError> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Config {
            cluster_name: "cairn".to_owned(),
            heartbeat_interval: ms(self.heartbeat),
            election_timeout_min: ms(self.election_timeout.0),
            election_timeout_max: ms(self.election_timeout.1),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every),
            max_in_snapshot_log_to_keep: self.keep_behind_snapshot,
            max_payload_entries: MAX_PAYLOAD_ENTRIES,
            // openraft's 200 ms is shorter than installing a large snapshot takes: the final
            // chunk's call timed out and was sent again while the install ran.
            install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
            ..Config::default()
        }
        .validate()
        .map_err(|e| ServeError::Config(e.to_string()))
    }
}

/// The database at `dir`, and the log and state machine in it.
fn open_store(
    dir: &Path,
    options: cairn::Options,
    data: cairn::CfOptions,
) -> Result<(crate::LogStore, StateMachine), ServeError> {
    let db = cairn::Db::open(dir, options).map_err(|source| ServeError::Open {
        dir: dir.to_path_buf(),
        source,
    })?;
    if !is_a_nodes(&db).map_err(|source| ServeError::Open {
        dir: dir.to_path_buf(),
        source,
    })? {
        return Err(ServeError::Config(format!(
            "{} holds a database that is no node's: a node adds its raft.* families to it and \
             serves only those; give a new directory",
            dir.display()
        )));
    }
    let db = Arc::new(db);
    let log = crate::LogStore::open(Arc::clone(&db)).map_err(ServeError::Storage)?;
    let state = StateMachine::open_with(db, data).map_err(ServeError::Storage)?;
    Ok((log, state))
}

/// True when `db` is new or a node's: an empty default family and no family but the node's
/// own (`raft.*`, any of them: a first start can stop between creating one and the next).
fn is_a_nodes(db: &cairn::Db) -> cairn::Result<bool> {
    let families = db.list_column_families();
    let ours = families
        .iter()
        .all(|f| f == "default" || f.starts_with("raft."));
    Ok(ours && db.iter()?.next().is_none())
}

/// Why a node did not start.
#[derive(Debug)]
pub enum ServeError {
    /// The configuration is not usable (timing, ids, a directory that is another node's).
    Config(String),
    /// The database did not open (missing, locked, damaged).
    Open {
        /// Its directory.
        dir: PathBuf,
        /// The engine's error.
        source: cairn::Error,
    },
    /// The database did not open.
    Storage(openraft::StorageError<NodeId>),
    /// The address could not be listened on.
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// openraft did not start.
    Raft(String),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(why) => write!(f, "bad configuration: {why}"),
            Self::Open { dir, source } => write!(f, "{}: {source}", dir.display()),
            Self::Storage(e) => write!(f, "the store did not open: {e}"),
            Self::Listen { addr, source } => write!(f, "cannot listen on {addr}: {source}"),
            Self::Raft(why) => write!(f, "raft did not start: {why}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// A running node.
pub struct Node {
    raft: Raft<TypeConfig>,
    addr: SocketAddr,
    listener: JoinHandle<()>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// What each connection's task needs.
struct Shared {
    raft: Raft<TypeConfig>,
    state: StateMachine,
    config: NodeConfig,
    /// Where the listener is bound (its port when `listen` asked for port 0).
    addr: SocketAddr,
}

impl Node {
    /// Opens the store, starts openraft and listens. A node whose database already holds a
    /// cluster's state rejoins it; a new one waits for `init` or for a leader to add it.
    ///
    /// # Errors
    /// [`ServeError`]: a bad configuration, a database that does not open, an address in use.
    pub async fn start(config: NodeConfig) -> Result<Self, ServeError> {
        if config.id == 0 {
            return Err(ServeError::Config("node ids start at 1".to_owned()));
        }
        let raft_config = Arc::new(config.raft_config()?);
        let listener =
            TcpListener::bind(&config.listen)
                .await
                .map_err(|source| ServeError::Listen {
                    addr: config.listen.clone(),
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Listen {
            addr: config.listen.clone(),
            source,
        })?;
        let dir = config.dir.clone();
        let data = cairn::CfOptions::default().tombstone_grace(config.tombstone_grace);
        let mut options = crate::node_options();
        if let Some(fs) = &config.file_system {
            options = options.file_system(Arc::clone(fs));
        }
        let (log, state) = tokio::task::spawn_blocking(move || open_store(&dir, options, data))
            .await
            .map_err(|e| ServeError::Raft(e.to_string()))??;
        if let Some(recorded) = log.claim_node_id(config.id).map_err(ServeError::Storage)? {
            return Err(ServeError::Config(format!(
                "{} holds node {recorded}'s database, not node {}'s: give --id {recorded}, or \
                 a directory of its own",
                config.dir.display(),
                config.id
            )));
        }
        let state = state.with_install_pause(config.install_pause);
        let raft = Raft::new(
            config.id,
            raft_config,
            TcpNetwork::default(),
            log,
            state.clone(),
        )
        .await
        .map_err(|e| ServeError::Raft(e.to_string()))?;
        let shared = Arc::new(Shared {
            raft: raft.clone(),
            state,
            config,
            addr,
        });
        let listener = tokio::spawn(accept(listener, shared));
        Ok(Self {
            raft,
            addr,
            listener,
        })
    }

    /// The address the node listens on (its port when `listen` asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The node's openraft handle.
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }

    /// Waits until openraft's core stops on its own (its storage failed, say) and says why;
    /// a node whose core stopped serves nothing, so its process should end.
    pub async fn failed(&self) -> String {
        let mut metrics = self.raft.metrics();
        loop {
            if let Err(e) = &metrics.borrow().running_state {
                return e.to_string();
            }
            if metrics.changed().await.is_err() {
                return "openraft stopped".to_owned();
            }
        }
    }

    /// Stops listening, closes every connection, stops openraft and closes the database.
    ///
    /// # Errors
    /// openraft's, if its core task failed.
    pub async fn shutdown(self) -> Result<(), String> {
        self.listener.abort();
        let _ = self.listener.await;
        self.raft.shutdown().await.map_err(|e| e.to_string())
    }
}

/// Accepts connections until aborted; aborting it drops the set, which aborts every
/// connection's task.
async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve(stream, Arc::clone(&shared)));
                }
                Err(e) => {
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Answers one connection's calls in order until it closes or sends garbage.
async fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    loop {
        let call = match read_frame::<_, Call>(&mut stream).await {
            Ok(Some(call)) => call,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!("a connection sent a bad frame: {e}");
                return;
            }
        };
        let reply = answer(&shared, call).await;
        if let Err(e) = write_frame(&mut stream, &reply).await {
            tracing::debug!("replying: {e}");
            return;
        }
    }
}

async fn answer(shared: &Shared, call: Call) -> Reply {
    match call {
        Call::Append(rpc) => Reply::Append(shared.raft.append_entries(rpc).await),
        Call::Vote(rpc) => Reply::Vote(shared.raft.vote(rpc).await),
        Call::Snapshot(rpc) => Reply::Snapshot(shared.raft.install_snapshot(rpc).await),
        Call::Client(call) => Reply::Client(client(shared, call).await),
    }
}

async fn client(shared: &Shared, call: ClientCall) -> ClientReply {
    match call {
        ClientCall::Write(request) => {
            if let Err(why) = service_limit(&request).and_then(|()| request.validate()) {
                return ClientReply::Invalid(why);
            }
            match shared.raft.client_write(request).await {
                Ok(written) => ClientReply::Written {
                    index: written.log_id.index,
                    refused: written.data.refused,
                },
                Err(e) => write_error(e),
            }
        }
        ClientCall::Get { key } => {
            if let Some(refused) = linearizable(shared).await {
                return refused;
            }
            match shared.state.get(&key) {
                Ok(value) => ClientReply::Value(value),
                Err(e) => ClientReply::Failed(e.to_string()),
            }
        }
        ClientCall::Scan { start, end, limit } => {
            if let Some(refused) = linearizable(shared).await {
                return refused;
            }
            local_scan(shared, start, end, limit.min(MAX_SCAN)).await
        }
        ClientCall::LocalScan { start, end, limit } => {
            local_scan(shared, start, end, limit.min(MAX_SCAN)).await
        }
        ClientCall::Compact => {
            let state = shared.state.clone();
            match tokio::task::spawn_blocking(move || state.compact()).await {
                Ok(Ok(())) => ClientReply::Done,
                Ok(Err(e)) => ClientReply::Failed(e.to_string()),
                Err(e) => ClientReply::Failed(e.to_string()),
            }
        }
        ClientCall::Init => {
            let mut members: BTreeMap<NodeId, BasicNode> = shared
                .config
                .peers
                .iter()
                .map(|(id, addr)| (*id, BasicNode::new(addr)))
                .collect();
            if members.is_empty() {
                // No peers: a cluster of this node alone, which `cluster add` grows.
                members.insert(shared.config.id, BasicNode::new(shared.addr));
            }
            if !members.contains_key(&shared.config.id) {
                return ClientReply::Invalid(format!(
                    "node {}'s --peers do not name it; init forms the cluster from them",
                    shared.config.id
                ));
            }
            match shared.raft.initialize(members).await {
                Ok(()) => ClientReply::Done,
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
                    ClientReply::Invalid(format!(
                        "node {} already belongs to a cluster (it was initialized before, or \
                         a leader added it): nothing to do",
                        shared.config.id
                    ))
                }
                Err(e) => ClientReply::Failed(e.to_string()),
            }
        }
        ClientCall::ChangeMembership { add, voters } => {
            for (id, addr) in add {
                if let Err(e) = shared
                    .raft
                    .add_learner(id, BasicNode::new(addr), true)
                    .await
                {
                    return write_error(e);
                }
            }
            match shared.raft.change_membership(voters, false).await {
                Ok(_) => ClientReply::Done,
                Err(e) => write_error(e),
            }
        }
        ClientCall::Status => ClientReply::Status(status(shared)),
    }
}

/// This node's pairs in `[start, end)`, as its state machine has them now.
async fn local_scan(
    shared: &Shared,
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    limit: usize,
) -> ClientReply {
    let state = shared.state.clone();
    let scanned =
        tokio::task::spawn_blocking(move || state.scan(&start, end.as_deref(), limit)).await;
    match scanned {
        Ok(Ok(pairs)) => ClientReply::Pairs(pairs),
        Ok(Err(e)) => ClientReply::Failed(e.to_string()),
        Err(e) => ClientReply::Failed(e.to_string()),
    }
}

/// Why a write is over what the service takes in one request, if it is.
fn service_limit(request: &crate::types::Request) -> Result<(), String> {
    use crate::types::Request;
    let size = match request {
        Request::Put { key, value } | Request::PutWithTtl { key, value, .. } => {
            key.len() + value.len()
        }
        Request::Delete { key } => key.len(),
        Request::DeleteRange { start, end } => start.len() + end.len(),
    };
    if size > MAX_REQUEST {
        return Err(format!(
            "a request of {size} bytes is over the service's limit of {MAX_REQUEST}"
        ));
    }
    Ok(())
}

/// None once this node may serve a linearizable read; else what to answer.
async fn linearizable(shared: &Shared) -> Option<ClientReply> {
    if planted(Bug::LocalReads) {
        return None;
    }
    match shared.raft.ensure_linearizable().await {
        Ok(_) => None,
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(to))) => Some(not_leader(&to)),
        Err(e) => Some(ClientReply::Failed(e.to_string())),
    }
}

fn write_error(e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> ClientReply {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(to)) => not_leader(&to),
        e => ClientReply::Failed(e.to_string()),
    }
}

fn not_leader(to: &ForwardToLeader<NodeId, BasicNode>) -> ClientReply {
    ClientReply::NotLeader(
        to.leader_id
            .zip(to.leader_node.as_ref().map(|node| node.addr.clone())),
    )
}

/// What the node's metrics say now.
fn status(shared: &Shared) -> NodeStatus {
    let metrics = shared.raft.metrics().borrow().clone();
    let membership = metrics.membership_config.membership();
    NodeStatus {
        id: metrics.id,
        state: format!("{:?}", metrics.state),
        leader: metrics.current_leader,
        term: metrics.current_term,
        last_log: metrics.last_log_index,
        last_applied: metrics.last_applied.map(|id| id.index),
        snapshot: metrics.snapshot.map(|id| id.index),
        purged: metrics.purged.map(|id| id.index),
        voters: membership.voter_ids().collect(),
        nodes: membership
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect(),
        installing: shared.state.installing(),
    }
}
