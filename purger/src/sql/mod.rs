//! The purger's backend over MySQL/MariaDB and PostgreSQL, for deployments whose replicas share
//! one database server instead of one process.
//!
//! Each pass opens one connection (a server session) and does everything on it: the advisory
//! lock (`GET_LOCK(name, 0)`, `pg_try_advisory_lock(hashtext(name))`), the selects and the
//! deletes. So if the session dies (a killed connection, a network cut) the server frees the
//! lock and no later statement of the pass can run without it. The delete re-checks
//! `deleted_at IS NOT NULL AND deleted_at < cutoff` in its own `WHERE`, so the server's row
//! locking makes a resurrecting `UPDATE … SET deleted_at = NULL` either land first (the row is
//! kept) or wait for the delete. After an error acquiring or releasing the lock the connection
//! is closed, so the server frees whatever it held.
//!
//! A whole pass is bounded by [`DEFAULT_PASS_TIMEOUT`]; releasing by [`RELEASE_TIMEOUT`].
//! Connecting retries with backoff a few times before the pass fails; the purge loop then
//! tries again at its next tick.
//!
//! Time: a pass measures its cutoff on the server's clock (`UTC_TIMESTAMP(6)`, `now()`), read
//! at its start, so a purger host with a wrong clock cannot purge young rows; it warns when
//! its own clock is more than a minute off. A `deleted_at` that names instants (MySQL
//! `TIMESTAMP`, read in the session's UTC; PostgreSQL `timestamptz`) compares with the cutoff
//! as it is. One that holds wall-clock times without a zone (MySQL `DATETIME`, PostgreSQL
//! `timestamp`) needs the zone the application writes it in
//! ([`PurgeConfig::time_zone`](crate::PurgeConfig)); without one the table is refused.
//!
//! Foreign keys: a table that another table references with `ON DELETE CASCADE` (or `SET
//! NULL`, `SET DEFAULT`) is refused, since purging it would delete or change children nobody
//! soft-deleted. A `RESTRICT` key that refuses a batch is narrowed by halving the batch down
//! to the rows it refuses; those are skipped and reported, and pages are walked in
//! `(deleted_at, id)` order from the last row seen, across passes (a pass whose budget ran out
//! goes on where it stopped; one that reached the end starts the next from the front), so they
//! cannot block the rest.
//!
//! The backend is blocking, like the rest of the purger: it drives its connections on a
//! runtime of its own. From async code, call a pass through `spawn_blocking` (a pass called on
//! a tokio worker thread panics: a runtime cannot block inside another).
//!
//! Not here: connection pooling (a pass is one session), TLS (the build has none), other
//! dialects (`UnsupportedDialect`).

mod conn;
mod session;
mod statements;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::ConnectOptions as _;
use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;

pub use conn::Dialect;
use conn::{Conn, Param};
use session::SqlSession;

use crate::backend::{PurgeBackend, PurgeSession};
use crate::error::{Error, Result};

/// How long a whole pass over SQL may take before it is stopped (its connection is closed,
/// which frees the lock).
pub const DEFAULT_PASS_TIMEOUT: Duration = Duration::from_secs(300);

/// How long releasing the lock may take before the connection is closed instead.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connection attempts per pass, with doubling sleeps between them from [`CONNECT_BACKOFF`].
const CONNECT_ATTEMPTS: u32 = 3;
const CONNECT_BACKOFF: Duration = Duration::from_millis(250);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the migration waits for another process's migration to finish.
const MIGRATION_LOCK_WAIT: Duration = Duration::from_secs(60);
const MIGRATION_LOCK: &str = "cairn_migration_20260731120000";

/// A MySQL/MariaDB or PostgreSQL database for the [`Purger`](crate::Purger). Cheap to clone.
///
/// ```no_run
/// use cairn_purger::{PurgeConfig, Purger, SqlBackend, CUBEMASTER_LOCK, cube_master_purge_tables};
/// # fn main() -> cairn_purger::Result<()> {
/// let backend = SqlBackend::new("mysql://root@127.0.0.1:3306/test")?;
/// backend.migrate(&cube_master_purge_tables(false))?; // idx_<table>_deleted_at where missing
/// let config = PurgeConfig { enable: true, ..PurgeConfig::default() };
/// let purger = Purger::new(backend, CUBEMASTER_LOCK, || cube_master_purge_tables(false), config);
/// let report = purger.run_pass()?;
/// println!("{} rows purged", report.purged());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SqlBackend {
    runtime: Arc<Runtime>,
    options: Options,
    identity: String,
    /// The clock a pass's cutoff is measured on instead of the server's (tests drive time).
    clock: Option<Arc<dyn cairn::Clock>>,
    /// This host's clock: the loop's interval, and the comparison with the server's.
    host_clock: Arc<dyn cairn::Clock>,
    pass_timeout: Duration,
    /// Per table, where the last pass's walk stopped (the last row of a full page), so the
    /// next pass goes on from there.
    cursors: Arc<std::sync::Mutex<std::collections::HashMap<String, (Param, u64)>>>,
}

/// The backend's runtime, shut down without blocking when the last clone goes, so dropping a
/// backend inside async code does not panic.
struct Runtime(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for Runtime {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &Self::Target {
        // Some until dropped.
        self.0
            .as_ref()
            .unwrap_or_else(|| unreachable!("the runtime is taken only in drop"))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

#[derive(Clone)]
enum Options {
    MySql(MySqlConnectOptions),
    Postgres(PgConnectOptions),
}

impl std::fmt::Debug for SqlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlBackend")
            .field("database", &self.identity)
            .field("pass_timeout", &self.pass_timeout)
            .finish_non_exhaustive()
    }
}

impl SqlBackend {
    /// A backend for the database `url` (`mysql://user:password@host:port/db`,
    /// `postgres://user@host:port/db`). Connects only when a pass or a migration runs, so a
    /// server that is down now does not stop a purge loop from starting.
    ///
    /// # Errors
    /// `UnsupportedDialect` for another scheme; `InvalidArgument` for a URL the driver cannot
    /// read; `Io` if the I/O runtime cannot start.
    pub fn new(url: &str) -> Result<Self> {
        let dialect = Dialect::from_url(url)?;
        let bad = |e: sqlx::Error| Error::invalid(format!("database URL: {e}"));
        let options = match dialect {
            // The cutoff is bound in UTC: a `timezone=` in the URL would shift how `TIMESTAMP`
            // columns compare with it.
            Dialect::MySql => Options::MySql(
                MySqlConnectOptions::from_str(url)
                    .map_err(bad)?
                    .timezone(Some("+00:00".to_owned())),
            ),
            Dialect::Postgres => Options::Postgres(PgConnectOptions::from_str(url).map_err(bad)?),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Arc::new(Runtime(Some(runtime))),
            options,
            identity: redact(url),
            clock: None,
            host_clock: Arc::new(cairn::SystemClock),
            pass_timeout: DEFAULT_PASS_TIMEOUT,
            cursors: Arc::default(),
        })
    }

    /// Measures the cutoff and the loop's interval on `clock` instead of the server's and
    /// this host's: for tests and tools that drive time. Without it (the default) each pass
    /// reads the server's clock.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn cairn::Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// This host's clock (default: the system's), on which the loop's interval runs and which
    /// each pass compares with the server's, warning past a minute apart.
    #[must_use]
    pub fn host_clock(mut self, clock: Arc<dyn cairn::Clock>) -> Self {
        self.host_clock = clock;
        self
    }

    /// Bounds each pass by `timeout` (at least a second) instead of [`DEFAULT_PASS_TIMEOUT`].
    #[must_use]
    pub fn pass_timeout(mut self, timeout: Duration) -> Self {
        self.pass_timeout = timeout.max(Duration::from_secs(1));
        self
    }

    /// The server's dialect.
    pub fn dialect(&self) -> Dialect {
        match self.options {
            Options::MySql(_) => Dialect::MySql,
            Options::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Connects once and disconnects: whether the server is reachable with these credentials.
    ///
    /// # Errors
    /// `Sql` naming the database when it is not.
    pub fn check(&self) -> Result<()> {
        let conn = self.connect()?;
        self.runtime.block_on(conn.close())
    }

    /// Applies migration `20260731120000`: to each of `tables` that exists, has `deleted_at`
    /// and no index led by it, adds `idx_<table>_deleted_at`. Runs under a server lock so two
    /// processes starting together do not both build an index, and waits at most a minute for
    /// each table's lock. Idempotent; returns the tables it indexed. On PostgreSQL each
    /// `CREATE INDEX` holds a lock that blocks writes to the table while it builds: run it in
    /// a quiet window on big tables.
    ///
    /// # Errors
    /// `Sql` for a connection or statement failure (the first, once every table was tried);
    /// `LockFailed` if another migration held the lock for a minute.
    pub fn migrate(&self, tables: &[String]) -> Result<Vec<String>> {
        let mut conn = self.connect()?;
        let dialect = conn.dialect();
        let locked = self.runtime.block_on(async {
            let sql = statements::lock(dialect);
            let name = Param::from(MIGRATION_LOCK);
            let waiting = async {
                match dialect {
                    Dialect::MySql => {
                        let wait = i64::try_from(MIGRATION_LOCK_WAIT.as_secs()).unwrap_or(0);
                        conn.scalar(sql, &[name, Param::Int(wait)]).await
                    }
                    // pg_advisory_lock returns void once it holds the lock.
                    Dialect::Postgres => conn.execute(sql, &[name]).await.map(|_| Some(1)),
                }
            };
            tokio::time::timeout(MIGRATION_LOCK_WAIT, waiting).await
        });
        match locked {
            Ok(Ok(Some(1))) => {}
            Ok(Err(e)) => return Err(e),
            Ok(Ok(_)) | Err(_) => {
                return Err(Error::LockFailed {
                    name: MIGRATION_LOCK.to_owned(),
                    reason: format!("held by another migration for {MIGRATION_LOCK_WAIT:?}"),
                });
            }
        }
        let indexed = self
            .runtime
            .block_on(add_deleted_at_indexes(&mut conn, tables));
        // Closing the session releases the migration lock whatever happened above.
        let closed = self.runtime.block_on(conn.close());
        let indexed = indexed?;
        closed?;
        Ok(indexed)
    }

    pub(crate) fn saved_cursor(&self, table: &str) -> Option<(Param, u64)> {
        self.lock_cursors().get(table).cloned()
    }

    pub(crate) fn save_cursor(&self, table: &str, cursor: Option<(Param, u64)>) {
        let mut cursors = self.lock_cursors();
        match cursor {
            Some(cursor) => cursors.insert(table.to_owned(), cursor),
            None => cursors.remove(table),
        };
    }

    fn lock_cursors(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (Param, u64)>> {
        self.cursors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new session, retried with backoff: the server may be restarting.
    pub(crate) fn connect(&self) -> Result<Conn> {
        let mut sleep = CONNECT_BACKOFF;
        let mut attempt = 1;
        loop {
            match self.runtime.block_on(self.connect_once()) {
                Ok(conn) => return Ok(conn),
                Err(e) if attempt >= CONNECT_ATTEMPTS => return Err(e),
                Err(e) => {
                    tracing::warn!(
                        database = %self.identity,
                        attempt,
                        error = %e,
                        "connecting failed; retrying"
                    );
                    std::thread::sleep(sleep);
                    sleep *= 2;
                    attempt += 1;
                }
            }
        }
    }

    async fn connect_once(&self) -> Result<Conn> {
        let what = || format!("connecting to {}", self.identity);
        let connecting = async {
            match &self.options {
                Options::MySql(o) => o.connect().await.map(Conn::MySql),
                Options::Postgres(o) => o.connect().await.map(Conn::Postgres),
            }
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Ok(conn) => conn.map_err(|e| Error::sql(what(), e)),
            Err(_) => Err(Error::sql(
                what(),
                sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection after {CONNECT_TIMEOUT:?}"),
                )),
            )),
        }
    }
}

impl PurgeBackend for SqlBackend {
    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn now_ms(&self) -> u64 {
        self.clock.as_ref().unwrap_or(&self.host_clock).now_ms()
    }

    fn begin_pass(
        &self,
        name: &str,
        _holder: &str,
        _lease: Duration,
    ) -> Result<Option<Box<dyn PurgeSession + '_>>> {
        // MySQL refuses longer names (and its locks span every database of the server).
        if self.dialect() == Dialect::MySql && name.chars().count() > 64 {
            return Err(Error::invalid(format!(
                "lock name {name:?} is longer than MySQL's 64 characters"
            )));
        }
        let conn = self.connect()?;
        SqlSession::begin(self, conn, name)
            .map(|session| session.map(|s| Box::new(s) as Box<dyn PurgeSession + '_>))
    }
}

/// Migration `20260731120000` on one session; the tables it indexed. A table that fails (its
/// lock wait ran out behind a long transaction) does not stop the others; the first failure is
/// returned once all were tried.
async fn add_deleted_at_indexes(conn: &mut Conn, tables: &[String]) -> Result<Vec<String>> {
    let dialect = conn.dialect();
    let bound = statements::bound_lock_waits(dialect, MIGRATION_LOCK_WAIT);
    conn.execute(&bound, &[]).await?;
    let mut indexed = Vec::new();
    let mut first_error = None;
    for table in tables {
        match add_deleted_at_index(conn, table).await {
            Ok(true) => {
                tracing::info!(
                    table,
                    "migration 20260731120000: added the deleted_at index"
                );
                indexed.push(table.clone());
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(table, error = %e, "migration 20260731120000 failed on a table");
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(indexed), Err)
}

/// Adds the index to `table` unless it is absent, does not soft-delete, or has an index led by
/// `deleted_at` (like the embedded migration); whether it added one.
async fn add_deleted_at_index(conn: &mut Conn, table: &str) -> Result<bool> {
    let shape = match session::table_shape(conn, table).await {
        Ok(Some(shape)) => shape,
        Ok(None) | Err(Error::NoSuchTable(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    if shape.indexed {
        return Ok(false);
    }
    let sql = statements::create_deleted_at_index(conn.dialect(), table);
    conn.execute(&sql, &[]).await?;
    Ok(true)
}

/// `url` without its user, password or any `password` parameter: safe to log, and still
/// telling apart two databases (or PostgreSQL schemas, by `options`) on one server.
fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.split('#').next().unwrap_or_default();
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.to_ascii_lowercase().contains("password"))
        .collect();
    if kept.is_empty() {
        format!("{scheme}://{host}/{path}")
    } else {
        format!("{scheme}://{host}/{path}?{}", kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_never_show_a_password() {
        assert_eq!(
            redact("mysql://root:secret@127.0.0.1:3306/test?ssl-mode=disabled&password=x"),
            "mysql://127.0.0.1:3306/test?ssl-mode=disabled"
        );
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
        assert_eq!(redact("postgres://u:p@w@h"), "postgres://h/");
    }

    #[test]
    fn another_scheme_is_an_unsupported_dialect() {
        let e = SqlBackend::new("sqlite://x.db").expect_err("sqlite");
        assert!(
            matches!(e, Error::UnsupportedDialect(ref s) if s == "sqlite"),
            "{e}"
        );
    }
}
