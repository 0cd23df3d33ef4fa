//! `cairn cluster init|status|add|remove`: form a replicated Cairn and change its members; and
//! `cairn kv --cluster ADDR,… put|get|delete|delete-range|scan`: a client of it that follows
//! the leader (`cairn_raft::client`).
//!
//! Exit codes as the other commands', and one more: 6 when a write's answer was lost after it
//! was sent (the node died or the connection broke), so the write may or may not be applied.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cairn_raft::client::{self, Client, ClientError};
use cairn_raft::wire::{ClientCall, ClientReply, NodeStatus};
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::output::{FAILED, NO, arg_bytes, arg_pair, bytes_text, parse_duration, print_json};

/// The exit code of a write whose outcome is unknown.
pub const UNCERTAIN: i32 = 6;

#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Forms the cluster on a node never initialized: from its --peers, or of it alone.
    Init {
        /// The node's address.
        addr: String,
    },
    /// What each node knows: its state, leader, term, log and applied indexes, members.
    Status {
        /// Node addresses, ADDR,…
        #[arg(value_delimiter = ',', required = true)]
        addrs: Vec<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Adds a running node (started with `cairn serve`, never initialized) as a voter.
    Add {
        #[command(flatten)]
        cluster: ClusterAddrs,
        /// The new node, as ID=ADDR.
        node: String,
    },
    /// Removes a node from the cluster (its process may then be stopped).
    Remove {
        #[command(flatten)]
        cluster: ClusterAddrs,
        /// The node's id.
        id: u64,
    },
}

/// Where the cluster is.
#[derive(Debug, Args)]
struct ClusterAddrs {
    /// Addresses of the cluster's nodes, ADDR,… (any of them; the leader is found).
    #[arg(long, value_delimiter = ',', required = true)]
    cluster: Vec<String>,
    /// How long to keep trying before giving up.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    timeout: Duration,
}

pub fn run(args: ClusterArgs) -> i32 {
    block_on(async move {
        match args.command {
            ClusterCommand::Init { addr } => init(&addr).await,
            ClusterCommand::Status { addrs, json } => status(&addrs, json).await,
            ClusterCommand::Add { cluster, node } => add(&cluster, &node).await,
            ClusterCommand::Remove { cluster, id } => remove(&cluster, id).await,
        }
    })
}

fn block_on(work: impl Future<Output = i32>) -> i32 {
    crate::init_logging(false);
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(work),
        Err(e) => crate::output::failed("starting the runtime", &e),
    }
}

/// Forms the cluster at `addr`, waiting up to 10 s for a node that is still starting to listen.
async fn init(addr: &str) -> i32 {
    let started = std::time::Instant::now();
    let mut answer = client::call_node(addr, ClientCall::Init, Duration::from_secs(10)).await;
    while answer
        .as_ref()
        .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        && started.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
        answer = client::call_node(addr, ClientCall::Init, Duration::from_secs(10)).await;
    }
    match answer {
        Ok(ClientReply::Done) => {
            println!("initialized: {addr} forms the cluster (see `cairn cluster status {addr}`)");
            0
        }
        Ok(ClientReply::Invalid(why)) => crate::bad_args(&why),
        Ok(other) => {
            eprintln!("cairn: init: {}", reply_text(&other));
            FAILED
        }
        Err(e) => {
            eprintln!("cairn: init: {addr}: {e}");
            FAILED
        }
    }
}

async fn status(addrs: &[String], json: bool) -> i32 {
    let mut statuses = Vec::new();
    for addr in addrs {
        let status = client::status(addr, Duration::from_secs(5)).await;
        statuses.push(AddrStatus {
            addr: addr.clone(),
            status: status.as_ref().ok().cloned(),
            error: status.err().map(|e| e.to_string()),
        });
    }
    if json {
        print_json(&statuses);
    } else {
        let rows: Vec<Vec<String>> = statuses.iter().map(AddrStatus::cells).collect();
        crate::output::print_table(
            &[
                "ADDR", "ID", "STATE", "LEADER", "TERM", "LAST LOG", "APPLIED", "SNAPSHOT",
                "VOTERS",
            ],
            &rows,
        );
    }
    if statuses.iter().all(|s| s.status.is_some()) {
        0
    } else {
        FAILED
    }
}

/// One node's answer to `status`, or why there was none.
#[derive(Debug, Serialize)]
struct AddrStatus {
    addr: String,
    status: Option<NodeStatus>,
    error: Option<String>,
}

impl AddrStatus {
    fn cells(&self) -> Vec<String> {
        let index = |i: Option<u64>| i.map_or_else(|| "-".to_owned(), |i| i.to_string());
        match (&self.status, &self.error) {
            (Some(s), _) => vec![
                self.addr.clone(),
                s.id.to_string(),
                s.state.clone(),
                index(s.leader),
                s.term.to_string(),
                index(s.last_log),
                index(s.last_applied),
                index(s.snapshot),
                s.voters
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ],
            (None, error) => vec![
                self.addr.clone(),
                "-".to_owned(),
                format!("unreachable: {}", error.as_deref().unwrap_or("")),
            ],
        }
    }
}

async fn add(cluster: &ClusterAddrs, node: &str) -> i32 {
    let (id, addr) = match crate::serve::parse_peers(&[node.to_owned()]) {
        Ok(peers) => match peers.into_iter().next() {
            Some(pair) => pair,
            None => return crate::bad_args("give the new node as ID=ADDR"),
        },
        Err(why) => return crate::bad_args(&why),
    };
    // The leader would wait for an unreachable learner to catch up until the client gives up.
    match client::status(&addr, cluster.timeout).await {
        Ok(status) if status.id != id => {
            return crate::bad_args(&format!("{addr} is node {}, not node {id}", status.id));
        }
        Ok(status) if !status.nodes.is_empty() && !status.nodes.contains_key(&id) => {
            return crate::bad_args(&format!("node {id} at {addr} belongs to another cluster"));
        }
        Ok(_) => {}
        Err(e) => {
            eprintln!(
                "cairn: node {id} at {addr} does not answer ({e}): start it with `cairn serve` first"
            );
            return FAILED;
        }
    }
    let Some(mut voters) = leader_voters(cluster).await else {
        return FAILED;
    };
    voters.insert(id);
    let change = ClientCall::ChangeMembership {
        add: BTreeMap::from([(id, addr.clone())]),
        voters,
    };
    membership(cluster, change, &format!("node {id} at {addr} added")).await
}

async fn remove(cluster: &ClusterAddrs, id: u64) -> i32 {
    let Some(mut voters) = leader_voters(cluster).await else {
        return FAILED;
    };
    if !voters.remove(&id) {
        return crate::bad_args(&format!("node {id} is not a voter of the cluster"));
    }
    if voters.is_empty() {
        return crate::bad_args("the last voter cannot be removed");
    }
    let change = ClientCall::ChangeMembership {
        add: BTreeMap::new(),
        voters,
    };
    membership(cluster, change, &format!("node {id} removed")).await
}

/// The voters as the leader has them, found through any of `cluster`'s nodes.
async fn leader_voters(cluster: &ClusterAddrs) -> Option<BTreeSet<u64>> {
    for addr in &cluster.cluster {
        let Ok(status) = client::status(addr, cluster.timeout).await else {
            continue;
        };
        let leader_addr = status.leader.and_then(|id| status.nodes.get(&id).cloned());
        if let Some(leader) = leader_addr
            && let Ok(leader) = client::status(&leader, cluster.timeout).await
        {
            return Some(leader.voters);
        }
    }
    eprintln!(
        "cairn: no node of {} knows a leader that answers",
        cluster.cluster.join(",")
    );
    None
}

async fn membership(cluster: &ClusterAddrs, change: ClientCall, done: &str) -> i32 {
    let mut client = match Client::new(cluster.cluster.clone()) {
        Ok(client) => client.deadline(cluster.timeout),
        Err(e) => return crate::bad_args(&e.to_string()),
    };
    match client.call(change).await {
        Ok(ClientReply::Done) => {
            println!("{done}");
            0
        }
        Ok(other) => {
            eprintln!("cairn: {}", reply_text(&other));
            FAILED
        }
        Err(e) => client_failed(&e),
    }
}

fn reply_text(reply: &ClientReply) -> String {
    match reply {
        ClientReply::Failed(why) | ClientReply::Invalid(why) => why.clone(),
        other => format!("an unexpected answer: {other:?}"),
    }
}

fn client_failed(e: &ClientError) -> i32 {
    eprintln!("cairn: {e}");
    match e {
        ClientError::Invalid(_) => crate::output::BAD_ARGS,
        ClientError::Uncertain(_) => UNCERTAIN,
        ClientError::Unavailable(_) => FAILED,
    }
}

#[derive(Debug, Args)]
pub struct KvArgs {
    #[command(flatten)]
    cluster: ClusterAddrs,
    /// Keys and values on the command line are hex.
    #[arg(long, global = true)]
    hex: bool,
    #[command(subcommand)]
    command: KvCommand,
}

#[derive(Debug, Subcommand)]
enum KvCommand {
    /// Sets a key (acknowledged once committed).
    Put {
        key: String,
        value: String,
        /// The value's time to live (`20s`, `10m`, `1h`).
        #[arg(long, value_parser = parse_duration)]
        ttl: Option<Duration>,
    },
    /// The value of a key (linearizable; exits 1 when it has none).
    Get {
        key: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deletes a key.
    Delete { key: String },
    /// Deletes the keys in [START, END).
    DeleteRange { start: String, end: String },
    /// Keys and values in order from --from to --to (linearizable).
    Scan {
        /// The first key.
        #[arg(long, default_value = "")]
        from: String,
        /// The first key past the range.
        #[arg(long)]
        to: Option<String>,
        /// At most this many pairs.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Print JSON Lines.
        #[arg(long)]
        json: bool,
    },
}

pub fn kv(args: KvArgs) -> i32 {
    block_on(async move {
        let mut client = match Client::new(args.cluster.cluster.clone()) {
            Ok(client) => client.deadline(args.cluster.timeout),
            Err(e) => return crate::bad_args(&e.to_string()),
        };
        match kv_command(&mut client, args.command, args.hex).await {
            Ok(code) => code,
            Err(KvError::Args(why)) => crate::bad_args(&why),
            Err(KvError::Client(e)) => client_failed(&e),
        }
    })
}

enum KvError {
    Args(String),
    Client(ClientError),
}

impl From<ClientError> for KvError {
    fn from(e: ClientError) -> Self {
        Self::Client(e)
    }
}

async fn kv_command(client: &mut Client, command: KvCommand, hex: bool) -> Result<i32, KvError> {
    let bytes = |text: &str| arg_bytes(text, hex).map_err(KvError::Args);
    match command {
        KvCommand::Put { key, value, ttl } => {
            let (key, value) = arg_pair(&key, &value, hex).map_err(KvError::Args)?;
            let index = match ttl {
                Some(ttl) if ttl < Duration::from_secs(1) => {
                    return Err(KvError::Args(format!(
                        "--ttl {ttl:?}: give at least 1s (a shorter one expires before it is read)"
                    )));
                }
                Some(ttl) => client.put_with_ttl(&key, &value, ttl).await?,
                None => client.put(&key, &value).await?,
            };
            println!("put, committed at index {index}");
        }
        KvCommand::Get { key, json } => {
            let value = client.get(&bytes(&key)?).await?;
            if json {
                print_json(
                    &serde_json::json!({ "key": key, "value": value.as_deref().map(bytes_text) }),
                );
            } else if let Some(value) = &value {
                println!("{}", bytes_text(value));
            }
            if value.is_none() {
                if !json {
                    eprintln!("cairn: {key}: no value");
                }
                return Ok(NO);
            }
        }
        KvCommand::Delete { key } => {
            let index = client.delete(&bytes(&key)?).await?;
            println!("deleted, committed at index {index}");
        }
        KvCommand::DeleteRange { start, end } => {
            let (start, end) = arg_pair(&start, &end, hex).map_err(KvError::Args)?;
            let index = client.delete_range(&start, &end).await?;
            println!("range deleted, committed at index {index}");
        }
        KvCommand::Scan {
            from,
            to,
            limit,
            json,
        } => {
            let to = to.as_deref().map(bytes).transpose()?;
            for (key, value) in client.scan(&bytes(&from)?, to.as_deref(), limit).await? {
                if json {
                    let line =
                        serde_json::json!({ "key": bytes_text(&key), "value": bytes_text(&value) });
                    println!("{line}");
                } else {
                    println!("{} {}", bytes_text(&key), bytes_text(&value));
                }
            }
        }
    }
    Ok(0)
}
