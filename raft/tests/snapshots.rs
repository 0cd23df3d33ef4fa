//! Snapshots larger than a chunk, streamed in pieces as openraft's chunked transfer sends them
//! (a piece resent, a stream restarted from offset 0), installed over existing data; damaged
//! bytes, framed or not, change nothing; an install cut by a failed write and a power loss
//! leaves the old state or the new, never a mix; the purge openraft issues with an install waits
//! for it; snapshot sets are numbered on after a reopen and the stale ones deleted.

#![allow(
    clippy::indexing_slicing,
    clippy::result_large_err,
    reason = "in a test, a panic is the failure report"
)]

use std::io::SeekFrom;
use std::path::Path;
use std::sync::Arc;

use cairn::{Db, Options};
use cairn_raft::{LogStore, Request, SnapshotData, StateMachine, TypeConfig};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine, Snapshot};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

fn open(dir: &Path, options: Options) -> StateMachine {
    let db = Db::open(dir, options).expect("open");
    cairn_raft::open_db(Arc::new(db)).expect("stores").1
}

/// The directories of a node A that builds a snapshot and a node B that installs it.
fn two_dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

fn key(tag: &str, n: u64) -> Vec<u8> {
    format!("{tag}{n:05}").into_bytes()
}

fn value(tag: &str, n: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{tag}{n}:").into_bytes();
    v.resize(len, b'0' + (n % 10) as u8);
    v
}

/// Applies puts of `count` keys tagged `tag` with values of `len` bytes, at indexes `first` on.
async fn fill(sm: &mut StateMachine, first: u64, count: u64, tag: &str, len: usize) -> u64 {
    let entries: Vec<Entry<TypeConfig>> = (0..count)
        .map(|n| Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), first + n),
            payload: EntryPayload::Normal(Request::Put {
                key: key(tag, n),
                value: value(tag, n, len),
            }),
        })
        .collect();
    sm.apply(entries).await.expect("apply");
    first + count - 1
}

/// True when `sm` holds exactly the `count` keys tagged `tag`, and none tagged `absent`.
fn holds(sm: &StateMachine, tag: &str, count: u64, len: usize, absent: &str) -> bool {
    (0..count).all(|n| sm.get(&key(tag, n)).expect("get") == Some(value(tag, n, len)))
        && (0..count).all(|n| sm.get(&key(absent, n)).expect("get").is_none())
}

async fn read_all(data: &mut SnapshotData) -> Vec<u8> {
    data.seek(SeekFrom::Start(0)).await.expect("seek");
    let mut bytes = Vec::new();
    data.read_to_end(&mut bytes).await.expect("read");
    bytes
}

/// openraft's chunked transfer: `piece` bytes at a time, each written at its offset into a
/// receiving handle of `to`; the third piece is sent twice, as after a timeout. Only the first
/// `keep` bytes are sent.
async fn transfer(
    from: &mut Snapshot<TypeConfig>,
    to: &mut StateMachine,
    piece: usize,
    keep: u64,
) -> Box<SnapshotData> {
    let end = from.snapshot.seek(SeekFrom::End(0)).await.expect("end");
    let mut received = to.begin_receiving_snapshot().await.expect("receive");
    let mut offsets = Vec::new();
    let mut offset = 0;
    while offset < end.min(keep) {
        offsets.push(offset);
        if offsets.len() == 3 {
            offsets.push(offset);
        }
        offset += piece as u64;
    }
    for at in offsets {
        from.snapshot.seek(SeekFrom::Start(at)).await.expect("seek");
        let want = usize::try_from((keep.min(end) - at).min(piece as u64)).expect("size");
        let mut buf = vec![0; want];
        from.snapshot.read_exact(&mut buf).await.expect("read");
        received.seek(SeekFrom::Start(at)).await.expect("seek");
        received.write_all(&buf).await.expect("write");
    }
    received
}

#[test]
fn a_snapshot_of_many_chunks_streams_in_pieces_and_replaces_the_data_whole() {
    let (a_dir, b_dir) = two_dirs();
    let rt = runtime();
    rt.block_on(async {
        let mut a = open(a_dir.path(), Options::default());
        let mut b = open(b_dir.path(), Options::default());
        // 4 MB of values: four chunks.
        let last = fill(&mut a, 1, 400, "a", 10_000).await;
        fill(&mut b, 1, 50, "b", 100).await;
        let mut snapshot = a.build_snapshot().await.expect("build");
        assert_eq!(snapshot.meta.last_log_id.map(|id| id.index), Some(last));
        let sent = read_all(&mut snapshot.snapshot).await;
        assert!(sent.len() > 3 << 20, "{} bytes", sent.len());
        let received = transfer(&mut snapshot, &mut b, 300_000, u64::MAX).await;
        b.install_snapshot(&snapshot.meta, received)
            .await
            .expect("install");
        assert!(
            holds(&b, "a", 400, 10_000, "b"),
            "b holds a's data and only it"
        );
        assert_eq!(
            b.applied_state().await.expect("applied"),
            a.applied_state().await.expect("applied")
        );
        let mut current = b
            .get_current_snapshot()
            .await
            .expect("current")
            .expect("one");
        assert_eq!(current.meta, snapshot.meta);
        assert_eq!(
            read_all(&mut current.snapshot).await,
            sent,
            "b's snapshot is a's bytes"
        );
        // After a restart too (a snapshot handle holds the database open).
        drop((b, current));
        let mut b = open(b_dir.path(), Options::default());
        assert!(holds(&b, "a", 400, 10_000, "b"));
        let mut current = b
            .get_current_snapshot()
            .await
            .expect("current")
            .expect("one");
        assert_eq!(read_all(&mut current.snapshot).await, sent);
    });
}

#[test]
fn a_cut_or_damaged_snapshot_is_refused_and_changes_nothing() {
    let (a_dir, b_dir) = two_dirs();
    let rt = runtime();
    rt.block_on(async {
        let mut a = open(a_dir.path(), Options::default());
        let mut b = open(b_dir.path(), Options::default());
        fill(&mut a, 1, 300, "a", 10_000).await;
        fill(&mut b, 1, 50, "b", 100).await;
        let before = b.applied_state().await.expect("applied");
        let mut snapshot = a.build_snapshot().await.expect("build");
        let len = snapshot.snapshot.seek(SeekFrom::End(0)).await.expect("end");
        for keep in [len - 1, len / 2, 3] {
            let received = transfer(&mut snapshot, &mut b, 200_000, keep).await;
            let err = b
                .install_snapshot(&snapshot.meta, received)
                .await
                .expect_err("a cut snapshot");
            assert!(err.to_string().contains("snapshot"), "{err}");
            assert!(
                holds(&b, "b", 50, 100, "a"),
                "cut at {keep}: b's data changed"
            );
            assert_eq!(b.applied_state().await.expect("applied"), before);
            assert!(b.get_current_snapshot().await.expect("current").is_none());
        }
        let mut garbage = b.begin_receiving_snapshot().await.expect("receive");
        garbage
            .write_all(b"not a snapshot at all")
            .await
            .expect("write");
        assert!(b.install_snapshot(&snapshot.meta, garbage).await.is_err());
        assert!(holds(&b, "b", 50, 100, "a"));
    });
}

#[test]
fn an_install_cut_by_a_failed_write_and_power_loss_leaves_the_old_state_or_the_new() {
    let a_dir = tempfile::tempdir().expect("a");
    let rt = runtime();
    // 12 MiB of values: the install writes them in several batches.
    let (meta, bytes) = rt.block_on(async {
        let mut a = open(a_dir.path(), Options::default());
        fill(&mut a, 1, 1200, "a", 10_000).await;
        let mut snapshot = a.build_snapshot().await.expect("build");
        let bytes = read_all(&mut snapshot.snapshot).await;
        (snapshot.meta, bytes)
    });
    let (mut failed, mut redone) = (0, 0);
    for seed in 0..8 {
        let dir = tempfile::tempdir().expect("b");
        let fs = cairn_fs::FaultyFs::new(seed);
        let options = || Options::default().file_system(Arc::new(fs.clone()));
        let old_applied = rt.block_on(async {
            let mut b = open(dir.path(), options());
            fill(&mut b, 1, 50, "b", 100).await;
            let applied = b.applied_state().await.expect("applied");
            let mut received = b.begin_receiving_snapshot().await.expect("receive");
            received.write_all(&bytes).await.expect("write");
            fs.inject_errors(cairn_fs::OpKind::Append, 4);
            let result = b.install_snapshot(&meta, received).await;
            fs.clear_errors();
            failed += u32::from(result.is_err());
            (applied, result.is_err())
        });
        let (old_applied, install_failed) = old_applied;
        fs.set_active(false);
        fs.power_loss(cairn_fs::PowerLoss::DropAllUnsynced)
            .expect("power loss");
        fs.set_active(true);
        rt.block_on(async {
            let mut b = open(dir.path(), options());
            let (applied, _) = b.applied_state().await.expect("applied");
            if applied == meta.last_log_id {
                assert!(
                    holds(&b, "a", 1200, 10_000, "b"),
                    "seed {seed}: new applied, old data"
                );
                redone += u32::from(install_failed);
            } else {
                assert_eq!(applied, old_applied.0, "seed {seed}");
                assert!(
                    !install_failed || holds(&b, "b", 50, 100, "a"),
                    "seed {seed}: a mix"
                );
                assert!(
                    install_failed,
                    "seed {seed}: an install that succeeded was lost"
                );
            }
        });
    }
    eprintln!("{failed} of 8 installs failed; {redone} finished when the store reopened");
    assert!(
        failed > 0 && redone > 0,
        "the faults cut no install, or none after its record"
    );
}

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn open_both(dir: &Path) -> (Arc<Db>, LogStore, StateMachine) {
    let db = Arc::new(Db::open(dir, Options::default()).expect("open"));
    let (log, sm) = cairn_raft::open_db(Arc::clone(&db)).expect("stores");
    (db, log, sm)
}

/// The snapshot sets `db` holds chunks of.
fn sets(db: &Db) -> Vec<u64> {
    let family = db
        .column_family(cairn_raft::SNAPSHOT_FAMILY)
        .expect("family");
    let mut sets: Vec<u64> = family
        .iter()
        .expect("iter")
        .map(|item| {
            let (key, _) = item.expect("chunk");
            u64::from_be_bytes(key[..8].try_into().expect("set"))
        })
        .collect();
    sets.dedup();
    sets
}

#[test]
fn the_purge_openraft_issues_with_an_install_waits_for_the_install_to_be_recorded() {
    let (a_dir, b_dir) = two_dirs();
    let rt = runtime();
    rt.block_on(async {
        let mut a = open(a_dir.path(), Options::default());
        fill(&mut a, 1, 100, "a", 100).await;
        let mut snapshot = a.build_snapshot().await.expect("build");
        // B has applied 10 entries of its log, snapshotted them and purged to 7.
        let (db, mut log, mut b) = open_both(b_dir.path());
        let entries: Vec<Entry<TypeConfig>> = (1..=10)
            .map(|i| Entry {
                log_id: log_id(i),
                payload: EntryPayload::Blank,
            })
            .collect();
        log.blocking_append(entries).await.expect("append");
        fill(&mut b, 1, 10, "b", 100).await;
        b.build_snapshot().await.expect("build");
        log.purge(log_id(7)).await.expect("purge");
        // openraft, installing A's snapshot at 100: the receive, then its purge to 100 before
        // the install; the node dies before the install is recorded.
        let received = transfer(&mut snapshot, &mut b, 1 << 20, u64::MAX).await;
        log.purge(log_id(100)).await.expect("purge");
        drop((received, log, b, db));
        let (db, mut log, mut b) = open_both(b_dir.path());
        let state = log.get_log_state().await.expect("state");
        let (applied, _) = b.applied_state().await.expect("applied");
        assert_eq!(applied.map(|id| id.index), Some(10));
        assert_eq!(
            state.last_purged_log_id.map(|id| id.index),
            Some(10),
            "the purge went no further than the snapshot B holds"
        );
        assert_eq!(state.last_log_id.map(|id| id.index), Some(10));
        // Installed this time: the install's last batch purges what openraft asked.
        let mut received = transfer(&mut snapshot, &mut b, 1 << 20, u64::MAX).await;
        received.flush().await.expect("flush");
        log.purge(log_id(100)).await.expect("purge");
        b.install_snapshot(&snapshot.meta, received)
            .await
            .expect("install");
        let state = log.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id.map(|id| id.index), Some(100));
        assert!(holds(&b, "a", 100, 100, "b"));
        assert_eq!(sets(&db).len(), 1, "one set: the installed one");
    });
}

#[test]
fn a_framed_snapshot_with_a_pair_the_install_refuses_changes_nothing_and_reopens() {
    let dir = tempfile::tempdir().expect("b");
    let rt = runtime();
    rt.block_on(async {
        let (db, log, mut b) = open_both(dir.path());
        fill(&mut b, 1, 50, "b", 100).await;
        let before = b.applied_state().await.expect("applied");
        // Well framed, but the value has no room for its 8-byte expiry.
        let mut bytes = b"CRS2".to_vec();
        for part in [&b"a00000"[..], b"abc"] {
            bytes.extend_from_slice(&u32::try_from(part.len()).expect("len").to_be_bytes());
            bytes.extend_from_slice(part);
        }
        bytes.extend_from_slice(&u32::MAX.to_be_bytes());
        bytes.extend_from_slice(&1_u64.to_be_bytes());
        let mut received = b.begin_receiving_snapshot().await.expect("receive");
        received.write_all(&bytes).await.expect("write");
        let meta = a_meta(1000);
        let err = b
            .install_snapshot(&meta, received)
            .await
            .expect_err("refused");
        assert!(err.to_string().contains("expiry"), "{err}");
        assert!(holds(&b, "b", 50, 100, "a"));
        assert_eq!(b.applied_state().await.expect("applied"), before);
        assert!(sets(&db).is_empty(), "the refused set is deleted");
        drop((db, log, b));
        let (_, _, mut b) = open_both(dir.path());
        assert_eq!(b.applied_state().await.expect("applied"), before);
        assert!(holds(&b, "b", 50, 100, "a"));
    });
}

/// Metadata of a snapshot at `index` with no membership.
fn a_meta(index: u64) -> openraft::SnapshotMeta<u64, openraft::BasicNode> {
    openraft::SnapshotMeta {
        last_log_id: Some(log_id(index)),
        last_membership: openraft::StoredMembership::default(),
        snapshot_id: format!("test-{index}"),
    }
}

#[test]
fn a_stream_restarted_from_offset_0_replaces_what_was_received_and_a_seek_past_the_end_is_refused()
{
    let (a_dir, b_dir) = two_dirs();
    let rt = runtime();
    rt.block_on(async {
        let mut a = open(a_dir.path(), Options::default());
        let mut b = open(b_dir.path(), Options::default());
        fill(&mut a, 1, 300, "a", 10_000).await;
        let mut snapshot = a.build_snapshot().await.expect("build");
        let sent = read_all(&mut snapshot.snapshot).await;
        let mut received = b.begin_receiving_snapshot().await.expect("receive");
        // A first stream of other bytes, longer than the snapshot (chunks 0 to 3 stored) ...
        received
            .write_all(&vec![0xee; sent.len() + 500_000])
            .await
            .expect("write");
        assert!(
            received
                .seek(SeekFrom::Start(sent.len() as u64 + 600_000))
                .await
                .is_err()
        );
        // ... then the real one from offset 0, in pieces across chunk boundaries.
        for (i, piece) in sent.chunks(700_000).enumerate() {
            received
                .seek(SeekFrom::Start((i * 700_000) as u64))
                .await
                .expect("seek");
            received.write_all(piece).await.expect("write");
        }
        b.install_snapshot(&snapshot.meta, received)
            .await
            .expect("install");
        assert!(holds(&b, "a", 300, 10_000, "b"));
        let mut current = b
            .get_current_snapshot()
            .await
            .expect("current")
            .expect("one");
        assert_eq!(read_all(&mut current.snapshot).await, sent);
    });
}

#[test]
fn snapshot_sets_are_numbered_on_after_a_reopen_and_only_the_current_one_is_kept() {
    let dir = tempfile::tempdir().expect("b");
    let rt = runtime();
    rt.block_on(async {
        let (db, log, mut b) = open_both(dir.path());
        fill(&mut b, 1, 20, "b", 100).await;
        b.build_snapshot().await.expect("build");
        assert_eq!(sets(&db), [0]);
        // What a receive cut by a crash leaves: chunks of a set no record names.
        let chunks = db
            .column_family(cairn_raft::SNAPSHOT_FAMILY)
            .expect("family");
        let mut stray = 5_u64.to_be_bytes().to_vec();
        stray.extend_from_slice(&0_u64.to_be_bytes());
        chunks.put(&stray, b"left behind").expect("put");
        assert_eq!(sets(&db), [0, 5]);
        drop((log, b, chunks, db));
        let (db, _log, mut b) = open_both(dir.path());
        assert_eq!(sets(&db), [0], "the stray set is deleted on open");
        fill(&mut b, 21, 5, "c", 100).await;
        let mut snapshot = b.build_snapshot().await.expect("build");
        assert_eq!(
            sets(&db),
            [1],
            "numbered after the current one, which it replaced"
        );
        let mut current = b
            .get_current_snapshot()
            .await
            .expect("current")
            .expect("one");
        assert_eq!(
            read_all(&mut current.snapshot).await,
            read_all(&mut snapshot.snapshot).await
        );
    });
}
