//! Changing a live column family's `ttl` and `max_versions` (`ColumnFamily::set_options`):
//! durable across reopen and MANIFEST rollover, applied to everything not yet compacted (a TTL
//! removed shows cells again, as HBase's `alter` does), and refused where it must be.

use std::sync::Arc;
use std::time::Duration;

use cairn::{CfOptions, Db, Error, ManualClock, Options};

const START: u64 = 1_700_000_000_000;

fn open(dir: &tempfile::TempDir, clock: &Arc<ManualClock>, options: Options) -> Db {
    Db::open(dir.path(), options.clock(clock.clone())).expect("open")
}

fn get(cf: &cairn::ColumnFamily, key: &str) -> Option<Vec<u8>> {
    cf.get(key).expect("get").map(|v| v.to_vec())
}

#[test]
fn a_ttl_set_later_hides_old_cells_removed_shows_them_again_and_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(START));
    let ttl = CfOptions::default().ttl(Duration::from_secs(30));
    {
        let db = open(&dir, &clock, Options::default());
        let cf = db
            .create_column_family("events", CfOptions::default())
            .expect("create");
        cf.put("old", "1").expect("put");
        clock.advance(Duration::from_secs(60));
        cf.put("new", "2").expect("put");
        // Kept in the memtable, which no compaction touches: only the options decide here.
        cf.set_options(ttl.clone()).expect("set ttl");
        assert_eq!(get(&cf, "old"), None, "written 60 s ago under a 30 s TTL");
        assert_eq!(get(&cf, "new").as_deref(), Some(&b"2"[..]));
        assert_eq!(cf.options().expect("options"), ttl);
        cf.set_options(CfOptions::default()).expect("remove ttl");
        assert_eq!(
            get(&cf, "old").as_deref(),
            Some(&b"1"[..]),
            "no compaction dropped it: visible again"
        );
        cf.set_options(ttl.clone()).expect("set ttl again");
    }
    // Durable: the TTL holds after reopen (which flushes the log into a table that background
    // compaction may then drop the expired cell from: hidden either way).
    let db = open(&dir, &clock, Options::default());
    let cf = db.column_family("events").expect("family");
    assert_eq!(cf.options().expect("options"), ttl);
    assert_eq!(get(&cf, "old"), None, "the TTL survived the reopen");
    // Compacted under the TTL: dropped for good, whatever the options say after.
    cf.compact_range::<&str>(..).expect("compact");
    cf.set_options(CfOptions::default()).expect("remove ttl");
    assert_eq!(get(&cf, "old"), None, "compaction dropped it under the TTL");
    assert_eq!(
        get(&cf, "new").as_deref(),
        Some(&b"2"[..]),
        "written at the clock's last reading: alive, and kept by the compaction"
    );
}

#[test]
fn max_versions_lowered_and_raised_applies_to_what_is_not_compacted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock, Options::default());
    let cf = db
        .create_column_family("history", CfOptions::default().max_versions(3))
        .expect("create");
    for v in ["a", "b", "c"] {
        cf.put("k", v).expect("put");
    }
    let versions = |cf: &cairn::ColumnFamily| cf.get_versions("k", 10).expect("versions").len();
    assert_eq!(versions(&cf), 3);
    cf.set_options(CfOptions::default().max_versions(1))
        .expect("lower");
    assert_eq!(versions(&cf), 1);
    cf.set_options(CfOptions::default().max_versions(3))
        .expect("raise");
    assert_eq!(
        versions(&cf),
        3,
        "nothing compacted yet: the versions show again"
    );
    cf.set_options(CfOptions::default().max_versions(1))
        .expect("lower");
    db.flush().expect("flush");
    cf.compact_range::<&str>(..).expect("compact");
    cf.set_options(CfOptions::default().max_versions(3))
        .expect("raise");
    assert_eq!(versions(&cf), 1, "compaction dropped the older versions");
}

#[test]
fn options_survive_manifest_rollovers_and_apply_to_the_default_family() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(START));
    // A small MANIFEST limit: flushes roll it over, so the options must be in its snapshot.
    let options = || Options::default().max_manifest_bytes(1);
    let ttl = CfOptions::default().ttl(Duration::from_secs(10));
    {
        let db = open(&dir, &clock, options());
        let default = db.column_family("default").expect("default");
        let current = || std::fs::read_to_string(dir.path().join("CURRENT")).expect("CURRENT");
        let first = current();
        default.set_options(ttl.clone()).expect("set");
        for i in 0..80 {
            db.put(format!("k{i}"), "v").expect("put");
            db.flush().expect("flush");
        }
        assert_ne!(
            current(),
            first,
            "the MANIFEST rolled over after the change"
        );
    }
    let db = open(&dir, &clock, options());
    let default = db.column_family("default").expect("default");
    assert_eq!(default.options().expect("options"), ttl);
    assert!(db.get("k0").expect("get").is_some());
    clock.advance(Duration::from_secs(11));
    assert!(
        db.get("k0").expect("get").is_none(),
        "the default family's TTL"
    );
}

#[test]
fn a_dropped_family_or_a_read_only_database_refuses_the_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(START));
    {
        let db = open(&dir, &clock, Options::default());
        let cf = db
            .create_column_family("gone", CfOptions::default())
            .expect("create");
        db.create_column_family("kept", CfOptions::default())
            .expect("create");
        db.drop_column_family("gone").expect("drop");
        let err = cf
            .set_options(CfOptions::default().max_versions(2))
            .expect_err("dropped");
        assert!(matches!(err, Error::ColumnFamilyNotFound(_)), "{err:?}");
        // A new family of the same name is another family: the old handle cannot change it.
        let again = db
            .create_column_family("gone", CfOptions::default())
            .expect("create again");
        let err = cf
            .set_options(CfOptions::default().max_versions(2))
            .expect_err("another family now");
        assert!(matches!(err, Error::ColumnFamilyNotFound(_)), "{err:?}");
        assert_eq!(again.options().expect("options"), CfOptions::default());
    }
    let db = Db::open_read_only(dir.path(), Options::default().clock(clock.clone()))
        .expect("open read-only");
    let kept = db.column_family("kept").expect("kept");
    let err = kept
        .set_options(CfOptions::default().max_versions(2))
        .expect_err("read-only");
    assert!(matches!(err, Error::ReadOnly), "{err:?}");
}

/// The grace period is refused: erasure deadlines already reported (`audit_key`'s `gone_by`)
/// and the compactions found futile until a grace ends were computed with the old one.
#[test]
fn the_tombstone_grace_of_a_live_family_cannot_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock, Options::default());
    let grace = CfOptions::default().tombstone_grace(Duration::from_secs(60));
    let cf = db
        .create_column_family("graced", grace.clone())
        .expect("create");
    for changed in [Duration::from_secs(7 * 86_400), Duration::ZERO] {
        let err = cf
            .set_options(grace.clone().tombstone_grace(changed))
            .expect_err("grace changed");
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    }
    assert_eq!(cf.options().expect("options"), grace);
    cf.set_options(grace.clone().ttl(Duration::from_secs(5)))
        .expect("the same grace with a TTL");
}

/// Returned means synced: a power loss right after `set_options` returns keeps the change. A
/// failed MANIFEST sync reports `Io`, stops the database, leaves the running options as they
/// were, and a reopen finds the old options or the new ones, never anything else.
#[test]
fn a_returned_change_survives_power_loss_and_a_failed_sync_leaves_old_or_new() {
    use cairn_fs::{FaultyFs, OpKind, PowerLoss, SyncFailure};
    let old = CfOptions::default().max_versions(2);
    let new = CfOptions::default()
        .max_versions(5)
        .ttl(Duration::from_secs(600));
    let options = |fs: &FaultyFs| Options::default().file_system(Arc::new(fs.clone()));
    // Returned, then the power goes.
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = FaultyFs::new(1);
        let db = Db::open(dir.path(), options(&fs)).expect("open");
        let cf = db.create_column_family("t", old.clone()).expect("create");
        cf.set_options(new.clone()).expect("set");
        // The disk stops as a dying machine's would (a clean close would sync), then the power
        // goes.
        fs.set_active(false);
        drop(cf);
        drop(db);
        fs.power_loss(PowerLoss::DropAllUnsynced)
            .expect("power loss");
        fs.set_active(true);
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        let cf = db.column_family("t").expect("family");
        assert_eq!(
            cf.options().expect("options"),
            new,
            "a returned change is durable"
        );
    }
    // The sync fails, with its bytes kept or not, and the power goes or not.
    for (kept, power_loss) in [(true, false), (true, true), (false, true)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = FaultyFs::new(2);
        fs.set_sync_failure(if kept {
            SyncFailure::KeepsBytes
        } else {
            SyncFailure::DropsUnsynced
        });
        let db = Db::open(dir.path(), options(&fs)).expect("open");
        let cf = db.create_column_family("t", old.clone()).expect("create");
        cf.put("k", "v").expect("put");
        fs.fail_next(OpKind::Sync, "MANIFEST");
        let err = cf.set_options(new.clone()).expect_err("the sync failed");
        assert!(matches!(err, Error::Io(_)), "{err:?}");
        assert_eq!(cf.options().expect("options"), old, "not applied");
        assert!(
            matches!(cf.put("k2", "v"), Err(Error::Stopped { .. })),
            "the database stopped"
        );
        fs.set_active(false);
        drop(cf);
        drop(db);
        if power_loss {
            fs.power_loss(PowerLoss::DropAllUnsynced)
                .expect("power loss");
        }
        fs.set_active(true);
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        let cf = db.column_family("t").expect("family");
        let now = cf.options().expect("options");
        assert!(
            now == old || now == new,
            "kept {kept}, power loss {power_loss}: {now:?}"
        );
    }
}
