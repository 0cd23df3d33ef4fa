//! Column families: independent key spaces with their own options, sharing one log and one
//! sequence of writes. The database itself is the column family named `"default"`.

use std::sync::Arc;

use crate::db::DbInner;
use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::options::CfOptions;
use crate::super_version::MemSet;
use crate::version_edit::VersionEdit;

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

impl crate::db::DbInner {
    /// Creates a column family (an exclusive entry of the write queue, so no write is in flight
    /// while the memtables gain it); returns its id.
    pub(crate) fn create_column_family(&self, name: &str, options: CfOptions) -> Result<u32> {
        if name.is_empty() {
            return Err(Error::invalid("a column family needs a name"));
        }
        let name = name.to_string();
        let id = self.run_exclusive(Box::new(move |db: &DbInner| {
            let id = std::cell::Cell::new(0);
            db.log_and_apply(
                |state| {
                    state.check_running()?;
                    if state.meta.cfs.values().any(|(n, _)| *n == name) {
                        return Err(Error::invalid(format!(
                            "column family {name:?} already exists"
                        )));
                    }
                    id.set(state.meta.next_cf_id);
                    Ok(Some(VersionEdit {
                        added_cfs: vec![(id.get(), name, options)],
                        next_cf_id: Some(id.get() + 1),
                        ..VersionEdit::default()
                    }))
                },
                |state| {
                    let mut tables = state.mem.tables.clone();
                    tables.insert(id.get(), Arc::new(Memtable::new()));
                    state.mem = Arc::new(MemSet {
                        log_number: state.mem.log_number,
                        tables,
                    });
                },
            )?;
            Ok(u64::from(id.get()))
        }))?;
        u32::try_from(id).map_err(|_| Error::invalid("column family id overflow"))
    }

    /// Drops column family `id` (an exclusive entry, as for creation); its tables go once no
    /// reader needs them.
    pub(crate) fn drop_column_family(&self, id: u32, name: &str) -> Result<()> {
        let name = name.to_string();
        self.run_exclusive(Box::new(move |db: &DbInner| {
            db.log_and_apply(
                |state| {
                    state.check_running()?;
                    if !state.meta.cfs.contains_key(&id) {
                        return Err(Error::ColumnFamilyNotFound(name));
                    }
                    Ok(Some(VersionEdit {
                        dropped_cfs: vec![id],
                        ..VersionEdit::default()
                    }))
                },
                |state| {
                    let mut tables = state.mem.tables.clone();
                    tables.remove(&id);
                    state.mem = Arc::new(MemSet {
                        log_number: state.mem.log_number,
                        tables,
                    });
                },
            )?;
            Ok(0)
        }))?;
        self.delete_obsolete_files();
        Ok(())
    }
}
