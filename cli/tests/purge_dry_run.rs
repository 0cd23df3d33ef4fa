//! A dry run and a disabled purger only look: `cairn purge --once` with `dry_run: true`, or with
//! `enable: false`, leaves the schema (a server's indexes, the embedded catalog) and every row
//! as it found them; the same purge run for real migrates and purges, which shows the
//! fingerprints below would see a change. The servers come from `CAIRN_MYSQL_URL` /
//! `CAIRN_PG_URL`; without them the server tests print a notice and pass.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

#[path = "../../purger/tests/common/sql.rs"]
mod sql;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use cairn_purger::{Dialect, TABLES_COLUMN_FAMILY};
use sql::SqlClient;

const TABLE: &str = "t_cube_sandbox_spec";
/// Soft-deleted in 2020: long past the default 7-day retention.
const OLD_MS: u64 = 1_577_836_800_000;
const DRY_RUN: &str = "soft_delete_purge:\n  enable: true\n  dry_run: true\n";
const DISABLED: &str = "soft_delete_purge:\n  enable: false\n  dry_run: false\n";
const ENABLED: &str = "soft_delete_purge:\n  enable: true\n";

#[test]
fn mysql_dry_run_and_disabled_purger_change_no_index_and_no_row() {
    look_only_changes_nothing_on_a_server("CAIRN_MYSQL_URL");
}

#[test]
fn postgres_dry_run_and_disabled_purger_change_no_index_and_no_row() {
    look_only_changes_nothing_on_a_server("CAIRN_PG_URL");
}

#[test]
fn embedded_dry_run_and_disabled_purger_change_no_catalog_entry_and_no_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db_dir = dir.path().join("db");
    {
        // Tables made before migration 20260731120000: no deleted_at index yet.
        let db = cairn::Db::open(&db_dir, cairn::Options::default()).expect("open");
        let options = cairn_purger::TablesOptions::default().auto_migration(false);
        let tables = cairn_purger::Tables::open_with(Arc::new(db), &options).expect("tables");
        let t = tables
            .create_table(
                cairn_purger::Schema::new(TABLE)
                    .column("name", cairn_purger::ColumnType::Text)
                    .soft_delete(),
            )
            .expect("create");
        for i in 0..30_u64 {
            let deleted_at = (i % 3 != 0).then_some(OLD_MS + i);
            let row = cairn_purger::Row::new()
                .set("name", format!("row{i}"))
                .set("deleted_at", deleted_at.map(cairn_purger::Value::Timestamp));
            t.insert(row).expect("insert");
        }
        assert!(tables.applied_migrations().is_empty());
    }
    let config = dir.path().join("purge.yaml");
    let before = embedded_contents(&db_dir);

    let (code, report, stderr) = purge(&config, DISABLED, &["--db"], &db_dir);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["skipped"], true, "{report}");
    assert_same(&before, &embedded_contents(&db_dir), "a disabled purger");

    let (code, report, stderr) = purge(&config, DRY_RUN, &["--db"], &db_dir);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["dry_run"], true, "{report}");
    assert_eq!(report["tables"][0]["selected"], 20, "{report}");
    assert_eq!(report["tables"][0]["purged"], 0, "{report}");
    assert_same(&before, &embedded_contents(&db_dir), "a dry run");

    // The other side: run for real, it migrates (the catalog changes) and purges.
    let (code, report, stderr) = purge(&config, ENABLED, &["--db"], &db_dir);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["tables"][0]["purged"], 20, "{report}");
    let db = cairn::Db::open_read_only(&db_dir, cairn::Options::default()).expect("open");
    let tables = cairn_purger::Tables::open_with(
        Arc::new(db),
        &cairn_purger::TablesOptions::default().auto_migration(false),
    )
    .expect("tables");
    assert_eq!(
        tables.applied_migrations(),
        [cairn_purger::DELETED_AT_INDEX_MIGRATION]
    );
}

type Contents = (Vec<String>, Vec<(Vec<u8>, Vec<u8>)>);

/// Fails unless `after` is `before`, naming the first entry that differs.
fn assert_same(before: &Contents, after: &Contents, what: &str) {
    assert_eq!(before.0, after.0, "{what} changed the column families");
    let differs = before
        .1
        .iter()
        .zip(&after.1)
        .find(|(b, a)| b != a)
        .map(|(b, a)| (String::from_utf8_lossy(&b.0), String::from_utf8_lossy(&a.0)));
    assert!(
        before.1 == after.1,
        "{what} changed the tables: {} entries before, {} after; first difference (before, \
         after): {differs:?}",
        before.1.len(),
        after.1.len()
    );
}

/// Every live key and value of the tables' column family (catalog, rows, indexes, locks),
/// and the database's column families, read without writing.
fn embedded_contents(db_dir: &Path) -> Contents {
    let db = cairn::Db::open_read_only(db_dir, cairn::Options::default()).expect("open");
    let cf = db
        .column_family(TABLES_COLUMN_FAMILY)
        .expect("tables family");
    let entries = cf
        .iter()
        .expect("iter")
        .map(|entry| {
            let (k, v) = entry.expect("entry");
            (k.to_vec(), v.to_vec())
        })
        .collect();
    let mut families = db.list_column_families();
    families.sort();
    (families, entries)
}

fn look_only_changes_nothing_on_a_server(var: &str) {
    let Some(db) = Scratch::new(var) else { return };
    let c = &db.client;
    // No deleted_at index: migration 20260731120000 would add one.
    c.exec(&c.soft_delete_table(TABLE));
    c.fill(TABLE, "old", 20, |i| Some(OLD_MS + i));
    c.fill(TABLE, "live", 10, |_| None);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("purge.yaml");
    let url = Path::new(&db.url);
    let before = server_contents(c);
    assert_eq!(
        before.indexes.0, 2,
        "the primary key and uk_name: {before:?}"
    );

    let (code, report, stderr) = purge(&config, DISABLED, &["--database-url"], url);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["skipped"], true, "{report}");
    assert_eq!(
        server_contents(c),
        before,
        "a disabled purger changed the database"
    );

    let (code, report, stderr) = purge(&config, DRY_RUN, &["--database-url"], url);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["dry_run"], true, "{report}");
    assert_eq!(report["tables"][0]["selected"], 20, "{report}");
    assert_eq!(server_contents(c), before, "a dry run changed the database");

    // The other side: run for real, it indexes and purges, and the fingerprints see it.
    let (code, report, stderr) = purge(&config, ENABLED, &["--database-url"], url);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["tables"][0]["purged"], 20, "{report}");
    let after = server_contents(c);
    assert_eq!(after.indexes.0, 3, "the deleted_at index: {after:?}");
    assert_eq!(after.rows.0, 10, "{after:?}");
}

/// Runs `cairn purge --once --json` with `yaml` as its config over `--db DIR` or
/// `--database-url URL`, under a lock of the test's own: (exit code, report, stderr).
fn purge(
    config: &Path,
    yaml: &str,
    database: &[&str],
    at: &Path,
) -> (i32, serde_json::Value, String) {
    std::fs::write(config, yaml).expect("write config");
    let lock = format!("cli_dry_run_{}", std::process::id());
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["purge", "--once", "--json"])
        .args(database)
        .arg(at)
        .arg("--config")
        .arg(config)
        // The fill writes deleted_at in UTC, also into MySQL's zoneless DATETIME.
        .args(["--lock", &lock, "--tables", TABLE, "--time-zone", "+00:00"])
        .output()
        .expect("run cairn");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "report: {e}: {}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.code().unwrap_or(-1), report, stderr)
}

/// What `SHOW INDEX` / `pg_indexes` say about the table (how many, and a hash of their
/// definitions), and its rows (how many, and a hash of every `id`, `name` and `deleted_at`).
#[derive(Debug, PartialEq, Eq)]
struct ServerContents {
    indexes: (i64, i64),
    rows: (i64, i64),
}

fn server_contents(c: &SqlClient) -> ServerContents {
    let [index_count, index_hash, row_count, row_hash] = match c.dialect() {
        Dialect::MySql => {
            let indexes = format!(
                "FROM information_schema.statistics WHERE table_schema = DATABASE() AND \
                 table_name = '{TABLE}'"
            );
            [
                format!("SELECT CAST(COUNT(DISTINCT index_name) AS SIGNED) {indexes}"),
                format!(
                    "SELECT CAST(COALESCE(SUM(CRC32(CONCAT_WS(',', index_name, seq_in_index, \
                     column_name, non_unique))), 0) AS SIGNED) {indexes}"
                ),
                format!("SELECT CAST(COUNT(*) AS SIGNED) FROM `{TABLE}`"),
                format!(
                    "SELECT CAST(COALESCE(SUM(CRC32(CONCAT_WS(',', id, name, note, \
                     deleted_at))), 0) AS SIGNED) FROM `{TABLE}`"
                ),
            ]
        }
        Dialect::Postgres => {
            let indexes = format!(
                "FROM pg_indexes WHERE schemaname = current_schema() AND tablename = '{TABLE}'"
            );
            [
                format!("SELECT COUNT(*)::bigint {indexes}"),
                format!(
                    "SELECT COALESCE(SUM(hashtext(indexname || indexdef)), 0)::bigint {indexes}"
                ),
                format!("SELECT COUNT(*)::bigint FROM \"{TABLE}\""),
                format!(
                    "SELECT COALESCE(SUM(hashtext(concat_ws(',', id, name, note, deleted_at))), \
                     0)::bigint FROM \"{TABLE}\""
                ),
            ]
        }
    };
    ServerContents {
        indexes: (c.int(&index_count), c.int(&index_hash)),
        rows: (c.int(&row_count), c.int(&row_hash)),
    }
}

/// A database (MySQL) or schema (PostgreSQL) of the test's own, dropped afterwards.
struct Scratch {
    admin: SqlClient,
    client: SqlClient,
    url: String,
    drop_sql: String,
}

impl Scratch {
    fn new(var: &str) -> Option<Scratch> {
        let Ok(base) = std::env::var(var) else {
            eprintln!("skipped: {var} is not set (.ci/run sets it)");
            return None;
        };
        let admin = SqlClient::connect(&base)
            .unwrap_or_else(|e| panic!("{var} is set but the server cannot be reached: {e}"));
        let name = format!("cairn_cli_dry_{}_{}", std::process::id(), var.len());
        let (url, drop_sql) = admin.scratch(&base, &name);
        let client = SqlClient::connect(&url).expect("connect to the scratch database");
        Some(Scratch {
            admin,
            client,
            url,
            drop_sql,
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.admin.try_exec(&self.drop_sql);
    }
}
