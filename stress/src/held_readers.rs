//! Held readers: cursors and iterators made at one moment and first used after compactions
//! that drop keys they still see — by a cell TTL the harness's clock ran past, by a family TTL
//! `set_options` tightened, by a compaction filter — while other readers seek over runs of
//! deleted keys, so the memtable records converted deleted runs over the dropped keys. A held
//! reader without a snapshot reads the view it was made in (tables, options, clock reading), so
//! it must return what the model said was live when it was made (issue 31 item 1: a run
//! learned under a newer view hid such a key from it).
//!
//! All of it runs on its own family ([`HELD_CF`]), under one lock and the TTL work's clock
//! gate, so every answer is exact (see [`crate::held_model`]). Two operations:
//! - `held_readers`, beside the other workers: a write, a block of deletes with a few live keys
//!   among them, a reader held (sometimes with a snapshot taken just before it, which a later
//!   read uses to learn runs at a seqno the held reader can use, whatever other families wrote
//!   meanwhile), a held reader used, a fresh read, or a drop (clock, family TTL or filter, then
//!   a compaction of the family's tables that leaves the memtables alone).
//! - `held_scene`, with every other worker paused: the interleaving that matters written out —
//!   a block of deletes around a key about to be dropped, a flush, a reader held, the key
//!   dropped one of the three ways and compacted away, a fresh read learning the run over it,
//!   then the held reader used. With nothing else writing, the fresh read learns its run at the
//!   held reader's own seqno in the memtable both read.
//!
//! The family is emptied (a range delete, then the family TTL removed) at every open, so no
//! journal is needed across kills; a family TTL tightened below a floor is reset the same way.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cairn::{ColumnFamily, Db, DbCursor, DbIterator, Snapshot, WriteBatch};
use rand::Rng;
use rand::rngs::SmallRng;

use crate::harness::Harness;
use crate::held_model::{
    Expect, Found, HELD_CF, HELD_KEYS, HeldCell, HeldModel, expectation, judge_backward,
    judge_forward,
};
use crate::held_work::{HeldInner, HeldReader, HeldWork, Reader, family_options};
use crate::report::Failure;
use crate::ttl_work::TtlWork;
use crate::value::{key, key_index, parse_value, value};

/// A family TTL tightened below this is reset: the family emptied, its TTL removed.
const TTL_FLOOR_MS: u64 = 5_000;

/// Readers held at once.
const MAX_HELD: usize = 4;

/// Entries a held or fresh cursor reads from its seek.
const READ_AHEAD: usize = 4;

/// At the end of a run: uses every reader still held, then fails the run if held readers
/// checked nothing although the work was on.
pub(crate) fn finish(h: &Harness, work: &HeldWork, ttl: &TtlWork, db: &Db) {
    if let Ok(cf) = db.column_family(HELD_CF) {
        let mut inner = work.lock();
        let _clock = ttl.hold_clock();
        let op = Op { h, work, db, cf };
        let held = std::mem::take(&mut inner.held);
        for reader in held {
            op.use_reader(reader, 0, "at the end");
        }
    }
    let weights = h.config.weights;
    if weights.held_readers + weights.held_scene > 0 && work.checks.load(Ordering::Relaxed) == 0 {
        h.tally.fail(
            Failure::Unexercised,
            "held readers: none was checked against what it saw when made".into(),
        );
    }
}

/// Runs a held-reader scene with every worker paused (no other operation runs while the
/// database is held exclusively).
pub(crate) fn paused_scene(h: &Harness, rng: &mut SmallRng) {
    let slot = h.db_exclusive();
    let db = slot
        .as_deref()
        .and_then(crate::engine::StressEngine::as_cairn);
    if let (Some(db), Some(held), Some(ttl)) = (db, &h.held, &h.ttl) {
        scene(h, held, ttl, db, rng);
    }
}

/// The held family and what one operation needs.
struct Op<'a> {
    h: &'a Harness,
    work: &'a HeldWork,
    db: &'a Db,
    cf: ColumnFamily,
}

/// How a drop removes keys a held reader still sees.
#[derive(Debug, Clone, Copy)]
enum DropBy {
    /// The clock moves on, past cell TTLs (and the family's).
    Clock,
    /// `set_options` tightens the family TTL.
    Options,
    /// The compaction filter is armed.
    Filter,
}

impl DropBy {
    fn pick(rng: &mut SmallRng) -> Self {
        match rng.random_range(0..3) {
            0 => Self::Clock,
            1 => Self::Options,
            _ => Self::Filter,
        }
    }
}

/// One `held_readers` operation.
pub(crate) fn step(h: &Harness, work: &HeldWork, ttl: &TtlWork, db: &Db, rng: &mut SmallRng) {
    let cf = match db.column_family(HELD_CF) {
        Ok(cf) => cf,
        Err(e) => return h.read_error("column_family", e),
    };
    let op = Op { h, work, db, cf };
    let mut inner = work.lock();
    let pick = rng.random_range(0..100);
    // A clock advance waits for every TTL operation: it runs before this one holds the clock.
    let by = (pick >= 90).then(|| DropBy::pick(rng));
    if let Some(DropBy::Clock) = by {
        ttl.advance(Duration::from_millis(rng.random_range(500..8_000)));
    }
    let _clock = ttl.hold_clock();
    let now = ttl.clock.now_ms();
    match pick {
        0..=24 => {
            let k = rng.random_range(0..HELD_KEYS);
            let cell_ttl = pick_ttl(rng);
            let doomed = rng.random_ratio(1, 3);
            op.put(&mut inner.model, &[(k, cell_ttl, doomed)], now);
        }
        25..=39 => {
            let start = rng.random_range(0..HELD_KEYS - 40);
            let end = (start + rng.random_range(35..90)).min(HELD_KEYS);
            op.delete_block(&mut inner.model, start..end, rng.random_bool(0.2));
            let live: Vec<(usize, Option<u64>, bool)> = (0..rng.random_range(0..4))
                .map(|_| {
                    let ttl = rng.random_bool(0.5).then(|| pick_ttl(rng)).flatten();
                    (rng.random_range(start..end), ttl, rng.random_ratio(1, 3))
                })
                .collect();
            op.put(&mut inner.model, &live, now);
        }
        40..=54 => {
            if inner.held.len() >= MAX_HELD {
                let reader = inner.held.remove(0);
                op.use_reader(reader, rng.random_range(0..HELD_KEYS), "held_readers");
            } else {
                if rng.random_bool(0.6) && op.flush().is_none() {
                    return;
                }
                let snapshot = rng.random_bool(0.5);
                let as_cursor = rng.random_bool(0.5);
                let from = rng.random_range(0..HELD_KEYS);
                if let Some(reader) = op.hold(&inner.model, now, snapshot, as_cursor, from) {
                    inner.held.push(reader);
                }
            }
        }
        55..=69 => {
            if !inner.held.is_empty() {
                let i = rng.random_range(0..inner.held.len());
                let reader = inner.held.swap_remove(i);
                op.use_reader(reader, rng.random_range(0..HELD_KEYS), "held_readers");
            }
        }
        70..=89 => {
            let from = rng.random_range(0..HELD_KEYS);
            let at_snapshot = inner.held.iter().filter(|r| r.snapshot.is_some()).count();
            if at_snapshot > 0 && rng.random_bool(0.6) {
                let i = rng.random_range(0..at_snapshot);
                let HeldInner { model, held } = &mut *inner;
                if let Some((snapshot, cells)) =
                    held.iter().filter_map(|r| r.snapshot.as_ref()).nth(i)
                {
                    let expect = expectation(cells, model.cf_ttl_ms, now);
                    op.read_at_snapshot(snapshot, &expect, from);
                }
            } else {
                op.fresh_read(&mut inner.model, now, from);
            }
        }
        _ => {
            let by = by.unwrap_or(DropBy::Clock);
            let tightened = matches!(by, DropBy::Options).then(|| rng.random_range(4_000..60_000));
            op.drop_and_compact(&mut inner, by, tightened);
            op.reset_if_tight(&mut inner);
        }
    }
}

/// A cell TTL: none, short (a few clock advances) or long.
fn pick_ttl(rng: &mut SmallRng) -> Option<u64> {
    match rng.random_range(0..10) {
        0..=4 => None,
        5..=7 => Some(rng.random_range(500..10_000)),
        _ => Some(rng.random_range(10_000..60_000)),
    }
}

/// One `held_scene`, with every other worker paused (`db` is held exclusively).
pub(crate) fn scene(h: &Harness, work: &HeldWork, ttl: &TtlWork, db: &Db, rng: &mut SmallRng) {
    let cf = match db.column_family(HELD_CF) {
        Ok(cf) => cf,
        Err(e) => return h.read_error("column_family", e),
    };
    let op = Op { h, work, db, cf };
    let mut inner = work.lock();
    // No TTL operation runs while the others are paused: the clock moves only here.
    let by = DropBy::pick(rng);
    let start = rng.random_range(0..HELD_KEYS - 80);
    let end = start + rng.random_range(40..75);
    let doomed_key = rng.random_range(start + 4..end - 4);
    op.delete_block(&mut inner.model, start..end, false);
    let cell_ttl = rng.random_range(500..5_000);
    let (ttl_ms, doom) = match by {
        DropBy::Clock => (Some(cell_ttl), rng.random_bool(0.3)),
        DropBy::Options => (None, false),
        DropBy::Filter => (None, true),
    };
    op.put(
        &mut inner.model,
        &[(doomed_key, ttl_ms, doom)],
        ttl.clock.now_ms(),
    );
    let mut since_put = 0;
    if let DropBy::Options = by {
        since_put = rng.random_range(1_000..4_000);
        ttl.advance(Duration::from_millis(since_put));
    }
    // The live key the fresh read lands on, written last so it outlives the drop.
    op.put(&mut inner.model, &[(end, None, false)], ttl.clock.now_ms());
    if op.flush().is_none() {
        return;
    }
    let as_cursor = rng.random_bool(0.5);
    let from = rng.random_range(start.saturating_sub(10)..=start);
    let Some(reader) = op.hold(&inner.model, ttl.clock.now_ms(), false, as_cursor, from) else {
        return;
    };
    let tightened = match by {
        DropBy::Clock => {
            ttl.advance(Duration::from_millis(cell_ttl));
            None
        }
        DropBy::Options => Some(since_put),
        DropBy::Filter => None,
    };
    op.drop_and_compact(&mut inner, by, tightened);
    // From the block's start, so the cursor's first entry is the dropped key (or the one after
    // the block, if a run hid it).
    op.fresh_read(&mut inner.model, ttl.clock.now_ms(), start);
    op.use_reader(reader, start, &format!("held_scene ({by:?})"));
    op.reset_if_tight(&mut inner);
    work.scenes.fetch_add(1, Ordering::Relaxed);
}

impl Op<'_> {
    /// Writes `puts` (key, cell TTL, doomed) in one batch at clock `now`.
    fn put(&self, model: &mut HeldModel, puts: &[(usize, Option<u64>, bool)], now: u64) {
        if puts.is_empty() {
            return;
        }
        let mut batch = WriteBatch::new();
        let mut cells = Vec::with_capacity(puts.len());
        for &(k, ttl_ms, doom) in puts {
            let version = model.next_version(k, doom);
            let bytes = value(k, version, self.h.config.max_value_size);
            match ttl_ms {
                Some(ms) => {
                    batch.put_with_ttl_cf(&self.cf, key(k), bytes, Duration::from_millis(ms));
                }
                None => batch.put_cf(&self.cf, key(k), bytes),
            }
            cells.push((
                k,
                HeldCell {
                    version,
                    write_time: now,
                    ttl_ms,
                    maybe_filtered: false,
                },
            ));
        }
        match self.db.write(batch) {
            Ok(_) => {
                for (k, cell) in cells {
                    model.put(k, cell);
                }
            }
            Err(e) => self.h.engine_error("held write", e),
        }
    }

    /// Deletes `keys`, one point delete each (or one range delete).
    fn delete_block(&self, model: &mut HeldModel, keys: Range<usize>, as_range: bool) {
        let mut batch = WriteBatch::new();
        if as_range {
            batch.delete_range_cf(&self.cf, key(keys.start), key(keys.end));
        } else {
            for k in keys.clone() {
                batch.delete_cf(&self.cf, key(k));
            }
        }
        match self.db.write(batch) {
            Ok(_) => keys.for_each(|k| model.delete(k)),
            Err(e) => self.h.engine_error("held delete", e),
        }
    }

    fn flush(&self) -> Option<()> {
        match self.db.flush() {
            Ok(()) => Some(()),
            Err(e) => {
                self.h.engine_error("held flush", e);
                None
            }
        }
    }

    /// Makes a reader (a snapshot just before it, if `snapshot`) and what it must read.
    fn hold(
        &self,
        model: &HeldModel,
        now: u64,
        snapshot: bool,
        as_cursor: bool,
        from: usize,
    ) -> Option<HeldReader> {
        // First, so the runs reads at it learn are at or below the reader's seqno.
        let snapshot = snapshot.then(|| (self.db.snapshot(), model.cells.clone()));
        let reader = if as_cursor {
            self.cf.cursor().map(|c| Reader::Cursor(Box::new(c)))
        } else {
            self.cf
                .range(key(from)..)
                .map(|i| Reader::Iter(Box::new(i), from))
        };
        match reader {
            Ok(reader) => Some(HeldReader {
                reader,
                expect: model.expect_now(now),
                snapshot,
                made: format!("made at clock {now} (family TTL {:?} ms)", model.cf_ttl_ms),
            }),
            Err(e) => {
                self.h.read_error("held reader", e);
                None
            }
        }
    }

    /// Drops keys `by` one way (with `tightened`, the family TTL `set_options` tightens to),
    /// then compacts the family's tables, leaving the memtables (and the runs they hold) be.
    fn drop_and_compact(&self, inner: &mut HeldInner, by: DropBy, tightened: Option<u64>) {
        if let (DropBy::Options, Some(ttl)) = (by, tightened) {
            let ttl = inner.model.cf_ttl_ms.map_or(ttl, |old| old.min(ttl));
            let options = family_options().ttl(Duration::from_millis(ttl));
            if let Err(e) = self.cf.set_options(options) {
                return self.h.engine_error("held set_options", e);
            }
            inner.model.cf_ttl_ms = Some(ttl);
        }
        if let DropBy::Filter = by {
            self.work.filter.armed.store(true, Ordering::SeqCst);
            inner.model.arm();
            for (_, cells) in inner.held.iter_mut().filter_map(|r| r.snapshot.as_mut()) {
                crate::held_model::arm(cells);
            }
        }
        let compacted = self.cf.compact_tables::<&[u8]>(..);
        self.work.filter.armed.store(false, Ordering::SeqCst);
        if let Err(e) = compacted {
            self.h.engine_error("held compact_tables", e);
        }
    }

    /// Resets the family if its TTL was tightened below the floor.
    fn reset_if_tight(&self, inner: &mut HeldInner) {
        if inner.model.cf_ttl_ms.is_some_and(|t| t < TTL_FLOOR_MS) {
            self.reset(inner);
        }
    }

    /// Uses every held reader, then empties the family and removes its TTL.
    fn reset(&self, inner: &mut HeldInner) {
        for reader in std::mem::take(&mut inner.held) {
            let from = match reader.reader {
                Reader::Iter(_, from) => from,
                Reader::Cursor(_) => 0,
            };
            self.use_reader(reader, from, "before a reset");
        }
        let mut batch = WriteBatch::new();
        batch.delete_range_cf(&self.cf, key(0), key(HELD_KEYS));
        if let Err(e) = self.db.write(batch) {
            return self.h.engine_error("held reset", e);
        }
        inner.model.reset();
        if let Err(e) = self.cf.set_options(family_options()) {
            self.h.engine_error("held set_options", e);
        }
    }

    /// A read of the newest view from `from`, judged at `now`; a maybe-removed key it finds
    /// absent is absent from now on.
    fn fresh_read(&self, model: &mut HeldModel, now: u64, from: usize) {
        let expect = model.expect_now(now);
        let found = self
            .cf
            .cursor()
            .and_then(|mut c| read_cursor(&mut c, from, READ_AHEAD, self.max()));
        let Some(found) = self.found(found, "held fresh read") else {
            return;
        };
        self.work.fresh.fetch_add(1, Ordering::Relaxed);
        match judge_forward(&expect, from, &found) {
            Ok(_) => {
                self.h.tally.verified();
                for k in absent_in(&found, from, HELD_KEYS) {
                    model.seen_absent(k);
                }
            }
            Err(why) => self.h.tally.fail(
                Failure::WrongValue,
                format!("held fresh read from {from} at clock {now}: {why}"),
            ),
        }
    }

    /// A read at a held reader's snapshot, in the newest view: it learns runs at a seqno the
    /// held reader may use.
    fn read_at_snapshot(&self, snapshot: &Snapshot, expect: &[Expect], from: usize) {
        let found = snapshot
            .cursor_range_cf::<&[u8]>(&self.cf, ..)
            .and_then(|mut c| read_cursor(&mut c, from, READ_AHEAD, self.max()));
        let Some(found) = self.found(found, "held snapshot read") else {
            return;
        };
        self.work.fresh.fetch_add(1, Ordering::Relaxed);
        match judge_forward(expect, from, &found) {
            Ok(_) => self.h.tally.verified(),
            Err(why) => self.h.tally.fail(
                Failure::SnapshotMismatch,
                format!(
                    "held family read at snapshot {} from {from}: {why}",
                    snapshot.seqno()
                ),
            ),
        }
    }

    /// Uses a held reader for the first time, from `from`, and judges it against what was live
    /// when it was made.
    fn use_reader(&self, held: HeldReader, from: usize, context: &str) {
        let HeldReader {
            reader,
            expect,
            made,
            snapshot: _snapshot,
        } = held;
        let (kind, judged) = match reader {
            Reader::Cursor(mut cursor) => {
                let forward = read_cursor(&mut cursor, from, READ_AHEAD, self.max());
                let Some(forward) = self.found(forward, "held cursor") else {
                    return;
                };
                let back = cursor
                    .seek_for_prev(key(from))
                    .map(|()| entry(cursor.key(), cursor.value(), self.max()));
                let back = match back {
                    Ok(Ok(back)) => back,
                    Ok(Err(why)) => return self.held_failure(context, "cursor", &made, &why),
                    Err(e) => return self.h.read_error("held cursor", e),
                };
                let judged = judge_forward(&expect, from, &forward)
                    .and_then(|n| judge_backward(&expect, from, back).map(|m| n + m));
                ("cursor", judged)
            }
            Reader::Iter(iter, start) => {
                let found = read_iter(*iter, self.max());
                let Some(found) = self.found(found, "held iterator") else {
                    return;
                };
                ("iterator", judge_forward(&expect, start, &found))
            }
        };
        self.work.readers.fetch_add(1, Ordering::Relaxed);
        match judged {
            Ok(n) => {
                self.h.tally.verified();
                self.work.checks.fetch_add(n, Ordering::Relaxed);
            }
            Err(why) => self.held_failure(context, kind, &made, &why),
        }
    }

    fn held_failure(&self, context: &str, kind: &str, made: &str, why: &str) {
        self.h.tally.fail(
            Failure::HeldReader,
            format!("{context}: a held {kind} {made}: {why}"),
        );
    }

    fn max(&self) -> usize {
        self.h.config.max_value_size
    }

    /// What a read found, or `None` after recording why it failed (a read error, or a key or
    /// value no write made, a failure of its own).
    fn found(&self, found: cairn::Result<Result<Found, String>>, context: &str) -> Option<Found> {
        match found {
            Ok(Ok(found)) => Some(found),
            Ok(Err(why)) => {
                self.h
                    .tally
                    .fail(Failure::WrongValue, format!("{context}: {why}"));
                None
            }
            Err(e) => {
                self.h.read_error(context, e);
                None
            }
        }
    }
}

/// The key index and version of the entry a cursor is on, `None` off the end.
fn entry(
    key_: Option<&[u8]>,
    value_: Option<&[u8]>,
    max: usize,
) -> Result<Option<(usize, Option<u32>)>, String> {
    let (Some(key_), Some(value_)) = (key_, value_) else {
        return Ok(None);
    };
    let k = key_index(key_)
        .filter(|&k| k < HELD_KEYS)
        .ok_or_else(|| format!("key {:?} is none of ours", String::from_utf8_lossy(key_)))?;
    Ok(Some((k, parse_value(k, value_, max))))
}

/// Seeks `cursor` to key `from` and reads up to `n` entries forward.
fn read_cursor(
    cursor: &mut DbCursor,
    from: usize,
    n: usize,
    max: usize,
) -> cairn::Result<Result<Found, String>> {
    cursor.seek(key(from))?;
    let mut found = Found::default();
    while found.entries.len() < n {
        match entry(cursor.key(), cursor.value(), max) {
            Ok(Some(e)) => found.entries.push(e),
            Ok(None) => {
                found.to_the_end = true;
                break;
            }
            Err(why) => return Ok(Err(why)),
        }
        cursor.next()?;
    }
    Ok(Ok(found))
}

/// Runs `iter` to its end.
fn read_iter(iter: DbIterator, max: usize) -> cairn::Result<Result<Found, String>> {
    let mut found = Found {
        entries: Vec::new(),
        to_the_end: true,
    };
    for item in iter {
        let (k, v) = item?;
        match entry(Some(&k), Some(&v), max) {
            Ok(Some(e)) => found.entries.push(e),
            Ok(None) => {}
            Err(why) => return Ok(Err(why)),
        }
    }
    Ok(Ok(found))
}

/// The keys a forward read from `from` showed absent: those it stepped past, and those after
/// its last entry if it read to the end.
fn absent_in(found: &Found, from: usize, keys: usize) -> Vec<usize> {
    let mut absent = Vec::new();
    let mut next = from;
    for &(k, _) in &found.entries {
        absent.extend(next..k);
        next = k + 1;
    }
    if found.to_the_end {
        absent.extend(next..keys);
    }
    absent
}
