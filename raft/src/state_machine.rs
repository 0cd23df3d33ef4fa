//! The replicated key-value state machine on Cairn: its data in the `raft.data` family, its
//! `last_applied` log id, membership and snapshot records in `raft.sm`, snapshot bytes in
//! `raft.snap` (the snapshots themselves are `snapshot.rs`).
//!
//! Every `apply` call writes its entries' data, `last_applied` and membership in one write
//! batch, so a crash never leaves the data and `last_applied` apart: the batch is in the
//! engine's log whole or not at all, and openraft re-applies from `last_applied` on. The batch
//! is not synced: the Raft log, synced on append, is what survives power loss.
//!
//! A value is stored with its expiry in front (8 bytes, big-endian ms since the epoch, 0 for
//! none), so a snapshot carries it and a replica that applies a TTL write late expires the value
//! at the same moment as the others; the engine's own TTL reclaims the bytes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cairn::{ColumnFamily, Db, WriteBatch};
use openraft::BasicNode;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StoredMembership};

use crate::error::{self, Malformed, StorageResult};
use crate::snapshot_data::{SNAPSHOT_FAMILY, SnapshotData};
use crate::types::{NodeId, Request, Response, TypeConfig};

/// The family of the state machine's keys and values.
pub const DATA_FAMILY: &str = "raft.data";
/// The family of `last_applied`, membership and the snapshot records.
pub const STATE_FAMILY: &str = "raft.sm";

pub(crate) const LAST_APPLIED: &[u8] = b"last_applied";
pub(crate) const MEMBERSHIP: &[u8] = b"membership";

/// The state machine of one node, on a Cairn database. Cloning shares it (the clone is the
/// snapshot builder openraft asks for).
#[derive(Debug, Clone)]
pub struct StateMachine {
    pub(crate) db: Arc<Db>,
    pub(crate) data: ColumnFamily,
    pub(crate) state: ColumnFamily,
    pub(crate) snaps: ColumnFamily,
    /// The number the next snapshot set gets.
    pub(crate) next_set: Arc<AtomicU64>,
    /// Held while an install writes and while a snapshot is recorded or a build takes its
    /// view: a build never sees half an install, nor replaces the newer snapshot it recorded.
    pub(crate) recording: Arc<std::sync::Mutex<()>>,
    /// While a received snapshot is being installed, the index it covers, plus one; else 0.
    pub(crate) installing: Arc<AtomicU64>,
    /// Testing only: how long an install waits after each step it writes.
    pub(crate) install_pause: Duration,
}

pub(crate) type Membership = StoredMembership<NodeId, BasicNode>;

impl StateMachine {
    /// The state machine in `db`, its families created if missing. An install a crash
    /// interrupted is finished first, and snapshot sets no record names are deleted.
    ///
    /// # Errors
    /// The engine's, as a storage error.
    pub fn open(db: Arc<Db>) -> StorageResult<Self> {
        Self::open_with(db, cairn::CfOptions::default())
    }

    /// As [`open`](Self::open), creating the data family with `data_options` if it is missing
    /// (a tombstone grace period, say; an existing family keeps the options it has).
    ///
    /// # Errors
    /// The engine's, as a storage error.
    pub fn open_with(db: Arc<Db>, data_options: cairn::CfOptions) -> StorageResult<Self> {
        let family = |name| crate::family(&db, name).map_err(|e| error::read_state(&e));
        let data = match db.column_family(DATA_FAMILY) {
            Err(cairn::Error::ColumnFamilyNotFound(_)) => {
                db.create_column_family(DATA_FAMILY, data_options)
            }
            found => found,
        }
        .map_err(|e| error::read_state(&e))?;
        let machine = Self {
            data,
            state: family(STATE_FAMILY)?,
            snaps: family(SNAPSHOT_FAMILY)?,
            db,
            next_set: Arc::default(),
            recording: Arc::default(),
            installing: Arc::default(),
            install_pause: Duration::ZERO,
        };
        machine.recover_snapshots()?;
        Ok(machine)
    }

    /// Testing only: this state machine waits `pause` after each step of a snapshot install
    /// it writes, so that a crash test can land a kill inside one.
    #[must_use]
    pub fn with_install_pause(mut self, pause: Duration) -> Self {
        self.install_pause = pause;
        self
    }

    /// While a snapshot a leader sent is being installed, the last log index it covers.
    pub fn installing(&self) -> Option<u64> {
        self.installing.load(Ordering::SeqCst).checked_sub(1)
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

    /// The live pairs in `[start, end)` (to the end of the key space without `end`), in key
    /// order, at most `limit`; expired values are left out.
    ///
    /// # Errors
    /// The engine's, as a storage error.
    pub fn scan(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> StorageResult<Vec<(Vec<u8>, Vec<u8>)>> {
        use std::ops::Bound;
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let pairs = self
            .data
            .range::<&[u8]>((Bound::Included(start), upper))
            .map_err(|e| error::read_state(&e))?;
        let now = self.db.now_ms();
        let mut live = Vec::new();
        for pair in pairs {
            if live.len() >= limit {
                break;
            }
            let (key, stored) = pair.map_err(|e| error::read_state(&e))?;
            let (expires_at, value) = split_expiry(&stored).ok_or_else(|| {
                error::read_state(&Malformed(format!(
                    "value of {} bytes has no expiry",
                    stored.len()
                )))
            })?;
            if expires_at == 0 || expires_at > now {
                live.push((key.to_vec(), value.to_vec()));
            }
        }
        Ok(live)
    }

    /// Compacts the data family down to its last level: every version and tombstone the
    /// engine's rules allow to go is gone when this returns (on this node).
    ///
    /// # Errors
    /// The engine's, as a storage error.
    pub fn compact(&self) -> StorageResult<()> {
        self.data
            .compact_range::<&[u8]>(..)
            .map_err(|e| error::read_state(&e))
    }

    /// The record `key` of the state family, now or at `view`.
    pub(crate) fn read_state<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
        view: Option<&cairn::Snapshot>,
    ) -> StorageResult<Option<T>> {
        let stored = match view {
            Some(view) => view.get_cf(&self.state, key),
            None => self.state.get(key),
        };
        match stored.map_err(|e| error::read_state(&e))? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| error::read_state(&e)),
        }
    }

    /// Writes `batch` with `last_applied` set to `last` and the membership, if it changed.
    fn commit_applied(
        &self,
        mut batch: WriteBatch,
        last: LogId<NodeId>,
        membership: Option<&Membership>,
    ) -> StorageResult<()> {
        let applied = serde_json::to_vec(&Some(last)).map_err(|e| error::write_state(&e))?;
        batch.put_cf(&self.state, LAST_APPLIED, applied);
        if let Some(m) = membership {
            let m = serde_json::to_vec(m).map_err(|e| error::write_state(&e))?;
            batch.put_cf(&self.state, MEMBERSHIP, m);
        }
        self.db.write(batch).map_err(|e| error::write_state(&e))?;
        Ok(())
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
}

/// `value` with `expires_at` (0: never) in front.
pub(crate) fn with_expiry(expires_at: u64, value: &[u8]) -> Vec<u8> {
    let mut stored = Vec::with_capacity(8 + value.len());
    stored.extend_from_slice(&expires_at.to_be_bytes());
    stored.extend_from_slice(value);
    stored
}

/// A stored value's expiry and the value itself.
pub(crate) fn split_expiry(stored: &[u8]) -> Option<(u64, &[u8])> {
    let (head, value) = stored.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*head), value))
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> StorageResult<(Option<LogId<NodeId>>, Membership)> {
        let applied: Option<LogId<NodeId>> = self.read_state(LAST_APPLIED, None)?;
        let membership: Option<Membership> = self.read_state(MEMBERSHIP, None)?;
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
            // Large applies go in several batches, each whole with its own `last_applied`.
            if batch.size_bytes() >= crate::WRITE_BATCH_BYTES
                && let Some(last) = last.take()
            {
                self.commit_applied(std::mem::take(&mut batch), last, membership.take().as_ref())?;
            }
            let mut refused = None;
            match &entry.payload {
                EntryPayload::Blank => {}
                // A request the engine would refuse changes nothing, on every replica alike;
                // failing would stop every node, again after each restart.
                EntryPayload::Normal(request) => match request.refusal() {
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
        if let Some(last) = last {
            self.commit_applied(batch, last, membership.as_ref())?;
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<SnapshotData>> {
        let set = self.next_set.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(SnapshotData::receiver(
            Arc::clone(&self.db),
            self.snaps.clone(),
            set,
        )))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<SnapshotData>,
    ) -> StorageResult<()> {
        let (machine, meta) = (self.clone(), meta.clone());
        blocking(move || machine.install(&meta, snapshot)).await
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        self.current_snapshot()
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let machine = self.clone();
        blocking(move || machine.build()).await
    }
}

/// Runs `work`, which reads or writes a whole snapshot, on tokio's blocking pool when there is
/// a runtime, so it does not hold up the tasks sharing openraft's threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> StorageResult<T> + Send + 'static,
) -> StorageResult<T> {
    if tokio::runtime::Handle::try_current().is_err() {
        return work();
    }
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| error::write_snapshot(None, &std::io::Error::other(e.to_string())))?
}
