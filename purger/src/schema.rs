//! Table schemas: what a caller declares ([`Schema`]) and what the catalog stores
//! ([`TableDef`]: the schema with the table's id, its indexes' ids and the row format).
//!
//! Every table has an implicit `id` primary key (u64, auto-increment). `soft_delete()` adds a
//! nullable `deleted_at` timestamp column. Columns are only ever appended, so a row written
//! before a column was added decodes with NULL there: that is what the row format's column
//! count is for.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::row::{DELETED_AT, Row};
use crate::value::{ColumnType, Value, decode_stored, encode_stored};

/// The longest table, column or index name.
const MAX_NAME_LEN: usize = 128;

/// The most columns a table may have (a row stores its column count in 16 bits).
const MAX_COLUMNS: usize = 4096;

/// The version byte that starts every stored row.
const ROW_FORMAT: u8 = 1;

/// A column of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// The column's name.
    pub name: String,
    /// Its type.
    pub ty: ColumnType,
    /// Whether it may hold NULL.
    pub nullable: bool,
}

/// An index of a table, unique or not, over one or more columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Index {
    /// The index's name.
    pub name: String,
    /// The columns it is built from, in key order.
    pub columns: Vec<String>,
    /// Whether two rows may share a key. Keys holding a NULL are not indexed by a unique
    /// index (SQL semantics: NULLs never collide).
    pub unique: bool,
}

/// A table as a caller declares it: a consuming builder.
///
/// ```
/// use cairn_purger::{ColumnType, Schema};
/// let schema = Schema::new("t_cube_sandbox_spec")
///     .column("name", ColumnType::Text)
///     .nullable("note", ColumnType::Text)
///     .unique("uk_name", &["name"])
///     .index("idx_note", &["note"])
///     .soft_delete();
/// assert_eq!(schema.name(), "t_cube_sandbox_spec");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    name: String,
    columns: Vec<Column>,
    indexes: Vec<Index>,
    soft_delete: bool,
}

impl Schema {
    /// A table named `name` with no columns yet.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            columns: Vec::new(),
            indexes: Vec::new(),
            soft_delete: false,
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Adds a NOT NULL column.
    #[must_use]
    pub fn column(mut self, name: impl Into<String>, ty: ColumnType) -> Self {
        self.columns.push(Column {
            name: name.into(),
            ty,
            nullable: false,
        });
        self
    }

    /// Adds a nullable column.
    #[must_use]
    pub fn nullable(mut self, name: impl Into<String>, ty: ColumnType) -> Self {
        self.columns.push(Column {
            name: name.into(),
            ty,
            nullable: true,
        });
        self
    }

    /// Adds a unique index over `columns`.
    #[must_use]
    pub fn unique(self, name: impl Into<String>, columns: &[&str]) -> Self {
        self.with_index(name.into(), columns, true)
    }

    /// Adds a secondary (non-unique) index over `columns`.
    #[must_use]
    pub fn index(self, name: impl Into<String>, columns: &[&str]) -> Self {
        self.with_index(name.into(), columns, false)
    }

    fn with_index(mut self, name: String, columns: &[&str], unique: bool) -> Self {
        self.indexes.push(Index {
            name,
            columns: columns.iter().map(|&c| c.to_owned()).collect(),
            unique,
        });
        self
    }

    /// Makes the table soft-deleting: adds a nullable `deleted_at` timestamp column that
    /// [`Table::soft_delete`](crate::Table::soft_delete) sets and scoped reads filter on.
    #[must_use]
    pub fn soft_delete(mut self) -> Self {
        self.soft_delete = true;
        self
    }
}

/// An index as the catalog stores it: with its id in the engine key space and its columns'
/// positions in the row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IndexDef {
    pub(crate) id: u16,
    #[serde(flatten)]
    pub(crate) index: Index,
    #[serde(skip)]
    pub(crate) positions: Vec<usize>,
}

/// A table as the catalog stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TableDef {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) columns: Vec<Column>,
    pub(crate) indexes: Vec<IndexDef>,
    pub(crate) soft_delete: bool,
    /// The id the next index added gets; ids are never reused, so a dropped or half-built
    /// index's leftover entries can never be read as another index's.
    pub(crate) next_index_id: u16,
}

impl TableDef {
    /// Checks `schema` and gives it the table id `id`.
    pub(crate) fn from_schema(id: u32, schema: Schema) -> Result<Self> {
        let Schema {
            name,
            mut columns,
            indexes,
            soft_delete,
        } = schema;
        if soft_delete {
            if columns.iter().any(|c| c.name == DELETED_AT) {
                return Err(Error::invalid(format!(
                    "table {name:?}: {DELETED_AT} is added by soft_delete(); do not declare it"
                )));
            }
            columns.push(Column {
                name: DELETED_AT.to_owned(),
                ty: ColumnType::Timestamp,
                nullable: true,
            });
        }
        let indexes = (0u16..)
            .zip(indexes)
            .map(|(id, index)| IndexDef {
                id,
                index,
                positions: Vec::new(),
            })
            .collect::<Vec<_>>();
        let next_index_id = u16::try_from(indexes.len())
            .map_err(|_| Error::invalid(format!("table {name:?}: too many indexes")))?;
        let mut def = Self {
            id,
            name,
            columns,
            indexes,
            soft_delete,
            next_index_id,
        };
        def.resolve().map_err(Error::InvalidArgument)?;
        Ok(def)
    }

    /// Checks the names and fills in each index's column positions. Used on a new schema and
    /// on one read back from the catalog (where a failure is corruption).
    pub(crate) fn resolve(&mut self) -> std::result::Result<(), String> {
        check_name("table", &self.name)?;
        let table = &self.name;
        if self.columns.len() > MAX_COLUMNS {
            return Err(format!("table {table:?}: more than {MAX_COLUMNS} columns"));
        }
        for (i, column) in self.columns.iter().enumerate() {
            check_name("column", &column.name)?;
            if column.name == "id" {
                return Err(format!("table {table:?}: `id` is the implicit primary key"));
            }
            if self
                .columns
                .iter()
                .skip(i + 1)
                .any(|c| c.name == column.name)
            {
                return Err(format!("table {table:?}: column {:?} twice", column.name));
            }
        }
        for (i, index) in self.indexes.iter().enumerate() {
            check_name("index", &index.index.name)?;
            if self
                .indexes
                .iter()
                .skip(i + 1)
                .any(|x| x.index.name == index.index.name)
            {
                return Err(format!(
                    "table {table:?}: index {:?} twice",
                    index.index.name
                ));
            }
        }
        let positions = self
            .indexes
            .iter()
            .map(|index| self.index_positions(&index.index))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for (index, positions) in self.indexes.iter_mut().zip(positions) {
            index.positions = positions;
        }
        Ok(())
    }

    fn index_positions(&self, index: &Index) -> std::result::Result<Vec<usize>, String> {
        if index.columns.is_empty() {
            return Err(format!("index {:?} has no columns", index.name));
        }
        let mut positions = Vec::with_capacity(index.columns.len());
        for name in &index.columns {
            let position = self.position(name).ok_or_else(|| {
                format!(
                    "index {:?} names column {name:?}, which table {:?} does not have",
                    index.name, self.name
                )
            })?;
            if positions.contains(&position) {
                return Err(format!("index {:?} names {name:?} twice", index.name));
            }
            positions.push(position);
        }
        Ok(positions)
    }

    pub(crate) fn position(&self, column: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == column)
    }

    pub(crate) fn index(&self, name: &str) -> Result<&IndexDef> {
        self.indexes
            .iter()
            .find(|i| i.index.name == name)
            .ok_or_else(|| Error::invalid(format!("table {:?} has no index {name:?}", self.name)))
    }

    /// The first secondary index whose leading column is `deleted_at`: the one the purger's
    /// `deleted_at < cutoff` selection can range-scan.
    pub(crate) fn deleted_at_index(&self) -> Option<&IndexDef> {
        let position = self.position(DELETED_AT)?;
        // Not a unique one: its entries do not end in the row id.
        self.indexes
            .iter()
            .find(|i| !i.index.unique && i.positions.first() == Some(&position))
    }

    /// Where `deleted_at` sits in a row, if the table soft-deletes.
    pub(crate) fn deleted_at_position(&self) -> Option<usize> {
        if self.soft_delete {
            self.position(DELETED_AT)
        } else {
            None
        }
    }

    /// The row's `deleted_at`, if the table soft-deletes and it is set.
    pub(crate) fn deleted_at(&self, values: &[Value]) -> Option<u64> {
        self.deleted_at_position()
            .and_then(|p| values.get(p))
            .and_then(Value::as_timestamp)
    }

    /// `values` with the columns `row` sets replaced; every type and NOT NULL checked.
    pub(crate) fn merge(&self, values: Vec<Value>, row: &Row) -> Result<Vec<Value>> {
        let values = self.assign(values, row)?;
        self.check(&values)?;
        Ok(values)
    }

    /// `values` with the columns `row` sets replaced, unchecked (a lookup key, not a row).
    pub(crate) fn assign(&self, mut values: Vec<Value>, row: &Row) -> Result<Vec<Value>> {
        for (name, value) in row.values() {
            let position = self.position(name).ok_or_else(|| {
                Error::invalid(format!("table {:?} has no column {name:?}", self.name))
            })?;
            let slot = values
                .get_mut(position)
                .ok_or_else(|| Error::invalid("row shorter than its schema"))?;
            *slot = value.clone();
        }
        Ok(values)
    }

    /// A new row's values: `row`'s, NULL elsewhere.
    pub(crate) fn new_values(&self, row: &Row) -> Result<Vec<Value>> {
        self.merge(vec![Value::Null; self.columns.len()], row)
    }

    fn check(&self, values: &[Value]) -> Result<()> {
        for (column, value) in self.columns.iter().zip(values) {
            match value.column_type() {
                None if !column.nullable => {
                    return Err(Error::invalid(format!(
                        "column {:?} of table {:?} is NOT NULL",
                        column.name, self.name
                    )));
                }
                Some(ty) if ty != column.ty => {
                    return Err(Error::invalid(format!(
                        "column {:?} of table {:?} is {:?}, not {ty:?}",
                        column.name, self.name, column.ty
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A row read back: `id` and `values` named by this table's columns.
    pub(crate) fn row(&self, id: u64, values: Vec<Value>) -> Row {
        Row::stored(id, self.columns.iter().map(|c| c.name.clone()).zip(values))
    }

    /// The stored form of a row: the format byte, the column count (u16 LE), then each value.
    pub(crate) fn encode_row(values: &[Value]) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + values.len() * 12);
        out.push(ROW_FORMAT);
        let count = u16::try_from(values.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&count.to_le_bytes());
        for value in values {
            encode_stored(value, &mut out);
        }
        out
    }

    /// Decodes a stored row. Columns added after it was written read as NULL.
    ///
    /// # Errors
    /// `Corruption` naming `key` if the bytes are not a row of this table.
    pub(crate) fn decode_row(&self, key: &[u8], bytes: &[u8]) -> Result<Vec<Value>> {
        let corrupt = |reason: String| Error::corruption(key, reason);
        let (&format, mut input) = bytes
            .split_first()
            .ok_or_else(|| corrupt("empty row".into()))?;
        if format != ROW_FORMAT {
            return Err(corrupt(format!("unknown row format {format}")));
        }
        let (count, rest) = input
            .split_first_chunk::<2>()
            .ok_or_else(|| corrupt("truncated column count".into()))?;
        input = rest;
        let count = usize::from(u16::from_le_bytes(*count));
        if count > self.columns.len() {
            return Err(corrupt(format!(
                "{count} columns, but table {:?} has {}",
                self.name,
                self.columns.len()
            )));
        }
        let mut values = Vec::with_capacity(self.columns.len());
        for _ in 0..count {
            values.push(decode_stored(&mut input).map_err(&corrupt)?);
        }
        if !input.is_empty() {
            return Err(corrupt(format!(
                "{} bytes after the last column",
                input.len()
            )));
        }
        values.resize(self.columns.len(), Value::Null);
        Ok(values)
    }
}

fn check_name(what: &str, name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!(
            "{what} name {name:?} must be 1 to {MAX_NAME_LEN} bytes"
        ));
    }
    Ok(())
}
