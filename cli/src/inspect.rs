//! `cairn inspect sst|manifest|levels`: what is on disk, read without opening the database for
//! writing (the `sst_dump` and `ldb manifest_dump` of Cairn).
//!
//! `sst` reads one table file alone; `manifest` decodes the MANIFEST edit by edit without
//! taking the lock; `levels` opens the database read-only and sums each column family's
//! tables by level, and can draw them (`--plot`, in `plot.rs`).

use std::path::{Path, PathBuf};

use cairn::{Kind, TableInfo};
use cairn_sstable::key::user_key;
use cairn_sstable::{InternalIterator, Table, TableProperties};
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::output::{
    self, FAILED, LEVEL_HEADER, age_text, bytes_text, level_cells, print_json, print_table,
    time_text,
};
use crate::plot::LevelBar;

#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// One table file: properties, blocks, tombstone counts and density; `--entries` lists every entry.
    Sst {
        /// The `.sst` file.
        file: PathBuf,
        /// Every entry too: user key, seqno, kind, write time, TTL (and each range tombstone).
        #[arg(long)]
        entries: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The version edits of the MANIFEST that CURRENT names, in order (takes no lock).
    Manifest {
        /// The database directory.
        dir: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Per column family and level: files, bytes, entries, tombstones, oldest tombstone age.
    Levels {
        /// The database directory (opened read-only).
        dir: PathBuf,
        /// Also draw bytes per level and the tombstone share into this PNG.
        #[arg(long, value_name = "FILE.png")]
        plot: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: &InspectArgs) -> i32 {
    crate::init_logging(false);
    match &args.what {
        What::Sst {
            file,
            entries,
            json,
        } => sst(file, *entries, *json),
        What::Manifest { dir, json } => manifest(dir, *json),
        What::Levels { dir, plot, json } => levels(dir, plot.as_deref(), *json),
    }
}

// ---- inspect sst ----

#[derive(Debug, Serialize)]
struct SstReport {
    file: String,
    file_bytes: u64,
    smallest_key: Option<String>,
    largest_key: Option<String>,
    smallest_seqno: u64,
    largest_seqno: u64,
    entries: u64,
    puts: u64,
    deletes: u64,
    single_deletes: u64,
    range_tombstones: u64,
    /// Point and range tombstones over all entries and range tombstones.
    tombstone_density: f64,
    /// The most point tombstones among any window of consecutive entries.
    max_tombstones_in_window: u32,
    oldest_write_time: Option<String>,
    newest_write_time: Option<String>,
    oldest_tombstone_time: Option<String>,
    earliest_expiry: Option<String>,
    data_blocks: u64,
    raw_key_bytes: u64,
    raw_value_bytes: u64,
    max_block_bytes: u64,
    index_bytes: usize,
    filter_bytes: usize,
    bloom_bits_per_key: u32,
    zstd_dictionary_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    entry_list: Option<Vec<EntryRow>>,
}

#[derive(Debug, Serialize)]
struct EntryRow {
    key: String,
    /// The exclusive end, for a range tombstone.
    #[serde(skip_serializing_if = "Option::is_none")]
    end: Option<String>,
    seqno: u64,
    kind: &'static str,
    write_time: String,
    ttl_ms: Option<u64>,
    value_bytes: usize,
}

fn sst(file: &Path, with_entries: bool, json: bool) -> i32 {
    let table = match Table::open(&cairn_fs::RealFs, file, 0, None) {
        Ok(t) => t,
        Err(e) => return output::failed("inspect sst", &e),
    };
    let mut report = sst_report(file, &table);
    if with_entries {
        match entry_rows(&table) {
            Ok(rows) => report.entry_list = Some(rows),
            Err(e) => return output::failed("inspect sst", &e),
        }
    }
    if json {
        print_json(&report);
    } else {
        print_sst(&report);
    }
    0
}

fn sst_report(file: &Path, table: &Table) -> SstReport {
    let p: &TableProperties = table.properties();
    // Counts read from disk: a damaged file must not overflow them.
    let tombstones = p
        .num_point_tombstones()
        .saturating_add(p.num_range_tombstones);
    let all = p.num_entries.saturating_add(p.num_range_tombstones);
    SstReport {
        file: file.display().to_string(),
        file_bytes: table.file_size(),
        smallest_key: p.smallest_key.as_deref().map(|k| bytes_text(user_key(k))),
        largest_key: p.largest_key.as_deref().map(|k| bytes_text(user_key(k))),
        smallest_seqno: p.smallest_seqno,
        largest_seqno: p.largest_seqno,
        entries: p.num_entries,
        puts: p.num_puts,
        deletes: p.num_deletes,
        single_deletes: p.num_single_deletes,
        range_tombstones: p.num_range_tombstones,
        tombstone_density: ratio(tombstones, all),
        max_tombstones_in_window: p.max_tombstones_in_window,
        oldest_write_time: p.oldest_write_time.map(time_text),
        newest_write_time: p.newest_write_time.map(time_text),
        oldest_tombstone_time: p.oldest_tombstone_time.map(time_text),
        earliest_expiry: p.earliest_expiry.map(time_text),
        data_blocks: p.num_data_blocks,
        raw_key_bytes: p.raw_key_bytes,
        raw_value_bytes: p.raw_value_bytes,
        max_block_bytes: p.max_block_bytes,
        index_bytes: table.index_size(),
        filter_bytes: table.filter_size(),
        bloom_bits_per_key: p.bloom_bits_per_key,
        zstd_dictionary_bytes: p.zstd_dictionary_bytes,
        entry_list: None,
    }
}

fn entry_rows(table: &Table) -> cairn_sstable::Result<Vec<EntryRow>> {
    let mut rows = Vec::new();
    let mut iter = table.iter();
    iter.seek_to_first()?;
    while let Some(key) = iter.parsed_key() {
        let meta = iter.meta();
        rows.push(EntryRow {
            key: bytes_text(key.user_key),
            end: None,
            seqno: key.seqno,
            kind: kind_name(key.kind),
            write_time: time_text(meta.write_time),
            ttl_ms: meta.ttl,
            value_bytes: iter.value().len(),
        });
        iter.next()?;
    }
    for t in table.range_tombstones().iter_tombstones() {
        rows.push(EntryRow {
            key: bytes_text(&t.start),
            end: Some(bytes_text(&t.end)),
            seqno: t.seqno,
            kind: kind_name(Kind::RangeDelete),
            write_time: time_text(t.write_time),
            ttl_ms: None,
            value_bytes: 0,
        });
    }
    Ok(rows)
}

pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Put => "put",
        Kind::Delete => "delete",
        Kind::SingleDelete => "single_delete",
        Kind::RangeDelete => "range_delete",
    }
}

fn print_sst(r: &SstReport) {
    let none = || "-".to_owned();
    let lines = [
        ("file", format!("{} ({} bytes)", r.file, r.file_bytes)),
        (
            "keys",
            format!(
                "{} .. {}",
                r.smallest_key.clone().unwrap_or_else(none),
                r.largest_key.clone().unwrap_or_else(none)
            ),
        ),
        (
            "seqnos",
            format!("{} .. {}", r.smallest_seqno, r.largest_seqno),
        ),
        (
            "entries",
            format!(
                "{} ({} puts, {} deletes, {} single deletes) + {} range tombstones",
                r.entries, r.puts, r.deletes, r.single_deletes, r.range_tombstones
            ),
        ),
        (
            "tombstones",
            format!(
                "density {:.1}%, at most {} in a window of {} entries",
                r.tombstone_density * 100.0,
                r.max_tombstones_in_window,
                cairn_sstable::TOMBSTONE_WINDOW
            ),
        ),
        (
            "written",
            format!(
                "{} .. {}",
                r.oldest_write_time.clone().unwrap_or_else(none),
                r.newest_write_time.clone().unwrap_or_else(none)
            ),
        ),
        (
            "oldest tombstone",
            r.oldest_tombstone_time.clone().unwrap_or_else(none),
        ),
        (
            "earliest expiry",
            r.earliest_expiry.clone().unwrap_or_else(none),
        ),
        (
            "blocks",
            format!(
                "{} data blocks (largest {} bytes), index {} bytes, filter {} bytes ({} bits/key), dictionary {} bytes",
                r.data_blocks,
                r.max_block_bytes,
                r.index_bytes,
                r.filter_bytes,
                r.bloom_bits_per_key,
                r.zstd_dictionary_bytes
            ),
        ),
        (
            "raw bytes",
            format!("keys {}, values {}", r.raw_key_bytes, r.raw_value_bytes),
        ),
    ];
    for (name, value) in lines {
        println!("{name:>17}: {value}");
    }
    if let Some(entries) = &r.entry_list {
        let rows: Vec<Vec<String>> = entries
            .iter()
            .map(|e| {
                vec![
                    e.end
                        .as_ref()
                        .map_or_else(|| e.key.clone(), |end| format!("[{}, {end})", e.key)),
                    e.seqno.to_string(),
                    e.kind.to_owned(),
                    e.write_time.clone(),
                    e.ttl_ms.map_or_else(none, |t| format!("{t}ms")),
                    e.value_bytes.to_string(),
                ]
            })
            .collect();
        print_table(
            &["KEY", "SEQNO", "KIND", "WRITTEN", "TTL", "VALUE BYTES"],
            &rows,
        );
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        #[allow(clippy::cast_precision_loss, reason = "a share for people to read")]
        let r = part as f64 / whole as f64;
        r
    }
}

// ---- inspect manifest ----

#[derive(Debug, Serialize)]
struct EditRow {
    offset: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    log_number: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_file_number: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_seqno: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cf_id: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    added_column_families: Vec<(u32, String)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    dropped_column_families: Vec<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    added_tables: Vec<AddedTable>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    deleted_tables: Vec<DeletedTable>,
}

#[derive(Debug, Serialize)]
struct AddedTable {
    cf: u32,
    level: usize,
    number: u64,
    bytes: u64,
    entries: u64,
    point_tombstones: u64,
    range_tombstones: u64,
    smallest: String,
    largest: String,
    seqnos: (u64, u64),
}

#[derive(Debug, Serialize)]
struct DeletedTable {
    cf: u32,
    level: usize,
    number: u64,
}

#[derive(Debug, Serialize)]
struct ManifestReport {
    manifest: String,
    number: u64,
    edits: Vec<EditRow>,
}

fn manifest(dir: &Path, json: bool) -> i32 {
    let dump = match cairn::read_manifest(dir) {
        Ok(d) => d,
        Err(e) => return output::failed("inspect manifest", &e),
    };
    let edits = dump.edits.into_iter().map(edit_row).collect();
    let report = ManifestReport {
        manifest: dump.path.display().to_string(),
        number: dump.number,
        edits,
    };
    if json {
        print_json(&report);
    } else {
        print_manifest(&report);
    }
    0
}

fn edit_row(e: cairn::ManifestEdit) -> EditRow {
    EditRow {
        offset: e.offset,
        log_number: e.log_number,
        next_file_number: e.next_file_number,
        last_seqno: e.last_seqno,
        next_cf_id: e.next_cf_id,
        added_column_families: e.added_column_families,
        dropped_column_families: e.dropped_column_families,
        added_tables: e
            .added_tables
            .iter()
            .map(|(cf, t)| AddedTable {
                cf: *cf,
                level: t.level,
                number: t.number,
                bytes: t.bytes,
                entries: t.entries,
                point_tombstones: t.point_tombstones,
                range_tombstones: t.range_tombstones,
                smallest: bytes_text(&t.smallest),
                largest: bytes_text(&t.largest),
                seqnos: (t.smallest_seqno, t.largest_seqno),
            })
            .collect(),
        deleted_tables: e
            .deleted_tables
            .iter()
            .map(|&(cf, level, number)| DeletedTable { cf, level, number })
            .collect(),
    }
}

fn print_manifest(r: &ManifestReport) {
    println!("{} ({} edits)", r.manifest, r.edits.len());
    for e in &r.edits {
        let fields: Vec<String> = [
            ("log", e.log_number),
            ("next file", e.next_file_number),
            ("last seqno", e.last_seqno),
            ("next cf", e.next_cf_id.map(u64::from)),
        ]
        .into_iter()
        .filter_map(|(name, v)| v.map(|v| format!("{name} {v}")))
        .collect();
        println!("@{}: {}", e.offset, fields.join(", "));
        for (id, name) in &e.added_column_families {
            println!("    + column family {id} {name:?}");
        }
        for id in &e.dropped_column_families {
            println!("    - column family {id}");
        }
        for t in &e.added_tables {
            println!(
                "    + {:06}.sst cf {} L{}: {} bytes, {} entries, {} point and {} range tombstones, keys {} .. {}, seqnos {} .. {}",
                t.number,
                t.cf,
                t.level,
                t.bytes,
                t.entries,
                t.point_tombstones,
                t.range_tombstones,
                t.smallest,
                t.largest,
                t.seqnos.0,
                t.seqnos.1
            );
        }
        for t in &e.deleted_tables {
            println!("    - {:06}.sst cf {} L{}", t.number, t.cf, t.level);
        }
    }
}

// ---- inspect levels ----

/// One level of one column family, summed over its tables.
#[derive(Debug, Default, Clone, Serialize)]
struct LevelRow {
    column_family: String,
    level: usize,
    files: usize,
    bytes: u64,
    entries: u64,
    point_tombstones: u64,
    range_tombstones: u64,
    /// When its oldest tombstone was written.
    oldest_tombstone: Option<String>,
    /// How long ago, on the database's clock.
    oldest_tombstone_age: Option<String>,
}

impl LevelRow {
    /// Point and range tombstones over entries and range tombstones.
    fn tombstone_share(&self) -> f64 {
        ratio(
            self.point_tombstones + self.range_tombstones,
            self.entries + self.range_tombstones,
        )
    }
}

fn levels(dir: &Path, plot: Option<&Path>, json: bool) -> i32 {
    let db = match output::open_read_only(dir) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let rows = match level_rows(&db) {
        Ok(rows) => rows,
        Err(e) => return output::engine_failed("inspect levels", &e),
    };
    if let Some(path) = plot {
        let bars: Vec<LevelBar> = rows
            .iter()
            .map(|r| LevelBar {
                label: format!("{} L{}", r.column_family, r.level),
                bytes: r.bytes,
                tombstone_share: r.tombstone_share(),
            })
            .collect();
        if let Err(e) = crate::plot::levels(&bars, path) {
            eprintln!("cairn inspect levels: cannot draw {}: {e}", path.display());
            return FAILED;
        }
        eprintln!("cairn inspect levels: drew {}", path.display());
    }
    if json {
        print_json(&rows);
    } else {
        print_levels(&rows);
    }
    0
}

/// Every column family's levels that hold a table, in family and level order.
fn level_rows(db: &cairn::Db) -> cairn::Result<Vec<LevelRow>> {
    let now = db.now_ms();
    let mut rows = Vec::new();
    let mut names = db.list_column_families();
    names.sort();
    for name in names {
        let tables = db.column_family(&name)?.tables()?;
        let deepest = tables.iter().map(|t| t.level).max();
        for level in 0..=deepest.unwrap_or(0) {
            let on: Vec<&TableInfo> = tables.iter().filter(|t| t.level == level).collect();
            if on.is_empty() {
                continue;
            }
            let oldest = on.iter().filter_map(|t| t.oldest_tombstone_time).min();
            rows.push(LevelRow {
                column_family: name.clone(),
                level,
                files: on.len(),
                bytes: on.iter().map(|t| t.bytes).sum(),
                entries: on.iter().map(|t| t.entries).sum(),
                point_tombstones: on.iter().map(|t| t.point_tombstones).sum(),
                range_tombstones: on.iter().map(|t| t.range_tombstones).sum(),
                oldest_tombstone: oldest.map(time_text),
                oldest_tombstone_age: oldest.map(|t| age_text(now, t)),
            });
        }
    }
    Ok(rows)
}

fn print_levels(rows: &[LevelRow]) {
    if rows.is_empty() {
        println!("no tables (everything is still in the log, or the database is empty)");
    }
    let mut families: Vec<&str> = rows.iter().map(|r| r.column_family.as_str()).collect();
    families.dedup();
    for (i, family) in families.into_iter().enumerate() {
        if i > 0 {
            println!();
        }
        println!("{family}:");
        let cells: Vec<Vec<String>> = rows
            .iter()
            .filter(|r| r.column_family == family)
            .map(|r| {
                let sums = [r.bytes, r.entries, r.point_tombstones, r.range_tombstones];
                let mut cells = level_cells(r.level, r.files, sums);
                cells.push(format!("{:.1}%", r.tombstone_share() * 100.0));
                cells.push(
                    r.oldest_tombstone_age
                        .clone()
                        .unwrap_or_else(|| "-".to_owned()),
                );
                cells
            })
            .collect();
        let mut header = LEVEL_HEADER.to_vec();
        header.extend(["TOMBSTONE SHARE", "OLDEST TOMBSTONE AGE"]);
        print_table(&header, &cells);
    }
}
