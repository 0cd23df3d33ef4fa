//! The faulty file system loses exactly what a power cut would, and fails when told to.

use std::path::Path;

use cairn_fs::{FaultyFs, FileSystem, OpKind, PowerLoss, SyncFailure};

fn write(fs: &FaultyFs, path: &Path, data: &[u8], sync: bool) -> cairn_fs::Result<()> {
    let mut file = fs.create(path)?;
    file.append(data)?;
    if sync {
        file.sync()?;
    }
    Ok(())
}

fn read(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

#[test]
fn synced_bytes_survive_power_loss_and_unsynced_bytes_are_dropped() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(1);
    let path = dir.path().join("000001.log");
    let mut file = fs.create(&path)?;
    file.append(b"durable-")?;
    file.sync()?;
    file.append(b"volatile")?;
    fs.sync_dir(dir.path())?;
    assert_eq!(fs.durable_len(&path), Some(8));
    fs.power_loss(PowerLoss::DropAllUnsynced)?;
    assert_eq!(read(&path).as_deref(), Some(&b"durable-"[..]));
    Ok(())
}

#[test]
fn random_tail_keeps_a_prefix_of_the_unsynced_bytes() -> cairn_fs::Result<()> {
    let mut lengths = std::collections::BTreeSet::new();
    for seed in 0..32 {
        let dir = tempfile::tempdir()?;
        let fs = FaultyFs::new(seed);
        let path = dir.path().join("f");
        let mut file = fs.create(&path)?;
        file.append(b"0123")?;
        file.sync()?;
        file.append(b"456789")?;
        fs.sync_dir(dir.path())?;
        fs.power_loss(PowerLoss::DropRandomTail { seed })?;
        let data = read(&path).unwrap_or_default();
        assert!(data.len() >= 4, "synced bytes lost with seed {seed}");
        assert!(
            b"0123456789".starts_with(&data),
            "not a prefix with seed {seed}"
        );
        lengths.insert(data.len());
    }
    assert!(
        lengths.len() > 2,
        "the cut should vary with the seed: {lengths:?}"
    );
    Ok(())
}

#[test]
fn file_created_since_the_last_dir_sync_vanishes() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(1);
    let kept = dir.path().join("kept");
    let lost = dir.path().join("lost");
    write(&fs, &kept, b"k", true)?;
    fs.sync_dir(dir.path())?;
    write(&fs, &lost, b"l", true)?;
    fs.power_loss(PowerLoss::DropAllUnsynced)?;
    assert_eq!(read(&kept).as_deref(), Some(&b"k"[..]));
    assert!(
        read(&lost).is_none(),
        "a file whose creation was not synced survived"
    );
    Ok(())
}

#[test]
fn unsynced_rename_over_an_existing_file_is_undone() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(1);
    let current = dir.path().join("CURRENT");
    let temp = dir.path().join("CURRENT.tmp");
    write(&fs, &current, b"MANIFEST-000001\n", true)?;
    fs.sync_dir(dir.path())?;
    write(&fs, &temp, b"MANIFEST-000002\n", true)?;
    fs.sync_dir(dir.path())?;
    fs.rename(&temp, &current)?;
    assert_eq!(read(&current).as_deref(), Some(&b"MANIFEST-000002\n"[..]));
    fs.power_loss(PowerLoss::DropAllUnsynced)?;
    assert_eq!(read(&current).as_deref(), Some(&b"MANIFEST-000001\n"[..]));
    assert_eq!(read(&temp).as_deref(), Some(&b"MANIFEST-000002\n"[..]));
    Ok(())
}

#[test]
fn synced_rename_survives_power_loss() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(1);
    let current = dir.path().join("CURRENT");
    let temp = dir.path().join("CURRENT.tmp");
    write(&fs, &current, b"old", true)?;
    write(&fs, &temp, b"new", true)?;
    fs.sync_dir(dir.path())?;
    fs.rename(&temp, &current)?;
    fs.sync_dir(dir.path())?;
    fs.power_loss(PowerLoss::DropAllUnsynced)?;
    assert_eq!(read(&current).as_deref(), Some(&b"new"[..]));
    assert!(read(&temp).is_none());
    assert_eq!(fs.list(dir.path())?, vec!["CURRENT".to_string()]);
    Ok(())
}

#[test]
fn unsynced_remove_is_undone_and_synced_remove_is_not() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(1);
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    write(&fs, &a, b"aaa", true)?;
    write(&fs, &b, b"bbb", true)?;
    fs.sync_dir(dir.path())?;
    fs.remove(&a)?;
    fs.sync_dir(dir.path())?;
    fs.remove(&b)?;
    assert_eq!(
        fs.list(dir.path())?,
        Vec::<String>::new(),
        "trash must stay hidden"
    );
    fs.power_loss(PowerLoss::DropAllUnsynced)?;
    assert!(read(&a).is_none(), "a durable removal came undone");
    assert_eq!(read(&b).as_deref(), Some(&b"bbb"[..]));
    Ok(())
}

#[test]
fn files_that_existed_before_count_as_durable() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("old");
    std::fs::write(&path, b"from before")?;
    let fs = FaultyFs::new(1);
    let mut file = fs.open_append(&path)?;
    file.append(b" and after")?;
    fs.power_loss(PowerLoss::DropAllUnsynced)?;
    assert_eq!(read(&path).as_deref(), Some(&b"from before"[..]));
    Ok(())
}

#[test]
fn handles_opened_before_power_loss_fail_afterwards() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(1);
    let path = dir.path().join("f");
    let mut file = fs.create(&path)?;
    file.append(b"x")?;
    file.sync()?;
    fs.sync_dir(dir.path())?;
    fs.power_loss(PowerLoss::DropAllUnsynced)?;
    assert!(file.append(b"y").is_err());
    assert!(file.sync().is_err());
    assert_eq!(read(&path).as_deref(), Some(&b"x"[..]));
    // The file system itself serves a new "process" normally.
    let mut again = fs.open_append(&path)?;
    again.append(b"z")?;
    assert_eq!(read(&path).as_deref(), Some(&b"xz"[..]));
    Ok(())
}

#[test]
fn errors_are_injected_one_in_n_by_operation_kind() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(42);
    fs.inject_errors(OpKind::Append, 4);
    let mut file = fs.create(&dir.path().join("f"))?;
    let mut failed = 0u32;
    for _ in 0..4000 {
        if file.append(b"x").is_err() {
            failed += 1;
        }
    }
    assert!(
        (800..1200).contains(&failed),
        "{failed} of 4000 appends failed at one in 4"
    );
    assert_eq!(fs.injected_errors(), u64::from(failed));
    assert_eq!(
        file.len(),
        u64::from(4000 - failed),
        "a failed append wrote bytes"
    );
    // Other kinds are untouched.
    for _ in 0..100 {
        file.sync()?;
    }
    fs.clear_errors();
    for _ in 0..100 {
        file.append(b"x")?;
    }
    Ok(())
}

#[test]
fn every_kind_can_be_made_to_fail() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(7);
    let path = dir.path().join("f");
    write(&fs, &path, b"data", true)?;
    // Opened before errors are injected: its reads fail on their own.
    let opened = fs.open_read(&path)?;
    let cases: [(OpKind, &dyn Fn() -> bool); 8] = [
        (OpKind::Create, &|| {
            fs.create(&dir.path().join("g")).is_err()
        }),
        (OpKind::Rename, &|| {
            fs.rename(&path, &dir.path().join("h")).is_err()
        }),
        (OpKind::Remove, &|| fs.remove(&path).is_err()),
        (OpKind::SyncDir, &|| fs.sync_dir(dir.path()).is_err()),
        (OpKind::List, &|| fs.list(dir.path()).is_err()),
        (OpKind::Read, &|| fs.map(&path).is_err()),
        (OpKind::Read, &|| fs.open_read(&path).is_err()),
        (OpKind::Read, &|| opened.read_at(0, &mut [0; 4]).is_err()),
    ];
    for (kind, fails) in cases {
        fs.inject_errors(kind, 1);
        assert!(fails(), "{kind:?} did not fail at one in 1");
        fs.inject_errors(kind, 0);
    }
    assert_eq!(
        &fs.map(&path)?[..],
        b"data",
        "a failed operation changed the file"
    );
    Ok(())
}

#[test]
fn inactive_file_system_refuses_writes_but_serves_reads() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(1);
    let path = dir.path().join("f");
    let mut file = fs.create(&path)?;
    file.append(b"abc")?;
    fs.set_active(false);
    assert!(file.append(b"d").is_err());
    assert!(file.sync().is_err());
    assert!(fs.create(&dir.path().join("g")).is_err());
    assert!(fs.remove(&path).is_err());
    assert_eq!(&fs.map(&path)?[..], b"abc");
    fs.set_active(true);
    file.append(b"d")?;
    assert_eq!(&fs.map(&path)?[..], b"abcd");
    Ok(())
}

#[test]
fn a_failed_sync_drops_the_unsynced_bytes_and_the_next_sync_succeeds() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(3);
    let path = dir.path().join("000001.log");
    let mut file = fs.create(&path)?;
    fs.sync_dir(dir.path())?;
    file.append(b"synced|")?;
    file.sync()?;
    file.append(b"lost")?;
    fs.fail_next(OpKind::Sync, "000001.log");
    assert!(file.sync().is_err(), "the targeted sync should fail");
    assert_eq!(
        read(&path).as_deref(),
        Some(&b"synced|\0\0\0\0"[..]),
        "the dropped bytes read back as zeros"
    );
    assert_eq!(
        fs.dropped_bytes(".log"),
        4,
        "the ledger counts what it dropped"
    );
    assert_eq!(fs.dropped_bytes("MANIFEST"), 0);
    file.append(b"|later")?;
    file.sync()?;
    fs.power_loss(PowerLoss::DropAllUnsynced)?;
    assert_eq!(
        read(&path).as_deref(),
        Some(&b"synced|\0\0\0\0|later"[..]),
        "the next sync succeeded and made the hole durable"
    );
    Ok(())
}

#[test]
fn a_failed_sync_can_keep_its_bytes() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(3);
    fs.set_sync_failure(SyncFailure::KeepsBytes);
    let path = dir.path().join("MANIFEST-000002");
    let mut file = fs.create(&path)?;
    fs.sync_dir(dir.path())?;
    file.append(b"edit-1")?;
    fs.fail_next(OpKind::Sync, "MANIFEST");
    assert!(file.sync().is_err());
    assert_eq!(read(&path).as_deref(), Some(&b"edit-1"[..]));
    assert_eq!(
        fs.dropped_bytes(""),
        0,
        "a sync that keeps its bytes drops none"
    );
    file.append(b"edit-2")?;
    file.sync()?;
    fs.power_loss(PowerLoss::DropAllUnsynced)?;
    assert_eq!(
        read(&path).as_deref(),
        Some(&b"edit-1edit-2"[..]),
        "the failed sync's bytes became durable with the next sync"
    );
    Ok(())
}

#[test]
fn a_failed_append_leaves_a_torn_prefix_of_its_bytes() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut lengths = std::collections::BTreeSet::new();
    for seed in 0..24 {
        let fs = FaultyFs::new(seed);
        let path = dir.path().join(format!("{seed}.log"));
        let mut file = fs.create(&path)?;
        file.append(b"whole|")?;
        fs.fail_next(OpKind::Append, ".log");
        assert!(file.append(b"0123456789").is_err());
        let data = read(&path).unwrap_or_default();
        let torn = data.strip_prefix(b"whole|").unwrap_or_default();
        assert!(
            b"0123456789".starts_with(torn) && torn.len() < 10,
            "seed {seed}: not a strict prefix: {data:?}"
        );
        assert_eq!(file.len(), data.len() as u64, "seed {seed}");
        lengths.insert(torn.len());
    }
    assert!(lengths.len() > 3, "the tear should vary: {lengths:?}");
    Ok(())
}

#[test]
fn reordered_pages_leave_holes_of_zeros_before_later_bytes() -> cairn_fs::Result<()> {
    let page = 4096;
    let data: Vec<u8> = (0..8 * page)
        .map(|i| u8::try_from(i % 251 + 1).unwrap_or(1))
        .collect();
    let mut holes_seen = 0;
    for seed in 0..16 {
        let dir = tempfile::tempdir()?;
        let fs = FaultyFs::new(seed);
        let path = dir.path().join("000003.log");
        let mut file = fs.create(&path)?;
        fs.sync_dir(dir.path())?;
        file.append(data.get(..page / 2).unwrap_or_default())?;
        file.sync()?;
        file.append(data.get(page / 2..).unwrap_or_default())?;
        fs.power_loss(PowerLoss::ReorderedPages { seed })?;
        let after = read(&path).unwrap_or_default();
        assert!(after.len() >= page / 2, "seed {seed}: synced bytes lost");
        assert_eq!(after.get(..page / 2), data.get(..page / 2), "seed {seed}");
        for (i, chunk) in after.chunks(page).enumerate() {
            let start = i * page;
            let original = data.get(start..start + chunk.len()).unwrap_or_default();
            let zero_from = if i == 0 { page / 2 } else { 0 };
            let is_hole = chunk
                .get(zero_from..)
                .is_some_and(|c| c.iter().all(|&b| b == 0));
            assert!(
                chunk == original || is_hole,
                "seed {seed}: page {i} is neither the data nor a hole"
            );
            if is_hole && start + chunk.len() < after.len() {
                holes_seen += 1;
            }
        }
    }
    assert!(holes_seen > 0, "no seed left a hole below later data");
    Ok(())
}

#[test]
fn fail_next_fails_only_the_named_operation_once() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(1);
    let a = dir.path().join("a.log");
    let b = dir.path().join("b.sst");
    fs.fail_next(OpKind::Create, ".sst");
    write(&fs, &a, b"a", true)?;
    assert!(fs.create(&b).is_err(), "the named create fails");
    write(&fs, &b, b"b", true)?;
    assert_eq!(fs.injected_errors(), 1);
    Ok(())
}

#[test]
fn paused_errors_spare_recovery_and_resume_afterwards() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(1);
    fs.inject_errors(OpKind::Create, 1);
    fs.pause_errors();
    write(&fs, &dir.path().join("f"), b"x", true)?;
    fs.resume_errors();
    assert!(fs.create(&dir.path().join("g")).is_err());
    Ok(())
}
