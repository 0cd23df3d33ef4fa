//! The replicated key-value state machine on Cairn: its data in the `raft.data` family, its
//! `last_applied` log id, membership and current snapshot in `raft.sm`.
//!
//! Every `apply` call writes its entries' data, `last_applied` and membership in one write
//! batch, so a crash never leaves the data and `last_applied` apart: the batch is in the
//! engine's log whole or not at all, and openraft re-applies from `last_applied` on. The batch
//! is not synced: the Raft log, synced on append, is what survives power loss.
//!
//! A value is stored with its expiry in front (8 bytes, big-endian ms since the epoch, 0 for
//! none), so a snapshot carries it and a replica that applies a TTL write late expires the value
//! at the same moment as the others; the engine's own TTL reclaims the bytes.
//!
//! A snapshot is built from a Cairn snapshot of the two families (one consistent view, taken
//! while applies go on) and installed in one batch: the old data range-deleted, the new written,
//! `last_applied`, membership and the snapshot itself recorded. A crash during an install
//! leaves the old state or the new, never a mix.

use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use cairn::{ColumnFamily, Db, WriteBatch, WriteOptions};
use openraft::BasicNode;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StoredMembership};

use crate::error::{self, Malformed, StorageResult};
use crate::snapshot_data::{Pair, decode_pairs, encode_pairs};
use crate::types::{NodeId, Request, Response, TypeConfig};

/// The family of the state machine's keys and values.
pub const DATA_FAMILY: &str = "raft.data";
/// The family of `last_applied`, membership and the current snapshot.
pub const STATE_FAMILY: &str = "raft.sm";

const LAST_APPLIED: &[u8] = b"last_applied";
const MEMBERSHIP: &[u8] = b"membership";
const SNAPSHOT_META: &[u8] = b"snapshot.meta";
const SNAPSHOT_DATA: &[u8] = b"snapshot.data";

/// The state machine of one node, on a Cairn database. Cloning shares it (the clone is the
/// snapshot builder openraft asks for).
#[derive(Debug, Clone)]
pub struct StateMachine {
    db: Arc<Db>,
    data: ColumnFamily,
    state: ColumnFamily,
    /// Held while the current snapshot is recorded: a build running beside an install never
    /// replaces the newer snapshot the install recorded.
    recording: Arc<std::sync::Mutex<()>>,
}

type Membership = StoredMembership<NodeId, BasicNode>;

impl StateMachine {
    /// The state machine in `db`, its families created if missing.
    ///
    /// # Errors
    /// The engine's, as a storage error.
    pub fn open(db: Arc<Db>) -> StorageResult<Self> {
        let data = crate::family(&db, DATA_FAMILY).map_err(|e| error::read_state(&e))?;
        let state = crate::family(&db, STATE_FAMILY).map_err(|e| error::read_state(&e))?;
        Ok(Self {
            db,
            data,
            state,
            recording: Arc::default(),
        })
    }

    /// The value of `key`, unless it is absent or expired.
    ///
    /// # Errors
    /// The engine's, as a storage error.
    pub fn get(&self, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        let stored = self.data.get(key).map_err(|e| error::read_state(&e))?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let (expires_at, value) = split_expiry(&stored).ok_or_else(|| {
            error::read_state(&Malformed(format!(
                "value of {} bytes has no expiry",
                stored.len()
            )))
        })?;
        if expires_at != 0 && expires_at <= self.db.now_ms() {
            return Ok(None);
        }
        Ok(Some(value.to_vec()))
    }

    fn read_state<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> StorageResult<Option<T>> {
        match self.state.get(key).map_err(|e| error::read_state(&e))? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| error::read_state(&e)),
        }
    }

    /// Adds `request`'s effect to `batch`, as of `now_ms` on this replica's clock.
    fn stage(&self, batch: &mut WriteBatch, request: &Request, now_ms: u64) {
        match request {
            Request::Put { key, value } => batch.put_cf(&self.data, key, with_expiry(0, value)),
            Request::PutWithTtl {
                key,
                value,
                expires_at_ms,
            } => {
                if *expires_at_ms <= now_ms {
                    // Already expired here: the key reads as absent, as on a replica that
                    // applied it in time and has since seen it expire.
                    batch.delete_cf(&self.data, key);
                } else {
                    let ttl = Duration::from_millis(expires_at_ms - now_ms);
                    batch.put_with_ttl_cf(&self.data, key, with_expiry(*expires_at_ms, value), ttl);
                }
            }
            Request::Delete { key } => batch.delete_cf(&self.data, key),
            Request::DeleteRange { start, end } => batch.delete_range_cf(&self.data, start, end),
        }
    }

    /// The data at `snapshot`, as pairs of key and stored value (expiry in front).
    fn pairs_at(&self, snapshot: &cairn::Snapshot) -> StorageResult<Vec<Pair>> {
        let iter = snapshot
            .range_cf::<Vec<u8>>(&self.data, ..)
            .map_err(|e| error::read_state(&e))?;
        iter.map(|item| {
            item.map(|(k, v)| (k.to_vec(), v.to_vec()))
                .map_err(|e| error::read_state(&e))
        })
        .collect()
    }
}

/// `value` with `expires_at` (0: never) in front.
fn with_expiry(expires_at: u64, value: &[u8]) -> Vec<u8> {
    let mut stored = Vec::with_capacity(8 + value.len());
    stored.extend_from_slice(&expires_at.to_be_bytes());
    stored.extend_from_slice(value);
    stored
}

/// A stored value's expiry and the value itself.
fn split_expiry(stored: &[u8]) -> Option<(u64, &[u8])> {
    let (head, value) = stored.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*head), value))
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> StorageResult<(Option<LogId<NodeId>>, Membership)> {
        let applied: Option<LogId<NodeId>> = self.read_state(LAST_APPLIED)?;
        let membership: Option<Membership> = self.read_state(MEMBERSHIP)?;
        Ok((applied, membership.unwrap_or_default()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Response>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let now = self.db.now_ms();
        let mut batch = WriteBatch::new();
        let mut responses = Vec::new();
        let mut last = None;
        let mut membership = None;
        for entry in entries {
            let mut refused = None;
            match &entry.payload {
                EntryPayload::Blank => {}
                // A request the engine would refuse changes nothing, on every replica alike;
                // failing would stop every node, again after each restart.
                EntryPayload::Normal(request) => match request.validate() {
                    Ok(()) => self.stage(&mut batch, request, now),
                    Err(why) => refused = Some(why),
                },
                EntryPayload::Membership(m) => {
                    membership = Some(StoredMembership::new(Some(entry.log_id), m.clone()));
                }
            }
            responses.push(Response {
                index: entry.log_id.index,
                refused,
            });
            last = Some(entry.log_id);
        }
        let Some(last) = last else {
            return Ok(responses);
        };
        let applied = serde_json::to_vec(&Some(last)).map_err(|e| error::write_state(&e))?;
        batch.put_cf(&self.state, LAST_APPLIED, applied);
        if let Some(m) = &membership {
            let m = serde_json::to_vec(m).map_err(|e| error::write_state(&e))?;
            batch.put_cf(&self.state, MEMBERSHIP, m);
        }
        self.db.write(batch).map_err(|e| error::write_state(&e))?;
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let signature = Some(meta.signature());
        let bytes = snapshot.into_inner();
        // Read whole first: a snapshot that does not decode changes nothing.
        let pairs =
            decode_pairs(&bytes).map_err(|e| error::read_snapshot(signature.clone(), &e))?;
        let fail = |e: &dyn std::error::Error| {
            error::write_snapshot(signature.clone(), &Malformed(e.to_string()))
        };
        let mut batch = WriteBatch::new();
        self.clear_data(&mut batch).map_err(|e| fail(&e))?;
        let now = self.db.now_ms();
        for (key, stored) in &pairs {
            let (expires_at, _) = split_expiry(stored)
                .ok_or_else(|| fail(&Malformed("a value without its expiry".to_owned())))?;
            match expires_at {
                0 => batch.put_cf(&self.data, key, stored),
                at if at <= now => {}
                at => {
                    batch.put_with_ttl_cf(&self.data, key, stored, Duration::from_millis(at - now));
                }
            }
        }
        let json = |r: serde_json::Result<Vec<u8>>| r.map_err(|e| fail(&e));
        batch.put_cf(
            &self.state,
            LAST_APPLIED,
            json(serde_json::to_vec(&meta.last_log_id))?,
        );
        batch.put_cf(
            &self.state,
            MEMBERSHIP,
            json(serde_json::to_vec(&meta.last_membership))?,
        );
        batch.put_cf(&self.state, SNAPSHOT_META, json(serde_json::to_vec(meta))?);
        batch.put_cf(&self.state, SNAPSHOT_DATA, &bytes);
        let _recording = self
            .recording
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.db
            .write_opt(batch, &WriteOptions { sync: true })
            .map_err(|e| fail(&e))?;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let meta: Option<SnapshotMeta<NodeId, BasicNode>> = self.read_state(SNAPSHOT_META)?;
        let Some(meta) = meta else {
            return Ok(None);
        };
        let data = self
            .state
            .get(SNAPSHOT_DATA)
            .map_err(|e| error::read_snapshot(Some(meta.signature()), &e))?
            .ok_or_else(|| {
                error::read_snapshot(
                    Some(meta.signature()),
                    &Malformed("the snapshot's data is missing".to_owned()),
                )
            })?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data.to_vec())),
        }))
    }
}

impl StateMachine {
    /// Adds to `batch` the deletion of every key the data family holds now, from the empty key
    /// on (expired values a read no longer shows included) to the last key there is.
    fn clear_data(&self, batch: &mut WriteBatch) -> cairn::Result<()> {
        let mut iter = self.data.iter()?;
        if let Some((last, _)) = iter.next_back().transpose()? {
            batch.delete_range_cf(&self.data, b"", &last);
            batch.delete_cf(&self.data, &last);
        }
        Ok(())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        // One view of data and state together, while applies go on.
        let view = self.db.snapshot();
        let read = |key: &[u8]| {
            view.get_cf(&self.state, key)
                .map_err(|e| error::read_state(&e))
        };
        let last_applied: Option<LogId<NodeId>> = match read(LAST_APPLIED)? {
            Some(b) => serde_json::from_slice(&b).map_err(|e| error::read_state(&e))?,
            None => None,
        };
        let membership: Membership = match read(MEMBERSHIP)? {
            Some(b) => serde_json::from_slice(&b).map_err(|e| error::read_state(&e))?,
            None => Membership::default(),
        };
        let pairs = self.pairs_at(&view)?;
        let data = encode_pairs(&pairs);
        // Unique across nodes too: a transfer matches its chunks by this id.
        let snapshot_id = format!(
            "{}-{}-{}",
            last_applied.map_or(0, |id| id.leader_id.node_id),
            last_applied.map_or(0, |id| id.index),
            view.seqno()
        );
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id,
        };
        let signature = Some(meta.signature());
        let mut batch = WriteBatch::new();
        let meta_json =
            serde_json::to_vec(&meta).map_err(|e| error::write_snapshot(signature.clone(), &e))?;
        batch.put_cf(&self.state, SNAPSHOT_META, meta_json);
        batch.put_cf(&self.state, SNAPSHOT_DATA, &data);
        {
            // Recorded only if newer than what is recorded: an install may have run meanwhile.
            let _recording = self
                .recording
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let recorded: Option<SnapshotMeta<NodeId, BasicNode>> =
                self.read_state(SNAPSHOT_META)?;
            let newer = recorded.is_none_or(|r| r.last_log_id <= meta.last_log_id);
            if newer {
                self.db
                    .write(batch)
                    .map_err(|e| error::write_snapshot(signature, &e))?;
            }
        }
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}
