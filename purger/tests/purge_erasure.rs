//! End to end: soft delete → retention → purge → grace → compaction. Once the tombstone grace
//! and the delete persistence deadline have passed, `audit_key` finds nothing of a purged row
//! — its row key or any index entry it ever had — and no file holds its bytes; before then,
//! the tombstones are still there for the replicas the grace period exists for.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use cairn::{CfOptions, Db, ManualClock, Options};
use cairn_purger::{Purger, Row, Tables, TablesOptions};
use common::{HOUR, START_MS, create_cube_tables, enabled};

const SPEC: &str = "t_cube_sandbox_spec";
const ROWS: u64 = 400;

#[test]
fn a_purged_row_leaves_no_trace_once_grace_and_the_deadline_pass() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START_MS));
    let grace = Duration::from_secs(60);
    let deadline = Duration::from_secs(3600);
    // Uncompressed, so the raw bytes of every file can be searched for purged values.
    let options = Options::default()
        .clock(clock.clone())
        .delete_persistence_deadline(deadline)
        .compression(cairn::Compression::None);
    let db = Arc::new(Db::open(dir.path(), options).expect("open"));
    let tables = Tables::open_with(
        db,
        &TablesOptions::default().cf_options(CfOptions::default().tombstone_grace(grace)),
    )
    .expect("tables");
    create_cube_tables(&tables);
    let t = tables.table(SPEC).expect("table");

    // Rows with secrets in a column and in a unique key; every key each row ever had.
    let mut keys: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut ids = Vec::new();
    for i in 0..ROWS {
        let row = Row::new()
            .set("name", format!("secret-name-{i:05}"))
            .set("note", format!("secret-note-{i:05}"));
        let id = t.insert(row).expect("insert");
        keys.push(t.unscoped().engine_keys(id).expect("keys").expect("row"));
        ids.push(id);
    }
    tables.db().flush().expect("flush");
    // Even rows are soft-deleted; their deleted_at index entry is a key of its own.
    for (i, &id) in ids.iter().enumerate().step_by(2) {
        t.soft_delete(id).expect("soft delete");
        keys[i].extend(t.unscoped().engine_keys(id).expect("keys").expect("row"));
    }
    tables.db().flush().expect("flush");

    clock.advance(HOUR + Duration::from_millis(1));
    let purger = Purger::new(tables.clone(), "erase", || vec![SPEC.to_owned()], enabled());
    assert_eq!(purger.run_pass().expect("pass").purged(), ROWS / 2);

    // Inside the grace period the tombstones stay, so a replica can still see the purge.
    tables.db().compact_range_all();
    let cf = tables.column_family();
    let row_key = &keys[0][0];
    let during = cf.audit_key(row_key).expect("audit");
    assert!(
        !during.is_empty(),
        "the purge's tombstone is kept through the grace period"
    );

    // Let grace and the deadline pass, letting background work run as time goes by.
    let total = grace + deadline + Duration::from_secs(8);
    for _ in 0..16 {
        clock.advance(total / 16);
        tables.db().wait_for_background_work().expect("settle");
    }
    for (i, row_keys) in keys.iter().enumerate() {
        for key in row_keys {
            let traces = cf.audit_key(key).expect("audit");
            if i % 2 == 0 {
                assert!(
                    traces.is_empty(),
                    "purged row {i}: {} still has {traces:?}",
                    key.escape_ascii()
                );
            } else {
                assert!(
                    t.get(ids[i]).expect("get").is_some(),
                    "live row {i} must survive"
                );
            }
        }
    }
    for entry in std::fs::read_dir(dir.path()).expect("list") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            continue;
        }
        let bytes = std::fs::read(&path).expect("read");
        for i in (0..ROWS).step_by(2) {
            for secret in [format!("secret-name-{i:05}"), format!("secret-note-{i:05}")] {
                assert!(
                    !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "{} still holds {secret} after the deadline",
                    path.display()
                );
            }
        }
    }
    assert_eq!(t.count().expect("count"), ROWS / 2);
}

trait CompactAll {
    fn compact_range_all(&self);
}

impl CompactAll for Db {
    fn compact_range_all(&self) {
        for name in self.list_column_families() {
            let cf = self.column_family(&name).expect("family");
            cf.compact_range::<&[u8]>(..).expect("compact");
        }
    }
}
