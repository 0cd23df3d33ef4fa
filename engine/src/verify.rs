//! A database checked end to end without opening it (`cairn verify`, RocksDB's `ldb
//! checkconsistency` and `sst_dump --command=verify`).
//!
//! [`verify`] reads the MANIFEST that `CURRENT` names record by record, every table it lists
//! (every block, through the table's own checksums), and every write-ahead log in the directory,
//! and reports each damage it meets as [`Error::Corruption`] with the file and offset: a bad
//! checksum, a malformed record or edit, a table the MANIFEST names that is missing or has the
//! wrong size. It takes no lock and changes nothing, so it runs beside a stopped (or running)
//! service; beside a running one, files the writer deletes meanwhile may show as missing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cairn_fs::{FileSystem, RealFs};
use cairn_sstable::{InternalIterator, Table};
use cairn_wal::{LogReader, RecoveryMode};

use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::log_record::decode_record;
use crate::manifest::read_current;
use crate::version_edit::VersionEdit;

/// What [`verify`] read, and the damage it found.
#[derive(Debug)]
#[non_exhaustive]
pub struct VerifyReport {
    /// The MANIFEST `CURRENT` names.
    pub manifest: PathBuf,
    /// Its edits read whole.
    pub manifest_edits: u64,
    /// The tables the MANIFEST lists.
    pub tables: u64,
    /// Entries read from them (every data block is read to count them).
    pub table_entries: u64,
    /// The write-ahead logs in the directory.
    pub logs: u64,
    /// Their records read whole.
    pub log_records: u64,
    /// Each damage found, as `Error::Corruption` naming the file and offset (or `Io` for a
    /// file that could not be read), in the order met.
    pub damage: Vec<Error>,
}

impl VerifyReport {
    /// True when no damage was found.
    pub fn is_clean(&self) -> bool {
        self.damage.is_empty()
    }
}

/// Checks every block of every table the MANIFEST lists, every record of every log in `dir`,
/// and every edit of the MANIFEST.
///
/// # Errors
/// `InvalidArgument` if `dir` holds no database (no `CURRENT`); `Io` if the directory cannot be
/// listed or `CURRENT` read. Damage in the files is not an error: it is in the report.
pub fn verify(dir: impl AsRef<Path>) -> Result<VerifyReport> {
    let dir = dir.as_ref();
    let fs = RealFs;
    let mut report = VerifyReport {
        manifest: dir.join("CURRENT"),
        manifest_edits: 0,
        tables: 0,
        table_entries: 0,
        logs: 0,
        log_records: 0,
        damage: Vec::new(),
    };
    let name = read_current(&fs, dir)?.ok_or_else(|| {
        Error::invalid(format!(
            "{} holds no database (no CURRENT file)",
            dir.display()
        ))
    })?;
    let tables = if let Some(FileKind::Manifest(_)) = filename::parse(&name) {
        report.manifest = dir.join(&name);
        let manifest = report.manifest.clone();
        live_tables(&fs, &manifest, &mut report)
    } else {
        report.damage.push(Error::corruption(
            filename::current_path(dir),
            0,
            "CURRENT does not name a MANIFEST",
        ));
        BTreeMap::new()
    };
    for (number, size) in tables {
        report.tables += 1;
        check_table(
            &fs,
            &filename::table_path(dir, number),
            number,
            size,
            &mut report,
        );
    }
    for number in log_numbers(&fs, dir)? {
        report.logs += 1;
        check_log(&fs, &filename::log_path(dir, number), &mut report);
    }
    Ok(report)
}

/// Reads the MANIFEST's edits, recording damage, and returns the tables it lists at its end:
/// file number and size.
fn live_tables(fs: &dyn FileSystem, path: &Path, report: &mut VerifyReport) -> BTreeMap<u64, u64> {
    let mut tables: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    let mut reader = match LogReader::open(fs, path, RecoveryMode::SkipCorrupted) {
        Ok(r) => r,
        Err(e) => {
            report.damage.push(Error::from(e));
            return BTreeMap::new();
        }
    };
    loop {
        match reader.next_record() {
            Ok(Some((offset, record))) => {
                let Some(edit) = VersionEdit::decode(&record) else {
                    report
                        .damage
                        .push(Error::corruption(path, offset, "malformed version edit"));
                    continue;
                };
                report.manifest_edits += 1;
                apply(&mut tables, &edit);
            }
            Ok(None) => break,
            Err(e) => {
                report.damage.push(Error::from(e));
                break;
            }
        }
    }
    report
        .damage
        .extend(reader.skipped().iter().map(damage_error));
    tables
        .into_iter()
        .map(|((_, number), size)| (number, size))
        .collect()
}

fn apply(tables: &mut BTreeMap<(u32, u64), u64>, edit: &VersionEdit) {
    for (cf, _, number) in &edit.deleted_files {
        tables.remove(&(*cf, *number));
    }
    for (cf, _, file) in &edit.new_files {
        tables.insert((*cf, file.number), file.file_size);
    }
    for cf in &edit.dropped_cfs {
        tables.retain(|(id, _), _| id != cf);
    }
}

fn check_table(
    fs: &dyn FileSystem,
    path: &Path,
    number: u64,
    size: u64,
    report: &mut VerifyReport,
) {
    if !fs.exists(path) {
        report.damage.push(Error::corruption(
            path,
            0,
            "the MANIFEST lists this table but the file does not exist",
        ));
        return;
    }
    let table = match Table::open(fs, path, number, None) {
        Ok(t) => t,
        Err(e) => {
            report.damage.push(e.into());
            return;
        }
    };
    if table.file_size() != size {
        report.damage.push(Error::corruption(
            path,
            table.file_size().min(size),
            format!(
                "the MANIFEST says {size} bytes, the file has {}",
                table.file_size()
            ),
        ));
        return;
    }
    let mut iter = table.iter();
    let mut step = iter.seek_to_first();
    while step.is_ok() && iter.valid() {
        report.table_entries += 1;
        step = iter.next();
    }
    if let Err(e) = step {
        report.damage.push(e.into());
    }
}

fn check_log(fs: &dyn FileSystem, path: &Path, report: &mut VerifyReport) {
    let mut reader = match LogReader::open(fs, path, RecoveryMode::SkipCorrupted) {
        Ok(r) => r,
        Err(e) => {
            report.damage.push(Error::from(e));
            return;
        }
    };
    loop {
        match reader.next_record() {
            Ok(Some((offset, record))) => {
                if decode_record(&record).is_some() {
                    report.log_records += 1;
                } else {
                    report
                        .damage
                        .push(Error::corruption(path, offset, "malformed log record"));
                }
            }
            Ok(None) => break,
            Err(e) => {
                report.damage.push(Error::from(e));
                break;
            }
        }
    }
    report
        .damage
        .extend(reader.skipped().iter().map(damage_error));
}

fn damage_error(d: &cairn_wal::Damage) -> Error {
    Error::corruption(
        &d.file,
        d.offset,
        format!("{} ({} bytes unreadable)", d.kind, d.dropped_bytes()),
    )
}

fn log_numbers(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<u64>> {
    let mut numbers: Vec<u64> = fs
        .list(dir)?
        .iter()
        .filter_map(|name| match filename::parse(name) {
            Some(FileKind::Log(n)) => Some(n),
            _ => None,
        })
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Db, Options};

    fn built(dir: &Path) -> Result<()> {
        let db = Db::open(dir, Options::default())?;
        for i in 0..500 {
            db.put(format!("key{i:04}"), vec![b'v'; 100])?;
        }
        db.flush()?;
        db.put("in-the-log", "1")?;
        // Closing leaves the last write in the log.
        db.close()
    }

    fn file_of(dir: &Path, ext: &str) -> PathBuf {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        found.sort();
        found.pop().unwrap_or_default()
    }

    #[test]
    fn a_sound_database_verifies_clean_and_every_part_is_read() -> Result<()> {
        let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
        built(dir.path())?;
        let report = verify(dir.path())?;
        assert!(report.is_clean(), "{:?}", report.damage);
        assert_eq!(report.tables, 1);
        assert_eq!(report.table_entries, 500);
        assert!(report.logs >= 1 && report.log_records >= 1);
        assert!(report.manifest_edits >= 2);
        Ok(())
    }

    #[test]
    fn a_flipped_byte_in_a_table_a_log_or_a_missing_table_is_reported_with_its_file() -> Result<()>
    {
        let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
        built(dir.path())?;
        let table = file_of(dir.path(), "sst");
        let mut bytes = std::fs::read(&table).map_err(cairn_fs::Error::from)?;
        if let Some(b) = bytes.get_mut(100) {
            *b ^= 0xff;
        }
        std::fs::write(&table, &bytes).map_err(cairn_fs::Error::from)?;
        let log = file_of(dir.path(), "log");
        let mut bytes = std::fs::read(&log).map_err(cairn_fs::Error::from)?;
        if let Some(b) = bytes.get_mut(10) {
            *b ^= 0xff;
        }
        std::fs::write(&log, &bytes).map_err(cairn_fs::Error::from)?;
        let report = verify(dir.path())?;
        let files: Vec<&PathBuf> = report
            .damage
            .iter()
            .filter_map(|e| match e {
                Error::Corruption { file, .. } => Some(file),
                _ => None,
            })
            .collect();
        assert!(files.contains(&&table), "{:?}", report.damage);
        assert!(files.contains(&&log), "{:?}", report.damage);

        std::fs::remove_file(&table).map_err(cairn_fs::Error::from)?;
        let report = verify(dir.path())?;
        assert!(
            report
                .damage
                .iter()
                .any(|e| matches!(e, Error::Corruption { file, offset: 0, .. } if *file == table))
        );
        Ok(())
    }

    #[test]
    fn a_directory_without_a_database_is_an_invalid_argument() -> Result<()> {
        let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
        assert!(matches!(verify(dir.path()), Err(Error::InvalidArgument(_))));
        Ok(())
    }
}
