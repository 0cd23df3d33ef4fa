//! One table's rows: insert, read, update, soft delete, upsert, hard delete.
//!
//! Every write is one engine transaction holding the row and all its index entries, and its
//! unique checks are transaction reads: two writers racing for one unique key, or a writer
//! racing a purge for one row, conflict at commit, and the loser retries against what the
//! winner wrote. A row's index entries are only ever changed together with the row, so
//! reading the row is what protects them.

use std::sync::Arc;

use cairn::{DbIterator, Transaction, WriteBatch};

use crate::error::{Error, Result};
use crate::keys;
use crate::migration;
use crate::row::Row;
use crate::schema::{Schema, TableDef};
use crate::tables::{Tables, encode_def, scan_prefix};
use crate::value::Value;

/// How many times a write is retried after a transaction conflict before the conflict is
/// returned to the caller.
const MAX_ATTEMPTS: usize = 16;

impl Tables {
    /// Creates a table. A purge target created after migration `20260731120000` was applied
    /// gets its `deleted_at` index at once, as if it had existed when the migration ran.
    ///
    /// # Errors
    /// `TableExists`; `InvalidArgument` for a bad schema (a duplicate or unknown column, an
    /// empty index, a column named `id`).
    pub fn create_table(&self, schema: Schema) -> Result<Table> {
        let mut catalog = self.catalog_mut();
        if catalog.tables.contains_key(schema.name()) {
            return Err(Error::TableExists(schema.name().to_owned()));
        }
        let id = catalog.next_table_id;
        let mut def = TableDef::from_schema(id, schema)?;
        if catalog
            .migrations
            .contains_key(&migration::DELETED_AT_INDEX)
        {
            migration::declare_deleted_at_index(&mut def)?;
        }
        let next = id
            .checked_add(1)
            .ok_or_else(|| Error::invalid("out of table ids"))?;
        let mut batch = WriteBatch::new();
        batch.put_cf(
            &self.inner.cf,
            keys::table_def(&def.name),
            encode_def(&def)?,
        );
        batch.put_cf(&self.inner.cf, keys::NEXT_TABLE_ID, next.to_be_bytes());
        self.write_synced(batch)?;
        catalog.next_table_id = next;
        let name = def.name.clone();
        catalog.tables.insert(name.clone(), Arc::new(def));
        tracing::info!(table = %name, "created table");
        Ok(Table::new(self.clone(), &name))
    }

    /// A handle on the table `name`, with scoped reads (soft-deleted rows hidden).
    ///
    /// # Errors
    /// `NoSuchTable`.
    pub fn table(&self, name: &str) -> Result<Table> {
        self.catalog().def(name)?;
        Ok(Table::new(self.clone(), name))
    }
}

/// A handle on one table. Scoped (the default) hides soft-deleted rows, as GORM does;
/// [`unscoped`](Table::unscoped) sees them.
#[derive(Debug, Clone)]
pub struct Table {
    tables: Tables,
    name: Arc<str>,
    scoped: bool,
}

impl Table {
    pub(crate) fn new(tables: Tables, name: &str) -> Self {
        Self {
            tables,
            name: Arc::from(name),
            scoped: true,
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A handle on the same table that sees soft-deleted rows.
    #[must_use]
    pub fn unscoped(&self) -> Table {
        Table {
            scoped: false,
            ..self.clone()
        }
    }

    /// Inserts a row and returns its new id. Columns the row does not set are NULL; it may set
    /// `deleted_at` (a row inserted already soft-deleted).
    ///
    /// # Errors
    /// `UniqueViolation` naming the index if a row — soft-deleted or not — holds one of its
    /// unique keys; `InvalidArgument` for an unknown column, a wrong type or a missing NOT
    /// NULL value; `NoSuchTable` if the table is gone.
    #[allow(clippy::needless_pass_by_value)] // rows come from a builder: `insert(Row::new().set(..))`
    pub fn insert(&self, row: Row) -> Result<u64> {
        let mut id = None;
        self.write(|def, tx| {
            let values = def.new_values(&row)?;
            let id = match id {
                Some(id) => id,
                None => *id.insert(self.tables.allocate_id(def.id)?),
            };
            self.write_row(tx, def, id, None, &values)?;
            Ok(id)
        })
    }

    /// The row `id`; `None` if there is none (or, scoped, if it is soft-deleted).
    ///
    /// # Errors
    /// `Corruption` if the stored row cannot be decoded.
    pub fn get(&self, id: u64) -> Result<Option<Row>> {
        let (def, snapshot) = self.view()?;
        self.get_at(&def, &snapshot, id)
    }

    fn get_at(&self, def: &TableDef, snapshot: &cairn::Snapshot, id: u64) -> Result<Option<Row>> {
        let key = keys::row(def.id, id);
        let Some(bytes) = snapshot.get_cf(&self.tables.inner.cf, &key)? else {
            return Ok(None);
        };
        let values = def.decode_row(&key, &bytes)?;
        Ok(self.visible(def, &values).then(|| def.row(id, values)))
    }

    /// The row holding `values` (in the index's column order) in the unique index `index`.
    ///
    /// # Errors
    /// `InvalidArgument` if there is no such unique index, or the values do not match its
    /// columns in number or type.
    pub fn find_unique(&self, index: &str, values: &[Value]) -> Result<Option<Row>> {
        let (def, snapshot) = self.view()?;
        let index = def.index(index)?;
        if !index.index.unique || index.positions.len() != values.len() {
            return Err(Error::invalid(format!(
                "index {:?} of table {:?} is not a unique index of {} columns",
                index.index.name,
                def.name,
                values.len()
            )));
        }
        for (&position, value) in index.positions.iter().zip(values) {
            let column = def.columns.get(position);
            match (column, value.column_type()) {
                (_, None) => return Ok(None), // NULLs are not in a unique index
                (Some(c), Some(ty)) if c.ty == ty => {}
                _ => {
                    return Err(Error::invalid(format!(
                        "index {:?}: a {:?} value for column {:?}",
                        index.index.name,
                        value.column_type(),
                        column.map(|c| c.name.as_str())
                    )));
                }
            }
        }
        let key = keys::unique_lookup(def.id, index, values);
        match snapshot.get_cf(&self.tables.inner.cf, &key)? {
            Some(id) => self.get_at(&def, &snapshot, keys::id_value(&key, &id)?),
            None => Ok(None),
        }
    }

    /// Sets the columns `patch` sets on row `id`. Returns whether a row was updated (scoped,
    /// a soft-deleted row is not).
    ///
    /// # Errors
    /// As [`insert`](Self::insert).
    #[allow(clippy::needless_pass_by_value)] // rows come from a builder: `insert(Row::new().set(..))`
    pub fn update(&self, id: u64, patch: Row) -> Result<bool> {
        self.write(|def, tx| {
            let Some(old) = read_row(tx, &self.tables, def, id)? else {
                return Ok(false);
            };
            if !self.visible(def, &old) {
                return Ok(false);
            }
            let new = def.merge(old.clone(), &patch)?;
            self.write_row(tx, def, id, Some(&old), &new)?;
            Ok(true)
        })
    }

    /// Soft-deletes row `id`: sets `deleted_at` to the engine clock's now. The row keeps its
    /// unique keys. Returns whether a live row was soft-deleted.
    ///
    /// # Errors
    /// `InvalidArgument` if the table does not soft-delete.
    pub fn soft_delete(&self, id: u64) -> Result<bool> {
        self.write(|def, tx| {
            let position = def.deleted_at_position().ok_or_else(|| {
                Error::invalid(format!("table {:?} does not soft-delete", def.name))
            })?;
            let Some(old) = read_row(tx, &self.tables, def, id)? else {
                return Ok(false);
            };
            if def.deleted_at(&old).is_some() {
                return Ok(false);
            }
            let mut new = old.clone();
            if let Some(slot) = new.get_mut(position) {
                *slot = Value::Timestamp(self.tables.inner.db.now_ms());
            }
            self.write_row(tx, def, id, Some(&old), &new)?;
            Ok(true)
        })
    }

    /// Inserts `row`, or updates the row that holds one of its unique keys (the first unique
    /// index, in declaration order, for which `row` gives every column). A soft-deleted match
    /// is resurrected: its columns are updated and `deleted_at` cleared, unless `row` sets it.
    /// Returns the row's id.
    ///
    /// # Errors
    /// `InvalidArgument` if `row` gives no complete unique key; otherwise as
    /// [`insert`](Self::insert).
    #[allow(clippy::needless_pass_by_value)] // rows come from a builder: `insert(Row::new().set(..))`
    pub fn upsert(&self, row: Row) -> Result<u64> {
        let mut new_id = None;
        self.write(|def, tx| {
            let probe = def.assign(vec![Value::Null; def.columns.len()], &row)?;
            let mut complete = false;
            let mut matched = None;
            for index in def.indexes.iter().filter(|i| i.index.unique) {
                let Some((key, _)) = keys::index_entry(def.id, index, &probe, 0) else {
                    continue;
                };
                complete = true;
                if let Some(id) = tx.get_cf(&self.tables.inner.cf, &key)? {
                    matched = Some(keys::id_value(&key, &id)?);
                    break;
                }
            }
            if !complete {
                return Err(Error::invalid(format!(
                    "upsert into {:?} needs every column of one unique index",
                    def.name
                )));
            }
            let Some(id) = matched else {
                let values = def.new_values(&row)?;
                let id = match new_id {
                    Some(id) => id,
                    None => *new_id.insert(self.tables.allocate_id(def.id)?),
                };
                self.write_row(tx, def, id, None, &values)?;
                return Ok(id);
            };
            let old = read_row(tx, &self.tables, def, id)?.ok_or_else(|| {
                Error::corruption(
                    &keys::row(def.id, id),
                    "a unique index names this row, which does not exist",
                )
            })?;
            let mut new = def.assign(old.clone(), &row)?;
            if let Some(p) = def.deleted_at_position()
                && row.get(crate::row::DELETED_AT).is_none()
                && let Some(slot) = new.get_mut(p)
            {
                *slot = Value::Null;
            }
            let new = def.merge(new, &Row::new())?;
            self.write_row(tx, def, id, Some(&old), &new)?;
            Ok(id)
        })
    }

    /// Deletes row `id` and its index entries for good. Returns whether a row was deleted
    /// (scoped, a soft-deleted row is not: use [`unscoped`](Self::unscoped)).
    ///
    /// # Errors
    /// Engine errors; `Corruption` for an undecodable row.
    pub fn hard_delete(&self, id: u64) -> Result<bool> {
        self.write(|def, tx| {
            let Some(old) = read_row(tx, &self.tables, def, id)? else {
                return Ok(false);
            };
            if !self.visible(def, &old) {
                return Ok(false);
            }
            delete_row(tx, &self.tables, def, id, &old);
            Ok(true)
        })
    }

    /// The number of rows (scoped: live ones).
    ///
    /// # Errors
    /// As [`scan`](Self::scan).
    pub fn count(&self) -> Result<u64> {
        let mut n = 0;
        for row in self.scan()? {
            row?;
            n += 1;
        }
        Ok(n)
    }

    /// Every row in id order (scoped: live ones), read at one snapshot.
    ///
    /// # Errors
    /// `NoSuchTable`; engine errors; `Corruption` (also from the iterator) for an undecodable
    /// row.
    pub fn scan(&self) -> Result<Rows> {
        let (def, snapshot) = self.view()?;
        let iter = scan_prefix(&snapshot, &self.tables.inner.cf, &keys::row_prefix(def.id))?;
        Ok(Rows {
            iter,
            def,
            scoped: self.scoped,
        })
    }

    /// The engine keys row `id` occupies now, in [`Tables::column_family`]: its row key, then
    /// one per index entry. `None` if there is no such row (scoped: no live one). What to hand
    /// `ColumnFamily::audit_key` to prove a purged row's bytes are gone.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub fn engine_keys(&self, id: u64) -> Result<Option<Vec<Vec<u8>>>> {
        let (def, snapshot) = self.view()?;
        let key = keys::row(def.id, id);
        let Some(bytes) = snapshot.get_cf(&self.tables.inner.cf, &key)? else {
            return Ok(None);
        };
        let values = def.decode_row(&key, &bytes)?;
        if !self.visible(&def, &values) {
            return Ok(None);
        }
        let mut all = vec![key];
        all.extend(
            def.indexes
                .iter()
                .filter_map(|index| keys::index_entry(def.id, index, &values, id))
                .map(|(key, _)| key),
        );
        Ok(Some(all))
    }

    /// Checks that the rows and the index entries agree, at one snapshot: every row's entries
    /// exist and name it, and every entry names a row whose values give that entry (the
    /// `CHECK TABLE` of this layer). Returns the rows checked.
    ///
    /// # Errors
    /// `Corruption` naming the first row or entry that disagrees; engine errors.
    pub fn check(&self) -> Result<u64> {
        let (def, snapshot) = self.view()?;
        let cf = &self.tables.inner.cf;
        let mut rows = 0;
        for entry in scan_prefix(&snapshot, cf, &keys::row_prefix(def.id))? {
            let (key, bytes) = entry?;
            let (id, values) = (keys::trailing_id(&key)?, def.decode_row(&key, &bytes)?);
            for index in &def.indexes {
                let Some((ikey, ivalue)) = keys::index_entry(def.id, index, &values, id) else {
                    continue;
                };
                if snapshot.get_cf(cf, &ikey)?.as_deref() != Some(&ivalue[..]) {
                    return Err(Error::corruption(
                        &key,
                        format!("row {id} has no entry in index {:?}", index.index.name),
                    ));
                }
            }
            rows += 1;
        }
        for index in &def.indexes {
            for entry in scan_prefix(&snapshot, cf, &keys::index_prefix(def.id, index.id))? {
                let (ikey, ivalue) = entry?;
                let id = if index.index.unique {
                    keys::id_value(&ikey, &ivalue)?
                } else {
                    keys::trailing_id(&ikey)?
                };
                let row_key = keys::row(def.id, id);
                let values = match snapshot.get_cf(cf, &row_key)? {
                    Some(bytes) => def.decode_row(&row_key, &bytes)?,
                    None => {
                        return Err(Error::corruption(
                            &ikey,
                            format!("names row {id}, which does not exist"),
                        ));
                    }
                };
                let expected = keys::index_entry(def.id, index, &values, id).map(|(k, _)| k);
                if expected.as_deref() != Some(&ikey[..]) {
                    return Err(Error::corruption(
                        &ikey,
                        format!("row {id}'s values give another entry"),
                    ));
                }
            }
        }
        // Index ids are handed out in order and never dropped: nothing may lie past the last.
        let (unused, end) = keys::unused_indexes(def.id, def.next_index_id);
        let mut leftovers = snapshot.range_cf(cf, unused.as_slice()..end.as_slice())?;
        if let Some(entry) = leftovers.next().transpose()? {
            return Err(Error::corruption(
                &entry.0,
                "an entry of no index of the table",
            ));
        }
        Ok(rows)
    }

    /// The table's definition and a snapshot, taken together under the catalog's read lock:
    /// every row in the snapshot was written by this definition or an older one (a schema
    /// change cannot land between the two), so it decodes.
    fn view(&self) -> Result<(Arc<TableDef>, cairn::Snapshot)> {
        let catalog = self.tables.catalog();
        let def = Arc::clone(catalog.def(&self.name)?);
        Ok((def, self.tables.inner.db.snapshot()))
    }

    fn visible(&self, def: &TableDef, values: &[Value]) -> bool {
        !self.scoped || def.deleted_at(values).is_none()
    }

    /// Runs `body` in a transaction against the current definition and commits it, retrying
    /// on conflict. The catalog's read lock is held until the commit, so no schema change
    /// lands between reading the definition and writing by it.
    fn write<T>(
        &self,
        mut body: impl FnMut(&TableDef, &mut Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut attempt = 1;
        loop {
            if attempt > 1 {
                backoff(attempt);
            }
            let catalog = self.tables.catalog();
            let def = catalog.def(&self.name)?;
            let mut tx = self.tables.inner.db.transaction();
            let out = body(def, &mut tx)?;
            match tx.commit().map_err(Error::from) {
                Ok(_) => return Ok(out),
                Err(e) if e.is_conflict() && attempt < MAX_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes row `id` as `new`, moving each index entry that changed from `old`'s key to
    /// `new`'s, and checking the unique ones.
    fn write_row(
        &self,
        tx: &mut Transaction<'_>,
        def: &TableDef,
        id: u64,
        old: Option<&[Value]>,
        new: &[Value],
    ) -> Result<()> {
        let cf = &self.tables.inner.cf;
        for index in &def.indexes {
            let before = old.and_then(|old| keys::index_entry(def.id, index, old, id));
            let after = keys::index_entry(def.id, index, new, id);
            if before == after {
                continue;
            }
            if let Some((key, _)) = &before {
                tx.delete_cf(cf, key);
            }
            if let Some((key, value)) = after {
                if index.index.unique
                    && let Some(holder) = tx.get_cf(cf, &key)?
                    && keys::id_value(&key, &holder)? != id
                {
                    return Err(Error::UniqueViolation {
                        table: def.name.clone(),
                        index: index.index.name.clone(),
                    });
                }
                tx.put_cf(cf, key, value);
            }
        }
        tx.put_cf(cf, keys::row(def.id, id), TableDef::encode_row(new));
        Ok(())
    }
}

/// Waits before retry `attempt` (2 and up) of a transaction that lost a conflict:
/// exponentially longer (about 200 µs doubling to 12.8 ms), with half of it random so that
/// writers racing for one row stop meeting in lockstep. No lock may be held across it.
pub(crate) fn backoff(attempt: usize) {
    use std::hash::{BuildHasher, Hasher};
    let exponent = u32::try_from(attempt.min(8)).unwrap_or(8);
    let base: u64 = 50 << exponent;
    // A fresh `RandomState` is seeded afresh: a cheap random number without a crate.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let micros = base / 2 + random % (base / 2).max(1);
    std::thread::sleep(std::time::Duration::from_micros(micros));
}

/// Row `id` as the transaction sees it (the read is checked for conflicts at commit).
pub(crate) fn read_row(
    tx: &mut Transaction<'_>,
    tables: &Tables,
    def: &TableDef,
    id: u64,
) -> Result<Option<Vec<Value>>> {
    let key = keys::row(def.id, id);
    tx.get_cf(&tables.inner.cf, &key)?
        .map(|bytes| def.decode_row(&key, &bytes))
        .transpose()
}

/// Deletes row `id`, whose values are `values`, and every index entry they give.
pub(crate) fn delete_row(
    tx: &mut Transaction<'_>,
    tables: &Tables,
    def: &TableDef,
    id: u64,
    values: &[Value],
) {
    let cf = &tables.inner.cf;
    for index in &def.indexes {
        if let Some((key, _)) = keys::index_entry(def.id, index, values, id) {
            tx.delete_cf(cf, key);
        }
    }
    tx.delete_cf(cf, keys::row(def.id, id));
}

/// The rows of a table, from [`Table::scan`].
#[derive(Debug)]
pub struct Rows {
    iter: DbIterator,
    def: Arc<TableDef>,
    scoped: bool,
}

impl Iterator for Rows {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (key, bytes) = match self.iter.next()? {
                Ok(entry) => entry,
                Err(e) => return Some(Err(e.into())),
            };
            let decoded = self.def.decode_row(&key, &bytes).and_then(|values| {
                let id = keys::trailing_id(&key)?;
                Ok((id, values))
            });
            match decoded {
                Ok((_, values)) if self.scoped && self.def.deleted_at(&values).is_some() => {}
                Ok((id, values)) => return Some(Ok(self.def.row(id, values))),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
