//! The SQL the purger sends, per dialect. The purge itself is CubeSandbox's text exactly: the
//! select, the delete that re-checks the predicate, and the dry run's count.

use std::time::Duration;

use super::conn::Dialect;

/// `1` when acquired, `0` when another session holds it, anything else an error.
pub(crate) fn try_lock(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => "SELECT GET_LOCK(?, 0)",
        Dialect::Postgres => "SELECT pg_try_advisory_lock(hashtext($1))",
    }
}

/// Waits (up to the bound seconds on MySQL; the caller's timeout on PostgreSQL) for the lock.
pub(crate) fn lock(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => "SELECT GET_LOCK(?, ?)",
        Dialect::Postgres => "SELECT pg_advisory_lock(hashtext($1))",
    }
}

/// `1` when this session holds the lock.
pub(crate) fn holds_lock(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => "SELECT IS_USED_LOCK(?) = CONNECTION_ID()",
        // A bigint key is kept as (classid, objid) = (high, low) 32 bits, objsubid 1.
        Dialect::Postgres => {
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
             AND pid = pg_backend_pid() AND granted AND objsubid = 1 \
             AND ((classid::bigint << 32) | objid::bigint) = hashtext($1)::bigint)"
        }
    }
}

/// `1` when released; `0` or NULL when this session did not hold it.
pub(crate) fn unlock(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => "SELECT RELEASE_LOCK(?)",
        Dialect::Postgres => "SELECT pg_advisory_unlock(hashtext($1))",
    }
}

/// Bounds the session's waits on the server itself, so the lock goes even if the purger cannot
/// end the session (its host died, the network is cut, the kill failed): MySQL gives up a
/// row-lock wait after `wait` and closes the session after `idle` without a statement;
/// PostgreSQL cancels a statement after `wait` and (version 14 on) closes an idle session after
/// `idle`. The second statement may fail on an old server; the caller lets it.
pub(crate) fn bound_session(d: Dialect, wait: Duration, idle: Duration) -> [String; 2] {
    let secs = |d: Duration| d.as_secs().clamp(1, 31_536_000);
    let millis = |d: Duration| d.as_millis().clamp(1, 2_147_483_647);
    match d {
        Dialect::MySql => [
            format!("SET SESSION innodb_lock_wait_timeout = {}", secs(wait)),
            format!("SET SESSION wait_timeout = {}", secs(idle)),
        ],
        Dialect::Postgres => [
            format!("SET statement_timeout = {}", millis(wait)),
            format!("SET idle_session_timeout = {}", millis(idle)),
        ],
    }
}

/// Bounds the migration's waits for locks on the tables it indexes (MySQL's metadata lock,
/// PostgreSQL's table lock): an index build queued behind a long transaction would block
/// every write queued behind it.
pub(crate) fn bound_lock_waits(d: Dialect, wait: Duration) -> String {
    match d {
        Dialect::MySql => format!(
            "SET SESSION lock_wait_timeout = {}",
            wait.as_secs().clamp(1, 31_536_000)
        ),
        Dialect::Postgres => format!(
            "SET lock_timeout = {}",
            wait.as_millis().clamp(1, 2_147_483_647)
        ),
    }
}

/// This session's id on the server.
pub(crate) fn session_id(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => "SELECT CONNECTION_ID()",
        Dialect::Postgres => "SELECT pg_backend_pid()",
    }
}

/// Ends session `id`: a statement still running in it stops, and its
/// locks go. Closing a connection is not enough: a statement waiting on a row lock keeps its
/// session, and the session its advisory lock, until the wait ends (forever by default on
/// PostgreSQL, which does not notice a departed client meanwhile).
pub(crate) fn kill_session(d: Dialect, id: i64) -> String {
    match d {
        Dialect::MySql => format!("KILL {id}"),
        Dialect::Postgres => format!("SELECT pg_terminate_backend({id})"),
    }
}

/// The server's clock, in milliseconds since the epoch.
pub(crate) fn server_now_ms(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => {
            "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) \
             DIV 1000 AS SIGNED)"
        }
        Dialect::Postgres => "SELECT (EXTRACT(EPOCH FROM now()) * 1000)::bigint",
    }
}

/// The foreign keys referencing the table whose `ON DELETE` changes the child's rows
/// (`CASCADE`, `SET NULL`, `SET DEFAULT`), each as `child.constraint ON DELETE rule`.
pub(crate) fn writing_foreign_keys(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => {
            "SELECT CAST(CONCAT(constraint_schema, '.', table_name, ' (', constraint_name, \
             ') ON DELETE ', delete_rule) AS CHAR) FROM information_schema.referential_constraints \
             WHERE unique_constraint_schema = DATABASE() AND referenced_table_name = ? \
             AND delete_rule IN ('CASCADE', 'SET NULL', 'SET DEFAULT') \
             ORDER BY constraint_schema, table_name, constraint_name"
        }
        Dialect::Postgres => {
            "SELECT format('%s (%s) ON DELETE %s', c.conrelid::regclass::text, c.conname, \
             CASE c.confdeltype WHEN 'c' THEN 'CASCADE' WHEN 'n' THEN 'SET NULL' \
             ELSE 'SET DEFAULT' END) FROM pg_constraint c \
             JOIN pg_class t ON t.oid = c.confrelid \
             JOIN pg_namespace n ON n.oid = t.relnamespace \
             WHERE c.contype = 'f' AND n.nspname = current_schema() AND t.relname = $1 \
             AND c.confdeltype IN ('c', 'n', 'd') ORDER BY 1"
        }
    }
}

/// How many tables of that name the connection's database (schema) has.
pub(crate) fn table_exists(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => {
            "SELECT COUNT(*) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name = ?"
        }
        Dialect::Postgres => {
            "SELECT COUNT(*) FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name = $1"
        }
    }
}

/// The type of the table's `deleted_at` column; no row when it has none.
pub(crate) fn deleted_at_type(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => {
            "SELECT CAST(data_type AS CHAR) FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'deleted_at'"
        }
        Dialect::Postgres => {
            "SELECT data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 \
             AND column_name = 'deleted_at'"
        }
    }
}

/// The type of the table's `id` column; no row when it has none.
pub(crate) fn id_type(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => {
            "SELECT CAST(data_type AS CHAR) FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'id'"
        }
        Dialect::Postgres => {
            "SELECT data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 AND column_name = 'id'"
        }
    }
}

/// Whether `deleted_at` may be NULL (`YES`/`NO`), and on MySQL what else the column does
/// (`on update CURRENT_TIMESTAMP`), as one text.
pub(crate) fn deleted_at_nullability(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => {
            "SELECT CAST(CONCAT(is_nullable, ' ', extra) AS CHAR) FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'deleted_at'"
        }
        Dialect::Postgres => {
            "SELECT is_nullable::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 \
             AND column_name = 'deleted_at'"
        }
    }
}

/// How many of the table's indexes lead with `deleted_at`.
pub(crate) fn leading_deleted_at_indexes(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => {
            "SELECT COUNT(*) FROM information_schema.statistics \
             WHERE table_schema = DATABASE() AND table_name = ? \
             AND column_name = 'deleted_at' AND seq_in_index = 1"
        }
        Dialect::Postgres => {
            "SELECT COUNT(*) FROM pg_index i \
             JOIN pg_class c ON c.oid = i.indrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0] \
             WHERE n.nspname = current_schema() AND c.relname = $1 AND a.attname = 'deleted_at'"
        }
    }
}

/// The next page of eligible rows, `id` and `deleted_at`, in `(deleted_at, id)` order (the
/// order of a `deleted_at` index, whose entries carry the primary key): binds the cutoff,
/// then, `after` a page, the last row's `deleted_at` twice and its id, then the limit. The
/// cursor walks past rows the delete had to skip, so they cannot fill every page.
pub(crate) fn select_page(d: Dialect, table: &str, after: bool) -> String {
    let (keyset, limit) = if after {
        // The `>=` gives the index a lower bound; the rest breaks ties on the id.
        let keyset = format!(
            " AND deleted_at >= {} AND (deleted_at > {} OR id > {})",
            d.param(2),
            d.param(3),
            d.param(4)
        );
        (keyset, d.param(5))
    } else {
        (String::new(), d.param(2))
    };
    format!(
        "SELECT id, deleted_at FROM {} WHERE deleted_at IS NOT NULL AND deleted_at < {}{keyset} \
         ORDER BY deleted_at, id LIMIT {limit}",
        d.quote(table),
        d.param(1),
    )
}

/// Deletes `n` bound ids that still meet the predicate: binds the ids, then the cutoff.
pub(crate) fn delete_ids(d: Dialect, table: &str, n: usize) -> String {
    format!(
        "DELETE FROM {} WHERE id IN ({}) AND deleted_at IS NOT NULL AND deleted_at < {}",
        d.quote(table),
        d.params(1, n),
        d.param(n + 1)
    )
}

/// The dry run's count: binds the cutoff.
pub(crate) fn count_eligible(d: Dialect, table: &str) -> String {
    format!(
        "SELECT COUNT(*) FROM {} WHERE deleted_at IS NOT NULL AND deleted_at < {}",
        d.quote(table),
        d.param(1)
    )
}

/// Migration `20260731120000` for one table: `idx_<table>_deleted_at`. MySQL has no `IF NOT
/// EXISTS` here, so the caller checks first on both.
pub(crate) fn create_deleted_at_index(d: Dialect, table: &str) -> String {
    let index = d.quote(&format!("idx_{table}_deleted_at"));
    match d {
        Dialect::MySql => format!("CREATE INDEX {index} ON {} (`deleted_at`)", d.quote(table)),
        Dialect::Postgres => format!(
            "CREATE INDEX IF NOT EXISTS {index} ON {} (\"deleted_at\")",
            d.quote(table)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_per_dialect_and_placeholders_numbered() {
        assert_eq!(
            delete_ids(Dialect::MySql, "t`x", 2),
            "DELETE FROM `t``x` WHERE id IN (?, ?) AND deleted_at IS NOT NULL AND deleted_at < ?"
        );
        assert_eq!(
            delete_ids(Dialect::Postgres, "t\"x", 3),
            "DELETE FROM \"t\"\"x\" WHERE id IN ($1, $2, $3) AND deleted_at IS NOT NULL \
             AND deleted_at < $4"
        );
        assert_eq!(
            select_page(Dialect::Postgres, "t", false),
            "SELECT id, deleted_at FROM \"t\" WHERE deleted_at IS NOT NULL AND deleted_at < $1 \
             ORDER BY deleted_at, id LIMIT $2"
        );
        assert_eq!(
            select_page(Dialect::MySql, "t", true),
            "SELECT id, deleted_at FROM `t` WHERE deleted_at IS NOT NULL AND deleted_at < ? \
             AND deleted_at >= ? AND (deleted_at > ? OR id > ?) ORDER BY deleted_at, id LIMIT ?"
        );
        assert_eq!(
            count_eligible(Dialect::MySql, "t"),
            "SELECT COUNT(*) FROM `t` WHERE deleted_at IS NOT NULL AND deleted_at < ?"
        );
    }

    #[test]
    fn only_mysql_and_postgres_urls_are_spoken() {
        assert_eq!(
            Dialect::from_url("mariadb://root@h/test").ok(),
            Some(Dialect::MySql)
        );
        assert_eq!(
            Dialect::from_url("postgresql://h/test").ok(),
            Some(Dialect::Postgres)
        );
        for url in ["sqlite://x.db", "mssql://h/db", "127.0.0.1:3306"] {
            let e = Dialect::from_url(url).expect_err(url);
            assert!(e.to_string().contains("unsupported dialect"), "{e}");
        }
    }
}
