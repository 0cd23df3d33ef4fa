//! The soft-delete tombstone purger: on each pass, hard-delete the rows whose `deleted_at` is
//! older than the retention window, in bounded batches, without ever deleting a row that was
//! resurrected under its feet. CubeSandbox's `tombstone` package, over any [`PurgeBackend`]:
//! Cairn's own tables or a MySQL/PostgreSQL database.
//!
//! A pass:
//!
//! 1. takes the advisory lock without waiting (a replica that finds it held skips the pass);
//! 2. computes `cutoff = now - retention` once, `now` read from the database's clock (a SQL
//!    server's, not this host's), and asks for the table list;
//! 3. per table, first refuses it if purging could harm it (a zoneless `deleted_at` without
//!    a configured zone; a foreign key that would cascade the delete into a child table),
//!    then loops: `want = min(BATCH, budget)`; select up to `want` ids with
//!    `deleted_at IS NOT NULL AND deleted_at < cutoff`, in order, after the last one seen
//!    (through a `deleted_at` index when there is one, else by scanning the table); delete
//!    them with a statement or transaction that re-checks that predicate, skipping and
//!    reporting rows a foreign key restricts; `budget -= selected`; stop when a select finds
//!    fewer than `want`. The budget starts at `MAX_PER_PASS`, so a big backlog drains over
//!    many passes instead of in one long one;
//! 4. a table that fails or is refused is logged and reported, and the next table still runs;
//! 5. releases the lock; a release that finds the lock gone fails the pass.
//!
//! The backends (`embedded.rs`, `sql/`) say how each step is done safely.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::backend::{DeleteTally, PurgeBackend, PurgeSession};
use crate::config::PurgeConfig;
use crate::error::{Error, Result};
use crate::report::{PassReport, TableReport};

/// The most rows one pass selects from one table.
pub const MAX_PER_PASS: u64 = 5000;

/// The most rows one select (and one delete transaction) takes.
pub const BATCH: u64 = 500;

/// How long a pass's hold on the advisory lock lasts unless renewed (it is renewed before each
/// table). A replica that dies mid-pass blocks the others this long at most.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(300);

/// Numbers the passes of this process, to give each its own lock holder name.
static PASSES: AtomicU64 = AtomicU64::new(1);

type TableList = dyn Fn() -> Vec<String> + Send + Sync;
type OnPurge = dyn Fn(&str, u64, Option<&Error>) + Send + Sync;
type OnTable = dyn Fn(&TableReport, Option<&Error>) + Send + Sync;

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
    backend: Arc<dyn PurgeBackend>,
    lock_name: String,
    list: Arc<TableList>,
    pub(crate) config: PurgeConfig,
    holder: String,
    lease: Duration,
    on_purge: Option<Arc<OnPurge>>,
    on_table: Option<Arc<OnTable>>,
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
    /// A purger over `backend` ([`Tables`](crate::Tables) or a [`SqlBackend`](crate::SqlBackend))
    /// that takes the lock `lock_name` and purges the tables `list` names (asked anew at the
    /// start of every pass). `config` is clamped.
    pub fn new(
        backend: impl PurgeBackend,
        lock_name: &str,
        list: impl Fn() -> Vec<String> + Send + Sync + 'static,
        config: PurgeConfig,
    ) -> Self {
        Self {
            backend: Arc::new(backend),
            lock_name: lock_name.to_owned(),
            list: Arc::new(list),
            config: config.clamped(),
            holder: format!("pid{}", std::process::id()),
            lease: DEFAULT_LEASE,
            on_purge: None,
            on_table: None,
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

    /// Called after each table of a pass with its whole report (a dry run's eligible count,
    /// the rows a foreign key kept) and the error that stopped it, if any.
    #[must_use]
    pub fn on_table(
        mut self,
        callback: impl Fn(&TableReport, Option<&Error>) + Send + Sync + 'static,
    ) -> Self {
        self.on_table = Some(Arc::new(callback));
        self
    }

    /// The clamped configuration.
    pub fn config(&self) -> PurgeConfig {
        self.config
    }

    pub(crate) fn backend(&self) -> &dyn PurgeBackend {
        &*self.backend
    }

    pub(crate) fn lock_name(&self) -> &str {
        &self.lock_name
    }

    /// Runs one pass now (see the module doc).
    ///
    /// # Errors
    /// `PassFailed` with the first failing table and the whole report, if any table failed
    /// (the others still ran); the backend's errors taking the lock; `LockNotHeld` if the
    /// release found the lock no longer this pass's.
    pub fn run_pass(&self) -> Result<PassReport> {
        let mut report = PassReport {
            dry_run: self.config.dry_run,
            ..PassReport::default()
        };
        if !self.config.enable {
            tracing::info!("soft-delete purge is disabled; no pass");
            report.skipped = true;
            report.skip_reason = Some("disabled".to_owned());
            return Ok(report);
        }
        // Each pass holds the lock under a name of its own, so two passes of one purger (its
        // loop and a direct call, or two replicas configured alike) exclude each other too.
        let holder = format!("{}#{}", self.holder, PASSES.fetch_add(1, Ordering::Relaxed));
        let Some(mut session) = self
            .backend
            .begin_pass(&self.lock_name, &holder, self.lease)?
        else {
            tracing::info!(lock = %self.lock_name, "lock held by another replica; skipping pass");
            report.skipped = true;
            report.skip_reason = Some(format!(
                "the lock {} is held by another replica",
                self.lock_name
            ));
            return Ok(report);
        };
        let time = match session.pass_time() {
            Ok(time) => time,
            Err(e) => {
                if let Err(release) = session.finish() {
                    tracing::warn!(lock = %self.lock_name, error = %release, "releasing the purge lock failed");
                }
                return Err(e);
            }
        };
        let retention = u64::try_from(self.config.retention.as_millis()).unwrap_or(u64::MAX);
        report.cutoff_ms = time.now_ms.saturating_sub(retention);
        report.host_skew_ms = time.host_skew_ms;
        let mut first_error = None;
        for table in (self.list)() {
            if self.cancelled() {
                break;
            }
            let mut table_report = TableReport {
                table: table.clone(),
                ..TableReport::default()
            };
            let result = session.renew().and_then(|()| {
                self.purge_table(&mut *session, &table, report.cutoff_ms, &mut table_report)
            });
            self.log_table(&table_report, report.cutoff_ms, result.as_ref().err());
            if let Some(callback) = &self.on_purge {
                callback(&table, table_report.purged, result.as_ref().err());
            }
            if let Some(callback) = &self.on_table {
                callback(&table_report, result.as_ref().err());
            }
            if let Err(e) = result {
                table_report.error = Some(e.to_string());
                first_error.get_or_insert((table, e));
            }
            report.tables.push(table_report);
        }
        if let Err(e) = session.finish() {
            tracing::warn!(lock = %self.lock_name, error = %e, "releasing the purge lock failed");
            if first_error.is_none() {
                return Err(e);
            }
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
        session: &mut dyn PurgeSession,
        table: &str,
        cutoff: u64,
        report: &mut TableReport,
    ) -> Result<()> {
        let mut tally = DeleteTally::default();
        let result = self.drain_table(session, table, cutoff, report, &mut tally);
        report.purged = tally.purged;
        report.refused = tally.refused;
        if let Some(first) = report.refused.first() {
            tracing::warn!(
                table,
                refused = report.refused.len(),
                first_id = first.id,
                reason = %first.reason,
                "the database refused to delete some rows (a foreign key restricts them); \
                 skipped them and purged the rest"
            );
        }
        result
    }

    fn drain_table(
        &self,
        session: &mut dyn PurgeSession,
        table: &str,
        cutoff: u64,
        report: &mut TableReport,
        tally: &mut DeleteTally,
    ) -> Result<()> {
        let shape = session.open_table(table, self.config.time_zone)?;
        report.full_scan = !shape.indexed;
        if report.full_scan && self.first_full_scan(table) {
            tracing::warn!(
                table,
                "no index leads with deleted_at; the purge scans the whole table \
                 (apply migration 20260731120000)"
            );
        }
        if self.config.dry_run {
            report.selected = session.count(cutoff)?;
            return Ok(());
        }
        let mut budget = MAX_PER_PASS;
        loop {
            let want = BATCH.min(budget);
            if want == 0 || self.cancelled() {
                break;
            }
            let ids = session.select(cutoff, want)?;
            let selected = ids.len() as u64;
            report.batches.push(selected);
            report.selected += selected;
            budget -= selected;
            if ids.is_empty() {
                break;
            }
            // The lock must cover the delete: confirmed before each batch, so a table that
            // takes long (a slow disk, a back-fill holding the catalog) cannot outlive it.
            session.renew()?;
            session.delete(&ids, cutoff, &|| self.cancelled(), tally)?;
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
}
