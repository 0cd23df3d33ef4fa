//! A client of a replicated Cairn that follows the leader: it sends each call to the node it
//! last found leading (or the next address it was given), goes where a `NotLeader` answer
//! points, and tries the others when a node does not answer, until its deadline.
//!
//! A write is sent at most once: once its bytes are out, a lost answer (the node died, the
//! connection broke, the node failed mid-way) leaves the write's outcome unknown, and the
//! client says so ([`ClientError::Uncertain`]) rather than send it again, since a late
//! duplicate could undo a newer write. Reads are retried freely.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::net::TcpStream;

use crate::types::Request;
use crate::wire::{Call, ClientCall, ClientReply, NodeStatus, Reply, read_frame, write_frame};

/// Why a client call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The request was refused before it was proposed: nothing was written.
    Invalid(String),
    /// The write was sent, and its answer lost: it may or may not have been committed.
    Uncertain(String),
    /// No node could do it before the deadline (none reachable, no leader); a write was not sent.
    Unavailable(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(why) => write!(f, "refused: {why}"),
            Self::Uncertain(why) => write!(f, "the write's outcome is unknown: {why}"),
            Self::Unavailable(why) => write!(f, "no leader answered: {why}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// A client of the cluster at `addrs`.
#[derive(Debug)]
pub struct Client {
    addrs: Vec<String>,
    /// The address to try next: the leader last heard of, or the next in `addrs`.
    target: String,
    next: usize,
    stream: Option<(String, TcpStream)>,
    deadline: Duration,
    attempt_timeout: Duration,
}

impl Client {
    /// A client of the nodes at `addrs` (any of the cluster's; it finds the leader), giving
    /// each call 10 s.
    ///
    /// # Errors
    /// `Invalid` when `addrs` is empty.
    pub fn new(addrs: Vec<String>) -> Result<Self, ClientError> {
        let target = addrs
            .first()
            .cloned()
            .ok_or_else(|| ClientError::Invalid("no node addresses".to_owned()))?;
        Ok(Self {
            addrs,
            target,
            next: 1,
            stream: None,
            deadline: Duration::from_secs(10),
            attempt_timeout: Duration::from_secs(5),
        })
    }

    /// How long a call may take in all, trying node after node.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self.attempt_timeout = self.attempt_timeout.min(deadline);
        self
    }

    /// How long one node may take to answer before the client tries another (5 s, or the
    /// deadline if shorter). A write whose answer takes longer is uncertain.
    #[must_use]
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout.min(self.deadline);
        self
    }

    /// Sets `key` to `value`; the log index it was committed at.
    ///
    /// # Errors
    /// See [`ClientError`].
    pub async fn put(&mut self, key: &[u8], value: &[u8]) -> Result<u64, ClientError> {
        self.write(Request::Put {
            key: key.to_vec(),
            value: value.to_vec(),
        })
        .await
    }

    /// Sets `key` to `value` for `ttl` from now (this machine's clock): every replica expires it
    /// at the same moment.
    ///
    /// # Errors
    /// See [`ClientError`].
    pub async fn put_with_ttl(
        &mut self,
        key: &[u8],
        value: &[u8],
        ttl: Duration,
    ) -> Result<u64, ClientError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let expires = now.saturating_add(ttl).as_millis();
        self.write(Request::PutWithTtl {
            key: key.to_vec(),
            value: value.to_vec(),
            expires_at_ms: u64::try_from(expires).unwrap_or(u64::MAX),
        })
        .await
    }

    /// Deletes `key`.
    ///
    /// # Errors
    /// See [`ClientError`].
    pub async fn delete(&mut self, key: &[u8]) -> Result<u64, ClientError> {
        self.write(Request::Delete { key: key.to_vec() }).await
    }

    /// Deletes the keys in `[start, end)`.
    ///
    /// # Errors
    /// See [`ClientError`].
    pub async fn delete_range(&mut self, start: &[u8], end: &[u8]) -> Result<u64, ClientError> {
        self.write(Request::DeleteRange {
            start: start.to_vec(),
            end: end.to_vec(),
        })
        .await
    }

    /// Replicates `request`; the log index it was committed at.
    ///
    /// # Errors
    /// See [`ClientError`]; a request the state machine applied as nothing is `Invalid`.
    pub async fn write(&mut self, request: Request) -> Result<u64, ClientError> {
        match self.call(ClientCall::Write(request)).await? {
            ClientReply::Written {
                refused: Some(why), ..
            } => Err(ClientError::Invalid(why)),
            ClientReply::Written { index, .. } => Ok(index),
            other => Err(unexpected(&other)),
        }
    }

    /// The value of `key` (linearizable).
    ///
    /// # Errors
    /// See [`ClientError`].
    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
        match self.call(ClientCall::Get { key: key.to_vec() }).await? {
            ClientReply::Value(value) => Ok(value),
            other => Err(unexpected(&other)),
        }
    }

    /// The pairs in `[start, end)`, at most `limit` (linearizable).
    ///
    /// # Errors
    /// See [`ClientError`].
    pub async fn scan(
        &mut self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, ClientError> {
        let call = ClientCall::Scan {
            start: start.to_vec(),
            end: end.map(<[u8]>::to_vec),
            limit,
        };
        match self.call(call).await? {
            ClientReply::Pairs(pairs) => Ok(pairs),
            other => Err(unexpected(&other)),
        }
    }

    /// Sends `call` to the leader, following redirects and trying other nodes until the
    /// deadline. `Invalid` and `Failed` answers come back as errors; every other answer is
    /// returned.
    ///
    /// # Errors
    /// See [`ClientError`].
    pub async fn call(&mut self, call: ClientCall) -> Result<ClientReply, ClientError> {
        let is_write = matches!(
            call,
            ClientCall::Write(_) | ClientCall::ChangeMembership { .. }
        );
        let started = Instant::now();
        let mut last_problem = String::from("no node tried");
        while started.elapsed() < self.deadline {
            let target = self.target.clone();
            let sent = match self.exchange(&target, &call).await {
                Ok(reply) => reply,
                Err(Exchange::Lost(e)) if is_write => {
                    // The next call starts elsewhere: this node may be stopped or gone.
                    self.rotate();
                    return Err(ClientError::Uncertain(format!("{target}: {e}")));
                }
                Err(Exchange::NotSent(e) | Exchange::Lost(e)) => {
                    last_problem = format!("{target}: {e}");
                    self.try_another().await;
                    continue;
                }
            };
            match sent {
                ClientReply::NotLeader(Some((id, addr))) if addr != target => {
                    last_problem = format!("{target}: not the leader, node {id} is");
                    self.target = addr;
                }
                ClientReply::NotLeader(_) => {
                    last_problem = format!("{target}: no leader known");
                    self.try_another().await;
                }
                ClientReply::Invalid(why) => return Err(ClientError::Invalid(why)),
                ClientReply::Failed(why) if is_write => {
                    // The entry may be in the leader's log, to be committed later.
                    return Err(ClientError::Uncertain(format!("{target}: {why}")));
                }
                ClientReply::Failed(why) => {
                    last_problem = format!("{target}: {why}");
                    self.try_another().await;
                }
                reply => return Ok(reply),
            }
        }
        Err(ClientError::Unavailable(format!(
            "{last_problem} (after {:?})",
            self.deadline
        )))
    }

    /// Moves on to the next address, after a pause once every address was tried.
    async fn try_another(&mut self) {
        self.rotate();
        if self.next.is_multiple_of(self.addrs.len()) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Makes the next address the target.
    fn rotate(&mut self) {
        self.stream = None;
        if let Some(addr) = self.addrs.get(self.next % self.addrs.len()) {
            self.target.clone_from(addr);
        }
        self.next += 1;
    }

    async fn exchange(&mut self, target: &str, call: &ClientCall) -> Result<ClientReply, Exchange> {
        let mut stream = match self.stream.take() {
            // A connection the node closed meanwhile (it restarted) is not used: a write sent
            // on it would be lost unseen and reported uncertain, though nothing arrived.
            Some((addr, stream)) if addr == target && still_open(&stream) => stream,
            _ => connect(target, self.attempt_timeout)
                .await
                .map_err(Exchange::NotSent)?,
        };
        let call = Call::Client(call.clone());
        match tokio::time::timeout(self.attempt_timeout, write_frame(&mut stream, &call)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(Exchange::NotSent(e)),
            Err(_) => return Err(Exchange::Lost(timed_out(self.attempt_timeout))),
        }
        let reply = tokio::time::timeout(self.attempt_timeout, read_frame::<_, Reply>(&mut stream))
            .await
            .map_err(|_| Exchange::Lost(timed_out(self.attempt_timeout)))?
            .map_err(Exchange::Lost)?;
        match reply {
            Some(Reply::Client(reply)) => {
                self.stream = Some((target.to_owned(), stream));
                Ok(reply)
            }
            Some(other) => Err(Exchange::Lost(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a node answered a client call with {other:?}"),
            ))),
            None => Err(Exchange::Lost(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the node closed the connection",
            ))),
        }
    }
}

/// Why one exchange with one node failed: before the call was out, or after.
enum Exchange {
    NotSent(std::io::Error),
    Lost(std::io::Error),
}

/// True when `stream` is open with nothing unread: a node never speaks first, so readable
/// means closed (or out of step), and either way the connection is done.
pub(crate) fn still_open(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

fn timed_out(after: Duration) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within {after:?}"),
    )
}

fn unexpected(reply: &ClientReply) -> ClientError {
    ClientError::Unavailable(format!("an unexpected answer: {reply:?}"))
}

async fn connect(addr: &str, timeout: Duration) -> std::io::Result<TcpStream> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| timed_out(timeout))??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Sends `call` to the node at `addr` alone (status, init) and returns its answer.
///
/// # Errors
/// The connection's, or `TimedOut` after `timeout`.
pub async fn call_node(
    addr: &str,
    call: ClientCall,
    timeout: Duration,
) -> std::io::Result<ClientReply> {
    let mut stream = connect(addr, timeout).await?;
    let exchange = async {
        write_frame(&mut stream, &Call::Client(call)).await?;
        match read_frame::<_, Reply>(&mut stream).await? {
            Some(Reply::Client(reply)) => Ok(reply),
            other => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("an unexpected answer: {other:?}"),
            )),
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| timed_out(timeout))?
}

/// The status of the node at `addr`.
///
/// # Errors
/// As [`call_node`]'s, or `InvalidData` for an answer that is not a status.
pub async fn status(addr: &str, timeout: Duration) -> std::io::Result<NodeStatus> {
    match call_node(addr, ClientCall::Status, timeout).await? {
        ClientReply::Status(status) => Ok(status),
        other => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("an unexpected answer: {other:?}"),
        )),
    }
}
