//! The real file system does what the trait promises.

use cairn_fs::{Error, FileSystem, RealFs};

#[test]
fn appended_bytes_read_back_by_map_and_read_at() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = RealFs::new();
    let path = dir.path().join("a");
    let mut file = fs.create(&path)?;
    file.append(b"hello ")?;
    file.append(b"world")?;
    assert_eq!(file.len(), 11);
    file.sync()?;
    assert_eq!(&fs.map(&path)?[..], b"hello world");
    let reader = fs.open_read(&path)?;
    let mut buf = [0u8; 5];
    assert_eq!(reader.read_at(6, &mut buf)?, 5);
    assert_eq!(&buf, b"world");
    assert_eq!(reader.read_to_end_from(3)?, b"lo world");
    assert_eq!(fs.file_size(&path)?, 11);
    Ok(())
}

#[test]
fn open_append_continues_at_the_end() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = RealFs::new();
    let path = dir.path().join("log");
    fs.create(&path)?.append(b"abc")?;
    let mut file = fs.open_append(&path)?;
    assert_eq!(file.len(), 3);
    file.append(b"def")?;
    assert_eq!(&fs.map(&path)?[..], b"abcdef");
    Ok(())
}

#[test]
fn empty_file_maps_to_empty_bytes() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = RealFs::new();
    let path = dir.path().join("empty");
    fs.create(&path)?;
    assert!(fs.map(&path)?.is_empty());
    Ok(())
}

#[test]
fn rename_replaces_and_remove_deletes_and_list_is_sorted() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = RealFs::new();
    fs.create(&dir.path().join("b"))?.append(b"new")?;
    fs.create(&dir.path().join("a"))?.append(b"old")?;
    fs.create(&dir.path().join("c"))?;
    fs.rename(&dir.path().join("b"), &dir.path().join("a"))?;
    assert_eq!(&fs.map(&dir.path().join("a"))?[..], b"new");
    fs.remove(&dir.path().join("c"))?;
    fs.sync_dir(dir.path())?;
    assert_eq!(fs.list(dir.path())?, vec!["a".to_string()]);
    assert!(!fs.exists(&dir.path().join("c")));
    Ok(())
}

#[test]
fn missing_files_are_not_found_errors_naming_the_path() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = RealFs::new();
    let missing = dir.path().join("missing");
    let err = fs
        .map(&missing)
        .expect_err("mapping a missing file must fail");
    assert!(err.is_not_found());
    assert!(err.to_string().contains("missing"), "{err}");
    assert!(fs.open_read(&missing).is_err());
    assert!(fs.remove(&missing).is_err());
    Ok(())
}

#[test]
fn second_lock_on_the_same_file_fails_until_the_first_is_dropped() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = RealFs::new();
    let path = dir.path().join("LOCK");
    // A note left in the file by anyone (an older holder, say) is never taken for the holder.
    std::fs::write(&path, "999999\n").map_err(|e| cairn_fs::Error::Io {
        op: "write",
        path: path.clone(),
        source: e,
    })?;
    let first = fs.lock(&path)?;
    let pid = std::process::id();
    // Where the system keeps a lock table this process can read in its own pid numbers, the
    // refusal names this process; elsewhere it names no one; never the note's 999999. Two
    // threads take and drop locks meanwhile (as other tests do), which once hid the entry.
    let table_speaks_for_us = std::fs::read_link("/proc/self")
        .is_ok_and(|own| own.to_str() == Some(pid.to_string().as_str()))
        && std::path::Path::new("/proc/locks").exists();
    let (expected, named) = if table_speaks_for_us {
        (Some(pid), format!("process {pid}"))
    } else {
        (None, "another process".to_owned())
    };
    let churn = LockChurn::start(dir.path());
    for _ in 0..200 {
        match fs.lock(&path) {
            Err(err @ Error::Locked { holder, .. }) => {
                assert_eq!(holder, expected, "the refusal names the holder's pid");
                assert!(err.to_string().contains(&named), "{err}");
            }
            other => panic!("a second lock: {other:?}"),
        }
    }
    drop(churn);
    drop(first);
    let _second = fs.lock(&path)?;
    Ok(())
}

#[test]
fn shared_locks_coexist_and_exclude_the_exclusive_one() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = RealFs::new();
    let path = dir.path().join("LOCK");
    assert!(
        fs.lock_shared(&path)?.is_none(),
        "a missing file is not created"
    );
    assert!(!path.exists());
    let writer = fs.lock(&path)?;
    assert!(matches!(fs.lock_shared(&path), Err(Error::Locked { .. })));
    drop(writer);
    let reader = fs.lock_shared(&path)?;
    let second_reader = fs.lock_shared(&path)?;
    assert!(reader.is_some() && second_reader.is_some());
    assert!(matches!(fs.lock(&path), Err(Error::Locked { .. })));
    drop((reader, second_reader));
    let _writer = fs.lock(&path)?;
    Ok(())
}

/// A file opened for reading reads as it was then, though a writer goes on appending: a
/// reader beside a live writer never meets half a record written after it judged the file's
/// end (it took such a torn record in a log it thought finished for corruption).
#[test]
fn a_reader_sees_the_length_the_file_had_when_opened() -> cairn_fs::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = RealFs::new();
    let path = dir.path().join("log");
    let mut writer = fs.create(&path)?;
    writer.append(b"first")?;
    let reader = fs.open_read(&path)?;
    writer.append(b" and more")?;
    writer.sync()?;
    let mut buf = [0u8; 32];
    assert_eq!(reader.len(), 5);
    assert_eq!(reader.read_at(0, &mut buf)?, 5);
    assert_eq!(&buf[..5], b"first");
    assert_eq!(
        reader.read_at(5, &mut buf)?,
        0,
        "bytes past the open's length"
    );
    assert_eq!(reader.read_to_end_from(0)?, b"first");
    assert_eq!(fs.open_read(&path)?.read_to_end_from(0)?, b"first and more");
    Ok(())
}

/// Two threads taking and dropping locks on files of their own in `dir` until dropped, so that
/// the system's lock table changes while a test reads it.
struct LockChurn {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl LockChurn {
    fn start(dir: &std::path::Path) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..2)
            .map(|t| {
                let files: Vec<std::fs::File> = (0..4)
                    .map(|i| std::fs::File::create(dir.join(format!("churn-{t}-{i}"))))
                    .collect::<Result<_, _>>()
                    .expect("churn files");
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        for file in &files {
                            file.lock().expect("churn lock");
                        }
                        for file in &files {
                            file.unlock().expect("churn unlock");
                        }
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for LockChurn {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            thread.join().expect("churn thread");
        }
    }
}
