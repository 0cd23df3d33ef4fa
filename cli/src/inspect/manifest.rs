//! `cairn inspect manifest`: the version edits of the MANIFEST `CURRENT` names, in order,
//! read without taking the database's lock.

use std::path::Path;

use serde::Serialize;

use crate::output::{self, bytes_text, print_json};

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

pub fn run(dir: &Path, json: bool) -> i32 {
    if let Err(code) = crate::db_arg::check_database(dir, "") {
        return code;
    }
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
    println!("{} ({})", r.manifest, output::count(r.edits.len(), "edit"));
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
