//! The Raft types of a Cairn node: what the log carries (a [`Request`]), what applying one
//! answers (a [`Response`]), and openraft's type configuration tying them to u64 node ids,
//! `BasicNode` addresses and snapshots kept as chunks in the database.

use serde::{Deserialize, Serialize};

use crate::snapshot_data::SnapshotData;

openraft::declare_raft_types!(
    /// The type configuration of a Cairn node: [`Request`] in the log, [`Response`] from the
    /// state machine, u64 node ids, `BasicNode` addresses, snapshots as chunks in the database
    /// ([`SnapshotData`]), the tokio runtime.
    pub TypeConfig:
        D = Request,
        R = Response,
        SnapshotData = SnapshotData,
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

impl Request {
    /// Why the engine would refuse this request, if it would: a key over
    /// [`cairn::MAX_KEY_LEN`], a value over [`cairn::MAX_VALUE_LEN`], a range whose start is
    /// after its end. A service checks before it proposes; a request committed anyway is
    /// applied as nothing, with this reason in its [`Response`], the same on every replica.
    ///
    /// # Errors
    /// The reason, in words.
    pub fn validate(&self) -> Result<(), String> {
        let key = |k: &[u8]| {
            if k.len() > cairn::MAX_KEY_LEN {
                Err(format!(
                    "a key of {} bytes is over the limit of {}",
                    k.len(),
                    cairn::MAX_KEY_LEN
                ))
            } else {
                Ok(())
            }
        };
        let value = |v: &[u8]| {
            // The stored value carries its 8-byte expiry in front.
            if v.len() + 8 > cairn::MAX_VALUE_LEN {
                Err(format!(
                    "a value of {} bytes is over the limit of {}",
                    v.len(),
                    cairn::MAX_VALUE_LEN - 8
                ))
            } else {
                Ok(())
            }
        };
        match self {
            Self::Put { key: k, value: v }
            | Self::PutWithTtl {
                key: k, value: v, ..
            } => {
                key(k)?;
                value(v)
            }
            Self::Delete { key: k } => key(k),
            Self::DeleteRange { start, end } => {
                key(start)?;
                key(end)?;
                if start > end {
                    return Err("a range whose start is after its end".to_owned());
                }
                Ok(())
            }
        }
    }
}

/// What applying an entry answers: the index it was applied at, and why it was applied as
/// nothing if it was (a request the engine refuses, see [`Request::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The log index of the entry.
    pub index: u64,
    /// Why the request changed nothing, if it did not.
    pub refused: Option<String>,
}
