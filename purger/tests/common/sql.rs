//! A plain SQL client for the tests: set up tables, fill them, look at what is left, and
//! play the other sessions of a race (resurrecting updates, row locks, killing a session).
//! Synchronous, on a runtime of its own; panics on any error, as a test should. The CLI's
//! tests include this file too.

#![allow(dead_code, reason = "each test file uses its own part")]

use std::fmt::Write as _;
use std::sync::Mutex;

use cairn_purger::Dialect;
use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;
use sqlx::{Connection as _, Executor as _, Row as _};

pub struct SqlClient {
    runtime: tokio::runtime::Runtime,
    conn: Mutex<Conn>,
}

enum Conn {
    MySql(MySqlConnection),
    Postgres(PgConnection),
}

impl SqlClient {
    pub fn connect(url: &str) -> Result<SqlClient, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let dialect = Dialect::from_url(url).map_err(|e| e.to_string())?;
        let conn = runtime.block_on(async {
            match dialect {
                Dialect::MySql => MySqlConnection::connect(url).await.map(Conn::MySql),
                Dialect::Postgres => PgConnection::connect(url).await.map(Conn::Postgres),
            }
        });
        let conn = conn.map_err(|e| format!("connecting to {url}: {e}"))?;
        Ok(SqlClient {
            runtime,
            conn: Mutex::new(conn),
        })
    }

    /// Creates database (MySQL) or schema (PostgreSQL) `name` afresh on this client's server:
    /// the URL reaching it (from `base`, this client's URL) and the statement dropping it.
    pub fn scratch(&self, base: &str, name: &str) -> (String, String) {
        match self.dialect() {
            Dialect::MySql => {
                self.exec(&format!("DROP DATABASE IF EXISTS {name}"));
                self.exec(&format!("CREATE DATABASE {name}"));
                let (scheme, rest) = base.split_once("://").expect("a URL");
                let (before_query, query) = rest
                    .split_once('?')
                    .map_or((rest, None), |(a, q)| (a, Some(q)));
                let authority = before_query.split('/').next().expect("authority");
                let url = match query {
                    Some(q) => format!("{scheme}://{authority}/{name}?{q}"),
                    None => format!("{scheme}://{authority}/{name}"),
                };
                (url, format!("DROP DATABASE IF EXISTS {name}"))
            }
            Dialect::Postgres => {
                self.exec(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"));
                self.exec(&format!("CREATE SCHEMA {name}"));
                let sep = if base.contains('?') { '&' } else { '?' };
                let url = format!("{base}{sep}options=-c%20search_path%3D{name}");
                (url, format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
            }
        }
    }

    pub fn dialect(&self) -> Dialect {
        match &*self.conn.lock().expect("conn") {
            Conn::MySql(_) => Dialect::MySql,
            Conn::Postgres(_) => Dialect::Postgres,
        }
    }

    pub fn quote(&self, name: &str) -> String {
        match self.dialect() {
            Dialect::MySql => format!("`{name}`"),
            Dialect::Postgres => format!("\"{name}\""),
        }
    }

    /// Runs statements (no parameters; several may be given at once).
    pub fn try_exec(&self, sql: &str) -> Result<u64, sqlx::Error> {
        let mut conn = self.conn.lock().expect("conn");
        self.runtime.block_on(async {
            match &mut *conn {
                Conn::MySql(c) => c
                    .execute(sqlx::raw_sql(sql))
                    .await
                    .map(|r| r.rows_affected()),
                Conn::Postgres(c) => c
                    .execute(sqlx::raw_sql(sql))
                    .await
                    .map(|r| r.rows_affected()),
            }
        })
    }

    pub fn exec(&self, sql: &str) -> u64 {
        self.try_exec(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The first column of the first row; `None` for NULL or no row.
    pub fn try_opt_int(&self, sql: &str) -> Result<Option<i64>, sqlx::Error> {
        let mut conn = self.conn.lock().expect("conn");
        self.runtime.block_on(async {
            match &mut *conn {
                Conn::MySql(c) => {
                    let Some(row) = sqlx::query(sql).fetch_optional(&mut *c).await? else {
                        return Ok(None);
                    };
                    row.try_get::<Option<i64>, _>(0).or_else(|_| {
                        let v = row.try_get::<Option<u64>, _>(0)?;
                        Ok(v.map(|v| i64::try_from(v).expect("fits")))
                    })
                }
                Conn::Postgres(c) => {
                    let row: Option<(Option<i64>,)> =
                        sqlx::query_as(sql).fetch_optional(&mut *c).await?;
                    Ok(row.and_then(|r| r.0))
                }
            }
        })
    }

    pub fn opt_int(&self, sql: &str) -> Option<i64> {
        self.try_opt_int(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    pub fn int(&self, sql: &str) -> i64 {
        self.opt_int(sql)
            .unwrap_or_else(|| panic!("{sql}: NULL or no row"))
    }

    /// Opens a transaction holding a row lock on row `id` of `table`, so another session's
    /// `DELETE` of it waits until this one ends (`ROLLBACK`).
    pub fn lock_row(&self, table: &str, id: u64) {
        self.exec("BEGIN");
        let t = self.quote(table);
        self.exec(&format!("SELECT id FROM {t} WHERE id = {id} FOR UPDATE"));
    }

    /// The session holding advisory lock `name` (MySQL connection id, PostgreSQL pid).
    pub fn lock_holder(&self, name: &str) -> Option<i64> {
        match self.dialect() {
            Dialect::MySql => {
                self.opt_int(&format!("SELECT CAST(IS_USED_LOCK('{name}') AS SIGNED)"))
            }
            Dialect::Postgres => self.opt_int(&format!(
                "SELECT pid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND ((classid::bigint << 32) | objid::bigint) = hashtext('{name}')::bigint"
            )),
        }
    }

    /// Whether session `id` is waiting for a row lock (`InnoDB`'s `LOCK WAIT`, PostgreSQL's
    /// `Lock` wait event): a purge blocked behind [`Self::lock_row`].
    pub fn waits_for_a_lock(&self, id: i64) -> bool {
        let count = match self.dialect() {
            Dialect::MySql => self.int(&format!(
                "SELECT COUNT(*) FROM information_schema.INNODB_TRX \
                 WHERE trx_mysql_thread_id = {id} AND trx_state = 'LOCK WAIT'"
            )),
            Dialect::Postgres => self.int(&format!(
                "SELECT COUNT(*)::bigint FROM pg_stat_activity \
                 WHERE pid = {id} AND wait_event_type = 'Lock'"
            )),
        };
        count > 0
    }

    /// Ends session `id` on the server (as an operator's `KILL` or `pg_terminate_backend`).
    pub fn kill(&self, id: i64) {
        match self.dialect() {
            Dialect::MySql => {
                self.exec(&format!("KILL {id}"));
            }
            Dialect::Postgres => {
                self.int(&format!("SELECT pg_terminate_backend({id})::int::bigint"));
            }
        }
    }

    /// A GORM-like soft-deleting table: unsigned auto-increment id, unique name, nullable
    /// note, nullable `deleted_at` with milliseconds.
    pub fn soft_delete_table(&self, name: &str) -> String {
        let t = self.quote(name);
        match self.dialect() {
            Dialect::MySql => format!(
                "CREATE TABLE {t} (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, \
                 name VARCHAR(191) NOT NULL, note TEXT NULL, deleted_at DATETIME(3) NULL, \
                 UNIQUE KEY uk_{name}_name (name)) ENGINE=InnoDB"
            ),
            Dialect::Postgres => format!(
                "CREATE TABLE {t} (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL UNIQUE, \
                 note TEXT NULL, deleted_at TIMESTAMPTZ(3) NULL)"
            ),
        }
    }

    pub fn plain_table(&self, name: &str) -> String {
        let t = self.quote(name);
        match self.dialect() {
            Dialect::MySql => {
                format!("CREATE TABLE {t} (id BIGINT AUTO_INCREMENT PRIMARY KEY, a TEXT)")
            }
            Dialect::Postgres => format!("CREATE TABLE {t} (id BIGSERIAL PRIMARY KEY, a TEXT)"),
        }
    }

    /// A timestamp literal for `deleted_at`, in UTC.
    pub fn timestamp(&self, ms: u64) -> String {
        let at = chrono::DateTime::from_timestamp_millis(i64::try_from(ms).expect("ms"))
            .expect("in range");
        match self.dialect() {
            Dialect::MySql => format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.3f")),
            Dialect::Postgres => format!("'{}+00'", at.format("%Y-%m-%d %H:%M:%S%.3f")),
        }
    }

    /// Inserts `n` rows named `{prefix}{i}`, soft-deleted at `deleted_at(i)`, a thousand to
    /// a statement; their ids, in order.
    pub fn fill(
        &self,
        table: &str,
        prefix: &str,
        n: u64,
        deleted_at: impl Fn(u64) -> Option<u64>,
    ) -> Vec<u64> {
        let t = self.quote(table);
        let mut ids = Vec::new();
        let mut start = 0;
        while start < n {
            let end = (start + 1000).min(n);
            let mut sql = format!("INSERT INTO {t} (name, deleted_at) VALUES ");
            for i in start..end {
                let at = deleted_at(i).map_or("NULL".to_owned(), |ms| self.timestamp(ms));
                let sep = if i > start { ", " } else { "" };
                let _ = write!(sql, "{sep}('{prefix}{i}', {at})");
            }
            self.exec(&sql);
            let first = format!("{prefix}{start}");
            let last = format!("{prefix}{}", end - 1);
            let lo = self.int(&format!(
                "SELECT CAST(id AS {}) FROM {t} WHERE name = '{first}'",
                self.bigint()
            ));
            let hi = self.int(&format!(
                "SELECT CAST(id AS {}) FROM {t} WHERE name = '{last}'",
                self.bigint()
            ));
            let lo = u64::try_from(lo).expect("id");
            let hi = u64::try_from(hi).expect("id");
            assert_eq!(
                hi - lo,
                end - 1 - start,
                "one statement's ids are consecutive"
            );
            ids.extend(lo..=hi);
            start = end;
        }
        ids
    }

    fn bigint(&self) -> &'static str {
        match self.dialect() {
            Dialect::MySql => "SIGNED",
            Dialect::Postgres => "BIGINT",
        }
    }
}
