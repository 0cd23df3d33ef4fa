//! One worker thread: picks operations by weight and checks every read it makes.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Range;
use std::sync::atomic::Ordering;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::engine::{EngineError, STRESS_CF, SnapshotHandle, StressEngine, WriteOp};
use crate::expected::{Floor, KeyState};
use crate::harness::{AfterFault, Harness, Reopen};
use crate::report::{Failure, Observed};
use crate::value::{is_single_delete_key, key, observe, value};

/// Keys a range delete or scan spans at most.
const MAX_SPAN: usize = 32;

/// A snapshot held across operations, checked against the expected state at its sequence
/// number when taken and again when released, whatever flushes and compactions ran meanwhile,
/// and required to read the same both times.
struct HeldSnapshot<'h> {
    snapshot: SnapshotHandle,
    /// Keeps the expected state's history back to the snapshot's sequence number.
    _floor: Floor<'h>,
    /// Taken just after the snapshot: a write that began later cannot be in it.
    ticket: u64,
    range: Range<usize>,
    /// What the first read returned, hashed.
    read: Option<u64>,
    ops_left: u32,
}

pub(crate) struct Worker<'h> {
    h: &'h Harness,
    id: usize,
    rng: SmallRng,
    /// The epoch of the database this worker's snapshots were taken on.
    epoch: Option<u64>,
    snapshots: Vec<HeldSnapshot<'h>>,
}

impl<'h> Worker<'h> {
    pub(crate) fn new(h: &'h Harness, id: usize) -> Self {
        Self {
            h,
            id,
            rng: SmallRng::seed_from_u64(
                h.config
                    .seed
                    .wrapping_mul(1_000_003)
                    .wrapping_add(id as u64),
            ),
            epoch: None,
            snapshots: Vec::new(),
        }
    }

    /// Runs operations until the harness says stop.
    pub(crate) fn run(&mut self) {
        let weights = self.h.config.weights.entries();
        let total: u32 = weights.iter().map(|(_, w)| w).sum();
        while !self.h.should_stop() {
            let mut pick = self.rng.random_range(0..total.max(1));
            let mut op = "get";
            for (name, weight) in weights {
                if pick < weight {
                    op = name;
                    break;
                }
                pick -= weight;
            }
            let epoch = self.h.epoch.load(Ordering::Acquire);
            if self.h.needs_recovery(epoch) {
                // Held snapshots stay held across the recovery, and are checked after it.
                match self.h.recover(epoch) {
                    Some(AfterFault::Recovered) => self.h.tally.op("fault_recovery"),
                    Some(AfterFault::Reopened) => self.h.tally.op("fault_reopen"),
                    None => {}
                }
                continue;
            }
            if op == "held_scene" {
                crate::held_readers::paused_scene(self.h, &mut self.rng);
                self.h.tally.op(op);
                self.h.op_done();
                continue;
            }
            if op == "reopen" {
                self.release_all(epoch);
                self.epoch = None;
                if self.h.reopen(epoch, Reopen::Op) {
                    self.h.tally.op("reopen");
                }
                continue;
            }
            let guard = self.h.db();
            let Some(engine) = guard.as_deref() else {
                return;
            };
            // Read again under the guard: a reopen may have come between. Snapshots of a
            // database closed since went with it.
            let epoch = self.h.epoch.load(Ordering::Acquire);
            if self.epoch != Some(epoch) {
                self.snapshots.clear();
                self.epoch = Some(epoch);
            }
            self.step(op, engine);
            self.h.tally.op(op);
            self.h.op_done();
        }
        self.release_all(self.h.epoch.load(Ordering::Acquire));
    }

    /// Lets every held snapshot go, checking each once more if its database (that of `epoch`)
    /// is still open: a reopen must wait until they have been read.
    fn release_all(&mut self, epoch: u64) {
        let guard = self.h.db();
        if let Some(engine) = guard.as_deref()
            && self.h.epoch.load(Ordering::Acquire) == epoch
            && self.epoch == Some(epoch)
        {
            while !self.snapshots.is_empty() {
                self.release_oldest(engine);
            }
        }
        self.snapshots.clear();
        drop(guard);
    }

    fn random_key(&mut self) -> usize {
        self.rng.random_range(0..self.h.expected.len())
    }

    /// A key that ordinary writes may touch (not reserved for single deletes).
    fn ordinary_key(&mut self) -> usize {
        let k = self.random_key();
        if is_single_delete_key(k) {
            (k + 1) % self.h.expected.len()
        } else {
            k
        }
    }

    fn step(&mut self, op: &str, engine: &dyn StressEngine) {
        match op {
            "get" => self.get(engine),
            "scan" => self.scan(engine),
            "put" => {
                let k = self.ordinary_key();
                self.write_keys(engine, &[k], false);
            }
            "batch" => {
                let n = self.rng.random_range(2..8);
                let keys: Vec<usize> = (0..n).map(|_| self.ordinary_key()).collect();
                self.write_keys(engine, &keys, true);
            }
            "delete" => {
                let k = self.ordinary_key();
                self.delete(engine, k);
            }
            "single_delete" => self.single_delete_or_put_once(engine),
            "delete_range" => self.delete_range(engine),
            "snapshot" => self.snapshot(engine),
            "transaction" => {
                if let Some(db) = engine.as_cairn() {
                    self.transaction(db);
                }
            }
            "flush" => {
                if let Err(e) = engine.flush() {
                    self.h.engine_error("flush", e);
                }
            }
            "compact_range" => self.compact_range(engine),
            "held_readers" => {
                if let (Some(held), Some(ttl), Some(db)) =
                    (&self.h.held, &self.h.ttl, engine.as_cairn())
                {
                    crate::held_readers::step(self.h, held, ttl, db, &mut self.rng);
                }
            }
            "ttl_put" | "ttl_delete" | "ttl_get" | "ttl_scan" | "ttl_compact" | "advance_clock" => {
                if let (Some(work), Some(db)) = (&self.h.ttl, engine.as_cairn()) {
                    crate::ttl_worker::step(self.h, work, db, &mut self.rng, op);
                }
            }
            _ => {}
        }
        self.age_snapshots(engine);
    }

    fn sync(&mut self) -> bool {
        self.rng.random_bool(self.h.config.sync_probability)
    }

    /// Writes puts (and, in a batch, some deletes) to distinct `keys` atomically.
    fn write_keys(&mut self, engine: &dyn StressEngine, keys: &[usize], mixed: bool) {
        let mut keys = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        let _locks = self.h.expected.lock(&keys);
        let mut ops = Vec::with_capacity(keys.len());
        let mut targets = Vec::with_capacity(keys.len());
        for &k in &keys {
            if mixed && self.rng.random_ratio(1, 4) {
                ops.push(WriteOp::Delete { key: key(k) });
                targets.push((k, KeyState::deleted(self.h.expected.get(k).version())));
            } else {
                let version = self.h.expected.next_version(k);
                ops.push(WriteOp::Put {
                    key: key(k),
                    value: value(k, version, self.h.config.max_value_size),
                });
                targets.push((k, KeyState::present(version)));
            }
        }
        let sync = self.sync();
        self.h
            .apply(&targets, "write", sync, || engine.write(&ops, sync));
    }

    fn delete(&mut self, engine: &dyn StressEngine, k: usize) {
        let _locks = self.h.expected.lock(&[k]);
        let old = self.h.expected.get(k);
        let ops = [WriteOp::Delete { key: key(k) }];
        let sync = self.sync();
        let targets = [(k, KeyState::deleted(old.version()))];
        self.h
            .apply(&targets, "delete", sync, || engine.write(&ops, sync));
    }

    /// On a key reserved for single deletes: put it if absent, single-delete it if present, so
    /// every single delete covers exactly one put.
    fn single_delete_or_put_once(&mut self, engine: &dyn StressEngine) {
        let stride = crate::value::SINGLE_DELETE_STRIDE;
        let k = (self.random_key() / stride) * stride;
        let _locks = self.h.expected.lock(&[k]);
        if self.h.expected.uncertain(k).is_some() {
            return; // An earlier write's outcome is unknown: a single delete might cover two puts.
        }
        let old = self.h.expected.get(k);
        let (op, target) = if old.exists() {
            (
                WriteOp::SingleDelete { key: key(k) },
                KeyState::deleted(old.version()),
            )
        } else {
            let version = self.h.expected.next_version(k);
            let put = WriteOp::Put {
                key: key(k),
                value: value(k, version, self.h.config.max_value_size),
            };
            (put, KeyState::present(version))
        };
        let sync = self.sync();
        self.h.apply(&[(k, target)], "single_delete", sync, || {
            engine.write(std::slice::from_ref(&op), sync)
        });
    }

    fn delete_range(&mut self, engine: &dyn StressEngine) {
        let start = self.random_key();
        let end = (start + self.rng.random_range(1..=MAX_SPAN)).min(self.h.expected.len());
        let keys: Vec<usize> = (start..end).collect();
        let _locks = self.h.expected.lock(&keys);
        let targets: Vec<(usize, KeyState)> = keys
            .iter()
            .map(|&k| (k, KeyState::deleted(self.h.expected.get(k).version())))
            .collect();
        let ops = [WriteOp::DeleteRange {
            start: key(start),
            end: key(end),
            covered: keys.iter().map(|&k| key(k)).collect(),
        }];
        let sync = self.sync();
        self.h
            .apply(&targets, "delete_range", sync, || engine.write(&ops, sync));
    }

    fn get(&mut self, engine: &dyn StressEngine) {
        let k = self.random_key();
        let before = self.h.expected.before(k);
        match engine.get(&key(k)) {
            Ok(found) => {
                let ok = self.h.expected.after(k, before);
                let observed = observe(k, found.as_deref(), self.h.config.max_value_size);
                self.h.tally.judge(k, observed, &ok, "get");
            }
            Err(e) => self.h.read_error("get", e),
        }
    }

    /// Scans a short range in either direction and checks every key in it, present or not.
    fn scan(&mut self, engine: &dyn StressEngine) {
        let start = self.random_key();
        let end = (start + self.rng.random_range(1..=MAX_SPAN)).min(self.h.expected.len());
        let befores: Vec<_> = (start..end).map(|k| self.h.expected.before(k)).collect();
        let backward = self.rng.random_bool(0.3);
        let found = match engine.scan(&key(start)[..]..&key(end)[..], backward) {
            Ok(found) => found,
            Err(e) => return self.h.read_error("scan", e),
        };
        self.check_order(&found, backward, Failure::WrongValue, "scan");
        let seen = self.by_index(&found, start..end, Failure::WrongValue, "scan");
        for (k, before) in (start..end).zip(befores) {
            let ok = self.h.expected.after(k, before);
            let observed = observe(
                k,
                seen.get(&k).map(AsRef::as_ref),
                self.h.config.max_value_size,
            );
            self.h.tally.judge(
                k,
                observed,
                &ok,
                if backward { "backward scan" } else { "scan" },
            );
        }
    }

    /// Takes a snapshot, checks what it reads over a range against the expected state at its
    /// sequence number, and holds it; `age_snapshots` checks it again when it lets it go.
    fn snapshot(&mut self, engine: &dyn StressEngine) {
        if self.snapshots.len() >= 4 {
            self.release_oldest(engine);
            return;
        }
        let start = self.random_key();
        let range = start..(start + 100).min(self.h.expected.len());
        // The floor goes in first, at or below the number the snapshot will get.
        let floor = self.h.expected.floor(engine.latest_seqno());
        let snapshot = match engine.snapshot() {
            Ok(snapshot) => snapshot,
            Err(e) => return self.h.read_error("snapshot", e),
        };
        let ticket = self.h.expected.ticket();
        floor.raise(snapshot.seqno);
        let read = self.check_snapshot(engine, &snapshot, range.clone(), ticket, "snapshot taken");
        let ops_left = self.rng.random_range(10..200);
        self.snapshots.push(HeldSnapshot {
            snapshot,
            _floor: floor,
            ticket,
            range,
            read,
            ops_left,
        });
    }

    fn age_snapshots(&mut self, engine: &dyn StressEngine) {
        for s in &mut self.snapshots {
            s.ops_left = s.ops_left.saturating_sub(1);
        }
        if self.snapshots.first().is_some_and(|s| s.ops_left == 0) {
            self.release_oldest(engine);
        }
    }

    /// Checks the oldest held snapshot once more, against the expected state and against what
    /// it read when taken, and lets it go.
    fn release_oldest(&mut self, engine: &dyn StressEngine) {
        if self.snapshots.is_empty() {
            return;
        }
        let held = self.snapshots.remove(0);
        let context = "snapshot released";
        let read = self.check_snapshot(
            engine,
            &held.snapshot,
            held.range.clone(),
            held.ticket,
            context,
        );
        engine.release(&held.snapshot);
        let (Some(first), Some(now)) = (held.read, read) else {
            return;
        };
        self.h.tally.op("snapshot_reread");
        if first != now {
            self.h.tally.fail(
                Failure::SnapshotMismatch,
                format!(
                    "{context} at seqno {}: {:?} read differently than when taken",
                    held.snapshot.seqno, held.range
                ),
            );
        }
    }

    /// Fails with `kind` unless the keys of `found` are in strictly increasing order
    /// (decreasing if `backward`): a key twice is as wrong as two out of order.
    fn check_order(
        &self,
        found: &[(bytes::Bytes, bytes::Bytes)],
        backward: bool,
        kind: Failure,
        context: &str,
    ) {
        let bad = found.windows(2).find(|w| match w {
            [a, b] if backward => a.0 <= b.0,
            [a, b] => a.0 >= b.0,
            _ => false,
        });
        if let Some([a, b]) = bad {
            self.h.tally.fail(
                kind,
                format!(
                    "{context} returned {:?} after {:?}",
                    String::from_utf8_lossy(&b.0),
                    String::from_utf8_lossy(&a.0)
                ),
            );
        }
    }

    /// The values a read of `range` returned, by key index; a key outside the range (or none
    /// of ours), or one returned twice, is a failure of `kind`.
    fn by_index(
        &self,
        found: &[(bytes::Bytes, bytes::Bytes)],
        range: Range<usize>,
        kind: Failure,
        context: &str,
    ) -> HashMap<usize, bytes::Bytes> {
        let mut seen = HashMap::new();
        for (k, v) in found {
            let why = match crate::value::key_index(k).filter(|i| range.contains(i)) {
                Some(i) if seen.insert(i, v.clone()).is_none() => continue,
                Some(_) => "twice",
                None => "outside it",
            };
            self.h.tally.fail(
                kind,
                format!(
                    "{context} of {range:?} returned key {:?} {why}",
                    String::from_utf8_lossy(k)
                ),
            );
        }
        seen
    }

    /// Reads `range` at `snapshot` and judges every key against the expected state at the
    /// snapshot's sequence number (`ticket` taken just after the snapshot). Returns what it
    /// read, hashed, or `None` if the read failed.
    fn check_snapshot(
        &self,
        engine: &dyn StressEngine,
        snapshot: &SnapshotHandle,
        range: Range<usize>,
        ticket: u64,
        context: &str,
    ) -> Option<u64> {
        let seqno = snapshot.seqno;
        let found = engine.scan_at(snapshot, &key(range.start)[..]..&key(range.end)[..]);
        let found = match found {
            Ok(found) => found,
            Err(e) => {
                self.h.read_error("snapshot read", e);
                return None;
            }
        };
        let context = format!("{context} at seqno {seqno}");
        self.check_order(&found, false, Failure::SnapshotMismatch, &context);
        let seen = self.by_index(&found, range.clone(), Failure::SnapshotMismatch, &context);
        for k in range {
            let observed = observe(
                k,
                seen.get(&k).map(AsRef::as_ref),
                self.h.config.max_value_size,
            );
            self.judge_at(k, observed, seqno, ticket, &context);
        }
        Some(checksum(&found))
    }

    /// Judges a read of key `k` made at sequence number `seqno` against the history.
    fn judge_at(&self, k: usize, observed: Observed, seqno: u64, ticket: u64, context: &str) {
        let Some(ok) = self.h.expected.at(k, seqno, ticket) else {
            self.h.tally.fail(
                Failure::SnapshotMismatch,
                format!("{context}: the harness kept no history of key {k} at seqno {seqno}"),
            );
            return;
        };
        if ok.allows(observed.version()) {
            self.h.tally.verified();
        } else {
            self.h.tally.fail(
                Failure::SnapshotMismatch,
                format!(
                    "{context}: key {k} read {observed:?}, expected {:?}",
                    ok.before
                ),
            );
        }
    }

    /// Reads one key and writes another from it. The read must match the history at the
    /// transaction's snapshot; a commit must have no write to the read key between the
    /// snapshot and itself (that is what a conflict is for); a conflict leaves both unchanged.
    fn transaction(&mut self, db: &cairn::Db) {
        let cf = match db.column_family(STRESS_CF) {
            Ok(cf) => cf,
            Err(e) => return self.h.read_error("column_family", e),
        };
        let read_key = self.ordinary_key();
        let write_key = self.ordinary_key();
        let floor = self.h.expected.floor(db.latest_seqno());
        let mut tx = db.transaction();
        let since = tx.seqno();
        let ticket = self.h.expected.ticket();
        floor.raise(since);
        match tx.get_cf(&cf, key(read_key)) {
            Ok(found) => {
                let observed = observe(read_key, found.as_deref(), self.h.config.max_value_size);
                self.judge_at(read_key, observed, since, ticket, "transaction read");
            }
            Err(e) => return self.h.read_error("transaction read", e),
        }
        let version = self.h.expected.next_version(write_key);
        tx.put_cf(
            &cf,
            key(write_key),
            value(write_key, version, self.h.config.max_value_size),
        );
        let targets = [(write_key, KeyState::present(version))];
        // Only the commit holds the stripe: other writers, to the read key too, run meanwhile.
        let write_lock = self.h.expected.lock(&[write_key]);
        self.h.expected.begin(&targets);
        let seqno = match tx.commit() {
            Ok(seqno) => {
                self.h.expected.commit(&targets, seqno);
                self.h.log_op(self.id, "transaction", &targets);
                seqno
            }
            Err(e) => {
                let e = EngineError::from(e);
                if e.refused() {
                    self.h.expected.abort(&targets);
                } else {
                    self.h.expected.unknown(&targets);
                }
                if matches!(e, EngineError::Cairn(cairn::Error::Conflict { .. })) {
                    self.h.tally.conflict();
                } else {
                    self.h.engine_error("transaction commit", e);
                }
                return;
            }
        };
        drop(write_lock);
        // Under the read key's stripe no write to it is in flight: every write it had below
        // the commit's number is in the history.
        let _read_lock = self.h.expected.lock(&[read_key]);
        if self.h.expected.uncertain(read_key).is_none()
            && self.h.expected.written_between(read_key, since, seqno)
        {
            self.h.tally.fail(
                Failure::LostUpdate,
                format!(
                    "a transaction read key {read_key} at seqno {since} and committed at \
                     {seqno} over a write to it between"
                ),
            );
        }
        drop(floor);
    }

    fn compact_range(&mut self, engine: &dyn StressEngine) {
        let start = self.random_key();
        let end = (start + self.rng.random_range(1..self.h.expected.len() / 4 + 2))
            .min(self.h.expected.len());
        if let Err(e) = engine.compact_range(&key(start)[..]..&key(end)[..]) {
            self.h.engine_error("compact_range", e);
        }
    }
}

/// What a range read returned, hashed: two reads at one snapshot must agree.
fn checksum(found: &[(bytes::Bytes, bytes::Bytes)]) -> u64 {
    let mut hasher = DefaultHasher::new();
    found.hash(&mut hasher);
    hasher.finish()
}
