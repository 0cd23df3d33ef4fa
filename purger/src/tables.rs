//! The catalog: which tables exist, their definitions and the migrations applied, all stored in
//! one engine column family beside the rows (see `keys.rs` for the layout).
//!
//! Schema changes (create a table, add a column or an index, a migration) hold the catalog's
//! write lock; every row write holds its read lock from reading the definition to committing,
//! so no row is ever written against a definition that is being changed (an index back-fill
//! therefore blocks writes for its duration, as PostgreSQL's plain `CREATE INDEX` does). One
//! process owns a database, so an in-memory lock is enough.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use cairn::{CfOptions, ColumnFamily, Db, WriteBatch, WriteOptions};

use crate::error::{Error, Result};
use crate::keys;
use crate::schema::{Column, Index, IndexDef, TableDef};

/// Row ids are reserved from the catalog this many at a time: one small write per block
/// instead of one per insert. A restart skips the rest of a block, as MySQL's does.
const ID_BLOCK: u64 = 1024;

/// Index entries written per engine batch during a back-fill.
const BACKFILL_BATCH: usize = 1000;

/// The column family [`Tables::open`] keeps the tables in.
pub const TABLES_COLUMN_FAMILY: &str = "cairn.tables";

/// How [`Tables::open_with`] opens the catalog.
#[derive(Debug, Clone)]
pub struct TablesOptions {
    pub(crate) auto_migration: bool,
    pub(crate) column_family: String,
    pub(crate) cf_options: CfOptions,
}

impl Default for TablesOptions {
    fn default() -> Self {
        Self {
            auto_migration: true,
            column_family: TABLES_COLUMN_FAMILY.to_owned(),
            cf_options: CfOptions::default(),
        }
    }
}

impl TablesOptions {
    /// Whether `open` applies pending migrations (default: `true`). Off, the deployment
    /// applies them out of band (`CUBE_AUTO_MIGRATION=false`), and until then the purger scans
    /// whole tables.
    #[must_use]
    pub fn auto_migration(mut self, yes: bool) -> Self {
        self.auto_migration = yes;
        self
    }

    /// The column family the tables live in (default: [`TABLES_COLUMN_FAMILY`]).
    #[must_use]
    pub fn column_family(mut self, name: impl Into<String>) -> Self {
        self.column_family = name.into();
        self
    }

    /// The options the column family is created with when it does not exist yet (default:
    /// `CfOptions::default()`): its tombstone grace is how long a purged row's tombstones
    /// stay for replicas and backups to see.
    #[must_use]
    pub fn cf_options(mut self, options: CfOptions) -> Self {
        self.cf_options = options;
        self
    }
}

/// Relational tables stored in the engine. Cheap to clone: clones share one catalog.
///
/// ```
/// use std::sync::Arc;
/// use cairn_purger::{ColumnType, Row, Schema, Tables, Value};
/// # fn main() -> cairn_purger::Result<()> {
/// # let dir = tempfile::tempdir().map_err(cairn_fs::Error::from).map_err(cairn::Error::from)?;
/// let db = Arc::new(cairn::Db::open(dir.path(), cairn::Options::default())?);
/// let tables = Tables::open(db)?;
/// tables.create_table(
///     Schema::new("users").column("name", ColumnType::Text).unique("uk_name", &["name"]).soft_delete(),
/// )?;
/// let users = tables.table("users")?;
/// let id = users.insert(Row::new().set("name", "ada"))?;
/// users.soft_delete(id)?;
/// assert!(users.get(id)?.is_none()); // scoped reads hide it
/// assert!(users.unscoped().get(id)?.is_some());
/// assert!(users.insert(Row::new().set("name", "ada")).is_err()); // it still holds its key
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Tables {
    pub(crate) inner: Arc<TablesInner>,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tables")
            .field("column_family", &self.inner.cf.name())
            .finish_non_exhaustive()
    }
}

pub(crate) struct TablesInner {
    pub(crate) db: Arc<Db>,
    pub(crate) cf: ColumnFamily,
    catalog: RwLock<Catalog>,
    ids: Mutex<HashMap<u32, IdRange>>,
}

/// The catalog as loaded in memory.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    pub(crate) tables: BTreeMap<String, Arc<TableDef>>,
    /// Applied migrations: version → when (ms).
    pub(crate) migrations: BTreeMap<u64, u64>,
    pub(crate) next_table_id: u32,
}

impl Catalog {
    pub(crate) fn def(&self, name: &str) -> Result<&Arc<TableDef>> {
        self.tables
            .get(name)
            .ok_or_else(|| Error::NoSuchTable(name.to_owned()))
    }
}

/// The catalogs open in this process: (database address, column family, catalog).
type OpenCatalogs = Vec<(usize, String, std::sync::Weak<TablesInner>)>;
static OPEN: Mutex<OpenCatalogs> = Mutex::new(Vec::new());

/// Ids handed out from `next` up to (not including) `limit`, which is durable in the catalog.
#[derive(Debug, Clone, Copy)]
struct IdRange {
    next: u64,
    limit: u64,
}

impl Tables {
    /// Opens the tables of `db` with the default options, creating the column family on
    /// first use and applying pending migrations.
    ///
    /// # Errors
    /// `Corruption` if a catalog entry cannot be decoded; engine errors as they come.
    pub fn open(db: Arc<Db>) -> Result<Self> {
        Self::open_with(db, &TablesOptions::default())
    }

    /// Opens the tables of `db` with `options`.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(db: Arc<Db>, options: &TablesOptions) -> Result<Self> {
        // Two catalogs over one column family would each hand out the same table and row ids
        // and miss each other's schema changes: one `Tables` per family, shared by cloning.
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|(_, _, tables)| tables.strong_count() > 0);
        let db_addr = Arc::as_ptr(&db) as usize;
        if open
            .iter()
            .any(|(addr, cf, _)| *addr == db_addr && *cf == options.column_family)
        {
            return Err(Error::invalid(format!(
                "the tables in column family {:?} of this database are open already; clone that \
                 Tables handle instead of opening them twice",
                options.column_family
            )));
        }
        let cf = match db.column_family(&options.column_family) {
            Ok(cf) => cf,
            Err(cairn::Error::ColumnFamilyNotFound(_)) => {
                db.create_column_family(&options.column_family, options.cf_options.clone())?
            }
            Err(e) => return Err(e.into()),
        };
        let catalog = load_catalog(&db, &cf)?;
        let tables = Self {
            inner: Arc::new(TablesInner {
                db,
                cf,
                catalog: RwLock::new(catalog),
                ids: Mutex::new(HashMap::new()),
            }),
        };
        // Registered before the migrations run, and without holding the registry through
        // them: a failed open drops `tables`, and its entry with it.
        open.push((
            db_addr,
            options.column_family.clone(),
            Arc::downgrade(&tables.inner),
        ));
        drop(open);
        tables.clear_unfinished_indexes()?;
        if options.auto_migration {
            tables.migrate()?;
        }
        Ok(tables)
    }

    /// Deletes index entries under index ids no table's definition has reached yet: what a
    /// back-fill interrupted by a crash left (its definition is stored only at the end). They
    /// hold column values that no purge would ever find.
    fn clear_unfinished_indexes(&self) -> Result<()> {
        let catalog = self.catalog();
        for def in catalog.tables.values() {
            let (start, end) = keys::unused_indexes(def.id, def.next_index_id);
            let snapshot = self.inner.db.snapshot();
            let mut leftovers =
                snapshot.range_cf(&self.inner.cf, start.as_slice()..end.as_slice())?;
            if leftovers.next().transpose()?.is_some() {
                tracing::warn!(table = %def.name, "clearing the entries of an unfinished index");
                match self.inner.cf.delete_range(&start, &end) {
                    Err(cairn::Error::ReadOnly) => {
                        tracing::warn!(table = %def.name, "read-only: the entries stay until a writer opens the tables");
                    }
                    other => other?,
                }
            }
        }
        Ok(())
    }

    /// The database the tables live in.
    pub fn db(&self) -> &Arc<Db> {
        &self.inner.db
    }

    /// The column family holding every table, index and catalog entry.
    pub fn column_family(&self) -> &ColumnFamily {
        &self.inner.cf
    }

    /// The names of every table, sorted.
    pub fn table_names(&self) -> Vec<String> {
        self.catalog().tables.keys().cloned().collect()
    }

    /// Appends a nullable column to `table`. Rows written before read it as NULL.
    ///
    /// # Errors
    /// `InvalidArgument` for a NOT NULL column (old rows would break it) or a name in use;
    /// `NoSuchTable`.
    pub fn add_column(&self, table: &str, column: Column) -> Result<()> {
        if !column.nullable {
            return Err(Error::invalid(format!(
                "column {:?}: an added column must be nullable; rows written before have none",
                column.name
            )));
        }
        let mut catalog = self.catalog_mut();
        let mut def = TableDef::clone(catalog.def(table)?);
        def.columns.push(column);
        def.resolve().map_err(Error::InvalidArgument)?;
        self.store_def(&mut catalog, def)
    }

    /// Adds an index to `table` and back-fills it from every row (soft-deleted ones too).
    /// Writes to the tables wait until it is done.
    ///
    /// # Errors
    /// `UniqueViolation` if a unique index meets two rows with one key (nothing is added);
    /// `InvalidArgument` for a bad index; `NoSuchTable`.
    pub fn add_index(&self, table: &str, index: Index) -> Result<()> {
        let mut catalog = self.catalog_mut();
        let mut def = TableDef::clone(catalog.def(table)?);
        add_index_def(&mut def, index)?;
        self.backfill_and_store(&mut catalog, &def)
    }

    /// Identifies this catalog in the process (every clone shares it).
    pub(crate) fn address(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    pub(crate) fn catalog(&self) -> RwLockReadGuard<'_, Catalog> {
        self.inner
            .catalog
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn catalog_mut(&self) -> RwLockWriteGuard<'_, Catalog> {
        self.inner
            .catalog
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn write_synced(&self, batch: WriteBatch) -> Result<()> {
        let options = WriteOptions { sync: true };
        self.inner.db.write_opt(batch, &options)?;
        Ok(())
    }

    fn store_def(&self, catalog: &mut Catalog, def: TableDef) -> Result<()> {
        let mut batch = WriteBatch::new();
        batch.put_cf(
            &self.inner.cf,
            keys::table_def(&def.name),
            encode_def(&def)?,
        );
        self.write_synced(batch)?;
        catalog.tables.insert(def.name.clone(), Arc::new(def));
        Ok(())
    }

    /// Writes the entries of `def`'s indexes that the stored definition lacks, then stores
    /// `def`. A crash part-way leaves entries under an index id the catalog does not name; the
    /// retry clears them first (index ids are only consumed once the definition is stored).
    pub(crate) fn backfill_and_store(&self, catalog: &mut Catalog, def: &TableDef) -> Result<()> {
        let old = catalog.def(&def.name)?;
        let added: Vec<IndexDef> = def
            .indexes
            .iter()
            .filter(|i| old.indexes.iter().all(|o| o.id != i.id))
            .cloned()
            .collect();
        let result = added
            .iter()
            .try_for_each(|index| self.backfill(def, index))
            .and_then(|()| self.store_def(catalog, def.clone()));
        if let Err(e) = result {
            // Entries written before the failure hold column values; leave none behind.
            for index in &added {
                if let Err(clear) = self.clear_index(def, index) {
                    tracing::warn!(error = %clear, "clearing a failed back-fill failed; the next open retries");
                }
            }
            return Err(e);
        }
        let names: Vec<&str> = added.iter().map(|i| i.index.name.as_str()).collect();
        tracing::info!(table = %def.name, indexes = ?names, "added indexes");
        Ok(())
    }

    fn backfill(&self, def: &TableDef, index: &IndexDef) -> Result<()> {
        let cf = &self.inner.cf;
        self.clear_index(def, index)?;
        let snapshot = self.inner.db.snapshot();
        let mut batch = WriteBatch::new();
        // Unique keys in `batch`, not yet visible to `get`.
        let mut pending = HashSet::new();
        for entry in scan_prefix(&snapshot, cf, &keys::row_prefix(def.id))? {
            let (key, bytes) = entry?;
            let values = def.decode_row(&key, &bytes)?;
            let id = keys::trailing_id(&key)?;
            let Some((ikey, ivalue)) = keys::index_entry(def.id, index, &values, id) else {
                continue;
            };
            if index.index.unique && (pending.contains(&ikey) || cf.get(&ikey)?.is_some()) {
                return Err(Error::UniqueViolation {
                    table: def.name.clone(),
                    index: index.index.name.clone(),
                });
            }
            batch.put_cf(cf, &ikey, ivalue);
            if index.index.unique {
                pending.insert(ikey);
            }
            if batch.len() >= BACKFILL_BATCH {
                self.inner.db.write(std::mem::take(&mut batch))?;
                pending.clear();
            }
        }
        if !batch.is_empty() {
            self.inner.db.write(batch)?;
        }
        Ok(())
    }

    fn clear_index(&self, def: &TableDef, index: &IndexDef) -> Result<()> {
        let prefix = keys::index_prefix(def.id, index.id);
        if let Some(end) = keys::prefix_end(&prefix) {
            self.inner.cf.delete_range(&prefix, &end)?;
        }
        Ok(())
    }

    /// The next row id of table `table`. Reserves a block in the catalog when one runs out;
    /// the reservation is written before any row using its ids, so after a crash the
    /// reservation read back covers every id a recovered row holds.
    pub(crate) fn allocate_id(&self, table: u32) -> Result<u64> {
        let mut ids = self
            .inner
            .ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let range = match ids.entry(table) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                let next = self.first_free_id(table)?;
                entry.insert(IdRange { next, limit: next })
            }
        };
        if range.next >= range.limit {
            let limit = range
                .next
                .checked_add(ID_BLOCK)
                .ok_or_else(|| Error::invalid("out of row ids"))?;
            self.inner
                .cf
                .put(keys::id_reservation(table), limit.to_be_bytes())?;
            range.limit = limit;
        }
        let id = range.next;
        range.next += 1;
        Ok(id)
    }

    /// The first id not reserved before: past the stored reservation and past the last row
    /// (the second guards a reservation lost to a log-recovery mode that skips records).
    fn first_free_id(&self, table: u32) -> Result<u64> {
        let key = keys::id_reservation(table);
        let reserved = match self.inner.cf.get(&key)? {
            Some(v) => keys::id_value(&key, &v)?,
            None => 1,
        };
        let last = match self.inner.cf.prefix(keys::row_prefix(table))?.next_back() {
            Some(entry) => keys::trailing_id(&entry?.0)?.saturating_add(1),
            None => 1,
        };
        Ok(reserved.max(last).max(1))
    }
}

/// Gives `index` the next index id of `def` and resolves its columns.
pub(crate) fn add_index_def(def: &mut TableDef, index: Index) -> Result<()> {
    let id = def.next_index_id;
    def.next_index_id = id
        .checked_add(1)
        .ok_or_else(|| Error::invalid(format!("table {:?}: out of index ids", def.name)))?;
    def.indexes.push(IndexDef {
        id,
        index,
        positions: Vec::new(),
    });
    def.resolve().map_err(Error::InvalidArgument)
}

pub(crate) fn encode_def(def: &TableDef) -> Result<Vec<u8>> {
    serde_json::to_vec(def).map_err(|e| Error::invalid(format!("table {:?}: {e}", def.name)))
}

fn load_catalog(db: &Db, cf: &ColumnFamily) -> Result<Catalog> {
    let snapshot = db.snapshot();
    let mut catalog = Catalog {
        next_table_id: 1,
        ..Catalog::default()
    };
    for entry in scan_prefix(&snapshot, cf, keys::TABLE_DEFS)? {
        let (key, bytes) = entry?;
        let mut def: TableDef = serde_json::from_slice(&bytes)
            .map_err(|e| Error::corruption(&key, format!("table definition: {e}")))?;
        def.resolve()
            .map_err(|e| Error::corruption(&key, format!("table definition: {e}")))?;
        catalog.tables.insert(def.name.clone(), Arc::new(def));
    }
    for entry in scan_prefix(&snapshot, cf, keys::MIGRATIONS)? {
        let (key, bytes) = entry?;
        let version = keys::trailing_id(&key)?;
        let at = keys::id_value(&key, &bytes)?;
        catalog.migrations.insert(version, at);
    }
    if let Some(bytes) = snapshot.get_cf(cf, keys::NEXT_TABLE_ID)? {
        let next = <[u8; 4]>::try_from(&bytes[..])
            .map_err(|_| Error::corruption(keys::NEXT_TABLE_ID, "next table id is not 4 bytes"))?;
        catalog.next_table_id = u32::from_be_bytes(next);
    }
    Ok(catalog)
}

pub(crate) fn scan_prefix(
    snapshot: &cairn::Snapshot,
    cf: &ColumnFamily,
    prefix: &[u8],
) -> Result<cairn::DbIterator> {
    Ok(match keys::prefix_end(prefix) {
        Some(end) => snapshot.range_cf(cf, prefix..end.as_slice())?,
        None => snapshot.range_cf(cf, prefix..)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::Row;
    use crate::schema::Schema;
    use crate::value::ColumnType;

    #[test]
    fn an_unfinished_index_is_cleared_at_open() {
        let dir = tempfile::tempdir().expect("temp dir");
        let open = || {
            let db = Db::open(dir.path(), cairn::Options::default()).expect("open");
            Tables::open(Arc::new(db)).expect("tables")
        };
        let tables = open();
        let schema = |name: &str| {
            Schema::new(name)
                .column("name", ColumnType::Text)
                .index(format!("idx_{name}"), &["name"])
        };
        for name in ["t", "u"] {
            let table = tables.create_table(schema(name)).expect("create");
            for i in 0..20 {
                table
                    .insert(Row::new().set("name", format!("{name}{i}")))
                    .expect("insert");
            }
        }
        let def = Arc::clone(tables.catalog().def("t").expect("def"));
        // What a crash part-way through a back-fill leaves: entries under the next index id.
        let orphan = [
            &keys::index_prefix(def.id, def.next_index_id)[..],
            b"secret",
        ]
        .concat();
        tables.column_family().put(&orphan, b"").expect("put");
        assert!(
            tables.table("t").expect("t").check().is_err(),
            "check sees the leftover"
        );
        let db = Arc::clone(tables.db());
        drop(tables);
        let Ok(db) = Arc::try_unwrap(db) else {
            panic!("another handle holds the database");
        };
        db.close().expect("close");
        let tables = open();
        assert_eq!(tables.column_family().get(&orphan).expect("get"), None);
        for name in ["t", "u"] {
            let table = tables.table(name).expect("table");
            assert_eq!(table.check().expect("the live indexes are intact"), 20);
        }
    }
}
