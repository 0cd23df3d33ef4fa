//! `cairn dump DIR [--cf]` and `cairn load DIR [--cf]`: a family's keys and values as JSON
//! Lines, `{"key": …, "value": …}`, one per line, for bulk work, with `"expires_at_ms"` on a value
//! that expires (its TTL, or its family's), so a copy expires when the original does; and `cairn dump-log FILE` (ldb
//! `dump_wal`): each record of a write-ahead log.
//!
//! A key or value is written as its text when it is UTF-8 and does not start with `0x`, else as
//! `0x` and hex, so `load` reads back exactly what `dump` wrote.

use std::fmt::Write as _;
use std::io::{BufRead as _, Write as _};
use std::path::PathBuf;

use cairn::{Options, WriteBatch};
use clap::Args;
use serde::{Deserialize, Serialize};

use crate::db_arg::DbArg;
use crate::output::{self, arg_bytes, kind_name, time_text};

#[derive(Debug, Args)]
pub struct DumpArgs {
    #[command(flatten)]
    db: DbArg,
    /// The column family.
    #[arg(long, default_value = "default")]
    cf: String,
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    #[command(flatten)]
    db: DbArg,
    /// The column family.
    #[arg(long, default_value = "default")]
    cf: String,
    /// Read the lines from this file (default `-`: standard input).
    #[arg(long, default_value = "-")]
    input: PathBuf,
    /// Create the database if the directory holds none.
    #[arg(long)]
    create: bool,
}

#[derive(Debug, Args)]
pub struct DumpLogArgs {
    /// The log file (`NNNNNN.log` in a database directory); read alone, no lock taken.
    file: PathBuf,
    /// One JSON object per record (JSON Lines).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct Line {
    key: String,
    value: String,
    /// When the value expires (ms since the epoch), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<u64>,
}

/// Bytes as a line holds them: text when UTF-8 and not starting with `0x`, else `0x` and hex.
fn line_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.starts_with("0x") => text.to_owned(),
        _ => bytes.iter().fold(String::from("0x"), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        }),
    }
}

fn line_bytes(text: &str) -> Result<Vec<u8>, String> {
    if text.starts_with("0x") {
        arg_bytes(text, true)
    } else {
        Ok(text.as_bytes().to_vec())
    }
}

pub fn dump(args: &DumpArgs) -> i32 {
    crate::init_logging(false);
    let db = match output::open_read_only(args.db.path()) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let (cf, iter) = match db
        .column_family(&args.cf)
        .and_then(|cf| cf.iter().map(|iter| (cf, iter)))
    {
        Ok(open) => open,
        Err(e) => return output::engine_failed("dump", &e),
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut rows = 0_u64;
    for item in iter {
        match item {
            Ok((k, v)) => {
                let expires_at_ms = match cf.get_versions(&k, 1) {
                    Ok(versions) => versions.first().and_then(|version| version.expires_at),
                    Err(e) => {
                        let _ = out.flush();
                        return output::failed(&format!("dump (after {rows} rows)"), &e);
                    }
                };
                let line = Line {
                    key: line_text(&k),
                    value: line_text(&v),
                    expires_at_ms,
                };
                let written = serde_json::to_string(&line)
                    .map_err(std::io::Error::other)
                    .and_then(|text| writeln!(out, "{text}"));
                if let Err(e) = written {
                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                        return 0;
                    }
                    return output::failed("dump", &e);
                }
                rows += 1;
            }
            Err(e) => {
                let _ = out.flush();
                return output::failed(&format!("dump (after {rows} rows)"), &e);
            }
        }
    }
    match out.flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => output::failed("dump", &e),
        _ => 0,
    }
}

/// Reads every line first, so bad input or a wrong family changes nothing; then writes them in
/// batches and flushes.
pub fn load(args: &LoadArgs) -> i32 {
    crate::init_logging(false);
    let pairs = match read_lines(&args.input) {
        Ok(p) => p,
        Err(e) => return crate::bad_args(&e),
    };
    let exists = args.db.path().join("CURRENT").exists();
    if exists {
        let db = match output::open_read_only(args.db.path()) {
            Ok(db) => db,
            Err(code) => return code,
        };
        if let Err(e) = db.column_family(&args.cf) {
            return output::engine_failed("load", &e);
        }
    } else if args.cf != "default" {
        return crate::bad_args(&format!(
            "a new database has only the default column family, not {:?}",
            args.cf
        ));
    }
    let db = match output::open_or_create(args.db.path(), args.create, Options::default()) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let written = (|| {
        let cf = db.column_family(&args.cf)?;
        let mut batch = WriteBatch::new();
        let now = db.now_ms();
        for (k, v, expires) in &pairs {
            match expires {
                // Expired since the dump: the original reads as nothing now, and so does the copy.
                Some(at) if *at <= now => continue,
                Some(at) => {
                    batch.put_with_ttl_cf(&cf, k, v, std::time::Duration::from_millis(at - now));
                }
                None => batch.put_cf(&cf, k, v),
            }
            if batch.size_bytes() >= 1 << 20 {
                db.write(std::mem::replace(&mut batch, WriteBatch::new()))?;
            }
        }
        if !batch.is_empty() {
            db.write(batch)?;
        }
        db.flush()?;
        db.wait_for_background_work()
    })();
    if let Err(e) = written {
        let _ = db.close();
        return output::engine_failed("load (some lines may be written)", &e);
    }
    match db.close() {
        Ok(()) => {
            eprintln!("cairn load: {} written", output::count(pairs.len(), "key"));
            0
        }
        Err(e) => output::failed("load (closing failed)", &e),
    }
}

/// A key, its value, and when it expires.
type Pair = (Vec<u8>, Vec<u8>, Option<u64>);

fn read_lines(input: &std::path::Path) -> Result<Vec<Pair>, String> {
    let reader: Box<dyn std::io::BufRead> = if input == std::path::Path::new("-") {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        let file = std::fs::File::open(input)
            .map_err(|e| format!("cannot read --input {}: {e}", input.display()))?;
        Box::new(std::io::BufReader::new(file))
    };
    let mut pairs = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| format!("cannot read line {}: {e}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Line = serde_json::from_str(&line)
            .map_err(|e| format!("line {} is not {{\"key\": …, \"value\": …}}: {e}", n + 1))?;
        let key = line_bytes(&parsed.key).map_err(|e| format!("line {}: {e}", n + 1))?;
        let value = line_bytes(&parsed.value).map_err(|e| format!("line {}: {e}", n + 1))?;
        if key.len() > cairn::MAX_KEY_LEN {
            return Err(format!(
                "line {}: a key of {} bytes ({}) is over the limit of {} bytes",
                n + 1,
                key.len(),
                output::short_key(&key),
                cairn::MAX_KEY_LEN
            ));
        }
        pairs.push((key, value, parsed.expires_at_ms));
    }
    Ok(pairs)
}

#[derive(Debug, Serialize)]
struct RecordView {
    offset: u64,
    first_seqno: u64,
    write_time_ms: u64,
    write_time: String,
    ops: Vec<OpView>,
}

#[derive(Debug, Serialize)]
struct OpView {
    seqno: u64,
    cf: u32,
    kind: &'static str,
    key: String,
    /// A range delete's end (exclusive).
    #[serde(skip_serializing_if = "Option::is_none")]
    end: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u64>,
}

/// Exit 2 when the log is damaged (after every readable record is printed).
pub fn dump_log(args: &DumpLogArgs) -> i32 {
    crate::init_logging(false);
    if let Err(code) = crate::db_arg::check_file(&args.file) {
        return code;
    }
    let (batches, damage) = match cairn::read_log(&args.file) {
        Ok(read) => read,
        Err(e) => return output::failed("dump-log", &e),
    };
    for b in &batches {
        let view = RecordView {
            offset: b.offset,
            first_seqno: b.first_seqno,
            write_time_ms: b.write_time,
            write_time: time_text(b.write_time),
            ops: b
                .ops
                .iter()
                .zip(b.first_seqno..)
                .map(|(op, seqno)| {
                    let range = op.kind == cairn::Kind::RangeDelete;
                    let other = op.value.as_deref().map(output::bytes_text);
                    OpView {
                        seqno,
                        cf: op.cf,
                        kind: kind_name(op.kind),
                        key: output::bytes_text(&op.key),
                        end: other.clone().filter(|_| range),
                        value: other.filter(|_| !range),
                        ttl_ms: op.ttl_ms,
                    }
                })
                .collect(),
        };
        if args.json {
            match serde_json::to_string(&view) {
                Ok(text) => println!("{text}"),
                Err(e) => return output::failed("dump-log", &e),
            }
        } else {
            println!(
                "offset {} seqno {} at {}: {} ops",
                view.offset,
                view.first_seqno,
                view.write_time,
                view.ops.len()
            );
            for op in &view.ops {
                let mut line = format!("  {} {} cf {} {}", op.seqno, op.kind, op.cf, op.key);
                if let Some(end) = &op.end {
                    let _ = write!(line, " .. {end}");
                }
                if let Some(value) = &op.value {
                    let _ = write!(line, " = {value}");
                }
                if let Some(ttl) = op.ttl_ms {
                    let _ = write!(line, " ttl {}", crate::kv::human_ms(ttl));
                }
                println!("{line}");
            }
        }
    }
    for d in &damage {
        eprintln!("cairn dump-log: {d}");
    }
    if damage.is_empty() { 0 } else { output::FAILED }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_text_hex_and_text_that_looks_like_hex() {
        for bytes in [&b"user/1"[..], &[0, 255, 1], b"0x12", "é".as_bytes(), b""] {
            assert_eq!(line_bytes(&line_text(bytes)).as_deref(), Ok(bytes));
        }
        assert_eq!(line_text(b"0x12"), "0x30783132");
    }
}
