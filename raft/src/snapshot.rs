//! The state machine's snapshots: built from a Cairn snapshot, kept as a chunk set in the
//! database (`snapshot_data.rs`), recorded in `raft.sm`, installed so that a crash leaves the
//! old state or the new.
//!
//! **Build.** One Cairn snapshot gives `last_applied`, membership and the data together while
//! applies go on; the pairs stream into a new set, which is recorded as the current snapshot
//! only if it is newer than the one recorded (an install may have run meanwhile).
//!
//! **Install.** The received set is read whole and checked first, each pair as the install
//! needs it: a snapshot that does not decode changes nothing. Then a synced record names it as being installed; the data family is
//! cleared and the pairs written in batches of a few MiB; a last synced batch writes
//! `last_applied`, membership and the current-snapshot record, removes the installing record,
//! deletes the old set and purges the log up to the snapshot (openraft's purge for an install is
//! held back until then, see [`purge_limit`]). A crash anywhere in between leaves the installing record, and opening
//! the state machine redoes the install from the start (clearing again), so what survives is the
//! old state or the new, never a mix. While an install runs, a reader of the data family can see
//! a mix; a build waits for it.

use std::io::{BufReader, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cairn::{Db, WriteBatch, WriteOptions};
use openraft::storage::Snapshot;
use openraft::{BasicNode, LogId, SnapshotMeta};
use serde::{Deserialize, Serialize};

use crate::error::{self, Malformed, StorageResult};
use crate::log_layout::{LOG_FAMILY, META_FAMILY, stage_purge};
use crate::planted::{Bug, planted};
use crate::snapshot_data::{SnapshotData, delete_set, delete_sets_but};
use crate::snapshot_format::{PairEncoder, decode_pairs};
use crate::state_machine::{
    LAST_APPLIED, MEMBERSHIP, Membership, STATE_FAMILY, StateMachine, split_expiry,
};
use crate::types::{NodeId, TypeConfig};

/// The record of the current snapshot.
const CURRENT: &[u8] = b"snapshot.current";
/// The record of a snapshot being installed; present only until the install is whole.
const INSTALLING: &[u8] = b"snapshot.installing";
/// How much an install writes per batch.
const INSTALL_BATCH: usize = 8 << 20;

/// A snapshot's metadata and where its bytes are.
#[derive(Debug, Serialize, Deserialize)]
struct Recorded {
    meta: SnapshotMeta<NodeId, BasicNode>,
    set: u64,
    len: u64,
}

/// Why an install could not go on: damaged bytes, or the engine.
#[derive(Debug)]
pub(crate) enum Failure {
    Malformed(Malformed),
    Engine(cairn::Error),
}

impl From<Malformed> for Failure {
    fn from(e: Malformed) -> Self {
        Self::Malformed(e)
    }
}

impl From<cairn::Error> for Failure {
    fn from(e: cairn::Error) -> Self {
        Self::Engine(e)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Malformed(e) => e.fmt(f),
            Self::Engine(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Failure {}

/// `e`, whatever it is, as damage: a record or a stream that did not read or write as it should.
fn malformed(e: &impl std::fmt::Display) -> Failure {
    Failure::Malformed(Malformed(e.to_string()))
}

/// What a purge of the log in `db` asked up to `wanted` may purge: all of it up to the node's
/// `last_applied` (openraft purges only what a snapshot holds); past it, which openraft asks
/// only for a snapshot being installed, no further than the newest snapshot recorded (current
/// or being installed), the install's last batch purging the rest. None: nothing yet. Where the
/// database holds no state machine, `wanted`.
pub(crate) fn purge_limit(
    db: &Db,
    wanted: LogId<NodeId>,
) -> Result<Option<LogId<NodeId>>, Failure> {
    let Ok(state) = db.column_family(STATE_FAMILY) else {
        return Ok(Some(wanted));
    };
    let read = |key: &[u8]| state.get(key).map_err(Failure::Engine);
    let applied: Option<LogId<NodeId>> = match read(LAST_APPLIED)? {
        Some(bytes) => parse(&bytes)?,
        None => None,
    };
    if applied.is_none_or(|applied| wanted.index <= applied.index) {
        return Ok(Some(wanted));
    }
    let mut newest = None;
    for key in [CURRENT, INSTALLING] {
        if let Some(bytes) = read(key)? {
            let recorded: Recorded = parse(&bytes)?;
            newest = newest.max(recorded.meta.last_log_id);
        }
    }
    Ok(newest.map(|newest| {
        if newest.index < wanted.index {
            newest
        } else {
            wanted
        }
    }))
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Failure> {
    serde_json::from_slice(bytes).map_err(|e| malformed(&e))
}

impl StateMachine {
    /// Finishes an install a crash interrupted, deletes the sets no record names, and numbers
    /// new sets after the current one.
    pub(crate) fn recover_snapshots(&self) -> StorageResult<()> {
        if let Some(installing) = self.read_state::<Recorded>(INSTALLING, None)? {
            let signature = Some(installing.meta.signature());
            self.complete_install(&installing)
                .map_err(|e| error::write_snapshot(signature, &e))?;
        }
        let current: Option<Recorded> = self.read_state(CURRENT, None)?;
        let keep = current.as_ref().map(|r| r.set);
        let mut batch = WriteBatch::new();
        delete_sets_but(&mut batch, &self.snaps, keep);
        // Where a snapshot was kept before chunk sets (one value each, up to 256 MiB).
        for legacy in [&b"snapshot.meta"[..], b"snapshot.data"] {
            batch.delete_cf(&self.state, legacy);
        }
        self.db
            .write(batch)
            .map_err(|e| error::write_snapshot(None, &e))?;
        let next = keep.map_or(0, |set| set.saturating_add(1));
        self.next_set.store(next, Ordering::SeqCst);
        Ok(())
    }

    /// A reading handle on set `set` of `len` bytes, at a view taken now.
    fn reader(&self, set: u64, len: u64) -> SnapshotData {
        let view = self.db.snapshot();
        SnapshotData::reader(Arc::clone(&self.db), self.snaps.clone(), view, set, len)
    }

    /// The current snapshot, if one was built or installed.
    pub(crate) fn current_snapshot(&self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        // The view first: a set replaced after it stays readable through it.
        let view = self.db.snapshot();
        let Some(r) = self.read_state::<Recorded>(CURRENT, Some(&view))? else {
            return Ok(None);
        };
        let data =
            SnapshotData::reader(Arc::clone(&self.db), self.snaps.clone(), view, r.set, r.len);
        Ok(Some(Snapshot {
            meta: r.meta,
            snapshot: Box::new(data),
        }))
    }

    /// Builds a snapshot of the state now, and records it if it is the newest.
    pub(crate) fn build(&self) -> StorageResult<Snapshot<TypeConfig>> {
        // One view of data and state together, never in the middle of an install.
        let view = {
            let _installing = self.lock();
            self.db.snapshot()
        };
        let last_applied: Option<LogId<NodeId>> = self.read_state(LAST_APPLIED, Some(&view))?;
        let membership: Option<Membership> = self.read_state(MEMBERSHIP, Some(&view))?;
        // Unique across nodes and restarts too: a transfer matches its chunks by this id, and
        // a receiver reuses its handle for the same id. The clock's nanoseconds tell apart two
        // nodes building at the same index and sequence number.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let snapshot_id = format!(
            "{}-{}-{}-{nanos:x}",
            last_applied.map_or(0, |id| id.leader_id.node_id),
            last_applied.map_or(0, |id| id.index),
            view.seqno()
        );
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership.unwrap_or_default(),
            snapshot_id,
        };
        let signature = Some(meta.signature());
        let set = self.next_set.fetch_add(1, Ordering::SeqCst);
        let mut out = SnapshotData::receiver(Arc::clone(&self.db), self.snaps.clone(), set);
        self.write_pairs(&view, &mut out)
            .and_then(|()| out.keep().map_err(Failure::Engine))
            .map_err(|e| error::write_snapshot(signature.clone(), &e))?;
        let record = Recorded {
            meta,
            set,
            len: out.len(),
        };
        // Taken before the set can be replaced: the caller reads it whatever happens next.
        let data = self.reader(set, record.len);
        self.record_if_newest(&record)
            .map_err(|e| error::write_snapshot(signature, &e))?;
        Ok(Snapshot {
            meta: record.meta,
            snapshot: Box::new(data),
        })
    }

    /// Every pair of the data family at `view`, into `out`.
    fn write_pairs(&self, view: &cairn::Snapshot, out: &mut SnapshotData) -> Result<(), Failure> {
        let io = |e: std::io::Error| malformed(&e);
        let mut encoder = PairEncoder::new(out).map_err(io)?;
        for item in view.range_cf::<Vec<u8>>(&self.data, ..)? {
            let (key, value) = item?;
            encoder.push(&key, &value).map_err(io)?;
        }
        encoder.finish().map_err(io)?;
        Ok(())
    }

    /// Records `record` as the current snapshot unless a newer one is recorded, and deletes
    /// whichever set lost.
    fn record_if_newest(&self, record: &Recorded) -> Result<(), Failure> {
        let _recording = self.lock();
        let recorded: Option<Recorded> =
            self.read_state(CURRENT, None).map_err(|e| malformed(&e))?;
        let mut batch = WriteBatch::new();
        match recorded {
            Some(r) if r.meta.last_log_id > record.meta.last_log_id => {
                delete_set(&mut batch, &self.snaps, record.set);
            }
            recorded => {
                batch.put_cf(&self.state, CURRENT, json(record)?);
                if let Some(old) = recorded.filter(|r| r.set != record.set) {
                    delete_set(&mut batch, &self.snaps, old.set);
                }
            }
        }
        self.db.write(batch)?;
        Ok(())
    }

    /// Installs the snapshot `meta` describes, whose bytes `data` holds.
    pub(crate) fn install(
        &self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        mut data: Box<SnapshotData>,
    ) -> StorageResult<()> {
        let signature = Some(meta.signature());
        let index = meta.last_log_id.map_or(0, |id| id.index);
        self.installing
            .store(index.saturating_add(1), Ordering::SeqCst);
        let _done = Installing(&self.installing);
        let (set, len) = self
            .take_in(&mut data)
            .map_err(|e| error::write_snapshot(signature.clone(), &e))?;
        let record = Recorded {
            meta: meta.clone(),
            set,
            len,
        };
        // Whole and well formed before anything changes.
        if let Err(e) = decode_pairs(BufReader::new(self.reader(set, len)), |_, stored| {
            check_pair(&stored)
        }) {
            let mut batch = WriteBatch::new();
            delete_set(&mut batch, &self.snaps, set);
            let _ = self.db.write(batch);
            return Err(error::read_snapshot(signature, &e));
        }
        let fail = |e: &Failure| error::write_snapshot(signature.clone(), e);
        if planted(Bug::TornInstall) {
            return self.torn_install(&record).map_err(|e| fail(&e));
        }
        // From here, a restart finishes the install.
        let mut batch = WriteBatch::new();
        batch.put_cf(
            &self.state,
            INSTALLING,
            json(&record).map_err(|e| fail(&e))?,
        );
        self.db
            .write_opt(batch, &WriteOptions { sync: true })
            .map_err(|e| fail(&Failure::Engine(e)))?;
        self.pause_after_step();
        self.complete_install(&record).map_err(|e| fail(&e))
    }

    /// The planted bug `torn-install`: the snapshot is recorded as applied (and the log
    /// purged up to it) before the data is replaced, and nothing records that an install is
    /// under way. A crash in between leaves a node that believes it holds the snapshot's state
    /// and holds its old data.
    fn torn_install(&self, record: &Recorded) -> Result<(), Failure> {
        let mut batch = WriteBatch::new();
        self.stage_installed(&mut batch, record)?;
        self.db.write_opt(batch, &WriteOptions { sync: true })?;
        self.pause_after_step();
        self.complete_install(record)
    }

    /// Testing only: waits [`StateMachine::with_install_pause`]'s pause.
    fn pause_after_step(&self) {
        if !self.install_pause.is_zero() {
            std::thread::sleep(self.install_pause);
        }
    }

    /// The set `data` is in, stored: its own when it is a receiving handle of this database
    /// (as openraft's are), else a copy.
    fn take_in(&self, data: &mut SnapshotData) -> Result<(u64, u64), Failure> {
        if data.is_receiver_in(&self.db) {
            data.keep()?;
            return Ok((data.set(), data.len()));
        }
        // Any other handle (a reader, or another database's) is copied: its set may be
        // replaced while this install runs.
        data.flush().map_err(|e| malformed(&e))?;
        let io = |e: std::io::Error| malformed(&e);
        let set = self.next_set.fetch_add(1, Ordering::SeqCst);
        let mut copy = SnapshotData::receiver(Arc::clone(&self.db), self.snaps.clone(), set);
        data.seek(SeekFrom::Start(0)).map_err(io)?;
        std::io::copy(data, &mut copy).map_err(io)?;
        copy.keep()?;
        Ok((set, copy.len()))
    }

    /// Replaces the data with the set `record` names, and records it as current; redone from
    /// the start after a crash.
    fn complete_install(&self, record: &Recorded) -> Result<(), Failure> {
        let _installing = self.lock();
        let mut batch = WriteBatch::new();
        self.clear_data(&mut batch);
        let now = self.db.now_ms();
        decode_pairs(
            BufReader::new(self.reader(record.set, record.len)),
            |key, stored| {
                check_pair(&stored)?;
                let (expires_at, _) = split_expiry(&stored).unwrap_or_default();
                match expires_at {
                    0 => batch.put_cf(&self.data, &key, &stored),
                    at if at <= now => {}
                    at => {
                        let ttl = Duration::from_millis(at - now);
                        batch.put_with_ttl_cf(&self.data, &key, &stored, ttl);
                    }
                }
                if batch.size_bytes() >= INSTALL_BATCH {
                    self.db.write(std::mem::take(&mut batch))?;
                    self.pause_after_step();
                }
                Ok::<_, Failure>(())
            },
        )?;
        let recorded: Option<Recorded> =
            self.read_state(CURRENT, None).map_err(|e| malformed(&e))?;
        batch.delete_cf(&self.state, INSTALLING);
        if let Some(old) = recorded.filter(|r| r.set != record.set) {
            delete_set(&mut batch, &self.snaps, old.set);
        }
        self.stage_installed(&mut batch, record)?;
        self.db.write_opt(batch, &WriteOptions { sync: true })?;
        Ok(())
    }

    /// Adds to `batch` what records `record` as installed: `last_applied`, membership, the
    /// current snapshot, and the purge of the log up to it that openraft asked for with the
    /// install (held back until now, see [`purge_limit`]).
    fn stage_installed(&self, batch: &mut WriteBatch, record: &Recorded) -> Result<(), Failure> {
        batch.put_cf(&self.state, LAST_APPLIED, json(&record.meta.last_log_id)?);
        batch.put_cf(&self.state, MEMBERSHIP, json(&record.meta.last_membership)?);
        batch.put_cf(&self.state, CURRENT, json(record)?);
        if let (Some(upto), Ok(log), Ok(meta)) = (
            record.meta.last_log_id,
            self.db.column_family(LOG_FAMILY),
            self.db.column_family(META_FAMILY),
        ) {
            stage_purge(&log, &meta, batch, upto)?;
        }
        Ok(())
    }

    /// Adds to `batch` the deletion of every key the data family can hold (expired values a
    /// read no longer shows included): from the empty key to the greatest legal key.
    fn clear_data(&self, batch: &mut WriteBatch) {
        let greatest = vec![0xff; cairn::MAX_KEY_LEN];
        batch.delete_range_cf(&self.data, b"", &greatest);
        batch.delete_cf(&self.data, &greatest);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.recording
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Clears the installing flag when an install ends, however it ends.
struct Installing<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for Installing<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::SeqCst);
    }
}

/// A stored value as an install needs it: its expiry in front.
fn check_pair(stored: &[u8]) -> Result<(), Malformed> {
    match split_expiry(stored) {
        Some(_) => Ok(()),
        None => Err(Malformed(format!(
            "snapshot data: a value of {} bytes, without its 8-byte expiry",
            stored.len()
        ))),
    }
}

fn json(value: &impl Serialize) -> Result<Vec<u8>, Failure> {
    serde_json::to_vec(value).map_err(|e| malformed(&e))
}
