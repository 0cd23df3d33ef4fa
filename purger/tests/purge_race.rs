//! The resurrection race: while passes purge 20,000 eligible rows, threads resurrect rows
//! (upsert) and soft-delete them again, aiming at the rows the purger is about to select.
//! Other writes race too: updates that leave `deleted_at` alone (the row stays eligible) and
//! hard deletes. Afterwards no row a thread resurrected or soft-deleted again is gone (after that
//! write it was never eligible again, so only a purge that skipped its re-check could have taken
//! it), every other eligible row is gone, the rows the passes reported purged are exactly the
//! rows gone but for the threads' hard deletes, and every index agrees with the rows both ways.
//!
//! Runs `CAIRN_SEEDS` seeds (default 2: each takes seconds in a debug build; `.ci/run` runs more
//! in release); `CAIRN_SEED=n` replays one. A failure names its seed.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

mod common;

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cairn_purger::{PurgeConfig, Purger, Row, Table, Tables, Value};
use common::{Fixture, HOUR, create_cube_tables, enabled, ms, seeds};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const SPEC: &str = "t_cube_sandbox_spec";
const ROWS: u64 = 20_000;
const WORKERS: u64 = 2;

#[test]
fn resurrected_rows_survive_racing_purges() {
    for seed in seeds(2) {
        eprintln!("resurrection race: seed {seed} (replay with CAIRN_SEED={seed})");
        run(seed);
    }
}

/// What the threads did to the original rows: ids they resurrected or soft-deleted again (so
/// never purgeable after), and ids they hard-deleted themselves.
#[derive(Default)]
struct Touched {
    written: Mutex<Vec<u64>>,
    hard_deleted: Mutex<Vec<u64>>,
    /// Writes attempted, and those that lost every retry to a racing transaction.
    attempts: AtomicU64,
    lost: AtomicU64,
}

fn run(seed: u64) {
    let f = Fixture::new();
    create_cube_tables(&f.tables);
    let t = f.tables.table(SPEC).expect("table");
    // Row i is soft-deleted at base + i: the purger takes them in id order.
    let base = f.now() - ms(2 * HOUR) - ROWS;
    let ids: Vec<u64> = (0..ROWS)
        .map(|i| {
            let row = Row::new()
                .set("name", format!("row{i}"))
                .set("deleted_at", Value::Timestamp(base + i));
            t.insert(row).expect("insert")
        })
        .collect();
    let first = ids[0];
    let touched = Touched::default();
    let frontier = AtomicU64::new(first);
    let done = AtomicBool::new(false);
    let purged_total = AtomicU64::new(0);
    let purger = Purger::new(
        f.tables.clone(),
        "race",
        || vec![SPEC.to_owned()],
        enabled(),
    );

    std::thread::scope(|s| {
        for worker in 0..WORKERS {
            let (t, touched, frontier, done) = (&t, &touched, &frontier, &done);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 1000 + worker);
                while !done.load(Ordering::SeqCst) {
                    race_one(&mut rng, t, first, frontier, touched, seed);
                }
            });
        }
        // Passes until one finds nothing, racing the threads the whole time.
        loop {
            let report = purger.run_pass().expect("pass");
            purged_total.fetch_add(report.purged(), Ordering::SeqCst);
            if report.tables.iter().all(|t| t.selected == 0) {
                break;
            }
        }
        done.store(true, Ordering::SeqCst);
    });
    // One more pass with nobody racing: whatever is still eligible goes now.
    let last = purger.run_pass().expect("last pass");
    purged_total.fetch_add(last.purged(), Ordering::SeqCst);

    check(seed, &t, &ids, touched, purged_total.load(Ordering::SeqCst));
    check_indexes(seed, &f.tables, &t);
}

/// One move of a racing thread, at a row near the purge frontier: resurrect it by upsert, or
/// soft-delete it again. A write that lands on the original row is recorded.
fn race_one(
    rng: &mut SmallRng,
    t: &Table,
    first: u64,
    frontier: &AtomicU64,
    touched: &Touched,
    seed: u64,
) {
    let lo = frontier.load(Ordering::SeqCst);
    let id = lo + rng.random_range(0..1_500);
    let Some(i) = id.checked_sub(first).filter(|i| *i < ROWS) else {
        return;
    };
    let written = || touched.written.lock().expect("touched");
    touched.attempts.fetch_add(1, Ordering::Relaxed);
    let lost_race = |e: &cairn_purger::Error| {
        let lost = matches!(
            e,
            cairn_purger::Error::Engine(cairn::Error::Conflict { .. })
        );
        touched.lost.fetch_add(u64::from(lost), Ordering::Relaxed);
        lost
    };
    match rng.random_range(0..100) {
        0..50 => {
            let row = Row::new()
                .set("name", format!("row{i}"))
                .set("note", "back");
            let upserted = match t.upsert(row) {
                Ok(upserted) => upserted,
                // Lost every retry to other writers: nothing was written, which is allowed
                // (and counted: it must stay rare).
                Err(e) if lost_race(&e) => return,
                Err(e) => panic!("seed {seed}: upsert: {e}"),
            };
            if upserted == id {
                written().push(id);
            } else {
                // The original was purged before this upsert: it inserted a fresh row.
                frontier.fetch_max(id + 1, Ordering::SeqCst);
            }
        }
        50..80 => match t.soft_delete(id) {
            Ok(true) => written().push(id),
            Ok(false) => {}
            Err(e) if lost_race(&e) => {}
            Err(e) => panic!("seed {seed}: soft delete: {e}"),
        },
        // An update that leaves deleted_at alone: the row stays eligible and may go.
        80..97 => {
            let note = Row::new().set("note", format!("edited by {seed}"));
            match t.unscoped().update(id, note) {
                Ok(_) => {}
                Err(e) if lost_race(&e) => {}
                Err(e) => panic!("seed {seed}: update: {e}"),
            }
        }
        _ => match t.unscoped().hard_delete(id) {
            Ok(true) => touched.hard_deleted.lock().expect("touched").push(id),
            Ok(false) => {}
            Err(e) if lost_race(&e) => {}
            Err(e) => panic!("seed {seed}: hard delete: {e}"),
        },
    }
}

fn check(seed: u64, t: &Table, ids: &[u64], touched: Touched, purged: u64) {
    let all = t.unscoped();
    let written: HashSet<u64> = touched
        .written
        .into_inner()
        .expect("touched")
        .into_iter()
        .collect();
    let hard_deleted: HashSet<u64> = touched
        .hard_deleted
        .into_inner()
        .expect("touched")
        .into_iter()
        .collect();
    let mut gone_by_purge = 0;
    for &id in ids {
        let exists = all.get(id).expect("get").is_some();
        if hard_deleted.contains(&id) {
            assert!(
                !exists,
                "seed {seed}: row {id} was hard-deleted and is back"
            );
        } else if written.contains(&id) {
            assert!(
                exists,
                "seed {seed}: row {id} was written by a thread and then purged"
            );
        } else {
            assert!(
                !exists,
                "seed {seed}: untouched eligible row {id} was never purged"
            );
            gone_by_purge += 1;
        }
    }
    assert_eq!(
        purged, gone_by_purge,
        "seed {seed}: the passes reported {purged} purged, {gone_by_purge} are gone"
    );
    assert!(
        !written.is_empty(),
        "seed {seed}: the threads never got a write in"
    );
    // A write that loses every retry writes nothing and is allowed, but it must stay rare, or
    // the race would check little (spurious conflicts, or a purger that starves writers).
    let (attempts, lost) = (touched.attempts.into_inner(), touched.lost.into_inner());
    assert!(
        lost * 1_000 <= attempts,
        "seed {seed}: {lost} of {attempts} writes lost every retry to a racing transaction"
    );
    eprintln!(
        "seed {seed}: {gone_by_purge} purged, {} rows written to by racing threads survived, {} \
         hard-deleted by them",
        written.len(),
        hard_deleted.len()
    );
}

/// Every row is found through its unique key, and the `deleted_at` index agrees with a scan.
fn check_indexes(seed: u64, tables: &Tables, t: &Table) {
    let checked = t
        .check()
        .unwrap_or_else(|e| panic!("seed {seed}: rows and indexes disagree: {e}"));
    assert!(checked > 0);
    let all = t.unscoped();
    let mut rows = 0;
    for row in all.scan().expect("scan") {
        let row = row.expect("row");
        let name = row.get("name").cloned().expect("name");
        let found = all
            .find_unique("uk_t_cube_sandbox_spec_name", &[name])
            .expect("find")
            .map(|r| r.id());
        assert_eq!(found, Some(row.id()), "seed {seed}: unique index disagrees");
        rows += 1;
    }
    assert!(rows > 0);
    let dry = Purger::new(
        tables.clone(),
        "race",
        || vec![SPEC.to_owned()],
        PurgeConfig {
            dry_run: true,
            ..enabled()
        },
    );
    let report = dry.run_pass().expect("dry run");
    assert_eq!(
        report.tables[0].selected, 0,
        "seed {seed}: the deleted_at index has stale entries"
    );
}
