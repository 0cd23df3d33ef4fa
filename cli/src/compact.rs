//! `cairn compact DIR [--cf NAME] [--from K --to K]` and `cairn flush DIR` (ldb's `compact`):
//! open the database for writing (the service must be stopped), flush or compact, and report
//! each family's tables before and after. Progress goes to stderr when it is a terminal.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use cairn::Db;
use clap::Args;
use serde::Serialize;

use crate::db_arg::DbArg;
use crate::kv::human_ms;
use crate::output::{self, key_range, print_json, print_table};

#[derive(Debug, Args)]
pub struct CompactArgs {
    #[command(flatten)]
    db: DbArg,
    /// Only this column family (default: every one).
    #[arg(long)]
    cf: Option<String>,
    /// From this key on.
    #[arg(long)]
    from: Option<String>,
    /// Before this key.
    #[arg(long)]
    to: Option<String>,
    /// `--from` and `--to` are hex.
    #[arg(long)]
    hex: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct FlushArgs {
    #[command(flatten)]
    db: DbArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One family's tables before and after.
#[derive(Debug, Serialize)]
struct FamilyResult {
    column_family: String,
    level0_tables_before: usize,
    level0_tables_after: usize,
    tables_before: usize,
    tables_after: usize,
    bytes_before: u64,
    bytes_after: u64,
}

#[derive(Debug, Serialize)]
struct Outcome {
    /// Entries the log held (written since the last flush), now in tables.
    log_entries_flushed: u64,
    column_families: Vec<FamilyResult>,
    elapsed_ms: u64,
    elapsed: String,
}

pub fn compact(args: &CompactArgs) -> i32 {
    crate::init_logging(false);
    let range = match key_range(args.from.as_deref(), args.to.as_deref(), args.hex) {
        Ok(r) => r,
        Err(e) => return crate::bad_args(&e),
    };
    let found = match families(args.db.path(), args.cf.as_deref()) {
        Ok(n) => n,
        Err(code) => return code,
    };
    run(
        args.db.path(),
        &found,
        args.json,
        "compact",
        |db, name, bar| {
            bar.set_message(format!("compacting {name}"));
            db.column_family(name)?
                .compact_range::<Vec<u8>>(range.clone())
        },
    )
}

pub fn flush(args: &FlushArgs) -> i32 {
    crate::init_logging(false);
    let found = match families(args.db.path(), None) {
        Ok(n) => n,
        Err(code) => return code,
    };
    let mut flushed = false;
    run(args.db.path(), &found, args.json, "flush", |db, _, bar| {
        if !flushed {
            bar.set_message("flushing the memtables");
            flushed = true;
            db.flush()?;
        }
        Ok(())
    })
}

/// What the command found, read-only (so a refused name changes nothing): the families to
/// work on with their tables, and the entries the log holds.
struct Found {
    families: Vec<(String, (usize, usize, u64))>,
    log_entries: u64,
}

fn families(dir: &std::path::Path, only: Option<&str>) -> Result<Found, i32> {
    let db = output::open_read_only(dir)?;
    let names = db.list_column_families();
    let names = match only {
        None => names,
        Some(cf) if names.iter().any(|n| n == cf) => vec![cf.to_owned()],
        Some(cf) => {
            return Err(crate::bad_args(&format!(
                "column family {cf:?} does not exist (the database has {})",
                names.join(", ")
            )));
        }
    };
    Ok(Found {
        families: names
            .into_iter()
            .map(|n| {
                let t = tables(&db, &n);
                (n, t)
            })
            .collect(),
        log_entries: db.stats().memtable_entries,
    })
}

fn run(
    dir: &std::path::Path,
    found: &Found,
    json: bool,
    what: &str,
    mut each: impl FnMut(&Db, &str, &indicatif::ProgressBar) -> cairn::Result<()>,
) -> i32 {
    let started = Instant::now();
    let db = match output::open_for_writing(dir) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let bar = crate::progress::bar_if(
        std::io::stderr().is_terminal(),
        u64::try_from(found.families.len()).unwrap_or(u64::MAX),
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut results = Vec::new();
    for (name, before) in &found.families {
        if let Err(e) = each(&db, name, &bar) {
            bar.finish_and_clear();
            let _ = db.close();
            return output::engine_failed(what, &e);
        }
        let after = tables(&db, name);
        bar.inc(1);
        results.push(FamilyResult {
            column_family: name.clone(),
            level0_tables_before: before.0,
            level0_tables_after: after.0,
            tables_before: before.1,
            tables_after: after.1,
            bytes_before: before.2,
            bytes_after: after.2,
        });
    }
    bar.finish_and_clear();
    if let Err(e) = db.close() {
        return output::failed(&format!("{what} (closing failed)"), &e);
    }
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let outcome = Outcome {
        log_entries_flushed: found.log_entries,
        column_families: results,
        elapsed_ms,
        elapsed: human_ms(elapsed_ms),
    };
    if json {
        print_json(&outcome);
    } else {
        let rows: Vec<Vec<String>> = outcome
            .column_families
            .iter()
            .map(|r| {
                vec![
                    r.column_family.clone(),
                    format!("{} -> {}", r.level0_tables_before, r.level0_tables_after),
                    format!("{} -> {}", r.tables_before, r.tables_after),
                    format!("{} -> {}", r.bytes_before, r.bytes_after),
                ]
            })
            .collect();
        print_table(&["COLUMN FAMILY", "L0 TABLES", "TABLES", "BYTES"], &rows);
        println!("{what} done in {}", outcome.elapsed);
    }
    0
}

/// Level-0 tables, all tables and their bytes; zeros if the family is gone.
fn tables(db: &Db, name: &str) -> (usize, usize, u64) {
    let Ok(list) = db.column_family(name).and_then(|cf| cf.tables()) else {
        return (0, 0, 0);
    };
    (
        list.iter().filter(|t| t.level == 0).count(),
        list.len(),
        list.iter().map(|t| t.bytes).sum(),
    )
}
