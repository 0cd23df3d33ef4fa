//! A row: the values a caller sets, or a row read back with its id and every column.

use std::collections::BTreeMap;

use crate::value::Value;

/// The soft-delete column's name, as GORM names it.
pub const DELETED_AT: &str = "deleted_at";

/// A row of a table. Built with [`set`](Row::set) to insert, update or upsert; read back from a
/// table with its [`id`](Row::id) and every column (NULL ones as [`Value::Null`]).
///
/// ```
/// use cairn_purger::{Row, Value};
/// let row = Row::new().set("name", "a").set("note", None::<&str>);
/// assert_eq!(row.get("name"), Some(&Value::from("a")));
/// assert_eq!(row.get("note"), Some(&Value::Null));
/// assert_eq!(row.id(), 0); // not stored yet
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    id: u64,
    values: BTreeMap<String, Value>,
}

impl Row {
    /// An empty row.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `column` to `value`.
    #[must_use]
    pub fn set(mut self, column: impl Into<String>, value: impl Into<Value>) -> Self {
        self.values.insert(column.into(), value.into());
        self
    }

    /// The row's primary key; 0 for a row not read from a table (ids start at 1).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The value of `column`: `None` if the row has no such column (or a built row did not
    /// set it), `Some(&Value::Null)` for a NULL.
    pub fn get(&self, column: &str) -> Option<&Value> {
        self.values.get(column)
    }

    /// When the row was soft-deleted, in engine-clock milliseconds; `None` if it is live.
    pub fn deleted_at(&self) -> Option<u64> {
        self.get(DELETED_AT).and_then(Value::as_timestamp)
    }

    /// Every column set, by name.
    pub fn values(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// A row read back: its id and every column, by name.
    pub(crate) fn stored(id: u64, columns: impl IntoIterator<Item = (String, Value)>) -> Self {
        Self {
            id,
            values: columns.into_iter().collect(),
        }
    }
}
