//! The ways a purge over SQL could delete a row it must keep, each on MySQL/MariaDB and
//! PostgreSQL: a `deleted_at` without a zone written in the application's local time, a purger
//! host whose clock runs fast, and foreign keys that would cascade the delete into children
//! nobody soft-deleted or refuse part of a batch. These passes run on the server's clock (no
//! manual clock), so rows are written relative to what the server reads now.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

mod common;

use std::sync::Arc;

use cairn::ManualClock;
use cairn_purger::{Dialect, Error, PassReport, PurgeConfig, Purger, SqlBackend, TimeZone};
use chrono::{DateTime, Utc};
use common::enabled;
use common::env::{Env, Kind};
use common::sql::SqlClient;

on_both_servers!(
    a_zoneless_deleted_at_written_west_of_utc_is_read_in_its_zone,
    a_zoneless_deleted_at_written_east_of_utc_is_read_in_its_zone,
    a_zoneless_deleted_at_without_a_configured_zone_is_refused_and_the_pass_goes_on,
    a_host_clock_two_hours_fast_purges_nothing_young,
    a_table_whose_children_cascade_is_refused_and_its_children_live,
    a_restricted_row_is_skipped_and_reported_while_the_rest_drain,
    restricted_rows_filling_a_whole_pass_do_not_starve_the_rows_behind_them,
    a_deleted_at_that_is_not_null_or_set_on_update_is_refused,
    a_table_without_an_integer_id_is_refused,
);

const MINUTE: u64 = 60_000;
const HOUR_MS: u64 = 60 * MINUTE;

/// Ages at which rows were soft-deleted when the pass starts, and whether a 1h retention
/// keeps them: younger than the retention stays; older than retention plus a pass goes.
const AGES: [(u64, bool); 9] = [
    (0, true),
    (900, true),
    (30 * MINUTE, true),
    (55 * MINUTE, true),
    (65 * MINUTE, false),
    (2 * HOUR_MS, false),
    (5 * HOUR_MS + 30 * MINUTE, false),
    (9 * HOUR_MS, false),
    (30 * HOUR_MS, false),
];

/// The server's clock, in milliseconds since the epoch.
fn server_now_ms(client: &SqlClient) -> u64 {
    let sql = match client.dialect() {
        Dialect::MySql => {
            "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) \
             DIV 1000 AS SIGNED)"
        }
        Dialect::Postgres => "SELECT (EXTRACT(EPOCH FROM now()) * 1000)::bigint",
    };
    u64::try_from(client.int(sql)).expect("after 1970")
}

/// A soft-deleting table whose `deleted_at` has no zone (`DATETIME(3)`, `timestamp(3)`), or
/// one whose values are instants (`TIMESTAMP(3)` read at UTC, `timestamptz(3)`).
fn create(client: &SqlClient, name: &str, zoned: bool) {
    let t = client.quote(name);
    let sql = match (client.dialect(), zoned) {
        (Dialect::MySql, false) => format!(
            "CREATE TABLE {t} (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, \
             name VARCHAR(191) NOT NULL, deleted_at DATETIME(3) NULL) ENGINE=InnoDB"
        ),
        (Dialect::MySql, true) => format!(
            "CREATE TABLE {t} (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, \
             name VARCHAR(191) NOT NULL, deleted_at TIMESTAMP(3) NULL DEFAULT NULL) ENGINE=InnoDB"
        ),
        (Dialect::Postgres, false) => format!(
            "CREATE TABLE {t} (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, \
             deleted_at TIMESTAMP(3) NULL)"
        ),
        (Dialect::Postgres, true) => format!(
            "CREATE TABLE {t} (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, \
             deleted_at TIMESTAMPTZ(3) NULL)"
        ),
    };
    client.exec(&sql);
}

/// Inserts a row soft-deleted at wall time `wall` (a literal), or live; its id.
fn insert(client: &SqlClient, table: &str, name: &str, wall: Option<String>) -> u64 {
    let t = client.quote(table);
    let at = wall.unwrap_or_else(|| "NULL".to_owned());
    client.exec(&format!(
        "INSERT INTO {t} (name, deleted_at) VALUES ('{name}', {at})"
    ));
    let id = client.int(&format!(
        "SELECT CAST(MAX(id) AS {}) FROM {t} WHERE name = '{name}'",
        if client.dialect() == Dialect::MySql {
            "SIGNED"
        } else {
            "BIGINT"
        }
    ));
    u64::try_from(id).expect("an id")
}

/// `ms` as a wall-clock literal in `zone`, as an application in that zone writes it.
fn wall(ms: u64, zone: TimeZone) -> String {
    let at: DateTime<Utc> =
        DateTime::from_timestamp_millis(i64::try_from(ms).expect("ms")).expect("in range");
    format!("'{}'", zone.wall(at).format("%Y-%m-%d %H:%M:%S%.3f"))
}

/// `ms` as an instant literal (read at the sessions' UTC on MySQL).
fn instant(client: &SqlClient, ms: u64) -> String {
    client.timestamp(ms)
}

fn exists(client: &SqlClient, table: &str, id: u64) -> bool {
    let t = client.quote(table);
    client.int(&format!("SELECT COUNT(*) FROM {t} WHERE id = {id}")) == 1
}

/// A purger on the server's clock (the backend is given no clock).
fn purger(env: &Env, list: &[&str], config: PurgeConfig) -> Purger {
    let url = &env.sql().expect("a server").url;
    let backend = SqlBackend::new(url).expect("backend");
    let list: Vec<String> = list.iter().map(|t| (*t).to_owned()).collect();
    Purger::new(backend, &env.lock("safety"), move || list.clone(), config)
}

fn zoneless_rows_are_read_in(kind: Kind, zone: &str) {
    let Some(env) = Env::new(kind, true) else {
        return;
    };
    let client = &env.sql().expect("a server").client;
    let zone = TimeZone::parse(zone).expect("zone");
    create(client, "t_local", false);
    let now = server_now_ms(client);
    let rows: Vec<(u64, u64, bool)> = AGES
        .iter()
        .enumerate()
        .map(|(i, &(age, kept))| {
            let id = insert(
                client,
                "t_local",
                &format!("r{i}"),
                Some(wall(now - age, zone)),
            );
            (id, age, kept)
        })
        .collect();
    let live = insert(client, "t_local", "live", None);
    let config = PurgeConfig {
        time_zone: Some(zone),
        ..enabled()
    };
    let report = purger(&env, &["t_local"], config)
        .run_pass()
        .expect("a pass");
    for (id, age, kept) in rows {
        assert_eq!(
            exists(client, "t_local", id),
            kept,
            "{kind:?} zone {zone}: the row soft-deleted {age} ms before the pass was {} \
             ({report:?})",
            if kept { "purged" } else { "kept" }
        );
    }
    assert!(exists(client, "t_local", live), "a live row went");
}

/// An application at `-05:00` writes local wall-clock times: read as UTC they look five hours
/// old, and a row soft-deleted a second ago was purged at the 1h retention.
fn a_zoneless_deleted_at_written_west_of_utc_is_read_in_its_zone(kind: Kind) {
    zoneless_rows_are_read_in(kind, "-05:00");
}

/// East of UTC the same mistake keeps rows eight hours too long.
fn a_zoneless_deleted_at_written_east_of_utc_is_read_in_its_zone(kind: Kind) {
    zoneless_rows_are_read_in(kind, "+08:00");
}

fn a_zoneless_deleted_at_without_a_configured_zone_is_refused_and_the_pass_goes_on(kind: Kind) {
    let Some(env) = Env::new(kind, true) else {
        return;
    };
    let client = &env.sql().expect("a server").client;
    create(client, "t_local", false);
    create(client, "t_zoned", true);
    let now = server_now_ms(client);
    let local = insert(
        client,
        "t_local",
        "old",
        Some(wall(now - 3 * HOUR_MS, TimeZone::UTC)),
    );
    let zoned = insert(
        client,
        "t_zoned",
        "old",
        Some(instant(client, now - 3 * HOUR_MS)),
    );
    let config = PurgeConfig {
        time_zone: None,
        ..enabled()
    };
    let failed = purger(&env, &["t_local", "t_zoned"], config).run_pass();
    let Err(Error::PassFailed {
        table,
        source,
        report,
    }) = failed
    else {
        panic!("{kind:?}: a zoneless table without a zone must fail its part: {failed:?}");
    };
    assert_eq!(table, "t_local");
    let text = source.to_string();
    let column_type = match kind {
        Kind::MySql => "DATETIME",
        _ => "TIMESTAMP WITHOUT TIME ZONE",
    };
    for needle in ["t_local", column_type, "soft_delete_purge.time_zone"] {
        assert!(
            text.contains(needle),
            "{kind:?}: the error names {needle}: {text}"
        );
    }
    assert!(
        exists(client, "t_local", local),
        "the refused table lost a row"
    );
    assert!(
        !exists(client, "t_zoned", zoned),
        "the next table still runs"
    );
    assert_eq!(purged(&report, "t_zoned"), 1);
}

fn purged(report: &PassReport, table: &str) -> u64 {
    report
        .tables
        .iter()
        .find(|t| t.table == table)
        .map_or(0, |t| t.purged)
}

/// The purger's host reads two hours ahead of the server: its cutoff must still be the
/// server's, so a row soft-deleted a second before the pass stays, and the skew is reported.
fn a_host_clock_two_hours_fast_purges_nothing_young(kind: Kind) {
    let Some(env) = Env::new(kind, true) else {
        return;
    };
    let sql = env.sql().expect("a server");
    let client = &sql.client;
    create(client, "t_zoned", true);
    create(client, "t_local", false);
    let now = server_now_ms(client);
    let young_zoned = insert(
        client,
        "t_zoned",
        "young",
        Some(instant(client, now - 1000)),
    );
    let old_zoned = insert(
        client,
        "t_zoned",
        "old",
        Some(instant(client, now - 2 * HOUR_MS)),
    );
    let young_local = insert(
        client,
        "t_local",
        "young",
        Some(wall(now - 1000, TimeZone::UTC)),
    );
    let fast = Arc::new(ManualClock::new(now + 2 * HOUR_MS));
    let backend = SqlBackend::new(&sql.url)
        .expect("backend")
        .host_clock(fast as Arc<dyn cairn::Clock>);
    let list = vec!["t_zoned".to_owned(), "t_local".to_owned()];
    let purger = Purger::new(backend, &env.lock("fast"), move || list.clone(), enabled());
    let report = purger.run_pass().expect("a pass");
    assert!(
        exists(client, "t_zoned", young_zoned),
        "{kind:?}: a young row went"
    );
    assert!(
        exists(client, "t_local", young_local),
        "{kind:?}: a young row went"
    );
    assert!(
        !exists(client, "t_zoned", old_zoned),
        "{kind:?}: an old row stayed"
    );
    let skew = report.host_skew_ms.expect("the pass compared the clocks");
    let two_hours = i64::try_from(2 * HOUR_MS).expect("fits");
    assert!(
        (two_hours - 60_000..=two_hours + 60_000).contains(&skew),
        "{kind:?}: skew {skew} ms"
    );
}

/// A parent table and a child whose rows reference it, none of them soft-deleted.
fn create_child(client: &SqlClient, parent: &str, child: &str, rule: &str) {
    let (p, c) = (client.quote(parent), client.quote(child));
    let sql = match client.dialect() {
        Dialect::MySql => format!(
            "CREATE TABLE {c} (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, \
             parent_id BIGINT UNSIGNED NOT NULL, \
             CONSTRAINT fk_{child} FOREIGN KEY (parent_id) REFERENCES {p} (id) ON DELETE {rule}) \
             ENGINE=InnoDB"
        ),
        Dialect::Postgres => format!(
            "CREATE TABLE {c} (id BIGSERIAL PRIMARY KEY, parent_id BIGINT NOT NULL, \
             CONSTRAINT fk_{child} FOREIGN KEY (parent_id) REFERENCES {p} (id) ON DELETE {rule})"
        ),
    };
    client.exec(&sql);
}

fn count(client: &SqlClient, table: &str) -> i64 {
    client.int(&format!("SELECT COUNT(*) FROM {}", client.quote(table)))
}

/// Purging a parent whose child key cascades would hard-delete children that were never
/// soft-deleted: the table is refused, every row stays, and the next table still runs.
fn a_table_whose_children_cascade_is_refused_and_its_children_live(kind: Kind) {
    let Some(env) = Env::new(kind, true) else {
        return;
    };
    let client = &env.sql().expect("a server").client;
    create(client, "t_parent", true);
    create(client, "t_other", true);
    create_child(client, "t_parent", "t_child", "CASCADE");
    let now = server_now_ms(client);
    let old = instant(client, now - 3 * HOUR_MS);
    let mut parents = Vec::new();
    for i in 0..20 {
        let id = insert(client, "t_parent", &format!("p{i}"), Some(old.clone()));
        client.exec(&format!(
            "INSERT INTO {} (parent_id) VALUES ({id}), ({id})",
            client.quote("t_child")
        ));
        parents.push(id);
    }
    let other = insert(client, "t_other", "o", Some(old));
    let failed = purger(&env, &["t_parent", "t_other"], enabled()).run_pass();
    let Err(Error::PassFailed {
        table,
        source,
        report,
    }) = failed
    else {
        panic!("{kind:?}: a cascading parent must be refused: {failed:?}");
    };
    assert_eq!(table, "t_parent");
    let text = source.to_string();
    for needle in ["t_parent", "t_child", "CASCADE"] {
        assert!(
            text.contains(needle),
            "{kind:?}: the error names {needle}: {text}"
        );
    }
    assert_eq!(
        count(client, "t_child"),
        40,
        "{kind:?}: children were deleted"
    );
    assert_eq!(
        count(client, "t_parent"),
        20,
        "{kind:?}: parents were deleted"
    );
    assert!(
        !exists(client, "t_other", other),
        "the next table still runs"
    );
    assert_eq!(purged(&report, "t_other"), 1);
}

/// 1,200 eligible parents, one still referenced under `RESTRICT`: that one is skipped and
/// reported, the other 1,199 go in the same pass, and the next pass reports it again rather
/// than failing the table.
fn a_restricted_row_is_skipped_and_reported_while_the_rest_drain(kind: Kind) {
    let Some(env) = Env::new(kind, true) else {
        return;
    };
    let client = &env.sql().expect("a server").client;
    create(client, "t_parent", true);
    create_child(client, "t_parent", "t_child", "RESTRICT");
    let now = server_now_ms(client);
    let t = client.quote("t_parent");
    let old = instant(client, now - 3 * HOUR_MS);
    for chunk in 0..12 {
        let values: Vec<String> = (0..100)
            .map(|i| format!("('p{}', {old})", chunk * 100 + i))
            .collect();
        client.exec(&format!(
            "INSERT INTO {t} (name, deleted_at) VALUES {}",
            values.join(", ")
        ));
    }
    // The stuck row sits early in the walk, in the first batch.
    let stuck = u64::try_from(client.int(&format!(
        "SELECT CAST(id AS {}) FROM {t} WHERE name = 'p7'",
        if client.dialect() == Dialect::MySql {
            "SIGNED"
        } else {
            "BIGINT"
        }
    )))
    .expect("an id");
    client.exec(&format!(
        "INSERT INTO {} (parent_id) VALUES ({stuck})",
        client.quote("t_child")
    ));
    let purger = purger(&env, &["t_parent"], enabled());
    let report = purger
        .run_pass()
        .expect("a restricted row does not fail the pass");
    let table = &report.tables[0];
    assert_eq!(table.purged, 1199, "{kind:?}: {table:?}");
    let refused: Vec<u64> = table.refused.iter().map(|r| r.id).collect();
    assert_eq!(refused, vec![stuck], "{kind:?}");
    assert!(
        table.refused[0]
            .reason
            .to_lowercase()
            .contains("foreign key"),
        "{kind:?}: {}",
        table.refused[0].reason
    );
    assert_eq!(count(client, "t_parent"), 1);
    assert_eq!(count(client, "t_child"), 1);
    let again = purger.run_pass().expect("a second pass");
    assert_eq!(again.tables[0].purged, 0);
    assert_eq!(again.tables[0].refused.len(), 1);
}

/// More rows stuck under `RESTRICT` than a pass's budget, all older than 100 free ones: the
/// first pass spends its budget on them, the second goes on past them (the walk resumes where
/// the last pass stopped) and purges the free rows. Each pass used to start over at the
/// oldest, so the table never drained.
fn restricted_rows_filling_a_whole_pass_do_not_starve_the_rows_behind_them(kind: Kind) {
    let Some(env) = Env::new(kind, true) else {
        return;
    };
    let client = &env.sql().expect("a server").client;
    create(client, "t_parent", true);
    create_child(client, "t_parent", "t_child", "RESTRICT");
    let now = server_now_ms(client);
    let t = client.quote("t_parent");
    let stuck = usize::try_from(cairn_purger::MAX_PER_PASS + 1).expect("fits");
    let fill = |prefix: &str, n: usize, at: String| {
        for start in (0..n).step_by(1000) {
            let values: Vec<String> = (start..n.min(start + 1000))
                .map(|i| format!("('{prefix}{i}', {at})"))
                .collect();
            client.exec(&format!(
                "INSERT INTO {t} (name, deleted_at) VALUES {}",
                values.join(", ")
            ));
        }
    };
    fill("stuck", stuck, instant(client, now - 3 * HOUR_MS));
    fill("free", 100, instant(client, now - 2 * HOUR_MS));
    client.exec(&format!(
        "INSERT INTO {} (parent_id) SELECT id FROM {t} WHERE name LIKE 'stuck%'",
        client.quote("t_child")
    ));
    let purger = purger(&env, &["t_parent"], enabled());
    let first = purger.run_pass().expect("a pass");
    assert_eq!(
        first.tables[0].purged, 0,
        "{kind:?}: only stuck rows in reach"
    );
    assert_eq!(
        first.tables[0].refused.len(),
        usize::try_from(cairn_purger::MAX_PER_PASS).expect("fits"),
        "{kind:?}"
    );
    let second = purger.run_pass().expect("a second pass");
    assert_eq!(
        second.tables[0].purged, 100,
        "{kind:?}: the free rows behind them"
    );
    let free = client.int(&format!("SELECT COUNT(*) FROM {t} WHERE name LIKE 'free%'"));
    assert_eq!(free, 0, "{kind:?}");
    assert_eq!(
        count(client, "t_parent"),
        i64::try_from(stuck).expect("fits")
    );
}

/// A `deleted_at` that every row holds (NOT NULL), or that the server sets on every update
/// (MySQL's `ON UPDATE CURRENT_TIMESTAMP`, what an old `MariaDB` gives a bare first `TIMESTAMP`
/// column), makes live rows look soft-deleted: the table is refused and every row stays.
fn a_deleted_at_that_is_not_null_or_set_on_update_is_refused(kind: Kind) {
    let Some(env) = Env::new(kind, true) else {
        return;
    };
    let client = &env.sql().expect("a server").client;
    let mut tables = vec![(
        "t_not_null",
        match kind {
            Kind::MySql => "deleted_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)",
            _ => "deleted_at TIMESTAMPTZ(3) NOT NULL DEFAULT now()",
        },
    )];
    if kind == Kind::MySql {
        tables.push((
            "t_on_update",
            "deleted_at TIMESTAMP(3) NULL DEFAULT NULL ON UPDATE CURRENT_TIMESTAMP(3)",
        ));
    }
    let now = server_now_ms(client);
    for (name, column) in tables {
        let t = client.quote(name);
        let (id, tail) = match kind {
            Kind::MySql => (
                "id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY",
                " ENGINE=InnoDB",
            ),
            _ => ("id BIGSERIAL PRIMARY KEY", ""),
        };
        client.exec(&format!(
            "CREATE TABLE {t} ({id}, name VARCHAR(64) NOT NULL, {column}){tail}"
        ));
        let old = instant(client, now - 3 * HOUR_MS);
        client.exec(&format!(
            "INSERT INTO {t} (name, deleted_at) VALUES ('live', {old})"
        ));
        let failed = purger(&env, &[name], enabled()).run_pass();
        let Err(Error::PassFailed { source, .. }) = failed else {
            panic!("{kind:?} {name}: must be refused: {failed:?}");
        };
        assert!(
            matches!(*source, Error::TableRefused { .. }),
            "{kind:?} {name}: {source}"
        );
        assert_eq!(count(client, name), 1, "{kind:?} {name}: a row went");
    }
}

/// A table whose id is not an integer (a `VARCHAR` key): the purger selects and deletes by an
/// integer id, so it is refused up front rather than failing mid-pass on Rust debug text.
fn a_table_without_an_integer_id_is_refused(kind: Kind) {
    let Some(env) = Env::new(kind, true) else {
        return;
    };
    let client = &env.sql().expect("a server").client;
    let t = client.quote("t_text_id");
    let column = match kind {
        Kind::MySql => "deleted_at DATETIME(3) NULL",
        _ => "deleted_at TIMESTAMPTZ(3) NULL",
    };
    client.exec(&format!(
        "CREATE TABLE {t} (id VARCHAR(32) PRIMARY KEY, {column})"
    ));
    let old = instant(client, server_now_ms(client) - 3 * HOUR_MS);
    client.exec(&format!(
        "INSERT INTO {t} (id, deleted_at) VALUES ('a', {old})"
    ));
    let failed = purger(&env, &["t_text_id"], enabled()).run_pass();
    let Err(Error::PassFailed { source, .. }) = failed else {
        panic!("{kind:?}: must be refused: {failed:?}");
    };
    let text = source.to_string();
    assert!(
        matches!(*source, Error::TableRefused { .. }) && text.contains("integer id"),
        "{kind:?}: {text}"
    );
    assert_eq!(count(client, "t_text_id"), 1);
}
