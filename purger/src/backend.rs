//! The seam between the purger's semantics and where the rows live.
//!
//! [`Purger`](crate::Purger) owns what a pass means: the lock per tick, the cutoff, the
//! `MAX_PER_PASS` budget, `BATCH`-sized selects that stop at a short one, dry runs, per-table
//! errors, callbacks and reports. A [`PurgeBackend`] owns how: which advisory lock, which
//! select, and a delete that re-checks `deleted_at IS NOT NULL AND deleted_at < cutoff` at the
//! moment it deletes. Two are built in: [`Tables`](crate::Tables) (the embedded tables, with
//! a lease lock) and [`SqlBackend`](crate::SqlBackend) (MySQL/MariaDB and PostgreSQL through
//! `sqlx`, with the servers' own advisory locks).

use std::time::Duration;

use crate::error::Result;
pub use crate::report::RefusedRow;
use crate::zone::TimeZone;

/// Where the rows a [`Purger`](crate::Purger) purges live.
pub trait PurgeBackend: Send + Sync + 'static {
    /// Names the database: two backends on one database give the same string (a process runs
    /// one purge loop per database and lock name), and logs show it. Never holds a password.
    fn identity(&self) -> String;

    /// Milliseconds since the Unix epoch by this host's clock (or the one the backend was
    /// given): the loop's interval is measured on it. The cutoff is not: see
    /// [`PurgeSession::pass_time`].
    fn now_ms(&self) -> u64;

    /// Takes the advisory lock `name` without waiting. `holder` names this pass (unique in the
    /// process); `lease` bounds how long a lease lock stays held without renewal (a server's
    /// session lock is held as long as its session instead). `None` when another holds it.
    ///
    /// # Errors
    /// The lock could not be asked for (the database is down, the session broke).
    fn begin_pass(
        &self,
        name: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<Option<Box<dyn PurgeSession + '_>>>;
}

/// One pass's hold on the lock, and the work done under it. Dropping it releases the lock
/// (logging a failure); [`finish`](Self::finish) releases it and reports a failure.
pub trait PurgeSession {
    /// Confirms the lock is still this pass's (renewing a lease). Called before each table
    /// and each batch.
    ///
    /// # Errors
    /// `LockLost` when it is not.
    fn renew(&mut self) -> Result<()>;

    /// The time the pass's cutoff is measured from, read once at its start: the database's
    /// own clock where it has one (a SQL server's), so a purger host whose clock runs fast
    /// cannot purge young rows.
    ///
    /// # Errors
    /// The backend's (the server could not be asked).
    fn pass_time(&mut self) -> Result<PassTime>;

    /// Starts on `table`: checks it exists, soft-deletes and may be purged safely, and says
    /// whether an index leads with `deleted_at` (if not, selects scan the table). `zone` is
    /// the zone zoneless `deleted_at` values are written in, if the operator named one.
    ///
    /// # Errors
    /// `NoSuchTable`; `InvalidArgument` for a table without `deleted_at`; `TableRefused` for
    /// one the purge would harm (a zoneless `deleted_at` and no `zone`, a foreign key whose
    /// `ON DELETE` would change rows of another table); or the backend's.
    fn open_table(&mut self, table: &str, zone: Option<TimeZone>) -> Result<TableShape>;

    /// Up to `want` ids of rows of the open table with `deleted_at IS NOT NULL AND deleted_at
    /// < cutoff_ms`.
    ///
    /// # Errors
    /// The backend's.
    fn select(&mut self, cutoff_ms: u64, want: u64) -> Result<Vec<u64>>;

    /// Every row of the open table meeting the predicate (a dry run's count).
    ///
    /// # Errors
    /// The backend's.
    fn count(&mut self, cutoff_ms: u64) -> Result<u64>;

    /// Deletes those of `ids` that still meet the predicate when deleted, adding each deletion
    /// to `tally.purged` once it is durable (so a failure part-way does not hide earlier
    /// ones). A row the database will not delete (a foreign key restricts it) goes to
    /// `tally.refused` and the others are still deleted. `stop` says the pass was cancelled:
    /// the backend may end early.
    ///
    /// # Errors
    /// `LockLost` if the lock went while deleting, or the backend's.
    fn delete(
        &mut self,
        ids: &[u64],
        cutoff_ms: u64,
        stop: &dyn Fn() -> bool,
        tally: &mut DeleteTally,
    ) -> Result<()>;

    /// Releases the lock.
    ///
    /// # Errors
    /// `LockNotHeld` ("current session did not hold lock") when the lock was no longer this
    /// pass's, or the backend's.
    fn finish(self: Box<Self>) -> Result<()>;
}

/// The clock reading a pass measures its cutoff from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassTime {
    /// Milliseconds since the Unix epoch by the database's clock.
    pub now_ms: u64,
    /// This host's clock minus the database's, in milliseconds, where the two were compared.
    pub host_skew_ms: Option<i64>,
}

/// What the deletes of one table did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteTally {
    /// Rows deleted.
    pub purged: u64,
    /// Rows the database refused to delete, each with its reason; a later pass tries again.
    pub refused: Vec<RefusedRow>,
}

/// What a pass needs to know of a table before it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableShape {
    /// An index leads with `deleted_at`, so selects are range reads rather than full scans.
    pub indexed: bool,
}
