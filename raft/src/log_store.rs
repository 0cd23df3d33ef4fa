//! The Raft log on Cairn: entries in the `raft.log` family keyed by their index in big-endian
//! bytes (so key order is log order), the vote, the committed log id and the last purged log
//! id in `raft.meta`.
//!
//! An append is one synced write batch, acknowledged through openraft's callback only once the
//! engine's log is on disk (the engine group-commits concurrent syncs). `truncate` and `purge`
//! are each one range tombstone: a purged prefix is the queue workload Cairn is built for, whose
//! tables compaction drops whole once the tombstone covers them. `purge` records the last purged
//! id in the same batch as its range delete, so the two never disagree after a crash.
//!
//! A purge past the node's `last_applied` is openraft's for a snapshot being installed; it is
//! held back to the newest snapshot recorded (current or being installed) and the install's
//! last batch purges the rest, so a crash before the install is recorded never leaves a log
//! purged past a state machine that cannot catch up (`snapshot.rs`).

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use cairn::{ColumnFamily, Db, WriteBatch, WriteOptions};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogReader, Vote};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{self, Malformed, StorageResult};
use crate::log_layout::{
    COMMITTED, LAST_PURGED, LOG_FAMILY, META_FAMILY, NODE_ID, VOTE, index_key, stage_purge,
};
use crate::planted::{Bug, planted};
use crate::types::{NodeId, TypeConfig};

/// The Raft log of one node, on a Cairn database. Cloning shares it (the clone is the log
/// reader openraft asks for).
#[derive(Debug, Clone)]
pub struct LogStore {
    db: Arc<Db>,
    log: ColumnFamily,
    meta: ColumnFamily,
}

const SYNC: WriteOptions = WriteOptions { sync: true };

impl LogStore {
    /// The log in `db`, its families created if missing.
    ///
    /// # Errors
    /// The engine's, as a storage error.
    pub fn open(db: Arc<Db>) -> StorageResult<Self> {
        let log = crate::family(&db, LOG_FAMILY).map_err(|e| error::read_logs(&e))?;
        let meta = crate::family(&db, META_FAMILY).map_err(|e| error::read_logs(&e))?;
        Ok(Self { db, log, meta })
    }

    /// Records `id` as the node whose log this is, at its first start; later, the id recorded
    /// if it is another (a directory started as the wrong node would vote and count twice).
    ///
    /// # Errors
    /// The engine's, as a storage error.
    pub fn claim_node_id(&self, id: NodeId) -> StorageResult<Option<NodeId>> {
        let recorded: Option<NodeId> = self
            .read_meta(NODE_ID)
            .map_err(|e| error::read_logs(&boxed(e.as_ref())))?;
        match recorded {
            Some(recorded) if recorded != id => Ok(Some(recorded)),
            Some(_) => Ok(None),
            None => {
                self.write_meta(NODE_ID, &id)
                    .map_err(|e| error::write_logs(&boxed(e.as_ref())))?;
                Ok(None)
            }
        }
    }

    /// The database the log lives in.
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    fn read_meta<T: DeserializeOwned>(
        &self,
        key: &[u8],
    ) -> Result<Option<T>, Box<dyn std::error::Error>> {
        match self.meta.get(key)? {
            None => Ok(None),
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
        }
    }

    fn write_meta<T: Serialize>(
        &self,
        key: &[u8],
        value: &T,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let mut batch = WriteBatch::new();
        batch.put_cf(&self.meta, key, serde_json::to_vec(value)?);
        self.db.write_opt(batch, &SYNC)?;
        Ok(())
    }

    /// The entry with the highest index, if any.
    fn last_entry(&self) -> StorageResult<Option<Entry<TypeConfig>>> {
        let mut iter = self.log.iter().map_err(|e| error::read_logs(&e))?;
        match iter.next_back() {
            None => Ok(None),
            Some(item) => {
                let (_, bytes) = item.map_err(|e| error::read_logs(&e))?;
                decode(&bytes).map(Some)
            }
        }
    }
}

fn decode(bytes: &[u8]) -> StorageResult<Entry<TypeConfig>> {
    crate::codec::decode_entry(bytes).map_err(|e| error::read_logs(&e))
}

fn boxed(e: &dyn std::error::Error) -> Malformed {
    Malformed(e.to_string())
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let start = match range.start_bound() {
            Bound::Included(&i) => Bound::Included(index_key(i).to_vec()),
            Bound::Excluded(&i) => Bound::Excluded(index_key(i).to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let end = match range.end_bound() {
            Bound::Included(&i) => Bound::Included(index_key(i).to_vec()),
            Bound::Excluded(&i) => Bound::Excluded(index_key(i).to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let iter = self
            .log
            .range::<Vec<u8>>((start, end))
            .map_err(|e| error::read_logs(&e))?;
        let mut entries = Vec::new();
        for item in iter {
            let (key, bytes) = item.map_err(|e| error::read_logs(&e))?;
            let entry = decode(&bytes)?;
            if key.as_ref() != index_key(entry.log_id.index) {
                return Err(error::read_logs(&Malformed(format!(
                    "the entry under key {key:?} has index {}",
                    entry.log_id.index
                ))));
            }
            entries.push(entry);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId<NodeId>> = self
            .read_meta(LAST_PURGED)
            .map_err(|e| error::read_logs(&boxed(e.as_ref())))?;
        let last_log_id = self.last_entry()?.map(|e| e.log_id).or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        self.write_meta(VOTE, vote)
            .map_err(|e| error::write_vote(&boxed(e.as_ref())))
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        self.read_meta(VOTE)
            .map_err(|e| error::read_vote(&boxed(e.as_ref())))
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        // Not synced: openraft may lose it (it is recomputed), and the next synced append or
        // vote makes it durable with every write before it in the engine's one log.
        let mut batch = WriteBatch::new();
        let bytes = serde_json::to_vec(&committed).map_err(|e| error::write_logs(&e))?;
        batch.put_cf(&self.meta, COMMITTED, bytes);
        self.db.write(batch).map_err(|e| error::write_logs(&e))?;
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        let committed: Option<Option<LogId<NodeId>>> = self
            .read_meta(COMMITTED)
            .map_err(|e| error::read_logs(&boxed(e.as_ref())))?;
        Ok(committed.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = WriteBatch::new();
        for entry in entries {
            let bytes = crate::codec::encode(&entry).map_err(|e| error::write_logs(&e))?;
            batch.put_cf(&self.log, index_key(entry.log_id.index), bytes);
            // Large appends go in several writes (the engine's log takes records up to 1 GiB);
            // the last one's sync covers them all, and a crash before it leaves a prefix of
            // entries no one was told of.
            if batch.size_bytes() >= crate::WRITE_BATCH_BYTES {
                self.db
                    .write(std::mem::take(&mut batch))
                    .map_err(|e| error::write_logs(&e))?;
            }
        }
        // Synced before the callback: an acknowledged entry survives power loss. On an error
        // the callback is dropped unanswered and openraft stops the node.
        let sync = WriteOptions {
            sync: !planted(Bug::EarlyAck),
        };
        self.db
            .write_opt(batch, &sync)
            .map_err(|e| error::write_logs(&e))?;
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let mut batch = WriteBatch::new();
        batch.delete_range_cf(&self.log, index_key(log_id.index), index_key(u64::MAX));
        // The last index itself: the range's end is exclusive.
        batch.delete_cf(&self.log, index_key(u64::MAX));
        self.db
            .write_opt(batch, &SYNC)
            .map_err(|e| error::write_logs(&e))?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        // Past what this node applied, openraft purges only for a snapshot it is installing:
        // the purge waits for the install to be recorded, which purges in its last batch.
        let Some(log_id) =
            crate::snapshot::purge_limit(&self.db, log_id).map_err(|e| error::read_logs(&e))?
        else {
            return Ok(());
        };
        let mut batch = WriteBatch::new();
        stage_purge(&self.log, &self.meta, &mut batch, log_id)
            .map_err(|e| error::write_logs(&e))?;
        self.db
            .write_opt(batch, &SYNC)
            .map_err(|e| error::write_logs(&e))?;
        Ok(())
    }
}
