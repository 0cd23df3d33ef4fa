//! One worker thread: picks operations by weight and checks every read it makes.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Range;
use std::sync::atomic::Ordering;

use cairn::{ColumnFamily, Db, Snapshot, WriteBatch, WriteOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::expected::{Floor, KeyState};
use crate::harness::{AfterFault, Harness, Reopen, STRESS_CF};
use crate::report::{Failure, Observed};
use crate::value::{is_single_delete_key, key, parse_value, value};

/// Keys a range delete or scan spans at most.
const MAX_SPAN: usize = 32;

/// A snapshot held across operations, checked against the expected state at its sequence
/// number when taken and again when released, whatever flushes and compactions ran meanwhile,
/// and required to read the same both times.
struct HeldSnapshot<'h> {
    snapshot: Snapshot,
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
    cf: Option<(u64, ColumnFamily)>,
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
            cf: None,
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
                self.h.held_scene(&mut self.rng);
                self.h.tally.op(op);
                self.h.op_done();
                continue;
            }
            if op == "reopen" {
                self.release_all(epoch);
                self.cf = None;
                if self.h.reopen(epoch, Reopen::Op) {
                    self.h.tally.op("reopen");
                }
                continue;
            }
            let guard = self.h.db();
            let Some(db) = guard.as_ref() else {
                return;
            };
            // Read again under the guard: a reopen may have come between.
            let epoch = self.h.epoch.load(Ordering::Acquire);
            if self.cf.as_ref().is_none_or(|(e, _)| *e != epoch) {
                self.snapshots.clear();
                match db.column_family(STRESS_CF) {
                    Ok(cf) => self.cf = Some((epoch, cf)),
                    Err(e) => {
                        self.h.read_error("column_family", &e);
                        continue;
                    }
                }
            }
            self.step(op, db);
            self.h.tally.op(op);
            self.h.op_done();
        }
        self.release_all(self.h.epoch.load(Ordering::Acquire));
    }

    /// Lets every held snapshot go, checking each once more if its database (that of `epoch`)
    /// is still open: a reopen must wait until they have been read.
    fn release_all(&mut self, epoch: u64) {
        let guard = self.h.db();
        let open = guard.is_some()
            && self.h.epoch.load(Ordering::Acquire) == epoch
            && self.cf.as_ref().is_some_and(|(e, _)| *e == epoch);
        while open && !self.snapshots.is_empty() {
            self.release_oldest();
        }
        self.snapshots.clear();
        drop(guard);
    }

    fn cf(&self) -> Option<&ColumnFamily> {
        self.cf.as_ref().map(|(_, cf)| cf)
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

    fn step(&mut self, op: &str, db: &Db) {
        match op {
            "get" => self.get(),
            "scan" => self.scan(),
            "put" => {
                let k = self.ordinary_key();
                self.write_keys(db, &[k], false);
            }
            "batch" => {
                let n = self.rng.random_range(2..8);
                let keys: Vec<usize> = (0..n).map(|_| self.ordinary_key()).collect();
                self.write_keys(db, &keys, true);
            }
            "delete" => {
                let k = self.ordinary_key();
                self.delete(db, k);
            }
            "single_delete" => self.single_delete_or_put_once(db),
            "delete_range" => self.delete_range(db),
            "snapshot" => self.snapshot(db),
            "transaction" => self.transaction(db),
            "flush" => {
                if let Err(e) = db.flush() {
                    self.h.engine_error("flush", &e);
                }
            }
            "compact_range" => self.compact_range(),
            "held_readers" => {
                if let (Some(held), Some(ttl)) = (&self.h.held, &self.h.ttl) {
                    crate::held_readers::step(self.h, held, ttl, db, &mut self.rng);
                }
            }
            "ttl_put" | "ttl_delete" | "ttl_get" | "ttl_scan" | "ttl_compact" | "advance_clock" => {
                if let Some(work) = &self.h.ttl {
                    crate::ttl_worker::step(self.h, work, db, &mut self.rng, op);
                }
            }
            _ => {}
        }
        self.age_snapshots();
    }

    fn sync(&mut self) -> WriteOptions {
        WriteOptions {
            sync: self.rng.random_bool(self.h.config.sync_probability),
        }
    }

    /// Writes puts (and, in a batch, some deletes) to distinct `keys` atomically.
    fn write_keys(&mut self, db: &Db, keys: &[usize], mixed: bool) {
        let Some(cf) = self.cf().cloned() else { return };
        let mut keys = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        let _locks = self.h.expected.lock(&keys);
        let mut batch = WriteBatch::new();
        let mut targets = Vec::with_capacity(keys.len());
        for &k in &keys {
            if mixed && self.rng.random_ratio(1, 4) {
                batch.delete_cf(&cf, key(k));
                targets.push((k, KeyState::deleted(self.h.expected.get(k).version())));
            } else {
                let version = self.h.expected.next_version(k);
                batch.put_cf(&cf, key(k), value(k, version, self.h.config.max_value_size));
                targets.push((k, KeyState::present(version)));
            }
        }
        let options = self.sync();
        self.h.apply(&targets, "write", options.sync, || {
            db.write_opt(batch, &options)
        });
    }

    fn delete(&mut self, db: &Db, k: usize) {
        let Some(cf) = self.cf().cloned() else { return };
        let _locks = self.h.expected.lock(&[k]);
        let old = self.h.expected.get(k);
        let mut batch = WriteBatch::new();
        batch.delete_cf(&cf, key(k));
        let options = self.sync();
        let targets = [(k, KeyState::deleted(old.version()))];
        self.h.apply(&targets, "delete", options.sync, || {
            db.write_opt(batch, &options)
        });
    }

    /// On a key reserved for single deletes: put it if absent, single-delete it if present, so
    /// every single delete covers exactly one put.
    fn single_delete_or_put_once(&mut self, db: &Db) {
        let Some(cf) = self.cf().cloned() else { return };
        let stride = crate::value::SINGLE_DELETE_STRIDE;
        let k = (self.random_key() / stride) * stride;
        let _locks = self.h.expected.lock(&[k]);
        if self.h.expected.uncertain(k).is_some() {
            return; // An earlier write's outcome is unknown: a single delete might cover two puts.
        }
        let old = self.h.expected.get(k);
        let mut batch = WriteBatch::new();
        let target = if old.exists() {
            batch.single_delete_cf(&cf, key(k));
            KeyState::deleted(old.version())
        } else {
            let version = self.h.expected.next_version(k);
            batch.put_cf(&cf, key(k), value(k, version, self.h.config.max_value_size));
            KeyState::present(version)
        };
        let options = self.sync();
        self.h
            .apply(&[(k, target)], "single_delete", options.sync, || {
                db.write_opt(batch, &options)
            });
    }

    fn delete_range(&mut self, db: &Db) {
        let Some(cf) = self.cf().cloned() else { return };
        let start = self.random_key();
        let end = (start + self.rng.random_range(1..=MAX_SPAN)).min(self.h.expected.len());
        let keys: Vec<usize> = (start..end).collect();
        let _locks = self.h.expected.lock(&keys);
        let targets: Vec<(usize, KeyState)> = keys
            .iter()
            .map(|&k| (k, KeyState::deleted(self.h.expected.get(k).version())))
            .collect();
        let mut batch = WriteBatch::new();
        batch.delete_range_cf(&cf, key(start), key(end));
        let options = self.sync();
        self.h.apply(&targets, "delete_range", options.sync, || {
            db.write_opt(batch, &options)
        });
    }

    fn get(&mut self) {
        let Some(cf) = self.cf().cloned() else { return };
        let k = self.random_key();
        let before = self.h.expected.before(k);
        match cf.get(key(k)) {
            Ok(found) => {
                let ok = self.h.expected.after(k, before);
                let observed = observe(k, found.as_deref(), self.h.config.max_value_size);
                self.h.tally.judge(k, observed, &ok, "get");
            }
            Err(e) => self.h.read_error("get", &e),
        }
    }

    /// Scans a short range in either direction and checks every key in it, present or not.
    fn scan(&mut self) {
        let Some(cf) = self.cf().cloned() else { return };
        let start = self.random_key();
        let end = (start + self.rng.random_range(1..=MAX_SPAN)).min(self.h.expected.len());
        let befores: Vec<_> = (start..end).map(|k| self.h.expected.before(k)).collect();
        let backward = self.rng.random_bool(0.3);
        let found = cf.range(key(start)..key(end)).and_then(|iter| {
            if backward {
                iter.rev().collect::<cairn::Result<Vec<_>>>()
            } else {
                iter.collect::<cairn::Result<Vec<_>>>()
            }
        });
        let found = match found {
            Ok(found) => found,
            Err(e) => return self.h.read_error("scan", &e),
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
    fn snapshot(&mut self, db: &Db) {
        if self.snapshots.len() >= 4 {
            self.release_oldest();
            return;
        }
        let Some(cf) = self.cf().cloned() else { return };
        let start = self.random_key();
        let range = start..(start + 100).min(self.h.expected.len());
        // The floor goes in first, at or below the number the snapshot will get.
        let floor = self.h.expected.floor(db.latest_seqno());
        let snapshot = db.snapshot();
        let ticket = self.h.expected.ticket();
        floor.raise(snapshot.seqno());
        let read = self.check_snapshot(&snapshot, &cf, range.clone(), ticket, "snapshot taken");
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

    fn age_snapshots(&mut self) {
        for s in &mut self.snapshots {
            s.ops_left = s.ops_left.saturating_sub(1);
        }
        if self.snapshots.first().is_some_and(|s| s.ops_left == 0) {
            self.release_oldest();
        }
    }

    /// Checks the oldest held snapshot once more, against the expected state and against what
    /// it read when taken, and lets it go.
    fn release_oldest(&mut self) {
        if self.snapshots.is_empty() {
            return;
        }
        let held = self.snapshots.remove(0);
        let Some(cf) = self.cf().cloned() else { return };
        let context = "snapshot released";
        let read = self.check_snapshot(
            &held.snapshot,
            &cf,
            held.range.clone(),
            held.ticket,
            context,
        );
        let (Some(first), Some(now)) = (held.read, read) else {
            return;
        };
        self.h.tally.op("snapshot_reread");
        if first != now {
            self.h.tally.fail(
                Failure::SnapshotMismatch,
                format!(
                    "{context} at seqno {}: {:?} read differently than when taken",
                    held.snapshot.seqno(),
                    held.range
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
        snapshot: &Snapshot,
        cf: &ColumnFamily,
        range: Range<usize>,
        ticket: u64,
        context: &str,
    ) -> Option<u64> {
        let seqno = snapshot.seqno();
        let found = snapshot
            .range_cf(cf, key(range.start)..key(range.end))
            .and_then(Iterator::collect::<cairn::Result<Vec<_>>>);
        let found = match found {
            Ok(found) => found,
            Err(e) => {
                self.h.read_error("snapshot read", &e);
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
    fn transaction(&mut self, db: &Db) {
        let Some(cf) = self.cf().cloned() else { return };
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
            Err(e) => return self.h.read_error("transaction read", &e),
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
                if crate::harness::refused(&e) {
                    self.h.expected.abort(&targets);
                } else {
                    self.h.expected.unknown(&targets);
                }
                if matches!(e, cairn::Error::Conflict { .. }) {
                    self.h.tally.conflict();
                } else {
                    self.h.engine_error("transaction commit", &e);
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

    fn compact_range(&mut self) {
        let Some(cf) = self.cf().cloned() else { return };
        let start = self.random_key();
        let end = (start + self.rng.random_range(1..self.h.expected.len() / 4 + 2))
            .min(self.h.expected.len());
        if let Err(e) = cf.compact_range(key(start)..key(end)) {
            self.h.engine_error("compact_range", &e);
        }
    }
}

/// What a read of key `k` found.
pub(crate) fn observe(k: usize, found: Option<&[u8]>, max_value_size: usize) -> Observed {
    match found {
        None => Observed::Absent,
        Some(bytes) => {
            parse_value(k, bytes, max_value_size).map_or(Observed::Damaged, Observed::Version)
        }
    }
}

/// What a range read returned, hashed: two reads at one snapshot must agree.
fn checksum(found: &[(bytes::Bytes, bytes::Bytes)]) -> u64 {
    let mut hasher = DefaultHasher::new();
    found.hash(&mut hasher);
    hasher.finish()
}
