//! The Raft log's layout in the database, shared by the log store and the snapshot install
//! (whose last batch purges the log): the families, the keys, and the purge batch.

use cairn::{ColumnFamily, WriteBatch};
use openraft::LogId;

use crate::error::Malformed;
use crate::types::NodeId;

/// The family of the log's entries.
pub const LOG_FAMILY: &str = "raft.log";
/// The family of the vote, the committed id and the last purged id.
pub const META_FAMILY: &str = "raft.meta";

pub(crate) const VOTE: &[u8] = b"vote";
pub(crate) const COMMITTED: &[u8] = b"committed";
pub(crate) const LAST_PURGED: &[u8] = b"last_purged";
/// The id of the node whose log this is, recorded at its first start.
pub(crate) const NODE_ID: &[u8] = b"node_id";

/// A log index as the key it is stored under: big-endian, so keys sort as indexes do.
pub(crate) fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// Adds to `batch` the purge of the log in `log` up to `log_id`, with the last purged id
/// recorded in `meta` (the same batch, so the two never disagree after a crash). Never
/// backwards: a purge below the last one adds nothing.
pub(crate) fn stage_purge(
    log: &ColumnFamily,
    meta: &ColumnFamily,
    batch: &mut WriteBatch,
    log_id: LogId<NodeId>,
) -> Result<(), Malformed> {
    let last: Option<LogId<NodeId>> = match meta
        .get(LAST_PURGED)
        .map_err(|e| Malformed(e.to_string()))?
    {
        None => None,
        Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| Malformed(e.to_string()))?,
    };
    if last.is_some_and(|last| last.index >= log_id.index) {
        return Ok(());
    }
    let recorded = serde_json::to_vec(&log_id).map_err(|e| Malformed(e.to_string()))?;
    batch.put_cf(meta, LAST_PURGED, recorded);
    batch.delete_range_cf(log, index_key(0), index_key(log_id.index.saturating_add(1)));
    if log_id.index == u64::MAX {
        batch.delete_cf(log, index_key(u64::MAX));
    }
    Ok(())
}
