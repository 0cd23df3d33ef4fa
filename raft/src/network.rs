//! openraft's network over TCP: one connection per peer and purpose, opened when first needed
//! and again after any failure, carrying one call at a time in [`crate::wire`]'s frames.
//!
//! A peer that cannot be reached is `Unreachable` (openraft backs off before trying again); a
//! call that fails or overruns its time on an open connection is a network error, and the
//! connection is dropped, since a late reply would answer the wrong call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, RaftNetwork, RaftNetworkFactory};
use tokio::net::TcpStream;

use crate::types::{NodeId, TypeConfig};
use crate::wire::{Call, Reply, read_frame, write_frame};

type RpcError<E = openraft::error::Infallible> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

/// How long connecting to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Idle connections by peer address, which a [`Peer`] takes before it opens one and gives
/// back when dropped: openraft makes a client for each round of heartbeats a linearizable read
/// sends, and a new connection each time would leave sockets in `TIME_WAIT` by the thousand.
type Idle = Arc<Mutex<HashMap<String, Vec<TcpStream>>>>;

/// The most idle connections kept to one peer.
const IDLE_PER_PEER: usize = 8;

/// Makes a [`Peer`] for each node openraft talks to.
#[derive(Debug, Clone, Default)]
pub struct TcpNetwork {
    idle: Idle,
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            target,
            addr: node.addr.clone(),
            stream: None,
            idle: Arc::clone(&self.idle),
        }
    }
}

/// A connection to one peer.
#[derive(Debug)]
pub struct Peer {
    target: NodeId,
    addr: String,
    stream: Option<TcpStream>,
    idle: Idle,
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(stream) = self.stream.take() {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            let pool = idle.entry(self.addr.clone()).or_default();
            if pool.len() < IDLE_PER_PEER {
                pool.push(stream);
            }
        }
    }
}

/// Why a call to a peer failed: it could not be reached, or the call failed on the way.
enum CallError {
    Unreachable(std::io::Error),
    Network(std::io::Error),
}

impl<E: std::error::Error> From<CallError> for RpcError<E> {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
        }
    }
}

impl Peer {
    /// Sends `call` and waits for its reply within `ttl`.
    async fn call(&mut self, call: &Call, ttl: Duration) -> Result<Reply, CallError> {
        let mut stream = match self.stream.take().or_else(|| self.idle_stream()) {
            Some(stream) => stream,
            None => self.connect().await.map_err(CallError::Unreachable)?,
        };
        let exchange = async {
            write_frame(&mut stream, call).await?;
            read_frame::<_, Reply>(&mut stream).await?.ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection",
                )
            })
        };
        let reply = tokio::time::timeout(ttl, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no reply from node {} within {ttl:?}", self.target),
                ))
            })
            .map_err(CallError::Network)?;
        self.stream = Some(stream);
        Ok(reply)
    }

    /// An idle connection to this peer that is still open, if there is one.
    fn idle_stream(&self) -> Option<TcpStream> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let pool = idle.get_mut(&self.addr)?;
        std::iter::from_fn(|| pool.pop()).find(crate::client::still_open)
    }

    async fn connect(&self) -> std::io::Result<TcpStream> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connecting to node {} at {}", self.target, self.addr),
                )
            })??;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    fn unexpected(&self, reply: &Reply) -> CallError {
        CallError::Network(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "node {} answered with the wrong reply: {reply:?}",
                self.target
            ),
        ))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcError> {
        match self.call(&Call::Append(rpc), option.hard_ttl()).await? {
            Reply::Append(answer) => answer.map_err(|e| remote(self.target, e)),
            other => Err(self.unexpected(&other).into()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcError<InstallSnapshotError>> {
        match self.call(&Call::Snapshot(rpc), option.hard_ttl()).await? {
            Reply::Snapshot(answer) => answer.map_err(|e| remote(self.target, e)),
            other => Err(self.unexpected(&other).into()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcError> {
        match self.call(&Call::Vote(rpc), option.hard_ttl()).await? {
            Reply::Vote(answer) => answer.map_err(|e| remote(self.target, e)),
            other => Err(self.unexpected(&other).into()),
        }
    }
}

fn remote<E: std::error::Error>(target: NodeId, e: RaftError<NodeId, E>) -> RpcError<E> {
    RPCError::RemoteError(openraft::error::RemoteError::new(target, e))
}
