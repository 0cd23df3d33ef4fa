//! What a read sees: the memtables and the version, captured together under one `Arc` so a
//! reader never blocks a writer and never sees a table and the memtable it came from at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_sstable::{EntryMeta, Kind, SeqNo};

use crate::log_record::BatchOp;
use crate::memtable::Memtable;
use crate::options::CfOptions;
use crate::version::Version;

/// The memtables of every column family that share one write-ahead log.
#[derive(Debug)]
pub(crate) struct MemSet {
    /// The log holding these memtables' writes.
    pub(crate) log_number: u64,
    pub(crate) tables: BTreeMap<u32, Arc<Memtable>>,
}

impl MemSet {
    pub(crate) fn new(log_number: u64, cfs: impl IntoIterator<Item = u32>) -> Self {
        Self {
            log_number,
            tables: cfs
                .into_iter()
                .map(|cf| (cf, Arc::new(Memtable::new())))
                .collect(),
        }
    }

    pub(crate) fn approximate_bytes(&self) -> usize {
        self.tables.values().map(|m| m.approximate_bytes()).sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tables.values().all(|m| m.is_empty())
    }
}

/// A consistent view for reads.
#[derive(Debug)]
pub(crate) struct SuperVersion {
    /// Views are numbered in the order they are installed: a run of deleted keys learned under
    /// one holds only for readers of it or a newer one (see `converted_runs`).
    pub(crate) number: u64,
    /// The active memtables first, then the frozen ones, newest to oldest.
    pub(crate) memsets: Vec<Arc<MemSet>>,
    pub(crate) version: Arc<Version>,
    pub(crate) cfs: BTreeMap<u32, (String, CfOptions)>,
}

impl SuperVersion {
    /// The options of column family `cf`.
    pub(crate) fn cf_options(&self, cf: u32) -> crate::error::Result<CfOptions> {
        self.cfs
            .get(&cf)
            .map(|(_, options)| options.clone())
            .ok_or_else(|| crate::error::Error::ColumnFamilyNotFound(format!("id {cf}")))
    }

    /// The memtables of `cf`, newest first.
    pub(crate) fn memtables(&self, cf: u32) -> impl Iterator<Item = &Arc<Memtable>> {
        self.memsets
            .iter()
            .filter_map(move |set| set.tables.get(&cf))
    }
}

impl MemSet {
    /// Inserts ops into the memtables with consecutive sequence numbers from `first`.
    pub(crate) fn apply<'a>(
        &self,
        first: SeqNo,
        write_time: u64,
        ops: impl Iterator<Item = &'a BatchOp>,
    ) {
        for (seqno, op) in (first..).zip(ops) {
            let Some(table) = self.tables.get(&op.cf()) else {
                continue;
            };
            let meta = EntryMeta::at(write_time);
            match op {
                BatchOp::Put {
                    key, value, ttl, ..
                } => {
                    table.insert(
                        key,
                        seqno,
                        Kind::Put,
                        EntryMeta {
                            write_time,
                            ttl: *ttl,
                        },
                        value,
                    );
                }
                BatchOp::Delete { key, .. } => {
                    table.insert(key, seqno, Kind::Delete, meta, &[]);
                }
                BatchOp::SingleDelete { key, .. } => {
                    table.insert(key, seqno, Kind::SingleDelete, meta, &[]);
                }
                BatchOp::DeleteRange { start, end, .. } => {
                    table.insert_range_tombstone(start.clone(), end.clone(), seqno, write_time);
                }
            }
        }
    }
}
