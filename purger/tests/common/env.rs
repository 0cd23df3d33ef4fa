//! One purge test, three places the rows can live: the embedded tables, a MySQL/MariaDB
//! database and a PostgreSQL schema. An [`Env`] gives a test the same verbs on each: make the
//! CubeMaster/CubeOps tables, fill them with soft-deleted rows, count what is left, and build
//! a [`Purger`] over the backend, on one manual clock.
//!
//! The servers come from `CAIRN_MYSQL_URL` and `CAIRN_PG_URL` (`.ci/run` sets both). Without
//! the variable a server's tests print a notice and pass without running; with it, a server
//! that cannot be reached fails them. Each `Env` works in a database (MySQL) or schema
//! (PostgreSQL) of its own, dropped afterwards, and gives its locks names of their own, so the
//! tests run side by side.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cairn::ManualClock;
use cairn_purger::{
    PurgeConfig, Purger, SqlBackend, TablesOptions, Value, cube_master_purge_tables,
    cube_ops_purge_tables,
};

use super::sql::SqlClient;
use super::{Fixture, START_MS};

/// Where the rows live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Embedded,
    MySql,
    Postgres,
}

impl Kind {
    /// The variable naming the server, if this kind has one.
    pub fn url_var(self) -> Option<&'static str> {
        match self {
            Kind::Embedded => None,
            Kind::MySql => Some("CAIRN_MYSQL_URL"),
            Kind::Postgres => Some("CAIRN_PG_URL"),
        }
    }

    /// The server's base URL; `None` (with a notice) when the variable is unset.
    pub fn server_url(self) -> Option<String> {
        let var = self.url_var()?;
        match std::env::var(var) {
            Ok(url) if !url.is_empty() => Some(url),
            _ => {
                eprintln!("skipped: {var} is not set (.ci/run sets it; see the README)");
                None
            }
        }
    }
}

/// Runs each named test, a `fn(Kind)`, once per backend: `embedded::name`, `mysql::name`,
/// `postgres::name`.
#[macro_export]
macro_rules! on_every_backend {
    ($($test:ident),* $(,)?) => {
        mod embedded {
            $( #[test] fn $test() { super::$test(super::common::env::Kind::Embedded) } )*
        }
        $crate::on_both_servers!($($test),*);
    };
}

/// Runs each named test, a `fn(Kind)`, against each server: `mysql::name`, `postgres::name`.
#[macro_export]
macro_rules! on_both_servers {
    ($($test:ident),* $(,)?) => {
        mod mysql {
            $( #[test] fn $test() { super::$test(super::common::env::Kind::MySql) } )*
        }
        mod postgres {
            $( #[test] fn $test() { super::$test(super::common::env::Kind::Postgres) } )*
        }
    };
}

static ENVS: AtomicU64 = AtomicU64::new(0);

pub struct Env {
    pub kind: Kind,
    pub clock: Arc<ManualClock>,
    /// Distinguishes this env's locks and database from every other's on the server.
    tag: String,
    place: Place,
}

enum Place {
    Embedded(Fixture),
    Sql(Box<SqlPlace>),
}

/// A database (MySQL) or schema (PostgreSQL) of the env's own.
pub struct SqlPlace {
    /// Reaches the env's database or schema.
    pub url: String,
    pub client: SqlClient,
    admin: SqlClient,
    drop_sql: String,
    backend: SqlBackend,
}

impl Env {
    /// An env on `kind` whose purge tables have the `deleted_at` index (`indexed`) or not.
    /// `None` when the server's variable is unset.
    pub fn new(kind: Kind, indexed: bool) -> Option<Env> {
        let clock = Arc::new(ManualClock::new(START_MS));
        let n = ENVS.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}_{n}", std::process::id());
        let place = match kind {
            Kind::Embedded => {
                let options = TablesOptions::default().auto_migration(indexed);
                let f = Fixture::with_clock(&options, Arc::clone(&clock));
                Place::Embedded(f)
            }
            Kind::MySql | Kind::Postgres => {
                let base = kind.server_url()?;
                Place::Sql(Box::new(SqlPlace::create(kind, &base, &tag, &clock)))
            }
        };
        let env = Env {
            kind,
            clock,
            tag,
            place,
        };
        env.create_cube_tables(indexed);
        Some(env)
    }

    pub fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// `name` made this env's own (server locks are shared by every database on a server).
    pub fn lock(&self, name: &str) -> String {
        format!("{name}_{}", self.tag)
    }

    pub fn fixture(&self) -> Option<&Fixture> {
        match &self.place {
            Place::Embedded(f) => Some(f),
            Place::Sql(_) => None,
        }
    }

    pub fn sql(&self) -> Option<&SqlPlace> {
        match &self.place {
            Place::Sql(s) => Some(s),
            Place::Embedded(_) => None,
        }
    }

    /// A purger over this env's backend.
    pub fn purger(&self, lock: &str, list: Vec<String>, config: PurgeConfig) -> Purger {
        let list = move || list.clone();
        match &self.place {
            Place::Embedded(f) => Purger::new(f.tables.clone(), lock, list, config),
            Place::Sql(s) => Purger::new(s.backend.clone(), lock, list, config),
        }
    }

    /// A purger with a table list of its own making.
    pub fn purger_with(
        &self,
        lock: &str,
        list: impl Fn() -> Vec<String> + Send + Sync + 'static,
        config: PurgeConfig,
    ) -> Purger {
        match &self.place {
            Place::Embedded(f) => Purger::new(f.tables.clone(), lock, list, config),
            Place::Sql(s) => Purger::new(s.backend.clone(), lock, list, config),
        }
    }

    fn create_cube_tables(&self, indexed: bool) {
        let names: Vec<String> = cube_master_purge_tables(false)
            .into_iter()
            .chain(cube_ops_purge_tables())
            .collect();
        for name in &names {
            self.create_table(name);
        }
        if let Place::Sql(s) = &self.place
            && indexed
        {
            let done = s.backend.migrate(&names).expect("migration 20260731120000");
            assert_eq!(done, names, "the migration indexes every target once");
            assert!(
                s.backend.migrate(&names).expect("again").is_empty(),
                "the migration is idempotent"
            );
        }
    }

    /// A soft-deleting table with a unique `name` and a nullable `note` (no `deleted_at`
    /// index on a server: that is the migration's).
    pub fn create_table(&self, name: &str) {
        match &self.place {
            Place::Embedded(f) => {
                f.tables
                    .create_table(super::schema(name))
                    .expect("create table");
            }
            Place::Sql(s) => {
                s.client.exec(&s.client.soft_delete_table(name));
            }
        }
    }

    /// A table without `deleted_at`.
    pub fn create_plain_table(&self, name: &str) {
        match &self.place {
            Place::Embedded(f) => {
                let schema =
                    cairn_purger::Schema::new(name).column("a", cairn_purger::ColumnType::Text);
                f.tables.create_table(schema).expect("create");
            }
            Place::Sql(s) => {
                s.client.exec(&s.client.plain_table(name));
            }
        }
    }

    /// Inserts `n` rows named `{prefix}{i}`, soft-deleted at `deleted_at(i)` (None: live).
    pub fn fill(
        &self,
        table: &str,
        prefix: &str,
        n: u64,
        deleted_at: impl Fn(u64) -> Option<u64>,
    ) -> Vec<u64> {
        match &self.place {
            Place::Embedded(f) => {
                let t = f.tables.table(table).expect("table");
                super::fill(&t, prefix, n, deleted_at)
            }
            Place::Sql(s) => s.client.fill(table, prefix, n, deleted_at),
        }
    }

    pub fn insert(&self, table: &str, name: &str, deleted_at: Option<u64>) -> u64 {
        let ids = self.fill(table, name, 1, |_| deleted_at);
        ids.first().copied().expect("one id")
    }

    /// Whether row `id` is still there (soft-deleted or not).
    pub fn exists(&self, table: &str, id: u64) -> bool {
        match &self.place {
            Place::Embedded(f) => {
                let t = f.tables.table(table).expect("table");
                t.unscoped().get(id).expect("get").is_some()
            }
            Place::Sql(s) => {
                let t = s.client.quote(table);
                s.client
                    .int(&format!("SELECT COUNT(*) FROM {t} WHERE id = {id}"))
                    == 1
            }
        }
    }

    /// Every row of `table`, soft-deleted or not.
    pub fn count(&self, table: &str) -> u64 {
        match &self.place {
            Place::Embedded(f) => {
                let t = f.tables.table(table).expect("table");
                t.unscoped().count().expect("count")
            }
            Place::Sql(s) => {
                let t = s.client.quote(table);
                let n = s.client.int(&format!("SELECT COUNT(*) FROM {t}"));
                u64::try_from(n).expect("a count")
            }
        }
    }

    /// Clears `deleted_at` (an upsert's resurrection).
    pub fn resurrect(&self, table: &str, id: u64) {
        match &self.place {
            Place::Embedded(f) => {
                let t = f.tables.table(table).expect("table");
                let row = t.unscoped().get(id).expect("get").expect("row");
                t.update(id, row.set("deleted_at", Value::Null))
                    .expect("resurrect");
            }
            Place::Sql(s) => {
                let t = s.client.quote(table);
                s.client
                    .exec(&format!("UPDATE {t} SET deleted_at = NULL WHERE id = {id}"));
            }
        }
    }

    /// Whether nobody holds the advisory lock `name`.
    pub fn lock_is_free(&self, name: &str) -> bool {
        match &self.place {
            Place::Embedded(f) => f
                .tables
                .advisory_lock(name)
                .holder()
                .expect("holder")
                .is_none(),
            Place::Sql(s) => s.client.lock_holder(name).is_none(),
        }
    }
}

impl SqlPlace {
    fn create(kind: Kind, base: &str, tag: &str, clock: &Arc<ManualClock>) -> SqlPlace {
        let admin = SqlClient::connect(base).unwrap_or_else(|e| {
            panic!(
                "{} is set but the server cannot be reached: {e}",
                kind.url_var().unwrap_or_default()
            )
        });
        let (url, drop_sql) = admin.scratch(base, &format!("cairn_t_{tag}"));
        let client = SqlClient::connect(&url).expect("connect to the test's database");
        let backend = SqlBackend::new(&url)
            .expect("backend")
            .clock(Arc::clone(clock) as Arc<dyn cairn::Clock>);
        SqlPlace {
            url,
            client,
            admin,
            drop_sql,
            backend,
        }
    }

    pub fn backend(&self) -> &SqlBackend {
        &self.backend
    }
}

impl Drop for SqlPlace {
    fn drop(&mut self) {
        if let Err(e) = self.admin.try_exec(&self.drop_sql) {
            eprintln!("{}: {e}", self.drop_sql);
        }
    }
}
