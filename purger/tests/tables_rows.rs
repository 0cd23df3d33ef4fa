//! The table layer: rows and their indexes, soft delete and its unique-key trap, the
//! resurrecting upsert, schema changes, migrations and reopening.

#![allow(
    clippy::indexing_slicing,
    clippy::many_single_char_names,
    reason = "in a test, a panic is the failure report"
)]

mod common;

use std::sync::Arc;

use cairn_purger::{
    Column, ColumnType, DELETED_AT_INDEX_MIGRATION, Error, Index, Row, Schema, TablesOptions, Value,
};
use common::{Fixture, create_cube_tables, schema};

#[test]
fn insert_get_update_and_scoped_reads() {
    let f = Fixture::new();
    let t = f.tables.create_table(schema("t")).expect("create");
    let a = t.insert(Row::new().set("name", "a")).expect("insert a");
    let b = t
        .insert(Row::new().set("name", "b").set("note", "x"))
        .expect("insert b");
    assert!(a >= 1 && b > a, "ids auto-increment from 1: {a}, {b}");
    let row = t.get(a).expect("get").expect("row a");
    assert_eq!(row.id(), a);
    assert_eq!(row.get("name"), Some(&Value::from("a")));
    assert_eq!(row.get("note"), Some(&Value::Null));
    assert_eq!(row.deleted_at(), None);

    assert!(t.update(a, Row::new().set("note", "y")).expect("update"));
    assert_eq!(
        t.get(a).expect("get").expect("row").get("note"),
        Some(&Value::from("y"))
    );
    assert!(t.soft_delete(a).expect("soft delete"));
    assert!(
        !t.soft_delete(a).expect("twice"),
        "a soft-deleted row is not soft-deleted again"
    );
    assert_eq!(
        t.get(a).expect("get"),
        None,
        "scoped get hides a soft-deleted row"
    );
    assert!(
        !t.update(a, Row::new().set("note", "z")).expect("update"),
        "scoped update skips it"
    );
    let hidden = t
        .unscoped()
        .get(a)
        .expect("unscoped get")
        .expect("still there");
    assert_eq!(
        hidden.deleted_at(),
        Some(f.now()),
        "deleted_at is the engine clock's now"
    );
    assert_eq!(t.count().expect("count"), 1);
    assert_eq!(t.unscoped().count().expect("count"), 2);
    let names: Vec<_> = t
        .scan()
        .expect("scan")
        .map(|r| r.expect("row").id())
        .collect();
    assert_eq!(names, [b]);
    assert!(
        !t.hard_delete(a).expect("scoped hard delete"),
        "scoped: not a live row"
    );
    assert!(t.unscoped().hard_delete(a).expect("hard delete"));
    assert_eq!(t.unscoped().get(a).expect("get"), None);
    assert_eq!(t.unscoped().count().expect("count"), 1);
}

#[test]
fn a_soft_deleted_row_keeps_its_unique_keys() {
    let f = Fixture::new();
    let t = f.tables.create_table(schema("t")).expect("create");
    let id = t.insert(Row::new().set("name", "a")).expect("insert");
    let duplicate = t.insert(Row::new().set("name", "a"));
    assert!(
        matches!(&duplicate, Err(Error::UniqueViolation { index, .. }) if index == "uk_t_name"),
        "{duplicate:?}"
    );
    t.soft_delete(id).expect("soft delete");
    let trapped = t.insert(Row::new().set("name", "a"));
    assert!(
        matches!(&trapped, Err(Error::UniqueViolation { index, .. }) if index == "uk_t_name"),
        "GORM's trap: the soft-deleted row still holds the key: {trapped:?}"
    );
    assert!(
        trapped
            .expect_err("error")
            .to_string()
            .contains("uk_t_name")
    );
    assert_eq!(
        t.find_unique("uk_t_name", &[Value::from("a")])
            .expect("find"),
        None
    );
    let found = t
        .unscoped()
        .find_unique("uk_t_name", &[Value::from("a")])
        .expect("find");
    assert_eq!(found.map(|r| r.id()), Some(id));
    t.unscoped().hard_delete(id).expect("hard delete");
    let fresh = t
        .insert(Row::new().set("name", "a"))
        .expect("the key is free once purged");
    assert_ne!(fresh, id, "ids are never reused");
}

#[test]
fn upsert_resurrects_a_soft_deleted_match() {
    let f = Fixture::new();
    let t = f.tables.create_table(schema("t")).expect("create");
    let id = t
        .insert(Row::new().set("name", "a").set("note", "old"))
        .expect("insert");
    t.soft_delete(id).expect("soft delete");
    let again = t
        .upsert(Row::new().set("name", "a").set("note", "new"))
        .expect("upsert");
    assert_eq!(
        again, id,
        "the soft-deleted row is resurrected, not a new one inserted"
    );
    let row = t.get(id).expect("get").expect("live again");
    assert_eq!(row.deleted_at(), None);
    assert_eq!(row.get("note"), Some(&Value::from("new")));
    assert_eq!(t.unscoped().count().expect("count"), 1);

    let other = t
        .upsert(Row::new().set("name", "b"))
        .expect("upsert inserts");
    assert_ne!(other, id);
    assert_eq!(t.count().expect("count"), 2);
    let no_key = t.upsert(Row::new().set("note", "x"));
    assert!(
        matches!(no_key, Err(Error::InvalidArgument(_))),
        "{no_key:?}"
    );
}

#[test]
fn index_entries_follow_every_write() {
    let f = Fixture::new();
    let t = f.tables.create_table(schema("t")).expect("create");
    let id = t.insert(Row::new().set("name", "a")).expect("insert");
    t.update(id, Row::new().set("name", "b")).expect("rename");
    assert_eq!(
        t.find_unique("uk_t_name", &[Value::from("a")])
            .expect("find"),
        None
    );
    assert_eq!(
        t.find_unique("uk_t_name", &[Value::from("b")])
            .expect("find")
            .map(|r| r.id()),
        Some(id)
    );
    t.insert(Row::new().set("name", "a"))
        .expect("the old key is free after a rename");
    let clash = t.update(id, Row::new().set("name", "a"));
    assert!(
        matches!(clash, Err(Error::UniqueViolation { .. })),
        "{clash:?}"
    );
    assert_eq!(
        t.get(id).expect("get").expect("row").get("name"),
        Some(&Value::from("b")),
        "a refused update changes nothing"
    );
    t.unscoped().hard_delete(id).expect("hard delete");
    assert_eq!(
        t.find_unique("uk_t_name", &[Value::from("b")])
            .expect("find"),
        None
    );
}

#[test]
fn bad_rows_and_schemas_are_invalid_arguments() {
    let f = Fixture::new();
    let t = f.tables.create_table(schema("t")).expect("create");
    for row in [
        Row::new(),                                   // name is NOT NULL
        Row::new().set("name", 5i64),                 // wrong type
        Row::new().set("name", "a").set("nope", "x"), // unknown column
    ] {
        let result = t.insert(row.clone());
        assert!(
            matches!(result, Err(Error::InvalidArgument(_))),
            "{row:?}: {result:?}"
        );
    }
    assert_eq!(
        t.unscoped().count().expect("count"),
        0,
        "nothing half-written"
    );
    let exists = f.tables.create_table(schema("t"));
    assert!(matches!(exists, Err(Error::TableExists(_))), "{exists:?}");
    for bad in [
        Schema::new("x").column("id", ColumnType::Integer),
        Schema::new("x")
            .column("a", ColumnType::Text)
            .column("a", ColumnType::Text),
        Schema::new("x")
            .column("a", ColumnType::Text)
            .index("i", &["b"]),
        Schema::new("x")
            .column("a", ColumnType::Text)
            .index("i", &[]),
        Schema::new("x")
            .column("deleted_at", ColumnType::Timestamp)
            .soft_delete(),
        Schema::new(""),
    ] {
        let result = f.tables.create_table(bad.clone());
        assert!(
            matches!(result, Err(Error::InvalidArgument(_))),
            "{bad:?}: {result:?}"
        );
    }
    assert!(matches!(f.tables.table("none"), Err(Error::NoSuchTable(_))));
    let plain = f
        .tables
        .create_table(Schema::new("plain").column("a", ColumnType::Text))
        .expect("create");
    let id = plain.insert(Row::new().set("a", "x")).expect("insert");
    assert!(matches!(
        plain.soft_delete(id),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn concurrent_inserts_of_one_unique_key_admit_exactly_one() {
    let f = Fixture::new();
    let t = f.tables.create_table(schema("t")).expect("create");
    for round in 0..20 {
        let name = format!("k{round}");
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| t.insert(Row::new().set("name", name.as_str()))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("thread"))
                .collect()
        });
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {results:?}");
        assert!(
            results
                .iter()
                .all(|r| r.is_ok() || matches!(r, Err(Error::UniqueViolation { .. }))),
            "{results:?}"
        );
    }
    assert_eq!(t.count().expect("count"), 20);
}

#[test]
fn an_added_column_reads_null_in_older_rows() {
    let f = Fixture::new();
    let t = f.tables.create_table(schema("t")).expect("create");
    let old = t.insert(Row::new().set("name", "a")).expect("insert");
    let not_null = Column {
        name: "size".into(),
        ty: ColumnType::Integer,
        nullable: false,
    };
    assert!(matches!(
        f.tables.add_column("t", not_null),
        Err(Error::InvalidArgument(_))
    ));
    let size = Column {
        name: "size".into(),
        ty: ColumnType::Integer,
        nullable: true,
    };
    f.tables.add_column("t", size).expect("add column");
    assert_eq!(
        t.get(old).expect("get").expect("row").get("size"),
        Some(&Value::Null)
    );
    let new = t
        .insert(Row::new().set("name", "b").set("size", 3i64))
        .expect("insert");
    assert_eq!(
        t.get(new).expect("get").expect("row").get("size"),
        Some(&Value::Integer(3))
    );
}

#[test]
fn an_added_unique_index_is_back_filled_or_refused() {
    let f = Fixture::new();
    let t = f.tables.create_table(schema("t")).expect("create");
    let a = t
        .insert(Row::new().set("name", "a").set("note", "same"))
        .expect("insert");
    let b = t
        .insert(Row::new().set("name", "b").set("note", "same"))
        .expect("insert");
    let unique_note = Index {
        name: "uk_note".into(),
        columns: vec!["note".into()],
        unique: true,
    };
    let refused = f.tables.add_index("t", unique_note.clone());
    assert!(
        matches!(refused, Err(Error::UniqueViolation { .. })),
        "{refused:?}"
    );
    assert!(
        t.find_unique("uk_note", &[Value::from("same")]).is_err(),
        "no index was added"
    );
    t.update(b, Row::new().set("note", "other"))
        .expect("update");
    f.tables.add_index("t", unique_note).expect("add index");
    let found = t
        .find_unique("uk_note", &[Value::from("same")])
        .expect("find");
    assert_eq!(
        found.map(|r| r.id()),
        Some(a),
        "the back-fill indexed the existing row"
    );
    let clash = t.insert(Row::new().set("name", "c").set("note", "other"));
    assert!(
        matches!(clash, Err(Error::UniqueViolation { .. })),
        "{clash:?}"
    );
}

#[test]
fn the_migration_indexes_purge_targets_and_runs_once() {
    let f = Fixture::with(&TablesOptions::default().auto_migration(false));
    create_cube_tables(&f.tables);
    f.tables.create_table(schema("bystander")).expect("create");
    assert!(f.tables.applied_migrations().is_empty());
    let spec = f.tables.table("t_cube_sandbox_spec").expect("table");
    let id = spec.insert(Row::new().set("name", "a")).expect("insert");
    spec.soft_delete(id).expect("soft delete");
    drop(spec);

    let f = f.reopen(&TablesOptions::default());
    assert_eq!(f.tables.applied_migrations(), [DELETED_AT_INDEX_MIGRATION]);
    assert!(
        f.tables.migrate().expect("again").is_empty(),
        "a second run applies nothing"
    );
    let purger = cairn_purger::Purger::new(
        f.tables.clone(),
        "lock",
        || vec!["t_cube_sandbox_spec".to_owned(), "bystander".to_owned()],
        cairn_purger::PurgeConfig {
            dry_run: true,
            ..common::enabled()
        },
    );
    f.clock.advance(2 * common::HOUR);
    let report = purger.run_pass().expect("pass");
    let spec_report = &report.tables[0];
    assert!(
        !spec_report.full_scan,
        "the target got its deleted_at index"
    );
    assert_eq!(
        spec_report.selected, 1,
        "the back-fill indexed the soft-deleted row"
    );
    assert!(
        report.tables[1].full_scan,
        "tables that are not purge targets are left alone"
    );

    let late = f.tables.create_table(schema("t_agenthub_template")).err();
    assert!(matches!(late, Some(Error::TableExists(_))));
}

#[test]
fn a_reopened_database_keeps_catalog_rows_indexes_and_migrations() {
    let f = Fixture::new();
    create_cube_tables(&f.tables);
    let t = f.tables.table("t_cube_sandbox_spec").expect("table");
    let a = t
        .insert(Row::new().set("name", "a").set("note", "n"))
        .expect("insert");
    let b = t.insert(Row::new().set("name", "b")).expect("insert");
    t.soft_delete(b).expect("soft delete");
    let before = f.tables.table_names();
    f.db().flush().expect("flush");
    let c = t
        .insert(Row::new().set("name", "c"))
        .expect("insert after the flush");
    drop(t);

    let f = f.reopen(&TablesOptions::default());
    assert_eq!(f.tables.table_names(), before);
    assert_eq!(f.tables.applied_migrations(), [DELETED_AT_INDEX_MIGRATION]);
    let t = f.tables.table("t_cube_sandbox_spec").expect("table");
    assert_eq!(t.count().expect("count"), 2);
    assert_eq!(t.unscoped().count().expect("count"), 3);
    assert_eq!(
        t.find_unique("uk_t_cube_sandbox_spec_name", &[Value::from("a")])
            .expect("find")
            .map(|r| r.id()),
        Some(a)
    );
    let trapped = t.insert(Row::new().set("name", "b"));
    assert!(
        matches!(trapped, Err(Error::UniqueViolation { .. })),
        "{trapped:?}"
    );
    let d = t.insert(Row::new().set("name", "d")).expect("insert");
    assert!(
        d > c,
        "ids go on past every id handed out before: {d} vs {c}"
    );
}

#[test]
fn a_damaged_row_is_corruption_naming_its_key() {
    let f = Fixture::new();
    let t = f.tables.create_table(schema("t")).expect("create");
    let id = t.insert(Row::new().set("name", "a")).expect("insert");
    // Overwrite the row's bytes through the engine: key `r`, table id, row id.
    let tables: Arc<_> = Arc::new(f.tables.clone());
    let cf = tables.column_family();
    let key: Vec<u8> = cf
        .iter()
        .expect("iter")
        .map(|e| e.expect("entry").0.to_vec())
        .find(|k| k.first() == Some(&b'r') && k.ends_with(&id.to_be_bytes()))
        .expect("the row key");
    cf.put(&key, [1, 9, 0]).expect("damage");
    let got = t.get(id);
    assert!(
        matches!(&got, Err(Error::Corruption { key, .. }) if key.starts_with('r')),
        "{got:?}"
    );
    assert!(matches!(
        t.scan().expect("scan").next(),
        Some(Err(Error::Corruption { .. }))
    ));
}

#[test]
fn opening_the_tables_twice_on_one_database_is_refused() {
    let f = Fixture::new();
    let again = cairn_purger::Tables::open(Arc::clone(f.db()));
    assert!(matches!(again, Err(Error::InvalidArgument(_))), "{again:?}");
    let other_family = cairn_purger::Tables::open_with(
        Arc::clone(f.db()),
        &TablesOptions::default().column_family("other.tables"),
    );
    assert!(other_family.is_ok(), "another family holds another catalog");
    let clone = f.tables.clone();
    clone
        .create_table(schema("t"))
        .expect("a clone shares the catalog");
    assert!(f.tables.table("t").is_ok());
}

#[test]
fn a_failed_back_fill_leaves_no_index_entries_behind() {
    let f = Fixture::new();
    let t = f
        .tables
        .create_table(
            Schema::new("t")
                .column("name", ColumnType::Text)
                .nullable("note", ColumnType::Text)
                .soft_delete(),
        )
        .expect("create");
    for i in 0..1_500 {
        let row = Row::new()
            .set("name", format!("n{i}"))
            .set("note", format!("secret-{i}"));
        t.insert(row).expect("insert");
    }
    // A note too long to be an engine key: the back-fill fails after writing a batch.
    let huge = "x".repeat(cairn::MAX_KEY_LEN + 1);
    t.insert(Row::new().set("name", "huge").set("note", huge))
        .expect("insert");
    let index = Index {
        name: "idx_note".into(),
        columns: vec!["note".into()],
        unique: false,
    };
    let failed = f.tables.add_index("t", index);
    assert!(failed.is_err(), "{failed:?}");
    let cf = f.tables.column_family();
    let leftovers = cf
        .iter()
        .expect("iter")
        .map(|e| e.expect("entry").0)
        .filter(|k| k.windows(7).any(|w| w == b"secret-"))
        .count();
    assert_eq!(
        leftovers, 0,
        "index entries of a failed back-fill hold column values"
    );
    assert_eq!(t.check().expect("check"), 1_501);
}

#[test]
fn a_unique_lookup_with_a_wrong_type_is_an_invalid_argument() {
    let f = Fixture::new();
    let t = f.tables.create_table(schema("t")).expect("create");
    t.insert(Row::new().set("name", "a")).expect("insert");
    let wrong = t.find_unique("uk_t_name", &[Value::Bytes(b"a".to_vec())]);
    assert!(matches!(wrong, Err(Error::InvalidArgument(_))), "{wrong:?}");
    assert_eq!(
        t.find_unique("uk_t_name", &[Value::Null]).expect("null"),
        None
    );
}

#[test]
fn check_finds_rows_and_entries_that_disagree() {
    let f = Fixture::new();
    let t = f.tables.create_table(schema("t")).expect("create");
    let id = t
        .insert(Row::new().set("name", "a").set("note", "n"))
        .expect("insert");
    assert_eq!(t.check().expect("check"), 1);
    // Drop one index entry behind the table layer's back.
    let cf = f.tables.column_family();
    let entry = t.unscoped().engine_keys(id).expect("keys").expect("row")[1].clone();
    cf.delete(&entry).expect("delete");
    assert!(matches!(t.check(), Err(Error::Corruption { .. })));
    // And the other way: an entry whose row is gone.
    let other = t
        .insert(Row::new().set("name", "b").set("note", "m"))
        .expect("insert");
    let keys = t.unscoped().engine_keys(other).expect("keys").expect("row");
    t.unscoped().hard_delete(id).expect("drop the damaged row");
    assert_eq!(t.check().expect("consistent again"), 1);
    cf.delete(&keys[0]).expect("delete the row key alone");
    let dangling = t.check();
    assert!(
        matches!(&dangling, Err(Error::Corruption { reason, .. }) if reason.contains("does not exist")),
        "{dangling:?}"
    );
}
