//! Snapshots and latest reads against compaction: a read must see, for every key, the newest
//! version at or below its sequence number, however flushes and compactions interleave.
//!
//! Two writers put numbered versions of their own keys and note the sequence number each write
//! got; a flusher and a compactor run all the while; a reader takes snapshots and reads every
//! key through them, and reads the latest value between two readings of the latest sequence
//! number. At the end every read is judged against the writers' logs. `CAIRN_SEEDS` sets how many
//! rounds run (default 1).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cairn::{Db, Options, SeqNo};

const KEYS: usize = 48;
const WRITES_PER_WRITER: u64 = 20_000;

fn key(k: usize) -> String {
    format!("k{k:03}")
}

fn value(k: usize, version: u64) -> String {
    format!("{}:{version}:{}", key(k), "x".repeat(40))
}

fn version_of(k: usize, value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    let rest = text.strip_prefix(&key(k))?.strip_prefix(':')?;
    rest.split(':').next()?.parse().ok()
}

/// What the reader saw.
#[derive(Debug, Default)]
struct Reads {
    /// `(snapshot seqno, key, version read)`.
    at_snapshot: Vec<(SeqNo, usize, Option<u64>)>,
    /// `(latest seqno before, latest seqno after, key, version read)`.
    latest: Vec<(SeqNo, SeqNo, usize, Option<u64>)>,
}

/// Per key, the versions written and the sequence number of each, in order.
type History = Vec<Vec<(SeqNo, u64)>>;

/// The version of key `k` at `seqno`: the newest written at or below it.
fn version_at(history: &History, k: usize, seqno: SeqNo) -> Option<u64> {
    history
        .get(k)?
        .iter()
        .take_while(|(s, _)| *s <= seqno)
        .last()
        .map(|&(_, v)| v)
}

/// Every read that saw something other than what its sequence number allows.
fn misses(history: &History, reads: &Reads) -> Vec<String> {
    let mut out = Vec::new();
    for &(s, k, seen) in &reads.at_snapshot {
        let want = version_at(history, k, s);
        if seen != want {
            out.push(format!(
                "snapshot {s}: {} read {seen:?}, want {want:?}",
                key(k)
            ));
        }
    }
    for &(before, after, k, seen) in &reads.latest {
        // Some version current at a moment between the two readings.
        let ok = (before..=after).any(|s| version_at(history, k, s) == seen)
            || (seen.is_some() && seen == version_at(history, k, after));
        if !ok {
            out.push(format!(
                "latest read between {before} and {after}: {} read {seen:?}",
                key(k)
            ));
        }
    }
    out
}

fn run(seed: u64) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(
        dir.path(),
        Options::default()
            .memtable_size(16 * 1024)
            .level0_triggers(2, 20, 36)
            .level_base_bytes(64 * 1024)
            .target_file_size(16 * 1024),
    )
    .expect("open");
    let history: Mutex<History> = Mutex::new(vec![Vec::new(); KEYS]);
    for k in 0..KEYS {
        let s = db.write(batch(k, 0)).expect("write");
        lock(&history).get_mut(k).expect("key").push((s, 0));
    }
    let done = AtomicBool::new(false);
    let reads = std::thread::scope(|scope| {
        for w in 0..2usize {
            let (db, history) = (&db, &history);
            scope.spawn(move || {
                let mut version = 0;
                for i in 0..WRITES_PER_WRITER {
                    let k =
                        usize::try_from((i * 7 + seed) % (KEYS as u64 / 2)).unwrap_or(0) * 2 + w;
                    version += 1;
                    let s = db.write(batch(k, version)).expect("write");
                    lock(history).get_mut(k).expect("key").push((s, version));
                }
            });
        }
        let flusher = scope.spawn(|| {
            while !done.load(Ordering::Acquire) {
                db.flush().expect("flush");
                std::thread::sleep(Duration::from_millis(3));
            }
        });
        let compactor = scope.spawn(|| {
            while !done.load(Ordering::Acquire) {
                db.compact_range::<&str>(..).expect("compact");
            }
        });
        let reader = scope.spawn(|| {
            let mut reads = Reads::default();
            while !done.load(Ordering::Acquire) {
                let snapshot = db.snapshot();
                for k in 0..KEYS {
                    let found = snapshot.get(key(k)).expect("get");
                    let found = found.and_then(|v| version_of(k, &v));
                    reads.at_snapshot.push((snapshot.seqno(), k, found));
                }
                for item in snapshot.iter().expect("iter") {
                    let (k, v) = item.expect("scan");
                    let index = std::str::from_utf8(&k)
                        .ok()
                        .and_then(|t| t.strip_prefix('k')?.parse::<usize>().ok())
                        .expect("a known key");
                    reads
                        .at_snapshot
                        .push((snapshot.seqno(), index, version_of(index, &v)));
                }
                for k in 0..KEYS {
                    let before = db.latest_seqno();
                    let found = db.get(key(k)).expect("get");
                    let after = db.latest_seqno();
                    reads
                        .latest
                        .push((before, after, k, found.and_then(|v| version_of(k, &v))));
                }
            }
            reads
        });
        // The writers are the first two threads spawned; wait for them by waiting for writes.
        loop {
            let written: usize = lock(&history).iter().map(Vec::len).sum();
            if written as u64 >= KEYS as u64 + 2 * WRITES_PER_WRITER {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        done.store(true, Ordering::Release);
        flusher.join().expect("flusher");
        compactor.join().expect("compactor");
        reader.join().expect("reader")
    });
    let history = lock(&history);
    assert!(
        reads.at_snapshot.len() > KEYS,
        "the reader read at least one snapshot"
    );
    misses(&history, &reads)
}

fn batch(k: usize, version: u64) -> cairn::WriteBatch {
    let mut b = cairn::WriteBatch::new();
    b.put(key(k), value(k, version));
    b
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn seeds() -> u64 {
    std::env::var("CAIRN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// Planted bugs are process-wide: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn snapshots_and_latest_reads_never_miss_a_version_at_their_sequence_number() {
    let _serial = lock(&SERIAL);
    for seed in 0..seeds() {
        let misses = run(seed);
        assert!(
            misses.is_empty(),
            "seed {seed}: {} wrong reads, first: {:?}",
            misses.len(),
            misses.first()
        );
    }
}

/// The check above catches the race it guards against, once the window is planted open.
#[cfg(feature = "planted-bugs")]
#[test]
fn a_snapshot_that_registers_late_is_caught() {
    let _serial = lock(&SERIAL);
    cairn::planted::set(cairn::planted::Bug::SnapshotBeforeRegister, true);
    let caught = (0..5).any(|seed| !run(seed).is_empty());
    cairn::planted::set(cairn::planted::Bug::SnapshotBeforeRegister, false);
    assert!(
        caught,
        "five rounds with the planted race saw nothing wrong"
    );
}
