//! A deletion lifecycle on a real directory, left behind for the `cairn` tools to look at.
//!
//! ```sh
//! cargo run --release -p cairn --example lifecycle -- /tmp/cairn-example
//! cairn inspect levels /tmp/cairn-example
//! ```
//!
//! It writes 200,000 users and compacts them to the last level, then deletes, flushing after
//! each kind: every third user of one range key by key, a whole range with one range
//! tombstone, and a few sessions in a family whose tombstones keep a one-hour grace period.
//! Automatic compactions are off, as if the service stopped right after: the tombstones sit
//! in level 0 above the data they delete, each for a reason `cairn explain` names. The next
//! open with compactions on drops them.

use std::time::Duration;

use cairn::{CfOptions, Db, Options, WriteBatch};

fn main() -> cairn::Result<()> {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: lifecycle DIR (a new or empty directory)");
        std::process::exit(3);
    };
    let options = Options::default()
        .memtable_size(4 << 20)
        .disable_auto_compactions(true);
    let db = Db::open(&dir, options)?;
    let sessions = match db.column_family("sessions") {
        Ok(cf) => cf,
        Err(_) => db.create_column_family(
            "sessions",
            CfOptions::default().tombstone_grace(Duration::from_secs(3600)),
        )?,
    };
    for chunk in 0..20 {
        let mut batch = WriteBatch::new();
        for i in chunk * 10_000..(chunk + 1) * 10_000 {
            batch.put(format!("user/{i:06}"), format!("{{\"name\":\"user {i}\"}}"));
            if i % 50 == 0 {
                batch.put_cf(&sessions, format!("session/{i:06}"), "token");
            }
        }
        db.write(batch)?;
    }
    db.compact_range::<&str>(..)?;
    sessions.compact_range::<&str>(..)?;
    // Deletes: key by key, then one range, then sessions (kept for their grace period).
    let mut batch = WriteBatch::new();
    for i in (50_000..80_000).step_by(3) {
        batch.delete(format!("user/{i:06}"));
    }
    db.write(batch)?;
    db.flush()?;
    db.delete_range("user/120000", "user/160000")?;
    db.flush()?;
    for i in (0..200_000).step_by(500) {
        sessions.delete(format!("session/{i:06}"))?;
    }
    db.flush()?;
    let left = db.range("user/".."user0")?.count();
    println!("{dir}: {left} users left, tables on disk:");
    for cf in db.list_column_families() {
        for t in db.column_family(&cf)?.tables()? {
            println!(
                "  {cf} L{} {:06}.sst: {} entries, {} point and {} range tombstones",
                t.level, t.number, t.entries, t.point_tombstones, t.range_tombstones
            );
        }
    }
    db.close()
}
