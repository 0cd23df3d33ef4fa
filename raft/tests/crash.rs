//! Crash tests of the Raft store: a workload appends, truncates, votes, commits, applies,
//! snapshots, installs snapshots over newer data and purges in a loop, saying what was
//! acknowledged; the process is killed (SIGKILL, a child running this test binary) or the power
//! fails (`FaultyFs`, in process); after each restart the log, vote, committed id, state machine
//! and snapshot must agree with what was acknowledged.
//!
//! What must hold after a restart:
//! - every acknowledged append is there, the log is contiguous from the last purged id on, and
//!   every entry is the one written at its index;
//! - the vote, committed id and last purged id are at least the last acknowledged;
//! - the state machine's data is exactly the model's at its `last_applied` (data and
//!   `last_applied` never apart), and `last_applied` is at least the last purge (a synced write
//!   makes every earlier write of the one engine log durable);
//! - the current snapshot, if any, decodes to the model at its own index, and covers the purge.
//!
//! `CAIRN_CRASH_CYCLES=n` runs more cycles (default 4 of each kind).

#![allow(
    clippy::indexing_slicing,
    clippy::result_large_err,
    reason = "in a test, a panic is the failure report"
)]

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::{Db, Options};
use cairn_raft::{LogStore, Request, StateMachine, TypeConfig};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, Vote,
};

const NODE: u64 = 1;
const KEYS: u64 = 40;

/// The request written at `index`: a pure function of it, so the model needs no record.
fn request_at(index: u64) -> Request {
    let key = format!("k{:02}", index % KEYS).into_bytes();
    match index % 23 {
        0 => Request::Delete { key },
        // Far in the future: the model reads it as a put.
        5 => Request::PutWithTtl {
            key,
            value: format!("t{index}").into_bytes(),
            expires_at_ms: u64::MAX / 2,
        },
        11 => Request::DeleteRange {
            start: format!("k{:02}", index % KEYS).into_bytes(),
            end: format!("k{:02}", (index % KEYS) + 5).into_bytes(),
        },
        _ => Request::Put {
            key,
            value: format!("v{index}").into_bytes(),
        },
    }
}

/// The state machine's data after applying indexes 1 to `upto`.
fn model(upto: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut state = BTreeMap::new();
    for index in 1..=upto {
        match request_at(index) {
            Request::Put { key, value } | Request::PutWithTtl { key, value, .. } => {
                state.insert(key, value);
            }
            Request::Delete { key } => {
                state.remove(&key);
            }
            Request::DeleteRange { start, end } => {
                state.retain(|k: &Vec<u8>, _| *k < start || *k >= end);
            }
        }
    }
    state
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, NODE), index)
}

fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(request_at(index)),
    }
}

/// What the workload was told is done, the highest of each kind.
#[derive(Debug, Default, Clone, Copy)]
struct Acked {
    log: u64,
    vote_term: u64,
    committed: u64,
    purged: u64,
    /// A truncate said to start and not yet acknowledged: the index it truncates from.
    truncating: Option<u64>,
}

impl Acked {
    fn note(&mut self, line: &str) {
        let mut parts = line.split_whitespace();
        let (Some(kind), Some(n)) = (parts.next(), parts.next().and_then(|n| n.parse().ok()))
        else {
            return;
        };
        match kind {
            // A truncate killed before it was acknowledged may have happened.
            "truncating" => self.truncating = Some(n),
            "truncated" => {
                self.log = n - 1;
                self.truncating = None;
            }
            _ => self.truncating = None,
        }
        if kind.starts_with("truncat") {
            return;
        }
        let slot = match kind {
            "log" => &mut self.log,
            "vote" => &mut self.vote_term,
            "committed" => &mut self.committed,
            "purged" => &mut self.purged,
            _ => return,
        };
        *slot = (*slot).max(n);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

/// Runs the workload until it has made `acks` acknowledgements (forever with `None`), saying
/// each to `say`, from where the store stands, in `term`. It stops right after an
/// acknowledgement of any kind, so a crash can follow an append with no synced write after it.
async fn drive(
    log: &mut LogStore,
    sm: &mut StateMachine,
    term: u64,
    acks: Option<u64>,
    seed: u64,
    say: &mut dyn FnMut(String),
) {
    let mut said = 0;
    // An intent ("truncating") is said but is no acknowledgement.
    let mut done = |line: String| {
        let ack = !line.starts_with("truncating");
        say(line);
        said += u64::from(ack);
        ack && acks.is_some_and(|n| said >= n)
    };
    let mut rng = seed;
    let mut next = || {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        rng >> 33
    };
    log.save_vote(&Vote::new(term, NODE)).await.expect("vote");
    if done(format!("vote {term}")) {
        return;
    }
    let mut last = log
        .get_log_state()
        .await
        .expect("state")
        .last_log_id
        .map_or(0, |id| id.index);
    let mut snapshot_at = 0;
    loop {
        let count = 1 + next() % 8;
        let entries: Vec<_> = (last + 1..=last + count).map(|i| entry(term, i)).collect();
        log.blocking_append(entries).await.expect("append");
        last += count;
        if done(format!("log {last}")) {
            return;
        }
        // As a new leader's entries replace a deposed one's: the tail not yet applied goes.
        if next() % 6 == 0 {
            let since = last + 1 - (1 + next() % count);
            done(format!("truncating {since}"));
            log.truncate(log_id(term, since)).await.expect("truncate");
            last = since - 1;
            if done(format!("truncated {since}")) {
                return;
            }
        }
        let (applied, _) = sm.applied_state().await.expect("applied");
        let from = applied.map_or(1, |id| id.index + 1);
        let todo = log.try_get_log_entries(from..=last).await.expect("read");
        sm.apply(todo).await.expect("apply");
        // Most steps commit (a synced write that would cover the append); some do not, so a
        // crash can meet an append that only its own sync made durable.
        if next() % 3 != 0 {
            log.save_committed(Some(log_id(term, last)))
                .await
                .expect("committed");
            if done(format!("committed {last}")) {
                return;
            }
        }
        if next() % 10 == 0 {
            let snapshot = sm.build_snapshot().await.expect("snapshot");
            snapshot_at = snapshot.meta.last_log_id.map_or(0, |id| id.index);
        } else if next() % 12 == 0
            && let Some(current) = sm.get_current_snapshot().await.expect("current")
        {
            // Installed over the data that moved on since, as a lagging follower does; the
            // entries after it are applied again next time round.
            sm.install_snapshot(&current.meta, current.snapshot)
                .await
                .expect("install");
        }
        // As openraft does: only what a snapshot holds is purged.
        let purge_to = snapshot_at.saturating_sub(3);
        if purge_to > 0 && next() % 4 == 0 {
            let purged = log
                .try_get_log_entries(purge_to..=purge_to)
                .await
                .expect("read")
                .first()
                .map(|e| e.log_id);
            if let Some(id) = purged {
                log.purge(id).await.expect("purge");
                if done(format!("purged {}", id.index)) {
                    return;
                }
            }
        }
    }
}

/// Checks the store in `dir` against what was acknowledged; the index to go on from. The
/// committed id is not synced (openraft recomputes it), so after a power loss it only has to
/// lie within the log.
async fn verify(
    log: &mut LogStore,
    sm: &mut StateMachine,
    acked: &Acked,
    power_lost: bool,
) -> Result<u64, String> {
    let state = log.get_log_state().await.map_err(|e| e.to_string())?;
    let purged = state.last_purged_log_id.map_or(0, |id| id.index);
    let last = state.last_log_id.map_or(0, |id| id.index);
    let kept = acked
        .truncating
        .map_or(acked.log, |since| acked.log.min(since - 1));
    if last < kept {
        return Err(format!(
            "acknowledged entry {kept} lost: the log ends at {last}"
        ));
    }
    if purged < acked.purged {
        return Err(format!(
            "acknowledged purge to {} lost: at {purged}",
            acked.purged
        ));
    }
    let entries = log
        .try_get_log_entries(purged + 1..=last)
        .await
        .map_err(|e| e.to_string())?;
    let indexes: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
    let expected: Vec<u64> = (purged + 1..=last).collect();
    if indexes != expected {
        return Err(format!(
            "the log from {} to {last} has holes: {indexes:?}",
            purged + 1
        ));
    }
    for e in &entries {
        match &e.payload {
            EntryPayload::Normal(r) if *r == request_at(e.log_id.index) => {}
            other => return Err(format!("entry {} holds {other:?}", e.log_id.index)),
        }
    }
    let vote = log.read_vote().await.map_err(|e| e.to_string())?;
    if vote.map_or(0, |v| v.leader_id().term) < acked.vote_term {
        return Err(format!(
            "acknowledged vote of term {} lost: {vote:?}",
            acked.vote_term
        ));
    }
    let committed = log.read_committed().await.map_err(|e| e.to_string())?;
    if committed.map_or(0, |id| id.index) > last {
        return Err(format!(
            "committed {committed:?} is past the log's end {last}"
        ));
    }
    if !power_lost && committed.map_or(0, |id| id.index) < acked.committed {
        return Err(format!(
            "acknowledged commit {} lost: {committed:?}",
            acked.committed
        ));
    }
    let (applied, _) = sm.applied_state().await.map_err(|e| e.to_string())?;
    let applied = applied.map_or(0, |id| id.index);
    if applied < purged {
        return Err(format!(
            "last_applied {applied} is behind the purge to {purged}"
        ));
    }
    for (key, value) in model(applied) {
        let got = sm.get(&key).map_err(|e| e.to_string())?;
        if got.as_ref() != Some(&value) {
            return Err(format!(
                "at last_applied {applied}, {key:?} is {got:?}, not {value:?}"
            ));
        }
    }
    for k in 0..KEYS + 5 {
        let key = format!("k{k:02}").into_bytes();
        let got = sm.get(&key).map_err(|e| e.to_string())?;
        if got.is_some() != model(applied).contains_key(&key) {
            return Err(format!(
                "at last_applied {applied}, {key:?} is {got:?}: the model has none"
            ));
        }
    }
    if let Some(snapshot) = sm.get_current_snapshot().await.map_err(|e| e.to_string())? {
        let at = snapshot.meta.last_log_id.map_or(0, |id| id.index);
        if at < purged {
            return Err(format!(
                "the snapshot at {at} does not cover the purge to {purged}"
            ));
        }
        check_snapshot(snapshot, at).await?;
    } else if purged > 0 {
        return Err(format!(
            "the log is purged to {purged} but there is no snapshot"
        ));
    }
    Ok(last)
}

/// A snapshot installed in a fresh store reads as the model at `at`.
async fn check_snapshot(
    snapshot: openraft::storage::Snapshot<TypeConfig>,
    at: u64,
) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (_, mut fresh) = open(dir.path(), Options::default());
    fresh
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .map_err(|e| e.to_string())?;
    // Every key, so a snapshot that brought a deleted key back fails too.
    let expected = model(at);
    for k in 0..KEYS + 5 {
        let key = format!("k{k:02}").into_bytes();
        let got = fresh.get(&key).map_err(|e| e.to_string())?;
        let want = expected.get(&key);
        if got.as_ref() != want {
            return Err(format!(
                "the snapshot at {at} has {key:?} = {got:?}, not {want:?}"
            ));
        }
    }
    Ok(())
}

fn open(dir: &Path, options: Options) -> (LogStore, StateMachine) {
    let db = Db::open(dir, options).expect("open");
    cairn_raft::open_db(Arc::new(db)).expect("stores")
}

fn cycles() -> u64 {
    std::env::var("CAIRN_CRASH_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(4)
}

#[test]
fn power_loss_keeps_every_acknowledged_write_and_the_state_machine_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = cairn_fs::FaultyFs::new(7);
    let rt = runtime();
    let mut acked = Acked::default();
    for cycle in 0..cycles() {
        let options = Options::default().file_system(Arc::new(fs.clone()));
        let (mut log, mut sm) = open(dir.path(), options);
        rt.block_on(async {
            let mut say = |line: String| acked.note(&line);
            drive(
                &mut log,
                &mut sm,
                cycle + 1,
                // Each cycle stops after another count of acknowledgements: some right after
                // an append, some after a commit or a purge.
                Some(12 + cycle * 7 % 23),
                cycle,
                &mut say,
            )
            .await;
        });
        fs.set_active(false);
        drop((log, sm));
        let mode = match cycle % 3 {
            0 => cairn_fs::PowerLoss::DropAllUnsynced,
            1 => cairn_fs::PowerLoss::DropRandomTail { seed: cycle },
            _ => cairn_fs::PowerLoss::ReorderedPages { seed: cycle },
        };
        fs.power_loss(mode).expect("power loss");
        fs.set_active(true);
        let (mut log, mut sm) = open(
            dir.path(),
            Options::default().file_system(Arc::new(fs.clone())),
        );
        let verdict = rt.block_on(verify(&mut log, &mut sm, &acked, true));
        assert!(verdict.is_ok(), "cycle {cycle} ({mode:?}): {verdict:?}");
    }
}

/// The child's side of the SIGKILL test: the workload on `dir` until killed.
fn child(dir: &Path, term: u64) {
    let (mut log, mut sm) = open(dir, Options::default());
    let stdout = std::io::stdout();
    runtime().block_on(async {
        let mut say = |line: String| {
            let mut out = stdout.lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        };
        drive(&mut log, &mut sm, term, None, term, &mut say).await;
    });
}

#[test]
fn kill_9_keeps_every_acknowledged_write_and_the_state_machine_whole() {
    if let (Ok(dir), Ok(term)) = (
        std::env::var("CAIRN_RAFT_CHILD_DIR"),
        std::env::var("CAIRN_RAFT_CHILD_TERM"),
    ) {
        child(Path::new(&dir), term.parse().expect("term"));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut acked = Acked::default();
    for cycle in 0..cycles() {
        let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args([
                "--exact",
                "kill_9_keeps_every_acknowledged_write_and_the_state_machine_whole",
                "--nocapture",
            ])
            .env("CAIRN_RAFT_CHILD_DIR", dir.path())
            .env("CAIRN_RAFT_CHILD_TERM", (cycle + 1).to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let stdout = child.stdout.take().expect("stdout");
        let (first_acks, heard) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                lines.push(line);
                if lines.len() == 20 {
                    let _ = first_acks.send(());
                }
            }
            lines
        });
        let started = Instant::now();
        // Killed a while after its first acknowledgements, however slow the machine.
        let _ = heard.recv_timeout(Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(100 + (cycle * 137) % 400));
        child.kill().expect("kill");
        let _ = child.wait();
        let lines = reader.join().expect("reader");
        for line in &lines {
            acked.note(line);
        }
        assert!(
            lines.iter().any(|l| l.starts_with("log ")),
            "cycle {cycle}: the child acknowledged nothing in {:?}",
            started.elapsed()
        );
        let (mut log, mut sm) = open(dir.path(), Options::default());
        let verdict = rt.block_on(verify(&mut log, &mut sm, &acked, false));
        assert!(verdict.is_ok(), "cycle {cycle}: {verdict:?}");
    }
}

/// A committed request the engine would refuse (a reversed range, an over-long key) is applied
/// as nothing, with the reason in its response: failing would stop every node, again after each
/// restart, since openraft re-applies it.
#[test]
fn a_request_the_engine_refuses_is_applied_as_nothing_on_every_replica() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, mut sm) = open(dir.path(), Options::default());
    let rt = runtime();
    let bad = [
        Request::DeleteRange {
            start: b"b".to_vec(),
            end: b"a".to_vec(),
        },
        Request::Put {
            key: vec![b'k'; cairn::MAX_KEY_LEN + 1],
            value: b"v".to_vec(),
        },
    ];
    let mut entries = vec![Entry {
        log_id: log_id(1, 1),
        payload: EntryPayload::Normal(Request::Put {
            key: b"a".to_vec(),
            value: b"kept".to_vec(),
        }),
    }];
    for (i, request) in bad.into_iter().enumerate() {
        assert!(request.validate().is_err());
        entries.push(Entry {
            log_id: log_id(1, 2 + i as u64),
            payload: EntryPayload::Normal(request),
        });
    }
    let responses = rt.block_on(sm.apply(entries)).expect("apply");
    assert_eq!(responses.len(), 3);
    assert!(responses[0].refused.is_none());
    assert!(responses[1].refused.is_some() && responses[2].refused.is_some());
    let (applied, _) = rt.block_on(sm.applied_state()).expect("applied");
    assert_eq!(applied.map(|id| id.index), Some(3));
    assert_eq!(sm.get(b"a").expect("get").as_deref(), Some(&b"kept"[..]));
}
