//! `purge-bench`: the relational layer and the soft-delete purger on Cairn. Per round, on fresh
//! databases: insert N rows (all soft-deleted long ago, so all eligible), read them back by id in
//! random order, then purge them all in passes, once with the `deleted_at` index (migration
//! `20260731120000`) and once without (full table scans, `CUBE_AUTO_MIGRATION=false`). Then the
//! same two purges over a sparse table: N rows of which one in `--sparse-every` is eligible and
//! the rest live, the shape where the index is meant to pay. Reports medians of rows per second,
//! the index's speed-up measured side by side in each round, and JSON.
//!
//! ```sh
//! cargo run --release -p cairn-bench --bin purge-bench -- --rows 1000000 --runs 3
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::{Db, ManualClock, Options};
use cairn_purger::{
    CUBEMASTER_LOCK, ColumnType, PurgeConfig, Purger, Row, Schema, Table, Tables, TablesOptions,
    Value,
};
use clap::Parser;
use rand::seq::SliceRandom;
use rand::{SeedableRng, rngs::SmallRng};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const TABLE: &str = "t_cube_sandbox_spec";
const START_MS: u64 = 1_767_225_600_000;

#[derive(Debug, Parser)]
#[command(about = "Rows per second of inserts, gets and purges on Cairn's tables")]
struct Args {
    /// Rows per database (all of them eligible for purging)
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Rounds; the table shows medians
    #[arg(long, default_value_t = 3)]
    runs: u64,
    /// In the sparse table, one row in this many is eligible (the rest are live)
    #[arg(long, default_value_t = 100)]
    sparse_every: u64,
    /// Directory for the databases [default: a new temporary directory]
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write every sample and the medians here as JSON
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One figure of a round.
type Metric = fn(&Round) -> f64;

#[derive(Debug, Default, serde::Serialize)]
struct Round {
    insert: f64,
    get: f64,
    /// Every row eligible: purged rows per second with the index, and without.
    purge_indexed: f64,
    purge_full_scan: f64,
    /// One row in `sparse_every` eligible: purged rows per second with the index, and without.
    sparse_indexed: f64,
    sparse_full_scan: f64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let temp = tempfile::tempdir()?;
    let base = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let mut rounds = Vec::new();
    for run in 0..args.runs {
        let round = one_round(&args, &base.join(format!("round{run}")))?;
        eprintln!("round {run}: {round:?}");
        rounds.push(round);
    }
    let median = |f: fn(&Round) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!(
        "{} rows ({} eligible in the sparse table), {} rounds, medians of rows per second:",
        args.rows,
        args.rows.div_ceil(args.sparse_every),
        args.runs
    );
    let lines: [(&str, Metric); 8] = [
        ("insert", |r| r.insert),
        ("get (by id, random order)", |r| r.get),
        ("purge, all eligible, deleted_at index", |r| r.purge_indexed),
        ("purge, all eligible, full scan", |r| r.purge_full_scan),
        ("  index speed-up (x)", |r| {
            r.purge_indexed / r.purge_full_scan
        }),
        ("purge, sparse, deleted_at index", |r| r.sparse_indexed),
        ("purge, sparse, full scan", |r| r.sparse_full_scan),
        ("  index speed-up (x)", |r| {
            r.sparse_indexed / r.sparse_full_scan
        }),
    ];
    for (name, f) in lines {
        let per_round: Vec<String> = rounds.iter().map(|r| format!("{:.1}", f(r))).collect();
        println!(
            "  {name:<40} {:>12.1}   rounds: {}",
            median(f),
            per_round.join(" ")
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&rounds)?)?;
    }
    Ok(())
}

fn one_round(args: &Args, dir: &std::path::Path) -> Result<Round> {
    let mut round = Round::default();
    let (tables, _clock) = open(&dir.join("indexed"), true)?;
    let t = tables.table(TABLE)?;
    let start = Instant::now();
    let ids = fill(&t, args.rows, 1)?;
    round.insert = rate(args.rows, start.elapsed());

    let mut order = ids;
    order.shuffle(&mut SmallRng::seed_from_u64(1));
    let unscoped = t.unscoped();
    let start = Instant::now();
    for &id in &order {
        if unscoped.get(id)?.is_none() {
            return Err(format!("row {id} missing").into());
        }
    }
    round.get = rate(args.rows, start.elapsed());

    round.purge_indexed = purge_all(&tables, args.rows)?;
    drop((t, unscoped, tables));

    let (tables, _clock) = open(&dir.join("full_scan"), false)?;
    fill(&tables.table(TABLE)?, args.rows, 1)?;
    round.purge_full_scan = purge_all(&tables, args.rows)?;
    drop(tables);

    let eligible = args.rows.div_ceil(args.sparse_every);
    for (name, indexed) in [("sparse_indexed", true), ("sparse_full_scan", false)] {
        let (tables, _clock) = open(&dir.join(name), indexed)?;
        fill(&tables.table(TABLE)?, args.rows, args.sparse_every)?;
        let rate = purge_all(&tables, eligible)?;
        if indexed {
            round.sparse_indexed = rate;
        } else {
            round.sparse_full_scan = rate;
        }
    }
    std::fs::remove_dir_all(dir)?;
    Ok(round)
}

/// A database on a manual clock, with the table; `indexed` applies the migration that gives it
/// the `deleted_at` index.
fn open(dir: &std::path::Path, indexed: bool) -> Result<(Tables, Arc<ManualClock>)> {
    std::fs::create_dir_all(dir)?;
    let clock = Arc::new(ManualClock::new(START_MS));
    let db = Db::open(dir, Options::default().clock(clock.clone()))?;
    let tables = Tables::open_with(
        Arc::new(db),
        &TablesOptions::default().auto_migration(indexed),
    )?;
    tables.create_table(
        Schema::new(TABLE)
            .column("name", ColumnType::Text)
            .nullable("spec", ColumnType::Text)
            .unique("uk_name", &["name"])
            .soft_delete(),
    )?;
    Ok((tables, clock))
}

/// `rows` rows, one in `every` soft-deleted 30 days before the clock's start (eligible), the
/// rest live.
fn fill(t: &Table, rows: u64, every: u64) -> Result<Vec<u64>> {
    let deleted_at = START_MS - 30 * 24 * 3600 * 1000;
    (0..rows)
        .map(|i| {
            let at = i.is_multiple_of(every).then_some(deleted_at + i % 1000);
            let row = Row::new()
                .set("name", format!("sandbox-{i:010}"))
                .set(
                    "spec",
                    format!("{{\"cpu\": {}, \"memory\": {}}}", i % 16, i % 64),
                )
                .set("deleted_at", at.map_or(Value::Null, Value::Timestamp));
            Ok(t.insert(row)?)
        })
        .collect()
}

/// Passes until one purges nothing; rows purged per second. Fails unless exactly `rows` went.
fn purge_all(tables: &Tables, rows: u64) -> Result<f64> {
    let config = PurgeConfig {
        enable: true,
        ..PurgeConfig::default()
    };
    let purger = Purger::new(
        tables.clone(),
        CUBEMASTER_LOCK,
        || vec![TABLE.to_owned()],
        config,
    );
    let start = Instant::now();
    let mut total = 0;
    loop {
        let report = purger.run_pass()?;
        if report.purged() == 0 {
            break;
        }
        total += report.purged();
    }
    let elapsed = start.elapsed();
    if total != rows {
        return Err(format!("purged {total} of {rows} rows").into());
    }
    Ok(rate(rows, elapsed))
}

#[allow(clippy::cast_precision_loss, reason = "a rate, not an exact count")]
fn rate(n: u64, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
}
