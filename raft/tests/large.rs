//! Appends and applies of more than the engine's log takes in one record (1 GiB): the store
//! splits them into several writes. Slow and memory-hungry (about 4.5 GiB), so ignored by
//! default: `cargo test --release -p cairn-raft --test large -- --ignored`.

#![allow(
    clippy::result_large_err,
    reason = "in a test, a panic is the failure report"
)]

use std::sync::Arc;

use cairn::{Db, Options};
use cairn_raft::{Request, TypeConfig};
use openraft::storage::{RaftLogStorageExt, RaftStateMachine};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader};

#[test]
#[ignore = "writes 1.25 GiB twice and holds it in memory; run with --ignored"]
fn an_append_and_an_apply_of_over_1_gib_go_through_in_several_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    let (mut log, mut sm) = cairn_raft::open_db(Arc::new(db)).expect("stores");
    // Five values just under the entry limit: 1.25 GiB in one call.
    let len = cairn::MAX_VALUE_LEN - 1024;
    let request = Request::Put {
        key: b"k".to_vec(),
        value: vec![7; len],
    };
    assert_eq!(request.validate(), Ok(()));
    let too_large = Request::Put {
        key: b"k".to_vec(),
        value: vec![7; cairn::MAX_VALUE_LEN],
    };
    assert!(
        too_large
            .validate()
            .is_err_and(|why| why.contains("log entry"))
    );
    drop((request, too_large));
    let entries: Vec<Entry<TypeConfig>> = (1..=5)
        .map(|index| Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Request::Put {
                key: format!("k{index}").into_bytes(),
                value: vec![u8::try_from(index).expect("small"); len],
            }),
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        log.blocking_append(entries.clone()).await.expect("append");
        let read = log.try_get_log_entries(1..=5).await.expect("read");
        assert_eq!(read.len(), 5);
        let responses = sm.apply(entries).await.expect("apply");
        assert!(responses.iter().all(|r| r.refused.is_none()));
        let (applied, _) = sm.applied_state().await.expect("applied");
        assert_eq!(applied.map(|id| id.index), Some(5));
    });
    for index in 1..=5_u8 {
        let value = sm.get(format!("k{index}").as_bytes()).expect("get");
        assert_eq!(
            value.map(|v| (v.len(), v.first().copied())),
            Some((len, Some(index)))
        );
    }
}
