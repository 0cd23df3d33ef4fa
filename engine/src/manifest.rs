//! The MANIFEST: a log of version edits (framed like the WAL), and `CURRENT`, which names it.
//!
//! Each open writes a fresh MANIFEST starting with one edit that describes the whole state, then
//! appends an edit per flush, compaction or column-family change, each synced before it takes
//! effect. It rolls over to a fresh one the same way when it grows, or when the delete
//! persistence deadline needs the deleted keys in its old edits gone (`version_set.rs`).
//! `CURRENT` is replaced by write-temp, fsync, rename, fsync-directory. The format is in
//! `engine/MANIFEST.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_fs::FileSystem;
use cairn_wal::{LogReader, LogWriter, RecoveryMode};

use crate::error::{Error, Result};
use crate::filename;
use crate::options::CfOptions;
use crate::version::Version;
use crate::version_edit::{DEFAULT_CF, EditAt, VersionEdit};

/// The format of the write-ahead logs this build writes, recorded in every MANIFEST snapshot:
/// 2 since logs begin with a begin mark, end with an end mark at a switch and carry sealed
/// marks (`wal/FORMAT.md`); 1, never written, stands for the logs before, sealed at every
/// switch. This build reads both, and refuses a database whose MANIFEST names a newer format.
pub(crate) const LOG_FORMAT: u64 = 2;

/// Everything the MANIFEST records.
#[derive(Debug, Clone)]
pub(crate) struct ManifestState {
    pub(crate) version: Arc<Version>,
    pub(crate) cfs: BTreeMap<u32, (String, CfOptions)>,
    pub(crate) next_file_number: u64,
    /// Logs numbered below this hold nothing that is not in a table.
    pub(crate) log_number: u64,
    pub(crate) last_seqno: u64,
    pub(crate) next_cf_id: u32,
}

impl ManifestState {
    /// The state of a new database: the default column family and nothing else.
    pub(crate) fn new_database() -> Self {
        let mut cfs = BTreeMap::new();
        cfs.insert(DEFAULT_CF, ("default".to_string(), CfOptions::default()));
        let mut version = Version::default();
        version
            .cfs
            .insert(DEFAULT_CF, crate::version::CfVersion::default());
        Self {
            version: Arc::new(version),
            cfs,
            next_file_number: 2,
            log_number: 0,
            last_seqno: 0,
            next_cf_id: DEFAULT_CF + 1,
        }
    }

    /// Applies an edit read back from (or about to be written to) `at`.
    ///
    /// # Errors
    /// `Corruption` (naming the MANIFEST and the edit's offset in it) if the edit removes a
    /// table that is not there, names a level that does not exist, or holds a number out of
    /// range.
    pub(crate) fn apply(&mut self, edit: &VersionEdit, at: EditAt<'_>) -> Result<()> {
        edit.check_ranges().map_err(|why| at.corruption(why))?;
        if let Some(format) = edit.log_format.filter(|&f| f > LOG_FORMAT) {
            return Err(Error::invalid(format!(
                "{}: the database's logs are in format {format}, newer than this build reads \
                 ({LOG_FORMAT}): it was written by a newer Cairn",
                at.file.display()
            )));
        }
        self.version = Arc::new(self.version.apply(edit, at)?);
        for (id, name, options) in &edit.added_cfs {
            self.cfs.insert(*id, (name.clone(), options.clone()));
            self.next_cf_id = self.next_cf_id.max(id.saturating_add(1));
        }
        for id in &edit.dropped_cfs {
            self.cfs.remove(id);
        }
        if let Some(n) = edit.log_number {
            self.log_number = self.log_number.max(n);
        }
        if let Some(n) = edit.next_file_number {
            self.next_file_number = self.next_file_number.max(n);
        }
        if let Some(n) = edit.last_seqno {
            self.last_seqno = self.last_seqno.max(n);
        }
        if let Some(n) = edit.next_cf_id {
            self.next_cf_id = self.next_cf_id.max(n);
        }
        Ok(())
    }

    /// One edit that recreates this whole state.
    fn snapshot_edit(&self) -> VersionEdit {
        let mut edit = VersionEdit {
            log_number: Some(self.log_number),
            next_file_number: Some(self.next_file_number),
            last_seqno: Some(self.last_seqno),
            next_cf_id: Some(self.next_cf_id),
            // This build writes its own format from here on, whatever the logs before it.
            log_format: Some(LOG_FORMAT),
            ..VersionEdit::default()
        };
        for (id, (name, options)) in &self.cfs {
            edit.added_cfs.push((*id, name.clone(), options.clone()));
        }
        for (cf, files) in &self.version.cfs {
            for (level, file) in files.all_files() {
                edit.new_files.push((*cf, level, (**file).clone()));
            }
        }
        edit
    }
}

/// The MANIFEST being appended to.
#[derive(Debug)]
pub(crate) struct ManifestWriter {
    path: PathBuf,
    number: u64,
    writer: LogWriter,
    /// The size of its first record, the snapshot: a MANIFEST is not rolled over while its
    /// edits are small beside it.
    snapshot_len: u64,
}

impl ManifestWriter {
    /// Writes a new MANIFEST numbered `number` holding `state`, and points `CURRENT` at it.
    pub(crate) fn create(
        fs: &dyn FileSystem,
        dir: &Path,
        number: u64,
        state: &ManifestState,
    ) -> Result<Self> {
        let name = filename::manifest_name(number);
        let path = dir.join(&name);
        let mut writer = LogWriter::new(fs.create(&path)?);
        writer.add_record(&state.snapshot_edit().encode())?;
        writer.sync()?;
        fs.sync_dir(dir)?;
        set_current(fs, dir, &name)?;
        let snapshot_len = writer.len();
        Ok(Self {
            path,
            number,
            writer,
            snapshot_len,
        })
    }

    /// The MANIFEST at `path` of a database open read-only: never written (every append fails).
    pub(crate) fn read_only(path: PathBuf, number: u64) -> Self {
        let writer = LogWriter::new(Box::new(ReadOnlyFile(path.clone())));
        Self {
            path,
            number,
            writer,
            snapshot_len: 0,
        }
    }

    /// True once the edits past the snapshot outweigh it and the file is past `max_bytes`: time
    /// for a fresh snapshot.
    pub(crate) fn outgrown(&self, max_bytes: u64) -> bool {
        let len = self.writer.len();
        len > max_bytes && len > self.snapshot_len.saturating_mul(2)
    }

    /// Seals the MANIFEST at close (see `cairn_wal::LogWriter::seal`).
    pub(crate) fn seal(&mut self) -> cairn_wal::Result<()> {
        self.writer.seal()
    }

    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    /// Appends `edit` and syncs it: once this returns, the edit survives a crash.
    pub(crate) fn append(&mut self, edit: &VersionEdit, fs: &dyn FileSystem) -> Result<()> {
        self.writer.add_record(&edit.encode())?;
        let synced = self.writer.sync();
        if synced.is_err()
            && crate::planted::active(crate::planted::Bug::DeleteAfterManifestFailure)
        {
            // Planted bug: carry on appending after a failed sync, as if nothing had happened.
            let len = self.writer.len();
            self.writer = LogWriter::with_offset(fs.open_append(&self.path)?, len);
        }
        synced?;
        Ok(())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Where the next edit will be written.
    pub(crate) fn next_edit_at(&self) -> EditAt<'_> {
        EditAt {
            file: &self.path,
            offset: self.writer.len(),
        }
    }
}

fn set_current(fs: &dyn FileSystem, dir: &Path, manifest_name: &str) -> Result<()> {
    let temp = filename::temp_current_path(dir);
    let mut file = fs.create(&temp)?;
    file.append(format!("{manifest_name}\n").as_bytes())?;
    file.sync()?;
    drop(file);
    fs.rename(&temp, &filename::current_path(dir))?;
    fs.sync_dir(dir)?;
    Ok(())
}

/// The MANIFEST file name `CURRENT` names, or `None` if there is no `CURRENT`.
pub(crate) fn read_current(fs: &dyn FileSystem, dir: &Path) -> Result<Option<String>> {
    let path = filename::current_path(dir);
    if !fs.exists(&path) {
        return Ok(None);
    }
    let bytes = fs.open_read(&path)?.read_to_end_from(0)?;
    let text = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|t| t.strip_suffix('\n'));
    match text.filter(|t| matches!(filename::parse(t), Some(filename::FileKind::Manifest(_)))) {
        Some(name) => Ok(Some(name.to_string())),
        None => Err(Error::corruption(
            path,
            0,
            "CURRENT does not name a MANIFEST",
        )),
    }
}

/// Hands each version edit of the MANIFEST at `path` to `each` in order, with its record's
/// offset, stopping at the first error. A torn last edit (a crash while appending) is left
/// out: the change it described never took effect.
pub(crate) fn for_each_edit(
    fs: &dyn FileSystem,
    path: &Path,
    mut each: impl FnMut(u64, VersionEdit) -> Result<()>,
) -> Result<()> {
    let mut reader = LogReader::open(fs, path, RecoveryMode::TolerateCorruptedTail)?;
    while let Some((offset, record)) = reader.next_record()? {
        let edit = VersionEdit::decode(&record)
            .ok_or_else(|| Error::corruption(path, offset, "malformed version edit"))?;
        each(offset, edit)?;
    }
    Ok(())
}

/// Replays the MANIFEST `name` into a state. A torn last edit (a crash while appending) is
/// ignored: the change it described never took effect.
pub(crate) fn load(fs: &dyn FileSystem, dir: &Path, name: &str) -> Result<ManifestState> {
    let path = dir.join(name);
    let mut state: Option<ManifestState> = None;
    for_each_edit(fs, &path, |offset, edit| {
        let current = state.get_or_insert_with(|| ManifestState {
            version: Arc::new(Version::default()),
            cfs: BTreeMap::new(),
            next_file_number: 0,
            log_number: 0,
            last_seqno: 0,
            next_cf_id: 0,
        });
        current.apply(
            &edit,
            EditAt {
                file: &path,
                offset,
            },
        )
    })?;
    let state = state.ok_or_else(|| Error::corruption(&path, 0, "MANIFEST holds no edit"))?;
    if !state.cfs.contains_key(&DEFAULT_CF) {
        return Err(Error::corruption(
            &path,
            0,
            "MANIFEST has no default column family",
        ));
    }
    Ok(state)
}

/// What a read-only database writes through: nothing. Every append and sync fails, so a write
/// that slipped past the read-only checks could not reach the disk.
#[derive(Debug)]
pub(crate) struct ReadOnlyFile(pub(crate) std::path::PathBuf);

impl cairn_fs::WritableFile for ReadOnlyFile {
    fn append(&mut self, _: &[u8]) -> cairn_fs::Result<()> {
        Err(read_only_write(&self.0))
    }

    fn sync(&mut self) -> cairn_fs::Result<()> {
        Err(read_only_write(&self.0))
    }

    fn len(&self) -> u64 {
        0
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

fn read_only_write(path: &Path) -> cairn_fs::Error {
    cairn_fs::Error::from(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!("{}: the database is open read-only", path.display()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_naming_a_newer_log_format_is_refused() {
        let mut state = ManifestState::new_database();
        let file = Path::new("MANIFEST-000007");
        let at = EditAt { file, offset: 0 };
        let newer = VersionEdit {
            log_format: Some(LOG_FORMAT + 1),
            ..VersionEdit::default()
        };
        match state.apply(&newer, at) {
            Err(Error::InvalidArgument(why)) => assert!(why.contains("newer Cairn"), "{why}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        let ours = VersionEdit {
            log_format: Some(LOG_FORMAT),
            ..VersionEdit::default()
        };
        state.apply(&ours, at).expect("this build's format");
        assert_eq!(state.snapshot_edit().log_format, Some(LOG_FORMAT));
    }

    #[test]
    fn an_edit_that_does_not_apply_is_corruption_at_its_own_offset() -> Result<()> {
        let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
        let fs = cairn_fs::RealFs;
        let mut writer =
            ManifestWriter::create(&fs, dir.path(), 7, &ManifestState::new_database())?;
        let at = writer.next_edit_at().offset;
        assert!(at > 0, "the snapshot edit comes first");
        // Deletes a table the version does not hold.
        let edit = VersionEdit {
            deleted_files: vec![(DEFAULT_CF, 1, 42)],
            ..VersionEdit::default()
        };
        writer.append(&edit, &fs)?;
        drop(writer);
        match load(&fs, dir.path(), &filename::manifest_name(7)) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, dir.path().join(filename::manifest_name(7)));
                // The record's offset as the reader gives it: past the end of the snapshot (and
                // the sync mark after it), inside the file.
                let len = std::fs::metadata(&file)
                    .map_err(cairn_fs::Error::from)?
                    .len();
                assert!(
                    (at..len).contains(&offset),
                    "offset {offset} is not that of the second edit ({at}..{len})"
                );
            }
            other => panic!("expected corruption, got {other:?}"),
        }
        Ok(())
    }
}
