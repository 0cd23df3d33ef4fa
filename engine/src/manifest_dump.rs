//! A MANIFEST read edit by edit, for operators (`cairn inspect manifest`).
//!
//! [`read_manifest`] decodes the version edits of the MANIFEST that `CURRENT` names, in the
//! order they were written, without opening the database: it takes no lock and changes
//! nothing, so it runs beside a stopped (or running) service. It shows what the edits say,
//! not whether they apply; opening the database checks that.

use std::path::{Path, PathBuf};

use cairn_fs::{FileSystem, RealFs};
use cairn_sstable::SeqNo;

use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::manifest::{for_each_edit, read_current};
use crate::stats::TableInfo;
use crate::version_edit::VersionEdit;

/// The MANIFEST `CURRENT` names, edit by edit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ManifestDump {
    /// The MANIFEST's path.
    pub path: PathBuf,
    /// Its file number.
    pub number: u64,
    /// Its edits in the order they were written. A torn last edit (a crash while appending)
    /// is left out, as opening the database leaves it out.
    pub edits: Vec<ManifestEdit>,
}

/// One version edit: the fields it sets, and the tables and column families it adds or drops.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ManifestEdit {
    /// Where the edit's record starts in the MANIFEST.
    pub offset: u64,
    /// Logs below this number are no longer needed for recovery.
    pub log_number: Option<u64>,
    /// The next file number to hand out.
    pub next_file_number: Option<u64>,
    /// The last sequence number written.
    pub last_seqno: Option<SeqNo>,
    /// The next column family id to hand out.
    pub next_cf_id: Option<u32>,
    /// Column families created: id and name.
    pub added_column_families: Vec<(u32, String)>,
    /// Column families dropped, by id.
    pub dropped_column_families: Vec<u32>,
    /// Tables added: column family id and the table.
    pub added_tables: Vec<(u32, TableInfo)>,
    /// Tables removed: column family id, level and file number.
    pub deleted_tables: Vec<(u32, usize, u64)>,
}

/// Reads the MANIFEST that `CURRENT` in `dir` names.
///
/// Beside a running writer it reads the MANIFEST current when it finishes: if the writer rolls
/// over to a new one meanwhile (deleting the old), it reads the new one.
///
/// # Errors
/// `InvalidArgument` if `dir` holds no `CURRENT`; `Corruption` (with the file and offset) if
/// `CURRENT` or an edit is damaged; `Io` if a file cannot be read.
pub fn read_manifest(dir: impl AsRef<Path>) -> Result<ManifestDump> {
    let dir = dir.as_ref();
    let fs = RealFs;
    let mut name = current(&fs, dir)?;
    // A running writer may roll the MANIFEST over between reading CURRENT and reading the
    // file it named (and delete that file): then CURRENT names a newer one, to read instead.
    for _ in 0..3 {
        match read_named(&fs, dir, &name) {
            Err(e) => {
                let now = current(&fs, dir)?;
                if now == name {
                    return Err(e);
                }
                name = now;
            }
            done => return done,
        }
    }
    read_named(&fs, dir, &name)
}

fn current(fs: &dyn FileSystem, dir: &Path) -> Result<String> {
    read_current(fs, dir)?.ok_or_else(|| {
        Error::invalid(format!(
            "{} holds no database (no CURRENT file)",
            dir.display()
        ))
    })
}

fn read_named(fs: &dyn FileSystem, dir: &Path, name: &str) -> Result<ManifestDump> {
    let Some(FileKind::Manifest(number)) = filename::parse(name) else {
        return Err(Error::corruption(
            filename::current_path(dir),
            0,
            "CURRENT does not name a MANIFEST",
        ));
    };
    let path = dir.join(name);
    let edits = read_edits(fs, &path)?;
    Ok(ManifestDump {
        path,
        number,
        edits,
    })
}

fn read_edits(fs: &dyn FileSystem, path: &Path) -> Result<Vec<ManifestEdit>> {
    let mut edits = Vec::new();
    for_each_edit(fs, path, |offset, edit| {
        edits.push(ManifestEdit::of(offset, edit));
        Ok(())
    })?;
    Ok(edits)
}

impl ManifestEdit {
    fn of(offset: u64, edit: VersionEdit) -> Self {
        Self {
            offset,
            log_number: edit.log_number,
            next_file_number: edit.next_file_number,
            last_seqno: edit.last_seqno,
            next_cf_id: edit.next_cf_id,
            added_column_families: edit
                .added_cfs
                .into_iter()
                .map(|(id, name, _)| (id, name))
                .collect(),
            dropped_column_families: edit.dropped_cfs,
            added_tables: edit
                .new_files
                .iter()
                .map(|(cf, level, file)| (*cf, TableInfo::of(*level, file)))
                .collect(),
            deleted_tables: edit.deleted_files,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Db, Options};

    #[test]
    fn a_new_database_records_its_default_family_and_each_flushed_table() -> Result<()> {
        let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
        let db = Db::open(dir.path(), Options::default())?;
        db.put("a", "1")?;
        db.flush()?;
        let dump = read_manifest(dir.path())?;
        assert!(
            dump.edits
                .iter()
                .any(|e| e.added_column_families == [(0, "default".to_owned())])
        );
        let added: Vec<_> = dump.edits.iter().flat_map(|e| &e.added_tables).collect();
        assert_eq!(added.len(), 1);
        assert_eq!(added.first().map(|(_, t)| t.entries), Some(1));
        db.close()?;
        Ok(())
    }

    #[test]
    fn a_directory_without_a_database_is_an_invalid_argument() -> Result<()> {
        let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
        assert!(matches!(
            read_manifest(dir.path()),
            Err(Error::InvalidArgument(_))
        ));
        Ok(())
    }
}
