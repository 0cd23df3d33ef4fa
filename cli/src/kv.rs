//! `cairn get|put|delete|delete-range|scan|stats`: ad hoc reads and writes of a database, the
//! `ldb get/put/scan` of Cairn. `get`, `scan` and `stats` open it read-only; the writes open
//! it for writing (so the service must be stopped), apply one write, and close, which syncs
//! the log: a write the command reports done is durable.

use std::path::PathBuf;
use std::time::Duration;

use cairn::{ColumnFamily, Db};
use clap::Args;
use serde::Serialize;

use crate::db_arg::{DbArg, DbPos};
use crate::output::{
    self, LEVEL_HEADER, LevelSums, NO, arg_bytes, arg_pair, bytes_text, key_range, print_json,
    print_table, time_text,
};

/// Where and how keys are named: the directory, the family, text or hex.
#[derive(Debug, Args)]
pub struct Target {
    #[command(flatten)]
    db: DbPos,
    /// The column family.
    #[arg(long, default_value = "default")]
    cf: String,
    /// Keys and values on the command line are hex.
    #[arg(long)]
    hex: bool,
}

#[derive(Debug, Args)]
#[command(mut_arg("hex", |a| a.help("KEY is hex")))]
pub struct GetArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
    /// Also show the value's seqno, write time and expiry.
    #[arg(long)]
    meta: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[command(mut_arg("hex", |a| a.help("KEY and VALUE are hex (a --value-file is read as it is)")))]
pub struct PutArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
    /// The value (or give `--value-file`).
    #[arg(required_unless_present = "value_file", conflicts_with = "value_file")]
    value: Option<String>,
    /// Read the value, byte for byte, from this file (`-`: standard input).
    #[arg(long)]
    value_file: Option<PathBuf>,
    /// The cell's time to live (`20s`, `10m`, `1h`; at least 1s: a shorter one expires before
    /// anyone can read the value).
    #[arg(long, value_parser = output::parse_duration)]
    ttl: Option<Duration>,
    /// Create the database if the directory holds none.
    #[arg(long)]
    create: bool,
}

#[derive(Debug, Args)]
#[command(mut_arg("hex", |a| a.help("KEY is hex")))]
pub struct DeleteArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
}

#[derive(Debug, Args)]
#[command(mut_arg("hex", |a| a.help("START and END are hex")))]
pub struct DeleteRangeArgs {
    #[command(flatten)]
    target: Target,
    /// The first key deleted.
    start: String,
    /// The first key kept (the range is `[START, END)`).
    end: String,
}

/// `scan DB`: DB is its only positional argument, so the `--db` alias works here too.
#[derive(Debug, Args)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent command-line switches"
)]
pub struct ScanArgs {
    #[command(flatten)]
    db: DbArg,
    /// The column family.
    #[arg(long, default_value = "default")]
    cf: String,
    /// `--from`, `--to` and `--prefix` are hex.
    #[arg(long)]
    hex: bool,
    /// From this key on.
    #[arg(long)]
    from: Option<String>,
    /// Before this key.
    #[arg(long)]
    to: Option<String>,
    /// Only keys starting with this (within --from/--to).
    #[arg(long)]
    prefix: Option<String>,
    /// From the last key back to the first.
    #[arg(long)]
    reverse: bool,
    /// Print keys only.
    #[arg(long)]
    keys_only: bool,
    /// At most this many entries (0: all); a scan cut short says so.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    db: DbArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct KeyValue {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
}

/// `get --json`: the value and, with `--meta`, where it came from and when it expires.
#[derive(Debug, Serialize)]
struct GetView {
    key: String,
    value: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    meta: Option<MetaView>,
}

#[derive(Debug, Serialize)]
struct MetaView {
    seqno: u64,
    write_time_ms: u64,
    write_time: String,
    expires_at_ms: Option<u64>,
    expires_at: Option<String>,
    /// How long until it expires, in human form.
    expires_in: Option<String>,
}

/// Exit 1 when the key has no value.
pub fn get(args: &GetArgs) -> i32 {
    crate::init_logging(false);
    let t = &args.target;
    let key = match output::key_arg(&args.key, t.hex) {
        Ok(k) => k,
        Err(e) => return crate::bad_args(&e),
    };
    let (db, cf) = match read_only(t.db.path(), &t.cf, "get") {
        Ok(open) => open,
        Err(code) => return code,
    };
    let version = match cf.get_versions(&key, 1) {
        Ok(v) => v.into_iter().next(),
        Err(e) => return fail("get", &e),
    };
    let now = db.now_ms();
    let view = GetView {
        key: bytes_text(&key),
        value: version.as_ref().map(|v| bytes_text(&v.value)),
        meta: version.as_ref().filter(|_| args.meta).map(|v| MetaView {
            seqno: v.seqno,
            write_time_ms: v.write_time,
            write_time: time_text(v.write_time),
            expires_at_ms: v.expires_at,
            expires_at: v.expires_at.map(time_text),
            expires_in: v.expires_at.map(|at| human_ms(at.saturating_sub(now))),
        }),
    };
    if args.json {
        print_json(&view);
    } else if let Some(v) = &view.value {
        println!("{v}");
        if let Some(m) = &view.meta {
            println!("seqno: {}", m.seqno);
            println!("written: {}", m.write_time);
            match (&m.expires_at, &m.expires_in) {
                (Some(at), Some(within)) => println!("expires: {at} (in {within})"),
                _ => println!("expires: never"),
            }
        }
    } else {
        eprintln!("cairn get: {} has no value", output::short_key(&key));
    }
    if view.value.is_some() { 0 } else { NO }
}

/// The shortest `--ttl` taken: anything shorter expires before a reader could see the value.
pub const MIN_TTL: Duration = Duration::from_secs(1);

/// A span of milliseconds in human units, its two largest only (`3years 2months`, `1h 30m`,
/// `20s`), so a huge TTL reads at a glance.
pub fn human_ms(ms: u64) -> String {
    let full = humantime::format_duration(Duration::from_secs(ms / 1000)).to_string();
    full.split(' ').take(2).collect::<Vec<_>>().join(" ")
}

pub fn put(args: &PutArgs) -> i32 {
    let t = &args.target;
    if args.ttl.is_some_and(|ttl| ttl < MIN_TTL) {
        return crate::bad_args(
            "a TTL under 1s expires before anyone can read the value (and the write replaces \
             what the key held): give --ttl 1s or more, or `cairn delete` the key",
        );
    }
    let key = match arg_bytes(&args.key, t.hex) {
        Ok(k) => k,
        Err(e) => return crate::bad_args(&e),
    };
    let value = match (&args.value, &args.value_file) {
        (Some(v), _) => arg_bytes(v, t.hex),
        (None, Some(file)) => read_value_file(file),
        (None, None) => Err("give a VALUE or --value-file".to_owned()),
    };
    let value = match value {
        Ok(v) => v,
        Err(e) => return crate::bad_args(&e),
    };
    if value.len() > cairn::MAX_VALUE_LEN {
        return crate::bad_args(&format!(
            "a value of {} bytes is over the limit of {} bytes",
            value.len(),
            cairn::MAX_VALUE_LEN
        ));
    }
    let code = write(t, "put", args.create, &[&key], |cf| match args.ttl {
        Some(ttl) => cf.put_with_ttl(&key, &value, ttl),
        None => cf.put(&key, &value),
    });
    if code == 0
        && let Some(ttl) = args.ttl
    {
        eprintln!(
            "cairn put: {} expires in {}",
            output::short_key(&key),
            human_ms(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
        );
    }
    code
}

/// A value read from `file`, or from standard input for `-`.
fn read_value_file(file: &std::path::Path) -> Result<Vec<u8>, String> {
    if file == std::path::Path::new("-") {
        let mut value = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut value)
            .map_err(|e| format!("cannot read the value from standard input: {e}"))?;
        return Ok(value);
    }
    std::fs::read(file).map_err(|e| format!("cannot read --value-file {}: {e}", file.display()))
}

pub fn delete(args: &DeleteArgs) -> i32 {
    let t = &args.target;
    match arg_bytes(&args.key, t.hex) {
        Ok(key) => write(t, "delete", false, &[&key], |cf| cf.delete(&key)),
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
    write(t, "delete-range", false, &[&start, &end], |cf| {
        cf.delete_range(&start, &end)
    })
}

/// `scan --json`: the rows, whether `--limit` cut the scan short, and the damage it met.
#[derive(Debug, Serialize)]
struct ScanView {
    rows: Vec<KeyValue>,
    /// True when more keys follow the last row (the scan stopped at `--limit`).
    limited: bool,
    /// The damage that stopped the scan after the rows (exit 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub fn scan(args: &ScanArgs) -> i32 {
    crate::init_logging(false);
    let range = match key_range(args.from.as_deref(), args.to.as_deref(), args.hex) {
        Ok(range) => range,
        Err(e) => return crate::bad_args(&e),
    };
    let prefix = match args
        .prefix
        .as_deref()
        .map(|p| output::key_arg(p, args.hex))
        .transpose()
    {
        Ok(p) => p,
        Err(e) => return crate::bad_args(&e),
    };
    let (_db, cf) = match read_only(args.db.path(), &args.cf, "scan") {
        Ok(open) => open,
        Err(code) => return code,
    };
    let iter = match &prefix {
        Some(p) => cf.prefix(p),
        None => cf.range::<Vec<u8>>(range.clone()),
    };
    let iter = match iter {
        Ok(iter) => iter,
        Err(e) => return fail("scan", &e),
    };
    let in_range = |k: &[u8]| std::ops::RangeBounds::contains(&range, &k.to_vec());
    let items: Box<dyn Iterator<Item = <cairn::DbIterator as Iterator>::Item>> = if args.reverse {
        Box::new(iter.rev())
    } else {
        Box::new(iter)
    };
    let limit = if args.limit == 0 {
        usize::MAX
    } else {
        args.limit
    };
    let mut view = ScanView {
        rows: Vec::new(),
        limited: false,
        error: None,
    };
    for item in items {
        match item {
            Ok((k, v)) => {
                if !in_range(&k) {
                    continue;
                }
                if view.rows.len() == limit {
                    view.limited = true;
                    break;
                }
                view.rows.push(KeyValue {
                    key: bytes_text(&k),
                    value: (!args.keys_only).then(|| bytes_text(&v)),
                });
            }
            Err(e) => {
                view.error = Some(e.to_string());
                break;
            }
        }
    }
    if args.json {
        print_json(&view);
    } else {
        for kv in &view.rows {
            match &kv.value {
                Some(v) => println!("{}\t{v}", kv.key),
                None => println!("{}", kv.key),
            }
        }
    }
    if view.limited {
        eprintln!(
            "cairn scan: stopped at --limit {}; more keys follow (--limit 0 for all)",
            args.limit
        );
    }
    match &view.error {
        Some(e) => output::failed(
            &format!("scan (after {})", output::count(view.rows.len(), "row")),
            e,
        ),
        None => 0,
    }
}

#[derive(Debug, Serialize)]
struct StatsView {
    column_families: Vec<String>,
    latest_seqno: u64,
    levels: Vec<LevelSums>,
    tombstones_pending: u64,
    tombstones_droppable: u64,
    oldest_droppable_tombstone_age_ms: Option<u64>,
    oldest_droppable_tombstone_age: Option<String>,
    memtable_entries: u64,
    memtable_bytes: u64,
    space_amp: f64,
    /// Always false: stats reads the MANIFEST and table properties, not every block
    /// (`cairn verify` does).
    verified: bool,
}

pub fn stats(args: &StatsArgs) -> i32 {
    crate::init_logging(false);
    let db = match output::open_read_only(args.db.path()) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let s = db.stats();
    // On the stress harness's manual clock the engine's ages against today mean nothing.
    let oldest = s
        .oldest_droppable_tombstone_age
        .filter(|_| output::age_clock(args.db.path(), 0).is_some());
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
        oldest_droppable_tombstone_age_ms: oldest
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        oldest_droppable_tombstone_age: oldest
            .map(|d| humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()),
        memtable_entries: s.memtable_entries,
        memtable_bytes: s.memtable_bytes,
        space_amp: s.space_amp,
        verified: false,
    };
    output::not_verified("stats", args.db.path());
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
        v.oldest_droppable_tombstone_age
            .as_ref()
            .map(|age| format!(" (the oldest for {age})"))
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

/// Opens `dir` read-only and the family `cf`; `what` is the command, for messages.
fn read_only(dir: &std::path::Path, cf: &str, what: &str) -> Result<(Db, ColumnFamily), i32> {
    let db = output::open_read_only(dir)?;
    let cf = db.column_family(cf).map_err(|e| fail(what, &e))?;
    Ok((db, cf))
}

/// Opens for writing, applies one write to the family, flushes it, compacts level 0 if the
/// write left it fuller than the command found it, and closes (syncing the log). Everything that
/// can be refused (a key over the limit, a family that does not exist) is checked first, on a
/// read-only open, so a refused command changes no file. A write the engine stalls (level 0 full
/// from before) fails at once with what to do, never waits.
fn write(
    t: &Target,
    what: &str,
    create: bool,
    keys: &[&[u8]],
    op: impl FnOnce(&ColumnFamily) -> cairn::Result<()>,
) -> i32 {
    crate::init_logging(false);
    if let Some(key) = keys.iter().find(|k| k.len() > cairn::MAX_KEY_LEN) {
        return crate::bad_args(&format!(
            "a key of {} bytes ({}) is over the limit of {} bytes",
            key.len(),
            output::short_key(key),
            cairn::MAX_KEY_LEN
        ));
    }
    let exists = t.db.path().join("CURRENT").exists();
    if create && t.cf != "default" && !exists {
        return crate::bad_args(&format!(
            "a new database has only the default column family, not {:?}",
            t.cf
        ));
    }
    // What level 0 held before: the read-only open changes nothing and checks the family.
    let before = if exists {
        match level0_counts(t) {
            Ok(counts) => counts,
            Err(code) => return code,
        }
    } else {
        Vec::new()
    };
    let options = cairn::Options::default().disable_auto_compactions(true);
    let db = match output::open_or_create(t.db.path(), create, options) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let applied = db.column_family(&t.cf).and_then(|cf| op(&cf));
    if let Err(e) = applied {
        let code = match e {
            cairn::Error::WriteStall { .. } => output::failed(
                &format!("{what} (not applied)"),
                &format!("{e}: run `cairn compact {}`", t.db.path().display()),
            ),
            e => fail(&format!("{what} (not applied)"), &e),
        };
        let _ = db.close();
        return code;
    }
    if let Err(e) = drain_level0(&db, &before) {
        let _ = db.close();
        return output::failed(
            &format!("{what} (applied and durable, but compacting level 0 failed)"),
            &e,
        );
    }
    match db.close() {
        Ok(()) => 0,
        Err(e) => output::failed(
            &format!("{what} (applied, but closing failed: it may not be durable)"),
            &e,
        ),
    }
}

/// Each family's level-0 table count, read-only; checks `t.cf` exists.
fn level0_counts(t: &Target) -> Result<Vec<(String, usize)>, i32> {
    let db = output::open_read_only(t.db.path())?;
    let names = db.list_column_families();
    if !names.contains(&t.cf) {
        return Err(crate::bad_args(&format!(
            "column family {:?} does not exist (the database has {}); `cairn cf create` makes one",
            t.cf,
            names.join(", ")
        )));
    }
    names
        .into_iter()
        .map(|name| {
            let cf = db.column_family(&name).map_err(|e| fail("--cf", &e))?;
            let tables = cf.tables().map_err(|e| fail("--cf", &e))?;
            Ok((name, tables.iter().filter(|t| t.level == 0).count()))
        })
        .collect()
}

/// A table below this size is merged with what an ad hoc write flushed next to it, so writes
/// one at a time leave one table, not one each (a thousand of which exhaust descriptors).
const MERGE_NEIGHBOUR_BYTES: u64 = 16 << 20;

/// Flushes the memtables, then compacts level 0 of each family where it now holds more tables
/// than `before` says it did (the open's replay of the log and this write each flush a table),
/// over the key span of its level-0 tables widened to take in the nearest small table below
/// level 0, so what the write flushed joins it rather than sitting beside it.
fn drain_level0(db: &Db, before: &[(String, usize)]) -> cairn::Result<()> {
    db.flush()?;
    for name in db.list_column_families() {
        let cf = db.column_family(&name)?;
        let level0: Vec<_> = cf.tables()?.into_iter().filter(|t| t.level == 0).collect();
        let found = before
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, count)| *count);
        if level0.len() <= found {
            continue;
        }
        let smallest = level0.iter().map(|t| t.smallest.clone()).min();
        let largest = level0.iter().map(|t| t.largest.clone()).max();
        if let (Some(from), Some(to)) = (smallest, largest) {
            let tables = cf.tables()?;
            let (from, to) = with_neighbour(&tables, from.to_vec(), to.to_vec());
            cf.compact_range(from..=to)?;
        }
    }
    Ok(())
}

/// `[from, to]` widened to cover the small table below level 0 nearest to it (the one that
/// overlaps it, else the one just before it, else the one just after), if there is one.
fn with_neighbour(tables: &[cairn::TableInfo], from: Vec<u8>, to: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
    let small = || {
        tables
            .iter()
            .filter(|t| t.level > 0 && t.bytes < MERGE_NEIGHBOUR_BYTES)
    };
    let overlapping = small()
        .find(|t| t.smallest.as_ref() <= to.as_slice() && t.largest.as_ref() >= from.as_slice());
    let before = small()
        .filter(|t| t.largest.as_ref() < from.as_slice())
        .max_by(|a, b| a.largest.cmp(&b.largest));
    let after = small()
        .filter(|t| t.smallest.as_ref() > to.as_slice())
        .min_by(|a, b| a.smallest.cmp(&b.smallest));
    match overlapping.or(before).or(after) {
        Some(t) => (from.min(t.smallest.to_vec()), to.max(t.largest.to_vec())),
        None => (from, to),
    }
}

fn fail(what: &str, e: &cairn::Error) -> i32 {
    output::engine_failed(what, e)
}
