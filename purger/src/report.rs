//! What a purge pass reports: per table, what it selected and purged, in what batches, and
//! the error that stopped it. Plain data, serializable for `--json`.

/// The outcome of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PassReport {
    /// True if no pass ran: the purger is disabled, or another replica holds the lock.
    pub skipped: bool,
    /// Which of the two, when `skipped`.
    pub skip_reason: Option<String>,
    /// True if the pass only counted.
    pub dry_run: bool,
    /// Rows with `deleted_at` strictly below this (ms since the epoch, by the database's
    /// clock) were eligible.
    pub cutoff_ms: u64,
    /// This host's clock minus the database's (ms), where the pass compared them.
    pub host_skew_ms: Option<i64>,
    /// Each table's outcome, in list order.
    pub tables: Vec<TableReport>,
}

impl PassReport {
    /// Rows purged from every table.
    pub fn purged(&self) -> u64 {
        self.tables.iter().map(|t| t.purged).sum()
    }
}

/// One table's part of a pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TableReport {
    /// The table.
    pub table: String,
    /// Ids selected (in a dry run: the whole eligible backlog, uncapped).
    pub selected: u64,
    /// Rows actually deleted: selected ones that still met the predicate at delete time.
    pub purged: u64,
    /// How many ids each select returned, in order (empty in a dry run).
    pub batches: Vec<u64>,
    /// True if the table has no `deleted_at` index and was scanned whole.
    pub full_scan: bool,
    /// Rows the database refused to delete (a foreign key restricts them), skipped so the
    /// rest of the table still drains.
    pub refused: Vec<RefusedRow>,
    /// The error that stopped this table, if one did.
    pub error: Option<String>,
}

/// A row the database would not delete.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RefusedRow {
    /// The row's id.
    pub id: u64,
    /// The database's words (a foreign key of a child table restricts the delete).
    pub reason: String,
}
