//! Three nodes over real TCP on loopback, in one process: formed from one node by `init` and a
//! membership change, every client call through the leader-following client, the leader shut
//! down mid-way and the others carrying on, the old leader restarted on its database catching
//! up; and a node without a quorum, or gone, answering no client call as done.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cairn_raft::client::{self, Client, ClientError};
use cairn_raft::node::{Node, NodeConfig};
use cairn_raft::wire::{ClientCall, ClientReply};

const WAIT: Duration = Duration::from_secs(20);

fn config(id: u64, dir: &std::path::Path, listen: &str) -> NodeConfig {
    let mut config = NodeConfig::new(id, dir.join(format!("node-{id}")), listen);
    config.heartbeat = Duration::from_millis(50);
    config.election_timeout = (Duration::from_millis(300), Duration::from_millis(600));
    config.snapshot_every = 50;
    config.keep_behind_snapshot = 10;
    config
}

/// Waits until every node at `addrs` has applied `index`.
async fn applied_everywhere(addrs: &[String], index: u64) {
    let started = std::time::Instant::now();
    for addr in addrs {
        loop {
            let status = client::status(addr, Duration::from_secs(2)).await;
            if status.is_ok_and(|s| s.last_applied >= Some(index)) {
                break;
            }
            assert!(started.elapsed() < WAIT, "{addr} did not apply {index}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_replicate_fail_over_and_catch_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        let node = Node::start(config(id, dir.path(), "127.0.0.1:0"))
            .await
            .expect("start");
        nodes.insert(id, node);
    }
    let addrs: Vec<String> = nodes.values().map(|n| n.addr().to_string()).collect();
    let by_id: BTreeMap<u64, String> = nodes
        .iter()
        .map(|(id, node)| (*id, node.addr().to_string()))
        .collect();
    let addr = |id: u64| by_id.get(&id).cloned().expect("a node of the three");

    // Form the cluster: node 1 alone, then 2 and 3 added as voters.
    let init = client::call_node(&addr(1), ClientCall::Init, WAIT).await;
    assert_eq!(init.expect("init"), ClientReply::Done);
    let mut client = Client::new(addrs.clone()).expect("client").deadline(WAIT);
    let grow = ClientCall::ChangeMembership {
        add: [(2, addr(2)), (3, addr(3))].into(),
        voters: BTreeSet::from([1, 2, 3]),
    };
    assert_eq!(client.call(grow).await.expect("grow"), ClientReply::Done);

    // Every kind of write, and reads that see them.
    for i in 0..120u32 {
        let key = format!("k{i:03}");
        client.put(key.as_bytes(), b"v1").await.expect("put");
    }
    client.delete(b"k005").await.expect("delete");
    client.delete_range(b"k010", b"k020").await.expect("range");
    client
        .put_with_ttl(b"short", b"lived", Duration::from_millis(1))
        .await
        .expect("ttl put");
    let last = client
        .put_with_ttl(b"long", b"lived", Duration::from_secs(3600))
        .await
        .expect("ttl put");
    assert_eq!(
        client.get(b"k004").await.expect("get"),
        Some(b"v1".to_vec())
    );
    assert_eq!(client.get(b"k005").await.expect("get"), None);
    assert_eq!(client.get(b"k015").await.expect("get"), None);
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(client.get(b"short").await.expect("get"), None, "expired");
    assert_eq!(
        client.get(b"long").await.expect("get"),
        Some(b"lived".to_vec())
    );
    let scanned = client
        .scan(b"k008", Some(b"k022"), 100)
        .await
        .expect("scan");
    let keys: Vec<String> = scanned
        .iter()
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(keys, ["k008", "k009", "k020", "k021"]);
    assert!(matches!(
        client.delete_range(b"z", b"a").await,
        Err(ClientError::Invalid(_))
    ));
    applied_everywhere(&addrs, last).await;

    // The leader goes; the other two elect one and go on.
    let leader = client::status(&addr(1), WAIT)
        .await
        .expect("status")
        .leader
        .expect("a leader");
    let leader_addr = addr(leader);
    nodes
        .remove(&leader)
        .expect("leader")
        .shutdown()
        .await
        .expect("shutdown");
    for i in 0..60u32 {
        let key = format!("after{i:02}");
        client.put(key.as_bytes(), b"v2").await.expect("put after");
    }
    let last = client.delete(b"k000").await.expect("delete after");
    assert_eq!(client.get(b"k000").await.expect("get"), None);
    assert_eq!(
        client.get(b"after59").await.expect("get"),
        Some(b"v2".to_vec())
    );

    // Back on its database and port: it catches up (by log or snapshot) with every delete.
    let back = Node::start(config(leader, dir.path(), &leader_addr))
        .await
        .expect("restart");
    nodes.insert(leader, back);
    applied_everywhere(&addrs, last).await;
    let status = client::status(&leader_addr, WAIT).await.expect("status");
    assert_eq!(status.voters, BTreeSet::from([1, 2, 3]));
    for node in nodes.into_values() {
        node.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_a_quorum_is_unavailable_and_writes_are_never_reported_done() {
    let dir = tempfile::tempdir().expect("tempdir");
    let one = Node::start(config(1, dir.path(), "127.0.0.1:0"))
        .await
        .expect("start");
    let addr = one.addr().to_string();
    // Not initialized: no leader anywhere.
    let mut client = Client::new(vec![addr.clone()])
        .expect("client")
        .deadline(Duration::from_millis(800));
    assert!(matches!(
        client.put(b"k", b"v").await,
        Err(ClientError::Unavailable(_))
    ));
    // A node that is gone: unavailable, not sent.
    one.shutdown().await.expect("shutdown");
    assert!(matches!(
        client.get(b"k").await,
        Err(ClientError::Unavailable(_))
    ));
    assert!(matches!(
        Client::new(Vec::new()),
        Err(ClientError::Invalid(_))
    ));
}
