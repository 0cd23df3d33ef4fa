//! Versioned schema migrations. Each is idempotent (it checks before it changes anything) and
//! is recorded in the catalog once applied, so a reopened database does not run it again.

use crate::error::{Error, Result};
use crate::schema::{DELETED_AT, Index, TableDef};
use crate::tables::{Catalog, Tables, add_index_def};
use crate::targets;

/// Adds a leading `deleted_at` index to every purge target that lacks one, so the purger's
/// `deleted_at < cutoff` selection is a range scan instead of a full table scan.
pub const DELETED_AT_INDEX: u64 = 20_260_731_120_000;

/// Every migration, in the order they apply.
pub(crate) const ALL: &[u64] = &[DELETED_AT_INDEX];

pub(crate) fn apply(tables: &Tables, catalog: &mut Catalog, version: u64) -> Result<()> {
    match version {
        DELETED_AT_INDEX => add_deleted_at_indexes(tables, catalog),
        other => Err(Error::invalid(format!("unknown migration {other}"))),
    }
}

fn add_deleted_at_indexes(tables: &Tables, catalog: &mut Catalog) -> Result<()> {
    for name in targets::migration_targets() {
        let Ok(def) = catalog.def(&name) else {
            continue;
        };
        let mut def = TableDef::clone(def);
        if declare_deleted_at_index(&mut def)? {
            tables.backfill_and_store(catalog, def)?;
        }
    }
    Ok(())
}

/// Adds `idx_<table>_deleted_at` to `def` if it soft-deletes, is a purge target and has no
/// index led by `deleted_at`. Returns whether it added one (the caller back-fills it).
pub(crate) fn declare_deleted_at_index(def: &mut TableDef) -> Result<bool> {
    let is_target = targets::migration_targets().contains(&def.name);
    if !is_target || !def.soft_delete || def.deleted_at_index().is_some() {
        return Ok(false);
    }
    let index = Index {
        name: format!("idx_{}_{DELETED_AT}", def.name),
        columns: vec![DELETED_AT.to_owned()],
        unique: false,
    };
    add_index_def(def, index)?;
    Ok(true)
}
