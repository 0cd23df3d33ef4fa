//! Crash recovery: what a database holds after its process is killed, and after the power goes.
//!
//! Every test writes the same numbered batches. Batch `i` puts `b{i:08}-0` … `b{i:08}-3` and a
//! scratch key `g{i:08}`, and may delete older scratch keys: a point delete (or single delete)
//! of `g{i-3}` when `i % 3 == 1`, a range delete of `g{i-5}..g{i-3}` when `i % 5 == 2`. So the
//! database after batches `0..n` is known exactly, and a recovered one shows which batches it
//! holds, whether any is half applied, and whether the deletes came back with their batches.
//!
//! - A process crash (a child process killed with SIGKILL) loses nothing a write returned
//!   from, synced or not: the log is handed to the OS before `write` returns.
//! - A power loss (simulated with `cairn_fs::FaultyFs`) keeps every synced write, and what
//!   survives is a prefix of the writes: no holes, no half batch. So does a power loss in the
//!   middle of the recovery from one, and a torn log tail followed by a crash during recovery.
//! - A clean `close` loses nothing, even to a power loss right after it.
//!
//! `CAIRN_SEEDS` sets how many seeds the power-loss tests run (default 8) and `CAIRN_SEED=n`
//! replays one; `CAIRN_CRASH_CYCLES` sets how many kills the process test makes (default 5),
//! with its kill timing drawn from `CAIRN_SEED` (default: from the clock, printed).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::ops::Range;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cairn::{Db, Options, WriteBatch, WriteOptions};
use cairn_fs::{FaultyFs, FileSystem, OpKind, PowerLoss, SyncFailure};
use cairn_wal::LogWriter;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Set in the child writer's environment: the database directory it writes to.
const CHILD_DIR_VAR: &str = "CAIRN_CRASH_DIR";

/// The child writer stops by itself after this many batches, should nobody kill it.
const CHILD_MAX_BATCHES: u64 = 1_000_000;

const SIGKILL: i32 = 9;

/// Keys `b{i}-{j}` per batch, besides its scratch key.
const KEYS_PER_BATCH: u64 = 4;

// ---------------------------------------------------------------------------------------------
// The batches and what a database holding a prefix of them looks like.

fn batch_key(i: u64, j: u64) -> String {
    format!("b{i:08}-{j}")
}

fn scratch_key(i: u64) -> String {
    format!("g{i:08}")
}

/// The value of key `j` of batch `i` (`j == KEYS_PER_BATCH` for the scratch key).
fn value(i: u64, j: u64) -> String {
    let pad = usize::try_from((i * 7 + j * 13) % 160).expect("small padding");
    format!("v{i}-{j}-{}", "x".repeat(pad))
}

/// The scratch key batch `i` deletes with a point delete, if any.
fn point_erase(i: u64) -> Option<u64> {
    (i % 3 == 1 && i >= 3).then(|| i - 3)
}

/// The scratch keys batch `i` deletes with one range delete, if any.
fn range_erase(i: u64) -> Option<Range<u64>> {
    (i % 5 == 2 && i >= 5).then(|| i - 5..i - 3)
}

fn batch(i: u64) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for j in 0..KEYS_PER_BATCH {
        batch.put(batch_key(i, j), value(i, j));
    }
    batch.put(scratch_key(i), value(i, KEYS_PER_BATCH));
    if let Some(k) = point_erase(i) {
        // Each scratch key is put exactly once, so a single delete is legal.
        if i.is_multiple_of(2) {
            batch.single_delete(scratch_key(k));
        } else {
            batch.delete(scratch_key(k));
        }
    }
    if let Some(r) = range_erase(i) {
        batch.delete_range(scratch_key(r.start), scratch_key(r.end));
    }
    batch
}

/// The scratch keys left after batches `0..n`.
fn expected_scratch(n: u64) -> BTreeSet<u64> {
    let mut live: BTreeSet<u64> = (0..n).collect();
    for i in 0..n {
        if let Some(k) = point_erase(i) {
            live.remove(&k);
        }
        for k in range_erase(i).into_iter().flatten() {
            live.remove(&k);
        }
    }
    live
}

fn parse_index(digits: &str, key: &str, ctx: &str) -> u64 {
    digits
        .parse()
        .unwrap_or_else(|_| panic!("{ctx}: unexpected key {key:?}"))
}

/// Up to a few elements of a set, for messages.
fn some_of(set: &BTreeSet<u64>) -> String {
    let shown: Vec<String> = set.iter().take(8).map(u64::to_string).collect();
    let more = if set.len() > 8 { ", …" } else { "" };
    format!("{{{}{more}}} ({} in all)", shown.join(", "), set.len())
}

/// Checks that `db` holds exactly batches `0..n`, each whole and with its deletes applied, and
/// returns `n`.
fn check_recovered(db: &Db, ctx: &str) -> u64 {
    let mut batches: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    let mut scratch = BTreeSet::new();
    for item in db.iter().expect("iter") {
        let (key, val) = item.unwrap_or_else(|e| panic!("{ctx}: scan failed: {e}"));
        let key = String::from_utf8(key.to_vec()).expect("keys are UTF-8");
        let (i, j) = if let Some(rest) = key.strip_prefix('b') {
            let (i, j) = rest
                .split_once('-')
                .unwrap_or_else(|| panic!("{ctx}: unexpected key {key:?}"));
            let (i, j) = (parse_index(i, &key, ctx), parse_index(j, &key, ctx));
            assert!(j < KEYS_PER_BATCH, "{ctx}: unexpected key {key:?}");
            batches.entry(i).or_default().insert(j);
            (i, j)
        } else if let Some(rest) = key.strip_prefix('g') {
            let i = parse_index(rest, &key, ctx);
            scratch.insert(i);
            (i, KEYS_PER_BATCH)
        } else {
            panic!("{ctx}: unexpected key {key:?}");
        };
        assert!(
            val.as_ref() == value(i, j).as_bytes(),
            "{ctx}: {key} holds {:?}",
            String::from_utf8_lossy(&val)
        );
    }
    for (i, keys) in &batches {
        assert_eq!(
            keys.len(),
            usize::try_from(KEYS_PER_BATCH).expect("small"),
            "{ctx}: batch {i} is half applied: only keys {keys:?} of it are there"
        );
    }
    let present: BTreeSet<u64> = batches.keys().copied().collect();
    let n = u64::try_from(present.len()).expect("count fits");
    let holes: BTreeSet<u64> = (0..n).filter(|i| !present.contains(i)).collect();
    assert!(
        holes.is_empty(),
        "{ctx}: the recovered batches are not a prefix: {} are there, missing {}",
        some_of(&present),
        some_of(&holes)
    );
    let want = expected_scratch(n);
    let lost: BTreeSet<u64> = want.difference(&scratch).copied().collect();
    let kept: BTreeSet<u64> = scratch.difference(&want).copied().collect();
    assert!(
        lost.is_empty() && kept.is_empty(),
        "{ctx}: after batches 0..{n}, scratch keys {} are missing and {} survive their delete",
        some_of(&lost),
        some_of(&kept)
    );
    check_point_reads(db, n, ctx);
    n
}

/// Point reads agree with the scan at the edges of the prefix and on a sample inside it.
fn check_point_reads(db: &Db, n: u64, ctx: &str) {
    let step = usize::try_from(n / 40).expect("fits").max(1);
    let sample = (0..n).step_by(step).chain(n.saturating_sub(3)..n + 2);
    for i in sample {
        for j in 0..KEYS_PER_BATCH {
            let key = batch_key(i, j);
            let got = db
                .get(&key)
                .unwrap_or_else(|e| panic!("{ctx}: get {key}: {e}"));
            let want = (i < n).then(|| value(i, j));
            assert_eq!(
                got.as_deref(),
                want.as_ref().map(String::as_bytes),
                "{ctx}: get {key} disagrees with the scan"
            );
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().map_or(default, |s| {
        s.parse().unwrap_or_else(|_| panic!("{name} is a number"))
    })
}

/// The seeds of a randomized test: `CAIRN_SEED` alone, or `0..CAIRN_SEEDS` (default 8).
fn seeds() -> Vec<u64> {
    if std::env::var_os("CAIRN_SEED").is_some() {
        return vec![env_u64("CAIRN_SEED", 0)];
    }
    (0..env_u64("CAIRN_SEEDS", 8)).collect()
}

/// Runs `run` for every seed, naming the seed that fails.
fn for_each_seed(test: &str, run: impl Fn(u64)) {
    for seed in seeds() {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(seed)));
        if let Err(panic) = result {
            eprintln!("{test} failed with seed {seed}; replay with CAIRN_SEED={seed}");
            std::panic::resume_unwind(panic);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Process crash: a child writer killed with SIGKILL.

fn child_options() -> Options {
    Options::default().memtable_size(64 * 1024)
}

/// The first batch not yet in `db`.
fn next_batch(db: &Db) -> u64 {
    let last = db
        .prefix("b")
        .expect("prefix")
        .next_back()
        .map(|item| item.expect("last batch key").0);
    last.map_or(0, |key| {
        let key = String::from_utf8(key.to_vec()).expect("keys are UTF-8");
        let digits = key
            .strip_prefix('b')
            .and_then(|rest| rest.split_once('-'))
            .map(|(i, _)| i)
            .expect("batch key");
        parse_index(digits, &key, "child writer") + 1
    })
}

/// The child half of `process_kill_loses_no_acknowledged_write`: with `CAIRN_CRASH_DIR` set,
/// writes batches into it until killed, printing `ack {i}` once batch `i` is written. Without
/// it (an ordinary test run) it does nothing.
#[test]
fn crash_child_writer() {
    let Some(dir) = std::env::var_os(CHILD_DIR_VAR) else {
        return;
    };
    let db = Db::open(&dir, child_options()).expect("child writer: open");
    let start = next_batch(&db);
    let mut out = std::io::stdout().lock();
    // libtest may have printed "test crash_child_writer ... " with no newline yet.
    writeln!(out).expect("child writer: stdout");
    for i in start..start + CHILD_MAX_BATCHES {
        db.write_opt(
            batch(i),
            &WriteOptions {
                sync: i.is_multiple_of(7),
            },
        )
        .expect("child writer: write");
        // Fails once the parent is gone, which ends the child.
        writeln!(out, "ack {i}").expect("child writer: stdout");
        out.flush().expect("child writer: stdout");
    }
}

/// Kills the child if the parent panics before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // Best effort: the child may be dead and reaped already.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The highest batch the child acknowledged. Acknowledgements must come in order.
fn read_acks(stdout: ChildStdout) -> Option<u64> {
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    let mut last: Option<u64> = None;
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return last,
            Ok(_) => {}
        }
        // A line the kill cut short is no acknowledgement.
        let Some(whole) = line.strip_suffix('\n') else {
            return last;
        };
        if let Some(i) = whole.strip_prefix("ack ") {
            let i: u64 = i.parse().expect("ack carries a batch number");
            assert!(
                last.is_none_or(|l| i == l + 1),
                "acks out of order: {i} after {last:?}"
            );
            last = Some(i);
        }
    }
}

/// Runs the child writer on `dir`, kills it after `delay`, and returns its last ack.
fn run_child_until_killed(dir: &Path, delay: Duration) -> Option<u64> {
    let exe = std::env::current_exe().expect("the test binary's path");
    let child = Command::new(exe)
        .args([
            "--exact",
            "crash_child_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_VAR, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child writer");
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().expect("piped stdout");
    let mut stderr = child.0.stderr.take().expect("piped stderr");
    let acks = std::thread::spawn(move || read_acks(stdout));
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    std::thread::sleep(delay);
    child.0.kill().expect("kill the child writer");
    let status = child.0.wait().expect("wait for the child writer");
    let acked = acks.join().expect("ack reader");
    let errors = errors.join().expect("stderr reader");
    assert_eq!(
        status.signal(),
        Some(SIGKILL),
        "the child writer ended by itself ({status}) before it was killed:\n{errors}"
    );
    acked
}

/// A clock-derived seed unless `CAIRN_SEED` names one.
fn run_seed() -> u64 {
    if std::env::var_os("CAIRN_SEED").is_some() {
        return env_u64("CAIRN_SEED", 0);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    u64::from(nanos)
}

#[test]
fn process_kill_loses_no_acknowledged_write() {
    let seed = run_seed();
    let cycles = env_u64("CAIRN_CRASH_CYCLES", 5);
    eprintln!("process kill: seed {seed}, {cycles} cycles; CAIRN_SEED={seed} replays the timing");
    let mut rng = SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    // Batches the database held after the last kill: a kill must not lose any of them either.
    let mut held = 0;
    for cycle in 0..cycles {
        let delay = Duration::from_millis(rng.random_range(20..300));
        let acked = run_child_until_killed(dir.path(), delay);
        let ctx = format!("seed {seed} cycle {cycle} (killed after {delay:?}, acked {acked:?})");
        let db = Db::open(dir.path(), child_options())
            .unwrap_or_else(|e| panic!("{ctx}: reopen after the kill: {e}"));
        let n = check_recovered(&db, &ctx);
        db.close()
            .unwrap_or_else(|e| panic!("{ctx}: close after checking: {e}"));
        let floor = acked.map_or(held, |a| a + 1).max(held);
        assert!(
            n >= floor,
            "{ctx}: acknowledged batch {} is lost: only batches 0..{n} are there",
            floor - 1
        );
        // One write can be in the log without its ack printed, no more.
        assert!(
            n <= floor + 1,
            "{ctx}: batches 0..{n} are there, but only 0..{floor} were acknowledged"
        );
        eprintln!("cycle {cycle}: killed after {delay:?}, acked {acked:?}, recovered 0..{n}");
        held = n;
    }
}

// ---------------------------------------------------------------------------------------------
// Power loss with `FaultyFs`.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// Flushes only when a 32 KiB memtable fills.
    Plain,
    /// Also `flush()` at random points, so tables and MANIFEST edits land mid-run.
    Flushes,
    /// A 4 KiB memtable: the log switches every few batches.
    LogSwitches,
    /// As `Flushes`, and the first recovery after each power loss meets I/O errors and loses
    /// power again before it is done.
    RecoveryCrash,
}

/// Power losses per seed, each followed by recovery and more writes on the same database.
const POWER_LOSS_ROUNDS: usize = 3;

/// Automatic recovery is off: these tests pin what the files hold when the database stays
/// stopped after a fault (recovery is `io_recovery.rs`'s).
fn faulty_options(fs: &FaultyFs, variant: Variant) -> Options {
    let options = Options::default()
        .file_system(Arc::new(fs.clone()))
        .auto_recovery(false);
    match variant {
        Variant::Plain | Variant::Flushes | Variant::RecoveryCrash => {
            options.memtable_size(32 * 1024)
        }
        Variant::LogSwitches => options.memtable_size(4 * 1024),
    }
}

/// Writes `batches`, syncing those whose index is a multiple of `sync_every`; returns the last
/// one synced.
fn write_round(
    db: &Db,
    rng: &mut SmallRng,
    variant: Variant,
    batches: Range<u64>,
    sync_every: Option<u64>,
) -> Option<u64> {
    let mut synced = None;
    for i in batches {
        let sync = sync_every.is_some_and(|k| i.is_multiple_of(k));
        db.write_opt(batch(i), &WriteOptions { sync })
            .unwrap_or_else(|e| panic!("write batch {i}: {e}"));
        if sync {
            synced = Some(i);
        }
        let flushes = matches!(variant, Variant::Flushes | Variant::RecoveryCrash);
        if flushes && rng.random_ratio(1, 60) {
            db.flush()
                .unwrap_or_else(|e| panic!("flush after batch {i}: {e}"));
        }
    }
    synced
}

/// Which power losses a run simulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Losses {
    /// Unsynced bytes dropped all, as a random tail, or as random pages.
    Any,
    /// Unsynced pages persisted out of order, leaving holes before later records.
    ReorderedPages,
}

fn run_power_loss(seed: u64, variant: Variant) {
    run_power_losses(seed, variant, Losses::Any);
}

fn run_power_losses(seed: u64, variant: Variant, losses: Losses) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultyFs::new(seed);
    let mut db = Db::open(dir.path(), faulty_options(&fs, variant)).expect("open");
    let mut held = 0;
    for round in 0..POWER_LOSS_ROUNDS {
        let count = rng.random_range(100..500);
        let sync_every = (!rng.random_ratio(1, 5)).then(|| rng.random_range(1..=16));
        let synced = write_round(&db, &mut rng, variant, held..held + count, sync_every);
        let mode = match (losses, rng.random_range(0..3)) {
            (Losses::ReorderedPages, _) | (Losses::Any, 2) => {
                PowerLoss::ReorderedPages { seed: rng.random() }
            }
            (Losses::Any, 0) => PowerLoss::DropAllUnsynced,
            (Losses::Any, _) => PowerLoss::DropRandomTail { seed: rng.random() },
        };
        let ctx = format!(
            "{variant:?} seed {seed} round {round}: batches {held}..{} synced every {sync_every:?} \
             (last synced {synced:?}), {mode:?}",
            held + count
        );
        // The process dies first: nothing more reaches the disk, not even the sync on drop.
        fs.set_active(false);
        drop(db);
        fs.power_loss(mode)
            .unwrap_or_else(|e| panic!("{ctx}: power loss: {e}"));
        fs.set_active(true);
        if variant == Variant::RecoveryCrash {
            crash_during_recovery(&fs, dir.path(), &mut rng, &ctx);
        }
        db = Db::open(dir.path(), faulty_options(&fs, variant))
            .unwrap_or_else(|e| panic!("{ctx}: reopen after power loss: {e}"));
        let n = check_recovered(&db, &ctx);
        let floor = synced.map_or(held, |s| s + 1).max(held);
        assert!(
            n >= floor,
            "{ctx}: synced batch {} is lost: only batches 0..{n} are there",
            floor - 1
        );
        assert!(
            n <= held + count,
            "{ctx}: batches 0..{n} are there, more than were written"
        );
        eprintln!("{ctx}: recovered 0..{n}");
        held = n;
    }
    db.close().expect("close");
}

/// Opens the database with I/O errors injected, so recovery may stop anywhere, then loses power
/// again, with or without the open having succeeded.
fn crash_during_recovery(fs: &FaultyFs, dir: &Path, rng: &mut SmallRng, ctx: &str) {
    for kind in [
        OpKind::Create,
        OpKind::Append,
        OpKind::Sync,
        OpKind::Rename,
        OpKind::Remove,
        OpKind::SyncDir,
    ] {
        fs.inject_errors(kind, rng.random_range(3..30));
    }
    let attempt = Db::open(dir, faulty_options(fs, Variant::RecoveryCrash));
    fs.set_active(false);
    fs.clear_errors();
    let opened = attempt.is_ok();
    drop(attempt);
    let mode = PowerLoss::DropRandomTail { seed: rng.random() };
    fs.power_loss(mode)
        .unwrap_or_else(|e| panic!("{ctx}: power loss during recovery: {e}"));
    fs.set_active(true);
    eprintln!("{ctx}: recovery with injected errors opened: {opened}, then {mode:?}");
}

#[test]
fn power_loss_keeps_synced_writes_and_a_prefix() {
    for_each_seed("power_loss_keeps_synced_writes_and_a_prefix", |seed| {
        run_power_loss(seed, Variant::Plain);
    });
}

#[test]
fn power_loss_amid_flushes_keeps_synced_writes_and_a_prefix() {
    for_each_seed(
        "power_loss_amid_flushes_keeps_synced_writes_and_a_prefix",
        |seed| run_power_loss(seed, Variant::Flushes),
    );
}

#[test]
fn power_loss_amid_log_switches_keeps_synced_writes_and_a_prefix() {
    for_each_seed(
        "power_loss_amid_log_switches_keeps_synced_writes_and_a_prefix",
        |seed| run_power_loss(seed, Variant::LogSwitches),
    );
}

/// A memtable switch syncs no log: the writes of a closed log become durable with the next
/// synced write or with their flush, and a log flushed first is deleted without ever being
/// synced (most of its bytes never reach the disk). With every log sync failing, unsynced
/// writes across many switches still succeed; the first synced one fails.
#[test]
fn a_memtable_switch_syncs_no_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultyFs::new(1);
    let db = Db::open(dir.path(), faulty_options(&fs, Variant::LogSwitches)).expect("open");
    fs.inject_errors_matching(OpKind::Sync, 1, ".log");
    for i in 0..400 {
        db.write(batch(i))
            .unwrap_or_else(|e| panic!("unsynced write {i}, with log syncs failing: {e}"));
    }
    db.flush()
        .expect("flush: tables and the MANIFEST sync, no log does");
    let flushes = db.stats().flushes;
    assert!(
        flushes >= 5,
        "the writes switched memtables: {flushes} flushes"
    );
    assert_eq!(fs.injected_errors(), 0, "no log was synced");
    let synced = db.write_opt(batch(400), &WriteOptions { sync: true });
    assert!(synced.is_err(), "the synced write reaches a failing sync");
    fs.clear_errors();
    drop(db);
}

/// `durable_seqno` is a promise: every write at or below it survives a power loss, whether a
/// synced write (which seals the logs closed before it) or a flush made it durable.
#[test]
fn power_loss_keeps_every_write_up_to_the_durable_seqno() {
    for_each_seed(
        "power_loss_keeps_every_write_up_to_the_durable_seqno",
        |seed| {
            let mut rng = SmallRng::seed_from_u64(seed);
            let dir = tempfile::tempdir().expect("tempdir");
            let fs = FaultyFs::new(seed);
            let db = Db::open(dir.path(), faulty_options(&fs, Variant::LogSwitches)).expect("open");
            assert_eq!(db.durable_seqno(), db.latest_seqno(), "a fresh database");
            let count = rng.random_range(200..600);
            // Early enough that memtable switches follow it.
            let synced_at = rng.random_range(0..count - 100);
            let mut last_seqnos = Vec::new();
            for i in 0..count {
                let sync = i == synced_at;
                let seqno = db
                    .write_opt(batch(i), &WriteOptions { sync })
                    .unwrap_or_else(|e| panic!("write batch {i}: {e}"));
                if sync {
                    assert_eq!(db.durable_seqno(), seqno, "a synced write is durable");
                }
                last_seqnos.push(seqno);
            }
            let durable = db.durable_seqno();
            assert!(
                durable < db.latest_seqno(),
                "seed {seed}: the last writes were not synced"
            );
            let promised = last_seqnos.iter().filter(|&&s| s <= durable).count() as u64;
            assert!(
                promised > synced_at + 1,
                "seed {seed}: switches after the synced write sealed more"
            );
            fs.set_active(false);
            drop(db);
            fs.power_loss(PowerLoss::ReorderedPages { seed })
                .expect("power loss");
            fs.set_active(true);
            let db =
                Db::open(dir.path(), faulty_options(&fs, Variant::LogSwitches)).expect("reopen");
            let ctx = format!("seed {seed}: durable seqno {durable}, {promised} batches promised");
            let n = check_recovered(&db, &ctx);
            assert!(n >= promised, "{ctx}: only batches 0..{n} are there");
            db.close().expect("close");
        },
    );
}

/// Writeback is not in file order: a power loss can keep later pages of a log and lose earlier
/// ones, leaving a hole of zeros before valid records. All of it was unsynced, so recovery in
/// the default mode must open, lose only unsynced writes, and keep a prefix.
#[test]
fn power_loss_with_pages_written_out_of_order_keeps_synced_writes_and_a_prefix() {
    for_each_seed(
        "power_loss_with_pages_written_out_of_order_keeps_synced_writes_and_a_prefix",
        |seed| run_power_losses(seed, Variant::Plain, Losses::ReorderedPages),
    );
}

#[test]
fn power_loss_during_recovery_keeps_synced_writes_and_a_prefix() {
    for_each_seed(
        "power_loss_during_recovery_keeps_synced_writes_and_a_prefix",
        |seed| run_power_loss(seed, Variant::RecoveryCrash),
    );
}

/// Writes batches `0..n` (every fourth synced) until `fail` makes one fail; returns the
/// number of batches acknowledged and the last synced one. Every write after the failure must
/// be refused: the database stopped.
fn write_until_failure(db: &Db, n: u64, fail_at: u64, fail: impl FnOnce()) -> (u64, Option<u64>) {
    let mut fail = Some(fail);
    let mut synced = None;
    for i in 0..n {
        if i == fail_at
            && let Some(fail) = fail.take()
        {
            fail();
        }
        let sync = i % 4 == 0;
        match db.write_opt(batch(i), &WriteOptions { sync }) {
            Ok(_) if sync => synced = Some(i),
            Ok(_) => {}
            Err(e) => {
                assert!(i >= fail_at, "batch {i} failed before the fault: {e}");
                let refused = db.write_opt(batch(i + 1), &WriteOptions::default());
                assert!(
                    matches!(refused, Err(cairn::Error::Stopped { .. })),
                    "the database goes on after a failed log write: {refused:?}"
                );
                return (i, synced);
            }
        }
    }
    panic!("the injected fault never failed a write");
}

/// A failed log sync that drops the unsynced bytes (Linux after a writeback error): the
/// database stops, and reopening — with or without a power loss after — keeps every write
/// synced before it and a prefix of the rest.
#[test]
fn a_failed_log_sync_that_drops_unsynced_bytes_loses_only_unsynced_writes() {
    for power_loss in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = FaultyFs::new(9);
        fs.set_sync_failure(SyncFailure::DropsUnsynced);
        let db = Db::open(dir.path(), faulty_options(&fs, Variant::Plain)).expect("open");
        let (acked, synced) = write_until_failure(&db, 400, 201, || {
            fs.fail_next(OpKind::Sync, ".log");
        });
        drop(db);
        if power_loss {
            fs.power_loss(PowerLoss::DropAllUnsynced)
                .expect("power loss");
        }
        let db = Db::open(dir.path(), faulty_options(&fs, Variant::Plain)).expect("reopen");
        let ctx = format!("power loss {power_loss}: {acked} acknowledged, last synced {synced:?}");
        let n = check_recovered(&db, &ctx);
        assert!(
            synced.is_some_and(|s| n > s),
            "{ctx}: a synced write is lost: 0..{n}"
        );
        assert!(n <= acked + 1, "{ctx}: 0..{n} is more than was written");
    }
}

/// A failed append that leaves a torn prefix of the record in the log: the database stops, and
/// reopening keeps every acknowledged write and drops the torn one.
#[test]
fn a_torn_log_append_loses_only_the_write_that_tore() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultyFs::new(4);
    let db = Db::open(dir.path(), faulty_options(&fs, Variant::Plain)).expect("open");
    let (acked, _) = write_until_failure(&db, 400, 150, || {
        fs.fail_next(OpKind::Append, ".log");
    });
    drop(db);
    let db = Db::open(dir.path(), faulty_options(&fs, Variant::Plain)).expect("reopen");
    let n = check_recovered(&db, "after a torn append");
    assert_eq!(n, acked, "every acknowledged write, and not the torn one");
}

/// The newest write-ahead log (`NNNNNN.log`) in `dir`.
fn newest_log(dir: &Path) -> std::path::PathBuf {
    logs_in(dir).pop().expect("a log in the directory")
}

fn logs_in(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .expect("list the directory")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    logs.sort();
    logs
}

/// A database whose newest log ends in a torn record (as a crash in the middle of an append
/// leaves it), after 20 batches that are all in tables. The torn record is batch 20.
fn database_with_torn_log_tail() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    for i in 0..20 {
        db.write(batch(i)).expect("write");
    }
    db.flush().expect("flush");
    db.write(batch(20)).expect("write");
    db.close().expect("close");
    let log = newest_log(dir.path());
    let bytes = std::fs::read(&log).expect("read the log");
    // Close sealed the log with a 15-byte sync mark (type 5) after batch 20: a crash in the
    // middle of batch 20's append leaves neither.
    let seal = if bytes.len() >= 15 && bytes.get(bytes.len() - 9) == Some(&5) {
        15
    } else {
        0
    };
    let len = bytes.len() as u64 - seal;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .and_then(|file| file.set_len(len - 3))
        .expect("tear the last record");
    dir
}

/// The open after a torn tail dies before it is done (here an I/O error renaming `CURRENT`; a
/// kill or a power cut there leaves the same files). The torn record was never acknowledged,
/// so the next open must succeed with everything before it.
///
/// Fails at 7081879 ("a torn tail is only the last log's"): that open created its new log
/// before installing its MANIFEST, and recovery then calls the torn log's tail corruption
/// because a newer log exists, so no later open of the database succeeds.
#[test]
fn torn_log_tail_then_crash_during_recovery_still_opens() {
    let dir = database_with_torn_log_tail();
    let fs = FaultyFs::new(0);
    let options = || Options::default().file_system(Arc::new(fs.clone()));
    fs.inject_errors(OpKind::Rename, 1);
    let crashed = Db::open(dir.path(), options());
    assert!(
        crashed.is_err(),
        "the open that cannot rename CURRENT should fail"
    );
    drop(crashed);
    fs.clear_errors();
    let db = Db::open(dir.path(), options()).unwrap_or_else(|e| {
        panic!(
            "open after a crash during recovery (logs {:?}): {e}",
            logs_in(dir.path())
        )
    });
    assert_eq!(check_recovered(&db, "after a crash during recovery"), 20);
    db.close().expect("close");
}

/// The files a crash leaves when an open creates its new log before its MANIFEST names it: the
/// torn log, then a newer empty one. Nothing was written after the tear, so it is still a tail.
#[test]
fn torn_log_followed_by_an_empty_log_still_opens() {
    let dir = database_with_torn_log_tail();
    let torn = newest_log(dir.path());
    let number: u64 = torn
        .file_stem()
        .and_then(|stem| stem.to_str())
        .and_then(|stem| stem.parse().ok())
        .expect("a log is named NNNNNN.log");
    let empty = dir.path().join(format!("{:06}.log", number + 100));
    std::fs::File::create(&empty).expect("create an empty log");
    let db = Db::open(dir.path(), Options::default())
        .unwrap_or_else(|e| panic!("open with an empty log after the torn one: {e}"));
    assert_eq!(check_recovered(&db, "torn log, then an empty one"), 20);
    db.close().expect("close");
}

// ---------------------------------------------------------------------------------------------
// Clean close.

#[test]
fn reopen_after_clean_close_keeps_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = || Options::default().memtable_size(16 * 1024);
    let db = Db::open(dir.path(), options()).expect("open");
    for i in 0..400 {
        db.write(batch(i)).expect("write");
    }
    db.close().expect("close");
    let db = Db::open(dir.path(), options()).expect("reopen");
    assert_eq!(check_recovered(&db, "after close"), 400);
    db.close().expect("close again");
}

/// `close` syncs the log, so unsynced writes survive even a power loss right after it.
#[test]
fn close_makes_unsynced_writes_survive_power_loss() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultyFs::new(0);
    let db = Db::open(dir.path(), faulty_options(&fs, Variant::Plain)).expect("open");
    for i in 0..300 {
        db.write(batch(i)).expect("write");
    }
    db.close().expect("close");
    fs.power_loss(PowerLoss::DropAllUnsynced)
        .expect("power loss");
    let db = Db::open(dir.path(), faulty_options(&fs, Variant::Plain)).expect("reopen");
    assert_eq!(check_recovered(&db, "power loss after close"), 300);
    db.close().expect("close again");
}

/// A log switched away from was sealed: if the newer log stays empty (the flush of the old one
/// failed, then the database closed without recovering), recovery reads the old log as the last one, and damage in
/// its records — all synced — must be corruption, not a torn tail dropped quietly.
#[test]
fn damage_in_a_log_switched_away_from_is_corruption_even_when_the_next_log_is_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultyFs::new(2);
    let db = Db::open(dir.path(), faulty_options(&fs, Variant::Plain)).expect("open");
    for i in 0..20 {
        db.write(batch(i)).expect("write");
    }
    // The freeze switches logs; the flush of the frozen memtable then fails, and so does the
    // recovery the close tries (no table can be created), so the logs stay the only copy.
    fs.inject_errors_matching(OpKind::Create, 1, ".sst.tmp");
    assert!(db.flush().is_err(), "the flush fails");
    drop(db);
    fs.clear_errors();
    let logs = logs_in(dir.path());
    let old = logs
        .iter()
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
        .expect("the log holding the batches")
        .clone();
    let mut bytes = std::fs::read(&old).expect("read");
    // A byte inside the last batch's record (the seal's 15-byte mark comes after it).
    let at = bytes.len() - 40;
    if let Some(b) = bytes.get_mut(at) {
        *b ^= 0x55;
    }
    std::fs::write(&old, &bytes).expect("damage");
    match Db::open(dir.path(), Options::default()) {
        Err(cairn::Error::Corruption { file, .. }) => assert_eq!(file, old),
        other => panic!(
            "expected Corruption in {}, got {:?}",
            old.display(),
            other.map(|_| ())
        ),
    }
}

/// Leaves in `dir` what a switch and a later synced write leave when the process then dies
/// before the flush: the log holding batches `0..20` ended and sealed, and a newer log whose
/// sealed mark vouches for it (if `vouch`). Returns the older log's path.
fn sealed_log_and_a_newer_one(dir: &Path, vouch: bool) -> std::path::PathBuf {
    let fs = FaultyFs::new(3);
    let db = Db::open(dir, faulty_options(&fs, Variant::Plain)).expect("open");
    for i in 0..20 {
        db.write(batch(i)).expect("write");
    }
    // The process dies: nothing more reaches the files, not even a seal on drop.
    fs.set_active(false);
    drop(db);
    let old = logs_in(dir)
        .into_iter()
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
        .expect("the log holding the batches");
    let real = cairn_fs::RealFs::new();
    let len = std::fs::metadata(&old).expect("stat").len();
    let mut ended = LogWriter::with_offset(real.open_append(&old).expect("open"), len);
    ended.end().expect("end");
    ended.seal().expect("seal");
    let number: u64 = old
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .expect("a log number");
    let newer = dir.join(format!("{:06}.log", number + 100));
    let mut newer = LogWriter::new(real.create(&newer).expect("create"));
    newer.begin().expect("begin");
    if vouch {
        newer.mark_predecessors_sealed().expect("mark");
    }
    newer.sync().expect("sync");
    old
}

/// Cuts the last `by` bytes off the file at `path`.
fn cut_short(path: &Path, by: u64) {
    let len = std::fs::metadata(path).expect("stat").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len - by))
        .expect("truncate");
}

/// A later log's sealed mark vouches for the logs before it: one of them cut short (its seal
/// and the end of its last record gone) is corruption, and the open fails instead of dropping
/// the later logs as a power loss's unsynced tail. Without the mark the same cut is a tear: the
/// open keeps the prefix before it.
#[test]
fn a_sealed_log_cut_short_is_corruption_when_a_later_log_vouches_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    sealed_log_and_a_newer_one(dir.path(), true);
    let db = Db::open(dir.path(), Options::default()).expect("whole, it opens");
    assert_eq!(check_recovered(&db, "sealed and whole"), 20);
    db.close().expect("close");

    let dir = tempfile::tempdir().expect("tempdir");
    let old = sealed_log_and_a_newer_one(dir.path(), true);
    cut_short(&old, 40);
    match Db::open(dir.path(), Options::default()) {
        Err(cairn::Error::Corruption { file, .. }) => assert_eq!(file, old),
        other => panic!(
            "expected Corruption in {}, got {:?}",
            old.display(),
            other.map(|_| ())
        ),
    }

    // A seal torn after the end mark (a disk that filled up) loses no record: whole.
    let dir = tempfile::tempdir().expect("tempdir");
    let old = sealed_log_and_a_newer_one(dir.path(), true);
    cut_short(&old, 10);
    let db = Db::open(dir.path(), Options::default()).expect("a torn seal opens");
    assert_eq!(check_recovered(&db, "torn seal"), 20);
    db.close().expect("close");

    let dir = tempfile::tempdir().expect("tempdir");
    let old = sealed_log_and_a_newer_one(dir.path(), false);
    cut_short(&old, 40);
    let db = Db::open(dir.path(), Options::default()).expect("a tear opens");
    assert_eq!(
        check_recovered(&db, "torn"),
        19,
        "the batch the cut reached is lost"
    );
    db.close().expect("close");
}

/// With every write synced, a power loss leaves logs `AbsoluteConsistency` reopens — also when
/// a freeze closed a log with no write after it and its flush failed. (This holds without the
/// seal at the switch too: the newer log then holds nothing durable, so the closed one reads as
/// the last. The seal matters when unsynced writes in the newer log reached the disk and the
/// end mark did not.)
#[test]
fn absolute_consistency_reopens_after_a_power_loss_when_every_write_was_synced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultyFs::new(5);
    let options = || {
        faulty_options(&fs, Variant::LogSwitches)
            .recovery_mode(cairn::RecoveryMode::AbsoluteConsistency)
    };
    let db = Db::open(dir.path(), options()).expect("open");
    for i in 0..300 {
        db.write_opt(batch(i), &WriteOptions { sync: true })
            .expect("synced write");
    }
    fs.inject_errors_matching(OpKind::Create, 1, ".sst.tmp");
    assert!(db.flush().is_err(), "the freeze happens, its flush fails");
    fs.clear_errors();
    fs.set_active(false);
    drop(db);
    fs.power_loss(PowerLoss::DropAllUnsynced)
        .expect("power loss");
    fs.set_active(true);
    let db = Db::open(dir.path(), options()).expect("reopen after a power loss");
    assert_eq!(check_recovered(&db, "absolute, all synced"), 300);
    db.close().expect("close");
}

/// `AbsoluteConsistency` reopens what it wrote: after a close with no writes, after writes that
/// switched memtables (each switch seals the log it closes, in this mode) and a flush, and with
/// empty logs after the last one that holds records.
#[test]
fn absolute_consistency_reopens_after_closes_switches_and_flushes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = || {
        Options::default()
            .memtable_size(4 * 1024)
            .recovery_mode(cairn::RecoveryMode::AbsoluteConsistency)
    };
    Db::open(dir.path(), options())
        .expect("create")
        .close()
        .expect("close");
    let db = Db::open(dir.path(), options()).expect("reopen an untouched database");
    for i in 0..300 {
        db.write(batch(i)).expect("write");
    }
    db.close().expect("close");
    let db = Db::open(dir.path(), options()).expect("reopen after switches");
    assert_eq!(check_recovered(&db, "after switches"), 300);
    db.flush().expect("flush");
    db.close().expect("close");
    let db = Db::open(dir.path(), options()).expect("reopen after a flush");
    assert_eq!(check_recovered(&db, "after a flush"), 300);
    db.close().expect("close");
}
