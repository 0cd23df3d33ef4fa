//! Concurrency: writers, readers, snapshots and flushes on one database at once.
//!
//! Four writers own disjoint key ranges (`w0/…` to `w3/…`): puts, deletes, batches and range
//! deletes of their own range, each writer keeping a `BTreeMap` model of its range and the
//! sequence number every write got. Four readers get and scan at random and check that each
//! value is one its key's writer wrote (values carry their key and the writer's operation
//! number), and that no key ever goes back to an older value. Two threads flush over and over
//! while a 32 KiB memtable with room for one frozen memtable makes writes stall. A snapshot
//! taken midway is scanned again and again while writes go on.
//!
//! Every workload runs under a deadline, so a deadlock fails the test instead of hanging it.
//! The runs are bounded by operation counts. `CAIRN_SEEDS` sets how many seeds each test runs
//! (default 1) and `CAIRN_SEED=n` replays one seed's operations (not its thread interleaving).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use cairn::{Db, DbIterator, Options, SeqNo, Snapshot, WriteBatch, WriteOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const WRITERS: usize = 4;
const READERS: usize = 4;
const KEYS_PER_WRITER: u32 = 128;
const OPS_PER_WRITER: u64 = 1200;
const READS_PER_READER: u64 = 1500;
/// A flush thread flushes each time the writers have done this many more writes.
const FLUSH_EVERY_OPS: [u64; 2] = [30, 100];
/// Full scans of the mid-run snapshot after the first.
const SNAPSHOT_REPEATS: u64 = 6;
/// A workload that has not finished by then is taken for a deadlock.
const DEADLINE: Duration = Duration::from_secs(120);

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn key(writer: usize, k: u32) -> Vec<u8> {
    format!("w{writer}/k{k:04}").into_bytes()
}

/// The value a writer's operation `op_no` gives `key`: the key, `=`, the operation, padding.
fn value(key: &[u8], op_no: u64, pad: usize) -> Vec<u8> {
    let mut v = key.to_vec();
    v.extend_from_slice(format!("={op_no}/").as_bytes());
    v.resize(v.len() + pad, b'.');
    v
}

/// The operation number in a value, if the value belongs to `key`.
fn op_no_of(key: &[u8], value: &[u8]) -> Option<u64> {
    let rest = value.strip_prefix(key)?.strip_prefix(b"=")?;
    let digits = rest.split(|&b| b == b'/').next()?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The writer that owns `key`.
fn owner(key: &[u8]) -> Option<usize> {
    let digit = *key.strip_prefix(b"w")?.first()?;
    Some(usize::from(digit.checked_sub(b'0')?)).filter(|&w| w < WRITERS)
}

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    DeleteRange(Vec<u8>, Vec<u8>),
}

fn apply(model: &mut Model, op: &Op) {
    match op {
        Op::Put(k, v) => {
            model.insert(k.clone(), v.clone());
        }
        Op::Delete(k) => {
            model.remove(k);
        }
        Op::DeleteRange(a, b) => model.retain(|k, _| k < a || k >= b),
    }
}

/// Shared counters: how far the writers are.
struct Progress {
    /// Per writer, the operation it is writing or last wrote: no value may carry a later one.
    started: [AtomicU64; WRITERS],
    /// Writes finished, all writers together.
    completed: AtomicU64,
    /// Writers still running.
    writers_left: AtomicUsize,
}

impl Progress {
    fn new() -> Self {
        Self {
            started: std::array::from_fn(|_| AtomicU64::new(0)),
            completed: AtomicU64::new(0),
            writers_left: AtomicUsize::new(WRITERS),
        }
    }

    fn writing(&self) -> bool {
        self.writers_left.load(Ordering::SeqCst) > 0
    }

    /// Waits until the writers have done `ops` writes in all, or stopped.
    fn wait_for(&self, ops: u64) {
        while self.completed.load(Ordering::SeqCst) < ops && self.writing() {
            thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Counts a writer out even if it panics, so threads waiting on the writers do not hang.
struct WriterDone<'a>(&'a Progress);

impl Drop for WriterDone<'_> {
    fn drop(&mut self) {
        self.0.writers_left.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What one writer did.
struct WriterLog {
    writer: usize,
    model: Model,
    /// Each write's operations with the sequence number of its last one, in order.
    history: Vec<(SeqNo, Vec<Op>)>,
}

impl WriterLog {
    /// The writer's range as of sequence number `seqno`.
    fn model_at(&self, seqno: SeqNo) -> Model {
        let mut model = Model::new();
        for (_, ops) in self.history.iter().take_while(|(s, _)| *s <= seqno) {
            for op in ops {
                apply(&mut model, op);
            }
        }
        model
    }
}

fn random_ops(rng: &mut SmallRng, writer: usize, op_no: u64) -> Vec<Op> {
    let one = |rng: &mut SmallRng| {
        let k = key(writer, rng.random_range(0..KEYS_PER_WRITER));
        if rng.random_ratio(3, 4) {
            let v = value(&k, op_no, rng.random_range(0..120));
            Op::Put(k, v)
        } else {
            Op::Delete(k)
        }
    };
    let range = |rng: &mut SmallRng| {
        let start = rng.random_range(0..KEYS_PER_WRITER);
        let end = (start + rng.random_range(1..16)).min(KEYS_PER_WRITER);
        Op::DeleteRange(key(writer, start), key(writer, end))
    };
    match rng.random_range(0..100) {
        0..80 => vec![one(rng)],
        80..92 => (0..rng.random_range(2..7)).map(|_| one(rng)).collect(),
        92..97 => vec![range(rng)],
        _ => vec![one(rng), range(rng), one(rng)],
    }
}

fn writer(db: &Db, writer: usize, seed: u64, progress: &Progress) -> WriterLog {
    let _done = WriterDone(progress);
    let mut rng =
        SmallRng::seed_from_u64(seed.wrapping_mul(1000) + u64::try_from(writer).expect("small"));
    let mut log = WriterLog {
        writer,
        model: Model::new(),
        history: Vec::new(),
    };
    let started = progress.started.get(writer).expect("writer index");
    for op_no in 1..=OPS_PER_WRITER {
        started.store(op_no, Ordering::SeqCst);
        let ops = random_ops(&mut rng, writer, op_no);
        let mut batch = WriteBatch::new();
        for op in &ops {
            match op {
                Op::Put(k, v) => batch.put(k, v),
                Op::Delete(k) => batch.delete(k),
                Op::DeleteRange(a, b) => batch.delete_range(a, b),
            }
        }
        // Writer 0 syncs now and then, so synced and unsynced writes meet in commit groups.
        let sync = writer == 0 && op_no.is_multiple_of(10);
        let seqno = db
            .write_opt(batch, &WriteOptions { sync })
            .unwrap_or_else(|e| panic!("writer {writer}: write {op_no}: {e}"));
        for op in &ops {
            apply(&mut log.model, op);
        }
        log.history.push((seqno, ops));
        progress.completed.fetch_add(1, Ordering::SeqCst);
    }
    log
}

/// What a reader has seen: per key, the newest operation number.
struct ReaderState<'a> {
    reader: usize,
    progress: &'a Progress,
    newest: HashMap<Vec<u8>, u64>,
}

impl ReaderState<'_> {
    /// Checks a value read for `key`: written by its owner, not from an operation that has
    /// not started, and not older than one this reader saw before.
    fn check(&mut self, key: &[u8], value: &[u8]) {
        let r = self.reader;
        let shown = String::from_utf8_lossy(key);
        let w = owner(key).unwrap_or_else(|| panic!("reader {r}: stray key {shown}"));
        let op_no = op_no_of(key, value).unwrap_or_else(|| {
            panic!(
                "reader {r}: {shown} holds {:?}, not a value of its",
                String::from_utf8_lossy(value)
            )
        });
        let started = self
            .progress
            .started
            .get(w)
            .expect("writer index")
            .load(Ordering::SeqCst);
        assert!(
            op_no <= started,
            "reader {r}: {shown} holds the value of write {op_no}, but writer {w} is at {started}"
        );
        let newest = self.newest.entry(key.to_vec()).or_insert(op_no);
        assert!(
            op_no >= *newest,
            "reader {r}: {shown} went back from write {newest} to write {op_no}"
        );
        *newest = op_no;
    }
}

fn reader(db: &Db, reader: usize, seed: u64, progress: &Progress) {
    let mut rng = SmallRng::seed_from_u64(
        seed.wrapping_mul(1000) + 100 + u64::try_from(reader).expect("small"),
    );
    let mut state = ReaderState {
        reader,
        progress,
        newest: HashMap::new(),
    };
    for _ in 0..READS_PER_READER {
        let w = rng.random_range(0..WRITERS);
        let start = rng.random_range(0..KEYS_PER_WRITER);
        let (lo, hi) = (key(w, start), key(w, start + rng.random_range(1..24)));
        match rng.random_range(0..20) {
            0..14 => {
                if let Some(v) = db.get(&lo).expect("get") {
                    state.check(&lo, &v);
                }
            }
            14..19 => {
                let iter = db.range(lo.clone()..hi.clone()).expect("range");
                for (k, v) in &short_scan(iter, &lo, &hi, rng.random_bool(0.3), reader) {
                    state.check(k, v);
                }
            }
            _ => {
                // A short-lived snapshot reads the same twice, across whatever flushes and
                // writes happen in between.
                let snapshot = db.snapshot();
                let scan_at = |backward| {
                    let iter = snapshot.range(lo.clone()..hi.clone()).expect("range");
                    short_scan(iter, &lo, &hi, backward, reader)
                };
                let first = scan_at(false);
                for (k, v) in &first {
                    state.check(k, v);
                }
                thread::yield_now();
                let again = scan_at(true);
                assert!(
                    again == first,
                    "reader {reader}: snapshot at {} read {lo:?}..{hi:?} twice differently: {}",
                    snapshot.seqno(),
                    first_difference(&first, &again)
                );
            }
        }
    }
}

/// Collects a scan of `lo..hi` in key order, checking it is sorted and within its bounds.
fn short_scan(iter: DbIterator, lo: &[u8], hi: &[u8], backward: bool, reader: usize) -> Entries {
    let mut items: Entries = if backward {
        iter.rev().map(|r| r.expect("scan")).map(owned).collect()
    } else {
        iter.map(|r| r.expect("scan")).map(owned).collect()
    };
    if backward {
        items.reverse();
    }
    assert!(
        items.windows(2).all(|p| matches!(p, [a, b] if a.0 < b.0)),
        "reader {reader}: scan of {lo:?}..{hi:?} (backward: {backward}) is not sorted"
    );
    for (k, _) in &items {
        assert!(
            lo <= k.as_slice() && k.as_slice() < hi,
            "reader {reader}: scan of {lo:?}..{hi:?} yielded {k:?}"
        );
    }
    items
}

fn owned((k, v): (bytes::Bytes, bytes::Bytes)) -> (Vec<u8>, Vec<u8>) {
    (k.to_vec(), v.to_vec())
}

fn scan(snapshot: &Snapshot) -> Entries {
    snapshot
        .iter()
        .expect("snapshot iter")
        .map(|r| r.expect("snapshot scan"))
        .map(owned)
        .collect()
}

fn scan_backward(snapshot: &Snapshot) -> Entries {
    let mut items: Entries = snapshot
        .iter()
        .expect("snapshot iter")
        .rev()
        .map(|r| r.expect("snapshot scan"))
        .map(owned)
        .collect();
    items.reverse();
    items
}

/// Where two scans first differ, for messages.
fn first_difference(want: &Entries, got: &Entries) -> String {
    let show = |e: Option<&(Vec<u8>, Vec<u8>)>| {
        e.map(|(k, v)| {
            format!(
                "{}={}",
                String::from_utf8_lossy(k),
                String::from_utf8_lossy(v)
            )
        })
    };
    let at = want
        .iter()
        .zip(got)
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| want.len().min(got.len()));
    format!(
        "{} vs {} entries; first difference at {at}: {:?} vs {:?}",
        want.len(),
        got.len(),
        show(want.get(at)),
        show(got.get(at))
    )
}

/// Takes a snapshot once half the writes are done, then scans it again and again as writes
/// go on; every scan, forward or backward, and every point read must agree with the first.
fn snapshot_checker(db: &Db, progress: &Progress) -> (SeqNo, Entries) {
    let total = OPS_PER_WRITER * u64::try_from(WRITERS).expect("small");
    progress.wait_for(total / 2);
    let snapshot = db.snapshot();
    let first = scan(&snapshot);
    for repeat in 1..=SNAPSHOT_REPEATS {
        progress.wait_for(total / 2 + repeat * total / 16);
        let again = if repeat % 2 == 0 {
            scan(&snapshot)
        } else {
            scan_backward(&snapshot)
        };
        assert!(
            again == first,
            "snapshot at seqno {}: scan {repeat} differs from the first: {}",
            snapshot.seqno(),
            first_difference(&first, &again)
        );
        for (k, v) in first
            .iter()
            .skip(usize::try_from(repeat).expect("small"))
            .step_by(9)
        {
            let got = snapshot.get(k).expect("snapshot get");
            assert_eq!(got.as_deref(), Some(&v[..]), "snapshot get {k:?}");
        }
    }
    (snapshot.seqno(), first)
}

/// Flushes each time the writers did `every` more writes, until they stop; returns how often.
fn flusher(db: &Db, every: u64, progress: &Progress) -> u64 {
    let (mut flushes, mut last) = (0, 0);
    while progress.writing() {
        let now = progress.completed.load(Ordering::SeqCst);
        if now >= last + every {
            db.flush().expect("flush");
            flushes += 1;
            last = now;
        } else {
            thread::sleep(Duration::from_micros(200));
        }
    }
    flushes
}

/// What a workload leaves: each writer's log and, if one was taken, the mid-run snapshot's
/// sequence number and first scan.
struct Outcome {
    logs: Vec<WriterLog>,
    snapshot: Option<(SeqNo, Entries)>,
    flushes: u64,
}

fn join<T>(handle: thread::ScopedJoinHandle<'_, T>) -> T {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Runs writers, readers, flush threads and (with `take_snapshot`) the snapshot checker.
fn run_workload(db: &Db, seed: u64, take_snapshot: bool) -> Outcome {
    let progress = Progress::new();
    let progress = &progress;
    thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| s.spawn(move || writer(db, w, seed, progress)))
            .collect();
        let readers: Vec<_> = (0..READERS)
            .map(|r| s.spawn(move || reader(db, r, seed, progress)))
            .collect();
        let flush_threads: Vec<_> = FLUSH_EVERY_OPS
            .iter()
            .map(|&every| s.spawn(move || flusher(db, every, progress)))
            .collect();
        let snapshot = take_snapshot.then(|| s.spawn(move || snapshot_checker(db, progress)));
        let logs = writers.into_iter().map(join).collect();
        readers.into_iter().for_each(join);
        let flushes = flush_threads.into_iter().map(join).sum();
        Outcome {
            logs,
            snapshot: snapshot.map(join),
            flushes,
        }
    })
}

/// Runs `work` on its own thread and fails if it takes longer than [`DEADLINE`].
fn within_deadline<T: Send + 'static>(what: &str, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = mpsc::channel();
    let handle = thread::spawn(move || {
        let _ = done.send(work());
    });
    match finished.recv_timeout(DEADLINE) {
        Ok(out) => {
            handle.join().expect("the workload thread ended");
            out
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("{what}: the workload ended without a result"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: not finished after {DEADLINE:?}: the engine is probably deadlocked")
        }
    }
}

fn seeds() -> Vec<u64> {
    let var = |name: &str| {
        std::env::var(name).ok().map(|s| {
            s.parse::<u64>()
                .unwrap_or_else(|_| panic!("{name} is a number"))
        })
    };
    if let Some(seed) = var("CAIRN_SEED") {
        return vec![seed];
    }
    (0..var("CAIRN_SEEDS").unwrap_or(1)).collect()
}

fn options() -> Options {
    Options::default()
        .memtable_size(32 * 1024)
        .max_immutable_memtables(1)
}

/// Runs `check` on a fresh database in a fresh directory for every seed, under the deadline.
fn for_each_seed(test: &'static str, check: fn(Db, &Path, u64)) {
    for seed in seeds() {
        eprintln!("{test}: seed {seed}");
        within_deadline(&format!("{test} seed {seed}"), move || {
            let dir = tempfile::tempdir().expect("tempdir");
            let db = Db::open(dir.path(), options()).expect("open");
            check(db, dir.path(), seed);
        });
    }
}

/// Every writer's range in `entries` (a scan of the whole database) equals its model.
fn check_models(entries: &Entries, logs: &[WriterLog], ctx: &str) {
    let mut by_writer: Vec<Entries> = vec![Vec::new(); WRITERS];
    for (k, v) in entries {
        let w = owner(k).unwrap_or_else(|| panic!("{ctx}: stray key {k:?}"));
        by_writer
            .get_mut(w)
            .expect("writer index")
            .push((k.clone(), v.clone()));
    }
    for (log, got) in logs.iter().zip(&by_writer) {
        let want: Entries = log
            .model
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert!(
            *got == want,
            "{ctx}: writer {}'s range differs from its model: {}",
            log.writer,
            first_difference(&want, got)
        );
    }
}

fn full_scan(db: &Db) -> Entries {
    db.iter()
        .expect("iter")
        .map(|r| r.expect("scan"))
        .map(owned)
        .collect()
}

#[test]
fn snapshot_scan_repeats_exactly_while_writers_readers_and_flushes_run() {
    for_each_seed(
        "snapshot_scan_repeats_exactly_while_writers_readers_and_flushes_run",
        |db, _, seed| {
            let outcome = run_workload(&db, seed, true);
            let (seqno, scan) = outcome.snapshot.expect("a snapshot was taken");
            // The snapshot shows each writer's range as its writes up to the snapshot left it.
            let mut at_snapshot = Model::new();
            for log in &outcome.logs {
                at_snapshot.extend(log.model_at(seqno));
            }
            let want: Entries = at_snapshot.into_iter().collect();
            assert!(
                scan == want,
                "seed {seed}: the snapshot at seqno {seqno} differs from the writes up to it: {}",
                first_difference(&want, &scan)
            );
            assert!(outcome.flushes > 0, "seed {seed}: no flush ran");
            let stats = db.stats();
            eprintln!(
                "seed {seed}: {} flushes asked, {} done, {} write stalls, snapshot at seqno {seqno} of {}",
                outcome.flushes,
                stats.flushes,
                stats.write_stalls,
                db.latest_seqno()
            );
            db.close().expect("close");
        },
    );
}

#[test]
fn final_state_matches_each_writers_model() {
    for_each_seed("final_state_matches_each_writers_model", |db, _, seed| {
        let outcome = run_workload(&db, seed, false);
        check_models(&full_scan(&db), &outcome.logs, &format!("seed {seed}"));
        for log in &outcome.logs {
            for k in (0..KEYS_PER_WRITER).map(|k| key(log.writer, k)) {
                let got = db.get(&k).expect("get");
                assert_eq!(
                    got.as_deref(),
                    log.model.get(&k).map(Vec::as_slice),
                    "seed {seed}: get {}",
                    String::from_utf8_lossy(&k)
                );
            }
        }
        // And once everything is in tables.
        db.flush().expect("flush");
        check_models(
            &full_scan(&db),
            &outcome.logs,
            &format!("seed {seed}, flushed"),
        );
        db.close().expect("close");
    });
}

#[test]
fn concurrent_writes_survive_close_and_reopen() {
    for_each_seed(
        "concurrent_writes_survive_close_and_reopen",
        |db, path, seed| {
            let outcome = run_workload(&db, seed, false);
            db.close().expect("close");
            let db = Db::open(path, options()).expect("reopen");
            check_models(
                &full_scan(&db),
                &outcome.logs,
                &format!("seed {seed}, reopened"),
            );
            db.close().expect("close again");
        },
    );
}
