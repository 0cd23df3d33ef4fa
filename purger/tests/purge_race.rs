//! The resurrection race: while passes purge 20,000 eligible rows, threads resurrect rows
//! (upsert) and soft-delete them again, aiming at the rows the purger is about to select.
//! Afterwards no row a thread wrote to is gone (after that write it was never eligible
//! again, so only a purge that skipped its re-check could have taken it), every untouched
//! eligible row is gone, the rows the passes reported purged are exactly the rows gone, and the
//! indexes agree with the rows.
//!
//! Runs `CAIRN_SEEDS` seeds (default 2: each takes seconds in a debug build; `.ci/run` runs more
//! in release); `CAIRN_SEED=n` replays one. A failure names its seed.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

mod common;

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

/// What the threads did to the original rows: ids they wrote to (so never purgeable after).
#[derive(Default)]
struct Touched(Mutex<Vec<u64>>);

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

    let touched = touched.0.into_inner().expect("touched");
    check(
        seed,
        &t,
        &ids,
        &touched,
        purged_total.load(Ordering::SeqCst),
    );
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
    if rng.random_bool(0.6) {
        let upserted = t
            .upsert(
                Row::new()
                    .set("name", format!("row{i}"))
                    .set("note", "back"),
            )
            .unwrap_or_else(|e| panic!("seed {seed}: upsert: {e}"));
        if upserted == id {
            touched.0.lock().expect("touched").push(id);
        } else {
            // The original was purged before this upsert: it inserted a fresh row.
            frontier.fetch_max(id + 1, Ordering::SeqCst);
        }
    } else {
        match t.soft_delete(id) {
            Ok(true) => touched.0.lock().expect("touched").push(id),
            Ok(false) => {}
            Err(e) => panic!("seed {seed}: soft delete: {e}"),
        }
    }
}

fn check(seed: u64, t: &Table, ids: &[u64], touched: &[u64], purged: u64) {
    let all = t.unscoped();
    let mut gone = 0;
    let touched: std::collections::HashSet<u64> = touched.iter().copied().collect();
    for &id in ids {
        let exists = all.get(id).expect("get").is_some();
        if touched.contains(&id) {
            assert!(
                exists,
                "seed {seed}: row {id} was written by a thread and then purged"
            );
        } else {
            assert!(
                !exists,
                "seed {seed}: untouched eligible row {id} was never purged"
            );
        }
        gone += u64::from(!exists);
    }
    assert_eq!(
        purged, gone,
        "seed {seed}: the passes reported {purged} purged, {gone} are gone"
    );
    assert!(
        !touched.is_empty(),
        "seed {seed}: the threads never got a write in"
    );
    eprintln!(
        "seed {seed}: {gone} purged, {} rows written to by racing threads survived",
        touched.len()
    );
}

/// Every row is found through its unique key, and the `deleted_at` index agrees with a scan.
fn check_indexes(seed: u64, tables: &Tables, t: &Table) {
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
