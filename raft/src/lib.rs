//! Cairn as the storage of an [openraft](https://docs.rs/openraft/0.9) node: the Raft log
//! ([`LogStore`]), a replicated key-value state machine ([`StateMachine`]) and its snapshots,
//! implementing openraft 0.9's storage traits (`RaftLogStorage`, `RaftLogReader`,
//! `RaftStateMachine`, `RaftSnapshotBuilder`) on one Cairn database.
//!
//! The log is a queue (appended at the tail, purged at the head once applied), the workload
//! Cairn's range tombstones and compaction serve: a purged prefix is one range delete, and
//! tables wholly under it are dropped. Appends are synced before openraft is told they are
//! durable; the state machine writes each applied batch's data with `last_applied` atomically;
//! a snapshot is built from one Cairn snapshot, kept in the database as chunks and streamed a
//! chunk at a time, and installed so that a crash leaves the old state or the new.
//!
//! On top of the store, the replicated service that `cairn serve` runs: [`node`] (openraft over
//! TCP, peers' RPCs and clients' calls on one port, linearizable reads), [`wire`] (the framed
//! messages) and [`client`] (a client that follows the leader and never resends a write whose
//! answer was lost).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (log, state_machine) = cairn_raft::open("/var/lib/node-1")?;
//! // Hand both to `openraft::Raft::new(id, config, network, log, state_machine)`.
//! # let _ = (log, state_machine);
//! # Ok(())
//! # }
//! ```

#![allow(
    clippy::result_large_err,
    reason = "openraft's traits return its StorageError (224 bytes); the helpers return what they hand on"
)]

pub mod client;
pub mod codec;
mod error;
mod log_layout;
mod log_store;
pub mod network;
pub mod node;
mod planted;
mod snapshot;
mod snapshot_data;
mod snapshot_format;
mod state_machine;
mod types;
pub mod wire;

use std::path::Path;
use std::sync::Arc;

use cairn::{CfOptions, ColumnFamily, Db, Options};

pub use error::StorageResult;
pub use log_layout::{LOG_FAMILY, META_FAMILY};
pub use log_store::LogStore;
pub use network::TcpNetwork;
pub use snapshot_data::{SNAPSHOT_FAMILY, SnapshotData};
pub use state_machine::{DATA_FAMILY, STATE_FAMILY, StateMachine};
pub use types::{NodeId, Request, Response, TypeConfig};

/// How much one engine write carries at most before an append or an apply starts another.
pub(crate) const WRITE_BATCH_BYTES: usize = 64 << 20;

/// Opens (or creates) the Cairn database at `dir` with [`node_options`], and the log and state
/// machine in it.
///
/// # Errors
/// The engine's, as a storage error.
pub fn open(dir: impl AsRef<Path>) -> StorageResult<(LogStore, StateMachine)> {
    open_with(dir, CfOptions::default())
}

/// As [`open`], creating the state machine's data family with `data_options` if it is missing
/// (a tombstone grace period, say).
///
/// # Errors
/// The engine's, as a storage error.
pub fn open_with(
    dir: impl AsRef<Path>,
    data_options: CfOptions,
) -> StorageResult<(LogStore, StateMachine)> {
    open_with_options(dir, node_options(), data_options)
}

/// As [`open_with`], with the database's `options` (start from [`node_options`]).
///
/// # Errors
/// The engine's, as a storage error.
pub fn open_with_options(
    dir: impl AsRef<Path>,
    options: Options,
    data_options: CfOptions,
) -> StorageResult<(LogStore, StateMachine)> {
    let db = Db::open(dir.as_ref(), options).map_err(|e| {
        // The store as a whole, not its log: the database did not open.
        let source = openraft::AnyError::error(format!("{}: {e}", dir.as_ref().display()));
        openraft::StorageError::from(openraft::StorageIOError::new(
            openraft::ErrorSubject::Store,
            openraft::ErrorVerb::Read,
            source,
        ))
    })?;
    let db = Arc::new(db);
    Ok((
        LogStore::open(Arc::clone(&db))?,
        StateMachine::open_with(db, data_options)?,
    ))
}

/// The options [`open`] uses: the engine's defaults with a 256 MiB memtable (the engine's is
/// 64 MiB). The Raft log's unpurged tail (by default 10,000 to 20,000 entries) then fills a
/// small part of a memtable when it is flushed, and the flush does not write the purged rest:
/// at 4 KiB entries this took write amplification from 2.16 to 1.35 and the p99 append from
/// 5.1 ms to 1.3 ms (`benches/README.md`), for up to two memtables of memory and as much log on
/// disk.
pub fn node_options() -> Options {
    Options::default()
        .memtable_size(256 << 20)
        .drop_covered_at_flush(true)
}

/// The log and the state machine in `db`, their families created if missing.
///
/// # Errors
/// The engine's, as a storage error.
pub fn open_db(db: Arc<Db>) -> StorageResult<(LogStore, StateMachine)> {
    Ok((LogStore::open(Arc::clone(&db))?, StateMachine::open(db)?))
}

/// The family `name` of `db`, created with default options if missing.
pub(crate) fn family(db: &Db, name: &str) -> cairn::Result<ColumnFamily> {
    match db.column_family(name) {
        Err(cairn::Error::ColumnFamilyNotFound(_)) => {
            db.create_column_family(name, CfOptions::default())
        }
        found => found,
    }
}
