//! How every command names its database, and what it says when it cannot use the one named.
//!
//! The database is `DB`, a positional argument, in every command (as `ldb` has one form, its
//! `--db`). `--db DB` and `--dir DB`, the flags some commands took before, stay as hidden
//! aliases where `DB` is the command's only positional argument (`purge`, `ttl`, `stress`,
//! `crashtest`, `stats`, `verify`, …); a command with more positional arguments (`get DB KEY`)
//! takes `DB` by position only.
//!
//! A directory that cannot hold the database gets one wording whatever the command, and the
//! exit codes tell the conditions apart: 4 not found (no such directory, a file where the
//! directory should be, a directory with no database in it at all), 5 locked by another process
//! (named by its pid when the system says who holds the lock), 2 anything else: damage (a
//! database that lost its `CURRENT` or its MANIFEST), a directory that cannot be read, I/O.

use std::path::{Path, PathBuf};

use clap::Args;

/// The directory, the file or the database is not there.
pub const NOT_FOUND: i32 = 4;
/// Another process has the database open for writing.
pub const LOCKED: i32 = 5;

/// `DB`, required, with the hidden `--db`/`--dir` aliases.
#[derive(Debug, Clone, Args)]
pub struct DbArg {
    /// The database directory (required).
    #[arg(value_name = "DB", required_unless_present = "db_flag")]
    db: Option<PathBuf>,
    /// The database directory, as the older `--db DB`/`--dir DB` (give it first instead).
    #[arg(
        long = "db",
        alias = "dir",
        value_name = "DB",
        hide = true,
        conflicts_with = "db"
    )]
    db_flag: Option<PathBuf>,
}

impl DbArg {
    /// The directory named.
    pub fn path(&self) -> &Path {
        self.db
            .as_deref()
            .or(self.db_flag.as_deref())
            .unwrap_or(Path::new("."))
    }
}

/// `DB` by position only: for commands with more positional arguments after it.
#[derive(Debug, Clone, Args)]
pub struct DbPos {
    /// The database directory.
    #[arg(value_name = "DB")]
    db: PathBuf,
}

impl DbPos {
    /// The directory named.
    pub fn path(&self) -> &Path {
        &self.db
    }
}

/// `[DB]`, optional, with the hidden `--db`/`--dir` aliases: the harness's commands (a
/// temporary directory when absent) and `purge` (or a server's URL). Each says what its absence
/// means with `mut_arg("db", …)`.
#[derive(Debug, Clone, Args)]
pub struct OptDbArg {
    /// The database directory.
    #[arg(value_name = "DB")]
    db: Option<PathBuf>,
    /// The database directory, as the older `--db DB`/`--dir DB` (give it first instead).
    #[arg(
        long = "db",
        alias = "dir",
        value_name = "DB",
        hide = true,
        conflicts_with = "db"
    )]
    db_flag: Option<PathBuf>,
}

impl OptDbArg {
    /// The directory named, if one was.
    pub fn path(&self) -> Option<&Path> {
        self.db.as_deref().or(self.db_flag.as_deref())
    }
}

/// Checks that `dir` can hold an existing database before anything opens it: a directory with
/// a `CURRENT` file. `hint` follows the "no database" message (`--create` makes one, say).
///
/// # Errors
/// [`NOT_FOUND`], once the reason is printed.
pub fn check_database(dir: &Path, hint: &str) -> Result<(), i32> {
    check_directory(dir)?;
    let current = dir.join("CURRENT");
    match std::fs::metadata(&current) {
        Ok(meta) if meta.is_file() => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(data) = data_files(dir) {
                eprintln!(
                    "cairn: {}: damaged: no CURRENT file, yet it holds the database's data \
                     ({data}); `cairn verify` says more, and nothing will replace it",
                    dir.display()
                );
                return Err(crate::output::FAILED);
            }
            eprintln!(
                "cairn: {}: not a Cairn database (no CURRENT file){hint}",
                dir.display()
            );
            Err(NOT_FOUND)
        }
        Ok(_) => {
            eprintln!("cairn: {}: damaged: CURRENT is not a file", dir.display());
            Err(crate::output::FAILED)
        }
        Err(e) => {
            eprintln!("cairn: {}: cannot read: {e}", current.display());
            Err(crate::output::FAILED)
        }
    }
}

/// The first table (`.sst`) or non-empty log in `dir`: data a directory without `CURRENT`
/// should not hold (the engine refuses to make a database over it).
fn data_files(dir: &Path) -> Option<String> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries.filter_map(Result::ok).find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        // The engine's own names, lower case as it writes them.
        let extension = Path::new(&name).extension().and_then(|x| x.to_str());
        let is_table = extension == Some("sst");
        let is_log = extension == Some("log") && e.metadata().is_ok_and(|m| m.len() > 0);
        (is_table || is_log).then_some(name)
    })
}

/// Checks that `dir` exists and is a directory.
///
/// # Errors
/// [`NOT_FOUND`], once the reason is printed.
pub fn check_directory(dir: &Path) -> Result<(), i32> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => {
            eprintln!(
                "cairn: {}: not a directory (a database is a directory)",
                dir.display()
            );
            Err(NOT_FOUND)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("cairn: {}: no such directory", dir.display());
            Err(NOT_FOUND)
        }
        Err(e) => {
            eprintln!("cairn: {}: cannot read: {e}", dir.display());
            Err(crate::output::FAILED)
        }
    }
}

/// Checks that a database may be created in `dir` (`put --create`, `load --create`): a
/// database already (it is opened), a new or empty directory, or one holding only what a
/// creation cut short leaves. A directory of other files is not a database ([`NOT_FOUND`]); one
/// that lost its `CURRENT` but holds data is damaged (2): neither is ever made into a new one.
///
/// # Errors
/// The exit code, once the reason is printed.
pub fn check_creatable(dir: &Path) -> Result<(), i32> {
    check_directory_if_present(dir)?;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    let names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if names.iter().any(|n| n == "CURRENT") {
        return Ok(());
    }
    if data_files(dir).is_some() {
        return check_database(dir, "");
    }
    let engine_file = |n: &str| {
        let extension = Path::new(n).extension().and_then(|x| x.to_str());
        n == "LOCK"
            || n.starts_with("MANIFEST-")
            || matches!(extension, Some("log" | "sst" | "tmp"))
    };
    if let Some(foreign) = names.iter().find(|n| !engine_file(n)) {
        eprintln!(
            "cairn: {}: not a Cairn database (it holds {foreign:?} and no CURRENT); `--create` \
             makes one only in an empty or new directory",
            dir.display()
        );
        return Err(NOT_FOUND);
    }
    Ok(())
}

/// [`check_directory`] for a directory a command may create: fine when missing.
///
/// # Errors
/// [`NOT_FOUND`] for a file where the directory should be, once the reason is printed.
pub fn check_directory_if_present(dir: &Path) -> Result<(), i32> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Ok(());
    }
    check_directory(dir)
}

/// Checks that `file`, the file a command reads alone (`dump-log FILE`, `inspect sst FILE`),
/// exists and is a file.
///
/// # Errors
/// [`NOT_FOUND`], once the reason is printed.
pub fn check_file(file: &Path) -> Result<(), i32> {
    match std::fs::metadata(file) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => {
            eprintln!("cairn: {}: not a file", file.display());
            Err(NOT_FOUND)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("cairn: {}: no such file", file.display());
            Err(NOT_FOUND)
        }
        Err(e) => {
            eprintln!("cairn: {}: cannot read: {e}", file.display());
            Err(crate::output::FAILED)
        }
    }
}

/// The message and exit code for an engine error met opening `dir`: [`LOCKED`] naming the
/// holder, [`NOT_FOUND`] when the directory itself is gone, 2 otherwise (a MANIFEST or table
/// missing from a database is damage).
pub fn cannot_open(dir: &Path, e: &cairn::Error) -> i32 {
    match e {
        cairn::Error::Io(cairn_fs::Error::Locked { holder, .. }) => {
            let by = holder.map_or_else(
                || "another process".to_owned(),
                |pid| format!("process {pid}"),
            );
            // `holder` comes from the system's lock table (Linux), not from the file.
            eprintln!(
                "cairn: {}: locked: {by} has the database open for writing. Stop it to write; \
                 the commands that only read (get, scan, stats, inspect, explain, audit, verify, \
                 dump) work beside it",
                dir.display()
            );
            LOCKED
        }
        cairn::Error::Io(io) if io.is_not_found() && !dir.exists() => {
            eprintln!("cairn: {}: {e}", dir.display());
            NOT_FOUND
        }
        _ => {
            eprintln!("cairn: {}: cannot open: {e}", dir.display());
            crate::output::FAILED
        }
    }
}
