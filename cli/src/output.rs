//! What the operator commands share: opening a database with a message that says what to do,
//! keys and values as text or hex, times and ages, durations in human form, tables and JSON
//! on stdout, and the exit codes.
//!
//! Exit codes of the operator commands (`inspect`, `explain`, `audit`, `get`, `put`,
//! `delete`, `delete-range`, `scan`, `stats`, …): 0 done; 1 the answer is "no" (`get` found no
//! value, `audit` found traces); 2 the database could not be read or written (damaged:
//! `Corruption` names the file and offset; I/O); 3 bad arguments; 4 not found (no such
//! directory, not a database); 5 locked by another process.

use std::fmt::Write as _;
use std::ops::Bound;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use cairn::{Db, Options};

use crate::db_arg;

/// The command's answer is "no": `get` found nothing, `audit` found traces.
pub const NO: i32 = 1;
/// The database could not be read or written (damage, I/O).
pub const FAILED: i32 = 2;
/// Bad arguments.
pub const BAD_ARGS: i32 = 3;

/// Opens `dir` read-only: the command changes nothing on disk and takes no lock, so it runs
/// beside a live writer (reading the files as they were at the open) without blocking it.
///
/// # Errors
/// The exit code, once the reason is printed (see [`crate::db_arg`]).
pub fn open_read_only(dir: &Path) -> Result<Db, i32> {
    open_read_only_with(dir, Options::default())
}

/// [`open_read_only`] with `options`.
///
/// # Errors
/// The exit code, once the reason is printed (see [`crate::db_arg`]).
pub fn open_read_only_with(dir: &Path, options: Options) -> Result<Db, i32> {
    db_arg::check_database(dir, "")?;
    Db::open_read_only(dir, options).map_err(|e| db_arg::cannot_open(dir, &e))
}

/// Opens the database in `dir` for writing (`compact`, `flush`, `cf create`, …). No compaction
/// runs while it is open, so an ad hoc write changes only what it writes (and the flush of what
/// the log held), and cannot fail on unrelated work.
///
/// # Errors
/// The exit code, once the reason is printed (see [`crate::db_arg`]).
pub fn open_for_writing(dir: &Path) -> Result<Db, i32> {
    open_or_create(
        dir,
        false,
        Options::default().disable_auto_compactions(true),
    )
}

/// Opens `dir` for writing with `options`, creating a database there only if `create` (`put`
/// and `load`, whose `--create` the message for a directory without one names).
///
/// # Errors
/// The exit code, once the reason is printed (see [`crate::db_arg`]).
pub fn open_or_create(dir: &Path, create: bool, options: Options) -> Result<Db, i32> {
    if create {
        db_arg::check_creatable(dir)?;
    } else {
        db_arg::check_database(dir, "; `--create` makes one")?;
    }
    Db::open(dir, options).map_err(|e| db_arg::cannot_open(dir, &e))
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
            // One wording for what the caller named wrong, whatever the command.
            let _ = what;
            crate::bad_args(&e.to_string())
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

/// A key given on the command line, as [`arg_bytes`] reads it, refused when over the engine's
/// limit (no such key can exist), with the key cut short in the message.
///
/// # Errors
/// A message for `--hex` input that is not hex, or a key over the limit.
pub fn key_arg(text: &str, hex: bool) -> Result<Vec<u8>, String> {
    let key = arg_bytes(text, hex)?;
    if key.len() > cairn::MAX_KEY_LEN {
        return Err(format!(
            "a key of {} bytes ({}) is over the limit of {} bytes",
            key.len(),
            short_key(&key),
            cairn::MAX_KEY_LEN
        ));
    }
    Ok(key)
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
    let from = from.map(|t| key_arg(t, hex)).transpose()?;
    let to = to.map(|t| key_arg(t, hex)).transpose()?;
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

/// The time ages in `dir` are measured from: `now_ms`, the system clock's; or none for a
/// database the stress harness wrote on its manual clock, whose times are not the calendar's
/// (ages against today would read as decades), said once on stderr.
pub fn age_clock(dir: &Path, now_ms: u64) -> Option<u64> {
    if dir.join(cairn_stress::STRESS_MARKER).exists() {
        eprintln!(
            "cairn: {} was written on the stress harness's manual clock: ages are not shown",
            dir.display()
        );
        return None;
    }
    Some(now_ms)
}

/// How long ago `ms` was at `now`, in ms; none without a clock ([`age_clock`]).
pub fn age_ms(now: Option<u64>, ms: u64) -> Option<u64> {
    now.map(|now| now.saturating_sub(ms))
}

/// How long ago `ms` was at `now`, in human form (`3h 20m`; `0s` for the future), or
/// `unknown (manual clock)` without a clock ([`age_clock`]).
pub fn age_text(now: Option<u64>, ms: u64) -> String {
    match age_ms(now, ms) {
        Some(age) => humantime::format_duration(Duration::from_secs(age / 1000)).to_string(),
        None => "unknown (manual clock)".to_owned(),
    }
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

/// Parses a size in bytes: `4096`, `64KiB`, `1MiB`, `2GiB` (also `KB`/`MB`/`GB` as powers of
/// 1000, and `K`/`M`/`G` as powers of 1024, any case).
///
/// # Errors
/// A message naming the forms accepted.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(split);
    let scale: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => usize::MAX,
    };
    digits
        .parse::<usize>()
        .ok()
        .filter(|_| scale != usize::MAX)
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{text:?} is not a size: write 4096, 64KiB or 1MiB"))
}

/// The most worker threads any command takes.
pub const MAX_THREADS: usize = 64;

/// Parses `--threads`: 1 to [`MAX_THREADS`], the same bounds for every command.
///
/// # Errors
/// A message giving the bounds.
pub fn parse_threads(text: &str) -> Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_THREADS).contains(n))
        .ok_or_else(|| format!("{text:?}: give 1 to {MAX_THREADS} threads"))
}

/// Checks, before a run starts, that a file it will write at the end can be written: an
/// existing regular file opened for writing (not truncated), or a new one created and removed
/// again. Anything else (a directory, a FIFO, a device, a directory that is missing or refuses
/// new files) is refused. `flag` names the option in the message.
///
/// # Errors
/// [`BAD_ARGS`], once the reason is printed.
pub fn check_output_path(flag: &str, path: &Path) -> Result<(), i32> {
    let fail = |why: &str| {
        eprintln!("cairn: bad arguments: {flag} {}: {why}", path.display());
        Err(BAD_ARGS)
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => fail("is a directory"),
        Ok(meta) if !meta.is_file() => fail("is not a regular file"),
        Ok(_) => match std::fs::OpenOptions::new().append(true).open(path) {
            Ok(_) => Ok(()),
            Err(e) => fail(&format!("cannot be written: {e}")),
        },
        Err(_) => {
            let probe = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path);
            match probe {
                Ok(_) => {
                    std::fs::remove_file(path).or_else(|e| fail(&format!("cannot be written: {e}")))
                }
                Err(e) => fail(&format!("cannot be created: {e}")),
            }
        }
    }
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

/// `n` and `noun`, plural unless `n` is 1: `1 trace`, `3 traces`, `0 entries`.
pub fn count(n: usize, noun: &str) -> String {
    let consonant_y = noun
        .strip_suffix('y')
        .filter(|stem| !stem.ends_with(['a', 'e', 'i', 'o', 'u']));
    if n == 1 {
        format!("1 {noun}")
    } else if let Some(stem) = consonant_y {
        format!("{n} {stem}ies")
    } else {
        format!("{n} {noun}s")
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

/// Writes `value` as JSON to `path`; says on stderr why not when it cannot.
pub fn write_json<T: serde::Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), ()> {
    let written = serde_json::to_string_pretty(value)
        .map_err(std::io::Error::other)
        .and_then(|json| std::fs::write(path, json));
    written.map_err(|e| {
        eprintln!("cairn: cannot write the report to {}: {e}", path.display());
    })
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
    fn sizes_read_with_binary_and_decimal_units_and_threads_have_one_bound() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("1mib"), Ok(1 << 20));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert_eq!(parse_size("1MB"), Ok(1_000_000));
        for bad in [
            "",
            "MiB",
            "1 parsec",
            "-1",
            "1.5MiB",
            "99999999999999999999GiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        assert_eq!(count(1, "key"), "1 key");
        assert_eq!(count(2, "key"), "2 keys");
        assert_eq!(count(0, "entry"), "0 entries");
        assert_eq!(count(3, "trace"), "3 traces");
        assert_eq!(parse_threads("1"), Ok(1));
        assert_eq!(parse_threads("64"), Ok(64));
        assert!(parse_threads("0").is_err());
        assert!(parse_threads("65").is_err());
    }

    #[test]
    fn times_past_the_year_9999_print_without_a_panic() {
        assert_eq!(time_text(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time_text(LAST_RFC3339_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(time_text(LAST_RFC3339_MS + 1), "after 9999-12-31");
        assert_eq!(time_text(u64::MAX), "after 9999-12-31");
    }
}
