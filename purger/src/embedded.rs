//! The purger's backend over the embedded tables: the lease lock of [`AdvisoryLock`], selects
//! through a `deleted_at` index (or a scan of the table), and deletes in engine transactions
//! that re-read every row and re-check the predicate.
//!
//! The re-check is what makes a purge safe against resurrection: an upsert that clears
//! `deleted_at` between the select and the delete either commits first (the re-check then
//! sees a live row and keeps it) or conflicts with the delete (which then retries and sees
//! it). The transaction's conflict check covers the row key, and the row's index entries only
//! change with the row. The lease is read in the same transaction, so no batch commits after
//! another holder took the lock.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{DeleteTally, PassTime, PurgeBackend, PurgeSession, TableShape};
use crate::error::{Error, Result};
use crate::keys;
use crate::lock::AdvisoryLock;
use crate::schema::{IndexDef, TableDef};
use crate::table::{backoff, delete_row, read_row};
use crate::tables::{Tables, scan_prefix};
use crate::zone::TimeZone;

/// Attempts at deleting one row before a conflict is given up on (a batch that conflicts is
/// split in halves first, so only a row written again and again reaches this).
const MAX_ATTEMPTS: usize = 8;

impl PurgeBackend for Tables {
    fn identity(&self) -> String {
        format!("cairn tables @{:#x}", self.address())
    }

    fn now_ms(&self) -> u64 {
        self.db().now_ms()
    }

    fn begin_pass(
        &self,
        name: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<Option<Box<dyn PurgeSession + '_>>> {
        let lock = self.advisory_lock(name);
        if !lock.try_acquire(holder, lease)? {
            return Ok(None);
        }
        Ok(Some(Box::new(EmbeddedSession {
            tables: self,
            lock,
            holder: holder.to_owned(),
            lease,
            released: false,
            table: None,
        })))
    }
}

/// A pass over the embedded tables, holding the lease lock.
pub(crate) struct EmbeddedSession<'a> {
    pub(crate) tables: &'a Tables,
    pub(crate) lock: AdvisoryLock,
    pub(crate) holder: String,
    pub(crate) lease: Duration,
    pub(crate) released: bool,
    pub(crate) table: Option<OpenTable>,
}

/// The table a pass is on, and where its next select starts.
pub(crate) struct OpenTable {
    pub(crate) def: Arc<TableDef>,
    index: Option<IndexDef>,
    cursor: Cursor,
}

/// Where a pass's next select in one table starts: after this index key, or after this row
/// id when scanning the table.
#[derive(Debug, Default)]
struct Cursor {
    key: Option<Vec<u8>>,
    id: u64,
}

impl PurgeSession for EmbeddedSession<'_> {
    fn renew(&mut self) -> Result<()> {
        if self.lock.try_acquire(&self.holder, self.lease)? {
            Ok(())
        } else {
            Err(Error::LockLost {
                name: self.lock.name().to_owned(),
            })
        }
    }

    fn pass_time(&mut self) -> Result<PassTime> {
        Ok(PassTime {
            now_ms: self.tables.db().now_ms(),
            host_skew_ms: None,
        })
    }

    /// `deleted_at` here is milliseconds since the epoch, so no zone applies.
    fn open_table(&mut self, table: &str, _zone: Option<TimeZone>) -> Result<TableShape> {
        self.table = None;
        let def = Arc::clone(self.tables.catalog().def(table)?);
        if def.deleted_at_position().is_none() {
            return Err(Error::invalid(format!(
                "table {table:?} does not soft-delete"
            )));
        }
        let index = def.deleted_at_index().cloned();
        let shape = TableShape {
            indexed: index.is_some(),
        };
        self.table = Some(OpenTable {
            def,
            index,
            cursor: Cursor::default(),
        });
        Ok(shape)
    }

    fn select(&mut self, cutoff_ms: u64, want: u64) -> Result<Vec<u64>> {
        let tables = self.tables;
        let OpenTable { def, index, cursor } = self.open()?;
        let selector = Selector {
            tables,
            def,
            index: index.as_ref(),
            cutoff: cutoff_ms,
        };
        selector.select(want, cursor)
    }

    fn count(&mut self, cutoff_ms: u64) -> Result<u64> {
        let tables = self.tables;
        let open = self.open()?;
        Selector::new(tables, open, cutoff_ms).count()
    }

    fn delete(
        &mut self,
        ids: &[u64],
        cutoff_ms: u64,
        stop: &dyn Fn() -> bool,
        tally: &mut DeleteTally,
    ) -> Result<()> {
        let table = self.open()?.def.name.clone();
        self.delete_split(&table, ids, cutoff_ms, stop, &mut tally.purged)
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.released = true;
        self.lock.release(&self.holder)
    }
}

impl EmbeddedSession<'_> {
    fn open(&mut self) -> Result<&mut OpenTable> {
        self.table
            .as_mut()
            .ok_or_else(|| Error::invalid("no table is open in this purge pass"))
    }

    /// Deletes those of `ids` that still meet the predicate, in one transaction; on a
    /// conflict, in two halves, down to single rows retried a few times.
    pub(crate) fn delete_split(
        &self,
        table: &str,
        ids: &[u64],
        cutoff: u64,
        stop: &dyn Fn() -> bool,
        purged: &mut u64,
    ) -> Result<()> {
        let mut attempt = 1;
        loop {
            if stop() {
                // A stopped loop's pass ends here; what is left goes in a later pass.
                return Ok(());
            }
            match self.delete_once(table, ids, cutoff) {
                Ok(n) => {
                    *purged += n;
                    return Ok(());
                }
                Err(e) if e.is_conflict() => {
                    if let [_, _, ..] = ids {
                        let (left, right) = ids.split_at(ids.len() / 2);
                        self.delete_split(table, left, cutoff, stop, purged)?;
                        return self.delete_split(table, right, cutoff, stop, purged);
                    }
                    if attempt >= MAX_ATTEMPTS {
                        return Err(e);
                    }
                    attempt += 1;
                    backoff(attempt);
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn delete_once(&self, table: &str, ids: &[u64], cutoff: u64) -> Result<u64> {
        let catalog = self.tables.catalog();
        let def = catalog.def(table)?;
        let mut tx = self.tables.db().transaction();
        // The lease, read in the transaction: a takeover after this read conflicts the commit,
        // so no batch lands after the lock was lost (a renew before the batch is not enough:
        // the batch may wait on the catalog, or retry, past the lease).
        self.lock.check_held(&mut tx, &self.holder)?;
        let mut deleted = 0;
        for &id in ids {
            let Some(values) = read_row(&mut tx, self.tables, def, id)? else {
                continue;
            };
            if def.deleted_at(&values).is_some_and(|at| at < cutoff) {
                delete_row(&mut tx, self.tables, def, id, &values);
                deleted += 1;
            }
        }
        tx.commit()?;
        Ok(deleted)
    }
}

impl Drop for EmbeddedSession<'_> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Err(e) = self.lock.release(&self.holder) {
            tracing::warn!(lock = self.lock.name(), error = %e, "releasing the purge lock failed");
        }
    }
}

/// Finds rows with `deleted_at IS NOT NULL AND deleted_at < cutoff` in one table.
struct Selector<'a> {
    tables: &'a Tables,
    def: &'a TableDef,
    index: Option<&'a IndexDef>,
    cutoff: u64,
}

impl<'a> Selector<'a> {
    fn new(tables: &'a Tables, open: &'a OpenTable, cutoff: u64) -> Self {
        Self {
            tables,
            def: &open.def,
            index: open.index.as_ref(),
            cutoff,
        }
    }

    /// Up to `want` eligible ids after `cursor`, which it advances. Through the index the
    /// oldest come first; by full scan, in id order. A pass never looks behind its cursor:
    /// what lies there was deleted, or re-checked and found live (and a row soft-deleted since
    /// has a `deleted_at` past the cutoff), so a new select need not step over the tombstones
    /// the last batch left.
    fn select(&self, want: u64, cursor: &mut Cursor) -> Result<Vec<u64>> {
        let limit = usize::try_from(want).unwrap_or(usize::MAX);
        let mut ids = Vec::with_capacity(limit.min(1024));
        if let Some(index) = self.index {
            for entry in self.index_range(index, cursor.key.as_deref())?.take(limit) {
                let (key, _) = entry?;
                ids.push(keys::trailing_id(&key)?);
                cursor.key = Some([&key[..], &[0]].concat());
            }
            return Ok(ids);
        }
        let snapshot = self.tables.db().snapshot();
        let cf = self.tables.column_family();
        let start = keys::row(self.def.id, cursor.id.saturating_add(1));
        let end = keys::prefix_end(&keys::row_prefix(self.def.id)).unwrap_or_default();
        for entry in snapshot.range_cf(cf, start.as_slice()..end.as_slice())? {
            let (key, bytes) = entry?;
            let id = keys::trailing_id(&key)?;
            cursor.id = id;
            if self.eligible(&key, &bytes)? {
                ids.push(id);
                if ids.len() >= limit {
                    break;
                }
            }
        }
        Ok(ids)
    }

    /// Every eligible row, uncapped (a dry run's count).
    fn count(&self) -> Result<u64> {
        let mut n = 0;
        if let Some(index) = self.index {
            for entry in self.index_range(index, None)? {
                entry?;
                n += 1;
            }
            return Ok(n);
        }
        let snapshot = self.tables.db().snapshot();
        let prefix = keys::row_prefix(self.def.id);
        for entry in scan_prefix(&snapshot, self.tables.column_family(), &prefix)? {
            let (key, bytes) = entry?;
            n += u64::from(self.eligible(&key, &bytes)?);
        }
        Ok(n)
    }

    /// The index entries with a non-NULL `deleted_at` below the cutoff, from `from` on: NULL
    /// encodes as `0x00`, a timestamp as `0x01` and 8 bytes big-endian, so they are one key
    /// range.
    fn index_range(&self, index: &IndexDef, from: Option<&[u8]>) -> Result<cairn::DbIterator> {
        let prefix = keys::index_prefix(self.def.id, index.id);
        let first = [&prefix[..], &[0x01], &0u64.to_be_bytes()].concat();
        let start = from.map_or(first, <[u8]>::to_vec);
        let end = [&prefix[..], &[0x01], &self.cutoff.to_be_bytes()].concat();
        let snapshot = self.tables.db().snapshot();
        Ok(snapshot.range_cf(
            self.tables.column_family(),
            start.as_slice()..end.as_slice(),
        )?)
    }

    fn eligible(&self, key: &[u8], bytes: &[u8]) -> Result<bool> {
        let values = self.def.decode_row(key, bytes)?;
        Ok(self
            .def
            .deleted_at(&values)
            .is_some_and(|at| at < self.cutoff))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::Row;
    use crate::schema::Schema;
    use crate::value::{ColumnType, Value};

    #[test]
    fn a_batch_does_not_commit_after_the_lease_was_lost() {
        let dir = tempfile::tempdir().expect("temp dir");
        let clock = Arc::new(cairn::ManualClock::new(1_000_000_000));
        let options = cairn::Options::default().clock(clock.clone());
        let db = cairn::Db::open(dir.path(), options).expect("open");
        let tables = Tables::open(Arc::new(db)).expect("tables");
        let t = tables
            .create_table(
                Schema::new("t")
                    .column("name", ColumnType::Text)
                    .soft_delete(),
            )
            .expect("create");
        let ids: Vec<u64> = (0..10)
            .map(|i| {
                let row = Row::new()
                    .set("name", format!("r{i}"))
                    .set("deleted_at", Value::Timestamp(1));
                t.insert(row).expect("insert")
            })
            .collect();
        let lease = Duration::from_secs(1);
        let mut session = tables
            .begin_pass("l", "a#1", lease)
            .expect("begin")
            .expect("the lock is free");
        session.open_table("t", None).expect("open table");
        // The pass stalls past its lease (a back-fill, a slow disk) and another takes over.
        clock.advance(Duration::from_secs(2));
        let lock = tables.advisory_lock("l");
        assert!(lock.try_acquire("b#2", lease).expect("takeover"));
        let mut deleted = DeleteTally::default();
        let lost = session.delete(&ids, u64::MAX, &|| false, &mut deleted);
        assert!(matches!(lost, Err(Error::LockLost { .. })), "{lost:?}");
        assert_eq!(deleted.purged, 0);
        assert_eq!(
            t.unscoped().count().expect("count"),
            10,
            "nothing deleted without the lock"
        );
        let finished = session.finish();
        assert!(
            matches!(finished, Err(Error::LockNotHeld { .. })),
            "the lock is b's: {finished:?}"
        );
    }
}
