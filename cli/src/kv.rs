//! `cairn get|put|delete|delete-range|scan|stats`: ad hoc reads and writes of a database, the
//! `ldb get/put/scan` of Cairn. `get`, `scan` and `stats` open it read-only; the writes open
//! it for writing (so the service must be stopped), apply one write, and close, which syncs
//! the log: a write the command reports done is durable.

use std::path::PathBuf;
use std::time::Duration;

use cairn::{ColumnFamily, Db};
use clap::Args;
use serde::Serialize;

use crate::output::{
    self, LEVEL_HEADER, LevelSums, NO, arg_bytes, arg_pair, bytes_text, key_range, print_json,
    print_table,
};

/// Where and how keys are named: the directory, the family, text or hex.
#[derive(Debug, Args)]
pub struct Target {
    /// The database directory.
    dir: PathBuf,
    /// The column family.
    #[arg(long, default_value = "default")]
    cf: String,
    /// Keys and values on the command line are hex.
    #[arg(long)]
    hex: bool,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct PutArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
    /// The value.
    value: String,
    /// The cell's time to live (`20s`, `10m`, `1h`).
    #[arg(long, value_parser = output::parse_duration)]
    ttl: Option<Duration>,
    /// Create the database if the directory holds none.
    #[arg(long)]
    create: bool,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
}

#[derive(Debug, Args)]
pub struct DeleteRangeArgs {
    #[command(flatten)]
    target: Target,
    /// The first key deleted.
    start: String,
    /// The first key kept (the range is `[START, END)`).
    end: String,
}

#[derive(Debug, Args)]
pub struct ScanArgs {
    #[command(flatten)]
    target: Target,
    /// From this key on.
    #[arg(long)]
    from: Option<String>,
    /// Before this key.
    #[arg(long)]
    to: Option<String>,
    /// At most this many entries.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The database directory (opened read-only).
    dir: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct KeyValue {
    key: String,
    value: Option<String>,
}

/// Exit 1 when the key has no value.
pub fn get(args: &GetArgs) -> i32 {
    crate::init_logging(false);
    let t = &args.target;
    let key = match arg_bytes(&args.key, t.hex) {
        Ok(k) => k,
        Err(e) => return crate::bad_args(&e),
    };
    let value = match read_only(t).and_then(|(_db, cf)| cf.get(&key).map_err(|e| fail("get", &e))) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let found = value.is_some();
    let kv = KeyValue {
        key: bytes_text(&key),
        value: value.as_deref().map(bytes_text),
    };
    if args.json {
        print_json(&kv);
    } else if let Some(v) = kv.value {
        println!("{v}");
    } else {
        eprintln!("cairn get: {} has no value", kv.key);
    }
    if found { 0 } else { NO }
}

pub fn put(args: &PutArgs) -> i32 {
    let t = &args.target;
    let (key, value) = match arg_pair(&args.key, &args.value, t.hex) {
        Ok(pair) => pair,
        Err(e) => return crate::bad_args(&e),
    };
    write(t, "put", args.create, |cf| match args.ttl {
        Some(ttl) => cf.put_with_ttl(&key, &value, ttl),
        None => cf.put(&key, &value),
    })
}

pub fn delete(args: &DeleteArgs) -> i32 {
    let t = &args.target;
    match arg_bytes(&args.key, t.hex) {
        Ok(key) => write(t, "delete", false, |cf| cf.delete(&key)),
        Err(e) => crate::bad_args(&e),
    }
}

pub fn delete_range(args: &DeleteRangeArgs) -> i32 {
    let t = &args.target;
    let (start, end) = match arg_pair(&args.start, &args.end, t.hex) {
        Ok(pair) => pair,
        Err(e) => return crate::bad_args(&e),
    };
    if start >= end {
        return crate::bad_args("delete-range needs START before END");
    }
    write(t, "delete-range", false, |cf| cf.delete_range(&start, &end))
}

pub fn scan(args: &ScanArgs) -> i32 {
    crate::init_logging(false);
    let t = &args.target;
    let range = match key_range(args.from.as_deref(), args.to.as_deref(), t.hex) {
        Ok(range) => range,
        Err(e) => return crate::bad_args(&e),
    };
    let (_db, cf) = match read_only(t) {
        Ok(open) => open,
        Err(code) => return code,
    };
    let mut rows = Vec::new();
    let iter = match cf.range::<Vec<u8>>(range) {
        Ok(iter) => iter,
        Err(e) => return fail("scan", &e),
    };
    for item in iter.take(args.limit) {
        match item {
            Ok((k, v)) => rows.push(KeyValue {
                key: bytes_text(&k),
                value: Some(bytes_text(&v)),
            }),
            Err(e) => return fail("scan", &e),
        }
    }
    if args.json {
        print_json(&rows);
    } else {
        for kv in &rows {
            println!("{}\t{}", kv.key, kv.value.as_deref().unwrap_or(""));
        }
    }
    0
}

#[derive(Debug, Serialize)]
struct StatsView {
    column_families: Vec<String>,
    latest_seqno: u64,
    levels: Vec<LevelSums>,
    tombstones_pending: u64,
    tombstones_droppable: u64,
    oldest_droppable_tombstone_age_secs: Option<u64>,
    memtable_entries: u64,
    memtable_bytes: u64,
    space_amp: f64,
}

pub fn stats(args: &StatsArgs) -> i32 {
    crate::init_logging(false);
    let db = match output::open_read_only(&args.dir) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let s = db.stats();
    let view = StatsView {
        column_families: db.list_column_families(),
        latest_seqno: db.latest_seqno(),
        levels: s
            .levels
            .iter()
            .enumerate()
            .filter(|(_, l)| l.files > 0)
            .map(|(level, l)| LevelSums {
                level,
                files: l.files,
                bytes: l.bytes,
                entries: l.entries,
                point_tombstones: l.point_tombstones,
                range_tombstones: l.range_tombstones,
            })
            .collect(),
        tombstones_pending: s.tombstones_pending,
        tombstones_droppable: s.tombstones_droppable,
        oldest_droppable_tombstone_age_secs: s.oldest_droppable_tombstone_age.map(|d| d.as_secs()),
        memtable_entries: s.memtable_entries,
        memtable_bytes: s.memtable_bytes,
        space_amp: s.space_amp,
    };
    if args.json {
        print_json(&view);
    } else {
        print_stats(&view);
    }
    0
}

fn print_stats(v: &StatsView) {
    println!("column families: {}", v.column_families.join(", "));
    println!("latest seqno: {}", v.latest_seqno);
    println!(
        "tombstones: {} pending, {} droppable now{}",
        v.tombstones_pending,
        v.tombstones_droppable,
        v.oldest_droppable_tombstone_age_secs
            .map(|s| format!(
                " (the oldest for {})",
                humantime::format_duration(Duration::from_secs(s))
            ))
            .unwrap_or_default()
    );
    println!(
        "memtables: {} entries, {} bytes (replayed from the log)",
        v.memtable_entries, v.memtable_bytes
    );
    println!("space amplification: {:.2}", v.space_amp);
    let rows: Vec<Vec<String>> = v.levels.iter().map(LevelSums::cells).collect();
    print_table(&LEVEL_HEADER, &rows);
}

fn read_only(t: &Target) -> Result<(Db, ColumnFamily), i32> {
    let db = output::open_read_only(&t.dir)?;
    let cf = db.column_family(&t.cf).map_err(|e| fail("--cf", &e))?;
    Ok((db, cf))
}

/// Opens for writing, applies one write to the family, and closes (syncing the log).
fn write(
    t: &Target,
    what: &str,
    create: bool,
    op: impl FnOnce(&ColumnFamily) -> cairn::Result<()>,
) -> i32 {
    crate::init_logging(false);
    if create && t.cf != "default" && !t.dir.join("CURRENT").exists() {
        return crate::bad_args(&format!(
            "a new database has only the default column family, not {:?}",
            t.cf
        ));
    }
    let db = match output::open_for_writing(&t.dir, create) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let applied = db.column_family(&t.cf).and_then(|cf| op(&cf));
    if let Err(e) = applied {
        return fail(&format!("{what} (not applied)"), &e);
    }
    match db.close() {
        Ok(()) => 0,
        Err(e) => output::failed(
            &format!("{what} (applied, but closing failed: it may not be durable)"),
            &e,
        ),
    }
}

fn fail(what: &str, e: &cairn::Error) -> i32 {
    output::engine_failed(what, e)
}
