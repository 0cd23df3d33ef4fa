//! A minimal reproduction for fjall's maintainers (docs/findings/fjall-journal-keeps-deleted-values.md):
//! values written and flushed, then deleted, flushed and major-compacted away, are still
//! readable byte for byte in the table the compaction replaced (until the next memtable rotation
//! or close) and in the journal: after the database is closed, and after it is reopened and
//! written to again, until about 64 MB more has been journaled.
//!
//! ```sh
//! cargo run -p cairn-stress --features fjall --example fjall_journal_keeps_deleted_values
//! ```
//!
//! It uses fjall's API with its default settings; two of the calls (`rotate_memtable_and_wait`,
//! `major_compact`) are public but `#[doc(hidden)]`, standing for the flushes and compactions a
//! busy database makes on its own.

use std::path::Path;

use fjall::{Database, KeyspaceCreateOptions, PersistMode};

const SECRET: &[u8] = b"SECRET-";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    {
        let db = Database::builder(dir.path()).open()?;
        let users = db.keyspace("users", KeyspaceCreateOptions::default)?;
        for i in 0..1_000 {
            users.insert(format!("user{i:04}"), format!("SECRET-{i:04}-card-4111"))?;
        }
        users.rotate_memtable_and_wait()?;
        for i in 0..1_000 {
            users.remove(format!("user{i:04}"))?;
        }
        users.rotate_memtable_and_wait()?;
        users.major_compact()?;
        db.persist(PersistMode::SyncAll)?;
        println!("live keys after the deletes: {}", users.len()?);
        println!("after delete, flush and major compaction:");
        report(dir.path())?;
        users.insert("unrelated", "x")?;
        users.rotate_memtable_and_wait()?;
        println!("after one more write and memtable rotation:");
        report(dir.path())?;
    }
    println!("after close:");
    report(dir.path())?;
    {
        let db = Database::builder(dir.path()).open()?;
        let other = db.keyspace("other", KeyspaceCreateOptions::default)?;
        for i in 0..10_000 {
            other.insert(format!("o{i:05}"), vec![b'x'; 1_000])?;
        }
        other.rotate_memtable_and_wait()?;
        db.persist(PersistMode::SyncAll)?;
    }
    println!("after a reopen and 10 MB of other writes:");
    report(dir.path())?;
    Ok(())
}

/// Prints every file under `dir` that holds a deleted secret, and how many.
fn report(dir: &Path) -> std::io::Result<()> {
    let mut total = 0;
    for (path, count) in secrets(dir)? {
        println!("  {count:>5} deleted values in {}", path.display());
        total += count;
    }
    println!("  {total} in all");
    Ok(())
}

fn secrets(dir: &Path) -> std::io::Result<Vec<(std::path::PathBuf, usize)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            found.extend(secrets(&path)?);
        } else {
            let bytes = std::fs::read(&path)?;
            let count = bytes.windows(SECRET.len()).filter(|w| *w == SECRET).count();
            if count > 0 {
                found.push((path, count));
            }
        }
    }
    Ok(found)
}
