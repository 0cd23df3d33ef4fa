//! Read-only open: beside a dead writer it reads everything the writer acknowledged and
//! changes nothing on disk; beside a live writer it refuses, and while it is open no writer
//! gets in.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::SystemTime;

use cairn::{Db, Error, Options};
use common::{closed_database, tempdir};

/// Set in the child writer's environment: the directory it writes to.
const CHILD_DIR_VAR: &str = "CAIRN_READ_ONLY_WRITER_DIR";

/// Puts written by the child: the first half flushed to a table, the rest only in the log.
const KEYS: u32 = 1000;

/// The child: writes, flushes half, says so, and waits to be killed.
#[test]
fn read_only_child_writer() {
    let Some(dir) = std::env::var_os(CHILD_DIR_VAR) else {
        return;
    };
    let db = Db::open(&dir, Options::default()).expect("child: open");
    for i in 0..KEYS {
        db.put(format!("k{i:04}"), format!("v{i}"))
            .expect("child: put");
        if i == KEYS / 2 {
            db.flush().expect("child: flush");
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "\nready").expect("child: stdout");
    out.flush().expect("child: stdout");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Every file in `dir` with its bytes and modification time.
fn files(dir: &Path) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
    std::fs::read_dir(dir)
        .expect("list")
        .filter_map(Result::ok)
        .map(|e| {
            let path = e.path();
            let bytes = std::fs::read(&path).expect("read");
            let modified = e.metadata().and_then(|m| m.modified()).expect("mtime");
            (
                e.file_name().to_string_lossy().into_owned(),
                (bytes, modified),
            )
        })
        .collect()
}

#[test]
fn read_only_open_refuses_a_live_writer_and_changes_nothing_beside_a_dead_one() {
    let dir = tempdir();
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args(["--exact", "read_only_child_writer", "--nocapture"])
        .env(CHILD_DIR_VAR, dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the writer");
    let stdout = child.stdout.take().expect("piped stdout");
    let ready = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line == "ready");
    assert!(ready, "the writer came up");

    let beside_live = Db::open_read_only(dir.path(), Options::default());
    let refused = matches!(&beside_live, Err(Error::Io(cairn_fs::Error::Locked { .. })));
    child.kill().expect("kill the writer");
    child.wait().expect("reap the writer");
    assert!(
        refused,
        "beside a live writer: {:?}",
        beside_live.map(|_| ())
    );

    let before = files(dir.path());
    let reader = Db::open_read_only(dir.path(), Options::default()).expect("open read-only");
    let second = Db::open_read_only(dir.path(), Options::default()).expect("a second reader");
    for i in 0..KEYS {
        let value = reader.get(format!("k{i:04}")).expect("get");
        assert_eq!(
            value.as_deref(),
            Some(format!("v{i}").as_bytes()),
            "k{i:04}"
        );
    }
    assert_eq!(second.iter().expect("scan").count(), KEYS as usize);
    let snapshot = reader.snapshot();
    assert_eq!(snapshot.iter().expect("scan").count(), KEYS as usize);
    assert!(!reader.audit_key("k0999").expect("audit").is_empty());
    assert!(matches!(reader.put("k", "v"), Err(Error::ReadOnly)));
    assert!(matches!(reader.flush(), Err(Error::ReadOnly)));
    assert!(matches!(
        reader.compact_range::<&str>(..),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(
        reader.create_column_family("cf", cairn::CfOptions::default()),
        Err(Error::ReadOnly)
    ));
    reader
        .wait_for_background_work()
        .expect("no background work");
    assert!(
        matches!(
            Db::open(dir.path(), Options::default()),
            Err(Error::Io(cairn_fs::Error::Locked { .. }))
        ),
        "no writer while a reader has it open"
    );
    drop(snapshot);
    reader.close().expect("close");
    drop(second);
    let after = files(dir.path());
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "files created or deleted"
    );
    for (name, (bytes, modified)) in &before {
        let (now, when) = after.get(name).expect("still there");
        assert!(now == bytes && when == modified, "{name} changed");
    }
    let writer = Db::open(dir.path(), Options::default()).expect("a writer once readers left");
    assert_eq!(writer.iter().expect("scan").count(), KEYS as usize);
}

#[test]
fn read_only_open_refuses_a_directory_without_a_lock_file() {
    let dir = closed_database();
    std::fs::remove_file(dir.path().join("LOCK")).expect("remove LOCK");
    let opened = Db::open_read_only(dir.path(), Options::default());
    assert!(
        matches!(&opened, Err(Error::InvalidArgument(why)) if why.contains("LOCK")),
        "{:?}",
        opened.map(|_| ())
    );
    assert!(
        !dir.path().join("LOCK").exists(),
        "and it does not create one"
    );
}
