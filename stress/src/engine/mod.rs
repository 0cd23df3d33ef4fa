//! The engine under test, behind one trait: what the harness needs of a key-value store to
//! judge it (atomic batches of puts and deletes, point and range reads, snapshots read at a
//! number the history can place, flush and compaction triggers, close and reopen).
//!
//! Cairn is always built in ([`CairnEngine`]); fjall and RocksDB come with the crate features named
//! after them. An operation an engine lacks is emulated only where the emulation is exact (a
//! range delete as point deletes of every key it covers, in one batch), and
//! [`EngineKind::capabilities`] says which are native, emulated or missing, so the report can.
//!
//! The work that reaches into Cairn's own API (TTL and its clock, held readers, transactions,
//! fault injection through `FaultyFs`) does not go through the trait: it asks
//! [`StressEngine::as_cairn`] and runs only on Cairn.
//!
//! Sequence numbers: Cairn returns its own for every write and snapshot. fjall and RocksDB
//! return none for a write, so their adapters stamp writes and snapshots through a
//! [`Sequencer`], which serializes them: a snapshot stamped S sees exactly the writes stamped
//! at most S. That makes judging a peer's snapshots exact, but hides the peer's own races
//! between a write and a snapshot, and the report says so.

mod cairn;
#[cfg(feature = "fjall")]
mod fjall;
#[cfg(test)]
pub(crate) mod model;
mod registry;
#[cfg(feature = "rocksdb")]
mod rocksdb;
mod sequencer;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use self::cairn::CairnEngine;
pub use self::sequencer::Sequencer;
use crate::expected::SeqNo;

/// The column family (RocksDB) or keyspace (fjall) the harness stresses.
pub const STRESS_CF: &str = "stress";

/// The engines the harness can drive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// Cairn, always built in.
    #[default]
    Cairn,
    /// fjall 3, with the `fjall` feature.
    Fjall,
    /// RocksDB through rust-rocksdb, with the `rocksdb` feature.
    Rocksdb,
}

/// Whether an engine has an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// The engine's own.
    Native,
    /// Built from other operations, exactly; the text says how.
    Emulated(&'static str),
    /// Not run on this engine; the text says why.
    Missing(&'static str),
}

/// What an engine offers the harness.
#[derive(Clone, Copy, Debug)]
pub struct Capabilities {
    /// `delete_range` in the op mix.
    pub range_delete: Support,
    /// `single_delete` in the op mix.
    pub single_delete: Support,
    /// `compact_range` over part of the key space.
    pub compact_range: Support,
    /// Optimistic transactions.
    pub transactions: Support,
    /// Cell and family TTLs on a clock the harness moves.
    pub ttl: Support,
    /// Cursors and iterators held across compactions that drop what they see.
    pub held_readers: Support,
    /// I/O routed through `FaultyFs`: fault runs and the power-loss loop.
    pub faulty_fs: Support,
    /// Writes and snapshots carry the engine's own sequence numbers; false: the harness's
    /// [`Sequencer`] stamps them, serializing them.
    pub own_seqnos: bool,
}

impl EngineKind {
    /// Every engine, built in or not.
    pub const ALL: [Self; 3] = [Self::Cairn, Self::Fjall, Self::Rocksdb];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cairn => "cairn",
            Self::Fjall => "fjall",
            Self::Rocksdb => "rocksdb",
        }
    }

    /// The engine named `name`.
    ///
    /// # Errors
    /// The names there are, for a name that is none of them.
    pub fn parse(name: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| format!("unknown engine {name:?} (cairn, fjall or rocksdb)"))
    }

    /// Whether this build can open it (the peers need their cargo feature).
    pub fn compiled_in(self) -> bool {
        match self {
            Self::Cairn => true,
            Self::Fjall => cfg!(feature = "fjall"),
            Self::Rocksdb => cfg!(feature = "rocksdb"),
        }
    }

    /// What the engine offers the harness.
    pub fn capabilities(self) -> Capabilities {
        const NO_CLOCK: &str = "no cell TTL on a clock the harness can move";
        const NO_FS: &str = "its file I/O cannot be routed through FaultyFs";
        const NO_HELD: &str = "the held-reader work uses Cairn's cursors and compaction filter";
        const NO_TX: &str = "optimistic transactions are another database type; not yet driven";
        match self {
            Self::Cairn => Capabilities {
                range_delete: Support::Native,
                single_delete: Support::Native,
                compact_range: Support::Native,
                transactions: Support::Native,
                ttl: Support::Native,
                held_readers: Support::Native,
                faulty_fs: Support::Native,
                own_seqnos: true,
            },
            Self::Fjall => Capabilities {
                range_delete: Support::Emulated(
                    "point deletes of every key of the range, in one atomic batch",
                ),
                single_delete: Support::Emulated(
                    "a plain delete, which reads the same; remove_weak is experimental",
                ),
                compact_range: Support::Emulated("a major compaction of the whole keyspace"),
                transactions: Support::Missing(NO_TX),
                ttl: Support::Missing(NO_CLOCK),
                held_readers: Support::Missing(NO_HELD),
                faulty_fs: Support::Missing(NO_FS),
                own_seqnos: false,
            },
            Self::Rocksdb => Capabilities {
                range_delete: Support::Native,
                single_delete: Support::Native,
                compact_range: Support::Native,
                transactions: Support::Missing(NO_TX),
                ttl: Support::Missing(NO_CLOCK),
                held_readers: Support::Missing(NO_HELD),
                faulty_fs: Support::Missing(NO_FS),
                own_seqnos: false,
            },
        }
    }
}

impl Capabilities {
    /// Each capability by the name the report gives it.
    pub fn named(&self) -> [(&'static str, Support); 7] {
        [
            ("delete_range", self.range_delete),
            ("single_delete", self.single_delete),
            ("compact_range", self.compact_range),
            ("transactions", self.transactions),
            ("ttl", self.ttl),
            ("held_readers", self.held_readers),
            ("faulty_fs", self.faulty_fs),
        ]
    }
}

/// One write of an atomic batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOp {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: Vec<u8>,
        /// Its new value.
        value: Vec<u8>,
    },
    /// Deletes `key`.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// Deletes `key`, which holds at most one put since its last delete.
    SingleDelete {
        /// The key.
        key: Vec<u8>,
    },
    /// Deletes `[start, end)`.
    DeleteRange {
        /// The first key deleted.
        start: Vec<u8>,
        /// The first key after the range.
        end: Vec<u8>,
        /// Every key of the harness's key space in the range: an engine without range deletes
        /// deletes exactly these, in the same batch.
        covered: Vec<Vec<u8>>,
    },
}

/// A snapshot an engine holds for the harness until [`StressEngine::release`] or close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotHandle {
    /// The adapter's key for it.
    pub id: u64,
    /// The sequence number it reads at: every write numbered at most this, no later one.
    pub seqno: SeqNo,
}

/// An engine's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// Cairn's own, whole, so a caller can tell its kinds apart.
    #[error(transparent)]
    Cairn(#[from] ::cairn::Error),
    /// A peer's, as it printed it.
    #[error("{engine}: {message}")]
    Peer {
        /// The engine's name.
        engine: &'static str,
        /// What it said.
        message: String,
    },
}

impl EngineError {
    /// A peer's error.
    pub fn peer(engine: EngineKind, message: impl std::fmt::Display) -> Self {
        Self::Peer {
            engine: engine.name(),
            message: message.to_string(),
        }
    }

    /// True if the engine says the write was certainly not applied. A peer's errors leave the
    /// outcome unknown.
    pub fn refused(&self) -> bool {
        match self {
            Self::Cairn(e) => cairn_refused(e),
            Self::Peer { .. } => false,
        }
    }

    /// True if the database was stopped by an earlier failure (Cairn, fault runs).
    pub fn stopped(&self) -> bool {
        matches!(self, Self::Cairn(::cairn::Error::Stopped { .. }))
    }

    /// True if the error says nothing about the database's health: a bad request or a
    /// transaction's conflict. Any other error in a fault run asks for a recovery.
    pub fn leaves_database_running(&self) -> bool {
        matches!(
            self,
            Self::Cairn(::cairn::Error::InvalidArgument(_) | ::cairn::Error::Conflict { .. })
        )
    }
}

/// True if Cairn says the write was certainly not applied.
pub(crate) fn cairn_refused(e: &::cairn::Error) -> bool {
    matches!(
        e,
        ::cairn::Error::Stopped { .. }
            | ::cairn::Error::InvalidArgument(_)
            | ::cairn::Error::ColumnFamilyNotFound(_)
            | ::cairn::Error::ReadOnly
            | ::cairn::Error::Conflict { .. }
    )
}

/// An engine's counters, where it keeps them (`None`: it does not).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineStats {
    /// Memtable flushes.
    pub flushes: Option<u64>,
    /// Compactions.
    pub compactions: Option<u64>,
    /// Recoveries from a stop (Cairn).
    pub recoveries: Option<u64>,
    /// Point and range tombstones in memtables and tables.
    pub tombstones_pending: Option<u64>,
    /// Entries compactions dropped, by rule.
    pub dropped: BTreeMap<String, u64>,
}

impl EngineStats {
    /// Adds the counters a reopen resets (everything but `tombstones_pending`) of `other`.
    pub fn add_counters(&mut self, other: &Self) {
        fn add(to: &mut Option<u64>, from: Option<u64>) {
            if let Some(n) = from {
                *to = Some(to.unwrap_or(0) + n);
            }
        }
        add(&mut self.flushes, other.flushes);
        add(&mut self.compactions, other.compactions);
        add(&mut self.recoveries, other.recoveries);
        for (rule, n) in &other.dropped {
            *self.dropped.entry(rule.clone()).or_default() += n;
        }
    }
}

/// How to open an engine for the harness.
#[derive(Clone)]
pub struct EngineSettings {
    /// Which engine.
    pub kind: EngineKind,
    /// The write buffer's size in bytes.
    pub memtable_size: usize,
    /// The size a table is cut at (the peers' `target_file_size_base` and table target size;
    /// Cairn's is in `cairn`), scaled to the memtable so a short run builds several levels.
    pub target_file_size: u64,
    /// The first level's size under the memtables (RocksDB's `max_bytes_for_level_base`;
    /// fjall's is its table target times its L0 threshold).
    pub level_base_bytes: u64,
    /// The stressed family's tombstone grace (Cairn; the peers have none).
    pub grace: Duration,
    /// False to store blocks and logs uncompressed (the erasure run: compression hides what
    /// a byte scan looks for).
    pub compression: bool,
    /// Cairn's options: file system, clock, compaction filter, level sizes, deadline.
    pub cairn: ::cairn::Options,
    /// Stamps the peers' writes and snapshots; shared by every open of one run, so the
    /// numbers keep rising across reopens.
    pub sequencer: Arc<Sequencer>,
}

impl std::fmt::Debug for EngineSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineSettings")
            .field("kind", &self.kind)
            .field("memtable_size", &self.memtable_size)
            .field("compression", &self.compression)
            .finish_non_exhaustive()
    }
}

/// How [`open`] treats the harness's family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Drop the harness's families and make the stressed one afresh (a run with no journal).
    Fresh,
    /// Open the stressed family, making it if it is missing (a first open on a journal).
    Create,
    /// Open the stressed family, which must be there: a reopen that finds it missing is an
    /// error, so the harness reports the loss rather than stressing an empty family.
    Existing,
}

/// The error for a stressed family missing at a reopen (of a peer; Cairn has its own).
#[cfg(any(feature = "fjall", feature = "rocksdb"))]
pub(crate) fn family_missing(engine: EngineKind) -> EngineError {
    EngineError::peer(
        engine,
        format!("the {STRESS_CF} family is missing from a database that had it"),
    )
}

/// A key-value pair as the harness reads it.
pub type Entry = (Bytes, Bytes);

/// An open database of one engine, with the harness's family resolved.
pub trait StressEngine: Send + Sync {
    /// Which engine it is.
    fn kind(&self) -> EngineKind;

    /// Applies `ops` atomically (synced to disk first with `sync`) and returns the write's
    /// sequence number.
    ///
    /// # Errors
    /// The engine's; see [`EngineError::refused`] for whether it may have been applied.
    fn write(&self, ops: &[WriteOp], sync: bool) -> Result<SeqNo, EngineError>;

    /// The value of `key`.
    ///
    /// # Errors
    /// The engine's.
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, EngineError>;

    /// The entries of `range`, in key order, or reverse order with `backward`.
    ///
    /// # Errors
    /// The engine's.
    fn scan(&self, range: Range<&[u8]>, backward: bool) -> Result<Vec<Entry>, EngineError>;

    /// Every entry of the family, in key order.
    ///
    /// # Errors
    /// The engine's.
    fn scan_all(&self) -> Result<Vec<Entry>, EngineError>;

    /// The number of the latest write: a snapshot taken now reads at least this one.
    fn latest_seqno(&self) -> SeqNo;

    /// Takes a snapshot and holds it until released or the database closes.
    ///
    /// # Errors
    /// The engine's.
    fn snapshot(&self) -> Result<SnapshotHandle, EngineError>;

    /// The entries of `range` as `snapshot` sees them, in key order.
    ///
    /// # Errors
    /// The engine's, or one saying the snapshot is gone (released, or taken on a database
    /// closed since).
    fn scan_at(
        &self,
        snapshot: &SnapshotHandle,
        range: Range<&[u8]>,
    ) -> Result<Vec<Entry>, EngineError>;

    /// Lets `snapshot` go. A snapshot already gone is ignored.
    fn release(&self, snapshot: &SnapshotHandle);

    /// Flushes the memtable to a table.
    ///
    /// # Errors
    /// The engine's.
    fn flush(&self) -> Result<(), EngineError>;

    /// Compacts the tables overlapping `range` (or, where the capabilities say so, more).
    ///
    /// # Errors
    /// The engine's.
    fn compact_range(&self, range: Range<&[u8]>) -> Result<(), EngineError>;

    /// Flushes and compacts every family down to its last level, and waits for it.
    ///
    /// # Errors
    /// The engine's.
    fn compact_all(&self) -> Result<(), EngineError>;

    /// Waits until no flush or compaction is running or due.
    ///
    /// # Errors
    /// The engine's.
    fn wait_idle(&self) -> Result<(), EngineError>;

    /// The database's families (the op log's header records them).
    fn families(&self) -> Vec<String>;

    /// The engine's counters since it was opened.
    fn stats(&self) -> EngineStats;

    /// Closes the database, dropping every snapshot still held first.
    ///
    /// # Errors
    /// The engine's.
    fn close(self: Box<Self>) -> Result<(), EngineError>;

    /// The Cairn database, for the work that uses Cairn's own API; `None` for a peer.
    fn as_cairn(&self) -> Option<&::cairn::Db> {
        None
    }
}

/// Opens the engine `settings` name at `dir` and its family `stress`, as `mode` says.
///
/// # Errors
/// The engine's, or `InvalidArgument` for a peer this build leaves out (with the feature that
/// builds it in).
pub fn open(
    dir: &Path,
    settings: &EngineSettings,
    mode: OpenMode,
) -> Result<Box<dyn StressEngine>, EngineError> {
    match settings.kind {
        EngineKind::Cairn => Ok(Box::new(CairnEngine::open(dir, settings, mode)?)),
        #[cfg(feature = "fjall")]
        EngineKind::Fjall => Ok(Box::new(fjall::FjallEngine::open(dir, settings, mode)?)),
        #[cfg(feature = "rocksdb")]
        EngineKind::Rocksdb => Ok(Box::new(rocksdb::RocksDbEngine::open(dir, settings, mode)?)),
        #[allow(unreachable_patterns, reason = "every peer may be built in")]
        kind => Err(not_compiled_in(kind)),
    }
}

/// The error for a peer this build leaves out.
pub fn not_compiled_in(kind: EngineKind) -> EngineError {
    EngineError::Cairn(::cairn::Error::InvalidArgument(format!(
        "this cairn was built without {0}: build it with `--features {0}`",
        kind.name()
    )))
}
