//! Cairn errors as openraft's `StorageError`, with the Cairn error inside and the subject (log,
//! vote, state machine, snapshot) and verb openraft reports. openraft stops the node on any
//! storage error, so a stopped database stops the node; nothing is acknowledged after it.

use openraft::storage::SnapshotSignature;
use openraft::{StorageError, StorageIOError};

use crate::types::NodeId;

/// The store's result type.
pub type StorageResult<T> = Result<T, StorageError<NodeId>>;

pub(crate) fn read_logs(e: &(impl std::error::Error + 'static)) -> StorageError<NodeId> {
    StorageIOError::read_logs(e).into()
}

pub(crate) fn write_logs(e: &(impl std::error::Error + 'static)) -> StorageError<NodeId> {
    StorageIOError::write_logs(e).into()
}

pub(crate) fn read_vote(e: &(impl std::error::Error + 'static)) -> StorageError<NodeId> {
    StorageIOError::read_vote(e).into()
}

pub(crate) fn write_vote(e: &(impl std::error::Error + 'static)) -> StorageError<NodeId> {
    StorageIOError::write_vote(e).into()
}

pub(crate) fn read_state(e: &(impl std::error::Error + 'static)) -> StorageError<NodeId> {
    StorageIOError::read_state_machine(e).into()
}

pub(crate) fn write_state(e: &(impl std::error::Error + 'static)) -> StorageError<NodeId> {
    StorageIOError::write_state_machine(e).into()
}

pub(crate) fn read_snapshot(
    signature: Option<SnapshotSignature<NodeId>>,
    e: &(impl std::error::Error + 'static),
) -> StorageError<NodeId> {
    StorageIOError::read_snapshot(signature, e).into()
}

pub(crate) fn write_snapshot(
    signature: Option<SnapshotSignature<NodeId>>,
    e: &(impl std::error::Error + 'static),
) -> StorageError<NodeId> {
    StorageIOError::write_snapshot(signature, e).into()
}

/// A record the store wrote that does not read back: damage, as the engine's own corruption.
#[derive(Debug)]
pub(crate) struct Malformed(pub(crate) String);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed record: {}", self.0)
    }
}

impl std::error::Error for Malformed {}
