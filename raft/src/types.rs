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

/// What a log entry's encoding adds to its request's keys and values, at most.
const ENTRY_OVERHEAD: usize = 64;

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
    /// Why this request should not be proposed, if it should not: too large for one log
    /// entry (the entry is one value of the log's family, at most [`cairn::MAX_VALUE_LEN`];
    /// such a request fails the leader's append and stops it), or refused by the state machine
    /// (see [`Request::refusal`]). A service checks every request with this before proposing.
    ///
    /// # Errors
    /// The reason, in words.
    pub fn validate(&self) -> Result<(), String> {
        let parts = match self {
            Self::Put { key, value } | Self::PutWithTtl { key, value, .. } => {
                key.len() + value.len()
            }
            Self::Delete { key } => key.len(),
            Self::DeleteRange { start, end } => start.len() + end.len(),
        };
        if parts + ENTRY_OVERHEAD > cairn::MAX_VALUE_LEN {
            return Err(format!(
                "a request of {parts} bytes is over the log entry's limit of {}",
                cairn::MAX_VALUE_LEN - ENTRY_OVERHEAD
            ));
        }
        self.refusal()
    }

    /// Why the state machine applies this request as nothing, if it does: a key over
    /// [`cairn::MAX_KEY_LEN`], a value over [`cairn::MAX_VALUE_LEN`] less its 8-byte expiry, a
    /// range whose start is after its end. The reason goes in its [`Response`], the same on
    /// every replica. This rule decides what every replica's data becomes, so it never changes
    /// for a request already in a log.
    ///
    /// # Errors
    /// The reason, in words.
    pub fn refusal(&self) -> Result<(), String> {
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
/// nothing if it was (a request the engine refuses, see [`Request::refusal`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The log index of the entry.
    pub index: u64,
    /// Why the request changed nothing, if it did not.
    pub refused: Option<String>,
}
