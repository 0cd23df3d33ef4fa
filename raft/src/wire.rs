//! What travels between the processes of a replicated Cairn, and how: every message is one
//! frame on a TCP connection, a 4-byte big-endian length and then the message in postcard
//! (serde, compact binary). A connection carries one call at a time: a [`Call`] out, its
//! [`Reply`] back.
//!
//! Nodes call each other with openraft's three RPCs; clients call a node with a
//! [`ClientCall`]. The frame's length is checked before anything is allocated, so a peer that
//! sends garbage is refused with an error, not an allocation of its choosing.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use openraft::error::RaftError;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::types::{NodeId, Request, TypeConfig};

/// The largest frame either side accepts: a full append of entries up to the engine's value
/// limit (the node sends at most [`crate::node::MAX_PAYLOAD_ENTRIES`] entries per append).
pub const MAX_FRAME: usize = 1 << 30;

/// The most a client write may carry (key and value): with at most
/// [`crate::node::MAX_PAYLOAD_ENTRIES`] entries per append, an append stays far under
/// [`MAX_FRAME`], and under a heartbeat's time on a local network.
pub const MAX_REQUEST: usize = 4 << 20;

/// The most pairs one scan answers; ask again from after the last key for more.
pub const MAX_SCAN: usize = 100_000;

/// A call on a node.
#[derive(Debug, Serialize, Deserialize)]
pub enum Call {
    /// openraft's append-entries RPC, from the leader.
    Append(AppendEntriesRequest<TypeConfig>),
    /// openraft's vote RPC, from a candidate.
    Vote(VoteRequest<NodeId>),
    /// A chunk of a snapshot, from the leader.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// A client's request.
    Client(ClientCall),
}

/// What a client asks of a node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ClientCall {
    /// Replicate a write; answered once it is committed and applied on the leader.
    Write(Request),
    /// The value of a key, linearizable (read on the leader after a read index).
    Get {
        /// The key.
        key: Vec<u8>,
    },
    /// Keys and values in `[start, end)` in order, at most `limit`, linearizable.
    Scan {
        /// The first key.
        start: Vec<u8>,
        /// The first key past the range; none for the end of the key space.
        end: Option<Vec<u8>>,
        /// At most this many pairs.
        limit: usize,
    },
    /// Form the cluster from this node's configured peers, or of it alone if it has none (only
    /// on a node never initialized).
    Init,
    /// Add a node as a learner, then make the voters `voters` (the leader only).
    ChangeMembership {
        /// Nodes to add as learners first, with their addresses.
        add: BTreeMap<NodeId, String>,
        /// The voters once the change is done.
        voters: BTreeSet<NodeId>,
    },
    /// What this node knows of the cluster.
    Status,
    /// This node's own state machine as it has applied it, not linearizable: the pairs in
    /// `[start, end)`, at most `limit` (how a checker reads each replica).
    LocalScan {
        /// The first key.
        start: Vec<u8>,
        /// The first key past the range; none for the end of the key space.
        end: Option<Vec<u8>>,
        /// At most this many pairs.
        limit: usize,
    },
    /// Compact this node's data down to its last level (an operator's or a checker's call).
    Compact,
}

/// A node's answer to a [`Call`].
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    /// To [`Call::Append`].
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// To [`Call::Vote`].
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// To [`Call::Snapshot`].
    Snapshot(
        Result<
            InstallSnapshotResponse<NodeId>,
            RaftError<NodeId, openraft::error::InstallSnapshotError>,
        >,
    ),
    /// To [`Call::Client`].
    Client(ClientReply),
}

/// A node's answer to a [`ClientCall`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientReply {
    /// The write is committed and applied at `index`; `refused` says why it changed nothing,
    /// if it did not (the same on every replica).
    Written {
        /// The log index of the write.
        index: u64,
        /// Why the request changed nothing, if it did not.
        refused: Option<String>,
    },
    /// The value of the key asked for, if it has one.
    Value(Option<Vec<u8>>),
    /// The pairs of a scan, in key order.
    Pairs(Vec<(Vec<u8>, Vec<u8>)>),
    /// Done (init, membership change).
    Done,
    /// What the node knows.
    Status(NodeStatus),
    /// This node is not the leader: ask `leader` (id and address) if it is known.
    NotLeader(Option<(NodeId, String)>),
    /// Refused before it was proposed (too large, a range backwards): nothing was written.
    Invalid(String),
    /// The node could not do it (no quorum, shutting down, its storage failed).
    Failed(String),
}

/// What one node knows of the cluster, as `cairn cluster status` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The node's id.
    pub id: NodeId,
    /// Leader, Follower, Candidate or Learner.
    pub state: String,
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// The node's term.
    pub term: u64,
    /// The index of the last entry in its log.
    pub last_log: Option<u64>,
    /// The index of the last entry applied to its state machine.
    pub last_applied: Option<u64>,
    /// The index its newest snapshot covers.
    pub snapshot: Option<u64>,
    /// The index below which its log is purged.
    pub purged: Option<u64>,
    /// The voters, by id.
    pub voters: BTreeSet<NodeId>,
    /// Every member (voters and learners) with its address.
    pub nodes: BTreeMap<NodeId, String>,
    /// While it installs a snapshot a leader sent, the last log index the snapshot covers.
    pub installing: Option<u64>,
}

/// Writes `message` as one frame.
///
/// # Errors
/// The connection's, or `InvalidInput` for a message over [`MAX_FRAME`].
pub async fn write_frame<W, T>(stream: &mut W, message: &T) -> io::Result<()>
where
    W: tokio::io::AsyncWrite + Unpin,
    T: Serialize,
{
    let bytes = postcard::to_stdvec(message).map_err(io::Error::other)?;
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|len| *len as usize <= MAX_FRAME)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a message of {} bytes is over the frame limit of {MAX_FRAME}",
                    bytes.len()
                ),
            )
        })?;
    stream.write_all(&len.to_be_bytes()).await?;
    stream.write_all(&bytes).await?;
    stream.flush().await
}

/// Reads one frame as a `T`; `None` when the peer closed the connection between frames.
///
/// # Errors
/// The connection's; `InvalidData` for a length over [`MAX_FRAME`] or bytes that are not a `T`.
pub async fn read_frame<R, T>(stream: &mut R) -> io::Result<Option<T>>
where
    R: tokio::io::AsyncRead + Unpin,
    T: serde::de::DeserializeOwned,
{
    let mut len = [0u8; 4];
    match stream.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes is over the limit of {MAX_FRAME}"),
        ));
    }
    // Memory grows with the bytes that arrive, not with the length a peer claims.
    let mut bytes = Vec::with_capacity(len.min(1 << 20));
    let read = (&mut *stream)
        .take(len as u64)
        .read_to_end(&mut bytes)
        .await?;
    if read < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("a frame of {len} bytes ended after {read}"),
        ));
    }
    postcard::from_bytes(&bytes)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("a bad message: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_frame_reads_back_as_written() {
        let call = Call::Client(ClientCall::Scan {
            start: b"a".to_vec(),
            end: None,
            limit: 7,
        });
        let mut bytes = Vec::new();
        write_frame(&mut bytes, &call).await.expect("write");
        let mut reader = bytes.as_slice();
        let back: Option<Call> = read_frame(&mut reader).await.expect("read");
        assert!(matches!(
            back,
            Some(Call::Client(ClientCall::Scan { limit: 7, .. }))
        ));
        let none: Option<Call> = read_frame(&mut reader).await.expect("end");
        assert!(none.is_none(), "a closed connection between frames");
    }

    #[tokio::test]
    async fn an_oversize_length_and_garbage_are_errors_not_allocations() {
        let mut huge = (u32::MAX).to_be_bytes().to_vec();
        huge.extend_from_slice(b"xx");
        let err = read_frame::<_, Call>(&mut huge.as_slice())
            .await
            .expect_err("over the limit");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let mut garbage = 3u32.to_be_bytes().to_vec();
        garbage.extend_from_slice(&[0xff, 0xff, 0xff]);
        let err = read_frame::<_, Call>(&mut garbage.as_slice())
            .await
            .expect_err("garbage");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let mut cut = 10u32.to_be_bytes().to_vec();
        cut.extend_from_slice(b"abc");
        assert!(read_frame::<_, Call>(&mut cut.as_slice()).await.is_err());
    }
}
