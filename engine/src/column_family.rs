//! Column families: independent key spaces with their own options, sharing one log and one
//! sequence of writes. The database itself is the column family named `"default"`.

use std::sync::Arc;

/// The id of the default column family.
pub(crate) const DEFAULT_CF: u32 = 0;

/// A handle on a column family. Cheap to clone; it names the family by id, so a handle to a
/// dropped family fails with `ColumnFamilyNotFound` rather than reaching a new family of the
/// same name.
#[derive(Debug, Clone)]
pub struct ColumnFamily {
    pub(crate) db: Arc<crate::db::DbInner>,
    pub(crate) id: u32,
    pub(crate) name: Arc<str>,
}

impl ColumnFamily {
    /// The family's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}
