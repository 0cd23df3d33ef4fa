//! One connection to MySQL/MariaDB or PostgreSQL, and the few ways the purger talks over it:
//! a scalar, a column of ids, a statement's affected rows. Placeholders and identifier quotes
//! differ by dialect; everything else the purger says is the same text on both.

use std::fmt::Write as _;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::mysql::{MySqlArguments, MySqlConnection, MySqlRow};
use sqlx::postgres::{PgArguments, PgConnection, PgRow};
use sqlx::query::Query;
use sqlx::{Connection as _, MySql, Postgres, Row as _};

use crate::error::{Error, Result};

/// The SQL dialects the backend speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// MySQL or `MariaDB` (`mysql://`, `mariadb://`).
    MySql,
    /// PostgreSQL (`postgres://`, `postgresql://`).
    Postgres,
}

impl Dialect {
    /// The dialect a database URL's scheme names.
    ///
    /// # Errors
    /// `UnsupportedDialect` for any other scheme (`sqlite://`, `mssql://`, no scheme).
    pub fn from_url(url: &str) -> Result<Self> {
        let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
        match scheme.to_ascii_lowercase().as_str() {
            "mysql" | "mariadb" => Ok(Self::MySql),
            "postgres" | "postgresql" => Ok(Self::Postgres),
            _ => Err(Error::UnsupportedDialect(scheme.to_owned())),
        }
    }

    /// `name` quoted as an identifier: backticks for MySQL, double quotes for PostgreSQL, a
    /// quote inside doubled.
    pub fn quote(self, name: &str) -> String {
        let q = match self {
            Self::MySql => '`',
            Self::Postgres => '"',
        };
        let mut quoted = String::with_capacity(name.len() + 2);
        quoted.push(q);
        for c in name.chars() {
            if c == q {
                quoted.push(q);
            }
            quoted.push(c);
        }
        quoted.push(q);
        quoted
    }

    /// The `n`th (1-based) placeholder: `?` for MySQL, `$n` for PostgreSQL.
    pub fn param(self, n: usize) -> String {
        match self {
            Self::MySql => "?".to_owned(),
            Self::Postgres => format!("${n}"),
        }
    }

    /// `count` placeholders from the `first`th on, separated by commas (an `IN` list).
    pub fn params(self, first: usize, count: usize) -> String {
        let mut list = String::new();
        for n in first..first + count {
            if n > first {
                list.push_str(", ");
            }
            let _ = write!(list, "{}", self.param(n));
        }
        list
    }
}

/// A value bound to a placeholder.
#[derive(Debug, Clone)]
pub(crate) enum Param {
    Int(i64),
    /// MySQL's `BIGINT UNSIGNED` ids.
    Uint(u64),
    Text(String),
    /// A timestamp for a column without a zone (MySQL `DATETIME`/`TIMESTAMP`, PostgreSQL
    /// `timestamp`), in UTC.
    Naive(NaiveDateTime),
    /// A timestamp for PostgreSQL's `timestamptz`.
    Zoned(DateTime<Utc>),
}

impl From<&str> for Param {
    fn from(s: &str) -> Self {
        Self::Text(s.to_owned())
    }
}

/// A first column's value as the purger reads it: every integer type (MySQL's unsigned ones,
/// PostgreSQL's `int4`, a boolean as 0 or 1) widens to one integer.
#[derive(Debug)]
enum Cell {
    Null,
    Int(i128),
    Text(String),
}

fn mysql_cell(row: &MySqlRow) -> std::result::Result<Cell, sqlx::Error> {
    if let Ok(v) = row.try_get::<Option<i64>, _>(0) {
        return Ok(v.map_or(Cell::Null, |v| Cell::Int(v.into())));
    }
    // Session ids and some functions' results are unsigned.
    if let Ok(v) = row.try_get::<Option<u64>, _>(0) {
        return Ok(v.map_or(Cell::Null, |v| Cell::Int(v.into())));
    }
    Ok(row
        .try_get::<Option<String>, _>(0)?
        .map_or(Cell::Null, Cell::Text))
}

fn pg_cell(row: &PgRow) -> std::result::Result<Cell, sqlx::Error> {
    if let Ok(v) = row.try_get::<Option<bool>, _>(0) {
        return Ok(v.map_or(Cell::Null, |v| Cell::Int(v.into())));
    }
    if let Ok(v) = row.try_get::<Option<i64>, _>(0) {
        return Ok(v.map_or(Cell::Null, |v| Cell::Int(v.into())));
    }
    if let Ok(v) = row.try_get::<Option<i32>, _>(0) {
        return Ok(v.map_or(Cell::Null, |v| Cell::Int(v.into())));
    }
    Ok(row
        .try_get::<Option<String>, _>(0)?
        .map_or(Cell::Null, Cell::Text))
}

/// A `DATETIME` or `TIMESTAMP` column (the session is at UTC), to bind back as it was read.
fn mysql_stamp(row: &MySqlRow, column: usize) -> std::result::Result<Param, sqlx::Error> {
    if let Ok(at) = row.try_get::<NaiveDateTime, _>(column) {
        return Ok(Param::Naive(at));
    }
    Ok(Param::Naive(
        row.try_get::<DateTime<Utc>, _>(column)?.naive_utc(),
    ))
}

/// A `timestamp` or `timestamptz` column, to bind back as the same type.
fn pg_stamp(row: &PgRow, column: usize) -> std::result::Result<Param, sqlx::Error> {
    if let Ok(at) = row.try_get::<NaiveDateTime, _>(column) {
        return Ok(Param::Naive(at));
    }
    Ok(Param::Zoned(row.try_get::<DateTime<Utc>, _>(column)?))
}

/// An open connection (a session on the server: its advisory locks live as long as it does).
#[derive(Debug)]
pub(crate) enum Conn {
    MySql(MySqlConnection),
    Postgres(PgConnection),
}

fn bind_mysql<'q>(
    mut query: Query<'q, MySql, MySqlArguments>,
    params: &[Param],
) -> Query<'q, MySql, MySqlArguments> {
    for p in params {
        query = match p.clone() {
            Param::Int(v) => query.bind(v),
            Param::Uint(v) => query.bind(v),
            Param::Text(v) => query.bind(v),
            Param::Naive(v) => query.bind(v),
            Param::Zoned(v) => query.bind(v.naive_utc()),
        };
    }
    query
}

fn bind_pg<'q>(
    mut query: Query<'q, Postgres, PgArguments>,
    params: &[Param],
) -> Query<'q, Postgres, PgArguments> {
    for p in params {
        query = match p.clone() {
            Param::Int(v) => query.bind(v),
            // PostgreSQL has no unsigned types; ids past i64 are refused before binding.
            Param::Uint(v) => query.bind(i64::try_from(v).unwrap_or(i64::MAX)),
            Param::Text(v) => query.bind(v),
            Param::Naive(v) => query.bind(v),
            Param::Zoned(v) => query.bind(v),
        };
    }
    query
}

impl Conn {
    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            Self::MySql(_) => Dialect::MySql,
            Self::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The first column of every row, decoded as [`Cell`]s.
    async fn first_column(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Cell>> {
        let what = || format!("running {sql:?}");
        let cells: std::result::Result<Vec<Cell>, sqlx::Error> = match self {
            Self::MySql(c) => bind_mysql(sqlx::query(sql), params)
                .fetch_all(c)
                .await
                .map_err(|e| Error::sql(what(), e))?
                .iter()
                .map(mysql_cell)
                .collect(),
            Self::Postgres(c) => bind_pg(sqlx::query(sql), params)
                .fetch_all(c)
                .await
                .map_err(|e| Error::sql(what(), e))?
                .iter()
                .map(pg_cell)
                .collect(),
        };
        cells.map_err(|e| Error::sql(what(), e))
    }

    /// The first column of the first row as an integer (a boolean reads as 0 or 1); `None`
    /// for SQL NULL or no row.
    pub(crate) async fn scalar(&mut self, sql: &str, params: &[Param]) -> Result<Option<i64>> {
        match self.first_column(sql, params).await?.into_iter().next() {
            None | Some(Cell::Null) => Ok(None),
            Some(Cell::Int(v)) => Ok(Some(i64::try_from(v).unwrap_or(i64::MAX))),
            Some(Cell::Text(t)) => Err(Error::invalid(format!(
                "running {sql:?}: expected a number, got {t:?}"
            ))),
        }
    }

    /// The first column of the first row as text; `None` for SQL NULL or no row.
    pub(crate) async fn text(&mut self, sql: &str, params: &[Param]) -> Result<Option<String>> {
        match self.first_column(sql, params).await?.into_iter().next() {
            None | Some(Cell::Null) => Ok(None),
            Some(Cell::Text(t)) => Ok(Some(t)),
            Some(Cell::Int(v)) => Err(Error::invalid(format!(
                "running {sql:?}: expected text, got {v}"
            ))),
        }
    }

    /// Every text of the first column (a NULL or a number is skipped).
    pub(crate) async fn texts(&mut self, sql: &str, params: &[Param]) -> Result<Vec<String>> {
        let cells = self.first_column(sql, params).await?;
        Ok(cells
            .into_iter()
            .filter_map(|cell| match cell {
                Cell::Text(t) => Some(t),
                Cell::Null | Cell::Int(_) => None,
            })
            .collect())
    }

    /// Rows of `(id, deleted_at)`: each id, and its `deleted_at` as a value to bind again
    /// (a page's cursor).
    pub(crate) async fn keyed_ids(
        &mut self,
        sql: &str,
        params: &[Param],
    ) -> Result<Vec<(u64, Param)>> {
        let what = || format!("running {sql:?}");
        let rows: std::result::Result<Vec<(Cell, Param)>, sqlx::Error> = match self {
            Self::MySql(c) => bind_mysql(sqlx::query(sql), params)
                .fetch_all(c)
                .await
                .map_err(|e| Error::sql(what(), e))?
                .iter()
                .map(|row| Ok((mysql_cell(row)?, mysql_stamp(row, 1)?)))
                .collect(),
            Self::Postgres(c) => bind_pg(sqlx::query(sql), params)
                .fetch_all(c)
                .await
                .map_err(|e| Error::sql(what(), e))?
                .iter()
                .map(|row| Ok((pg_cell(row)?, pg_stamp(row, 1)?)))
                .collect(),
        };
        rows.map_err(|e| Error::sql(what(), e))?
            .into_iter()
            .map(|(cell, at)| match cell {
                Cell::Int(id) => u64::try_from(id)
                    .map(|id| (id, at))
                    .map_err(|_| Error::invalid(format!("running {sql:?}: negative id {id}"))),
                other => Err(Error::invalid(format!(
                    "running {sql:?}: expected an id, got {other:?}"
                ))),
            })
            .collect()
    }

    /// Runs a statement; the rows it affected.
    pub(crate) async fn execute(&mut self, sql: &str, params: &[Param]) -> Result<u64> {
        let done = match self {
            Self::MySql(c) => bind_mysql(sqlx::query(sql), params)
                .execute(c)
                .await
                .map(|r| r.rows_affected()),
            Self::Postgres(c) => bind_pg(sqlx::query(sql), params)
                .execute(c)
                .await
                .map(|r| r.rows_affected()),
        };
        done.map_err(|e| Error::sql(format!("running {sql:?}"), e))
    }

    /// Closes the session politely (the server frees its locks either way).
    pub(crate) async fn close(self) -> Result<()> {
        let closed = match self {
            Self::MySql(c) => c.close().await,
            Self::Postgres(c) => c.close().await,
        };
        closed.map_err(|e| Error::sql("closing the connection", e))
    }
}
