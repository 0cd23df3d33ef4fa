//! The Raft types of a Cairn node: what the log carries (a [`Request`]), what applying one
//! answers (a [`Response`]), and openraft's type configuration tying them to u64 node ids,
//! `BasicNode` addresses and snapshots held as bytes.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    /// The type configuration of a Cairn node: [`Request`] in the log, [`Response`] from the
    /// state machine, u64 node ids, `BasicNode` addresses, snapshots as bytes, the tokio runtime.
    pub TypeConfig:
        D = Request,
        R = Response,
);

/// A node's id.
pub type NodeId = u64;

/// A write the replicated state machine applies, in log order, on every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Sets `key` to `value` until `expires_at_ms` (ms since the epoch): an absolute time, fixed
    /// when the request is made, so every replica expires the value at the same moment however
    /// late it applies the entry.
    PutWithTtl {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
        /// When the value expires, in ms since the epoch.
        expires_at_ms: u64,
    },
    /// Deletes `key`.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// Deletes every key in `[start, end)` with one range tombstone.
    DeleteRange {
        /// The first key deleted.
        start: Vec<u8>,
        /// The first key kept.
        end: Vec<u8>,
    },
}

/// What applying an entry answers: the index it was applied at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The log index of the entry.
    pub index: u64,
}
