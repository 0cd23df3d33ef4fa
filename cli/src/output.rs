//! What the operator commands share: opening a database with a message that says what to do,
//! keys and values as text or hex, times and ages, durations in human form, tables and JSON
//! on stdout, and the exit codes.
//!
//! Exit codes of the operator commands (`inspect`, `explain`, `audit`, `get`, `put`,
//! `delete`, `delete-range`, `scan`, `stats`): 0 done; 1 the answer is "no" (`get` found no
//! value, `audit` found traces); 2 the database could not be opened or read (locked for a write, missing,
//! damaged: `Corruption` names the file and offset); 3 bad arguments.

use std::fmt::Write as _;
use std::ops::Bound;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use cairn::{Db, Options};

/// The command's answer is "no": `get` found nothing, `audit` found traces.
pub const NO: i32 = 1;
/// The database could not be opened or read.
pub const FAILED: i32 = 2;
/// Bad arguments.
pub const BAD_ARGS: i32 = 3;

/// Opens `dir` read-only: the command changes nothing on disk and takes no lock, so it runs
/// beside a live writer (reading the files as they were at the open) without blocking it.
///
/// # Errors
/// The exit code, once the reason is printed.
pub fn open_read_only(dir: &Path) -> Result<Db, i32> {
    open_read_only_with(dir, Options::default())
}

/// [`open_read_only`] with `options`.
///
/// # Errors
/// The exit code, once the reason is printed.
pub fn open_read_only_with(dir: &Path, options: Options) -> Result<Db, i32> {
    Db::open_read_only(dir, options).map_err(|e| cannot_open(dir, &e))
}

/// Opens `dir` for writing (`put`, `delete`, `delete-range`); creates a database there only
/// if `create`. No compaction runs while it is open, so an ad hoc write changes only what it
/// writes (and the flush of what the log held), and cannot fail on unrelated work.
///
/// # Errors
/// The exit code, once the reason is printed.
pub fn open_for_writing(dir: &Path, create: bool) -> Result<Db, i32> {
    if !create && !dir.join("CURRENT").exists() {
        eprintln!(
            "cairn: {} holds no database (no CURRENT file); `cairn put --create` makes one",
            dir.display()
        );
        return Err(FAILED);
    }
    open_for_writing_with(
        dir,
        create,
        Options::default().disable_auto_compactions(true),
    )
}

/// [`open_for_writing`] with `options` (`load` keeps automatic compactions on, as a bulk
/// write needs them).
///
/// # Errors
/// The exit code, once the reason is printed.
pub fn open_for_writing_with(dir: &Path, create: bool, options: Options) -> Result<Db, i32> {
    if !create && !dir.join("CURRENT").exists() {
        eprintln!(
            "cairn: {} holds no database (no CURRENT file); `cairn put --create` makes one",
            dir.display()
        );
        return Err(FAILED);
    }
    Db::open(dir, options).map_err(|e| cannot_open(dir, &e))
}

fn cannot_open(dir: &Path, e: &cairn::Error) -> i32 {
    if let cairn::Error::Io(cairn_fs::Error::Locked { .. }) = e {
        eprintln!(
            "cairn: {} is locked: another process has the database open for writing. \
             Stop it first to write; the commands that only read (get, scan, stats, inspect, \
             explain, audit) work beside it",
            dir.display()
        );
    } else {
        eprintln!("cairn: cannot open {}: {e}", dir.display());
    }
    FAILED
}

/// Says on stderr that `command` read summaries, not every block, so damage may be unseen.
pub fn not_verified(command: &str, dir: &Path) {
    eprintln!(
        "cairn {command}: not verified (blocks not read were not checked); `cairn verify {}` checks every block",
        dir.display()
    );
}

/// Prints an error met after opening, and gives its exit code (2).
pub fn failed(what: &str, e: &dyn std::fmt::Display) -> i32 {
    eprintln!("cairn {what}: {e}");
    FAILED
}

/// [`failed`] for an engine error, except that what the caller named wrong (a column family
/// that does not exist, a key too long) is a bad argument (3).
pub fn engine_failed(what: &str, e: &cairn::Error) -> i32 {
    match e {
        cairn::Error::InvalidArgument(_) | cairn::Error::ColumnFamilyNotFound(_) => {
            eprintln!("cairn {what}: bad arguments: {e}");
            BAD_ARGS
        }
        _ => failed(what, e),
    }
}

/// A key or value as text when every byte is printable ASCII, else as `0x` and hex (so is
/// text that itself starts with `0x`, to keep the two apart).
pub fn bytes_text(bytes: &[u8]) -> String {
    let printable = bytes.iter().all(|b| (0x20..0x7f).contains(b));
    if printable && !bytes.starts_with(b"0x") {
        String::from_utf8_lossy(bytes).into_owned()
    } else {
        bytes.iter().fold(String::from("0x"), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
    }
}

/// A key as [`bytes_text`] prints it, cut to its first 64 bytes (with the length) when longer,
/// so an over-long key is never echoed whole.
pub fn short_key(key: &[u8]) -> String {
    const SHOWN: usize = 64;
    match key.get(..SHOWN) {
        Some(head) if key.len() > SHOWN => {
            format!("{}… ({} bytes)", bytes_text(head), key.len())
        }
        _ => bytes_text(key),
    }
}

/// A key or value given on the command line: as typed, or decoded from hex with `--hex`.
///
/// # Errors
/// A message for `--hex` input that is not hex.
pub fn arg_bytes(text: &str, hex: bool) -> Result<Vec<u8>, String> {
    if !hex {
        return Ok(text.as_bytes().to_vec());
    }
    let digits = text.strip_prefix("0x").unwrap_or(text);
    if !digits.len().is_multiple_of(2) {
        return Err(format!("{text:?} is not hex: an odd number of digits"));
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| {
            digits
                .get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("{text:?} is not hex"))
        })
        .collect()
}

/// Two command-line arguments (a key and a value, or a range's ends), as [`arg_bytes`] reads
/// each.
///
/// # Errors
/// The first one's message, for `--hex` input that is not hex.
pub fn arg_pair(a: &str, b: &str, hex: bool) -> Result<(Vec<u8>, Vec<u8>), String> {
    Ok((arg_bytes(a, hex)?, arg_bytes(b, hex)?))
}

/// A `--from A --to B` range: from `A` (included) to before `B`, either end open when absent.
pub type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Reads `--from` and `--to` as [`arg_bytes`] reads each into a [`KeyRange`].
///
/// # Errors
/// The first one's message, for `--hex` input that is not hex.
pub fn key_range(from: Option<&str>, to: Option<&str>, hex: bool) -> Result<KeyRange, String> {
    let from = from.map(|t| arg_bytes(t, hex)).transpose()?;
    let to = to.map(|t| arg_bytes(t, hex)).transpose()?;
    Ok((
        from.map_or(Bound::Unbounded, Bound::Included),
        to.map_or(Bound::Unbounded, Bound::Excluded),
    ))
}

/// The last millisecond RFC 3339 can write: 9999-12-31T23:59:59.999Z.
const LAST_RFC3339_MS: u64 = 253_402_300_799_999;

/// A time of the engine's clock (ms since the epoch) in RFC 3339; a time past the year 9999
/// (a huge TTL or grace period, or a damaged file) as `after 9999-12-31`.
pub fn time_text(ms: u64) -> String {
    if ms > LAST_RFC3339_MS {
        return "after 9999-12-31".to_owned();
    }
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// How long ago `ms` was at `now_ms`, in human form (`3h 20m`); `0s` for the future.
pub fn age_text(now_ms: u64, ms: u64) -> String {
    let secs = now_ms.saturating_sub(ms) / 1000;
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}

/// Parses a duration as `20s`, `10m`, `1h`, `1h 30m` or `500ms`; a bare number is seconds.
///
/// # Errors
/// A message naming the forms accepted.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(secs) = text.trim().parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration ({e}): write 20s, 10m, 1h or 500ms"))
}

/// A kind as the tools print it.
pub fn kind_name(kind: cairn::Kind) -> &'static str {
    match kind {
        cairn::Kind::Put => "put",
        cairn::Kind::Delete => "delete",
        cairn::Kind::SingleDelete => "single_delete",
        cairn::Kind::RangeDelete => "range_delete",
    }
}

/// `part / whole` as a share, 0 for an empty whole.
pub fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        #[allow(clippy::cast_precision_loss, reason = "a share for people to read")]
        let r = part as f64 / whole as f64;
        r
    }
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("cannot encode the output: {e}"),
    }
}

/// The columns a level's row starts with, in `inspect levels` and `stats`.
pub const LEVEL_HEADER: [&str; 6] = [
    "LEVEL",
    "FILES",
    "BYTES",
    "ENTRIES",
    "POINT TOMBSTONES",
    "RANGE TOMBSTONES",
];

/// One level's tables summed: the columns of [`LEVEL_HEADER`].
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct LevelSums {
    /// The level.
    pub level: usize,
    /// Tables on it.
    pub files: usize,
    /// Their bytes on disk.
    pub bytes: u64,
    /// Point entries of every kind.
    pub entries: u64,
    /// `Delete` and `SingleDelete` entries.
    pub point_tombstones: u64,
    /// Range tombstone pieces.
    pub range_tombstones: u64,
}

impl LevelSums {
    /// The cells under [`LEVEL_HEADER`].
    pub fn cells(&self) -> Vec<String> {
        let sums = [
            self.bytes,
            self.entries,
            self.point_tombstones,
            self.range_tombstones,
        ];
        let mut cells = vec![format!("L{}", self.level), self.files.to_string()];
        cells.extend(sums.iter().map(u64::to_string));
        cells
    }

    /// Point and range tombstones over entries and range tombstones.
    pub fn tombstone_share(&self) -> f64 {
        ratio(
            self.point_tombstones.saturating_add(self.range_tombstones),
            self.entries.saturating_add(self.range_tombstones),
        )
    }
}

/// Prints rows under a header, each column as wide as its widest cell, in `| a | b |` form.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let widths: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .filter_map(|c| c.get(i).map(|s| s.chars().count()))
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |values: &mut dyn Iterator<Item = &str>| {
        let parts: Vec<String> = values
            .zip(&widths)
            .map(|(v, w)| format!("{v:<w$}"))
            .collect();
        println!("| {} |", parts.join(" | "));
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_print_as_text_or_hex_and_hex_arguments_round_trip() {
        assert_eq!(bytes_text(b"user/42"), "user/42");
        assert_eq!(bytes_text(&[0, 255, b'a']), "0x00ff61");
        assert_eq!(bytes_text(b"0x12"), "0x30783132");
        assert_eq!(
            arg_bytes("0x00ff61", true).as_deref(),
            Ok(&[0, 255, b'a'][..])
        );
        assert_eq!(arg_bytes("0x", true).as_deref(), Ok(&[][..]));
        assert!(arg_bytes("abc", true).is_err());
        assert!(arg_bytes("zz", true).is_err());
        assert_eq!(arg_bytes("zz", false).as_deref(), Ok(&b"zz"[..]));
    }

    #[test]
    fn durations_read_in_human_form_and_bare_numbers_are_seconds() {
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("60"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn times_past_the_year_9999_print_without_a_panic() {
        assert_eq!(time_text(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time_text(LAST_RFC3339_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(time_text(LAST_RFC3339_MS + 1), "after 9999-12-31");
        assert_eq!(time_text(u64::MAX), "after 9999-12-31");
    }
}
