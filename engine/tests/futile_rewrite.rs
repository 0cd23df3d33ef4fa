//! The guard against rewriting a bottom table forever (`FileInfo::futile`) must never keep what
//! the rules let go: each test, from the hostile reviews of the guard, sets up a table whose
//! oldest tombstone by seqno and oldest by time differ, and checks that the delete persistence
//! deadline, the grace end, a snapshot released mid-rewrite and TTL expiries still act on time
//! (a-d), and that family-TTL expiries do not set off a rewrite each (e).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use cairn::{
    CfOptions, ColumnFamily, CompactionFilter, Db, Decision, Kind, Location, ManualClock, Options,
};

const START: u64 = 1_700_000_000_000;

fn open(dir: &tempfile::TempDir, clock: &Arc<ManualClock>, options: Options) -> Db {
    Db::open(dir.path(), options.clock(clock.clone())).expect("open")
}

/// A database opened with `options` on a `ManualClock` at `START`, and a family `graced` whose
/// tombstones have a 10 s grace.
fn graced(options: Options) -> (tempfile::TempDir, Arc<ManualClock>, Db, ColumnFamily) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock, options);
    let cf = db
        .create_column_family(
            "graced",
            CfOptions::default().tombstone_grace(Duration::from_secs(10)),
        )
        .expect("cf");
    (dir, clock, db, cf)
}

/// Options with a 2 s delete persistence deadline.
fn with_deadline() -> Options {
    Options::default().delete_persistence_deadline(Duration::from_secs(2))
}

fn in_tables(cf: &ColumnFamily, key: &str) -> Vec<(u64, Kind, u64, Option<u64>)> {
    cf.audit_key(key)
        .expect("audit")
        .into_iter()
        .filter(|t| matches!(t.location, Location::Table { .. }))
        .filter_map(|t| t.kind.map(|k| (t.seqno, k, t.write_time, t.gone_by)))
        .collect()
}

/// Clock steps back 1 s (NTP). Grace 10 s, deadline 2 s. The automatic rewrite at START+9000
/// drops nothing and is marked futile until START+19000. Tombstone `a` (unpinned) has its grace
/// end at START+10000 and is promised gone by START+12000; a put `c` expires at START+10000.
#[test]
fn review_a_clock_step_futile_mark_outlives_the_deadline_and_a_ttl() {
    let (_dir, clock, db, cf) = graced(with_deadline());
    cf.put("a", "v").expect("put");
    cf.put("b", "v").expect("put");
    cf.put_with_ttl("c", "v", Duration::from_secs(10))
        .expect("put c");
    cf.delete("a").expect("delete a");
    let snapshot = db.snapshot();
    clock.set(START - 1_000);
    cf.delete("b").expect("delete b");
    clock.set(START + 9_000);
    cf.compact_range::<&str>(..).expect("compact");
    db.wait_for_background_work().expect("settle");
    let compactions = db.stats().compactions;
    clock.set(START + 12_500);
    db.wait_for_background_work().expect("settle");
    let a = in_tables(&cf, "a");
    let c = in_tables(&cf, "c");
    eprintln!(
        "now={} compactions before/after={}/{} a={a:?} c={c:?}",
        START + 12_500,
        compactions,
        db.stats().compactions
    );
    drop(snapshot);
    assert!(
        a.is_empty() && c.is_empty(),
        "past a's grace + deadline (and c's expiry): a={a:?} c={c:?}"
    );
}

/// No clock step: a put with a TTL turned into a tombstone (seqno of the put, time of its
/// expiry) inverts seqno and time order against a later delete. Grace 10 s, deadline 2 s.
#[test]
fn review_b_ttl_converted_tombstone_misses_the_deadline_without_any_clock_step() {
    let (_dir, clock, db, cf) = graced(with_deadline());
    cf.put("k", "old").expect("put");
    let snap_a = db.snapshot();
    cf.put_with_ttl("k", "new", Duration::from_secs(5))
        .expect("put ttl");
    cf.put("m", "v").expect("put m");
    let snap_b = db.snapshot();
    clock.set(START + 4_000);
    cf.delete("m").expect("delete m");
    clock.set(START + 5_000);
    cf.compact_range::<&str>(..).expect("compact");
    eprintln!(
        "after manual: k={:?} m={:?}",
        in_tables(&cf, "k"),
        in_tables(&cf, "m")
    );
    drop(snap_a);
    db.wait_for_background_work().expect("settle");
    clock.set(START + 14_000);
    db.wait_for_background_work().expect("settle");
    eprintln!(
        "at +14000: k={:?} m={:?} stats={:?}",
        in_tables(&cf, "k"),
        in_tables(&cf, "m"),
        db.stats().dropped
    );
    clock.set(START + 17_500);
    db.wait_for_background_work().expect("settle");
    let k = in_tables(&cf, "k");
    eprintln!("at +17500: k={k:?} m={:?}", in_tables(&cf, "m"));
    drop(snap_b);
    assert!(
        k.is_empty(),
        "k's tombstone (unpinned, grace over at +15000, promised gone by +17000) is still there: {k:?}"
    );
}

#[derive(Debug)]
struct Gate {
    armed: AtomicBool,
    entered: Mutex<mpsc::Sender<()>>,
    go: Mutex<mpsc::Receiver<()>>,
}

impl CompactionFilter for Gate {
    fn filter(&self, _cf: &str, key: &[u8], _value: &[u8]) -> Decision {
        if key == b"z" && self.armed.swap(false, Ordering::SeqCst) {
            let _ = self.entered.lock().expect("gate").send(());
            let _ = self
                .go
                .lock()
                .expect("gate")
                .recv_timeout(Duration::from_secs(10));
        }
        Decision::Keep
    }
}

/// The snapshot is released while the futile rewrite runs: the guard records the oldest
/// snapshot at install (none), not the one the job used, so `b` (unpinned by the release, grace
/// long over) waits for the grace to pass again.
#[test]
fn review_c_snapshot_released_during_the_futile_job() {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let gate = Arc::new(Gate {
        armed: AtomicBool::new(false),
        entered: Mutex::new(entered_tx),
        go: Mutex::new(go_rx),
    });
    let (_dir, clock, db, cf) = graced(with_deadline().compaction_filter(gate.clone()));
    cf.put("a", "v").expect("put");
    cf.put("b", "v").expect("put");
    cf.delete("a").expect("delete a");
    let snapshot = db.snapshot();
    clock.set(START - 1_000);
    cf.delete("b").expect("delete b");
    cf.put("z", "top stripe").expect("put z");
    clock.set(START + 8_000); // b's grace not over yet: no automatic pick
    cf.compact_range::<&str>(..).expect("compact");
    db.wait_for_background_work().expect("settle");
    gate.armed.store(true, Ordering::SeqCst);
    clock.set(START + 9_000); // b's grace over: the picker rewrites the table
    entered_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the automatic rewrite ran the filter");
    drop(snapshot); // b unpinned now, grace over since START+9000
    go_tx.send(()).expect("go");
    db.wait_for_background_work().expect("settle");
    let b_now = in_tables(&cf, "b");
    clock.set(START + 11_500); // release + deadline passed
    db.wait_for_background_work().expect("settle");
    let b = in_tables(&cf, "b");
    eprintln!("right after release: b={b_now:?}; at +11500: b={b:?}");
    assert!(
        b.is_empty(),
        "b: unpinned and out of grace since the release, past the deadline: {b:?}"
    );
}

/// Range-tombstone variant of the inversion: X is a range tombstone (unpinned, in its grace
/// until `START + 10_000`), Y a point tombstone pinned past its grace (clock step back).
/// `next_change` must carry X's grace end from `surviving_range_tombstones`.
#[test]
fn review_d_range_tombstone_grace_end_lifts_the_guard() {
    let (_dir, clock, db, cf) = graced(with_deadline());
    cf.put("r", "v").expect("put");
    cf.put("b", "v").expect("put");
    cf.delete_range("r", "s").expect("delete_range");
    let snapshot = db.snapshot();
    clock.set(START - 1_000);
    cf.delete("b").expect("delete b");
    clock.set(START + 9_000);
    cf.compact_range::<&str>(..).expect("compact");
    std::thread::sleep(Duration::from_millis(300));
    let before = db.stats().compactions;
    std::thread::sleep(Duration::from_millis(500));
    let rewrites = db.stats().compactions - before;
    db.wait_for_background_work().expect("settle");
    let r_before = in_tables(&cf, "r");
    clock.set(START + 10_500);
    db.wait_for_background_work().expect("settle");
    let r = in_tables(&cf, "r");
    let b = in_tables(&cf, "b");
    eprintln!("rewrites in 500ms={rewrites} r before={r_before:?} r at +10500={r:?} b={b:?}");
    drop(snapshot);
    assert!(rewrites <= 2, "{rewrites} rewrites");
    assert!(
        !r_before.is_empty(),
        "the range tombstone is in its grace at +9000"
    );
    assert!(r.is_empty(), "range tombstone past grace, unpinned: {r:?}");
}

/// Churn: an inverted bottom table (a in grace until `START + 102_000`, b pinned past its grace)
/// whose puts expire one after another under the family TTL. Rewrites made as each expires
/// are counted: with expiries lifting the guard, each cost a rewrite that dropped the expired
/// puts and another that dropped nothing. Without the inversion, family-TTL expiry at the
/// bottom triggers nothing (`pick_ttl` counts only cell expiry there).
fn churn(invert: bool) -> u64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock, Options::default());
    let cf = db
        .create_column_family(
            "graced",
            CfOptions::default()
                .tombstone_grace(Duration::from_secs(100))
                .ttl(Duration::from_secs(20)),
        )
        .expect("cf");
    cf.put("a", "v").expect("put");
    cf.put("b", "v").expect("put");
    for i in 0..200u64 {
        clock.set(START + i * 10);
        cf.put(format!("p{i:03}"), "v").expect("put p");
    }
    clock.set(START + 2_000);
    cf.delete("a").expect("delete a");
    let snapshot = invert.then(|| db.snapshot());
    clock.set(START - 90_000);
    cf.delete("b").expect("delete b");
    clock.set(START + 15_000);
    cf.compact_range::<&str>(..).expect("compact");
    db.wait_for_background_work().expect("settle");
    let before = db.stats().compactions;
    for step in 0..100u64 {
        clock.set(START + 20_000 + step * 20);
        db.wait_for_background_work().expect("settle");
    }
    let rewrites = db.stats().compactions - before;
    drop(snapshot);
    rewrites
}

#[test]
fn review_e_family_ttl_expiries_lift_the_guard_one_by_one() {
    let inverted = churn(true);
    let plain = churn(false);
    eprintln!("rewrites over 100 clock steps: inverted={inverted} plain={plain}");
    assert!(
        inverted <= 4,
        "an inverted table is rewritten at every family-TTL expiry: {inverted} rewrites (plain: {plain})"
    );
}

/// A wall clock may step back (NTP), so a later tombstone can carry an earlier time. Then a
/// bottom table's oldest-by-seqno tombstone (unpinned, in its grace) and its oldest-by-time one
/// (past its grace, pinned by a snapshot) differ: rewriting the table drops neither, and the
/// picker must not choose it again and again.
#[test]
fn a_clock_stepping_back_does_not_make_compaction_rewrite_a_table_forever() {
    let (_dir, clock, db, cf) = graced(Options::default());
    cf.put("a", "v").expect("put");
    cf.put("b", "v").expect("put");
    cf.delete("a").expect("delete a");
    let snapshot = db.snapshot();
    clock.set(START - 60_000);
    cf.delete("b")
        .expect("delete b, a minute earlier by the clock");
    // Now `b` (older by the clock) is past its grace but pinned; `a` is unpinned but in its
    // grace for one more second.
    clock.set(START + 9_000);
    cf.compact_range::<&str>(..).expect("compact");
    // Counted without waiting for background work: with the loop it never ends.
    std::thread::sleep(Duration::from_millis(300));
    let before = db.stats().compactions;
    std::thread::sleep(Duration::from_millis(500));
    let rewrites = db.stats().compactions - before;
    assert!(
        rewrites <= 2,
        "{rewrites} compactions in half a second with nothing to drop"
    );
    db.wait_for_background_work().expect("settle");
    let left = |key: &str| -> Vec<Kind> {
        cf.audit_key(key)
            .expect("audit")
            .into_iter()
            .filter_map(|t| t.kind)
            .collect()
    };
    // The clock alone reaching the end of `a`'s grace lifts the guard: `a` is not pinned.
    clock.set(START + 10_000);
    db.wait_for_background_work().expect("settle");
    assert_eq!(left("a"), Vec::<Kind>::new(), "a goes when its grace ends");
    assert_eq!(left("b"), vec![Kind::Delete, Kind::Put], "b stays pinned");
    // Releasing the snapshot lifts it for `b`.
    drop(snapshot);
    db.wait_for_background_work().expect("settle");
    assert_eq!(left("b"), Vec::<Kind>::new(), "b goes with its snapshot");
}

/// A wall clock that jumps back and forth (a badly slewing NTP): while flapping, every other
/// read is `late`.
#[derive(Debug)]
struct FlappingClock {
    early: u64,
    late: u64,
    flapping: AtomicBool,
    reads: std::sync::atomic::AtomicU64,
}

impl cairn::Clock for FlappingClock {
    fn now_ms(&self) -> u64 {
        if !self.flapping.load(Ordering::SeqCst) {
            return self.early;
        }
        if self.reads.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
            self.late
        } else {
            self.early
        }
    }
}

/// The TTL picker fires on a bottom table holding an expired cell, and does not heed the
/// futile mark (the rewrite drops the cell). A job that read the clock again after the pick
/// could read it stepped back, find the cell live, rewrite the table unchanged and leave the
/// same pick for the next round, as long as the clock flaps. The job judges at the pick's time.
#[test]
fn a_ttl_pick_is_judged_at_the_time_it_was_picked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(FlappingClock {
        early: START,
        late: START + 20_000,
        flapping: AtomicBool::new(false),
        reads: std::sync::atomic::AtomicU64::new(0),
    });
    let db = Db::open(dir.path(), Options::default().clock(clock.clone())).expect("open");
    db.put_with_ttl("k", "v", Duration::from_secs(10))
        .expect("put");
    db.put("keep", "v").expect("put");
    db.compact_range::<&str>(..).expect("compact");
    db.wait_for_background_work().expect("settle");
    assert_eq!(db.get("k").expect("get").as_deref(), Some(&b"v"[..]));
    clock.flapping.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    let before = db.stats().compactions;
    std::thread::sleep(Duration::from_millis(500));
    let rewrites = db.stats().compactions - before;
    clock.flapping.store(false, Ordering::SeqCst);
    assert!(
        rewrites <= 2,
        "{rewrites} compactions in half a second for one expired cell"
    );
    db.wait_for_background_work().expect("settle");
    let left: Vec<Kind> = db
        .audit_key("k")
        .expect("audit")
        .into_iter()
        .filter_map(|t| t.kind)
        .collect();
    assert_eq!(left, Vec::<Kind>::new(), "the expired cell is gone");
    assert_eq!(db.get("keep").expect("get").as_deref(), Some(&b"v"[..]));
}
