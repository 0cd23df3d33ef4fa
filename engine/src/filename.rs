//! The names of the files in a database directory.

use std::path::{Path, PathBuf};

/// File numbers stay below this: one read from disk at or above it is corruption, and every
/// `+ 1` on a number is safe.
pub(crate) const MAX_FILE_NUMBER: u64 = 1 << 62;

/// What a file in the database directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileKind {
    Log(u64),
    Table(u64),
    TempTable(u64),
    Manifest(u64),
    Current,
    TempCurrent,
    Lock,
}

pub(crate) fn log_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:06}.log"))
}

pub(crate) fn table_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:06}.sst"))
}

pub(crate) fn temp_table_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:06}.sst.tmp"))
}

pub(crate) fn manifest_name(number: u64) -> String {
    format!("MANIFEST-{number:06}")
}

pub(crate) fn current_path(dir: &Path) -> PathBuf {
    dir.join("CURRENT")
}

pub(crate) fn temp_current_path(dir: &Path) -> PathBuf {
    dir.join("CURRENT.tmp")
}

pub(crate) fn lock_path(dir: &Path) -> PathBuf {
    dir.join("LOCK")
}

/// Classifies a directory entry; `None` for files that are not the engine's.
pub(crate) fn parse(name: &str) -> Option<FileKind> {
    match name {
        "CURRENT" => return Some(FileKind::Current),
        "CURRENT.tmp" => return Some(FileKind::TempCurrent),
        "LOCK" => return Some(FileKind::Lock),
        _ => {}
    }
    if let Some(n) = name.strip_prefix("MANIFEST-") {
        return number(n).map(FileKind::Manifest);
    }
    if let Some(n) = name.strip_suffix(".sst.tmp") {
        return number(n).map(FileKind::TempTable);
    }
    if let Some(n) = name.strip_suffix(".sst") {
        return number(n).map(FileKind::Table);
    }
    name.strip_suffix(".log")
        .and_then(number)
        .map(FileKind::Log)
}

fn number(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        let dir = Path::new("/db");
        for (path, kind) in [
            (log_path(dir, 7), FileKind::Log(7)),
            (table_path(dir, 1_234_567), FileKind::Table(1_234_567)),
            (temp_table_path(dir, 3), FileKind::TempTable(3)),
            (dir.join(manifest_name(2)), FileKind::Manifest(2)),
            (current_path(dir), FileKind::Current),
            (lock_path(dir), FileKind::Lock),
        ] {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            assert_eq!(parse(name), Some(kind), "{name}");
        }
        for junk in [
            "README",
            "x.log",
            ".log",
            "MANIFEST-",
            "12a.sst",
            "000001.sst.bak",
        ] {
            assert_eq!(parse(junk), None, "{junk}");
        }
    }
}
