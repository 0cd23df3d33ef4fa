//! Three openraft nodes in one process, each on its own Cairn database, joined by an in-memory
//! network: a leader is elected, writes (put, put with TTL, delete, range delete) are replicated
//! and applied on every node, a snapshot is built and the log prefix it holds is purged.
//!
//! ```sh
//! cargo run -p cairn-raft --example three_nodes -- /tmp/cairn-raft   # run again: recovered from disk
//! ```
//!
//! The network is a map from node id to the node's `Raft` handle: each RPC is a direct call. A
//! real deployment puts a transport (TCP, HTTP) in its place; the storage is the same.

#![allow(
    clippy::result_large_err,
    reason = "openraft's errors are large; an example hands them on"
)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn_raft::{NodeId, Request, StateMachine, TypeConfig};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Config, Raft, RaftNetwork, RaftNetworkFactory};

type Rpc<E = openraft::error::Infallible> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

/// Every node's `Raft` handle, by id: the in-memory network.
#[derive(Clone, Default)]
struct Router(Arc<Mutex<BTreeMap<NodeId, Raft<TypeConfig>>>>);

impl Router {
    fn node(&self, id: NodeId) -> Result<Raft<TypeConfig>, Unreachable> {
        let nodes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        nodes
            .get(&id)
            .cloned()
            .ok_or_else(|| Unreachable::new(&std::io::Error::other(format!("node {id} is not up"))))
    }
}

/// A connection to one node.
struct Connection {
    router: Router,
    target: NodeId,
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection {
        Connection {
            router: self.clone(),
            target,
        }
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, Rpc> {
        let node = self.router.node(self.target)?;
        node.append_entries(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, Rpc<InstallSnapshotError>> {
        let node = self.router.node(self.target)?;
        node.install_snapshot(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, Rpc> {
        let node = self.router.node(self.target)?;
        node.vote(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What the example writes: puts, a put with a TTL, a delete and a range delete.
fn writes() -> Vec<Request> {
    vec![
        Request::Put {
            key: b"user/1".to_vec(),
            value: b"ada".to_vec(),
        },
        Request::Put {
            key: b"user/2".to_vec(),
            value: b"grace".to_vec(),
        },
        Request::PutWithTtl {
            key: b"session/9".to_vec(),
            value: b"token".to_vec(),
            expires_at_ms: now_ms() + 3_600_000,
        },
        Request::Put {
            key: b"user/3".to_vec(),
            value: b"edsger".to_vec(),
        },
        Request::Delete {
            key: b"user/2".to_vec(),
        },
        Request::DeleteRange {
            start: b"user/3".to_vec(),
            end: b"user/4".to_vec(),
        },
    ]
}

/// Builds a snapshot on the leader and purges the log it holds.
async fn snapshot_and_purge(
    leader: &Raft<TypeConfig>,
    last: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    leader.trigger().snapshot().await?;
    leader
        .wait(Some(Duration::from_secs(10)))
        .metrics(
            |m| m.snapshot.is_some_and(|s| s.index >= last),
            "a snapshot",
        )
        .await?;
    leader.trigger().purge_log(last).await?;
    let purged = leader
        .wait(Some(Duration::from_secs(10)))
        .metrics(|m| m.purged.is_some_and(|p| p.index >= last), "the purge")
        .await?
        .purged;
    println!(
        "snapshot at {last}, log purged to {:?} on the leader (one range delete in raft.log)",
        purged.map(|p| p.index)
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("three_nodes: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .ok_or("give a directory for the three databases: three_nodes DIR")?;
    let config = Arc::new(
        Config {
            heartbeat_interval: 100,
            election_timeout_min: 300,
            election_timeout_max: 600,
            ..Config::default()
        }
        .validate()?,
    );
    let router = Router::default();
    let mut machines: BTreeMap<NodeId, StateMachine> = BTreeMap::new();
    for id in 1..=3 {
        let (log, state_machine) = cairn_raft::open(base.join(format!("node-{id}")))?;
        machines.insert(id, state_machine.clone());
        let raft = Raft::new(id, Arc::clone(&config), router.clone(), log, state_machine).await?;
        router.0.lock().map_err(|_| "poisoned")?.insert(id, raft);
    }
    let first = router.node(1)?;
    let members: BTreeMap<NodeId, BasicNode> = (1..=3)
        .map(|id| (id, BasicNode::new(format!("node-{id}"))))
        .collect();
    if let Err(e) = first.initialize(members).await {
        // A second run on the same directories: the cluster is already formed.
        println!("initialize: {e}");
    }
    let metrics = first
        .wait(Some(Duration::from_secs(10)))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await?;
    let leader_id = metrics.current_leader.ok_or("no leader")?;
    let leader = router.node(leader_id)?;
    println!("node {leader_id} leads");

    let mut last = 0;
    for request in writes() {
        last = leader.client_write(request).await?.data.index;
    }
    for id in 1..=3 {
        router
            .node(id)?
            .wait(Some(Duration::from_secs(10)))
            .applied_index_at_least(Some(last), "applied")
            .await?;
    }
    for (id, machine) in &machines {
        let read = |key: &[u8]| -> Result<String, Box<dyn std::error::Error>> {
            Ok(machine.get(key)?.map_or_else(
                || "-".to_owned(),
                |v| String::from_utf8_lossy(&v).into_owned(),
            ))
        };
        println!(
            "node {id}: user/1={} user/2={} user/3={} session/9={}",
            read(b"user/1")?,
            read(b"user/2")?,
            read(b"user/3")?,
            read(b"session/9")?
        );
    }

    snapshot_and_purge(&leader, last).await?;
    for id in 1..=3 {
        router.node(id)?.shutdown().await?;
    }
    Ok(())
}
