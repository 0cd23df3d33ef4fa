//! The soft-delete tombstone purger: on each pass, hard-delete the rows whose `deleted_at` is
//! older than the retention window, in bounded batches, without ever deleting a row that was
//! resurrected under its feet. CubeSandbox's `tombstone` package, over Cairn's own tables.
//!
//! A pass:
//!
//! 1. takes the advisory lock without waiting (a replica that finds it held skips the pass);
//! 2. computes `cutoff = now - retention` once, and asks for the table list;
//! 3. per table, loops: `want = min(BATCH, budget)`; select up to `want` ids with
//!    `deleted_at IS NOT NULL AND deleted_at < cutoff` (through a `deleted_at` index when
//!    there is one, else by scanning the table); delete them in a transaction that re-reads
//!    every row and re-checks that predicate; `budget -= selected`; stop when a select finds
//!    fewer than `want`. The budget starts at `MAX_PER_PASS`, so a big backlog drains over
//!    many passes instead of in one long one;
//! 4. a table that fails is logged and reported, and the next table still runs.
//!
//! The re-check is what makes a purge safe against resurrection: an upsert that clears
//! `deleted_at` between the select and the delete either commits first (the re-check then
//! sees a live row and keeps it) or conflicts with the delete (which then retries and sees
//! it). The transaction's conflict check covers the row key, and the row's index entries only
//! change with the row.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::config::PurgeConfig;
use crate::error::{Error, Result};
use crate::keys;
use crate::lock::AdvisoryLock;
use crate::report::{PassReport, TableReport};
use crate::schema::{IndexDef, TableDef};
use crate::table::{backoff, delete_row, read_row};
use crate::tables::{Tables, scan_prefix};

/// The most rows one pass selects from one table.
pub const MAX_PER_PASS: u64 = 5000;

/// The most rows one select (and one delete transaction) takes.
pub const BATCH: u64 = 500;

/// How long a pass's hold on the advisory lock lasts unless renewed (it is renewed before each
/// table). A replica that dies mid-pass blocks the others this long at most.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(300);

/// Numbers the passes of this process, to give each its own lock holder name.
static PASSES: AtomicU64 = AtomicU64::new(1);

/// Attempts at deleting one row before a conflict is given up on (a batch that conflicts is
/// split in halves first, so only a row written again and again reaches this).
const MAX_ATTEMPTS: usize = 8;

type TableList = dyn Fn() -> Vec<String> + Send + Sync;
type OnPurge = dyn Fn(&str, u64, Option<&Error>) + Send + Sync;

/// The soft-delete tombstone purger. Cheap to clone.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use cairn_purger::{ColumnType, PurgeConfig, Purger, Row, Schema, Tables, CUBEMASTER_LOCK};
/// # fn main() -> cairn_purger::Result<()> {
/// # let dir = tempfile::tempdir().map_err(cairn_fs::Error::from).map_err(cairn::Error::from)?;
/// let clock = Arc::new(cairn::ManualClock::new(1_000_000_000));
/// let options = cairn::Options::default().clock(clock.clone());
/// let tables = Tables::open(Arc::new(cairn::Db::open(dir.path(), options)?))?;
/// let t = tables.create_table(Schema::new("t").column("name", ColumnType::Text).soft_delete())?;
/// let id = t.insert(Row::new().set("name", "old"))?;
/// t.soft_delete(id)?;
/// clock.advance(Duration::from_secs(8 * 24 * 3600)); // past the 7-day default retention
/// let config = PurgeConfig { enable: true, ..PurgeConfig::default() };
/// let purger = Purger::new(tables.clone(), CUBEMASTER_LOCK, || vec!["t".to_owned()], config);
/// let report = purger.run_pass()?;
/// assert_eq!(report.purged(), 1);
/// assert!(t.unscoped().get(id)?.is_none());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Purger {
    tables: Tables,
    lock_name: String,
    list: Arc<TableList>,
    pub(crate) config: PurgeConfig,
    holder: String,
    lease: Duration,
    on_purge: Option<Arc<OnPurge>>,
    warned_full_scan: Arc<Mutex<HashSet<String>>>,
    /// Set when the background loop running this purger is stopped: the pass in progress
    /// ends before its next table or batch.
    pub(crate) cancel: Option<Arc<AtomicBool>>,
}

impl std::fmt::Debug for Purger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Purger")
            .field("lock", &self.lock_name)
            .field("holder", &self.holder)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Purger {
    /// A purger over `tables` that takes the lock `lock_name` and purges the tables `list`
    /// names (asked anew at the start of every pass). `config` is clamped.
    pub fn new(
        tables: Tables,
        lock_name: &str,
        list: impl Fn() -> Vec<String> + Send + Sync + 'static,
        config: PurgeConfig,
    ) -> Self {
        Self {
            tables,
            lock_name: lock_name.to_owned(),
            list: Arc::new(list),
            config: config.clamped(),
            holder: format!("pid{}", std::process::id()),
            lease: DEFAULT_LEASE,
            on_purge: None,
            warned_full_scan: Arc::new(Mutex::new(HashSet::new())),
            cancel: None,
        }
    }

    /// The name this purger's passes hold the lock under, each suffixed `#n` so that no two
    /// passes in the process share one (default: `pid<process id>`).
    #[must_use]
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }

    /// How long the lock is held without renewal (default [`DEFAULT_LEASE`]).
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Called after each table of a pass with the table, the rows purged and the error that
    /// stopped it, if any.
    #[must_use]
    pub fn on_purge(
        mut self,
        callback: impl Fn(&str, u64, Option<&Error>) + Send + Sync + 'static,
    ) -> Self {
        self.on_purge = Some(Arc::new(callback));
        self
    }

    /// The clamped configuration.
    pub fn config(&self) -> PurgeConfig {
        self.config
    }

    pub(crate) fn tables(&self) -> &Tables {
        &self.tables
    }

    pub(crate) fn lock_name(&self) -> &str {
        &self.lock_name
    }

    /// Runs one pass now (see the module doc).
    ///
    /// # Errors
    /// `PassFailed` with the first failing table and the whole report, if any table failed
    /// (the others still ran); engine errors taking the lock.
    pub fn run_pass(&self) -> Result<PassReport> {
        let mut report = PassReport {
            dry_run: self.config.dry_run,
            ..PassReport::default()
        };
        if !self.config.enable {
            tracing::info!("soft-delete purge is disabled; no pass");
            report.skipped = true;
            return Ok(report);
        }
        let lock = self.tables.advisory_lock(&self.lock_name);
        // Each pass holds the lock under a name of its own, so two passes of one purger (its
        // loop and a direct call, or two replicas configured alike) exclude each other too.
        let holder = format!("{}#{}", self.holder, PASSES.fetch_add(1, Ordering::Relaxed));
        if !lock.try_acquire(&holder, self.lease)? {
            tracing::info!(lock = %self.lock_name, "lock held by another replica; skipping pass");
            report.skipped = true;
            return Ok(report);
        }
        let held = HeldLock {
            lock: &lock,
            holder: &holder,
            lease: self.lease,
        };
        let retention = u64::try_from(self.config.retention.as_millis()).unwrap_or(u64::MAX);
        report.cutoff_ms = self.tables.db().now_ms().saturating_sub(retention);
        let mut first_error = None;
        for table in (self.list)() {
            if self.cancelled() {
                break;
            }
            let mut table_report = TableReport {
                table: table.clone(),
                ..TableReport::default()
            };
            let result = held.renew().and_then(|()| {
                self.purge_table(&held, &table, report.cutoff_ms, &mut table_report)
            });
            self.log_table(&table_report, report.cutoff_ms, result.as_ref().err());
            if let Some(callback) = &self.on_purge {
                callback(&table, table_report.purged, result.as_ref().err());
            }
            if let Err(e) = result {
                table_report.error = Some(e.to_string());
                first_error.get_or_insert((table, e));
            }
            report.tables.push(table_report);
        }
        match first_error {
            None => Ok(report),
            Some((table, source)) => Err(Error::PassFailed {
                table,
                source: Box::new(source),
                report: Box::new(report),
            }),
        }
    }

    fn log_table(&self, report: &TableReport, cutoff_ms: u64, error: Option<&Error>) {
        let table = report.table.as_str();
        if let Some(e) = error {
            tracing::warn!(table, error = %e, purged = report.purged, "purge of table failed");
        } else if self.config.dry_run {
            tracing::info!(
                table,
                eligible = report.selected,
                cutoff_ms,
                "dry run: would purge"
            );
        } else {
            tracing::info!(
                table,
                selected = report.selected,
                purged = report.purged,
                cutoff_ms,
                "purged soft-deleted rows"
            );
        }
    }

    fn purge_table(
        &self,
        held: &HeldLock<'_>,
        table: &str,
        cutoff: u64,
        report: &mut TableReport,
    ) -> Result<()> {
        let def = Arc::clone(self.tables.catalog().def(table)?);
        if def.deleted_at_position().is_none() {
            return Err(Error::invalid(format!(
                "table {table:?} does not soft-delete"
            )));
        }
        let index = def.deleted_at_index().cloned();
        report.full_scan = index.is_none();
        if index.is_none() && self.first_full_scan(table) {
            tracing::warn!(
                table,
                "no index leads with deleted_at; the purge scans the whole table \
                 (apply migration 20260731120000)"
            );
        }
        let selector = Selector {
            tables: &self.tables,
            def: &def,
            index: index.as_ref(),
            cutoff,
        };
        if self.config.dry_run {
            report.selected = selector.count()?;
            return Ok(());
        }
        let mut budget = MAX_PER_PASS;
        let mut cursor = Cursor::default();
        loop {
            let want = BATCH.min(budget);
            if want == 0 || self.cancelled() {
                break;
            }
            let ids = selector.select(want, &mut cursor)?;
            let selected = ids.len() as u64;
            report.batches.push(selected);
            report.selected += selected;
            budget -= selected;
            if ids.is_empty() {
                break;
            }
            // The lease must cover the delete: renewed before each batch, so a table that
            // takes long (a slow disk, a back-fill holding the catalog) cannot outlive it.
            held.renew()?;
            self.delete(held, table, &ids, cutoff, &mut report.purged)?;
            if selected < want {
                break;
            }
        }
        Ok(())
    }

    fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::SeqCst))
    }

    fn first_full_scan(&self, table: &str) -> bool {
        self.warned_full_scan
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(table.to_owned())
    }

    /// Deletes those of `ids` that still meet the predicate, in one transaction; on a
    /// conflict, in two halves, down to single rows retried a few times. Adds each committed
    /// deletion to `purged` as it commits, so a later failure does not hide earlier ones.
    fn delete(
        &self,
        held: &HeldLock<'_>,
        table: &str,
        ids: &[u64],
        cutoff: u64,
        purged: &mut u64,
    ) -> Result<()> {
        let mut attempt = 1;
        loop {
            if self.cancelled() {
                // A stopped loop's pass ends here; what is left goes in a later pass.
                return Ok(());
            }
            match self.delete_once(held, table, ids, cutoff) {
                Ok(n) => {
                    *purged += n;
                    return Ok(());
                }
                Err(e) if e.is_conflict() => {
                    if let [_, _, ..] = ids {
                        let (left, right) = ids.split_at(ids.len() / 2);
                        self.delete(held, table, left, cutoff, purged)?;
                        return self.delete(held, table, right, cutoff, purged);
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

    fn delete_once(
        &self,
        held: &HeldLock<'_>,
        table: &str,
        ids: &[u64],
        cutoff: u64,
    ) -> Result<u64> {
        let catalog = self.tables.catalog();
        let def = catalog.def(table)?;
        let mut tx = self.tables.db().transaction();
        // The lease, read in the transaction: a takeover after this read conflicts the commit,
        // so no batch lands after the lock was lost (a renew before the batch is not enough:
        // the batch may wait on the catalog, or retry, past the lease).
        held.lock.check_held(&mut tx, held.holder)?;
        let mut deleted = 0;
        for &id in ids {
            let Some(values) = read_row(&mut tx, &self.tables, def, id)? else {
                continue;
            };
            if def.deleted_at(&values).is_some_and(|at| at < cutoff) {
                delete_row(&mut tx, &self.tables, def, id, &values);
                deleted += 1;
            }
        }
        tx.commit()?;
        Ok(deleted)
    }
}

/// The lock a pass holds; released when the pass ends, however it ends.
struct HeldLock<'a> {
    lock: &'a AdvisoryLock,
    holder: &'a str,
    lease: Duration,
}

impl HeldLock<'_> {
    /// Extends the lease; `LockLost` if it ran out and another holder took the lock.
    fn renew(&self) -> Result<()> {
        if self.lock.try_acquire(self.holder, self.lease)? {
            Ok(())
        } else {
            Err(Error::LockLost {
                name: self.lock.name().to_owned(),
            })
        }
    }
}

impl Drop for HeldLock<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.lock.release(self.holder) {
            tracing::warn!(lock = self.lock.name(), error = %e, "releasing the purge lock failed");
        }
    }
}

/// Where a pass's next select in one table starts: after this index key, or after this row
/// id when scanning the table.
#[derive(Debug, Default)]
struct Cursor {
    key: Option<Vec<u8>>,
    id: u64,
}

/// Finds rows with `deleted_at IS NOT NULL AND deleted_at < cutoff` in one table.
struct Selector<'a> {
    tables: &'a Tables,
    def: &'a TableDef,
    index: Option<&'a IndexDef>,
    cutoff: u64,
}

impl Selector<'_> {
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
        let config = PurgeConfig {
            enable: true,
            ..PurgeConfig::default()
        };
        let purger = Purger::new(tables.clone(), "l", || vec!["t".to_owned()], config);
        let lock = tables.advisory_lock("l");
        let lease = Duration::from_secs(1);
        assert!(lock.try_acquire("a#1", lease).expect("acquire"));
        let held = HeldLock {
            lock: &lock,
            holder: "a#1",
            lease,
        };
        // The pass stalls past its lease (a back-fill, a slow disk) and another takes over.
        clock.advance(Duration::from_secs(2));
        assert!(lock.try_acquire("b#2", lease).expect("takeover"));
        let mut deleted = 0;
        let lost = purger.delete(&held, "t", &ids, u64::MAX, &mut deleted);
        assert!(matches!(lost, Err(Error::LockLost { .. })), "{lost:?}");
        assert_eq!(deleted, 0);
        assert_eq!(
            t.unscoped().count().expect("count"),
            10,
            "nothing deleted without the lock"
        );
        std::mem::forget(held); // its release would fail: the lock is b's
    }
}
