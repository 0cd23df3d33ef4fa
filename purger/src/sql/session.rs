//! One pass over SQL: a session holding the server's advisory lock, the table being purged,
//! and the pass's deadline. Every statement runs on the session, under the deadline; a broken
//! session is closed at once (the server frees the lock) and the rest of the pass fails.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::conn::{Conn, Dialect, Param};
use super::{RELEASE_TIMEOUT, SqlBackend, statements};
use crate::backend::{DeleteTally, PassTime, PurgeSession, RefusedRow, TableShape};
use crate::error::{Error, Result};
use crate::zone::TimeZone;

/// How far this host's clock may be from the server's before a pass warns about it.
const SKEW_WARNING_MS: i64 = 60_000;

/// `now + timeout`, or a century from now for a timeout past what an `Instant` holds.
fn deadline(timeout: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(now)
}

/// Attempts at a delete the server rolled back for a deadlock.
const DELETE_ATTEMPTS: u32 = 3;

pub(crate) struct SqlSession<'a> {
    backend: &'a SqlBackend,
    /// `None` once closed: after a connection failure or a timeout.
    conn: Option<Conn>,
    dialect: Dialect,
    /// The session's id on the server, to end it from outside after a timeout.
    server_id: Option<i64>,
    lock: String,
    deadline: tokio::time::Instant,
    table: Option<OpenTable>,
}

struct OpenTable {
    name: String,
    /// The zone zoneless `deleted_at` values are written in; `None` for a zoned column
    /// (MySQL `TIMESTAMP` read in the session's UTC, PostgreSQL `timestamptz`).
    wall_zone: Option<TimeZone>,
    /// The last row the previous page ended on: its `deleted_at`, bound as read, and id.
    cursor: Option<(Param, u64)>,
}

/// What a table has, for a pass or the migration; `None` when it has no `deleted_at`.
pub(crate) struct Shape {
    pub(crate) indexed: bool,
    /// `deleted_at` names instants (MySQL `TIMESTAMP`, PostgreSQL `timestamptz`), not wall
    /// times in a zone only the writer knows (MySQL `DATETIME`, PostgreSQL `timestamp`).
    pub(crate) zoned: bool,
    /// `deleted_at`'s type, as the server names it.
    pub(crate) column_type: String,
}

/// Reads `table`'s shape: `NoSuchTable` if absent, `None` if it does not soft-delete.
pub(crate) async fn table_shape(conn: &mut Conn, table: &str) -> Result<Option<Shape>> {
    let d = conn.dialect();
    let name = [Param::from(table)];
    if conn.scalar(statements::table_exists(d), &name).await? != Some(1) {
        return Err(Error::NoSuchTable(table.to_owned()));
    }
    let Some(kind) = conn.text(statements::deleted_at_type(d), &name).await? else {
        return Ok(None);
    };
    let zoned = match (d, kind.to_ascii_lowercase().as_str()) {
        (Dialect::MySql, "datetime") | (Dialect::Postgres, "timestamp without time zone") => false,
        (Dialect::MySql, "timestamp") | (Dialect::Postgres, "timestamp with time zone") => true,
        _ => {
            return Err(Error::invalid(format!(
                "table {table:?}: deleted_at is {kind}; the SQL backend purges DATETIME, \
                 TIMESTAMP and timestamptz columns"
            )));
        }
    };
    let nullability = conn
        .text(statements::deleted_at_nullability(d), &name)
        .await?
        .unwrap_or_default()
        .to_ascii_lowercase();
    if nullability.starts_with("no") {
        return Err(Error::TableRefused {
            table: table.to_owned(),
            reason: "deleted_at is NOT NULL: live rows hold a time too, and would be purged"
                .to_owned(),
        });
    }
    if nullability.contains("on update") {
        return Err(Error::TableRefused {
            table: table.to_owned(),
            reason: "deleted_at is set on every update (ON UPDATE CURRENT_TIMESTAMP): live \
                     rows would look soft-deleted"
                .to_owned(),
        });
    }
    let id = conn.text(statements::id_type(d), &name).await?;
    let integer = id.as_deref().is_some_and(|t| {
        matches!(
            t.to_ascii_lowercase().as_str(),
            "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint"
        )
    });
    if !integer {
        return Err(Error::TableRefused {
            table: table.to_owned(),
            reason: match id {
                Some(t) => {
                    format!("its id is {t}: the purger selects and deletes by an integer id")
                }
                None => "it has no id column: the purger selects and deletes by an integer id"
                    .to_owned(),
            },
        });
    }
    let leading = conn.scalar(statements::leading_deleted_at_indexes(d), &name);
    let indexed = leading.await?.unwrap_or(0) > 0;
    Ok(Some(Shape {
        indexed,
        zoned,
        column_type: kind.to_ascii_uppercase(),
    }))
}

/// Refuses a table the purge would harm. A zoneless `deleted_at` without a zone: the cutoff
/// cannot be placed among its values. A foreign key whose `ON DELETE` writes a child table:
/// purging a parent would delete or change children nobody soft-deleted.
async fn check_safe(
    conn: &mut Conn,
    table: &str,
    shape: &Shape,
    zone: Option<TimeZone>,
) -> Result<()> {
    let refused = |reason: String| Error::TableRefused {
        table: table.to_owned(),
        reason,
    };
    if !shape.zoned && zone.is_none() {
        return Err(refused(format!(
            "deleted_at is {}, a type without a time zone, and no time zone is configured: \
             set soft_delete_purge.time_zone (or --time-zone) to the zone the application \
             writes deleted_at in, an IANA name (America/New_York) or an offset (-05:00)",
            shape.column_type
        )));
    }
    let sql = statements::writing_foreign_keys(conn.dialect());
    let keys = conn.texts(sql, &[Param::from(table)]).await?;
    if !keys.is_empty() {
        return Err(refused(format!(
            "purging it would change rows of other tables through {}; make those keys \
             RESTRICT (the purge then skips a row that still has children) or purge the \
             children first",
            keys.join(", ")
        )));
    }
    Ok(())
}

impl<'a> SqlSession<'a> {
    /// Asks for the lock on `conn`: the session if acquired, `None` if another holds it.
    pub(crate) fn begin(backend: &'a SqlBackend, conn: Conn, lock: &str) -> Result<Option<Self>> {
        let mut session = Self {
            backend,
            dialect: conn.dialect(),
            conn: Some(conn),
            server_id: None,
            lock: lock.to_owned(),
            deadline: deadline(backend.pass_timeout),
            table: None,
        };
        let id_sql = statements::session_id(session.dialect);
        session.server_id = match session.run(async |c| c.scalar(id_sql, &[]).await) {
            Ok(id) => id,
            Err(e) => {
                session.close_broken();
                return Err(e);
            }
        };
        if let Err(e) = session.bound() {
            session.close_broken();
            return Err(e);
        }
        let sql = statements::try_lock(session.dialect);
        let name = [Param::from(lock)];
        match session.run(async |c| c.scalar(sql, &name).await) {
            Ok(Some(1)) => Ok(Some(session)),
            Ok(Some(0)) => {
                session.close_politely();
                Ok(None)
            }
            Ok(other) => {
                session.close_broken();
                Err(Error::LockFailed {
                    name: lock.to_owned(),
                    reason: format!("the server answered {other:?} when asked for it"),
                })
            }
            Err(e) => {
                session.close_broken();
                Err(e)
            }
        }
    }

    /// Sets the server-side bounds of [`statements::bound_session`]: the pass's timeout on
    /// lock waits (PostgreSQL: statements), a minute more of idleness.
    fn bound(&mut self) -> Result<()> {
        let wait = self.backend.pass_timeout;
        let idle = wait.saturating_add(Duration::from_secs(60));
        let [waits, idles] = statements::bound_session(self.dialect, wait, idle);
        self.run(async |c| c.execute(&waits, &[]).await)?;
        match self.run(async |c| c.execute(&idles, &[]).await) {
            // PostgreSQL before 14 has no idle_session_timeout.
            Err(e) if !e.is_connection_failure() && self.dialect == Dialect::Postgres => {
                tracing::debug!(error = %e, "no idle_session_timeout on this server");
                Ok(())
            }
            other => other.map(|_| ()),
        }
    }

    /// Runs `op` on the session under the pass's deadline. A timeout or a failure of the
    /// connection (not an error the server reported) closes the session.
    fn run<T>(&mut self, op: impl AsyncFnOnce(&mut Conn) -> Result<T>) -> Result<T> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(self.lost());
        };
        let deadline = self.deadline;
        let outcome = self
            .backend
            .runtime
            .block_on(async { tokio::time::timeout_at(deadline, op(conn)).await });
        match outcome {
            Err(_) => {
                self.terminate();
                Err(Error::PassTimedOut(self.backend.pass_timeout))
            }
            Ok(Err(e)) if e.is_connection_failure() => {
                self.close_broken();
                Err(e)
            }
            Ok(result) => result,
        }
    }

    fn lost(&self) -> Error {
        Error::LockLost {
            name: self.lock.clone(),
        }
    }

    /// Drops the connection without a word: the server ends the session and frees its locks.
    fn close_broken(&mut self) {
        if let Some(conn) = self.conn.take() {
            let _inside = self.backend.runtime.enter();
            drop(conn);
            tracing::warn!(lock = %self.lock, "closed the purge session's connection");
        }
    }

    /// Closes the connection and ends the session on the server from a fresh connection, so
    /// a statement stuck in it (waiting on a row lock) lets go of the advisory lock now.
    fn terminate(&mut self) {
        self.close_broken();
        let Some(id) = self.server_id else {
            return;
        };
        let backend = self.backend;
        let killed = backend.connect().and_then(|mut conn| {
            backend.runtime.block_on(async {
                let sql = statements::kill_session(conn.dialect(), id);
                let ended = tokio::time::timeout(RELEASE_TIMEOUT, conn.execute(&sql, &[])).await;
                let _ = conn.close().await;
                match ended {
                    Ok(result) => result.map(|_| ()),
                    Err(_) => Err(Error::LockFailed {
                        name: format!("session {id}"),
                        reason: "ending it took too long".to_owned(),
                    }),
                }
            })
        });
        match killed {
            Ok(()) => {
                tracing::warn!(lock = %self.lock, session = id, "ended the stuck purge session");
            }
            Err(e) => tracing::warn!(
                lock = %self.lock,
                session = id,
                error = %e,
                "could not end the stuck purge session; the server frees its lock when it ends"
            ),
        }
    }

    fn close_politely(&mut self) {
        if let Some(conn) = self.conn.take() {
            let closing = async { tokio::time::timeout(RELEASE_TIMEOUT, conn.close()).await };
            if let Ok(Err(e)) = self.backend.runtime.block_on(closing) {
                tracing::debug!(error = %e, "closing a purge session failed");
            }
        }
    }

    fn open(&self) -> Result<&OpenTable> {
        self.table
            .as_ref()
            .ok_or_else(|| Error::invalid("no table is open in this purge pass"))
    }

    /// The cutoff as the open table's `deleted_at` compares it: an instant, or the wall time
    /// below which every value was written before the cutoff in the writer's zone.
    fn cutoff(&self, cutoff_ms: u64) -> Result<Param> {
        let wall_zone = self.open()?.wall_zone;
        let ms = i64::try_from(cutoff_ms).unwrap_or(i64::MAX);
        let at = DateTime::<Utc>::from_timestamp_millis(ms)
            .ok_or_else(|| Error::invalid(format!("cutoff {cutoff_ms} ms is out of range")))?;
        Ok(match wall_zone {
            None => Param::Zoned(at),
            Some(zone) => Param::Naive(zone.wall_bound(at)),
        })
    }

    /// Deletes those of `ids` still eligible; where a foreign key refuses the statement,
    /// halves the batch down to the rows it refuses and skips those.
    fn delete_or_split(
        &mut self,
        ids: &[u64],
        cutoff: &Param,
        tally: &mut DeleteTally,
    ) -> Result<()> {
        match self.delete_batch(ids, cutoff) {
            Ok(n) => {
                tally.purged += n;
                Ok(())
            }
            Err(e) if e.is_foreign_key_violation() => {
                if let [id] = ids {
                    tally.refused.push(RefusedRow {
                        id: *id,
                        reason: e.database_message(),
                    });
                    return Ok(());
                }
                let (left, right) = ids.split_at(ids.len() / 2);
                self.delete_or_split(left, cutoff, tally)?;
                self.delete_or_split(right, cutoff, tally)
            }
            Err(e) => Err(e),
        }
    }

    /// One `DELETE` of `ids` that re-checks the predicate, retried after a deadlock.
    fn delete_batch(&mut self, ids: &[u64], cutoff: &Param) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let sql = statements::delete_ids(self.dialect, &self.open()?.name, ids.len());
        let mut params = ids
            .iter()
            .map(|&id| self.id_param(id))
            .collect::<Result<Vec<_>>>()?;
        params.push(cutoff.clone());
        let mut attempt = 1;
        loop {
            match self.run(async |c| c.execute(&sql, &params).await) {
                Err(e) if e.is_deadlock() && attempt < DELETE_ATTEMPTS => {
                    tracing::info!(attempt, "the server rolled a purge delete back; retrying");
                    std::thread::sleep(Duration::from_millis(20) * attempt);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn id_param(&self, id: u64) -> Result<Param> {
        match self.dialect {
            Dialect::MySql => Ok(Param::Uint(id)),
            Dialect::Postgres => i64::try_from(id)
                .map(Param::Int)
                .map_err(|_| Error::invalid(format!("id {id} is out of bigint's range"))),
        }
    }
}

impl PurgeSession for SqlSession<'_> {
    fn renew(&mut self) -> Result<()> {
        let sql = statements::holds_lock(self.dialect);
        let name = [Param::from(self.lock.as_str())];
        match self.run(async |c| c.scalar(sql, &name).await)? {
            Some(1) => Ok(()),
            _ => Err(self.lost()),
        }
    }

    fn pass_time(&mut self) -> Result<PassTime> {
        if let Some(clock) = &self.backend.clock {
            return Ok(PassTime {
                now_ms: clock.now_ms(),
                host_skew_ms: None,
            });
        }
        let sql = statements::server_now_ms(self.dialect);
        let server = self.run(async |c| c.scalar(sql, &[]).await)?;
        let host = i64::try_from(self.backend.host_clock.now_ms()).unwrap_or(i64::MAX);
        let server = server
            .filter(|ms| *ms >= 0)
            .ok_or_else(|| Error::invalid(format!("the server's clock reads {server:?} ms")))?;
        let skew = host.saturating_sub(server);
        if skew.saturating_abs() > SKEW_WARNING_MS {
            tracing::warn!(
                database = %self.backend.identity,
                host_minus_server_ms = skew,
                "this host's clock and the database server's differ by more than a minute; \
                 the purge measures its cutoff on the server's"
            );
        }
        Ok(PassTime {
            now_ms: u64::try_from(server).unwrap_or_default(),
            host_skew_ms: Some(skew),
        })
    }

    fn open_table(&mut self, table: &str, zone: Option<TimeZone>) -> Result<TableShape> {
        self.table = None;
        let shape = self.run(async |c| {
            let shape = table_shape(c, table).await?;
            if let Some(shape) = &shape {
                check_safe(c, table, shape, zone).await?;
            }
            Ok(shape)
        })?;
        let Some(shape) = shape else {
            return Err(Error::invalid(format!(
                "table {table:?} does not soft-delete"
            )));
        };
        self.table = Some(OpenTable {
            name: table.to_owned(),
            wall_zone: if shape.zoned { None } else { zone },
            cursor: self.backend.saved_cursor(table),
        });
        Ok(TableShape {
            indexed: shape.indexed,
        })
    }

    fn select(&mut self, cutoff_ms: u64, want: u64) -> Result<Vec<u64>> {
        let open = self.open()?;
        let sql = statements::select_page(self.dialect, &open.name, open.cursor.is_some());
        let mut params = vec![self.cutoff(cutoff_ms)?];
        if let Some((at, id)) = &open.cursor {
            params.extend([at.clone(), at.clone(), self.id_param(*id)?]);
        }
        params.push(Param::Int(i64::try_from(want).unwrap_or(i64::MAX)));
        let rows = self.run(async |c| c.keyed_ids(&sql, &params).await)?;
        if let Some(open) = self.table.as_mut() {
            // A short page reached the end: the next pass starts over, and meets again the
            // rows a foreign key kept. Else it goes on from here, so rows stuck at the front
            // cannot take every pass's budget.
            let full = u64::try_from(rows.len()).is_ok_and(|n| n >= want);
            open.cursor = rows
                .last()
                .filter(|_| full)
                .map(|(id, at)| (at.clone(), *id));
            self.backend.save_cursor(&open.name, open.cursor.clone());
        }
        Ok(rows.into_iter().map(|(id, _)| id).collect())
    }

    fn count(&mut self, cutoff_ms: u64) -> Result<u64> {
        let sql = statements::count_eligible(self.dialect, &self.open()?.name);
        let params = [self.cutoff(cutoff_ms)?];
        let n = self.run(async |c| c.scalar(&sql, &params).await)?;
        Ok(n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0))
    }

    fn delete(
        &mut self,
        ids: &[u64],
        cutoff_ms: u64,
        _stop: &dyn Fn() -> bool,
        tally: &mut DeleteTally,
    ) -> Result<()> {
        let cutoff = self.cutoff(cutoff_ms)?;
        self.delete_or_split(ids, &cutoff, tally)
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        let Some(conn) = self.conn.as_mut() else {
            // Closed after a failure the pass has reported; the server freed the lock.
            return Ok(());
        };
        let sql = statements::unlock(self.dialect);
        let name = [Param::from(self.lock.as_str())];
        // Timers are made inside the runtime: a `timeout` built outside it panics.
        let releasing =
            async { tokio::time::timeout(RELEASE_TIMEOUT, conn.scalar(sql, &name)).await };
        let released = self.backend.runtime.block_on(releasing);
        if matches!(released, Ok(Ok(Some(1)))) {
            self.close_politely();
            return Ok(());
        }
        // Whatever else happened, the session goes, so the server frees what it held.
        if released.is_err() {
            self.terminate();
        } else {
            self.close_broken();
        }
        match released {
            Ok(Ok(_)) => Err(Error::LockNotHeld {
                name: self.lock.clone(),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::LockFailed {
                name: self.lock.clone(),
                reason: format!("releasing took over {RELEASE_TIMEOUT:?}"),
            }),
        }
    }
}

impl Drop for SqlSession<'_> {
    fn drop(&mut self) {
        // A pass that ended without `finish` (a panic): closing frees the lock.
        self.close_broken();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::PurgeBackend;

    /// The servers named by `CAIRN_MYSQL_URL` and `CAIRN_PG_URL` (those set).
    fn servers() -> Vec<SqlBackend> {
        ["CAIRN_MYSQL_URL", "CAIRN_PG_URL"]
            .into_iter()
            .filter_map(|var| match std::env::var(var) {
                Ok(url) if !url.is_empty() => Some(SqlBackend::new(&url).expect(var)),
                _ => {
                    eprintln!("skipped on {var}: not set");
                    None
                }
            })
            .collect()
    }

    #[test]
    fn a_release_that_finds_the_lock_gone_fails_with_current_session_did_not_hold_lock() {
        for backend in servers() {
            let lock = format!("unit_release_{}", std::process::id());
            let conn = backend.connect().expect("connect");
            let mut session = SqlSession::begin(&backend, conn, &lock)
                .expect("begin")
                .expect("the lock is free");
            session.renew().expect("held");
            // The lock goes behind the pass's back (here: released on its own session).
            let sql = statements::unlock(session.dialect);
            let name = [Param::from(lock.as_str())];
            let released = session.run(async |c| c.scalar(sql, &name).await);
            assert_eq!(released.expect("unlock"), Some(1));
            let renewed = session.renew();
            assert!(
                matches!(renewed, Err(Error::LockLost { .. })),
                "{renewed:?}"
            );
            let finished = Box::new(session).finish();
            let text = finished
                .expect_err("release of a lock not held")
                .to_string();
            assert!(text.contains("current session did not hold lock"), "{text}");
        }
    }

    #[test]
    fn a_pass_session_bounds_its_waits_on_the_server() {
        for backend in servers() {
            let backend = backend.pass_timeout(Duration::from_secs(7));
            let lock = format!("unit_bounds_{}", std::process::id());
            let conn = backend.connect().expect("connect");
            let mut session = SqlSession::begin(&backend, conn, &lock)
                .expect("begin")
                .expect("the lock is free");
            let (waits, idles) = match session.dialect {
                Dialect::MySql => (
                    "SELECT @@SESSION.innodb_lock_wait_timeout",
                    "SELECT @@SESSION.wait_timeout",
                ),
                Dialect::Postgres => (
                    "SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'",
                    "SELECT setting::bigint FROM pg_settings WHERE name = 'idle_session_timeout'",
                ),
            };
            let wait = session.run(async |c| c.scalar(waits, &[]).await);
            let idle = session.run(async |c| c.scalar(idles, &[]).await);
            let expected = match session.dialect {
                Dialect::MySql => (7, 67),
                Dialect::Postgres => (7_000, 67_000),
            };
            assert_eq!(
                (wait.expect("wait"), idle.expect("idle")),
                (Some(expected.0), Some(expected.1))
            );
            Box::new(session).finish().expect("release");
        }
    }

    #[test]
    fn a_second_session_is_refused_the_lock_until_the_first_finishes() {
        for backend in servers() {
            let lock = format!("unit_second_{}", std::process::id());
            let first = backend
                .begin_pass(&lock, "a", Duration::from_secs(1))
                .expect("begin")
                .expect("free");
            let second = backend
                .begin_pass(&lock, "b", Duration::from_secs(1))
                .expect("begin");
            assert!(second.is_none(), "GET_LOCK(name, 0) does not wait");
            first.finish().expect("release");
            let third = backend
                .begin_pass(&lock, "c", Duration::from_secs(1))
                .expect("begin");
            third.expect("free again").finish().expect("release");
        }
    }
}
