//! The TTL work: puts with and without cell TTLs (zero, short and long ones), deletes and range
//! deletes on the TTL families, reads (`get`, `get_versions`, scans) judged by the TTL model at
//! the clock's reading, flushes and compactions of those families, clock advances, and the full
//! check of every TTL key that reopens, kill cycles and the end of a run make.
//!
//! Every TTL operation holds the clock gate's read guard (an advance holds its write guard), so
//! the clock stands still while it runs; see [`crate::ttl_model`] for why that makes the
//! expected answers exact. It does not take snapshots or transactions on these families.

use std::fmt::Write as _;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use cairn::{ColumnFamily, Db, ManualClock, WriteBatch, WriteOptions};
use rand::Rng;
use rand::rngs::SmallRng;

use crate::harness::{Harness, refused};
use crate::report::{Failure, TtlCounts};
use crate::ttl_model::{
    Cell, TTL_FAMILIES, TtlFamily, TtlKey, TtlState, TtlWrite, Verdict, begin_line,
};
use crate::value::{key, key_index, parse_value, value};

/// Keys a TTL range delete or scan spans at most.
const MAX_SPAN: usize = 12;

/// The clock the TTL work drives, its model, and its counters.
#[derive(Debug)]
pub(crate) struct TtlWork {
    pub(crate) state: TtlState,
    pub(crate) clock: Arc<ManualClock>,
    /// Read by every TTL operation, written by a clock advance.
    gate: RwLock<()>,
    /// Reads of TTL keys checked.
    pub(crate) checks: AtomicU64,
    /// Of those, the ones where a candidate had expired.
    pub(crate) expiry_checks: AtomicU64,
    /// How far the clock moved in this run, ms.
    pub(crate) advanced_ms: AtomicU64,
}

impl TtlWork {
    pub(crate) fn new(state: TtlState, clock: Arc<ManualClock>) -> Self {
        Self {
            state,
            clock,
            gate: RwLock::new(()),
            checks: AtomicU64::new(0),
            expiry_checks: AtomicU64::new(0),
            advanced_ms: AtomicU64::new(0),
        }
    }

    /// What the TTL work did so far.
    pub(crate) fn counts(&self) -> TtlCounts {
        TtlCounts {
            checks: self.checks.load(Ordering::Relaxed),
            expiry_checks: self.expiry_checks.load(Ordering::Relaxed),
            clock_advanced_ms: self.advanced_ms.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn hold_clock(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.gate
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Moves the clock on by `by`, recorded first, while no TTL operation runs.
    pub(crate) fn advance(&self, by: Duration) {
        let _stopped = self
            .gate
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let to = self.clock.now_ms().saturating_add(ms);
        self.state.journal(&format!("T {to}\n"));
        self.clock.set(to);
        self.advanced_ms.fetch_add(ms, Ordering::Relaxed);
    }
}

/// Runs the TTL operation `op` (one of the `ttl_*` ops of the mix, or `advance_clock`).
pub(crate) fn step(h: &Harness, work: &TtlWork, db: &Db, rng: &mut SmallRng, op: &str) {
    if op == "advance_clock" {
        work.advance(Duration::from_millis(rng.random_range(50..2_000)));
        return;
    }
    let f = rng.random_range(0..TTL_FAMILIES.len());
    let Some(&family) = TTL_FAMILIES.get(f) else {
        return;
    };
    let cf = match db.column_family(family.name) {
        Ok(cf) => cf,
        Err(e) => return h.read_error("column_family", &e),
    };
    let keys = work.state.len();
    let k = rng.random_range(0..keys);
    let span = (k + rng.random_range(1..=MAX_SPAN)).min(keys);
    let sync = WriteOptions {
        sync: rng.random_bool(h.config.sync_probability),
    };
    let op_on = TtlOp {
        h,
        work,
        db,
        cf: &cf,
        f,
        family,
    };
    match op {
        "ttl_put" => op_on.put(k, pick_ttl(rng), sync),
        "ttl_delete" if rng.random_bool(0.3) => op_on.delete(k..span, sync),
        "ttl_delete" => op_on.delete(k..k + 1, sync),
        "ttl_get" => op_on.get(k, rng.random_range(0..=4)),
        "ttl_scan" => op_on.scan(k..span),
        "ttl_compact" if rng.random_bool(0.3) => {
            if let Err(e) = db.flush() {
                h.engine_error("flush", &e);
            }
        }
        "ttl_compact" => op_on.compact(k..(k + rng.random_range(1..keys / 4 + 2)).min(keys)),
        _ => {}
    }
}

/// A cell TTL: none, zero (expired at once), short (a few clock advances) or long.
fn pick_ttl(rng: &mut SmallRng) -> Option<Duration> {
    match rng.random_range(0..20) {
        0..=6 => None,
        7..=9 => Some(Duration::ZERO),
        10..=15 => Some(Duration::from_millis(rng.random_range(100..4_000))),
        _ => Some(Duration::from_millis(rng.random_range(5_000..60_000))),
    }
}

/// One TTL operation on one family.
struct TtlOp<'a> {
    h: &'a Harness,
    work: &'a TtlWork,
    db: &'a Db,
    cf: &'a ColumnFamily,
    /// The family's index in [`TTL_FAMILIES`].
    f: usize,
    family: TtlFamily,
}

impl TtlOp<'_> {
    /// Puts a new version of key `k`, with cell TTL `ttl` if any, stamped with the clock.
    fn put(&self, k: usize, ttl: Option<Duration>, sync: WriteOptions) {
        let _clock = self.work.hold_clock();
        let mut locked = self.work.state.lock(self.f, k..k + 1);
        let Some(model) = locked.first_mut() else {
            return;
        };
        let cell = Cell {
            version: model.next_version(),
            write_time: self.work.clock.now_ms(),
            ttl_ms: ttl.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        };
        let bytes = value(k, cell.version, self.h.config.max_value_size);
        let mut batch = WriteBatch::new();
        match ttl {
            Some(ttl) => batch.put_with_ttl_cf(self.cf, key(k), bytes, ttl),
            None => batch.put_cf(self.cf, key(k), bytes),
        }
        self.write(&mut locked, k..k + 1, TtlWrite::Put(cell), batch, sync);
    }

    /// Deletes `keys`: one key with a point delete, more with a range delete.
    fn delete(&self, keys: Range<usize>, sync: WriteOptions) {
        let _clock = self.work.hold_clock();
        let mut locked = self.work.state.lock(self.f, keys.clone());
        let mut batch = WriteBatch::new();
        if keys.len() == 1 {
            batch.delete_cf(self.cf, key(keys.start));
        } else {
            batch.delete_range_cf(self.cf, key(keys.start), key(keys.end));
        }
        self.write(&mut locked, keys, TtlWrite::Delete, batch, sync);
    }

    /// Journals, runs and settles one write of `write` to every key of `keys` (locked).
    fn write(
        &self,
        locked: &mut [std::sync::MutexGuard<'_, TtlKey>],
        keys: Range<usize>,
        write: TtlWrite,
        batch: WriteBatch,
        sync: WriteOptions,
    ) {
        let lines = |tag: &str| -> String {
            keys.clone().fold(String::new(), |mut out, k| {
                let _ = writeln!(out, "{tag} {} {k}", self.f);
                out
            })
        };
        let begun: String = keys.clone().map(|k| begin_line(self.f, k, write)).collect();
        self.work.state.journal(&begun);
        match self.db.write_opt(batch, &sync) {
            Ok(_) => {
                self.work.state.journal(&lines("C"));
                for m in locked.iter_mut() {
                    m.commit(write, self.family);
                }
            }
            Err(e) => {
                let refused = refused(&e);
                self.work
                    .state
                    .journal(&lines(if refused { "A" } else { "U" }));
                if !refused {
                    for m in locked.iter_mut() {
                        m.unknown(write, self.family);
                    }
                }
                self.h.engine_error("ttl write", &e);
            }
        }
    }

    /// Reads key `k` with `get` (`limit` 0) or `get_versions(k, limit)`.
    fn get(&self, k: usize, limit: usize) {
        let _clock = self.work.hold_clock();
        let mut locked = self.work.state.lock(self.f, k..k + 1);
        let Some(model) = locked.first_mut() else {
            return;
        };
        let now = self.work.clock.now_ms();
        let (found, context) = if limit == 0 {
            let found = self
                .cf
                .get(key(k))
                .map(|v| v.into_iter().collect::<Vec<_>>());
            (found, "ttl get")
        } else {
            let found = self
                .cf
                .get_versions(key(k), limit)
                .map(|vs| vs.into_iter().map(|v| v.value).collect());
            (found, "ttl get_versions")
        };
        match found {
            Ok(values) => judge(
                self.h,
                self.work,
                self.family,
                model,
                k,
                now,
                &values,
                limit.max(1),
                context,
            ),
            Err(e) => self.h.read_error(context, &e),
        }
    }

    /// Scans `keys` and judges every key in it, present or not.
    fn scan(&self, keys: Range<usize>) {
        let _clock = self.work.hold_clock();
        let mut locked = self.work.state.lock(self.f, keys.clone());
        let now = self.work.clock.now_ms();
        let found = self
            .cf
            .range(key(keys.start)..key(keys.end))
            .and_then(Iterator::collect::<cairn::Result<Vec<_>>>);
        let found = match found {
            Ok(found) => found,
            Err(e) => return self.h.read_error("ttl scan", &e),
        };
        for (k, model) in keys.zip(locked.iter_mut()) {
            let values: Vec<bytes::Bytes> = found
                .iter()
                .filter(|(key, _)| key_index(key) == Some(k))
                .map(|(_, v)| v.clone())
                .collect();
            judge(
                self.h,
                self.work,
                self.family,
                model,
                k,
                now,
                &values,
                1,
                "ttl scan",
            );
        }
    }

    /// Compacts `keys` of the family while the clock may move.
    fn compact(&self, keys: Range<usize>) {
        if let Err(e) = self.cf.compact_range(key(keys.start)..key(keys.end)) {
            self.h.engine_error("ttl compact_range", &e);
        }
    }
}

/// Judges what a read of key `k` at `now` returned (`values`, newest first, at most `limit`).
#[expect(clippy::too_many_arguments, reason = "one read's whole context")]
fn judge(
    h: &Harness,
    work: &TtlWork,
    family: TtlFamily,
    model: &mut TtlKey,
    k: usize,
    now: u64,
    values: &[bytes::Bytes],
    limit: usize,
    context: &str,
) {
    h.tally.verified();
    work.checks.fetch_add(1, Ordering::Relaxed);
    let parsed: Option<Vec<u32>> = values
        .iter()
        .map(|v| parse_value(k, v, h.config.max_value_size))
        .collect();
    let Some(observed) = parsed else {
        return h.tally.fail(
            Failure::WrongValue,
            format!(
                "{context} in {}: key {k} holds bytes no write produced",
                family.name
            ),
        );
    };
    match model.judge(family, now, &observed, limit) {
        Verdict::Ok { expiry_mattered } => {
            if expiry_mattered {
                work.expiry_checks.fetch_add(1, Ordering::Relaxed);
            }
        }
        Verdict::Wrong { expected } => h.tally.fail(
            Failure::Expiry,
            format!(
                "{context} in {} at clock {now}: key {k} read versions {observed:?}, expected one of {expected:?}",
                family.name
            ),
        ),
    }
}

/// Checks every key of every TTL family: a scan for the value, `get_versions` for the rest.
/// Nothing may write meanwhile.
pub(crate) fn verify_all(h: &Harness, work: &TtlWork, db: &Db, context: &str) {
    let _clock = work.hold_clock();
    let now = work.clock.now_ms();
    for (f, family) in TTL_FAMILIES.iter().enumerate() {
        let cf = match db.column_family(family.name) {
            Ok(cf) => cf,
            Err(e) => {
                return h.tally.fail(
                    Failure::Unreadable,
                    format!("{context}: column family {}: {e}", family.name),
                );
            }
        };
        let limit = usize::try_from(family.max_versions).unwrap_or(1);
        let mut locked = work.state.lock(f, 0..work.state.len());
        for (k, model) in locked.iter_mut().enumerate() {
            let read = cf
                .get_versions(key(k), limit)
                .map(|vs| vs.into_iter().map(|v| v.value).collect::<Vec<_>>());
            match read {
                Ok(values) => judge(h, work, *family, model, k, now, &values, limit, context),
                Err(e) => {
                    return h.tally.fail(
                        Failure::Unreadable,
                        format!("{context}: get_versions in {}: {e}", family.name),
                    );
                }
            }
        }
        let scanned = cf
            .iter()
            .and_then(Iterator::collect::<cairn::Result<Vec<_>>>);
        let scanned = match scanned {
            Ok(scanned) => scanned,
            Err(e) => {
                return h.tally.fail(
                    Failure::Unreadable,
                    format!("{context}: scan of {}: {e}", family.name),
                );
            }
        };
        let mut by_key: Vec<Vec<bytes::Bytes>> = vec![Vec::new(); locked.len()];
        for (k, v) in scanned {
            match key_index(&k).and_then(|i| by_key.get_mut(i)) {
                Some(slot) => slot.push(v),
                None => h.tally.fail(
                    Failure::WrongValue,
                    format!(
                        "{context}: unknown key {:?} in {}",
                        String::from_utf8_lossy(&k),
                        family.name
                    ),
                ),
            }
        }
        for ((k, model), values) in locked.iter_mut().enumerate().zip(by_key) {
            judge(h, work, *family, model, k, now, &values, 1, context);
        }
    }
}
