//! The erasure figure: how many deleted values an engine still holds on disk, file by file,
//! after a delete-heavy phase, while it settles on its own, after one full compaction (and as
//! long again after it: files a compaction replaced may go only when nothing reads them), and
//! after close. This is the figure no engine publishes.
//!
//! Every value carries a marker naming its key and version ([`crate::value::marked`]), and the
//! engine runs with compression off (a compressed block hides its markers), so a scan of every
//! byte of every file in the database directory finds every copy of every value, wherever it
//! lies: tables, logs, journals, manifests. Files the engine unlinked but still holds open are
//! read too, through `/proc/self/fd` (the engine runs in this process; Linux only).
//!
//! The scan fails closed: at every sample it must find the current version of every live key,
//! or it is blind (the engine compressed after all, or a file could not be read) and the run
//! is an error, never a figure. On Cairn, whose compaction erases what it drops, a deleted value
//! still on disk after the full compaction fails the run; a peer's figure is reported as it is.
//!
//! The workload is single-threaded and deterministic: fill, overwrite a fifth, flush, then
//! delete three keys in five (half of them by range deletes, emulated on fjall), with flushes
//! between. Values superseded by an overwrite are counted apart from deleted ones.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::engine::{self, EngineKind, EngineSettings, Sequencer, StressEngine, WriteOp};
use crate::harness::StressError;
use crate::value::{MARK_LEN, find_marks, key, key_index, marked};

/// Keys deleted together, by one range delete or one batch of point deletes.
const GROUP: usize = 16;

/// What an erasure run does.
#[derive(Debug, Clone)]
pub struct ErasureConfig {
    /// The engine under test.
    pub engine: EngineKind,
    /// Keys written.
    pub keys: usize,
    /// Bytes per value (at least a marker's).
    pub value_size: usize,
    /// Memtable size in bytes (small, so the run builds several levels).
    pub memtable_size: usize,
    /// How long the engine settles on its own before the full compaction.
    pub settle: Duration,
    /// How often the directory is scanned while it settles.
    pub sample_every: Duration,
    /// Cairn's delete persistence deadline, if any (the peers have none).
    pub deadline: Option<Duration>,
}

impl Default for ErasureConfig {
    fn default() -> Self {
        Self {
            engine: EngineKind::Cairn,
            keys: 20_000,
            value_size: 100,
            memtable_size: 256 << 10,
            settle: Duration::from_secs(10),
            sample_every: Duration::from_secs(1),
            deadline: None,
        }
    }
}

impl ErasureConfig {
    /// Checks the settings.
    ///
    /// # Errors
    /// A message naming the bad setting.
    pub fn validate(&self) -> Result<(), String> {
        if !self.engine.compiled_in() {
            return Err(engine::not_compiled_in(self.engine).to_string());
        }
        if !(GROUP * 5..=10_000_000).contains(&self.keys) {
            return Err(format!("keys must be 80..=10000000, not {}", self.keys));
        }
        if !(MARK_LEN..=1 << 20).contains(&self.value_size) {
            return Err(format!(
                "value size must be {MARK_LEN}..=1048576, not {}",
                self.value_size
            ));
        }
        if self.keys as u64 * self.value_size as u64 > 1 << 30 {
            return Err(format!(
                "{} keys of {} bytes is over 1 GiB: the run is for a figure, not a load test",
                self.keys, self.value_size
            ));
        }
        if self.memtable_size < 4 << 10 {
            return Err(format!(
                "memtable size must be at least 4KiB, not {}",
                self.memtable_size
            ));
        }
        if self.sample_every.is_zero() {
            return Err("the sample interval must be above zero".into());
        }
        if self.deadline.is_some() && self.engine != EngineKind::Cairn {
            return Err(format!(
                "--deadline is Cairn's delete persistence deadline; {} has none",
                self.engine.name()
            ));
        }
        Ok(())
    }
}

/// One file's share of a sample.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileFinding {
    /// The path under the database directory (`(unlinked) …` for a file deleted but open).
    pub path: String,
    /// `log`, `table`, `manifest` or `other`.
    pub class: String,
    /// Its size.
    pub bytes: u64,
    /// Distinct deleted values in it.
    pub deleted: u64,
    /// Distinct superseded values in it.
    pub superseded: u64,
}

/// The directory at one moment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErasureSample {
    /// Seconds since the delete phase ended.
    pub seconds: f64,
    /// `after deletes`, `settling`, `after full compaction` (at once, then while it settles
    /// again) or `after close`.
    pub phase: String,
    /// Distinct deleted values anywhere on disk.
    pub deleted_found: u64,
    /// Distinct superseded values anywhere on disk.
    pub superseded_found: u64,
    /// Distinct live values found (every one must be: else the scan is blind).
    pub live_found: u64,
    /// Bytes of every file read.
    pub bytes: u64,
    /// Distinct deleted values in each class of file (`log`, `table`, `manifest`, `other`).
    pub deleted_by_class: BTreeMap<String, u64>,
    /// The files that hold a deleted or superseded value.
    pub files: Vec<FileFinding>,
}

/// What an erasure run found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErasureReport {
    /// The engine under test.
    pub engine: String,
    /// Always false: compression would hide the markers.
    pub compression: bool,
    /// Keys written.
    pub keys: usize,
    /// Values (key, version) whose key ended deleted.
    pub deleted_values: u64,
    /// Older versions of keys still live.
    pub superseded_values: u64,
    /// Current versions of live keys.
    pub live_values: u64,
    /// Cairn's delete persistence deadline, in seconds, if set.
    pub deadline_secs: Option<f64>,
    /// The samples, in time order.
    pub samples: Vec<ErasureSample>,
    /// Why the run failed, if it did: the engine served something other than the live keys
    /// (any engine), or deleted values outlived the full compaction (Cairn).
    pub failure: Option<String>,
    /// A Ctrl-C or SIGTERM cut the settling short; the database was still closed and scanned.
    #[serde(default)]
    pub interrupted: bool,
}

impl ErasureReport {
    /// The process exit code: 1 if the run failed or a signal stopped it before its full
    /// compaction (it measured less than it says), else 0.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.failure.is_some() || !self.compacted())
    }

    /// Whether the run reached its full compaction.
    fn compacted(&self) -> bool {
        self.samples
            .iter()
            .any(|s| s.phase == "after full compaction")
    }

    /// The summary's last line: the verdict on Cairn, the measurement on a peer.
    fn verdict(&self) -> String {
        match (&self.failure, self.compacted()) {
            (Some(why), _) => format!("FAIL: {why}"),
            (None, false) => "INTERRUPTED: stopped before the full compaction".to_string(),
            (None, true) if self.engine == "cairn" => "PASS".to_string(),
            (None, true) => format!(
                "MEASURED: the figure is the result (no verdict on {}'s retention)",
                self.engine
            ),
        }
    }

    /// A human summary: each sample's counts, and the files of the last that hold deleted
    /// values.
    pub fn summary(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}: {} keys, compression off; {} deleted values, {} superseded, {} live",
            self.engine, self.keys, self.deleted_values, self.superseded_values, self.live_values
        );
        for s in &self.samples {
            let by_class: Vec<String> = s
                .deleted_by_class
                .iter()
                .map(|(class, n)| format!("{class} {n}"))
                .collect();
            let _ = writeln!(
                out,
                "{:>7.1}s  {:<22} deleted values on disk {:>6} ({:>5.1}%) [{}], superseded {:>6}, {} bytes",
                s.seconds,
                s.phase,
                s.deleted_found,
                percent(s.deleted_found, self.deleted_values),
                by_class.join(", "),
                s.superseded_found,
                s.bytes
            );
        }
        if let Some(last) = self.samples.last() {
            for f in last.files.iter().filter(|f| f.deleted > 0) {
                let _ = writeln!(
                    out,
                    "  still holds {} deleted values: {} ({}, {} bytes)",
                    f.deleted, f.path, f.class, f.bytes
                );
            }
        }
        if self.interrupted {
            let _ = writeln!(
                out,
                "interrupted: the settling was cut short by a signal; the database was closed \
                 and scanned"
            );
        }
        let _ = write!(out, "{}", self.verdict());
        out
    }
}

#[expect(clippy::cast_precision_loss, reason = "a share for people to read")]
fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// Which values the run wrote, by fate.
#[derive(Debug, Default)]
struct Fates {
    deleted: HashSet<(u32, u32)>,
    superseded: HashSet<(u32, u32)>,
    live: HashSet<(u32, u32)>,
}

/// Runs the erasure workload on a fresh database of `config.engine` at `dir`, sampling the
/// directory as it goes.
///
/// # Errors
/// `Config` for bad settings; `Engine` if the engine fails; `Io` if a file of the directory
/// cannot be read or the scan is blind (it missed a live value).
pub fn run_erasure(config: &ErasureConfig, dir: &Path) -> Result<ErasureReport, StressError> {
    config.validate().map_err(StressError::Config)?;
    let engine = open(config, dir)?;
    let fates = write_and_delete(engine.as_ref(), config)?;
    let mut report = ErasureReport {
        engine: config.engine.name().to_string(),
        compression: false,
        keys: config.keys,
        deleted_values: fates.deleted.len() as u64,
        superseded_values: fates.superseded.len() as u64,
        live_values: fates.live.len() as u64,
        deadline_secs: config.deadline.map(|d| d.as_secs_f64()),
        samples: Vec::new(),
        failure: None,
        interrupted: false,
    };
    let mut wrong = check_contents(engine.as_ref(), &fates, "after the deletes")?;
    let started = Instant::now();
    let mut take = |phase: &str| -> Result<bool, StressError> {
        let sample = sample(dir, &fates, phase, started.elapsed().as_secs_f64())?;
        report.samples.push(sample);
        Ok(!crate::interrupt::stop_requested())
    };
    let mut going = take("after deletes")?;
    let settle = |take: &mut dyn FnMut(&str) -> Result<bool, StressError>, phase: &str| {
        let from = Instant::now();
        while from.elapsed() < config.settle {
            let left = config.settle.saturating_sub(from.elapsed());
            std::thread::sleep(config.sample_every.min(left));
            if !take(phase)? {
                return Ok(false);
            }
        }
        Ok::<bool, StressError>(true)
    };
    going = going && settle(&mut take, "settling")?;
    if going {
        engine.compact_all()?;
        wrong = wrong.or(check_contents(
            engine.as_ref(),
            &fates,
            "after the full compaction",
        )?);
        going = take("after full compaction")?;
        // Files a compaction replaced may go only when nothing reads them any more.
        going = going && settle(&mut take, "after full compaction")?;
    }
    engine.close()?;
    take("after close")?;
    report.interrupted = !going;
    report.failure = wrong.or_else(|| cairn_failure(config.engine, &report.samples));
    Ok(report)
}

/// What the engine serves must be exactly the live keys at their last versions: else a value
/// it never deleted would be counted as a deleted value it kept. A mismatch is the engine's
/// failure (the figure is then worthless), returned as its description.
fn check_contents(
    engine: &dyn StressEngine,
    fates: &Fates,
    when: &str,
) -> Result<Option<String>, StressError> {
    let mut served = 0;
    for (k, v) in engine.scan_all()? {
        let mark = find_marks(&v).next();
        let ok = mark
            .is_some_and(|m| fates.live.contains(&m) && key_index(&k) == usize::try_from(m.0).ok());
        if !ok {
            return Ok(Some(format!(
                "{when}: the engine serves {:?} = {:?}, which is no live key's last value (a \
                 delete not applied, or a wrong value)",
                String::from_utf8_lossy(&k),
                mark
            )));
        }
        served += 1;
    }
    Ok((served != fates.live.len()).then(|| {
        format!(
            "{when}: the engine serves {served} keys, not the {} live ones",
            fates.live.len()
        )
    }))
}

/// On Cairn, deleted values still on disk after the full compaction: its compaction erases
/// what it drops, and the logs that held them are deleted once flushed.
fn cairn_failure(engine: EngineKind, samples: &[ErasureSample]) -> Option<String> {
    if engine != EngineKind::Cairn {
        return None;
    }
    let after = samples
        .iter()
        .skip_while(|s| s.phase != "after full compaction")
        .find(|s| s.deleted_found > 0)?;
    Some(format!(
        "{} deleted values outlived a full compaction ({} at {:.1}s): {}",
        after.deleted_found,
        after.phase,
        after.seconds,
        after
            .files
            .iter()
            .filter(|f| f.deleted > 0)
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

fn open(config: &ErasureConfig, dir: &Path) -> Result<Box<dyn StressEngine>, StressError> {
    let mut cairn = cairn::Options::default()
        .memtable_size(config.memtable_size)
        .level_base_bytes(config.memtable_size as u64 * 4)
        .target_file_size(config.memtable_size as u64);
    if let Some(deadline) = config.deadline {
        cairn = cairn.delete_persistence_deadline(deadline);
    }
    let settings = EngineSettings {
        kind: config.engine,
        memtable_size: config.memtable_size,
        target_file_size: config.memtable_size as u64,
        level_base_bytes: config.memtable_size as u64 * 4,
        grace: Duration::ZERO,
        compression: false,
        cairn,
        sequencer: Arc::new(Sequencer::default()),
    };
    Ok(engine::open(dir, &settings, engine::OpenMode::Fresh)?)
}

/// The workload (see the module doc): what became of every value written.
fn write_and_delete(
    engine: &dyn StressEngine,
    config: &ErasureConfig,
) -> Result<Fates, StressError> {
    let n = u32::try_from(config.keys).map_err(|_| StressError::Config("too many keys".into()))?;
    let put = |i: u32, v: u32| WriteOp::Put {
        key: key(i as usize),
        value: marked(i, v, config.value_size),
    };
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let ops: Vec<WriteOp> = chunk.iter().map(|&i| put(i, 1)).collect();
        engine.write(&ops, false)?;
    }
    let overwritten: Vec<u32> = (0..n).filter(|i| i % 5 == 2).collect();
    for chunk in overwritten.chunks(100) {
        let ops: Vec<WriteOp> = chunk.iter().map(|&i| put(i, 2)).collect();
        engine.write(&ops, false)?;
    }
    engine.flush()?;
    let version = |i: u32| if i % 5 == 2 { 2 } else { 1 };
    let groups = config.keys / GROUP;
    let mut fates = Fates::default();
    for g in 0..groups {
        let (start, end) = (g * GROUP, (g + 1) * GROUP);
        let deleted = g % 5 < 3;
        for i in (start..end).filter_map(|i| u32::try_from(i).ok()) {
            let mut versions = (1..=version(i)).map(|v| (i, v));
            if deleted {
                fates.deleted.extend(versions);
            } else {
                fates.live.extend(versions.next_back());
                fates.superseded.extend(versions);
            }
        }
        if deleted {
            engine.write(&delete_group(g, start..end), false)?;
        }
        if g % (groups / 4).max(1) == 0 {
            engine.flush()?;
        }
    }
    for i in (groups * GROUP..config.keys).filter_map(|i| u32::try_from(i).ok()) {
        let mut versions = (1..=version(i)).map(|v| (i, v));
        fates.live.extend(versions.next_back());
        fates.superseded.extend(versions);
    }
    Ok(fates)
}

/// Deletes group `g` (the keys `range`) in one batch: by a range delete in every other deleted
/// group, by point deletes in the rest.
fn delete_group(g: usize, range: std::ops::Range<usize>) -> Vec<WriteOp> {
    if g.is_multiple_of(2) {
        vec![WriteOp::DeleteRange {
            start: key(range.start),
            end: key(range.end),
            covered: range.map(key).collect(),
        }]
    } else {
        range.map(|i| WriteOp::Delete { key: key(i) }).collect()
    }
}

/// Scans `dir` and the files this process holds open under it, unlinked.
/// Scans before a sample counts as blind: a compaction that finishes during a scan deletes
/// inputs the scan listed and writes an output it did not, so one scan may miss live values.
const SCAN_ATTEMPTS: u32 = 20;

/// Samples `dir` (see [`scan`]), again while a scan misses live values a compaction moved
/// under it; blind on every attempt is an error.
fn sample(
    dir: &Path,
    fates: &Fates,
    phase: &str,
    seconds: f64,
) -> Result<ErasureSample, StressError> {
    let mut attempt = 1;
    loop {
        match scan(dir, fates, phase, seconds) {
            Err(StressError::Io(e)) if attempt < SCAN_ATTEMPTS && e.kind() == BLIND => {
                std::thread::sleep(Duration::from_millis(50));
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// The error kind of a blind scan.
const BLIND: std::io::ErrorKind = std::io::ErrorKind::Other;

/// Scans every file under `dir` and those unlinked but held open for the values' markers.
fn scan(
    dir: &Path,
    fates: &Fates,
    phase: &str,
    seconds: f64,
) -> Result<ErasureSample, StressError> {
    let mut files = Vec::new();
    walk(dir, dir, &mut files)?;
    files.extend(unlinked_open(dir));
    let (mut deleted, mut superseded) = (HashSet::new(), HashSet::new());
    let (mut live, mut live_in_tables) = (HashSet::new(), HashSet::new());
    let mut findings = Vec::new();
    let mut by_class: BTreeMap<&str, HashSet<(u32, u32)>> = BTreeMap::new();
    let mut bytes = 0;
    for (path, source) in files {
        // One file at a time: the directory may be far larger than memory.
        let data = match std::fs::read(&source) {
            Ok(data) => data,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        bytes += data.len() as u64;
        let kind = class(&path);
        let (mut d, mut s) = (HashSet::new(), HashSet::new());
        for mark in marks_in(&data, kind) {
            if fates.deleted.contains(&mark) {
                d.insert(mark);
            } else if fates.superseded.contains(&mark) {
                s.insert(mark);
            } else if fates.live.contains(&mark) {
                live.insert(mark);
                if kind == "table" {
                    live_in_tables.insert(mark);
                }
            }
        }
        if !d.is_empty() || !s.is_empty() {
            by_class.entry(kind).or_default().extend(&d);
            findings.push(FileFinding {
                class: kind.to_string(),
                path,
                bytes: data.len() as u64,
                deleted: d.len() as u64,
                superseded: s.len() as u64,
            });
        }
        deleted.extend(d);
        superseded.extend(s);
    }
    // Every live value was flushed before the deletes began, so each is in some table: a scan
    // that misses one there cannot see the tables (compressed blocks, a format it cannot read),
    // whatever a log still holds.
    if live_in_tables.len() < fates.live.len() {
        return Err(StressError::Io(std::io::Error::new(
            BLIND,
            format!(
                "the byte scan is blind ({phase}): it found {} of {} live values in the tables of {}, \
             so it cannot count deleted ones (compressed blocks, or files it could not read)",
                live_in_tables.len(),
                fates.live.len(),
                dir.display()
            ),
        )));
    }
    findings.sort_by(|a, b| b.deleted.cmp(&a.deleted).then(a.path.cmp(&b.path)));
    Ok(ErasureSample {
        seconds,
        phase: phase.to_string(),
        deleted_found: deleted.len() as u64,
        superseded_found: superseded.len() as u64,
        live_found: live.len() as u64,
        bytes,
        deleted_by_class: by_class
            .into_iter()
            .map(|(class, values)| (class.to_string(), values.len() as u64))
            .collect(),
        files: findings,
    })
}

/// LevelDB-framed logs (Cairn's and RocksDB's WAL and MANIFEST) cut records into 32 KiB blocks,
/// each behind a 7-byte header: a marker across a block boundary has a header inside it.
const LOG_BLOCK: usize = 32 * 1024;
const LOG_HEADER: usize = 7;

/// The markers in a file of class `kind`: for logs and manifests, also those found once the
/// block headers are taken out.
fn marks_in(data: &[u8], kind: &str) -> HashSet<(u32, u32)> {
    let mut found: HashSet<(u32, u32)> = find_marks(data).collect();
    if matches!(kind, "log" | "manifest") && data.len() > LOG_BLOCK {
        let payload: Vec<u8> = data
            .chunks(LOG_BLOCK)
            .flat_map(|block| block.iter().skip(LOG_HEADER).copied())
            .collect();
        found.extend(find_marks(&payload));
    }
    found
}

/// Every regular file under `dir` (recursively): its name under `root`, and where to read it.
fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let kind = match entry.file_type() {
            Ok(kind) => kind,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if kind.is_dir() {
            walk(root, &path, out)?;
        } else if kind.is_file() {
            let name = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            out.push((name, path));
        }
    }
    Ok(())
}

/// Files under `dir` this process still holds open after they were unlinked, read through
/// their descriptors (Linux's `/proc/self/fd`; none elsewhere).
fn unlinked_open(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(root) = dir.canonicalize() else {
        return Vec::new();
    };
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for fd in fds.flatten() {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        let Some(path) = target.strip_suffix(" (deleted)").map(PathBuf::from) else {
            continue;
        };
        let Ok(name) = path.strip_prefix(&root) else {
            continue;
        };
        if seen.insert(path.clone()) {
            out.push((format!("(unlinked) {}", name.display()), fd.path()));
        }
    }
    out
}

/// What kind of file `path` is, by the names the engines give them.
fn class(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or(path);
    let extension = Path::new(name).extension().and_then(|e| e.to_str());
    if path.contains("journal") || matches!(extension, Some("log" | "jnl")) {
        "log"
    } else if extension == Some("sst") || path.contains("/tables/") {
        "table"
    } else if name.starts_with("MANIFEST") || name.contains("version") || name == "manifest" {
        "manifest"
    } else {
        "other"
    }
}

/// Lines of a chart by name: (seconds, count) points.
pub type Lines = BTreeMap<String, Vec<(f64, u64)>>;

/// The samples as series for a chart: per file class, deleted values found at each sample's
/// time (plus `all`, the distinct total), with the phases' first times.
pub fn series(report: &ErasureReport) -> (Lines, Vec<(f64, String)>) {
    let mut lines: BTreeMap<String, Vec<(f64, u64)>> = BTreeMap::new();
    let mut phases: Vec<(f64, String)> = Vec::new();
    for s in &report.samples {
        lines
            .entry("all (distinct)".into())
            .or_default()
            .push((s.seconds, s.deleted_found));
        for class in ["log", "table", "manifest", "other"] {
            let n = s.deleted_by_class.get(class).copied().unwrap_or(0);
            lines.entry(class.into()).or_default().push((s.seconds, n));
        }
        if phases.last().is_none_or(|(_, p)| *p != s.phase) {
            phases.push((s.seconds, s.phase.clone()));
        }
    }
    lines.retain(|name, points| name.starts_with("all") || points.iter().any(|&(_, n)| n > 0));
    (lines, phases)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick(engine: EngineKind) -> ErasureConfig {
        ErasureConfig {
            engine,
            keys: 3_000,
            memtable_size: 64 << 10,
            settle: Duration::from_millis(300),
            sample_every: Duration::from_millis(100),
            ..ErasureConfig::default()
        }
    }

    #[test]
    fn cairn_holds_deleted_values_after_the_deletes_and_none_after_a_full_compaction()
    -> Result<(), StressError> {
        let dir = tempfile::tempdir()?;
        let report = run_erasure(&quick(EngineKind::Cairn), dir.path())?;
        let first = report.samples.first().map_or(0, |s| s.deleted_found);
        assert!(
            first > 0,
            "nothing deleted was found at first: {}",
            report.summary()
        );
        // 187 groups of 16; three in five deleted (113 groups), a fifth of keys with 2 versions.
        assert!(report.deleted_values > 1_800, "{}", report.summary());
        assert_eq!(report.failure, None, "{}", report.summary());
        for s in report
            .samples
            .iter()
            .skip_while(|s| s.phase != "after full compaction")
        {
            assert_eq!(s.deleted_found, 0, "{}", report.summary());
            assert_eq!(s.live_found, report.live_values);
        }
        Ok(())
    }

    #[test]
    fn a_scan_that_misses_a_live_value_is_an_error_not_a_figure() -> Result<(), StressError> {
        let dir = tempfile::tempdir()?;
        let fates = Fates {
            live: [(1, 1), (2, 1)].into_iter().collect(),
            ..Fates::default()
        };
        std::fs::write(dir.path().join("000001.sst"), marked(1, 1, 40))?;
        let blind = sample(dir.path(), &fates, "test", 0.0);
        assert!(matches!(blind, Err(StressError::Io(_))), "{blind:?}");
        // A log that holds every value does not make up for tables the scan cannot see.
        std::fs::write(dir.path().join("000002.log"), marked(2, 1, 40))?;
        let blind = sample(dir.path(), &fates, "test", 0.0);
        assert!(matches!(blind, Err(StressError::Io(_))), "{blind:?}");
        std::fs::write(dir.path().join("000003.sst"), marked(2, 1, 40))?;
        let seen = sample(dir.path(), &fates, "test", 0.0)?;
        assert_eq!(seen.live_found, 2);
        Ok(())
    }

    #[test]
    fn a_marker_cut_by_a_log_block_header_is_found() {
        let mut log = vec![b'.'; LOG_BLOCK - 10];
        let mark = marked(5, 6, MARK_LEN);
        let (head, tail) = mark.split_at(10);
        log.extend_from_slice(head);
        log.extend_from_slice(&[0xEE; LOG_HEADER]);
        log.extend_from_slice(tail);
        assert!(
            find_marks(&log).next().is_none(),
            "the header hides it from a plain scan"
        );
        assert!(marks_in(&log, "log").contains(&(5, 6)));
        assert!(
            marks_in(&log, "table").is_empty(),
            "tables are not log-framed"
        );
    }

    /// A delete the engine did not apply would be counted as a deleted value it kept: the run
    /// reads its contents back and fails instead.
    #[test]
    fn an_engine_that_misses_a_delete_fails_the_run_rather_than_the_figure()
    -> Result<(), StressError> {
        use crate::engine::model::{Bug, ModelEngine, Store};
        for (bug, wrong) in [(None, false), (Some(Bug::RangeDeleteMissesLast), true)] {
            let store = std::sync::Arc::new(std::sync::Mutex::new(Store::default()));
            let sequencer = Arc::new(Sequencer::default());
            let engine = ModelEngine::open(&store, &sequencer, bug, engine::OpenMode::Fresh);
            let fates = write_and_delete(&engine, &quick(EngineKind::Cairn))?;
            let found = check_contents(&engine, &fates, "test")?;
            assert_eq!(found.is_some(), wrong, "{bug:?}: {found:?}");
        }
        Ok(())
    }

    #[test]
    fn deleted_values_past_a_full_compaction_fail_cairn_alone() {
        let sample = |phase: &str, deleted_found| ErasureSample {
            seconds: 0.0,
            phase: phase.into(),
            deleted_found,
            superseded_found: 0,
            live_found: 0,
            bytes: 0,
            deleted_by_class: BTreeMap::new(),
            files: Vec::new(),
        };
        let samples = [
            sample("after deletes", 9),
            sample("after full compaction", 1),
        ];
        assert!(cairn_failure(EngineKind::Cairn, &samples).is_some());
        assert!(cairn_failure(EngineKind::Fjall, &samples).is_none());
        let clean = [
            sample("after deletes", 9),
            sample("after full compaction", 0),
        ];
        assert!(cairn_failure(EngineKind::Cairn, &clean).is_none());
    }
}
