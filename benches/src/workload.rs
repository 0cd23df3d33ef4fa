//! The workloads. Each runs on a fresh database in its own directory, which is removed after.
//!
//! Fills write keys `0..num` (16 bytes) with `value_size`-byte values. Workloads that read a
//! filled database first fill it in random order, flush, and wait for the engine's background
//! work, untimed, so every engine is read in a settled state. Every result is checked (hits,
//! misses, counts, queue order): an engine that answers wrongly fails the run instead of
//! winning it.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::Result;
use crate::disk::{allocated_bytes, dir_bytes, settled_dir_bytes};
use crate::engine::{Engine, EngineKind, RangeDelete};
use crate::keys::{KEY_LEN, Values, key, missing_key, queue_key, shuffled};
use crate::latency::Histogram;
use crate::settings::Settings;

/// Entries a `seekrandom` read takes: the one sought and ten `next`s.
const SEEK_ENTRIES: usize = 11;

/// A workload of the command line. Some yield several rows: `delete90` yields `delete90`,
/// `scan_after_delete` and `scan_after_settle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Puts in key order.
    FillSeq,
    /// Puts in random order.
    FillRandom,
    /// Random puts over a filled database.
    Overwrite,
    /// Random lookups of present keys.
    ReadRandom,
    /// Random lookups of absent keys between present ones.
    ReadMissing,
    /// Random seeks, each followed by ten `next`s.
    SeekRandom,
    /// One full scan.
    ScanAll,
    /// Deleting 90% of the keys one by one, then scans before and after background work.
    Delete90,
    /// A scan of a database that only ever held the keys `delete90` leaves: its baseline.
    ScanFresh10,
    /// One range delete over half the keys, then a full scan.
    DelrangeScan,
    /// Runs of 100 to 10,000 deleted keys between live ones; seeks land at a run's start.
    SeekDeletedRuns,
    /// A FIFO queue: pop the head found by an iterator, push at the tail.
    Queue,
    /// Bytes on disk after deleting every key and settling, as a fraction of the peak.
    SpaceAfterDelete,
    /// One writer at a fixed rate and readers of present keys, for a fixed time.
    ReadWhileWriting,
    /// A delete-heavy soak: inserts, TTL puts, point and range deletes at a steady size.
    Churn,
}

impl Workload {
    /// Every workload, in the order they run.
    pub const ALL: [Self; 15] = [
        Self::FillSeq,
        Self::FillRandom,
        Self::Overwrite,
        Self::ReadRandom,
        Self::ReadMissing,
        Self::SeekRandom,
        Self::ScanAll,
        Self::Delete90,
        Self::ScanFresh10,
        Self::DelrangeScan,
        Self::SeekDeletedRuns,
        Self::Queue,
        Self::SpaceAfterDelete,
        Self::ReadWhileWriting,
        Self::Churn,
    ];

    /// What runs without `--workloads`: all but `churn`, a soak of ten minutes an engine.
    pub fn default_list() -> Vec<Self> {
        Self::ALL
            .into_iter()
            .filter(|&w| w != Self::Churn)
            .collect()
    }

    /// The workload's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::FillSeq => "fillseq",
            Self::FillRandom => "fillrandom",
            Self::Overwrite => "overwrite",
            Self::ReadRandom => "readrandom",
            Self::ReadMissing => "readmissing",
            Self::SeekRandom => "seekrandom",
            Self::ScanAll => "scanall",
            Self::Delete90 => "delete90",
            Self::ScanFresh10 => "scan_fresh10",
            Self::DelrangeScan => "delrange_scan",
            Self::SeekDeletedRuns => "seek_deleted_runs",
            Self::Queue => "queue",
            Self::SpaceAfterDelete => "space_after_delete",
            Self::ReadWhileWriting => "readwhilewriting",
            Self::Churn => "churn",
        }
    }

    /// Parses a name; the rows `delete90` yields name it too.
    ///
    /// # Errors
    /// If the name is unknown.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "scan_after_delete" | "scan_after_settle" => Ok(Self::Delete90),
            "readwhilewriting_puts" => Ok(Self::ReadWhileWriting),
            _ => Self::ALL
                .into_iter()
                .find(|w| w.name() == name)
                .ok_or_else(|| {
                    let names: Vec<&str> = Self::ALL.iter().map(|w| w.name()).collect();
                    format!("unknown workload {name:?} ({})", names.join(", ")).into()
                }),
        }
    }

    fn index(self) -> u64 {
        Self::ALL
            .iter()
            .position(|&w| w == self)
            .and_then(|i| u64::try_from(i).ok())
            .unwrap_or(0)
    }
}

/// Every row a workload reports, for reading rows back from a child process.
pub const ROWS: &[&str] = &[
    "fillseq",
    "fillrandom",
    "overwrite",
    "readrandom",
    "readmissing",
    "seekrandom",
    "scanall",
    "delete90",
    "scan_after_delete",
    "scan_after_settle",
    "scan_fresh10",
    "delrange_scan",
    "seek_deleted_runs",
    "queue",
    "space_after_delete",
    "readwhilewriting",
    "readwhilewriting_puts",
    "churn",
];

/// One row of one run: how long it took and how much it did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Measurement {
    /// The row: a workload's name, or one of `delete90`'s.
    pub row: &'static str,
    /// Seconds the timed part took.
    pub secs: f64,
    /// Operations (puts, reads, seeks, entries scanned, deletes, pops) in that time.
    pub ops: u64,
    /// For `space_after_delete`: bytes after settling over the peak.
    pub fraction: Option<f64>,
    /// For `queue`: operations per second in each fifth of the operations done.
    pub fifths: Option<Vec<f64>>,
    /// For `churn`: its samples over time.
    pub churn: Option<Vec<crate::churn::ChurnSample>>,
    /// Further figures: bytes on disk, settle time, the parts of `delrange_scan`.
    pub extra: Vec<(String, f64)>,
    /// How the engine did it, where engines differ (a range delete key by key).
    pub note: Option<String>,
}

impl Measurement {
    pub(crate) fn timed(row: &'static str, elapsed: Duration, ops: u64) -> Self {
        Self {
            row,
            secs: elapsed.as_secs_f64(),
            ops,
            fraction: None,
            fifths: None,
            churn: None,
            extra: Vec::new(),
            note: None,
        }
    }

    /// A row of `ops` operations in `secs` seconds.
    pub(crate) fn timed_secs(row: &'static str, secs: f64, ops: u64) -> Self {
        Self::timed(row, Duration::from_secs_f64(secs.max(0.0)), ops)
    }

    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        #[expect(clippy::cast_precision_loss, reason = "op counts are far below 2^52")]
        let ops = self.ops as f64;
        if self.secs > 0.0 {
            ops / self.secs
        } else {
            0.0
        }
    }

    /// `self` with the extra figure `name`.
    pub fn with(mut self, name: &str, value: f64) -> Self {
        self.extra.push((name.to_string(), value));
        self
    }
}

/// Runs `workload` on a new database of `kind` in `dir` (which must not exist), removes the
/// directory, and returns its rows.
///
/// # Errors
/// An engine's error, a wrong answer, or a file-system error.
pub fn run(
    kind: EngineKind,
    workload: Workload,
    dir: &Path,
    settings: &Settings,
    round: u64,
) -> Result<Vec<Measurement>> {
    std::fs::create_dir_all(dir)?;
    let engine = kind.open(dir, settings)?;
    let mut ctx = Context {
        kind,
        engine: engine.as_ref(),
        dir,
        s: settings,
        rng: SmallRng::seed_from_u64(
            settings
                .seed
                .wrapping_mul(1_000_003)
                .wrapping_add(round * 100 + workload.index()),
        ),
        values: Values::new(settings.value_size, settings.seed ^ round),
        put_bytes: 0,
        live_keys: None,
    };
    let rows = match workload {
        Workload::FillSeq => ctx.fill_seq(),
        Workload::FillRandom => ctx.fill_random(),
        Workload::Overwrite => ctx.overwrite(),
        Workload::ReadRandom => ctx.read_random(),
        Workload::ReadMissing => ctx.read_missing(),
        Workload::SeekRandom => ctx.seek_random(),
        Workload::ScanAll => ctx.scan_all(),
        Workload::Delete90 => ctx.delete90(),
        Workload::ScanFresh10 => ctx.scan_fresh10(),
        Workload::DelrangeScan => ctx.delrange_scan(),
        Workload::SeekDeletedRuns => ctx.seek_deleted_runs(),
        Workload::Queue => ctx.queue(),
        Workload::SpaceAfterDelete => ctx.space_after_delete(),
        Workload::ReadWhileWriting => crate::readwhilewriting::run(&mut ctx),
        Workload::Churn => crate::churn::run(&mut ctx),
    };
    let rows = rows.and_then(|rows| ctx.with_amplification(workload, rows));
    let closed = engine.close();
    let removed = if settings.keep_dirs {
        Ok(())
    } else {
        std::fs::remove_dir_all(dir)
    };
    let rows = rows?;
    closed?;
    removed?;
    Ok(rows)
}

#[expect(clippy::cast_precision_loss, reason = "byte counts are far below 2^52")]
pub(crate) fn as_f64(n: u64) -> f64 {
    n as f64
}

/// One workload's run on one engine: what the workloads share.
pub(crate) struct Context<'a> {
    pub(crate) kind: EngineKind,
    pub(crate) engine: &'a dyn Engine,
    pub(crate) dir: &'a Path,
    pub(crate) s: &'a Settings,
    pub(crate) rng: SmallRng,
    pub(crate) values: Values,
    /// Key and value bytes put so far: what the user wrote.
    put_bytes: u64,
    /// The keys the workload knows it left live (each `KEY_LEN + value_size` bytes), for its
    /// space amplification; `None` where it cannot know them exactly.
    pub(crate) live_keys: Option<u64>,
}

impl Context<'_> {
    fn put_all(&mut self, order: impl IntoIterator<Item = u64>) -> Result<u64> {
        let mut n = 0;
        for i in order {
            self.put(i)?;
            n += 1;
        }
        Ok(n)
    }

    fn put(&mut self, i: u64) -> Result<()> {
        self.engine.put(&key(i), self.values.next_value())?;
        self.put_bytes += (KEY_LEN + self.s.value_size) as u64;
        Ok(())
    }

    /// The figures of the state a workload left, once the engine has flushed and finished its
    /// background work:
    ///
    /// - for the workloads that only put (`fillseq`, `fillrandom`, `overwrite`), the bytes the
    ///   user wrote, `user_write_mb`, on each row: the process's disk writes over them are its
    ///   write amplification (`child.rs` measures those);
    /// - where the workload knows the keys it left live, its space amplification on its
    ///   row (`delete90`'s on `scan_after_settle`): `disk_mb` (the sizes of the directory's files, once they stop changing),
    ///   `allocated_mb` (what the file system allocated to them), `live_mb` (the live keys'
    ///   key and value bytes) and `space_amp`, `disk_mb / live_mb`.
    ///
    /// Other workloads' rows are left as they are.
    fn with_amplification(
        &self,
        workload: Workload,
        mut rows: Vec<Measurement>,
    ) -> Result<Vec<Measurement>> {
        let put_only = matches!(
            workload,
            Workload::FillSeq | Workload::FillRandom | Workload::Overwrite
        );
        let live = self.live_keys.filter(|&n| n > 0);
        if !put_only && live.is_none() {
            return Ok(rows);
        }
        self.engine.flush()?;
        self.engine.wait_idle()?;
        if put_only {
            let mb = as_f64(self.put_bytes) / 1e6;
            rows = rows
                .into_iter()
                .map(|m| m.with("user_write_mb", mb))
                .collect();
        }
        // On the row named after the workload; `delete90`'s on the row of the state it ends
        // in, `scan_after_settle`, its last.
        let at = rows
            .iter()
            .position(|m| m.row == workload.name() && workload != Workload::Delete90)
            .unwrap_or(rows.len().saturating_sub(1));
        if let Some(keys) = live
            && at < rows.len()
        {
            let live_bytes = keys * (KEY_LEN + self.s.value_size) as u64;
            let disk = settled_dir_bytes(self.dir)?;
            let allocated = allocated_bytes(self.dir)?;
            let m = rows.remove(at);
            rows.insert(at, with_space(m, disk, allocated, live_bytes));
        }
        Ok(rows)
    }

    /// Fills `0..num` in random order, flushes and waits: the start of every read workload.
    pub(crate) fn filled(&mut self) -> Result<()> {
        let order = shuffled(self.s.num, &mut self.rng);
        self.put_all(order)?;
        self.engine.flush()?;
        self.engine.wait_idle()
    }

    /// What a user does after mass deletes to let the engine recover: Cairn is asked to wait
    /// for its background work; a peer waits as far as it can, then idles `idle_secs`, then
    /// waits again.
    fn settle(&self) -> Result<Duration> {
        let start = Instant::now();
        self.engine.wait_idle()?;
        if !self.kind.is_cairn() {
            std::thread::sleep(Duration::from_secs(self.s.idle_secs));
            self.engine.wait_idle()?;
        }
        Ok(start.elapsed())
    }

    fn timed_scan(&self, row: &'static str, expected: u64) -> Result<Measurement> {
        let start = Instant::now();
        let n = self.engine.scan()?;
        let elapsed = start.elapsed();
        if n != expected {
            return Err(format!("{row}: scanned {n} entries, expected {expected}").into());
        }
        Ok(Measurement::timed(row, elapsed, n))
    }

    fn fill_seq(&mut self) -> Result<Vec<Measurement>> {
        let start = Instant::now();
        let n = self.put_all(0..self.s.num)?;
        self.live_keys = Some(n);
        Ok(vec![Measurement::timed("fillseq", start.elapsed(), n)])
    }

    /// Fills in random order, timing every put: the throughput and the latency percentiles a
    /// writer sees (p50 to p99.99 and the worst, in microseconds), which is where a lock held across I/O shows.
    fn fill_random(&mut self) -> Result<Vec<Measurement>> {
        let order = shuffled(self.s.num, &mut self.rng);
        let mut latencies = Histogram::new();
        let start = Instant::now();
        for i in order {
            let put_start = Instant::now();
            self.put(i)?;
            latencies.record(put_start.elapsed());
        }
        let elapsed = start.elapsed();
        let n = latencies.len();
        self.live_keys = Some(n);
        Ok(vec![with_percentiles(
            Measurement::timed("fillrandom", elapsed, n),
            &latencies,
        )])
    }

    fn overwrite(&mut self) -> Result<Vec<Measurement>> {
        let order = shuffled(self.s.num, &mut self.rng);
        self.put_all(order)?;
        let num = self.s.num;
        let targets: Vec<u64> = (0..num).map(|_| self.rng.random_range(0..num)).collect();
        let start = Instant::now();
        let n = self.put_all(targets)?;
        self.live_keys = Some(num);
        Ok(vec![Measurement::timed("overwrite", start.elapsed(), n)])
    }

    /// `reads` random key indexes below `num`, drawn before the timed part.
    fn random_targets(&mut self) -> Vec<u64> {
        let num = self.s.num;
        (0..self.s.reads)
            .map(|_| self.rng.random_range(0..num))
            .collect()
    }

    /// Looks up `reads` keys `key_of(i)` for random indexes `i` of a filled database; returns
    /// the time taken, the number of hits, if asked for each lookup's latency, and the data
    /// blocks read per lookup where the engine counts them (its background work is finished
    /// before, so what it counts is the lookups').
    fn timed_lookups(
        &mut self,
        key_of: fn(u64) -> [u8; KEY_LEN],
        each: bool,
    ) -> Result<(Duration, u64, Histogram, Option<f64>)> {
        self.filled()?;
        self.live_keys = Some(self.s.num);
        let targets = self.random_targets();
        let mut latencies = Histogram::new();
        let blocks_before = self.engine.blocks_read();
        let start = Instant::now();
        let mut hits = 0;
        for &i in &targets {
            let get_start = each.then(Instant::now);
            hits += u64::from(self.engine.get(&key_of(i))?);
            if let Some(t) = get_start {
                latencies.record(t.elapsed());
            }
        }
        let elapsed = start.elapsed();
        let per_lookup = match (blocks_before, self.engine.blocks_read()) {
            (Some(before), Some(after)) if !targets.is_empty() => {
                Some(as_f64(after.saturating_sub(before)) / as_f64(targets.len() as u64))
            }
            _ => None,
        };
        Ok((elapsed, hits, latencies, per_lookup))
    }

    /// Random lookups of present keys, each timed: the throughput and the latency percentiles
    /// a reader sees.
    fn read_random(&mut self) -> Result<Vec<Measurement>> {
        let (elapsed, hits, latencies, blocks) = self.timed_lookups(key, true)?;
        if hits != self.s.reads {
            return Err(format!("readrandom: {hits} hits of {} reads", self.s.reads).into());
        }
        Ok(vec![with_blocks(
            with_percentiles(Measurement::timed("readrandom", elapsed, hits), &latencies),
            blocks,
        )])
    }

    fn read_missing(&mut self) -> Result<Vec<Measurement>> {
        let (elapsed, hits, _, blocks) = self.timed_lookups(missing_key, false)?;
        if hits != 0 {
            return Err(format!("readmissing: {hits} hits on absent keys").into());
        }
        Ok(vec![with_blocks(
            Measurement::timed("readmissing", elapsed, self.s.reads),
            blocks,
        )])
    }

    fn seek_random(&mut self) -> Result<Vec<Measurement>> {
        self.filled()?;
        self.live_keys = Some(self.s.num);
        let num = self.s.num;
        let targets = self.random_targets();
        let start = Instant::now();
        for &i in &targets {
            let read = self.engine.seek(&key(i), SEEK_ENTRIES)?;
            let left = usize::try_from(num - i).unwrap_or(usize::MAX);
            if read != SEEK_ENTRIES.min(left) {
                return Err(format!("seekrandom: read {read} entries from key {i}").into());
            }
        }
        Ok(vec![Measurement::timed(
            "seekrandom",
            start.elapsed(),
            self.s.reads,
        )])
    }

    fn scan_all(&mut self) -> Result<Vec<Measurement>> {
        self.filled()?;
        self.live_keys = Some(self.s.num);
        Ok(vec![self.timed_scan("scanall", self.s.num)?])
    }

    /// Deletes every key but each tenth (`i % 10 != 0`) one by one in random order, flushes,
    /// scans, settles, scans again.
    fn delete90(&mut self) -> Result<Vec<Measurement>> {
        self.filled()?;
        let bytes_full = dir_bytes(self.dir)?;
        let allocated_full = allocated_bytes(self.dir)?;
        let doomed: Vec<u64> = shuffled(self.s.num, &mut self.rng)
            .into_iter()
            .filter(|i| i % 10 != 0)
            .collect();
        let survivors = self.s.num - u64::try_from(doomed.len())?;
        self.live_keys = Some(survivors);
        let start = Instant::now();
        for &i in &doomed {
            self.engine.delete(&key(i))?;
        }
        let deleted = Measurement::timed("delete90", start.elapsed(), u64::try_from(doomed.len())?);
        self.engine.flush()?;
        let bytes_deleted = dir_bytes(self.dir)?;
        let before = self.timed_scan("scan_after_delete", survivors)?;
        let settle = self.settle()?;
        let bytes_settled = settled_dir_bytes(self.dir)?;
        let after = self
            .timed_scan("scan_after_settle", survivors)?
            .with("settle_secs", settle.as_secs_f64())
            .with("bytes_full", as_f64(bytes_full))
            .with("bytes_after_delete", as_f64(bytes_deleted))
            .with("bytes_after_settle", as_f64(bytes_settled))
            .with("allocated_full", as_f64(allocated_full))
            .with("allocated_after_settle", as_f64(allocated_bytes(self.dir)?));
        Ok(vec![deleted, before, after])
    }

    fn scan_fresh10(&mut self) -> Result<Vec<Measurement>> {
        let kept: Vec<u64> = shuffled(self.s.num, &mut self.rng)
            .into_iter()
            .filter(|i| i % 10 == 0)
            .collect();
        let n = self.put_all(kept)?;
        self.live_keys = Some(n);
        self.engine.flush()?;
        self.engine.wait_idle()?;
        Ok(vec![self.timed_scan("scan_fresh10", n)?])
    }

    fn delrange_scan(&mut self) -> Result<Vec<Measurement>> {
        self.filled()?;
        let half = self.s.num / 2;
        self.live_keys = Some(self.s.num - half);
        let start = Instant::now();
        let how = self.engine.delete_range(&key(0), &key(half))?;
        let delete = start.elapsed();
        let scan = self.timed_scan("delrange_scan", self.s.num - half)?;
        let mut m = Measurement::timed(
            "delrange_scan",
            delete + Duration::from_secs_f64(scan.secs),
            self.s.num,
        )
        .with("delete_range_secs", delete.as_secs_f64())
        .with("scan_secs", scan.secs);
        if how == RangeDelete::KeyByKey {
            m.note = Some("no range delete: keys read and deleted one by one".into());
        }
        Ok(vec![m])
    }

    /// Pebble PR #3790 and `RocksDB` issue #10300: the filled keys are cut into runs of 100 to
    /// 10,000 keys deleted one by one, each followed by ten live keys; the deletes are flushed
    /// (not settled), then each seek lands at a run's first key and reads the live key after
    /// it. Up to `reads` seeks, or `queue_cap_secs` seconds, whichever ends first.
    fn seek_deleted_runs(&mut self) -> Result<Vec<Measurement>> {
        /// Live keys after each run.
        const GAP: u64 = 10;
        self.filled()?;
        // Held by a snapshot taken before the deletes, the runs stay in every engine's tables,
        // as a long reader would keep them: without it the peers compacted them away at 1M
        // keys, and the seeks no longer met them.
        let engine = self.engine;
        let held = engine.hold_snapshot()?;
        let num = self.s.num;
        let mut runs = Vec::new();
        let mut first = 0;
        while first < num {
            let len = self.rng.random_range(100..=10_000).min(num - first);
            runs.push((first, len));
            for i in first..first + len {
                self.engine.delete(&key(i))?;
            }
            first += len + GAP;
        }
        self.engine.flush()?;
        let deleted: u64 = runs.iter().map(|&(_, len)| len).sum();
        self.live_keys = Some(num - deleted);
        let targets: Vec<(u64, u64)> = (0..self.s.reads)
            .filter_map(|_| runs.get(self.rng.random_range(0..runs.len())).copied())
            .collect();
        let cap = Duration::from_secs(self.s.queue_cap_secs);
        let start = Instant::now();
        let mut done = 0u64;
        for &(run, len) in &targets {
            if start.elapsed() >= cap {
                break;
            }
            // The last run may reach the end of the keys, with no live key after it.
            let read = self.engine.seek(&key(run), 1)?;
            let expected = usize::from(run + len < num);
            if read != expected {
                return Err(format!(
                    "seek_deleted_runs: read {read} entries after the run at {run}, expected {expected}"
                )
                .into());
            }
            done += 1;
        }
        let mut m = Measurement::timed("seek_deleted_runs", start.elapsed(), done);
        // Fail closed: the seeks must have landed on the live key after each run (the count
        // alone would pass an engine that resurrected a deleted key) ...
        for &(run, len) in targets.iter().take(1_000) {
            let want = (run + len < num).then(|| key(run + len).to_vec());
            if self.engine.key_at_or_after(&key(run))? != want {
                return Err(format!(
                    "seek_deleted_runs: a seek to {run} did not land on the live key after its \
                     run of {len}"
                )
                .into());
            }
        }
        // ... and if the snapshot no longer reads the deleted keys, the engine did not keep
        // the runs, and the seeks measured something else.
        for &(run, _) in &runs {
            if !held.sees(&key(run))? {
                return Err(format!(
                    "seek_deleted_runs: the held snapshot no longer reads key {run}, deleted after \
                     it was taken: the runs were not kept, so the seeks did not meet them"
                )
                .into());
            }
        }
        drop(held);
        if done < self.s.reads {
            m.note = Some(format!(
                "stopped at the {} s cap after {done} of {} seeks",
                self.s.queue_cap_secs, self.s.reads
            ));
        }
        Ok(vec![m.with("runs", as_f64(runs.len() as u64))])
    }

    /// fjall issue #115: a FIFO of `queue_items` items; each operation finds the head with an
    /// iterator from the start, deletes it, and pushes a new item at the tail.
    fn queue(&mut self) -> Result<Vec<Measurement>> {
        let items = self.s.queue_items;
        for i in 0..items {
            self.engine.put(&queue_key(i), self.values.next_value())?;
        }
        self.live_keys = Some(items);
        let cap = Duration::from_secs(self.s.queue_cap_secs);
        let mut ends: Vec<f64> = Vec::with_capacity(usize::try_from(self.s.queue_ops)?);
        let start = Instant::now();
        let mut head = 0;
        while head < self.s.queue_ops {
            let elapsed = start.elapsed();
            if elapsed >= cap {
                break;
            }
            let Some(first) = self.engine.first_key()? else {
                return Err("queue: the queue is empty".into());
            };
            if first.as_slice() != queue_key(head).as_slice() {
                return Err(format!(
                    "queue: popped {:?}, expected item {head}",
                    String::from_utf8_lossy(&first)
                )
                .into());
            }
            self.engine.delete(&first)?;
            self.engine
                .put(&queue_key(head + items), self.values.next_value())?;
            head += 1;
            ends.push(start.elapsed().as_secs_f64());
        }
        let elapsed = start.elapsed();
        let mut m = Measurement::timed("queue", elapsed, head);
        m.fifths = Some(fifths(&ends));
        if head < self.s.queue_ops {
            m.note = Some(format!(
                "stopped at the {} s cap after {head} of {} operations",
                self.s.queue_cap_secs, self.s.queue_ops
            ));
        }
        Ok(vec![
            m.with("bytes_end", as_f64(dir_bytes(self.dir)?))
                .with("allocated_end", as_f64(allocated_bytes(self.dir)?)),
        ])
    }

    /// Fills, deletes every key one by one, flushes and settles; the fraction is the bytes then
    /// (once they stop changing) over the most seen at any point before.
    fn space_after_delete(&mut self) -> Result<Vec<Measurement>> {
        self.filled()?;
        let mut peak = dir_bytes(self.dir)?;
        let mut allocated_peak = allocated_bytes(self.dir)?;
        let order = shuffled(self.s.num, &mut self.rng);
        let start = Instant::now();
        for &i in &order {
            self.engine.delete(&key(i))?;
        }
        let elapsed = start.elapsed();
        peak = peak.max(dir_bytes(self.dir)?);
        allocated_peak = allocated_peak.max(allocated_bytes(self.dir)?);
        self.engine.flush()?;
        peak = peak.max(dir_bytes(self.dir)?);
        allocated_peak = allocated_peak.max(allocated_bytes(self.dir)?);
        let settle = self.settle()?;
        let at_wait_return = dir_bytes(self.dir)?;
        let after = settled_dir_bytes(self.dir)?;
        let allocated_after = allocated_bytes(self.dir)?;
        if self.engine.first_key()?.is_some() {
            return Err("space_after_delete: a key survived deleting every key".into());
        }
        let mut m = Measurement::timed("space_after_delete", elapsed, self.s.num)
            .with("bytes_peak", as_f64(peak))
            .with("bytes_at_wait_return", as_f64(at_wait_return))
            .with("bytes_after", as_f64(after))
            .with("allocated_peak", as_f64(allocated_peak))
            .with("allocated_after", as_f64(allocated_after))
            .with("settle_secs", settle.as_secs_f64());
        m.fraction = Some(if peak == 0 {
            0.0
        } else {
            as_f64(after) / as_f64(peak)
        });
        Ok(vec![m])
    }
}

/// `m` with the data blocks read per lookup, `blocks_per_read`, where the engine counts them.
fn with_blocks(m: Measurement, blocks_per_read: Option<f64>) -> Measurement {
    match blocks_per_read {
        Some(b) => m.with("blocks_per_read", b),
        None => m,
    }
}

/// `m` with its space amplification: `disk` bytes in the directory (and `allocated` by the
/// file system) over `live` bytes of live keys and values.
pub(crate) fn with_space(m: Measurement, disk: u64, allocated: u64, live: u64) -> Measurement {
    m.with("disk_mb", as_f64(disk) / 1e6)
        .with("allocated_mb", as_f64(allocated) / 1e6)
        .with("live_mb", as_f64(live) / 1e6)
        .with("space_amp", as_f64(disk) / as_f64(live.max(1)))
        .with(
            "space_amp_allocated",
            as_f64(allocated) / as_f64(live.max(1)),
        )
}

/// `m` with p50 to p99.99 and the largest latency of `h`, in µs: the latency columns of every
/// row that reports them.
pub(crate) fn with_percentiles(m: Measurement, h: &Histogram) -> Measurement {
    m.with("p50_us", h.quantile_us(0.5))
        .with("p99_us", h.quantile_us(0.99))
        .with("p999_us", h.quantile_us(0.999))
        .with("p9999_us", h.quantile_us(0.9999))
        .with("max_us", h.max_us())
}

/// Operations per second in each fifth of the operations, given when each one ended.
fn fifths(ends: &[f64]) -> Vec<f64> {
    let n = ends.len();
    (0..5)
        .map(|f| {
            let (lo, hi) = (n * f / 5, n * (f + 1) / 5);
            let begin = if lo == 0 {
                0.0
            } else {
                ends.get(lo - 1).copied().unwrap_or(0.0)
            };
            let end = ends.get(hi.saturating_sub(1)).copied().unwrap_or(begin);
            let count = as_f64(u64::try_from(hi - lo).unwrap_or(0));
            if end > begin {
                count / (end - begin)
            } else {
                0.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifths_split_the_operations_evenly() {
        let ends: Vec<f64> = (1..=10).map(f64::from).collect();
        let f = fifths(&ends);
        assert_eq!(f.len(), 5);
        assert!(f.iter().all(|&x| (x - 1.0).abs() < 1e-9), "{f:?}");
    }

    #[test]
    fn every_workload_parses_back() {
        for w in Workload::ALL {
            assert_eq!(Workload::parse(w.name()).ok(), Some(w));
        }
        assert_eq!(
            Workload::parse("scan_after_settle").ok(),
            Some(Workload::Delete90)
        );
    }
}
