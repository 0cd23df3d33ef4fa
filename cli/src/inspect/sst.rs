//! `cairn inspect sst`: one table file read alone: its properties, block statistics,
//! tombstone counts and density, and with `--entries` every entry.

use std::path::Path;

use cairn::Kind;
use cairn_sstable::key::user_key;
use cairn_sstable::{InternalIterator, Table, TableProperties};
use serde::Serialize;

use crate::output::{self, bytes_text, kind_name, print_json, print_table, ratio, time_text};

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

pub fn run(file: &Path, with_entries: bool, json: bool) -> i32 {
    if let Err(code) = crate::db_arg::check_file(file) {
        return code;
    }
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
                "{} data blocks, index {} bytes, filter {} bytes ({} bits/key), dictionary {} bytes; \
                 no block (data, index or tombstones) over {} bytes uncompressed",
                r.data_blocks,
                r.index_bytes,
                r.filter_bytes,
                r.bloom_bits_per_key,
                r.zstd_dictionary_bytes,
                r.max_block_bytes
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
