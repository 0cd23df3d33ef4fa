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
use std::time::Duration;

use cairn::{ColumnFamily, Db, WriteBatch, WriteOptions};
use rand::Rng;
use rand::rngs::SmallRng;

use crate::engine::cairn_refused as refused;
use crate::harness::Harness;
use crate::ttl_model::{Cell, TTL_FAMILIES, TtlFamily, TtlKey, TtlWrite, begin_line};
use crate::ttl_work::{TtlWork, judge};
use crate::value::{key, key_index, value};

/// Keys a TTL range delete or scan spans at most.
const MAX_SPAN: usize = 12;

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
        Err(e) => return h.read_error("column_family", e),
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
                h.engine_error("flush", e);
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
                self.h.engine_error("ttl write", e);
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
                &self.h.tally,
                self.h.config.max_value_size,
                self.work,
                self.family,
                model,
                k,
                now,
                &values,
                limit.max(1),
                context,
            ),
            Err(e) => self.h.read_error(context, e),
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
            Err(e) => return self.h.read_error("ttl scan", e),
        };
        for (k, model) in keys.zip(locked.iter_mut()) {
            let values: Vec<bytes::Bytes> = found
                .iter()
                .filter(|(key, _)| key_index(key) == Some(k))
                .map(|(_, v)| v.clone())
                .collect();
            judge(
                &self.h.tally,
                self.h.config.max_value_size,
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
            self.h.engine_error("ttl compact_range", e);
        }
    }
}
